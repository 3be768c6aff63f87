"""Episode readers of different runs: a state file per run (format 6) against one state file for the store, same run.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_state_runs.py                 # P = 8 readers, 5 repetitions
    .venv/bin/python benchmarks/bench_state_runs.py --procs 2 --reps 2 --n 20   # smoke

Options: --procs P (8) processes, each on its own run; --n N (100) rounds per process; --history H (300) records
each run holds before the timed rounds; --reps (5); BENCH_DIR for the scratch directories (removed afterwards).

What it measures: one store of format 6 (a log per run), fsync off, P runs of H attempt records each. Each of P
processes opens the store, then waits for one "go" line, then runs N rounds on its own run of: append one attempt
record, read the run's episode from the state cache (``episode(log, run).to_json()``: the cache catches up one
record and serves the branch, confirmed against the log). The aggregate rate is all rounds / (last child's end -
first child's start), CLOCK_MONOTONIC shared across processes. Two shapes of the state cache, interleaved in each
repetition (order reversed on alternate repetitions), each in a fresh copy of the same store:

* per run: ``RunLog(store)``, the cache format 6 makes: ``runs/<xx>/<run>/state.db`` beside each run's log;
* one file (the peer): ``RunLog(store, state=StateCache(<root>/state.db))``: one SQLite file for every run, as the
  cache was before (every refresh of any run takes that file's write lock).

Printed per repetition: both rates, their ratio (per run / one file), the load average, the fsync latency (one
4 KiB write + fdatasync in the scratch directory at the start of the repetition); then min / median / max of the
ratios. Not a gate of issue 16 (its text: "the state cache per run, so episode readers of different runs do not
share a file"): the figure says what sharing one file cost.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import os, sys, time
from objstore import RunLog, Store
from objstore.runs.query import episode
from objstore.runs.state import StateCache
root, run, n, shape = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = Store.open(root, fsync="off")
log = RunLog(store, state=StateCache(os.path.join(root, "state.db")) if shape == "one" else None)
episode(log, run).to_json()  # the cache holds the run before the timed rounds
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t0 = time.monotonic()
for i in range(n):
    log.record_attempt(run, 1000 + i, 0, "succeeded", usage={"in": i, "out": 7})
    episode(log, run).to_json()
t1 = time.monotonic()
print(t0, t1)
"""


def build(root, procs, history):
    from objstore import RunLog, Store

    log = RunLog(Store.init(root, fsync="off"))
    runs = []
    for p in range(procs):
        run = log.start_run(f"run{p}")
        with log.store.batch():
            for k in range(history):
                log.record_attempt(run, k % 20, k // 20, "failed" if k % 7 == 0 else "succeeded", usage={"in": k, "out": 3})
        runs.append(run)
    return runs


def fsync_latency(d):
    path = os.path.join(d, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"x" * 4096)
        t = time.perf_counter()
        os.write(fd, b"y" * 4096)
        os.fdatasync(fd)
        return time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)


def one(root, runs, n, shape):
    env = dict(os.environ, OBJSTORE_NEW_FORMAT="6")
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, root, r, str(n), shape], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env) for r in runs]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline() == "ready\n"
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("go\n")
        k.stdin.flush()
    spans = []
    for k in kids:
        out, _ = k.communicate(timeout=3600)
        assert k.returncode == 0
        spans.append(tuple(map(float, out.split())))
    return len(runs) * n / (max(e for _s, e in spans) - min(s for s, _e in spans))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--history", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    os.environ["OBJSTORE_NEW_FORMAT"] = "6"
    scratch = tempfile.mkdtemp(prefix="bench-state-runs-", dir=os.environ.get("BENCH_DIR"))
    try:
        template = os.path.join(scratch, "template")
        t = time.perf_counter()
        runs = build(template, a.procs, a.history)
        print(f"built {a.procs} runs x {a.history} records in {time.perf_counter() - t:.1f} s; P = {a.procs} readers, "
              f"{a.n} rounds each (append 1 record + episode from the cache)")
        ratios = []
        for rep in range(a.reps):
            lat = fsync_latency(scratch)
            load = os.getloadavg()[0]
            rates = {}
            for shape in (("per", "one") if rep % 2 == 0 else ("one", "per")):
                root = os.path.join(scratch, f"r{rep}-{shape}")
                shutil.copytree(template, root)
                rates[shape] = one(root, runs, a.n, shape)
                shutil.rmtree(root)
            ratios.append(rates["per"] / rates["one"])
            print(f"  rep {rep + 1}: per run {rates['per']:8.1f} rounds/s   one file {rates['one']:8.1f} rounds/s   "
                  f"ratio {ratios[-1]:.2f}x   load {load:.2f}   fsync {lat * 1e3:.2f} ms")
        print(f"per run / one file: min {min(ratios):.2f}x median {statistics.median(ratios):.2f}x max {max(ratios):.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
