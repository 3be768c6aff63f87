"""Compensation is decided from the records and checked by verify (invariants 8 and 15).

A fork object whose compensation list disagrees with the parent's committed non-idempotent
intents is a verify problem with an exact line; the flags do not depend on the state cache.
"""

import os

from helpers import state_db_path

from objstore import RunLog, Store
from objstore.runs.verify import verify
from objstore.storage import codec


def build(root):
    log = RunLog(Store.init(root))
    run = log.start_run("pay")
    log.record_attempt(run, step=1, attempt=0, state="succeeded")                 # lsn 1
    log.record_intent(run, "charge", step=2, effect="charge_card", idempotent=False)  # lsn 2
    log.commit_intent(run, "charge")                                              # lsn 3
    log.record_intent(run, "cache", step=3, effect="cache_put", idempotent=True)  # lsn 4
    log.commit_intent(run, "cache")                                               # lsn 5
    log.record_attempt(run, step=4, attempt=0, state="failed")                   # lsn 6
    return log, run


def test_flags_come_from_the_records_not_the_cache(tmp_path):
    root = str(tmp_path / "s")
    log, run = build(root)
    from objstore.runs.query import episode

    episode(log, run)  # populate the state cache
    db = state_db_path(root, run)
    assert os.path.exists(db)
    with_cache = log.fork(run, 0, 1, reason="with cache", make_live=False).compensation
    log.state.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    fresh = RunLog(Store.open(root))
    without = fresh.fork(run, 0, 1, reason="without cache", make_live=False).compensation
    assert with_cache == without
    assert [(c["intent"], c["effect"], c["committed_lsn"]) for c in without] == [("charge", "charge_card", 3)]
    assert not os.path.exists(db), "fork never touched the cache"
    assert verify(fresh) == []


def forge(log, run, branch, compensation):
    view = log.view(run)
    b0 = log.own_records(view, 0)
    fk = {"run": run, "branch": branch, "parent_branch": 0, "parent_lsn": 1, "parent_record": b0[1].id,
          "parent_head": view.heads[0], "reason": "forged", "compensation": compensation, "time": 0.0}
    with log.store.batch():  # format 3: a branch ref moves to a fork object of the same commit
        fid = log.store.put(codec.FORK, fk)
        log.store.set_ref(f"run/{run}/branch/{branch}", None, fid, "forged")
    return fid


def test_a_fork_that_drops_the_flag_is_named(tmp_path):
    log, run = build(str(tmp_path / "s"))
    fid = forge(log, run, 1, [])
    assert [p.line() for p in verify(log)] == [
        f"bad-fork {fid.hex()}: compensation flags disagree with the committed non-idempotent intents of branch 0 "
        f"after LSN 1 (records say ['charge'], fork says []) [run/{run}/branch/1]"
    ]


def test_a_fork_that_invents_a_flag_is_named(tmp_path):
    log, run = build(str(tmp_path / "s"))
    view = log.view(run)
    cache_commit = log.own_records(view, 0)[5]
    real = log.fork(run, 0, 1, make_live=False).compensation
    invented = real + [{"intent": "cache", "step": 3, "effect": "cache_put", "committed_record": cache_commit.id, "committed_lsn": 5}]
    fid = forge(log, run, 2, invented)
    assert [p.line() for p in verify(log)] == [
        f"bad-fork {fid.hex()}: compensation flags disagree with the committed non-idempotent intents of branch 0 "
        f"after LSN 1 (records say ['charge'], fork says ['charge', 'cache']) [run/{run}/branch/2]"
    ]
