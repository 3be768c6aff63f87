"""Cross-log rules of a store of a log per run (format 6): a run-log entry judged by the store log names the
store-log position it read (its run's ``cite`` ref), readers apply its rules there, and a run's log never goes back
along the store log. A subject-wide revocation fences each run of the subject.

The forgeries are written the way an attacker with file access and the library writes them: a bare ``LogEngine``
over the run's log directory, which applies that log's own rules only (no store log), so the entry lands on disk;
an honest reader (``Store.open``) then applies it with the store log and refuses it.
"""

import os

import pytest
from helpers import new_key, run_log_root

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import CorruptLog, Refused
from objstore.lifecycle import delete as D
from objstore.storage import codec, identity, runrefs
from objstore.storage.fileutil import FsyncPolicy
from objstore.storage.log.local import LogEngine


def _env(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=6))
    owner, _ = identity.ensure_owner_key(log.store)
    run = J.start_session(log, "alice", run="r1")
    recs = [log.record_attempt(run, i, 0, "succeeded") for i in range(4)]
    w, _ = new_key(tmp_path, "w")
    J.grant(log, owner, None, w.public, subject="alice", rights=("read", "write", "delete"), name="w")
    return root, log, owner, run, recs, w


def _cite(log, run):
    return runrefs.parse_cite(log.store.run_refs(run).get(runrefs.cite_ref(run)))


def test_a_deletion_entry_cites_the_store_log_and_is_judged_there(tmp_path):
    root, log, owner, run, recs, w = _env(tmp_path)
    store_pos = log.store.logs.store_log.position()
    did = D.delete_records(log, run, [recs[1].id], reason="pii", key=w)
    assert did is not None
    cite = _cite(log, run)
    assert cite == (store_pos.entry, store_pos.checksum)  # the position its grant was read at
    # the grant is revoked later: the deletion, judged where it cites, still holds for every reader
    J.revoke(log, owner, None, w.public, subject="alice", reason="left")
    fresh = RunLog(Store.open(root))
    from objstore.errors import Deleted
    with pytest.raises(Deleted):
        fresh.store.get(recs[1].id)
    assert fresh.store.get(recs[2].id)[1]["lsn"] == 3
    from objstore import verify
    assert verify(fresh) == []
    # and the revocation fenced the run: its cite moved to the store log's position after the revocation
    after = fresh.store.logs.store_log.position()
    assert _cite(fresh, run) == (after.entry, after.checksum)


def test_a_revoked_signer_cannot_delete_and_a_forged_deletion_is_judged_at_its_cite(tmp_path):
    root, log, owner, run, recs, w = _env(tmp_path)
    grant_id = log.store.read_ref(runrefs.subject_grant_ref("alice", w.public))
    J.revoke(log, owner, None, w.public, subject="alice", reason="left")
    with pytest.raises(Refused):
        D.delete_records(log, run, [recs[2].id], reason="too late", key=w)
    # a forger writes w's deletion straight into the run's log: the run log's own rules (no store log) take it
    view = log.view(run)
    obj = D._deletion("records", run=run, records=[[bytes(recs[2].id), 0, 3, "attempt"]], blob=None, reason="forged",
                      previous=view.deletions, key=w, grant=grant_id)
    data = codec.encode(codec.DELETION, obj)
    oid = codec.object_id(data)
    raw = LogEngine(run_log_root(root, run), FsyncPolicy("off"))
    raw.refresh()
    seg, off = raw.seg_path(raw._seg), raw._off  # where the forged entry lands: the run's log's tail
    with raw.transaction() as txn:
        txn.put(oid, codec.DELETION, data, obj)
        txn.set_ref(runrefs.deletions_ref(run), view.deletions, oid, "forged deletion")
    n = raw.position().entry
    assert raw.seg_path(raw._seg) == seg
    raw.close()
    # an honest reader applies it where it cites (the fence: after the revocation) and refuses it
    fresh = RunLog(Store.open(root))
    with pytest.raises(CorruptLog, match="held no live delete grant"):
        fresh.records(run)
    from objstore import verify
    problems = verify(RunLog(Store.open(root)))
    # verify names the forged entry where it lies (the run's log), judged as readers judge it: at its cite
    assert [p.line() for p in problems] == [
        f"bad-deletion {seg}: entry {n} at offset {off}: entry {n}: bad-deletion {oid.hex()}: its signer {obj['by'][:16]}… "
        f"held no live delete grant on run {run} at entry {n} (run/{run}/deletions) [{os.path.dirname(seg)}]"]


def test_a_cite_that_goes_back_is_refused_even_by_the_run_logs_own_rules(tmp_path):
    root, log, owner, run, recs, w = _env(tmp_path)
    J.revoke(log, owner, None, w.public, subject="alice", reason="left")  # fences the run
    assert _cite(log, run) is not None
    raw = LogEngine(run_log_root(root, run), FsyncPolicy("off"))
    name = runrefs.cite_ref(run)
    with pytest.raises(Refused, match="moves back along the store log"):
        with raw.transaction() as txn:
            txn.set_ref(name, raw.tables.refs.get(name), runrefs.cite_value(1, b"\0" * 32), "forged")


