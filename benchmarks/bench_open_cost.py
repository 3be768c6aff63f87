"""What a fresh reader pays to open a store and read one run, at 100 runs and at 100 000 (issue 16's second gate):
bytes read from store files, CPU after imports, peak RSS.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_open_cost.py --dir /work/bench-stores        # builds once, then measures
    .venv/bin/python benchmarks/bench_open_cost.py --dir D --big 20000             # a smaller big store
    .venv/bin/python benchmarks/bench_open_cost.py --dir D --show-arg '{run}:{id}' # once `show RUN:ID` exists
    .venv/bin/python benchmarks/bench_open_cost.py --dir D --big 2000 --reps 2     # smoke

Stores (built once under --dir, as ``runs-<N>/store`` with ``runs-<N>/meta.json``; reused when present, the build
time and the code that built them printed from meta.json; --rebuild after a format change): N runs, one commit per run, fsync off, each run ``start_run(labels={"user": "u<i>"})``
and one ``record_attempt`` in one ``Store.batch()`` (2 records); every 100th run (i = 50 mod 100) is instead a
LangGraph thread ``lg-<i>`` written through ``ObjstoreSaver`` (put checkpoint 1, put_writes of one task, put
checkpoint 2: three commits, the saver's own). The measured run is ``u<N/2 + 7>``, the measured thread the one
nearest the middle; the measured record (for show) is that run's attempt record.

Operations, each in a fresh child process (this script with --child) that first imports objstore, objstore_cli (its
command modules), LangGraph and the saver, then runs all four operations once on a separate 100-run warm-up store (--dir/warm)
(so lazily imported modules are loaded too), and only then measures ``time.process_time()`` (user+sys, all threads)
around the operation, which includes opening the store:

  log       ``objstore --store S log RUN -n 10`` run in-process: objstore_cli.main.cli.main([...],
            standalone_mode=False), stdout captured (not a separate CLI process, so no import-baseline subtraction);
  show      ``objstore --store S show ARG`` in-process the same way; ARG from --show-arg ('{id}': the record's hex id;
            '{run}:{id}' for the per-run format);
  find_run  ``objstore.open_store(S, create=False).find_run(user="u<i>")`` (RunLog.find_run(**labels));
  get_tuple ``ObjstoreSaver(objstore.open_store(S, create=False)).get_tuple({thread_id, checkpoint_ns: ""})``.

(i) bytes: once per operation and store (deterministic), the child runs under ``strace -f -e trace=read,pread64,
    readv,preadv,openat,open,close,dup,dup2,dup3``; fds are mapped to paths from the openat lines (close and dup
    followed); the returned byte counts of read/pread64/readv/preadv on fds whose path is under the store directory
    are summed. Files the child has mmapped under the store are listed by the child itself at the end (from
    /proc/self/smaps): file size, mapped bytes and resident bytes (mmap reads are page faults, not read calls).
(ii) CPU after imports: --reps (5) fresh children per operation and store, the two stores interleaved (order
    reversed on alternate reps); per-rep ratio big/small; min/median/max.
(iii) peak RSS: VmHWM of the CPU child (/proc/self/status) at the end; the child's VmHWM before the operation (imports
    + warm-up) printed beside it.
(profile) unless --no-profile: each operation once more at the big store under ``py-spy record -r 500 -f raw``; the
    top functions by inclusive share of the samples inside the measured call, and the top leaf frames.
Before measuring, each operation is run once per store unmeasured (a first opener may write the store's caches).

Targets (issue 16): big/small <= 1.5x for bytes read and for CPU, each operation; peak RSS <= 100 MB at 100 000 runs.
On main before the per-run format: 68x the bytes (0.6 -> 40.7 MB), 230-370x the CPU (to ~2.2 s), 357-390 MB peak.
"""

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gang import PY, fmt3, fsync_probe, loadavg, mmm, pyspy_shares  # noqa: E402

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
OPS = ("log", "show", "find_run", "get_tuple")
LG_EVERY = 100


