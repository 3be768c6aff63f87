"""Where a 1-record commit's CPU goes: cProfile of N commits (a record, a fresh blob on every third, one batch
each) on a store with fsync off, so only CPU is measured. Prints µs per commit and the top functions.

Run: .venv/bin/python benchmarks/profile_commit.py [N]   (default 3000; BENCH_DIR picks the scratch directory)
"""

import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time

from objstore import RunLog, Store


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    d = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    try:
        log = RunLog(Store.init(os.path.join(d, "s"), fsync="off"))
        run = log.start_run("r1")
        p = log.put_blob(b"prompt " * 40)

        def work(k: int, base: int) -> None:
            for i in range(base, base + k):
                with log.store.batch():
                    out = log.put_blob(b"out %d " % i * 300) if i % 3 == 0 else None
                    log.record_attempt(run, step=i, attempt=0, state="succeeded", prompt=p, output=out,
                                       usage={"in": i, "out": 7}, context={"task": "summarise the ticket"})

        work(200, 0)
        t = time.perf_counter()
        work(n, 200)
        print(f"{(time.perf_counter() - t) / n * 1e6:.1f} us CPU+write per commit (fsync off), {n} commits")
        prof = cProfile.Profile()
        prof.runcall(work, n, 200 + n)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
