"""Review of issue 17: deleting a session removes its compaction segments' bodies at gc.

docs/FORMAT.md "What gc removes" and the gc docstring: "the fork, journal and segment objects of
deleted runs". ``gc.doomed`` collects only fork objects into ``other``; a compaction segment object of
a deleted session and the blobs only it names (``input``: the compactor's request, every summarized
turn's text verbatim; ``summary``; ``snapshot``) keep their bodies, so a secret typed in a turn of
the deleted session is still in the store after ``delete`` + ``gc``.
"""

from __future__ import annotations

import secrets

from test_erasure import found

from objstore import RunLog, Store
from objstore.errors import BodyRemoved
from objstore.journal import compaction as C
from objstore.journal import sessions as S
from objstore.journal.compactor import StubCompactor
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report
from objstore.storage import identity


def test_delete_and_gc_of_a_compacted_session_leaves_no_turn_text(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    secret = secrets.token_bytes(16).hex().encode()
    run = S.start_session(log, subject="customer-9")
    log.start_run("kept")
    log.record_attempt("kept", 0, 0, "succeeded")
    for i in range(6):
        S.record_turn(log, run, "user", f"turn {i}: my card is {secret.decode()}")
    res = C.compact(log, run, StubCompactor(), host=None, key=owner, keep_tail=1)
    assert found(root, secret) == ["log/0000000001.seg"]
    D.delete_run(log, run, reason="erasure request")
    G.gc(Store.open(root))
    fresh = Store.open(root)
    assert verify_report(RunLog(fresh), check_state=False).problems == []
    assert found(root, secret) == []  # still in log/0000000001.seg: the segment's "input" blob
    try:
        fresh.engine.read(res.segment_id)
        kept = True
    except BodyRemoved:
        kept = False
    assert not kept, "the deleted session's compaction segment object keeps its body"


def test_delete_and_gc_of_a_session_with_a_journal_leaves_no_journal_text(tmp_path):
    """The same through the CLI for a journal version (``journal update``): its body blob is named by
    the journal object only, which gc never removes for a deleted run."""
    import json

    from helpers import run_cli

    root = str(tmp_path / "s")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home")}
    run_cli("init", store=root, env_extra=env, exit_code=0)
    _, out, _ = run_cli("session", "start", "--subject", "customer-9", "--json", store=root, env_extra=env, exit_code=0)
    run = json.loads(out)["run"]
    secret = secrets.token_bytes(16).hex()
    run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root, env_extra=env,
            input=json.dumps({"note": secret}).encode(), exit_code=0)
    assert found(root, secret.encode()) == ["log/0000000001.seg"]
    run_cli("delete", run, "--reason", "erasure request", store=root, env_extra=env, exit_code=0)
    run_cli("gc", store=root, env_extra=env, exit_code=0)
    run_cli("verify", store=root, env_extra=env, exit_code=0)
    assert found(root, secret.encode()) == []  # still in log/0000000001.seg: the journal's body blob


def test_a_redacted_turn_does_not_make_the_whole_session_unreadable(tmp_path):
    """Redaction is for "an API key that leaked into one prompt". A session turn whose content blob is
    redacted: ``context`` and ``compact`` raise Redacted for the whole session (restore._turn_text reads
    every turn's blob unguarded), while a *deleted* turn folds to "" in both
    (tests/test_delete.py::test_a_sessions_deleted_turn_is_header_only_in_compaction_and_context)."""
    from objstore import journal as J

    log = RunLog(Store.init(str(tmp_path / "s")))
    owner, _ = identity.ensure_owner_key(log.store)
    s = J.start_session(log, "alice", run="S")
    turns = [J.record_turn(log, s, "user", f"turn {i} key-{i}") for i in range(4)]
    D.redact(log, turns[1].body["content"], reason="api key in a prompt")
    texts = [i.get("text") for i in J.context(log, s) if i.get("kind") == "turn"]  # Redacted
    assert texts[0] == "turn 0 key-0" and texts[2:] == ["turn 2 key-2", "turn 3 key-3"]
    assert "key-1" not in (texts[1] or "")
    res = J.compact(log, s, J.StubCompactor(), host=J.LocalJournalHost(log), key=owner, keep_tail=1)
    assert b"key-1" not in res.request_bytes
