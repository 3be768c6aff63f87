"""Issue 19: the CPU of a fresh process's first ``ObjstoreSaver.get_tuple`` of a long chat thread, before and after gc.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_langgraph_read.py                      # 200 turns, 7 reps
    .venv/bin/python benchmarks/bench_langgraph_read.py --reps 3 --turns 50  # smoke
    .venv/bin/python benchmarks/bench_langgraph_read.py --src /work/main/src # the children import another tree
    .venv/bin/python benchmarks/bench_langgraph_read.py --base /work/main/src  # and each store against another tree
    .venv/bin/python benchmarks/bench_langgraph_read.py --profile            # and one py-spy profile per store

The thread: tests/integrations/test_langgraph_growth.py's fixture — a chat whose ``messages`` channel holds the
whole list and grows one message (~360 bytes of text; turn 0 also a 50 KB base64 image) per turn — put --turns
checkpoints with ``objstore.integrations.langgraph.ObjstoreSaver`` (fsync off), in a scratch directory
(tempfile.mkdtemp(dir=$BENCH_DIR); --keep keeps it). The store is copied twice: ``before`` as written, ``after``
gc'd in place by ``objstore.lifecycle.gc.gc(store)`` (its sealed segments rewritten as packed segments: records in
~256 KB zstd blocks, small blobs in ~1 MB ones).

Each measurement is a fresh child process (this script with --child STORE): it imports objstore, the saver and
LangGraph, opens ``ObjstoreSaver(objstore.open_store(STORE, create=False))`` (not measured), then measures
``time.process_time()`` (user+sys, all threads) around the first
``saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})`` (the latest checkpoint). It prints
the CPU, the blocks read from segment files and the zstd decompressions during the call (a counting wrapper over
the engine's thread-local ZstdDecompressor), the objects decoded, the block cache's figures if the tree has one,
and a digest of the checkpoint's channel values (equal for both stores, or the benchmark fails).

Children read and write Python bytecode in one scratch cache (PYTHONPYCACHEPREFIX), filled by one unmeasured run
per tree and store, so both trees run compiled whether or not their checkout holds __pycache__.

--reps alternating reps: before, after, before, after, ... (the pair's order reversed on odd reps); the per-rep
ratio after/before, min/median/max, and the absolute ms of each side. Target (issue 19): median ratio <= 1.25
(measured by the issue on main: 15.2 ms before gc, 49.8 ms after, 3.3x). With --base SRC each rep also runs both
stores with children importing SRC (the four children of a rep interleaved, the order reversed on odd reps), and
prints the per-rep ratio this tree / SRC for each store (a change that helps one store must not cost the other).

Measured with the block cache (objstore.storage.log.blockcache; 2 shared cores, load 1.3-2.3), ``--base`` main:
after/before 0.65 / 0.88 / 1.38 (before 18.0 / 19.6 / 25.4 ms, after 15.1 / 17.3 / 25.5 ms; after gc 3 blocks read,
2 decompressions); main 3.04 / 3.66 / 5.30 (after gc 203 blocks read, 202 decompressions, 32 MB decompressed);
this tree / main on the store before gc 0.81 / 1.05 / 1.32.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gang import PY, fmt3, loadavg, pyspy_shares  # noqa: E402

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
THREAD = "chat"


# -- the fixture (test_langgraph_growth.py's, written here so the benchmark stands alone) ---------------------------
def _message(i):
    from langchain_core.messages import AIMessage, HumanMessage

    text = " ".join(hashlib.sha256(f"turn {i} word {j}".encode()).hexdigest()[:8] for j in range(40))
    if i == 0:
        import base64

        image = base64.b64encode(hashlib.shake_256(b"image").digest(37_500)).decode()
        return HumanMessage(content=[{"type": "text", "text": text},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}], id="m0")
    return (HumanMessage if i % 2 == 0 else AIMessage)(content=text, id=f"m{i}")


def build(root, turns):
    from langgraph.checkpoint.base import empty_checkpoint

    import objstore
    from objstore.integrations.langgraph import ObjstoreSaver

    saver = ObjstoreSaver(objstore.open_store(root, fsync="off"))
    parent, messages = None, []
    for i in range(turns):
        messages = messages + [_message(i)]
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": messages, "turn": i}
        cp["channel_versions"] = {"messages": i + 1, "turn": i + 1}
        conf = {"thread_id": THREAD, "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
        cfg = saver.put({"configurable": conf}, cp, {"source": "loop", "step": i}, {"messages": i + 1, "turn": i + 1})
        parent = cfg["configurable"]["checkpoint_id"]


def gc_store(root):
    import objstore
    from objstore.lifecycle import gc as G

    G.gc(objstore.open_store(root, create=False).store)


# -- the measuring child ---------------------------------------------------------------------------------------------
class _CountingDecompressor:
    """The engine's ZstdDecompressor with its decompress calls counted (the lowest layer a block goes through)."""

    def __init__(self, inner):
        self.inner, self.calls, self.raw_bytes = inner, 0, 0

    def decompress(self, data, *a, **kw):
        out = self.inner.decompress(data, *a, **kw)
        self.calls += 1
        self.raw_bytes += len(out)
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _measured(saver, cfg):
    """The measured call (its name marks its samples in a py-spy profile)."""
    return saver.get_tuple(cfg)


