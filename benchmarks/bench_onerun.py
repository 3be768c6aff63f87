"""Writers of ONE run: P = 8 writer processes appending to the same run against P = 1, fsync full, same run, interleaved.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_onerun.py                     # 5 repetitions, 3 s per measurement
    .venv/bin/python benchmarks/bench_onerun.py --reps 2 --seconds 1  # smoke
    .venv/bin/python benchmarks/bench_onerun.py --procs 4           # another P against P = 1
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_onerun.py

To measure a library other than the working tree's (main, say): extract its ``src`` with ``git archive`` into DIR and
run from outside the repository with ``PYTHONPATH=DIR`` (the children inherit it); the header prints which
``objstore`` was imported.

Options (each also read from the environment): --reps / BENCH_REPS (5), --seconds / BENCH_SECONDS (3.0): the timed
window of each measurement, --procs / BENCH_PROCS (8): P of the many-writer side, --baseline / BENCH_BASELINE (none):
the ``src`` directory of another objstore (main's, say: ``git archive main src | tar -x -C DIR``, then DIR/src), whose
writers are measured in the same repetitions (P = 1 and P = P each), so today's figure and this tree's come from the
same disk and load; also printed: this tree's P-writer rate over the baseline's. --profile PATH: one P-writer
measurement with writer 0 under ``py-spy record --idle`` (BENCH_PROFILE_CPU=1: without --idle, on-CPU samples only);
prints the top frames of its samples inside record_attempt.

What it measures
----------------
Each repetition makes a fresh store (``Store.init(fsync="full")``) with one run, in a fresh scratch directory, then
measures P = 1 and P = P writer processes on that same run, in alternating order (P = 1 first on even repetitions).
A writer is a child process: it imports and opens the store (its own ``Store.open`` + ``RunLog``), says "ready", waits
for the file ``<store>.go`` holding "<t_start> <t_end>" (CLOCK_MONOTONIC, shared across processes), sleeps until ``t_start`` (the start
barrier), then calls ``record_attempt(run, ...)`` outside any batch — one record per durable commit, ~150 B of body —
until ``t_end``, and prints its count and CPU seconds (``time.process_time()`` around the loop only). The aggregate
rate is all commits / (t_end - t_start + the overrun of the slowest writer's last commit).

Printed per repetition: the fsync latency (one ``os.write`` of 4 KiB + ``os.fdatasync`` in the scratch directory,
timed at the start of the repetition), P = 1 and P = P aggregate commits/s, their ratio, the busiest writer's share
of the P-writer commits (target <= 2/P) and each writer's count, CPU milliseconds and fdatasync calls (counted in each
writer by wrapping ``os.fdatasync``) per commit at each P, the load average. After each measurement the run is read back: every commit is one record, LSNs contiguous (or the bench
fails). Summary: min / median / max of the per-repetition ratios and of the busiest shares.

Gate (issue 16): P = 8 / P = 1 >= 1.5x (median per-repetition ratio), busiest writer <= 2/P of the commits.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from objstore import RunLog, Store

RUN = "onerun"


def fsync_latency(d):
    """Seconds of one 4 KiB write + fdatasync in directory ``d`` (this repetition's disk state)."""
    path = os.path.join(d, "fsync.probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"\0" * 4096)
        os.fdatasync(fd)  # the file's creation is not what is measured
        os.pwrite(fd, b"\1" * 4096, 4096)
        t = time.perf_counter()
        os.fdatasync(fd)
        return time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)


def writer_child(root, idx):
    """Open, say ready, wait for the go file (t_start t_end), append one record per commit until t_end; print the count."""
    log = RunLog(Store.open(root, fsync="full"))
    record_attempt = log.record_attempt
    flushes = [0]
    real_fdatasync = os.fdatasync

    def fdatasync(fd):  # counted: how many commits one flush covers
        flushes[0] += 1
        return real_fdatasync(fd)

    os.fdatasync = fdatasync
    ctx = {"task": "ticket", "writer": idx, "tool": "search"}
    print("ready", flush=True)
    go = root + ".go"  # the start line comes as a file: a child under py-spy has no stdin of ours
    while not os.path.exists(go):
        time.sleep(0.001)
    with open(go) as f:
        t_start, t_end = (float(x) for x in f.read().split())
    time.sleep(max(0.0, t_start - time.monotonic()))
    n = 0
    c0 = time.process_time()
    while time.monotonic() < t_end:
        record_attempt(RUN, step=idx * 1_000_000 + n, attempt=0, state="succeeded",
                       usage={"input_tokens": 100 + n % 7, "output_tokens": 20}, context=ctx)
        n += 1
    t1 = time.monotonic()
    cpu = time.process_time() - c0
    print(json.dumps({"n": n, "t1": t1, "cpu": cpu, "flushes": flushes[0]}), flush=True)


def measure(root, procs, seconds, profile=None, path=None):
    """(aggregate commits/s, per-writer counts, CPU s per commit) of ``procs`` writers on the run. ``profile``: a
    path: writer 0 runs under ``py-spy record --idle -f raw`` writing there (the other writers run as they are).
    ``path``: the writers import objstore from there (PYTHONPATH) instead of this interpreter's."""
    me = os.path.abspath(__file__)
    cmds = [[sys.executable, me, "--writer-child", root, str(i)] for i in range(procs)]
    if profile:
        spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
        idle = ["--idle"] if os.environ.get("BENCH_PROFILE_CPU") != "1" else []  # 1: on-CPU samples only
        cmds[0] = [spy, "record", "--nonblocking", *idle, "-r", "100", "-f", "raw", "-o", profile, "--", *cmds[0]]
    env = dict(os.environ, PYTHONPATH=path) if path else None
    children = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env) for cmd in cmds]
    try:
        for c in children:
            line = c.stdout.readline()
            while line and line.strip() != "ready":
                line = c.stdout.readline()  # py-spy's own lines, when profiling
            if not line:
                raise RuntimeError(f"a writer did not start (exit {c.wait()})")
        t_start = time.monotonic() + 0.3
        t_end = t_start + seconds
        with open(root + ".tmp", "w") as f:
            f.write(f"{t_start} {t_end}")
        os.replace(root + ".tmp", root + ".go")
        outs = []
        for c in children:
            text = c.stdout.read()
            if c.wait() != 0:
                raise RuntimeError(f"a writer failed (exit {c.returncode})")
            outs.append(json.loads([ln for ln in text.strip().splitlines() if ln.startswith("{")][-1]))
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    counts = [o["n"] for o in outs]
    span = max(o["t1"] for o in outs) - t_start
    total = sum(counts)
    return total / span, counts, sum(o["cpu"] for o in outs) / max(1, total), sum(o["flushes"] for o in outs) / max(1, total)


