"""Writers of different runs: P processes, each appending to its own run, one record per durable commit (issue 16's
first gate, and its fsync-full table against the bare commit path).

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_run_writers.py                 # both parts, 5 repetitions
    .venv/bin/python benchmarks/bench_run_writers.py --part off      # (a) only: fsync off, P = 1, 2, 8, + py-spy
    .venv/bin/python benchmarks/bench_run_writers.py --part full     # (b) only: fsync full, P = 1, 2, 4, 8, 16
    .venv/bin/python benchmarks/bench_run_writers.py --reps 2 --n-off 200 --n-full 30 --no-profile   # smoke
    BENCH_DIR=/mnt/disk .venv/bin/python benchmarks/bench_run_writers.py

What it measures
----------------
A writer is a fresh process: ``RunLog(Store.open(root, fsync=...))``, ``start_run`` of its own run (before the
timed window), then N x ``record_attempt(run, i, 0, "succeeded", usage=..., context=...)`` outside any batch (each
is ``RunLog.append``: one record, one commit, durable before it returns when fsync is full). Writers start together
(benchmarks/gang.py: every child ready, then go); the aggregate rate is all commits / (last end - first start).
Every configuration of every repetition gets a fresh store (or directory) under tempfile.mkdtemp(dir=$BENCH_DIR).

(a) ``--part off``: fsync off, P = 1, 2, 8 writers, --n-off commits each; the three P run in one repetition, order
    reversed on alternate repetitions; per-rep ratios P2/P1 and P8/P1. Then, unless --no-profile, one more P = 8
    round (not timed) with writer 0 under ``py-spy record --idle -f raw``: of writer 0's samples inside its timed
    loop, the share inside the writer lock's acquisition (a frame ``_os_lock`` of
    src/objstore/storage/log/local_write.py: the store-wide ``flock``; on the per-run format, whatever function the
    run log's lock is taken in: --lock-fn; plus the in-process ``_wlock``, which one-thread writers never wait on:
    gang.lock_wait_marks), the top leaf frames and the top functions by inclusive share.
(b) ``--part full``: fsync full, P = 1, 2, 4, 8, 16, --n-full commits per process, three systems per P in each
    repetition (order reversed on alternate repetitions):
      objstore    P writers as above, each on its own run of one store;
      commitpath  P processes each calling ``log_engine(dir, n, 1)`` of /work/shared/bench/commitpath.py (imported
                  by path; --commitpath) on its own directory: flock, one framed chained entry, one write, one
                  fdatasync per record;
      raw         P processes each calling that script's ``raw_floor(dir, n, 1)``: write(400 B) + fdatasync on its
                  own file (the floor).
    Ratio objstore/commitpath per rep at each P. With --profile, one untimed P = 8 round of objstore with writer 0
    under py-spy (lock-wait and fdatasync shares: the fdatasync share is samples whose leaf is ``_sync_upto``).

Each repetition prints the load average and the fsync latency of that repetition (one os.fdatasync of a 4 KiB write
in the scratch directory, at the repetition's start).

Targets (issue 16; "met" = the median per-rep ratio):
  (a) P2/P1 >= 1.6 and P8/P1 >= 1.6; lock-wait share at P = 8 <= 5 % (on main before the per-run format: 51 %).
  (b) objstore/commitpath >= 0.5 at every P (reported, not a gate).
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gang import PY, fmt3, fsync_probe, loadavg, lock_wait_marks, mmm, pyspy_shares, run_gang, wait_for_go  # noqa: E402

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
COMMITPATH = os.path.normpath(os.path.join(REPO, "..", "..", "shared", "bench", "commitpath.py"))
if not os.path.exists(COMMITPATH):
    COMMITPATH = "/work/shared/bench/commitpath.py"
LOOP_FN = "_commit_loop"


# -- children ------------------------------------------------------------------------------------------------------
def _commit_loop(log, run, n):
    for i in range(n):
        log.record_attempt(run, i, 0, "succeeded", usage={"input_tokens": 100 + i, "output_tokens": 7},
                           context={"task": "summarise the ticket", "tool": "search"})


def child_objstore(a):
    from objstore import RunLog, Store

    log = RunLog(Store.open(a["root"], fsync=a["fsync"]))
    run = log.start_run(a["run"])
    wait_for_go()
    t0, c0 = time.monotonic(), time.process_time()
    _commit_loop(log, run, a["n"])
    t1, c1 = time.monotonic(), time.process_time()
    return {"t0": t0, "t1": t1, "n": a["n"], "cpu": c1 - c0}


def load_commitpath(path):
    spec = importlib.util.spec_from_file_location("commitpath", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def child_peer(a):
    cp = load_commitpath(a["commitpath"])
    fn = cp.log_engine if a["kind"] == "commitpath" else cp.raw_floor
    os.makedirs(a["dir"], exist_ok=True)
    wait_for_go()
    t0 = time.monotonic()
    fn(a["dir"], a["n"], 1)
    t1 = time.monotonic()
    return {"t0": t0, "t1": t1, "n": a["n"]}


def child_main(kind, args):
    a = json.loads(args)
    out = child_objstore(a) if kind == "objstore" else child_peer({**a, "kind": kind})
    print(json.dumps(out), flush=True)


# -- driver --------------------------------------------------------------------------------------------------------
def child_cmd(kind, a, wrap=()):
    return [*wrap, PY, HERE, "--child", kind, json.dumps(a)]


def objstore_round(scratch, p, n, fsync, wrap0=()):
    """P writers on their own runs of a fresh store; (aggregate commits/s, per-writer results)."""
    from objstore import Store

    root = tempfile.mkdtemp(prefix=f"obj-p{p}-", dir=scratch)
    Store.init(root, fsync=fsync)
    cmds = [child_cmd("objstore", {"root": root, "run": f"w{i}", "n": n, "fsync": fsync}, wrap0 if i == 0 else ())
            for i in range(p)]
    try:
        res, rate, _ = run_gang(cmds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rate, res


def peer_round(scratch, kind, p, n, commitpath):
    d = tempfile.mkdtemp(prefix=f"{kind}-p{p}-", dir=scratch)
    cmds = [child_cmd(kind, {"dir": os.path.join(d, f"w{i}"), "n": n, "commitpath": commitpath}) for i in range(p)]
    try:
        _, rate, _ = run_gang(cmds)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return rate


def profile_writer(scratch, p, n, fsync, lock_fn):
    """One untimed round with writer 0 under py-spy --idle; its lock-wait (and fdatasync) shares and top leaves."""
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    if not os.path.exists(pyspy):
        print("  (py-spy not found: pip install py-spy into the venv; no profile)")
        return None
    raw = os.path.join(scratch, f"writer0-{fsync}.txt")
    wrap = (pyspy, "record", "--idle", "-r", "200", "-f", "raw", "-o", raw, "--")
    rate, _ = objstore_round(scratch, p, n, fsync, wrap0=wrap)
    if not os.path.exists(raw):
        print("  (py-spy wrote no profile: ptrace not permitted here?)")
        return None
    marks = lock_wait_marks(lock_fn)
    total, shares, top, incl = pyspy_shares(raw, LOOP_FN, marks)
    print(f"  py-spy, writer 0 of {p} (fsync {fsync}, {rate:,.0f} commits/s in that round, not a timed figure): "
          f"{total} samples inside {LOOP_FN}")
    for label, s in shares.items():
        print(f"    {label:<36} {100 * s:5.1f} % of them")
    print("    top leaf frames: " + "; ".join(f"{k} {100 * v:.1f} %" for k, v in top))
    print("    top functions, inclusive: " + "; ".join(f"{k} {100 * v:.1f} %" for k, v in incl[:8]))
    print(f"    raw profile kept: {raw}")
    return shares


def part_off(a, scratch):
    print(f"\n(a) fsync off: P writer processes, each on its own run, {a.n_off} one-record commits each; aggregate commits/s")
    ps = (1, 2, 8)
    rates = {p: [] for p in ps}
    cpu = {p: [] for p in ps}
    for r in range(a.reps):
        lat = fsync_probe(scratch)
        for p in ps if r % 2 == 0 else ps[::-1]:
            rate, res = objstore_round(scratch, p, a.n_off, "off")
            rates[p].append(rate)
            cpu[p].append(sum(x["cpu"] for x in res) / sum(x["n"] for x in res))
        print(f"  rep {r}: " + "  ".join(f"P={p} {rates[p][-1]:,.0f}/s" for p in ps)
              + f"  | P2/P1 {rates[2][-1] / rates[1][-1]:.2f}  P8/P1 {rates[8][-1] / rates[1][-1]:.2f}"
              + f"  | fsync {1000 * lat:.2f} ms  {loadavg()}", flush=True)
    for p in ps:
        print(f"  P={p}: commits/s min/median/max {fmt3(rates[p], '{:,.0f}')}   writer CPU per commit (ms) "
              f"{fmt3([1000 * c for c in cpu[p]], '{:.3f}')}")
    print(f"  (this machine has {os.cpu_count()} CPUs: with fsync off a writer is CPU-bound, so P/P1 <= min(P, CPUs) x "
          f"(CPU per commit at P=1 / at P))")
    ok = True
    for p in (2, 8):
        ratios = [x / y for x, y in zip(rates[p], rates[1], strict=True)]
        met = mmm(ratios)[1] >= 1.6
        ok &= met
        print(f"  P{p}/P1 per rep min/median/max {fmt3(ratios)}   target >= 1.6x: {'met' if met else 'NOT MET'}")
    if a.profile:
        shares = profile_writer(scratch, 8, a.n_off, "off", a.lock_fn)
        if shares is not None:
            s = shares["lock wait, both"]
            print(f"  lock-wait share at P=8: {100 * s:.1f} %   target <= 5 % (main before per-run logs: 51 %): "
                  f"{'met' if s <= 0.05 else 'NOT MET'}")
    return ok


def part_full(a, scratch):
    print(f"\n(b) fsync full: P processes, {a.n_full} one-record durable commits each; objstore (each on its own run of one "
          f"store) vs commitpath.log_engine (each its own file) vs raw write+fdatasync (each its own file)")
    ps = [int(x) for x in a.full_ps.split(",")]
    systems = ("objstore", "commitpath", "raw")
    rates = {(s, p): [] for s in systems for p in ps}
    for r in range(a.reps):
        lat = fsync_probe(scratch)
        print(f"  rep {r}: fsync {1000 * lat:.2f} ms  {loadavg()}", flush=True)
        for p in ps:
            for s in systems if (r + p) % 2 == 0 else systems[::-1]:
                rate = objstore_round(scratch, p, a.n_full, "full")[0] if s == "objstore" else peer_round(scratch, s, p, a.n_full, a.commitpath)
                rates[(s, p)].append(rate)
            print(f"    P={p:<2} objstore {rates[('objstore', p)][-1]:>8,.0f}/s  commitpath {rates[('commitpath', p)][-1]:>8,.0f}/s"
                  f"  raw {rates[('raw', p)][-1]:>8,.0f}/s  objstore/commitpath {rates[('objstore', p)][-1] / rates[('commitpath', p)][-1]:.2f}",
                  flush=True)
    print("  summary (commits/s median over reps; ratio = per-rep objstore/commitpath, min/median/max; aim >= 0.5x at every P):")
    for p in ps:
        ratios = [x / y for x, y in zip(rates[("objstore", p)], rates[("commitpath", p)], strict=True)]
        raw_r = [x / y for x, y in zip(rates[("objstore", p)], rates[("raw", p)], strict=True)]
        md = {s: mmm(rates[(s, p)])[1] for s in systems}
        print(f"    P={p:<2} objstore {md['objstore']:>8,.0f}  commitpath {md['commitpath']:>8,.0f}  raw {md['raw']:>8,.0f}   "
              f"objstore/commitpath {fmt3(ratios)} {'met' if mmm(ratios)[1] >= 0.5 else 'NOT MET'}   objstore/raw {fmt3(raw_r)}")
    if a.profile:
        profile_writer(scratch, 8, a.n_full, "full", a.lock_fn)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("off", "full", "both"), default="both", help="(a) fsync off, (b) fsync full, or both (default)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (5)")
    ap.add_argument("--n-off", type=int, default=1000, help="commits per writer in (a) (1000)")
    ap.add_argument("--n-full", type=int, default=200, help="commits per process in (b) (200)")
    ap.add_argument("--full-ps", default="1,2,4,8,16", help="process counts of (b) (1,2,4,8,16)")
    ap.add_argument("--commitpath", default=COMMITPATH, help=f"the bare commit path script ({COMMITPATH})")
    ap.add_argument("--lock-fn", default="_os_lock", help="the function the writer lock is acquired in (_os_lock, local_write.py)")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True, help="the py-spy rounds (on)")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "JSON"), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    if a.child:
        child_main(*a.child)
        return 0
    scratch = tempfile.mkdtemp(prefix="run-writers-", dir=os.environ.get("BENCH_DIR"))
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"bench_run_writers: code {rev or '?'}, {os.cpu_count()} CPUs, scratch {scratch}, {a.reps} reps, {loadavg()}")
    try:
        ok = True
        if a.part in ("off", "both"):
            ok = part_off(a, scratch)
        if a.part in ("full", "both"):
            part_full(a, scratch)
    finally:
        for f in os.listdir(scratch):
            if not f.endswith(".txt"):
                shutil.rmtree(os.path.join(scratch, f), ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
