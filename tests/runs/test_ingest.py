"""Ingest of JSON Lines: schema checks, line numbers, all or nothing per run (issue 16: every line checked
first, then one commit per run; the same file again lands only the missing runs)."""

import io
import json
import os

import pytest
from helpers import is_per_run, is_state_file, run_cli, run_log_root, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import IngestError
from objstore.runs.ingest import ingest
from objstore.runs.verify import verify


def without_empty_logs(files):
    """The files of a store but a run's log that holds no entry (its lock, its first segment's header alone)."""
    from objstore.storage.log.format import SEG_HEADER

    return {k: v for k, v in files.items() if not (k.startswith("runs/") and (k.endswith("/lock") or (k.endswith("/0000000001.seg") and len(v) == SEG_HEADER.size)))}


def jl(*events):
    return "\n".join(json.dumps(e) for e in events) + "\n"


GOOD = [
    {"v": 1, "type": "run_started", "run": "ing", "subject": "alice", "workflow_version": "w2"},
    {"v": 1, "type": "attempt", "run": "ing", "step": 1, "attempt": 0, "state": "failed", "prompt": "hello", "error": "boom"},
    {"v": 1, "type": "attempt", "run": "ing", "step": 1, "attempt": 1, "state": "succeeded", "prompt": "hello", "output": "hi"},
    {"v": 1, "type": "intent", "run": "ing", "intent": "mail", "step": 2, "effect": "send_mail", "idempotent": False},
    {"v": 1, "type": "intent_committed", "run": "ing", "intent": "mail"},
    {"v": 1, "type": "rewind", "run": "ing", "to_lsn": 2, "reason": "undo"},
    {"v": 1, "type": "attempt", "run": "ing", "step": 2, "attempt": 0, "state": "succeeded"},
    {"v": 1, "type": "run_finished", "run": "ing", "status": "succeeded"},
]


