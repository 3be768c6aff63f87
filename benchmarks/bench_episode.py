"""Issue 3 benchmark: episode query from materialized state vs cold re-fold, and state-path scaling.

    python benchmarks/bench_episode.py [N]    (default N = 100000 records, 10% of them attempts)

Builds a run of N records (N/10 attempts, the rest intents and commits) over
several branches made by rewinds, then times `episode(..., all_branches=True)`
served from the state cache (warm) and from a cold re-fold, in one process.
Then the state path on a 1 000-record run vs the N-record run, returning the
same number of attempts (the live branch). Since issue 13 the state path grows
with the live branch's lineage (the records it folds, its inherited ones too),
not only with the answer: it serves nothing it has not re-hashed against the
log's chain index, and the summary counts every attempt of the lineage.
"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import timed  # noqa: E402

from objstore import RunLog, Store  # noqa: E402
from objstore.runs.query import episode  # noqa: E402


def build(log, run, n, branches=5, live_attempts=100):
    """n records; the last branch (live) holds exactly live_attempts attempts."""
    log.start_run(run)
    per = (n - live_attempts * 10) // (branches - 1)
    k = 0
    for b in range(branches):
        count = per if b < branches - 1 else live_attempts * 10
        with log.store.batch():
            for i in range(count // 10):
                log.record_attempt(run, step=i, attempt=0, state="failed" if i % 4 == 0 else "succeeded", usage={"t": i})
                for _j in range(4):
                    k += 1
                    log.record_intent(run, f"i{k}", step=i, effect="e", idempotent=True)
                    log.commit_intent(run, f"i{k}")
                log.record_intent(run, f"x{k}", step=i, effect="e", idempotent=True)
        if b < branches - 1:
            view = log.view(run)
            tip = len(log.own_records(view, view.live)) - 1
            log.rewind(run, tip // 2, reason="bench")


def median(f, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[reps // 2]


def main(n):
    tmp = tempfile.mkdtemp(prefix="epbench-", dir=os.environ.get("BENCH_DIR"))
    log = RunLog(Store.init(os.path.join(tmp, "s"), fsync="off"))
    build(log, "big", n)
    build(log, "small", 1000, branches=2)
    t_warm, _ = timed(log.state.refresh, log, log.view("big"))
    atts = len(episode(log, "big", all_branches=True).attempts())
    t_state = median(lambda: episode(log, "big", all_branches=True).to_json())
    t_cold = median(lambda: episode(log, "big", all_branches=True, source="refold").to_json(), reps=3)
    assert episode(log, "big", all_branches=True).to_json() == episode(log, "big", all_branches=True, source="refold").to_json()
    print(f"run of {n} records, {atts} attempts over 5 branches (cache built once in {t_warm:.2f} s)")
    print(f"  episode --all-branches from state : {t_state * 1e3:8.2f} ms")
    print(f"  episode --all-branches cold re-fold: {t_cold * 1e3:8.2f} ms   state is {t_cold / t_state:.0f}x faster")
    episode(log, "small")
    s_small = median(lambda: episode(log, "small").to_json(), reps=21)
    s_big = median(lambda: episode(log, "big").to_json(), reps=21)
    la, lb = len(episode(log, "small").attempts()), len(episode(log, "big").attempts())
    print(f"  live branch from state: 1000-record run {s_small * 1e3:.2f} ms ({la} attempts) vs {n}-record run {s_big * 1e3:.2f} ms ({lb} attempts): ratio {s_big / s_small:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
