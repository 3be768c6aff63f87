"""Times are finite and within the calendar everywhere a time enters (issue 15): RunLog.record_*,
start_run, fork and rewind (``when=``), ingest events (``time``), ``demo --at``, and verify names a
stored record whose time is outside it. Each refusal writes nothing: counted on the log position of
a real store on disk, and on the store's files."""

from __future__ import annotations

import json
import os

import pytest

from objstore.errors import InvalidInput
from objstore.runs import records as R
from objstore.runs import schemas as S
from objstore.runs.api import RunLog
from objstore.runs.verify import verify
from objstore.storage import codec
from objstore.storage.store import Store
from tests.helpers import run_cli, snapshot_tree

BAD_TIMES = [float("nan"), float("inf"), float("-inf"), 1e300, -1e300, R.TIME_MAX + 1, R.TIME_MIN - 1, 3e11, 10**30]
BAD_IDS = ["nan", "inf", "-inf", "1e300", "-1e300", "max+1", "min-1", "3e11", "10**30"]


@pytest.fixture
def disk_log(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r1", when=1.7e9)
    log.record_attempt("r1", 1, 0, "succeeded", when=1.7e9 + 1)
    return log


def _pos(log):
    """Every log's position (the store's one log before format 6; on 6 the store log's and each run's), with the runs
    there are: a refused write moves none and makes none."""
    return [(run, engine.position()) for run, engine in log.store.logs.all_logs()]


@pytest.mark.parametrize("when", BAD_TIMES, ids=BAD_IDS)
def test_record_attempt_refuses_a_time_outside_the_calendar_and_writes_nothing(disk_log, when):
    before = _pos(disk_log)
    with pytest.raises(InvalidInput, match="when: "):
        disk_log.record_attempt("r1", 2, 0, "failed", when=when)
    assert _pos(disk_log) == before
    assert [r.lsn for r in disk_log.records("r1")] == [0, 1]


@pytest.mark.parametrize("call", ["start_run", "record_intent", "commit_intent", "finish_run", "fork", "rewind", "append"])
@pytest.mark.parametrize("when", [float("nan"), 1e300, -1e300], ids=["nan", "1e300", "-1e300"])
def test_every_writer_refuses_it(disk_log, call, when):
    before = _pos(disk_log)
    calls = {
        "start_run": lambda: disk_log.start_run("r2", when=when),
        "record_intent": lambda: disk_log.record_intent("r1", "i", 1, "pay", False, when=when),
        "commit_intent": lambda: disk_log.commit_intent("r1", "i", when=when),
        "finish_run": lambda: disk_log.finish_run("r1", when=when),
        "fork": lambda: disk_log.fork("r1", 0, 0, when=when),
        "rewind": lambda: disk_log.rewind("r1", 0, when=when),
        "append": lambda: disk_log.append("r1", R.INTENT_COMMITTED, {"intent": "i"}, when=when),
    }
    with pytest.raises(InvalidInput) as e:
        calls[call]()
    assert "when: time" in str(e.value) and e.value.exit_code == 5
    assert _pos(disk_log) == before
    assert disk_log.store.read_ref("run/r2/live") is None


@pytest.mark.parametrize("when", [True, "1700000000", None.__class__, [1.0]], ids=["bool", "str", "type", "list"])
def test_a_time_is_a_number(disk_log, when):
    before = _pos(disk_log)
    with pytest.raises(InvalidInput, match="a time is a number of seconds since the epoch"):
        disk_log.record_attempt("r1", 2, 0, "failed", when=when)
    assert _pos(disk_log) == before


def test_the_calendar_edges_are_accepted_and_readable(disk_log, tmp_path):
    lo = disk_log.record_attempt("r1", 2, 0, "failed", when=R.TIME_MIN)
    hi = disk_log.record_attempt("r1", 3, 0, "failed", when=R.TIME_MAX)
    int_time = disk_log.record_attempt("r1", 4, 0, "failed", when=1_700_000_000)
    assert (lo.time, hi.time, int_time.time) == (R.TIME_MIN, R.TIME_MAX, 1.7e9)
    assert type(int_time.time) is float  # stored as float64, as always
    assert verify(disk_log) == []
    root = disk_log.store.root
    for tz in ("UTC", "Pacific/Kiritimati", "Etc/GMT+12"):  # the day of margin: every zone's local time exists
        _, out, err = run_cli("log", "r1", store=root, env_extra={"TZ": tz}, exit_code=0)
        assert err == "" and out.count("attempt") >= 4


def test_verify_names_a_stored_time_outside_the_calendar(disk_log):
    head = disk_log.store.read_ref("run/r1/branch/0")
    payload = {"run": "r1", "branch": 0, "lsn": 2, "parent": head, "kind": R.INTENT_COMMITTED, "time": 1e300,
               "body": {"intent": "i"}}
    assert S.schema_problem("record", payload) == ("field 'time': time 1e+300 is outside the calendar (-62135510400 to "
                                                   "253402214399 s since the epoch: 0001-01-02 to 9999-12-30 UTC)")
    assert S.schema_problem("record", dict(payload, time=float("nan"))) == "field 'time': time nan is not a finite number"
    assert S.schema_problem("record", dict(payload, time=1.7e9)) is None
    with disk_log.store.batch():  # crafted through the store, below RunLog's checks
        oid = disk_log.store.put(codec.RECORD, payload)
        disk_log.store.set_ref("run/r1/branch/0", head, oid, "crafted")
    lines = [p.line() for p in verify(disk_log)]
    assert any(line.startswith(f"malformed-object {oid.hex()}") and "outside the calendar" in line for line in lines), lines


def test_fork_object_time_is_checked_by_schema_problem():
    fork = {"run": "r1", "branch": 1, "parent_branch": 0, "parent_lsn": 0, "parent_record": b"\1" * 32,
            "parent_head": b"\2" * 32, "reason": "", "compensation": [], "time": 1.7e9}
    assert S.schema_problem("fork", fork) is None
    assert "outside the calendar" in S.schema_problem("fork", dict(fork, time=-1e300))


# -- the command line -----------------------------------------------------------------------------

@pytest.mark.parametrize("at", ["1e300", "nan", str(R.TIME_MAX - 10)])  # the last: its later ticks fall outside
def test_demo_at_outside_the_calendar_is_one_line_and_writes_nothing(tmp_path, at):
    store = str(tmp_path / "demo-store")
    _, out, err = run_cli("demo", "--at", at, store=store, env_extra={"OBJSTORE_CEILING_DIRECTORIES": str(tmp_path)}, exit_code=2)
    assert out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "'--at'" in err, err
    assert not os.path.exists(store)


def test_demo_at_a_good_time_still_works(tmp_path):
    store = str(tmp_path / "demo-store")
    run_cli("demo", "--run", "rdemo", "--at", "1700000000", store=store, exit_code=0)
    run_cli("log", "rdemo", store=store, exit_code=0)


def _line(time_value):
    return json.dumps({"v": 1, "type": "intent_committed", "run": "r1", "intent": "i", "time": time_value}) + "\n"


@pytest.mark.parametrize("t", [1e300, 3e11, R.TIME_MAX + 1], ids=["1e300", "3e11", "max+1"])  # 3e11: year 11476, taken before
def test_ingest_refuses_a_time_outside_the_calendar_and_writes_nothing(tmp_path, t):
    store = str(tmp_path / "s")
    RunLog(Store.init(store, fsync="off")).start_run("r1", when=1.7e9)
    before = snapshot_tree(store)
    _, _, err = run_cli("ingest", "-", store=store, input=_line(t).encode(), exit_code=5)
    assert err.startswith("objstore: error: ingest: line 1: time: expected float") and "Traceback" not in err
    assert snapshot_tree(store) == before
    run_cli("ingest", "-", store=store, input=_line(R.TIME_MAX).encode(), exit_code=0)  # the edge itself is a time
