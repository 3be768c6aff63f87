"""Online backup (issue 17): ``objstore backup DEST`` against ``cp -r SRC DEST && sync -f DEST``, same run.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_backup.py               # a 1 GB store, 3 repetitions
    .venv/bin/python benchmarks/bench_backup.py --mb 100 --reps 2
    BENCH_DIR=/mnt/disk .venv/bin/python benchmarks/bench_backup.py

The store is built with fsync="off" through the public API (building is not measured): runs of attempt records, one
commit per 64 records, each record with a fresh incompressible blob of --blob-size bytes (16 KiB), until the
segment files hold --mb megabytes. Timed as process wall time, interleaved, order rotated each repetition:

1. a full backup, ``objstore --store SRC backup DEST`` (DEST removed before, outside the timing), and the peer
   ``cp -r SRC DEST2 && sync -f DEST2`` (``sh -c``, DEST2 removed before). Target: backup ≤ 1.5× the peer.
2. an incremental backup into the last full backup's DEST after --grow percent (1 %) more data was written.
   Target: ≤ 5 % of the full backup's time. Then, after another --grow percent, the same as a library call timed
   inside its process (``backup(Store.open(SRC), DEST)``: the command's interpreter start-up and imports left out).
   Since issue 13 an incremental backup reads and hashes every DEST segment it keeps (a damaged one is copied
   again): on a 210 MB store (--mb 200 --reps 2, DEST in the page cache, a loaded 2-core machine) the library
   call went from 0.027-0.074 s (1.7-3.4 % of the full backup) to 0.103-0.129 s (5.3-6.2 %), the command from
   0.23-0.60 s to 0.56-0.73 s; on a cold cache it is bounded by reading DEST once.

Scratch directories come from tempfile.mkdtemp(dir=$BENCH_DIR) and are removed at the end.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import dir_bytes

from objstore import RunLog, Store

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_CALL = ("import sys, time\nfrom objstore import Store\nfrom objstore.lifecycle.backup import backup\n"
            "s = Store.open(sys.argv[1])\nt = time.perf_counter()\nbackup(s, sys.argv[2])\nprint(time.perf_counter() - t)")


def log_bytes(root):
    d = os.path.join(root, "log")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".seg"))


def grow(root, target, blob_size, start):
    """Append records with fresh random blobs until the segment files hold ``target`` bytes."""
    log = RunLog(Store.open(root, fsync="off", create=True))
    run = "bench"
    if start == 0:
        log.start_run(run)
    i = start
    while log_bytes(root) < target:
        with log.batch():
            for _ in range(64):
                blob = log.put_blob(os.urandom(blob_size))
                log.record_attempt(run, 1, i, "failed", prompt=blob)
                i += 1
    log.store.engine.close()
    return i


def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=int(os.environ.get("BENCH_MB", 1024)))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS", 3)))
    ap.add_argument("--blob-size", type=int, default=16 << 10)
    ap.add_argument("--grow", type=float, default=1.0, help="percent of new data before the incremental backup")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-backup-", dir=os.environ.get("BENCH_DIR"))
    try:
        src = os.path.join(tmp, "src")
        t0 = time.perf_counter()
        n = grow(src, a.mb << 20, a.blob_size, 0)
        print(f"code: {os.path.dirname(sys.modules['objstore'].__file__)}")
        print(f"store: {n} records, {log_bytes(src) / 1e6:.0f} MB of segments, {dir_bytes(src) / 1e6:.0f} MB in all "
              f"(built in {time.perf_counter() - t0:.1f} s)")
        objstore = [sys.executable, "-m", "objstore", "--store", src, "backup"]
        full, peer, incr, lib = [], [], [], []
        for rep in range(a.reps):
            # Fresh names each repetition, all removed at the end: on this disk, creating many blocks right
            # after freeing many is slow for a while, which would tax whichever command ran first.
            dest, dest2 = os.path.join(tmp, f"dest{rep}"), os.path.join(tmp, f"cp{rep}")
            subprocess.run(["sync"], check=True)
            jobs = [("backup", objstore + [dest]), ("cp", ["sh", "-c", f"cp -r '{src}' '{dest2}' && sync -f '{dest2}'"])]
            if rep % 2:
                jobs.reverse()
            for name, cmd in jobs:
                (full if name == "backup" else peer).append(wall(cmd))
            n = grow(src, log_bytes(src) * (1 + a.grow / 100), a.blob_size, n)
            subprocess.run(["sync"], check=True)
            incr.append(wall(objstore + [dest]))
            n = grow(src, log_bytes(src) * (1 + a.grow / 100), a.blob_size, n)
            subprocess.run(["sync"], check=True)
            lib.append(float(subprocess.run([sys.executable, "-c", LIB_CALL, src, dest], check=True, capture_output=True, text=True).stdout))
            print(f"  rep {rep + 1}: backup {full[-1]:.2f} s · cp -r && sync -f {peer[-1]:.2f} s · ratio {full[-1] / peer[-1]:.2f} · "
                  f"incremental (+{a.grow:g} %) {incr[-1]:.3f} s = {100 * incr[-1] / full[-1]:.1f} % of the full backup "
                  f"(the library call alone, another +{a.grow:g} %: {lib[-1]:.3f} s = {100 * lib[-1] / full[-1]:.1f} %)")
        ratios = [f / p for f, p in zip(full, peer, strict=True)]
        shares = [100 * i / f for i, f in zip(incr, full, strict=True)]
        print(f"full backup / (cp -r && sync -f): min {min(ratios):.2f} median {statistics.median(ratios):.2f} max {max(ratios):.2f} "
              "(target <= 1.5)")
        print(f"incremental / full: min {min(shares):.1f} % median {statistics.median(shares):.1f} % max {max(shares):.1f} % (target <= 5 %)")
        shares = [100 * i / f for i, f in zip(lib, full, strict=True)]
        print(f"incremental library call / full: min {min(shares):.1f} % median {statistics.median(shares):.1f} % max {max(shares):.1f} % "
              "(the command's start-up left out)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
