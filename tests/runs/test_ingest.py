"""Ingest of JSON Lines: schema checks, line numbers, all-or-nothing."""

import io
import json

import pytest
from helpers import is_state_file, run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import IngestError
from objstore.runs.ingest import ingest
from objstore.runs.verify import verify


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
        (json.dumps({"v": 1, "type": "attempt", "run": "ghost", "step": 1, "attempt": 0, "state": "failed"}), "run not found: ghost"),
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
    # Not one of the five good lines before it landed: no ref, no object.
    assert {k: v for k, v in after.items() if not k.startswith("tmp")} == {k: v for k, v in before.items() if not k.startswith("tmp")}
    assert log.runs() == []
    assert verify(log) == []


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
