"""Long logs: the first ``get_tuple`` of a 1 000 000-checkpoint LangGraph thread vs a 1 000-checkpoint one.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_longlog.py --dir /tmp/longlog            # build once (cached), then 5 reps
    .venv/bin/python benchmarks/bench_longlog.py --dir /tmp/longlog --big 200000 --reps 3

Options: --dir (required): scratch directory; the two stores are built there once and reused by later runs
(a store is rebuilt only if its ``built`` marker is missing). --small (1000) / --big (1000000) checkpoints;
--batch (10) checkpoints per commit while building; --reps (5); --profile FILE: also record the big store's
first ``get_tuple`` with py-spy (raw format) into FILE.

What it builds: two stores, each holding ONE thread (so each store holds only that thread's run: the
comparison is of the thread's length, not of the store's other contents). Checkpoints are put through
``ObjstoreSaver.put`` with fsync off, ``--batch`` of them per ``log.batch()`` (the saver's puts join the
caller's batch: one commit each); every checkpoint has a distinct channel value (one small blob) and its
predecessor as parent. The build time and rate are printed (building is not what is measured). A small
batch keeps each entry's meta near a real graph step's (a batch of 1000 makes the entry a checkpoint names
a 1000-record meta, which every opener decodes). 1 000 000 took 240 s at 1000 per commit (load average 2)
and 51 min at 10 per commit (load average 18).

Both stores are read once before the reps (warm-up: page cache, bytecode, and the first reader's hashing
of the sealed indexes it uses, recorded in ``log/idx-verified`` with each index's chain fan-out; a checkpoint
written before the current layout, with ``zsum``, is read whole once and rewritten at the log's end); its
figures are printed apart.

What a fresh reader costs also depends on the log's tail past its last checkpoint: the entries after it are
replayed at every open (their rules and root checked), and a reader writes a checkpoint only after 200
entries or 128 KiB of replay (a writer every 1 000 entries or 4 MiB). The figures are those of the stores
as the warm-up leaves them; the summary prints the entries each store's readers replayed past the checkpoint.

What it measures, per rep (interleaved, order alternated): a fresh child process per store imports
everything (objstore, the saver, LangGraph), then times ``time.process_time()`` around opening the saver
and the first ``saver.get_tuple({"configurable": {"thread_id": T}})`` (the latest checkpoint; the open is
included since a fresh reader pays it before its first answer; the get_tuple part alone is printed too),
and reports its peak RSS (VmHWM) and the RSS its imports alone took. Before each rep, the fsync latency of
one 4 KiB write + fdatasync in --dir. Printed: per rep figures, min / median / max of the CPU ratio
big / small, both stores' peak RSS, the load average.

Target (issue 16, "Long logs"): CPU ratio <= 2x; peak RSS of the big store's reader <= 100 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gang import fsync_probe  # noqa: E402 - the benchmarks' one fsync probe

THREAD = "long"

CHILD = r"""
import json, os, sys, time
def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
import objstore, objstore.storage, objstore.runs
from objstore.integrations.langgraph import ObjstoreSaver
import langgraph.checkpoint.base, langgraph.checkpoint.serde.jsonplus
after_imports = hwm()
root, thread = sys.argv[1], sys.argv[2]
c0 = time.process_time()
saver = ObjstoreSaver(root)
c1 = time.process_time()
t = saver.get_tuple({"configurable": {"thread_id": thread}})
c2 = time.process_time()
eng = saver.log.store.logs.run_log(saver.log.find_run(thread_id=thread, checkpoint_ns=""))
print(json.dumps({"open": c1 - c0, "get": c2 - c1, "total": c2 - c0, "hwm": hwm(), "imports_hwm": after_imports,
                  "step": t.checkpoint["channel_values"]["step"], "replayed": eng.tables.pos.entry - eng._ckpt_at[0]}))