def test_a_store_log_ref_naming_a_runs_record_is_refused_in_plain_words(tmp_path):
    """A record is its run's and lives in its run's log; a store-wide ref naming it would copy it into the store log
    as a second chain. Refused with a message saying so, and nothing of any log or the catalog changes."""
    from helpers import log_files

    root, log, _owner, run, recs, _w = _env(tmp_path)
    before = log_files(root)
    with pytest.raises(Refused) as got:
        log.store.set_ref("test/pinned", None, recs[1].id, "pin")
    assert str(got.value) == (f"refused: ref test/pinned is a ref of the store log and cannot name record {recs[1].id.hex()}, "
                              "which is in its run's log: name a run's record with a ref under run/<run>/")
    assert log_files(root) == before
    # the refused batch let the store log's writer lock go: another thread commits to the store log at once
    import threading

    done = []

    def other():
        blob = log.store.put_blob(b"a store-wide note")
        log.store.set_ref("test/note", None, blob, "note")
        done.append(blob)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    t.join(20)
    assert len(done) == 1 and log.store.read_ref("test/note") == done[0]
    log.store.set_ref(f"run/{run}/pinned", None, recs[1].id, "pin")  # the run's own ref may
    assert log.store.read_ref(f"run/{run}/pinned") == recs[1].id


def test_an_owner_key_set_after_runs_fences_them_so_no_cite_can_go_before_it(tmp_path):
    """A run started before the store had an owner key has no citation yet. Setting the key fences every run (its cite
    moves to the store log's position holding the key), so a forger cannot make that run's log cite a position before
    the key, where a deletion needs no signature: the run log's own rules refuse the cite, and a forged unsigned
    deletion with no cite is judged with the key and refused by every reader and named by verify."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=6))
    run = log.start_run()
    recs = [log.record_attempt(run, i, 0, "succeeded") for i in range(3)]
    assert _cite(log, run) is None
    identity.ensure_owner_key(log.store, str(tmp_path / "owner.key"))
    keyed = log.store.logs.store_log.position()
    assert _cite(log, run) == (keyed.entry, keyed.checksum)
    raw = LogEngine(run_log_root(root, run), FsyncPolicy("off"))
    name = runrefs.cite_ref(run)
    with pytest.raises(Refused, match="moves back along the store log"):
        with raw.transaction() as txn:
            txn.set_ref(name, raw.tables.refs.get(name), runrefs.cite_value(0, b"\0" * 32), "forged: before the owner key")
    view = log.view(run)
    obj = D._deletion("records", run=run, records=[[bytes(recs[1].id), 0, 2, "attempt"]], blob=None, reason="forged",
                      previous=view.deletions, key=None, grant=None)
    data = codec.encode(codec.DELETION, obj)
    oid = codec.object_id(data)
    with raw.transaction() as txn:
        txn.put(oid, codec.DELETION, data, obj)
        txn.set_ref(runrefs.deletions_ref(run), view.deletions, oid, "forged deletion")
    raw.close()
    with pytest.raises(CorruptLog):
        RunLog(Store.open(root)).records(run)
    from objstore import verify
    assert [p.code for p in verify(RunLog(Store.open(root)))] == ["bad-deletion"]


def test_a_revocation_inside_a_callers_batch_fences_the_subjects_runs_once_it_commits(tmp_path):
    """The fences follow the revocation's commit even when the caller wrapped it in a batch of its own (the batch
    writes the store log; each fence writes a run's log, so they are commits made after it, not skipped)."""
    root, log, owner, run, recs, w = _env(tmp_path)
    before = _cite(log, run)
    with log.store.batch():
        J.revoke(log, owner, None, w.public, subject="alice", reason="left")
        assert _cite(log, run) == before  # not yet: the revocation itself is not committed
    after = log.store.logs.store_log.position()
    assert _cite(log, run) == (after.entry, after.checksum)
    with pytest.raises(Refused):
        D.delete_records(log, run, [recs[2].id], reason="too late", key=w)
    with pytest.raises(RuntimeError, match="changed its mind"), log.store.batch():
        J.grant(log, owner, None, w.public, subject="alice", rights=("read", "write", "delete"), name="w")
        J.revoke(log, owner, None, w.public, subject="alice", reason="again")
        raise RuntimeError("the caller changed its mind")
    assert _cite(log, run) == (after.entry, after.checksum)  # a batch that failed fences nothing


def test_a_cut_of_the_store_log_below_a_position_a_run_cites_is_refused(tmp_path):
    """``repair`` of the store log may not cut entries a run's log cites: those runs' entries were judged there.
    The store log is damaged in the very entry the run cites (so its readable prefix ends before it, and a repair
    would cut it): refused with the run and the entry it cites named, before any key is asked for, and nothing
    changes."""
    from helpers import log_engine_of, log_files

    from objstore.lifecycle.repair import repair

    root, log, owner, run, recs, w = _env(tmp_path)
    D.delete_records(log, run, [recs[1].id], reason="pii", key=w)  # judged by the grant: cites the store log
    n = _cite(log, run)[0]
    assert n >= 1 and n == log_engine_of(log.store).position().entry
    e = next(e for e in log_engine_of(log.store).entries() if e.n == n)
    seg = log_engine_of(log.store).seg_path(e.seg)
    with open(seg, "r+b") as f:  # bit rot in the cited entry's meta
        f.seek(e.offset + 20)
        b = f.read(1)
        f.seek(e.offset + 20)
        f.write(bytes([b[0] ^ 0xFF]))
    before = log_files(root)
    with pytest.raises(Refused) as got:
        repair(RunLog(Store.open(root)).store, n - 1, "bit rot", key=owner)
    assert str(got.value) == (f"refused: the store log is cited past entry {n - 1} by run {run} (entry {n}): cutting it "
                              "would leave their entries judged at positions that no longer exist; restore the store "
                              "from a backup instead")
    assert log_files(root) == before
