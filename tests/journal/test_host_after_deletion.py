"""A long-lived journal Host (``objstore journal-serve``, or one LocalJournalHost in an
agent process) after a session was deleted (issue 17).

"Covered runs vanish from every query, listing and export at once." The Host's startup selection
(``same_subject_newest``) walks ``run/*/journal`` refs and keeps a session whose ``log.subject(run)``
is the subject; ``ChainReader.subject`` is memoized, so a Host that had read the deleted session's
subject before the deletion still selects it, reads its journal (journal objects and blobs are not
refused by the erasure checks) and freezes its text into the *new* session's ``run_started`` body: the
deleted run's data is copied into a live run (and gc then keeps it: a live record holds it).
A fresh process skips the deleted session (``run_started`` raises Deleted).
"""

from __future__ import annotations

import json

from objstore import RunLog, Store
from objstore import journal as J
from objstore.lifecycle import delete as D
from objstore.storage import identity


def test_a_host_does_not_serve_the_journal_of_a_session_deleted_meanwhile(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    host = J.LocalJournalHost(log)  # the serving process
    s1 = J.start_session(log, "alice", host=host, key=owner)
    body = b'{"note":"the customer\'s home address"}'
    req = identity.sign_request(owner, "update", s1, params={"reflects_through": None, "checkpoint": None, "enabled": None},
                                body=body, expect_head=None)
    host.update(req, body)
    other = RunLog(Store.open(root))  # another process deletes the session
    D.delete_run(other, s1, reason="erasure request")
    s2 = J.start_session(log, "alice", host=host, key=owner)
    answer = json.loads(J.startup_event(log, s2)["answer"])
    assert answer["session"] != s1, answer["selection"]  # same_subject_newest picked the deleted session
    assert "home address" not in json.dumps(J.startup_event(log, s2))
