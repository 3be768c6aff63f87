"""The state cache is only a cache: a damaged row (wrong column types written by hand or by
another version) never makes a query fail or answer wrongly, and a cache that cannot be
written fails with ``StateCacheError`` (exit 11, one line) — no ``sqlite3.Error`` leaves the
library or reaches the command line."""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers import run_cli, run_read_only, snapshot_tree, state_db_path

from objstore import RunLog, Store
from objstore.errors import StateCacheError
from objstore.runs.query import episode


def _store(tmp_path):
    path = str(tmp_path / "s")
    log = RunLog(Store.open(path, create=True))
    run = log.start_run("r1", subject="alice")
    for i in range(3):
        log.record_attempt(run, step=1, attempt=i + 1, state="failed" if i < 2 else "succeeded", error="boom" if i < 2 else None)
    log.rewind(run, 2, reason="retry")
    log.record_attempt(run, step=1, attempt=9, state="succeeded")
    return path, log, run


def _answers(log, run):
    state = episode(log, run, all_branches=True, source="state").to_json()
    cold = episode(log, run, all_branches=True, source="refold").to_json()
    return state, cold


# damage -> the exact `verify` line it leaves after a query has run, or None when the query itself
# noticed the bad row and dropped it (the next refresh folded it again).
DAMAGED_STATE = "state-diverged r1/{b}: cached folded state is damaged (not a folded state) [{db}]"
DAMAGE = {
    "head as text": ("UPDATE branch SET head='not an id'", None),
    "head of the wrong length": ("UPDATE branch SET head=x'00ff'", None),
    "tip as text": ("UPDATE branch SET tip_lsn='x'", None),
    "state as text": ("UPDATE branch SET state='{}'", None),
    "state not msgpack": ("UPDATE branch SET state=x'c1c1c1' WHERE branch=1", DAMAGED_STATE),
    "state a msgpack list": ("UPDATE branch SET state=x'90' WHERE branch=1", DAMAGED_STATE),
    "summary as an integer": ("UPDATE branch SET summary=7", None),
    "fork as text": ("UPDATE branch SET fork='f'", None),
    "parent lsn as text": ("UPDATE branch SET parent_lsn='p' WHERE branch=1", None),
    "record row as an integer": ("UPDATE recs SET data=5", None),
}


@pytest.mark.parametrize("sql,line", DAMAGE.values(), ids=list(DAMAGE))
def test_a_damaged_cache_row_is_never_trusted(tmp_path, sql, line):
    path, log, run = _store(tmp_path)
    good_state, good_cold = _answers(log, run)
    assert good_state == good_cold
    db = sqlite3.connect(state_db_path(path, run))
    db.execute(sql)
    db.commit()
    db.close()
    fresh = RunLog(Store.open(path))  # a new process's view of the damaged cache
    state, cold = _answers(fresh, run)
    assert (state, cold) == (good_state, good_cold)  # the query answers right whatever the row holds
    if line is None:
        run_cli("verify", store=path, exit_code=0)
    else:
        code, out, err = run_cli("verify", store=path, exit_code=1)
        assert out.splitlines() == [line.format(b=1, db=state_db_path(path, run))]
        run_cli("rebuild", store=path, exit_code=0)
        run_cli("verify", store=path, exit_code=0)
        assert _answers(RunLog(Store.open(path)), run) == (good_state, good_cold)


def test_a_cache_that_refuses_writes_is_state_cache_error_not_sqlite(tmp_path):
    path, log, run = _store(tmp_path)
    _answers(log, run)  # the cache exists
    db = sqlite3.connect(state_db_path(path, run))
    # A cache SQLite refuses to write (as a full disk or a foreign lock would), whoever runs the test.
    db.execute("CREATE TRIGGER refuse BEFORE INSERT ON branch BEGIN SELECT RAISE(ABORT, 'cache refuses writes'); END")
    db.commit()
    db.close()
    fresh = RunLog(Store.open(path))
    with pytest.raises(StateCacheError) as ei:
        fresh.state.rebuild(fresh)
    assert ei.value.exit_code == 11 and ei.value.code == "state-cache-error"
    assert str(ei.value) == ("state cache error while trying to refresh the state cache: cache refuses writes "
                             "(run 'objstore rebuild' to remake it from the objects)")
    code, out, err = run_cli("rebuild", store=path, exit_code=11)
    assert err == ("objstore: error: state cache error while trying to refresh the state cache: cache refuses writes "
                   "(run 'objstore rebuild' to remake it from the objects)\n")
    # queries still answer, from the log, while the cache refuses writes
    log.record_attempt(run, step=2, attempt=1, state="succeeded")
    fresh = RunLog(Store.open(path))
    assert episode(fresh, run, source="state").to_json() == episode(fresh, run, source="refold").to_json()


def test_a_read_only_cache_still_answers_queries(tmp_path):
    path, log, run = _store(tmp_path)
    _, cold = _answers(log, run)
    log.record_attempt(run, step=2, attempt=1, state="succeeded")  # the cache is now behind the log
    before = snapshot_tree(path)
    rc, state, err = run_read_only(path, "episode", run, "--all-branches", "--json")
    assert (rc, err) == (0, "")
    rc, refold, err = run_read_only(path, "episode", run, "--all-branches", "--json", "--source", "refold")
    assert (rc, err) == (0, "")
    assert state == refold  # the cache could not catch up: the answer came from the log, and is the new one
    assert json.loads(state) == json.loads(episode(log, run, all_branches=True, source="refold").to_json())
    assert episode(log, run, all_branches=True, source="refold").to_json() != cold
    assert snapshot_tree(path) == before
