"""Retention by last activity, and one time parser for every AGE and every --since/--until.

`gc --delete-runs-older-than 90d` keys on a run's start: a months-long chat thread started 100 days ago
and written to today goes. `gc --delete-runs-inactive-for AGE` keys on last activity — each run's newest
entry (its newest record or fork, on any branch), read at gc time — and keeps it. Every AGE
(--delete-runs-older-than, --delete-runs-inactive-for, --prune-unreferenced-older-than) and every
--since/--until is read by one parser (objstore.runs.history.parse_time): '2 hours', 1.5d, 2.days, 90d,
ISO dates. The clock is faked as the other retention tests fake it: records carry ``when=``.
"""

import datetime as _dt
import json
import time

import pytest
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import InvalidInput
from objstore.lifecycle import gc as G
from objstore.runs import history as H
from objstore.runs.history import parse_time
from objstore.storage import identity

DAY = 86400


def _store(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    identity.ensure_owner_key(log.store)
    now = time.time()
    # a thread started 100 days ago and written to today; one started 100 days ago, quiet for 95;
    # one forked (rewound) 2 days ago after 120 quiet days; a young one
    log.start_run("thread", when=now - 100 * DAY)
    log.record_attempt("thread", 0, 0, "succeeded", when=now - 100 * DAY)
    log.record_attempt("thread", 1, 0, "succeeded")  # today
    log.start_run("stale", when=now - 100 * DAY)
    log.record_attempt("stale", 0, 0, "succeeded", output=log.put_blob(b"stale body"), when=now - 95 * DAY)
    log.start_run("rewound", when=now - 130 * DAY)
    log.record_attempt("rewound", 0, 0, "succeeded", when=now - 130 * DAY)
    log.record_attempt("rewound", 1, 0, "failed", when=now - 120 * DAY)
    log.rewind("rewound", to_lsn=1, reason="try again", when=now - 2 * DAY)
    log.start_run("young", when=now - 10 * DAY)
    log.store.engine.close()
    return root


def test_inactive_for_keys_on_the_newest_entry(tmp_path):
    root = _store(tmp_path)
    before = snapshot_tree(root)
    _, out, _ = run_cli("gc", "--delete-runs-inactive-for", "90d", "--reason", "retention", "--dry-run", "--json", store=root, exit_code=0)
    assert json.loads(out) == {"dry_run": True, "would_delete": ["stale"]}
    assert snapshot_tree(root) == before
    # the option keyed on the start takes the thread written to today, as its help says
    _, out, _ = run_cli("gc", "--delete-runs-older-than", "90d", "--reason", "retention", "--dry-run", "--json", store=root, exit_code=0)
    assert json.loads(out)["would_delete"] == ["rewound", "stale", "thread"]
    _, out, _ = run_cli("gc", "--delete-runs-inactive-for", "90d", "--reason", "retention", "--json", store=root, exit_code=0)
    got = json.loads(out)
    assert got["deleted_runs"] == ["stale"] and got["removed_blobs"] == 1
    _, out, _ = run_cli("runs", store=root, exit_code=0)
    assert all(r in out for r in ("thread", "rewound", "young")) and "stale" not in out
    run_cli("verify", store=root, exit_code=0)


def test_the_help_says_what_each_option_keys_on(tmp_path):
    _, out, _ = run_cli("gc", "--help", cwd=str(tmp_path), exit_code=0)
    flat = " ".join(out.split())
    assert "--delete-runs-inactive-for AGE" in flat and "newest" in flat
    options = flat[flat.index("Options:"):]
    older = options[options.index("--delete-runs-older-than AGE"):options.index("--delete-runs-inactive-for AGE")]
    assert "start" in older and "--delete-runs-inactive-for" in older


def test_runs_inactive_for_in_the_library(tmp_path):
    root = _store(tmp_path)
    log = RunLog(Store.open(root))
    assert G.runs_inactive_for(log, 90 * DAY) == ["stale"]
    assert G.runs_inactive_for(log, 1 * DAY) == ["stale", "young", "rewound"]  # oldest activity first
    assert G.runs_older_than(log, 90 * DAY) == ["rewound", "stale", "thread"]


@pytest.mark.parametrize("text, seconds", [("90d", 90 * DAY), ("1.5d", 1.5 * DAY), ("2.days", 2 * DAY), ("2 hours", 7200),
                                           ("'2 hours'".strip("'"), 7200), ("1h30m", 5400), ("2w", 14 * DAY), ("45s", 45),
                                           ("2 days ago", 2 * DAY), ("0.5h", 1800)])
def test_one_parser_for_ages_and_times(text, seconds):
    now = 1_800_000_000.0
    assert G.parse_age(text, now) == pytest.approx(seconds)
    assert H.parse_time(text, now) == pytest.approx(now - seconds)


def test_an_iso_date_is_an_age_too():
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert G.parse_age("2027-01-14T08:00:00+00:00", now) == DAY
    with pytest.raises(InvalidInput):
        G.parse_age("2027-01-16T08:00:00+00:00", now)  # in the future: no age
    for bad in ("5x", "-1d", "soon", "1.5", ""):
        with pytest.raises(InvalidInput):
            G.parse_age(bad, now)


@pytest.mark.parametrize("age", ["2 hours", "1.5d", "2.days", "2026-01-01"])
def test_gc_and_log_take_every_form(tmp_path, age):
    root = _store(tmp_path)
    run_cli("gc", "--delete-runs-older-than", age, "--reason", "r", "--dry-run", store=root, exit_code=0)
    run_cli("gc", "--delete-runs-inactive-for", age, "--reason", "r", "--dry-run", store=root, exit_code=0)
    run_cli("gc", "--prune-unreferenced-older-than", age, "--json", store=root, exit_code=0)
    run_cli("log", "thread", "--since", age, store=root, exit_code=0)


def test_the_two_retention_options_do_not_mix(tmp_path):
    root = _store(tmp_path)
    _, _, err = run_cli("gc", "--delete-runs-older-than", "1d", "--delete-runs-inactive-for", "1d", "--reason", "r", store=root, exit_code=2)
    assert "one of" in err
    _, _, err = run_cli("gc", "--delete-runs-inactive-for", "1d", store=root, exit_code=5)
    assert "--reason" in err


# Issue 16's library fixes, each pinned where a Python caller meets it.
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
