"""Issue 2 benchmark: appends through the public API, cold re-fold, fork cost vs branch length.

    python benchmarks/bench_runlog.py [N] [GROUP]    (defaults: N = 100000, GROUP = 1000)

Peer: SQLite WAL rows of the same attempt data (synchronous=FULL, one commit per group).
Both commit every GROUP records (group commit); both fsync at each commit.
"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import row, sqlite_peer, timed  # noqa: E402

from objstore import RunLog, Store  # noqa: E402

GROUP = int(sys.argv[2]) if len(sys.argv) > 2 else 1000


def attempts(n):
    for i in range(n):
        yield dict(step=i // 3, attempt=i % 3, state="failed" if i % 3 == 0 else "succeeded",
                   context={"path": "A", "i": i}, tools={"calls": ["search"]}, usage={"input_tokens": 100 + i % 50, "output_tokens": 20})


def main(n):
    tmp = tempfile.mkdtemp(prefix="runbench-", dir=os.environ.get("BENCH_DIR"))
    log = RunLog(Store.init(os.path.join(tmp, "s"), fsync="full"))
    run = log.start_run("bench")
    data = list(attempts(n))
    prompt = log.put_blob(b"shared prompt")

    def os_append():
        for g in range(0, n, GROUP):
            with log.store.batch():
                for a in data[g:g + GROUP]:
                    log.record_attempt(run, prompt=prompt, **a)

    t_os, _ = timed(os_append)

    db = sqlite_peer(os.path.join(tmp, "peer.sqlite"), "CREATE TABLE rec(run TEXT, branch INT, lsn INT, kind TEXT, step INT, attempt INT, state TEXT, prompt BLOB, context TEXT, tools TEXT, usage TEXT, time REAL, PRIMARY KEY(run, branch, lsn))")
    import json

    def sq_append():
        lsn = 1
        for g in range(0, n, GROUP):
            with db:
                rows = []
                for a in data[g:g + GROUP]:
                    rows.append(("bench", 0, lsn, "attempt", a["step"], a["attempt"], a["state"], prompt,
                                 json.dumps(a["context"]), json.dumps(a["tools"]), json.dumps(a["usage"]), time.time()))
                    lsn += 1
                db.executemany("INSERT INTO rec VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", rows)

    t_sq, _ = timed(sq_append)
    print(f"{n} attempt records, group commit every {GROUP}, fsync=full")
    row("objstore append (public API)", n / t_os, "rec/s")
    row("SQLite WAL rows (synchronous=FULL)", n / t_sq, "rec/s", f"objstore/SQLite = {t_sq / t_os:.2f}x")

    fresh = RunLog(Store.open(log.store.root))
    view = fresh.view(run)
    t_f, state = timed(fresh.refold, view, 0)
    assert state["records"] == n + 1
    row("cold re-fold (walk raw chain + fold)", (n + 1) / t_f, "rec/s")
    # The same in a fresh process (as `objstore` commands run): no warm allocator, no other live data.
    import subprocess

    code = ("import sys,time; from objstore import RunLog, Store; log=RunLog(Store.open(sys.argv[1])); v=log.view('bench');"
            "t=time.perf_counter(); s=log.refold(v,0); print(s['records']/(time.perf_counter()-t))")
    rate = float(subprocess.run([sys.executable, "-c", code, log.store.root], capture_output=True, text=True, check=True).stdout)
    row("cold re-fold, fresh process", rate, "rec/s")

    # fork cost: 100-record vs n-record branch, cache warm (the LSN index is the cache)
    small = log.start_run("small")
    with log.store.batch():
        for a in data[:99]:
            log.record_attempt(small, **a)
    res = {}
    for name, length in ((small, 100), (run, n + 1)):
        v = log.view(name)
        log.state.refresh(log, v)
        ts = []
        for _k in range(20):
            t = time.perf_counter()
            log.fork(name, 0, length // 2, reason="bench", make_live=False)
            ts.append(time.perf_counter() - t)
        res[length] = sorted(ts)[len(ts) // 2]
    print(f"fork (median of 20, fsync=full): 100-record branch {res[100] * 1e3:.2f} ms, {n + 1}-record branch {res[n + 1] * 1e3:.2f} ms, ratio {res[n + 1] / res[100]:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