def check_run(root, expect):
    """Every commit landed as one record of the run, LSNs 0..expect contiguous (run_started is LSN 0)."""
    store = Store.open(root, fsync="off")
    try:
        recs = RunLog(store).records(RUN)
        lsns = [r.lsn for r in recs]
        if lsns != list(range(expect + 1)):
            raise RuntimeError(f"run has {len(recs)} records (expected {expect + 1}), LSNs contiguous: "
                               f"{lsns == list(range(len(lsns)))}")
    finally:
        store.engine.close()


def _frame(fr):
    """``name (path:line)`` as py-spy writes it -> ``name file:line``."""
    name, _, where = fr.strip().partition(" (")
    return f"{name} {os.path.basename(where.rstrip(')'))}"


def profile(path, procs, seconds):
    """One P-writer measurement with writer 0 under py-spy; the top leaf frames and the top frames anywhere."""
    d = tempfile.mkdtemp(prefix="onerun.", dir=os.environ.get("BENCH_DIR"))
    try:
        root = os.path.join(d, "s")
        log = RunLog(Store.init(root, fsync="full"))
        log.start_run(RUN)
        log.store.engine.close()
        rate, counts, cpu, _fl = measure(root, procs, seconds, profile=path)
        print(f"P={procs}: {rate:,.0f}/s, counts {counts}, {cpu * 1e3:.2f} ms CPU/commit (writer 0 under py-spy)")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    leaf, anywhere, total = {}, {}, 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = [_frame(fr) for fr in stack.split(";")]
            if not any(fr.split(" ")[0].endswith("record_attempt") for fr in frames):
                continue  # imports, the wait for "go": not the commits'
            total += int(n)
            leaf[frames[-1]] = leaf.get(frames[-1], 0) + int(n)
            for fr in {fr.rsplit(":", 1)[0] for fr in frames}:  # inclusive: per function, not per line
                anywhere[fr] = anywhere.get(fr, 0) + int(n)
    print(f"{total} samples of writer 0 inside record_attempt; top leaf frames (own time, idle included):")
    for fr, n in sorted(leaf.items(), key=lambda x: -x[1])[:15]:
        print(f"  {100 * n / total:5.1f}%  {fr}")
    print("top frames anywhere on the stack (inclusive):")
    for fr, n in sorted(anywhere.items(), key=lambda x: -x[1])[:25]:
        print(f"  {100 * n / total:5.1f}%  {fr}")


