"""Issue 7 benchmark: `objstore log -n N` reads only what it prints, like `git log -n N`.

    python benchmarks/bench_log.py [--records 10000] [--reps 5] [-n 3]

Builds one run of ``--records`` attempt records (in batches of 1 000), and the same rows in a
SQLite file (WAL, an index on (run, lsn)) — the file a user would otherwise keep. Then, interleaved,
``--reps`` times each, every one a fresh OS process (what a user runs):

* ``objstore log RUN -n N`` and ``objstore log RUN`` (the whole history), output to a pipe;
* the SQLite peer: ``SELECT … ORDER BY lsn DESC LIMIT N`` and the whole table, printed the same way.

It prints min/median/max of each wall time, of the ratios (full / -n, objstore -n / SQLite -n),
the objects each objstore command decodes (``codec.STATS``, counted in process: the whole
history vs what -n prints) and the peak RSS of each child.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from objstore import RunLog, Store  # noqa: E402
from objstore.runs import history
from objstore.storage import codec

SQLITE_CHILD = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
limit = int(sys.argv[2])
q = "SELECT lsn, kind, id, time, body FROM rec WHERE run=? ORDER BY lsn DESC"
rows = db.execute(q + (" LIMIT ?" if limit else ""), ("bench",) + ((limit,) if limit else ())).fetchall()
out = sys.stdout
for lsn, kind, oid, t, body in rows:
    out.write(f"{lsn:>6} {kind:<16} {oid[:12]} {t}  {body[:60]}\n")
"""


def build(root: str, n: int) -> tuple[str, str]:
    store = os.path.join(root, "store")
    log = RunLog(Store.open(store, create=True))
    run = log.start_run("bench", subject="bench")
    db_path = os.path.join(root, "peer.sqlite")
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE rec(run TEXT, lsn INTEGER, kind TEXT, id TEXT, time REAL, body TEXT, PRIMARY KEY(run, lsn))")
    done = 0
    while done < n:
        rows = []
        with log.store.batch():
            for _ in range(min(1000, n - done)):
                i = done
                r = log.record_attempt(run, step=i // 3, attempt=i % 3, state="failed" if i % 3 else "succeeded",
                                       usage={"tokens": i}, error="retry" if i % 3 else None)
                rows.append((run, r.lsn, r.kind, r.id.hex(), r.time, codec.canonical_json(r.body).decode()[:200]))
                done += 1
        with db:
            db.executemany("INSERT INTO rec VALUES(?,?,?,?,?,?)", rows)
    db.close()
    return store, db_path


# A child forked from this (large) process would count this process's pages in its peak RSS; a small
# trampoline runs the command and reports the command's own peak RSS (RUSAGE_CHILDREN) on stderr's last line.
TRAMPOLINE = r"""
import os, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=sys.stdout, stderr=subprocess.PIPE)
if p.returncode:
    sys.stderr.write(p.stderr.decode()[:300] + "\n")
    sys.exit(p.returncode)
sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + "\n")
"""


def run_child(cmd: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one command, its output to a pipe."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", TRAMPOLINE, *cmd], capture_output=True)
    wall = time.perf_counter() - t
    if p.returncode != 0 or not p.stdout:
        raise SystemExit(f"{cmd}: exit {p.returncode}: {p.stderr.decode()[:300]}")
    return wall, int(p.stderr.decode().split()[-1]) / 1024


def mmm(xs: list[float]) -> tuple[float, float, float]:
    return min(xs), statistics.median(xs), max(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-log-")
    try:
        t = time.perf_counter()
        store, db_path = build(root, a.records)
        print(f"built {a.records:,} records in {time.perf_counter() - t:.1f} s: {store}")

        log = RunLog(Store.open(store))
        view = log.view("bench")
        counts = {}
        for label, limit in ((f"-n {a.n}", a.n), ("full", None)):
            before = codec.STATS["objects_decoded"]
            k = 0
            for _ in history.entries(log, view):
                k += 1
                if limit is not None and k >= limit:
                    break
            counts[label] = codec.STATS["objects_decoded"] - before
        print(f"objects decoded in process: log -n {a.n}: {counts[f'-n {a.n}']:,}   whole log: {counts['full']:,}")

        py = sys.executable
        systems = {
            f"objstore log -n {a.n}": [py, "-m", "objstore", "--store", store, "log", "bench", "-n", str(a.n), "--no-pager"],
            "objstore log (whole)": [py, "-m", "objstore", "--store", store, "log", "bench", "--no-pager"],
            f"SQLite LIMIT {a.n}": [py, "-c", SQLITE_CHILD, db_path, str(a.n)],
            "SQLite (whole)": [py, "-c", SQLITE_CHILD, db_path, "0"],
        }
        walls: dict[str, list[float]] = {k: [] for k in systems}
        rss: dict[str, list[float]] = {k: [] for k in systems}
        for r in range(a.reps):
            for name, cmd in systems.items():  # interleaved: every system once per rep
                w, m = run_child(cmd)
                walls[name].append(w)
                rss[name].append(m)
            print(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in walls.items()), file=sys.stderr)
        print(f"\n{'':<34} {'min':>9} {'median':>9} {'max':>9}   peak RSS MB (max)")
        for name in systems:
            lo, md, hi = mmm(walls[name])
            print(f"{name + ' s':<34} {lo:>9.3f} {md:>9.3f} {hi:>9.3f}   {max(rss[name]):.0f}")
        n_key, full_key = f"objstore log -n {a.n}", "objstore log (whole)"
        ratios = {
            "objstore whole / -n": [f / n for f, n in zip(walls[full_key], walls[n_key], strict=True)],
            f"objstore -n / SQLite LIMIT {a.n}": [o / s for o, s in zip(walls[n_key], walls[f"SQLite LIMIT {a.n}"], strict=True)],
            "objstore whole / SQLite whole": [o / s for o, s in zip(walls[full_key], walls["SQLite (whole)"], strict=True)],
        }
        for name, xs in ratios.items():
            lo, md, hi = mmm(xs)
            print(f"{'ratio ' + name:<34} {lo:>8.2f}x {md:>8.2f}x {hi:>8.2f}x")
        print(f"this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