def child(root):
    import time

    import langgraph.checkpoint.base  # noqa: F401 - imports first: only the call is measured
    from langchain_core.messages import AIMessage  # noqa: F401

    import objstore
    from objstore.integrations.langgraph import ObjstoreSaver
    from objstore.storage import codec
    from objstore.storage.log import format as F

    try:
        from objstore.storage.log import blockcache
    except ImportError:  # a tree before the block cache
        blockcache = None
    saver = ObjstoreSaver(objstore.open_store(root, create=False))
    F._decompressor()  # this thread's decompressor exists: wrap it
    counter = F._zc.d = _CountingDecompressor(F._zc.d)
    cfg = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    b0, o0 = F.STATS["blocks_read"], codec.STATS["objects_decoded"]
    t0 = time.process_time()
    got = _measured(saver, cfg)
    cpu = time.process_time() - t0
    values = got.checkpoint["channel_values"]
    digest = hashlib.sha256(json.dumps([[m.content, m.id] for m in values["messages"]] + [values["turn"]],
                                       sort_keys=True).encode()).hexdigest()[:16]
    out = {"cpu_ms": cpu * 1e3, "blocks_read": F.STATS["blocks_read"] - b0, "decompressions": counter.calls,
           "decompressed_bytes": counter.raw_bytes, "objects_decoded": codec.STATS["objects_decoded"] - o0,
           "messages": len(values["messages"]), "digest": digest}
    if blockcache is not None:
        c = blockcache.SHARED
        out.update(cache_hits=c.hits, cache_misses=c.misses, cache_held=c.held, cache_blocks=len(c), cache_evicted=c.evicted)
    print(json.dumps(out))


# -- the driver ------------------------------------------------------------------------------------------------------
PYCACHE: list = []  # the scratch bytecode cache every child reads and writes (set by main)


def child_env(src):
    env = dict(os.environ)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("OBJSTORE_FSYNC", None)
    if PYCACHE:  # every tree compiled once into one scratch cache: no child compiles a module while it measures, and
        env["PYTHONPYCACHEPREFIX"] = PYCACHE[0]  # a tree without __pycache__ (a read-only checkout) is not the one that pays
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_child(src, root, wrap=()):
    res = subprocess.run([*wrap, PY, HERE, "--child", root], capture_output=True, text=True, env=child_env(src), check=False)
    if res.returncode != 0:
        raise SystemExit(f"child failed ({res.returncode}) on {root}:\n{res.stderr[-3000:]}")
    return json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1])


