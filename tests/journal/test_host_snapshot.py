"""One log position per Host request (issue 15; seed T-745's "same transaction").

A key revoked by another OS process between a Host's authorization and its journal read,
while that process also writes a newer journal version, is never served the newer version:
the Host answers as of the position it authorized at. The Host is paused at its hook
(``LocalJournalHost.on_authorized``) — in this process for the in-process Host, in the
Backend Host's own process (``backend.serve``, tests/journal/host_snapshot_child.py) for the Backend —
and the revocation comes from a separate OS process (tests/journal/host_snapshot_child.py revoke).
Each test then checks that the window really held both changes: the journal is at version 2
and the same key is now refused.
"""

import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest
from helpers import log_engine_of, new_key

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import WriterRevoked
from objstore.journal.backend import BackendHost
from objstore.storage import codec, identity

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "host_snapshot_child.py")
OLD_TEXT = "the version as of the authorization"

# (grant scope, how the worker reads): a session grant and a compaction read of that session
# (its refs are captured with the request); a subject grant and a startup read that falls back
# to the newest journal of the subject (another session's journal ref, walked back to the
# position; a session started in the window must not be chosen either).
SHAPES = ["run-compaction", "subject-startup-fallback"]


def _env(tmp_path, shape):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    run = J.start_session(log, "alice", run="s1")
    w1, _ = new_key(tmp_path, "w1")
    if shape == "run-compaction":
        J.grant(log, owner, run, w1.public, name="w1")
    else:
        J.grant(log, owner, None, w1.public, subject="alice", name="w1")
    jid, ver = J.update_journal(log, run, owner, {"entries": [{"id": "old", "text": OLD_TEXT}]})
    assert ver == 1
    body = log.store.get_blob(log.store.get_typed(jid, codec.JOURNAL)["body"])
    return root, log, run, w1, jid, body


def _request(w1, run, shape):
    if shape == "run-compaction":
        return identity.sign_request(w1, "read", run, params={"purpose": "compaction", "budget": 65536, "predecessor": None})
    return identity.sign_request(w1, "read", None, subject="alice", params={"purpose": "startup", "budget": 65536, "predecessor": None})