"""


def build(root: str, n: int, batch: int) -> dict:
    """One thread of ``n`` checkpoints in a fresh store at ``root`` (cached: a ``built`` marker)."""
    marker = os.path.join(root, "..", os.path.basename(root) + ".built")
    if os.path.exists(marker):
        with open(marker) as f:
            info: dict = json.load(f)
        if info.get("n") == n:
            return info
    shutil.rmtree(root, ignore_errors=True)
    os.environ["OBJSTORE_FSYNC"] = "off"
    from langgraph.checkpoint.base import empty_checkpoint

    from objstore.integrations.langgraph import ObjstoreSaver

    saver = ObjstoreSaver(root)
    parent = None
    t0 = time.perf_counter()
    i = 0
    while i < n:
        with saver.log.batch():
            for j in range(i, min(n, i + batch)):
                cp = empty_checkpoint()
                cp["channel_values"] = {"step": j}
                cp["channel_versions"] = {"step": j + 1}
                conf = {"thread_id": THREAD, "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
                cfg = saver.put({"configurable": conf}, cp, {"source": "loop", "step": j}, {"step": j + 1})
                parent = cfg["configurable"]["checkpoint_id"]
        i = min(n, i + batch)
        if i % 100_000 == 0:
            print(f"  ... {i:,} checkpoints, {time.perf_counter() - t0:.0f} s", flush=True)
    secs = time.perf_counter() - t0
    # every log's sealed indexes (one log, or the store log and the thread's run log on a store of a log per run)
    nseg = sum(1 for d, _s, fs in os.walk(root) if os.path.basename(d) == "log" for f in fs if f.endswith(".idx"))
    info = {"n": n, "batch": batch, "seconds": secs, "rate": n / secs, "sealed_indexes": nseg}
    with open(marker, "w") as f:
        json.dump(info, f)
    return info


def child(root: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, root, THREAD], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"child on {root} failed:\n{out.stderr}")
    res: dict = json.loads(out.stdout.strip().splitlines()[-1])
    if res["step"] != n - 1:
        sys.exit(f"child on {root} read step {res['step']}, expected {n - 1}")
    return res


def mmm(xs: list[float]) -> str:
    return f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", default=None)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    stores = {}
    for name, n in (("small", a.small), ("big", a.big)):
        root = os.path.join(a.dir, f"{name}-{n}")
        print(f"store {name}: {n:,} checkpoints at {root}", flush=True)
        info = build(root, n, a.batch)
        print(f"  built in {info['seconds']:.1f} s ({info['rate']:,.0f} checkpoints/s, fsync off, {info.get('batch', '?')} per commit); "
              f"{info['sealed_indexes']} sealed segment indexes", flush=True)
        stores[name] = (root, n)
    for name in ("small", "big"):  # warm-up: page cache, bytecode cache, the index hint (idxtrust)
        w = child(*stores[name])
        print(f"  warm-up reader of {name}: CPU {w['total'] * 1000:.1f} ms (get_tuple {w['get'] * 1000:.1f}), "
              f"peak RSS {w['hwm'] / 2**20:.1f} MiB", flush=True)
    per: dict[str, list[dict]] = {"small": [], "big": []}
    ratios = []
    for r in range(a.reps):
        lat = fsync_probe(a.dir)
        order = ("small", "big") if r % 2 == 0 else ("big", "small")
        for name in order:
            per[name].append(child(*stores[name]))
        s, b = per["small"][-1], per["big"][-1]
        ratios.append(b["total"] / s["total"])
        print(f"rep {r + 1}: fsync {lat * 1000:.2f} ms; CPU small {s['total'] * 1000:.1f} ms (get_tuple {s['get'] * 1000:.1f}), "
              f"big {b['total'] * 1000:.1f} ms (get_tuple {b['get'] * 1000:.1f}); ratio {ratios[-1]:.2f}x; "
              f"peak RSS small {s['hwm'] / 2**20:.1f} MiB, big {b['hwm'] / 2**20:.1f} MiB "
              f"(imports alone {b['imports_hwm'] / 2**20:.1f} MiB)", flush=True)
    print(f"\nCPU ratio big/small (open + first get_tuple, after imports), min / median / max: {mmm(ratios)}  (target <= 2)")
    for name in ("small", "big"):
        xs = per[name]
        print(f"  {name:<5} entries replayed past the checkpoint at open: {sorted({x.get('replayed') for x in xs}, key=str)}")
        print(f"  {name:<5} ({stores[name][1]:>9,} checkpoints): CPU ms {mmm([x['total'] * 1000 for x in xs])}; "
              f"get_tuple alone {mmm([x['get'] * 1000 for x in xs])}; peak RSS MiB {mmm([x['hwm'] / 2**20 for x in xs])} "
              f"(imports alone {statistics.median([x['imports_hwm'] for x in xs]) / 2**20:.1f})")
    print(f"load average {os.getloadavg()}")
    if a.profile:
        root, _ = stores["big"]
        subprocess.run(["py-spy", "record", "-r", "1000", "-o", a.profile, "-f", "raw", "--", sys.executable, "-c", CHILD, root, THREAD],
                       check=False)
        print(f"profile of the big store's reader: {a.profile}")


if __name__ == "__main__":
    main()