def profile(src, stores, scratch):
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    if not os.path.exists(pyspy):
        print("  (py-spy not found; no profile)")
        return
    for name, root in stores.items():
        raw = os.path.join(scratch, f"profile-{name}.txt")
        run_child(src, root, wrap=(pyspy, "record", "-r", "1000", "-f", "raw", "-o", raw, "--"))
        total, _, top, incl = pyspy_shares(raw, "_measured", [])
        print(f"\n(profile) {name}: {total} samples inside get_tuple (1000 Hz); raw stacks in {raw}")
        print("  top functions (inclusive):")
        for fn, share in incl[:14]:
            print(f"    {share:6.1%}  {fn}")
        print("  top leaf frames:")
        for fn, share in top:
            print(f"    {share:6.1%}  {fn}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", metavar="STORE")
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--src", default=os.path.join(REPO, "src"), help="the tree the children import (default: this one)")
    ap.add_argument("--base", help="another tree to run each store against (e.g. /work/main/src)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a.child)

    src = os.path.abspath(a.src)
    scratch = tempfile.mkdtemp(prefix="bench-lg-read-", dir=os.environ.get("BENCH_DIR"))
    PYCACHE.append(os.path.join(scratch, "pycache"))
    try:
        built = os.path.join(scratch, "built")
        # Built and gc'd by this tree's code (the stores are the same whichever tree the children read them with).
        subprocess.run([PY, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); import bench_langgraph_read as b; "
                        f"b.build({built!r}, {a.turns})"], env=child_env(os.path.join(REPO, "src")), check=True)
        stores = {"before": os.path.join(scratch, "before"), "after": os.path.join(scratch, "after")}
        shutil.copytree(built, stores["before"])
        shutil.copytree(built, stores["after"])
        subprocess.run([PY, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); import bench_langgraph_read as b; "
                        f"b.gc_store({stores['after']!r})"], env=child_env(os.path.join(REPO, "src")), check=True)
        for tree in {src, os.path.abspath(a.base) if a.base else src}:
            for name in stores:  # once each, unmeasured: a first opener may write the store's caches (a checkpoint)
                run_child(tree, stores[name])
        print(f"{a.turns}-turn chat thread; children import {src}; {loadavg()}")
        trees = {"": src} | ({"base ": os.path.abspath(a.base)} if a.base else {})
        runs = [(t, name) for t in trees for name in ("before", "after")]
        rows: dict[tuple, list] = {r: [] for r in runs}
        for rep in range(a.reps):
            order = runs if rep % 2 == 0 else runs[::-1]
            got = {r: run_child(trees[r[0]], stores[r[1]]) for r in order}
            if len({g["digest"] for g in got.values()}) != 1:
                raise SystemExit(f"the stores read back different checkpoints: {got}")
            for r in order:
                rows[r].append(got[r])
            print(f"  rep {rep}: " + ", ".join(f"{t}{name} {got[(t, name)]['cpu_ms']:6.1f} ms" for t, name in runs) + f"  ({loadavg()})", flush=True)
        print(f"\nget_tuple CPU, ms (min / median / max of {a.reps}):")
        for t, name in runs:
            print(f"  {t}{name:<7} {fmt3([r['cpu_ms'] for r in rows[(t, name)]], '{:.1f}')}")
        for t in trees:
            ratios = [x["cpu_ms"] / y["cpu_ms"] for x, y in zip(rows[(t, "after")], rows[(t, "before")], strict=True)]
            print(f"  {t}after/before per rep: {fmt3(ratios)}   (target: median <= 1.25)")
        if a.base:
            for name in ("before", "after"):
                ratios = [x["cpu_ms"] / y["cpu_ms"] for x, y in zip(rows[("", name)], rows[("base ", name)], strict=True)]
                print(f"  {name}: this tree / base per rep: {fmt3(ratios)}")
        for t, name in runs:
            r = rows[(t, name)][-1]
            extra = "".join(f", {k} {r[k]}" for k in ("cache_hits", "cache_misses", "cache_blocks", "cache_held", "cache_evicted") if k in r)
            print(f"  {t}{name:<7} {r['messages']} messages, {r['objects_decoded']} objects decoded, {r['blocks_read']} blocks read, "
                  f"{r['decompressions']} zstd decompressions ({r['decompressed_bytes']:,} bytes){extra}")
        if a.profile:
            profile(src, stores, scratch)
    finally:
        if a.keep:
            print(f"\nkept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