def test_ingest_good_stream(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    summary = ingest(log, io.StringIO(jl(*GOOD)))
    assert summary["events"] == 8 and summary["records"] == 7 and summary["runs"] == ["ing"]
    assert summary["forks"][0]["compensation_required"] is True
    view = log.view("ing")
    assert view.live == 1
    b0 = log.own_records(view, 0)
    assert [r.kind for r in b0] == ["run_started", "attempt", "attempt", "intent", "intent_committed"]
    assert log.get_blob(b0[1].body["prompt"]) == b"hello"
    assert b0[1].body["prompt"] == b0[2].body["prompt"], "blob bodies stored once"
    assert len(log.own_records(view, 1)) == 2
    assert verify(log) == []


@pytest.mark.parametrize(
    "bad,msg",
    [
        ("{not json", "not JSON"),
        (json.dumps({"v": 2, "type": "attempt", "run": "ing"}), "schema version must be 1"),
        (json.dumps({"v": 1, "type": "teleport", "run": "ing"}), "unknown event type 'teleport'"),
        (json.dumps({"v": 1, "type": "attempt", "run": "ing", "step": 1, "attempt": 0, "state": "exploded"}), "state must be one of"),
        (json.dumps({"v": 1, "type": "attempt", "run": "../x", "step": 1, "attempt": 0, "state": "failed"}), "run id"),
        (json.dumps({"v": 1, "type": "attempt", "run": "ing", "step": 1, "attempt": 0, "state": "failed", "colour": 1}), "unknown field(s) for attempt: colour"),
        (json.dumps({"v": 1, "type": "rewind", "run": "ing", "to_lsn": 99}), "cannot fork at 99"),
        (json.dumps([1, 2]), "an event must be a JSON object"),
    ],
)
def test_bad_line_named_and_nothing_lands(tmp_path, bad, msg):
    log = RunLog(Store.init(str(tmp_path / "s")))
    stream = jl(*GOOD[:5]) + bad + "\n" + jl(*GOOD[5:])
    before = {k: v for k, v in snapshot_tree(log.store.root).items() if not is_state_file(k)}
    with pytest.raises(IngestError) as ei:
        ingest(log, io.StringIO(stream))
    assert str(ei.value).startswith("ingest: line 6: ")
    assert msg in str(ei.value)
    after = {k: v for k, v in snapshot_tree(log.store.root).items() if not is_state_file(k)}
    # Not one of the five good lines before it landed: no ref, no object (a store of logs may keep the run's
    # log made empty for the commit that did not land: a header, no entry).
    assert without_empty_logs({k: v for k, v in after.items() if not k.startswith("tmp")}) == \
        {k: v for k, v in before.items() if not k.startswith("tmp")}
    assert log.runs() == []
    assert verify(log) == []


def test_a_run_refused_when_applied_does_not_land_and_the_other_runs_do(tmp_path):
    """Was "nothing lands" for a line of another run refused when applied (run "ghost", line 6, between run
    "ing"'s lines): all or nothing is per run since issue 16. Run "ing" lands whole, "ghost" not at all — not
    even its good line before the bad one — and the error names line 6."""
    log = RunLog(Store.init(str(tmp_path / "s")))
    ghost_ok = {"v": 1, "type": "run_started", "run": "ghost2"}
    bad = {"v": 1, "type": "attempt", "run": "ghost", "step": 1, "attempt": 0, "state": "failed"}
    stream = jl(*GOOD[:5], bad, *GOOD[5:], ghost_ok, {"v": 1, "type": "rewind", "run": "ghost2", "to_lsn": 99})
    with pytest.raises(IngestError) as ei:
        ingest(log, io.StringIO(stream))
    assert str(ei.value) == "ingest: line 6: run not found: ghost"
    summary = ei.value.summary
    assert summary["landed"] == ["ing"] and [f["run"] for f in summary["failed"]] == ["ghost", "ghost2"]
    assert log.runs() == ["ing"] and len(log.records("ing", all_branches=True)) == 7
    assert verify(log) == []


def test_the_same_file_again_lands_only_the_missing_runs(tmp_path):
    root = str(tmp_path / "s")
    two = [dict(e, run="two") for e in GOOD]
    rc, out, err = run_cli("ingest", "-", store=root, input=jl(*GOOD).encode(), exit_code=0)
    before = snapshot_tree(root)
    rc, out, err = run_cli("ingest", "-", "--json", store=root, input=(jl(*GOOD) + jl(*two)).encode(), exit_code=0)
    got = json.loads(out)
    assert got["landed"] == ["two"] and got["skipped"] == ["ing"] and got["records"] == 7
    log = RunLog(Store.open(root))
    assert len(log.records("ing", all_branches=True)) == 7 and len(log.records("two", all_branches=True)) == 7
    if is_per_run(root):  # run "ing"'s log gained nothing (a store of one log: its records are counted above)
        ing = os.path.relpath(run_log_root(root, "ing"), root)
        now = snapshot_tree(root)
        assert {p: d for p, d in before.items() if p.startswith(ing) and p.endswith(".seg")} == \
            {p: d for p, d in now.items() if p.startswith(ing) and p.endswith(".seg")}
    # a run present with other events: exit 7 naming it, the other runs still land
    other = [GOOD[0], dict(GOOD[1], state="succeeded")]
    three = [dict(e, run="three") for e in GOOD[:2]]
    rc, out, err = run_cli("ingest", "-", store=root, input=(jl(*other) + jl(*three)).encode(), exit_code=7)
    assert "run ing did not land: ingest: line 1: run ing is in the store already, with other events" in err, err
    assert "1 run(s) landed: three" in out
    assert len(RunLog(Store.open(root)).records("ing", all_branches=True)) == 7
    # an event's time is compared; an event without one is not
    timed = [dict(e, run="four", time=1_700_000_000.0 + i) for i, e in enumerate(GOOD[:3])]
    run_cli("ingest", "-", store=root, input=jl(*timed).encode(), exit_code=0)
    run_cli("ingest", "-", store=root, input=jl(*timed).encode(), exit_code=0)
    later = [dict(e, time=e["time"] + 1) for e in timed]
    run_cli("ingest", "-", store=root, input=jl(*later).encode(), exit_code=7)


def test_one_commit_of_several_runs_is_refused_on_a_store_of_logs(tmp_path):
    """``apply_events`` (the whole file as one commit) of two runs: on a store with a log per run (and on object
    storage, tests/s3/test_s3_suites.py) a commit writes one run's log, so it is MultiLogBatch (exit 15) with nothing
    written; on a store of one log on disk it lands."""
    from objstore.errors import MultiLogBatch
    from objstore.runs.ingest import apply_events, read_events

    log = RunLog(Store.init(str(tmp_path / "s")))
    events = read_events(io.StringIO(jl(*GOOD[:2], *[dict(e, run="two") for e in GOOD[:2]])))
    if not is_per_run(log.store.root) and log.store.url is None:
        apply_events(log, events)
        assert log.runs() == ["ing", "two"]
        return
    before = {k: v for k, v in snapshot_tree(log.store.root).items() if not k.startswith(("tmp", "state.db"))}
    with pytest.raises(MultiLogBatch) as ei:
        apply_events(log, events)
    assert ei.value.exit_code == 15 and "two" in str(ei.value)
    after = {k: v for k, v in snapshot_tree(log.store.root).items() if not k.startswith(("tmp", "state.db"))}
    assert {k for k in after if ".seg" in k and after[k] != before.get(k)} <= {k for k in after if k.startswith("runs")}
    assert RunLog(Store.open(log.store.root)).runs() == []


def test_ingest_cli_stdin_and_error_exit(tmp_path):
    root = str(tmp_path / "s")
    rc, out, err = run_cli("ingest", "-", store=root, input=jl(*GOOD).encode(), exit_code=0)
    assert rc == 0, err
    assert out.startswith("ingested 8 event(s): 7 record(s), 1 new run(s), 1 fork(s)")
    assert "COMPENSATION REQUIRED" in err
    rc, out, err = run_cli("ingest", "-", store=root, input=(jl(GOOD[0] | {"run": "two"}) + "oops\n").encode(), exit_code=5)
    assert rc == 5 and err.strip() == "objstore: error: ingest: line 2: not JSON: Expecting value: line 1 column 1 (char 0)"
    rc, out, err = run_cli("runs", store=root, exit_code=0)
    assert "two" not in out


def test_blob_fields_by_id(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    pid = log.put_blob(b"stored earlier")
    stream = jl(GOOD[0], {"v": 1, "type": "attempt", "run": "ing", "step": 1, "attempt": 0, "state": "succeeded", "prompt": {"blob": pid.hex()}})
    ingest(log, io.StringIO(stream))
    rec = log.records("ing")[-1]
    assert rec.body["prompt"] == pid and log.get_blob(pid) == b"stored earlier"
    ghost = "ab" * 32
    stream = jl({"v": 1, "type": "attempt", "run": "ing", "step": 2, "attempt": 0, "state": "failed", "output": {"blob": ghost}})
    with pytest.raises(IngestError, match=f"line 1: output: blob {ghost} is not in the store"):
        ingest(log, io.StringIO(stream))
