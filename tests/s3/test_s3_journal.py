"""T-745 on object storage: a Host's authorization and its write share one log position there too. No writer
lock exists on S3, so a revocation by another process can land between an update's decision and its write; the
grants the decision was taken on are the commit's read set, so the commit is run again on the new head and
refused — the log never holds a version written after its writer's revocation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import new_key

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import WriterRevoked
from objstore.journal import host as H
from objstore.runs.verify import verify
from objstore.storage import codec, identity, runrefs

CHILD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "journal", "host_snapshot_child.py")


def test_a_revocation_landing_between_decision_and_write_refuses_the_update(s3_url, tmp_path):
    log = RunLog(Store.init(s3_url))
    owner, _ = identity.ensure_owner_key(log.store)
    run = J.start_session(log, "alice", run="s1")
    w1, _ = new_key(tmp_path, "w1")
    J.grant(log, owner, run, w1.public, name="w1")
    v1, ver = J.update_journal(log, run, owner, {"entries": [{"id": "old", "text": "v1"}]})
    assert ver == 1
    host = H.LocalJournalHost(log)
    calls = []

    def revoke_in_another_process(req, principal):
        calls.append(principal.name)
        if len(calls) == 1:  # the first decision: another OS process revokes w1 before this commit is written
            out = subprocess.run([sys.executable, CHILD, "revoke-only", s3_url, run, w1.public], capture_output=True, timeout=120)
            assert out.returncode == 0 and out.stdout.strip() == b"done", out.stderr.decode()

    host.on_update_authorized = revoke_in_another_process
    with pytest.raises(WriterRevoked):
        J.update_journal(log, run, w1, {"entries": [{"id": "w", "text": "written by w1 while granted"}]}, host=host)
    assert calls == ["w1"]  # decided once granted; run again on the new head, refused before the hook
    fresh = RunLog(Store.open(s3_url))
    assert fresh.store.read_ref(runrefs.journal_ref(run)) == v1
    revocation = fresh.store.read_ref(J.grant_ref(run, w1.public))
    assert fresh.store.get_typed(revocation, codec.GRANT)["action"] == "revoke"
    assert verify(fresh) == []
