"""A run's own fields — subject, workflow version, meta — are the log's, whatever ``state.db`` holds (issue 13,
item 4; invariants 9 and 15).

The cache's rows of a branch are confirmed against the log (tip, fork, record ids, attempt rows), but the folded
state and summary are derived content no such check sees: an attacker who rewrites the summary's ``subject`` in
``state.db`` (SQLite has no checksum to recompute; the blob is re-encoded msgpack) used to change the default
``episode`` answer. The run's fields are now read from its ``run_started`` record(s) in the log (one record per
run of a copy's chain), so ``episode`` answers byte for byte as ``--source refold`` does, exit 0, and verify
names the edited rows (``state-diverged``)."""

from __future__ import annotations

import sqlite3

import msgspec
import pytest
from helpers import run_cli, state_db_path

import objstore

_enc = msgspec.msgpack.Encoder(order="sorted")


def _store(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    run = log.start_run("r", subject="alice", workflow_version="7", meta={"team": "a"})
    log.record_attempt(run, 0, 0, "failed")
    log.record_attempt(run, 0, 1, "succeeded")
    log.rewind(run, 1, reason="again")
    log.record_attempt(run, 0, 2, "succeeded")
    cp = log.fork_run(run, run="cp")  # a copy: its own run_started, folded after its source's
    log.record_attempt(cp, 1, 0, "succeeded")
    for r in (run, cp):  # fill the cache
        run_cli("episode", r, "--all-branches", "--json", store=root, exit_code=0)
    return root, run, cp


def _rewrite(root, run, **fields):
    """Rewrite every cached row of ``run``: the folded state and the summary, as an attacker would."""
    db = sqlite3.connect(state_db_path(root, run))
    rows = db.execute("SELECT branch, state, summary FROM branch WHERE run=?", (run,)).fetchall()
    assert rows
    for b, state, summary in rows:
        st, su = msgspec.msgpack.decode(state), msgspec.msgpack.decode(summary)
        st.update(fields)
        su.update(fields)
        db.execute("UPDATE branch SET state=?, summary=? WHERE run=? AND branch=?", (_enc.encode(st), _enc.encode(su), run, b))
    db.commit()
    db.close()


EDITS = {"subject": {"subject": "mallory"}, "meta": {"meta": {"team": "evil"}}, "workflow version": {"workflow_version": "666"},
         "all three": {"subject": "mallory", "meta": None, "workflow_version": None}}


@pytest.mark.slow
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("which", ["run", "copy"])
def test_an_edited_run_field_in_state_db_changes_no_episode_answer(tmp_path, edit, which):
    root, run, cp = _store(tmp_path)
    target = run if which == "run" else cp
    before = {args: run_cli("episode", target, *args, store=root, exit_code=0)[1] for args in ((), ("--all-branches",))}
    _rewrite(root, target, **EDITS[edit])
    for args in (("--json",), ("--all-branches", "--json")):
        got = run_cli("episode", target, *args, store=root, exit_code=0)[1]
        cold = run_cli("episode", target, *args, "--source", "refold", store=root, exit_code=0)[1]
        assert got == cold, (args, got, cold)
        assert '"subject":"alice"' in got
    for args, out in before.items():  # the table too
        assert run_cli("episode", target, *args, store=root, exit_code=0)[1] == out
    log = objstore.open_store(root)
    assert objstore.episode(log, target, all_branches=True).to_json() == objstore.episode(log, target, all_branches=True, source="refold").to_json()
    view = log.view(target)
    for b in view.heads:
        assert log.state.summary(log, view, b)["subject"] == "alice"
        assert log.state.state(log, view, b)["subject"] == "alice"
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert out.splitlines() and all(line.startswith(f"state-diverged {target}/") for line in out.splitlines()), out
