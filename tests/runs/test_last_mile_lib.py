"""Issue 16's library fixes, each pinned where a Python caller meets it: git's time forms, a time
beyond a calendar, rewinding a branch with no records, compacting a run that is not a session,
the attempts a fork inherits, and the run listing's shape."""

from __future__ import annotations

import datetime as _dt

import pytest

import objstore
from objstore.errors import InvalidInput
from objstore.runs.history import parse_time

NOW = 1_800_000_000.0  # a fixed clock: every span is exact


@pytest.mark.parametrize("text,seconds", [
    ("2.days", 2 * 86400), ("2.days.ago", 2 * 86400), ("1.week.ago", 604800), ("1h30m", 5400), ("90s", 90),
    ("2 hours ago", 7200), ("3d", 3 * 86400), ("1w", 604800), ("30m", 1800), ("1.hour.30.minutes.ago", 5400),
    ("2 weeks 1 day ago", 15 * 86400), ("10 mins", 600), ("5hrs", 18000),
])
def test_git_s_span_forms_read_as_that_long_ago(text, seconds):
    assert NOW - parse_time(text, NOW) == seconds


def test_months_and_years_are_calendar_ones_as_in_git():
    t = _dt.datetime(2026, 3, 31, 12, 0).timestamp()
    assert _dt.datetime.fromtimestamp(parse_time("1.month.ago", t)) == _dt.datetime(2026, 2, 28, 12, 0)
    assert _dt.datetime.fromtimestamp(parse_time("2 years ago", t)) == _dt.datetime(2024, 3, 31, 12, 0)


@pytest.mark.parametrize("text", ["@" + "1" * 40, "@-" + "9" * 30, "99999999999999d", "2.foos", "ago", "1h30", "h", "", "3 ms"])
def test_what_is_not_a_time_a_calendar_can_show_is_refused(text):
    with pytest.raises(InvalidInput, match="cannot read time"):
        parse_time(text, NOW)


def test_rewinding_a_branch_with_no_records_says_so(tmp_path):
    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("r1")
    log.record_attempt(run, step=1, attempt=0, state="succeeded")
    log.rewind(run, to_lsn=1)  # branch 1 is live and has no records of its own yet
    with pytest.raises(InvalidInput) as e:
        log.rewind(run, to_lsn=0)
    assert str(e.value) == "invalid input: branch 1 of run r1 has no records yet; there is nothing to fork at LSN 0"


def test_a_run_that_is_not_a_session_cannot_be_compacted(tmp_path):
    from objstore import journal as J
    from objstore.storage import identity

    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("plain")
    J.record_turn(log, run, "user", "hello")
    before = log.store.engine.position()
    with pytest.raises(InvalidInput, match="run plain is not a session"):
        J.compact(log, run, J.StubCompactor(), host=None, key=identity.generate())
    assert log.store.engine.position() == before  # nothing written


def test_a_fresh_fork_inherits_the_attempts_before_its_fork_point(tmp_path):
    from objstore.runs.query import inherited_attempts

    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("r1")
    for step in range(5):
        log.record_attempt(run, step=step, attempt=0, state="failed" if step == 2 else "succeeded")
    log.rewind(run, to_lsn=3)  # keeps LSNs 0..3: run_started and the attempts of steps 0..2
    view = log.view(run)
    got = inherited_attempts(log, view, 1)
    assert [(b, lsn, a["step"], a["state"]) for b, lsn, a in got] == [(0, 1, 0, "succeeded"), (0, 2, 1, "succeeded"), (0, 3, 2, "failed")]
    assert inherited_attempts(log, view, 0) == []
    ep = objstore.episode(log, run, all_branches=True)
    assert ep.attempts(1) == [] and ep.branches[1].attempts_total == 3  # the episode JSON is unchanged (seed T1.7)


def test_the_run_listing_names_each_run_as_plain_runs_does(tmp_path):
    from objstore.runs import views
    from objstore.runs.resolve import resolve_run

    log = objstore.open_store(str(tmp_path / "s"))
    a = log.start_run(subject="alice", workflow_version="wf-1", when=1_700_000_000.0)
    log.start_run(subject="carol", when=1_700_000_000.5)
    log.start_run("named", subject="bob", when=1_700_000_001.0)
    rows = {r["run"]: r for r in views.runs(log)}
    assert rows["named"] == {"run": "named", "short_id": "named", "subject": "bob", "workflow_version": "1",
                             "started": 1_700_000_001.0, "live_branch": 0, "branch_count": 1}
    assert rows[a]["subject"] == "alice" and rows[a]["workflow_version"] == "wf-1" and rows[a]["started"] == 1_700_000_000.0
    assert len(rows[a]["short_id"]) < len(a) and resolve_run(log, rows[a]["short_id"]) == a