def fmt(xs, f="{:.2f}"):
    return " / ".join(f.format(x) for x in (min(xs), statistics.median(xs), max(xs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 5)))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SECONDS", 3.0)))
    ap.add_argument("--procs", type=int, default=int(os.environ.get("BENCH_PROCS", 8)))
    ap.add_argument("--profile", metavar="PATH", help="one extra P-writer measurement (not in the figures), writer 0 under "
                    "py-spy record --idle -f raw -o PATH; prints the top frames (own samples, idle included)")
    ap.add_argument("--baseline", metavar="SRC", default=os.environ.get("BENCH_BASELINE"),
                    help="also measure, in the same repetitions, writers importing objstore from SRC (e.g. main's src/)")
    ap.add_argument("--writer-child", nargs=2, metavar=("ROOT", "IDX"))
    a = ap.parse_args()
    if a.writer_child:
        writer_child(a.writer_child[0], int(a.writer_child[1]))
        return
    import objstore

    P = a.procs
    if a.profile:
        profile(a.profile, P, a.seconds)
        return
    libs = [("this", None)] + ([("baseline", os.path.abspath(a.baseline))] if a.baseline else [])
    print(f"objstore from {os.path.dirname(objstore.__file__)}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} CPUs; BENCH_DIR={os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    if a.baseline:
        print(f"baseline: writers run with PYTHONPATH={libs[1][1]} (measured in the same repetitions, order alternating)")
    print(f"one run, fsync full, 1 record per commit (record_attempt outside a batch), {a.seconds:g} s per measurement, "
          f"P = 1 vs P = {P}, {a.reps} reps interleaved")
    ratios = {name: [] for name, _ in libs}
    shares = {name: [] for name, _ in libs}
    vs_base = []
    for rep in range(a.reps):
        d = tempfile.mkdtemp(prefix="onerun.", dir=os.environ.get("BENCH_DIR"))
        try:
            lat = fsync_latency(d)
            order = [(lib, p) for lib in libs for p in (1, P)]
            res = {}
            for lib, p in (order if rep % 2 == 0 else order[::-1]):
                root = os.path.join(d, f"{lib[0]}{p}")
                log = RunLog(Store.init(root, fsync="full"))
                log.start_run(RUN)
                log.store.engine.close()
                res[lib[0], p] = measure(root, p, a.seconds, path=lib[1])
                check_run(root, sum(res[lib[0], p][1]))
            load = os.getloadavg()
            print(f"  rep {rep}: fsync {lat * 1e3:6.2f} ms | load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
            for name, _ in libs:
                (r1, _c1, cpu1, fl1), (rp, cp, cpup, flp) = res[name, 1], res[name, P]
                share = max(cp) / max(1, sum(cp))
                ratios[name].append(rp / r1)
                shares[name].append(share)
                print(f"    {name:<8} P=1 {r1:7,.0f}/s ({cpu1 * 1e3:.2f} ms CPU, {fl1:.2f} fdatasync /commit) | P={P} {rp:7,.0f}/s "
                      f"({cpup * 1e3:.2f} ms CPU, {flp:.2f} fdatasync /commit) | ratio {rp / r1:5.2f} | busiest {share:.3f} "
                      f"(counts {sorted(cp, reverse=True)})")
            if a.baseline:
                vs_base.append(res["this", P][0] / res["baseline", P][0])
        finally:
            shutil.rmtree(d, ignore_errors=True)
    for name, _ in libs:
        print(f"{name}: P={P} / P=1 (min / median / max): {fmt(ratios[name])}   target >= 1.5: "
              f"{'met' if statistics.median(ratios[name]) >= 1.5 else 'NOT met'}")
        print(f"{name}: busiest writer's share (min / median / max): {fmt(shares[name], '{:.3f}')}   target <= {2 / P:.3f}: "
              f"{'met' if max(shares[name]) <= 2 / P else 'NOT met'} (every rep)")
    if a.baseline:
        print(f"this / baseline at P={P} (min / median / max): {fmt(vs_base)}")

if __name__ == "__main__":
    main()