# -- building ------------------------------------------------------------------------------------------------------
def lg_thread(saver, thread):
    """A LangGraph thread as a graph step writes it: checkpoint 1, its task's writes, checkpoint 2."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    c1 = empty_checkpoint()
    c1["channel_values"] = {"n": 1, "payload": f"{thread} step 1"}
    c1["channel_versions"] = {"n": 1, "payload": 1}
    got = saver.put(cfg, c1, {"source": "input", "step": -1}, c1["channel_versions"])
    saver.put_writes(got, [("n", 2), ("payload", f"{thread} step 2")], "task-1")
    c2 = create_checkpoint(c1, None, 0)
    c2["channel_values"] = {"n": 2, "payload": f"{thread} step 2"}
    c2["channel_versions"] = {"n": 2, "payload": 2}
    saver.put(got, c2, {"source": "loop", "step": 0}, c2["channel_versions"])


def build(root, n):
    """N runs (see the module docstring); returns meta: the measured run, record and thread, and the build time."""
    import objstore
    from objstore.integrations.langgraph import ObjstoreSaver

    log = objstore.open_store(root, fsync="off")
    saver = ObjstoreSaver(log)
    want_run, want_thread = n // 2 + 7, (n // 2 // LG_EVERY) * LG_EVERY + 50
    meta = {"runs": n}
    t0 = time.perf_counter()
    for i in range(n):
        if i % LG_EVERY == 50:
            lg_thread(saver, f"lg-{i}")
            if i == want_thread:
                meta["thread"] = f"lg-{i}"
            continue
        with log.store.batch():
            run = log.start_run(labels={"user": f"u{i}"})
            rec = log.record_attempt(run, 0, 0, "succeeded", usage={"input_tokens": i, "output_tokens": 7},
                                     context={"task": "summarise the ticket", "user": f"u{i}"})
        if i == want_run:
            meta.update(run=run, labels={"user": f"u{i}"}, record=bytes(rec.id).hex())
        if i % 5000 == 4999:
            print(f"  .. {time.strftime('%H:%M:%S')} built {i + 1} runs in {time.perf_counter() - t0:.0f} s", flush=True)
    meta["build_seconds"] = time.perf_counter() - t0
    meta["code"] = code_rev()
    return meta


def code_rev():
    return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def ensure_store(base, n, rebuild=False):
    d = os.path.join(base, f"runs-{n}")
    meta_path = os.path.join(d, "meta.json")
    if os.path.exists(meta_path) and not rebuild:
        with open(meta_path) as f:
            return json.load(f), os.path.join(d, "store")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    print(f"building {n:,} runs in {d} (fsync off) ...", flush=True)
    res = subprocess.run([PY, HERE, "--build", d, str(n)], check=False)
    if res.returncode != 0 or not os.path.exists(meta_path):
        raise SystemExit(f"build of {n} runs failed ({res.returncode})")
    with open(meta_path) as f:
        return json.load(f), os.path.join(d, "store")


def build_main(d, n):
    meta = build(os.path.join(d, "store"), n)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)


# -- the measuring child -------------------------------------------------------------------------------------------
def operation(op, root, meta, show_arg):
    """The operation as a callable (opening the store included in it)."""
    import objstore
    from objstore.integrations.langgraph import ObjstoreSaver
    from objstore_cli.main import cli

    def cli_run(args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                rc = cli.main(["--store", root, *args], prog_name="objstore", standalone_mode=False)
            except SystemExit as e:
                rc = e.code
        if rc not in (None, 0):
            raise SystemExit(f"objstore {args}: exit {rc}")
        return out.getvalue()

    if op == "log":
        return lambda: cli_run(["log", meta["run"], "-n", "10", "--no-pager"])
    if op == "show":
        return lambda: cli_run(["show", show_arg.format(id=meta["record"], run=meta["run"])])
    if op == "find_run":
        def find():
            got = objstore.open_store(root, create=False).find_run(**meta["labels"])
            assert got == meta["run"], got
            return got
        return find

    def get():
        t = ObjstoreSaver(objstore.open_store(root, create=False)).get_tuple({"configurable": {"thread_id": meta["thread"], "checkpoint_ns": ""}})
        assert t is not None and t.checkpoint["channel_values"]["n"] == 2, t
        return t
    return get


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def store_mmaps(root):
    """{path: [file size, mapped bytes, resident bytes]} of this process's mappings of files under root."""
    out: dict = {}
    cur = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and not head[0].endswith(":"):
                cur = head[5] if len(head) >= 6 and head[5].startswith(root + "/") else None
                if cur is not None and cur not in out:
                    out[cur] = [os.path.getsize(cur) if os.path.exists(cur) else -1, 0, 0]
            elif cur is not None and head and head[0] in ("Size:", "Rss:"):
                out[cur][1 if head[0] == "Size:" else 2] += int(head[1]) * 1024
    return out


