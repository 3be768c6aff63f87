"""Where 8 writer processes' time goes: 8 processes each make 300 durable 1-record commits on their own run
(fsync full); writer 0 runs under cProfile. Prints the total rate and writer 0's top functions (time waiting in
flock is the lock's critical section held by the others: their catch-up on each other's entries and their build).

Run: .venv/bin/python benchmarks/profile_writers.py   (BENCH_DIR picks the scratch directory)
"""

import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time

from objstore import RunLog, Store

PROCS, N = 8, 300


def writer(root: str, idx: int, prof_path: str) -> None:
    log = RunLog(Store.open(root, fsync="full"))
    run = log.start_run(f"w{idx}")

    def work() -> None:
        for i in range(N):
            log.record_attempt(run, i, 0, "succeeded", usage={"n": i}, context={"task": "x"})

    if idx == 0:
        prof = cProfile.Profile()
        prof.runcall(work)
        prof.dump_stats(prof_path)
    else:
        work()


def main() -> None:
    if len(sys.argv) == 4:
        writer(sys.argv[1], int(sys.argv[2]), sys.argv[3])
        return
    d = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        root, prof_path = os.path.join(d, "s"), os.path.join(d, "w0.prof")
        Store.init(root, fsync="full")
        t = time.time()
        ps = [subprocess.Popen([sys.executable, __file__, root, str(i), prof_path]) for i in range(PROCS)]
        for p in ps:
            p.wait()
        print(f"{PROCS} writers: {PROCS * N / (time.time() - t):,.0f} durable commits/s in total")
        pstats.Stats(prof_path).sort_stats("tottime").print_stats(15)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