def _revoke_in_other_process(root, run, w1, shape):
    scope = "run" if shape == "run-compaction" else "subject"
    out = subprocess.run([sys.executable, CHILD, "revoke", root, run, w1.public, scope, "s3"],
                         capture_output=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == b"done", out.stderr.decode()


def _check_answer(raw, run, jid, body, shape):
    """The answer's bytes name version 1 (the one as of the authorization), never the newer body."""
    assert b"NEWER" not in raw
    a = json.loads(raw)
    assert a["outcome"] == J.PRESENT and a["session"] == run and a["journal"] == jid.hex() and a["version"] == 1
    assert a["text"].encode() == body and a["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert a["selection"]["rule"] == ("current" if shape == "run-compaction" else "same_subject_newest")
    # the session started in the window is not even tried
    assert [t["session"] for t in a["selection"]["tried"]] == [run]


def _check_window_held_both(log, run, w1, shape, host):
    cur_id, cur = J.current_journal(log, run)
    assert cur["version"] == 2 and b"NEWER" in log.store.get_blob(cur["body"])
    assert J.current_journal(log, "s3")[1]["version"] == 1
    with pytest.raises(WriterRevoked):
        host.read(_request(w1, run, shape))


@pytest.mark.parametrize("shape", SHAPES)
def test_local_host_answers_as_of_its_authorization(tmp_path, shape):
    root, log, run, w1, jid, body = _env(tmp_path, shape)
    host = J.LocalJournalHost(log)
    paused = []

    def pause(req, principal):
        paused.append(principal.name)
        _revoke_in_other_process(root, run, w1, shape)

    host.on_authorized = pause
    answer = host.read(_request(w1, run, shape))
    assert paused == ["w1"], "the Host paused once, after authorizing w1"
    _check_answer(codec.canonical_json(answer), run, jid, body, shape)
    host.on_authorized = None
    _check_window_held_both(log, run, w1, shape, host)


@pytest.mark.parametrize("shape", SHAPES)
def test_backend_host_answers_as_of_its_authorization(tmp_path, shape):
    root, log, run, w1, jid, body = _env(tmp_path, shape)
    sock = str(tmp_path / "host.sock")
    server = subprocess.Popen([sys.executable, CHILD, "serve", root, sock], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert server.stdout.readline() == b"ready\n", server.stderr.read().decode()
        client = BackendHost(sock, timeout=300)
        got: list = []
        t = threading.Thread(target=lambda: got.append(_try(client.read, _request(w1, run, shape))))
        t.start()
        # the Backend's own process is paused between its authorization and its journal read
        # (bounded: a Host that never gets there fails the test instead of hanging the suite)
        poll = select.poll()  # not select(): the suite may hold descriptors above FD_SETSIZE by now
        poll.register(server.stdout, select.POLLIN)
        assert poll.poll(120_000), f"the Backend never reached its hook; client got {got}"
        assert server.stdout.readline() == b"authorized w1\n", got
        _revoke_in_other_process(root, run, w1, shape)
        server.stdin.write(b"go\n")
        server.stdin.flush()
        t.join()
        ok, raw = got[0]
        assert ok, raw
        _check_answer(raw, run, jid, body, shape)
        # the refusal is decided before the hook: nothing to let go on
        _check_window_held_both(log, run, w1, shape, client)
    finally:
        server.terminate()
        server.wait(60)


def _try(fn, *args):
    try:
        return True, fn(*args)
    except Exception as e:  # reported by the test thread's caller
        return False, repr(e)


def _blocked_on_a_lock_or_done(p):
    """Wait until process ``p`` waits for a file lock (a ``->`` line of /proc/locks) or has ended."""
    deadline = time.monotonic() + 120  # bounded, however slow the machine; never an assertion on time
    while p.poll() is None and time.monotonic() < deadline:
        with open("/proc/locks") as f:
            if any("->" in line and f" {p.pid} " in line for line in f):
                return
        time.sleep(0.01)


def test_update_is_decided_under_the_writer_lock(tmp_path):
    """A revocation by another process cannot land between an update's decision and its write:
    it waits for the writer lock the decision was taken under, so the log holds the version,
    then the revocation (not a version written after its writer was revoked)."""
    root, log, run, w1, _, _ = _env(tmp_path, "run-compaction")
    host = J.LocalJournalHost(log)
    revoker = []

    def hook(req, principal):
        p = subprocess.Popen([sys.executable, CHILD, "revoke-only", root, run, w1.public], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        revoker.append(p)
        _blocked_on_a_lock_or_done(p)

    host.on_update_authorized = hook
    vid, ver = J.update_journal(log, run, w1, {"entries": [{"id": "w", "text": "written by w1 while granted"}]}, host=host)
    out, err = revoker[0].communicate(timeout=120)
    assert revoker[0].returncode == 0 and out.strip() == b"done", err.decode()
    engine = log_engine_of(log.store, run)  # the run's log holds its grant refs and its journal (the one log before 6)
    revocation = log.store.read_ref(J.grant_ref(run, w1.public))
    assert log.store.get_typed(revocation, codec.GRANT)["action"] == "revoke"
    assert ver == 2 and engine.loc_entry(vid) < engine.loc_entry(revocation), "the version landed before the revocation"
    # so it was written by a key granted at its log position: served, not 'untrusted'
    owner = identity.load_key(identity.owner_key_path())
    a = host.read(identity.sign_request(owner, "read", run, params={"purpose": "compaction", "budget": 65536, "predecessor": None}))
    assert a["outcome"] == J.PRESENT and a["journal"] == vid.hex() and a["version"] == 2


def test_enable_copies_the_head_it_read_or_conflicts(tmp_path, monkeypatch):
    """``set_journal_enabled`` copies the body of the head it read; a version another process
    writes between that read and the update is a Conflict, never silently replaced by the older body."""
    from objstore.errors import Conflict
    from objstore.journal import updates as journal_module  # where set_journal_enabled reads the head

    root, log, run, w1, _, _ = _env(tmp_path, "run-compaction")
    w1_path = str(tmp_path / "w1.key")
    real = journal_module.current_journal
    calls = []

    def read_then_another_process_writes(lg, r):
        got = real(lg, r)
        if not calls:
            calls.append(1)
            out = subprocess.run([sys.executable, os.path.join(HERE, "journal_writer.py"), root, run, w1_path,
                                  json.dumps({"entries": [{"id": "n", "text": "NEWER, from another process"}]})],
                                 capture_output=True, timeout=120)
            assert out.returncode == 0, out.stderr.decode()
        return got

    monkeypatch.setattr(journal_module, "current_journal", read_then_another_process_writes)
    with pytest.raises(Conflict):
        J.set_journal_enabled(log, run, w1, False)
    monkeypatch.undo()
    _, cur = J.current_journal(log, run)
    assert cur["version"] == 2 and cur["enabled"] is True and b"NEWER" in log.store.get_blob(cur["body"])


@pytest.mark.parametrize("pred", [["s1"], {"run": "s1"}, 7, "../s1", "no-such-session"])
def test_a_predecessor_that_names_no_session_is_absent(tmp_path, pred):
    """A startup read whose predecessor is not a run id (a list was a TypeError out of the Host)
    tries it as absent, then falls back to the subject's newest journal, as of its position."""
    root, log, run, w1, jid, body = _env(tmp_path, "subject-startup-fallback")
    req = identity.sign_request(w1, "read", None, subject="alice", params={"purpose": "startup", "budget": 65536, "predecessor": pred})
    a = J.LocalJournalHost(log).read(req)
    assert a["selection"]["tried"][0] == {"session": pred, "rule": "predecessor", "outcome": J.ABSENT, "reason": "no such session"}
    assert a["outcome"] == J.PRESENT and a["journal"] == jid.hex() and a["selection"]["rule"] == "same_subject_newest"