def _measured(fn):
    """The measured call (its name marks the operation's samples in a py-spy profile)."""
    return fn()


def child_main(a):
    import langgraph.checkpoint.base  # noqa: F401

    import objstore_cli.objects  # noqa: F401
    import objstore_cli.runs  # noqa: F401

    with open(os.path.join(a["warm"], "meta.json")) as f:
        warm_meta = json.load(f)
    for op in OPS:  # the lazily imported modules of each operation, on another store
        operation(op, os.path.join(a["warm"], "store"), warm_meta, a["show_arg"])()
    fn = operation(a["op"], a["root"], a["meta"], a["show_arg"])
    hwm0 = vm_hwm()
    c0 = time.process_time()
    _measured(fn)
    cpu = time.process_time() - c0
    print(json.dumps({"cpu": cpu, "hwm": vm_hwm(), "hwm_before": hwm0, "mmaps": store_mmaps(a["root"])}), flush=True)


# -- strace ----------------------------------------------------------------------------------------------------------
SYSCALL = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")
RESUMED = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+<\.\.\. (\w+) resumed>(.*)\)\s+=\s+(-?\d+)")
UNFINISHED = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\w+)\((.*) <unfinished \.\.\.>$")


def strace_bytes(trace_path, root):
    """(bytes read from fds open on files under root, {path: bytes}): one fd table (the child does not fork)."""
    fds: dict[int, str] = {}
    pending: dict[str, tuple[str, str]] = {}
    per: dict[str, int] = {}
    prefix = root.rstrip("/") + "/"
    with open(trace_path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = UNFINISHED.match(line)
            if m:
                pending[m.group(1)] = (m.group(2), m.group(3))
                continue
            m = RESUMED.match(line)
            if m:
                name, args = pending.pop(m.group(1), (m.group(2), ""))
                args, ret = args + m.group(3), int(m.group(4))
            else:
                m = SYSCALL.match(line)
                if not m:
                    continue
                name, args, ret = m.group(2), m.group(3), int(m.group(4))
            _apply(name, args, ret, fds, per, prefix)
    return sum(per.values()), per


def _apply(name, args, ret, fds, per, prefix):
    if ret < 0:
        return
    if name in ("openat", "open"):
        path = re.search(r'"((?:[^"\\]|\\.)*)"', args)
        if path:
            fds[ret] = path.group(1)
    elif name == "close":
        fds.pop(int(args.split(",")[0]), None)
    elif name in ("dup", "dup2", "dup3"):
        src = int(args.split(",")[0])
        if src in fds:
            fds[ret] = fds[src]
    elif name in ("read", "pread64", "readv", "preadv", "preadv2"):
        path = fds.get(int(args.split(",")[0]))
        if path is not None and path.startswith(prefix):
            per[path] = per.get(path, 0) + ret


def run_child(args, strace_to=None, wrap=()):
    cmd = [*wrap, PY, HERE, "--child", json.dumps(args)]
    if strace_to:
        cmd = ["strace", "-f", "-qq", "-e", "trace=read,pread64,readv,preadv,openat,open,close,dup,dup2,dup3", "-o", strace_to, *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise SystemExit(f"child failed ({res.returncode}): {args['op']} on {args['root']}\n{res.stderr[-3000:]}")
    return json.loads(lines[-1])


# -- driver ----------------------------------------------------------------------------------------------------------
def measure_bytes(a, stores, scratch):
    print("\n(i) bytes read from store files (strace read/pread64/readv/preadv on store fds; once: deterministic)")
    out = {}
    for op in OPS:
        got = {}
        for size, (meta, root) in stores.items():
            trace = os.path.join(scratch, f"strace-{op}-{size}.txt")
            res = run_child(child_args(a, op, meta, root), strace_to=trace)
            total, per = strace_bytes(trace, os.path.realpath(root))
            got[size] = (total, per, res["mmaps"])
            os.unlink(trace)
        small, big = got[a.small][0], got[a.big][0]
        ratio = big / small if small else float("inf")
        out[op] = ratio
        print(f"  {op:<10} {a.small:>7,} runs: {small:>12,} B   {a.big:>7,} runs: {big:>12,} B   ratio {ratio:8.1f}x   "
              f"target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT MET'}")
        mm = {size: sum(v[2] for v in got[size][2].values()) for size in got}
        if mm[a.small] or mm[a.big]:
            print(f"  {'':<10} + mmapped store files resident: {mm[a.small]:>10,} B at {a.small:,} runs, {mm[a.big]:>12,} B at "
                  f"{a.big:,} runs (page faults, not read calls; Rss includes the kernel's fault-around, an upper bound)")
        for size in (a.small, a.big):
            top = sorted(got[size][1].items(), key=lambda kv: -kv[1])[:4]
            rel = [(os.path.relpath(p, stores[size][1]), b) for p, b in top]
            print(f"      {size:>7,} runs, largest: " + ", ".join(f"{p} {b:,}" for p, b in rel))
            for p, (fsize, mapped, rss) in sorted(got[size][2].items()):
                print(f"      {size:>7,} runs, mmapped (not in the read bytes): {os.path.relpath(p, stores[size][1])} "
                      f"file {fsize:,} B, mapped {mapped:,} B, resident {rss:,} B")
    return out


def child_args(a, op, meta, root):
    return {"op": op, "root": os.path.realpath(root), "meta": meta, "warm": a.warm, "show_arg": a.show_arg}


def measure_cpu(a, stores, scratch):
    print(f"\n(ii) CPU after imports (process_time around the operation, store open included), (iii) peak RSS; {a.reps} reps")
    cpu = {(op, s): [] for op in OPS for s in stores}
    hwm = {(op, s): [] for op in OPS for s in stores}
    before = {}
    for r in range(a.reps):
        lat = fsync_probe(scratch)
        for op in OPS:
            for size in (a.small, a.big) if r % 2 == 0 else (a.big, a.small):
                res = run_child(child_args(a, op, *stores[size]))
                cpu[(op, size)].append(res["cpu"])
                hwm[(op, size)].append(res["hwm"])
                before[(op, size)] = res["hwm_before"]
        print(f"  rep {r}: " + "  ".join(f"{op} {1000 * cpu[(op, a.small)][-1]:.1f}/{1000 * cpu[(op, a.big)][-1]:.1f} ms" for op in OPS)
              + f"  | fsync {1000 * lat:.2f} ms  {loadavg()}", flush=True)
    for op in OPS:
        ratios = [b / s for b, s in zip(cpu[(op, a.big)], cpu[(op, a.small)], strict=True)]
        print(f"  {op:<10} CPU ms min/median/max: {a.small:,} runs {fmt3([1000 * x for x in cpu[(op, a.small)]], '{:.1f}')}   "
              f"{a.big:,} runs {fmt3([1000 * x for x in cpu[(op, a.big)]], '{:.1f}')}   ratio {fmt3(ratios, '{:.1f}')}x   "
              f"target <= 1.5x: {'met' if mmm(ratios)[1] <= 1.5 else 'NOT MET'}")
    for op in OPS:
        peak = max(hwm[(op, a.big)])
        print(f"  {op:<10} peak RSS at {a.big:,} runs: {peak / 2**20:.0f} MB (max over reps; before the operation "
              f"{before[(op, a.big)] / 2**20:.0f} MB; at {a.small:,} runs {max(hwm[(op, a.small)]) / 2**20:.0f} MB)   "
              f"target <= 100 MB: {'met' if peak <= 100 * 2**20 else 'NOT MET'}")


def profile_ops(a, stores, scratch):
    """Each operation on the big store once under py-spy (500 Hz): where its CPU goes."""
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    if not os.path.exists(pyspy):
        print("  (py-spy not found: pip install py-spy into the venv; no profile)")
        return
    print(f"\n(profile) each operation at {a.big:,} runs under py-spy (not timed): shares of its samples")
    for op in OPS:
        raw = os.path.join(scratch, f"profile-{op}-{a.big}.txt")
        run_child(child_args(a, op, *stores[a.big]), wrap=(pyspy, "record", "-r", "500", "-f", "raw", "-o", raw, "--"))
        total, _, top, incl = pyspy_shares(raw, "_measured", [])
        incl = [(k, v) for k, v in incl if v < 0.99]  # the ones on every sample are the call's wrappers
        print(f"  {op}: {total} samples; top functions under 99 %, inclusive: " + "; ".join(f"{k} {100 * v:.0f} %" for k, v in incl[:10]))
        print(f"  {'':<{len(op)}}  top leaf frames: " + "; ".join(f"{k} {100 * v:.0f} %" for k, v in top[:6]))
        print(f"  {'':<{len(op)}}  raw profile kept: {raw}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where the stores are built once and kept (required unless --child/--build)")
    ap.add_argument("--small", type=int, default=100, help="runs of the small store (100)")
    ap.add_argument("--big", type=int, default=100_000, help="runs of the big store (100000)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of the CPU measurement (5)")
    ap.add_argument("--show-arg", default="{id}", help="the argument of show: '{id}' today, '{run}:{id}' on the per-run format")
    ap.add_argument("--only", choices=("bytes", "cpu", "profile"), help="only one of the measurements")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                    help="after the figures, each operation at the big store once under py-spy: top functions (on)")
    ap.add_argument("--rebuild", action="store_true", help="build the stores again even if --dir holds them (after a format change)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--build", nargs=2, metavar=("DIR", "N"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not (a.child or a.build or a.dir):
        ap.error("--dir is required")
    return a


def main(argv):
    a = parse_args(argv)
    if a.child:
        return child_main(json.loads(a.child))
    if a.build:
        return build_main(a.build[0], int(a.build[1]))
    os.makedirs(a.dir, exist_ok=True)
    if shutil.which("strace") is None and a.only in (None, "bytes"):
        raise SystemExit("strace is missing (apt-get install strace), or run with --only cpu")
    rev = code_rev()
    print(f"bench_open_cost: code {rev or '?'}, {os.cpu_count()} CPUs, stores under {a.dir}, {loadavg()}")
    stores = {}
    for size in (a.small, a.big):
        meta, root = ensure_store(a.dir, size, a.rebuild)
        stores[size] = (meta, root)
        print(f"  store of {size:,} runs: {root}, built in {meta['build_seconds']:.1f} s (fsync off) by code {meta.get('code', '?')}, "
              f"run {meta['run']} {meta['labels']}, thread {meta['thread']}")
    ensure_store(os.path.join(a.dir, "warm"), 100, a.rebuild)
    a.warm = os.path.join(a.dir, "warm", "runs-100")
    for op in OPS:  # the first opener may write caches: not measured
        for size in stores:
            run_child(child_args(a, op, *stores[size]))
    scratch = os.path.join(a.dir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    if a.only in (None, "bytes"):
        measure_bytes(a, stores, scratch)
    if a.only in (None, "cpu"):
        measure_cpu(a, stores, scratch)
    if a.only == "profile" or (a.only is None and a.profile):
        profile_ops(a, stores, scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
