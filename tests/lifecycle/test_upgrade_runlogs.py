"""Upgrade of a store of one log (formats 3, 4, 5, made by the objstore before format 6: fixtures/
make_upgrade_stores.py) to format 6, a log per run, in place.

Every run, record, ref (the runs' cite refs aside) and object with a body is the same after; the old store is kept
byte for byte as PATH.format<N>; a killed upgrade (kill -9 at each named step) leaves a usable store, and running
upgrade again finishes. A store whose gc removed records (format 4: a run deletion and a partial deletion, then gc)
upgrades too: each removed object becomes a row without a body (block -1) in its run's log, read back from the
segment files; the deleted run stays deleted (catalog marker included), the deleted record stays deleted, verify and
a later gc stay clean. A forged removed row (a live record's body hidden without a deletion) is named by verify.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys

import msgspec
import pytest
from helpers import log_engine_of, run_log_root, snapshot_tree

from objstore import RunLog, Store, verify
from objstore import journal as J
from objstore.errors import Deleted, Erased
from objstore.legacy import upgrade as U
from objstore.lifecycle import delete as D
from objstore.lifecycle.gc import gc
from objstore.storage import codec, identity, runrefs
from objstore.storage.log.format import ENTRY_HEAD, ENTRY_TRAILER, REMOVED, SEG_HEADER, _enc

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")


def _copy(tmp_path, name):
    root = str(tmp_path / "s")
    shutil.copytree(os.path.join(FIX, name), root)
    return root


def _everything(root):
    """What a reader sees: runs, each run's records (all branches), the refs (cite aside), and the objects' bytes."""
    store = Store.open(root)
    log = RunLog(store)
    runs = {r: [(x.branch, x.lsn, x.kind, x.id) for x in log.iter_records(r, all_branches=True)] for r in store.run_names()}
    refs = {k: v for k, v in store.list_refs() if not runrefs.is_cite_ref(k)}
    objects = {}
    for _run, eng in store.logs.all_logs():
        for oid in eng.iter_ids():
            if eng.has_body(oid):
                objects[oid] = eng.read(oid)
    store.logs.close()
    return runs, refs, objects


@pytest.mark.parametrize("name,version", [("upgrade-format3-store", 3), ("upgrade-format4-store", 4), ("upgrade-format5-store", 5),
                                          ("upgrade-format5-langgraph-store", 5)])
def test_a_store_of_one_log_upgrades_to_a_log_per_run(tmp_path, name, version):
    root = _copy(tmp_path, name)
    old_tree = snapshot_tree(root)
    (tmp_path / "read").mkdir()
    runs, refs, objects = _everything(_copy(tmp_path / "read", name))  # a copy: an open of a long log leaves a checkpoint
    got = U.upgrade(root)
    assert (got["status"], got["from"], got["to"], got["backup"]) == ("upgraded", version, 6, f"{root}.format{version}")
    assert snapshot_tree(root + f".format{version}") == old_tree  # the old store, kept byte for byte
    store = Store.open(root)
    assert store.logs.per_run and store.engine.log_files
    new_runs, new_refs, new_objects = _everything(root)
    assert new_runs == runs and new_refs == refs
    assert set(objects) <= set(new_objects) and all(new_objects[o] == objects[o] for o in objects)
    assert verify(RunLog(Store.open(root))) == []
    assert U.upgrade(root)["status"] == "already-format-6"


def _removed_rows(root, run=None):
    """Ids of the object rows of run ``run``'s log (None: the store log's) that have no body (block -1), read from
    its segment files."""
    got = set()
    for seg in sorted(glob.glob(os.path.join(run_log_root(root, run) if run else os.path.join(root, "store"), "log", "*.seg"))):
        with open(seg, "rb") as f:
            buf = f.read()
        assert buf[:4] == b"OSSG", "the upgrade wrote ordinary segments"
        off = SEG_HEADER.size
        while off < len(buf):
            _magic, mlen, dlen = ENTRY_HEAD.unpack_from(buf, off)
            meta = msgspec.msgpack.decode(buf[off + ENTRY_HEAD.size : off + ENTRY_HEAD.size + mlen])
            got.update(o[0] for o in meta["objs"] if o[3] == REMOVED)
            off += ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
    return got


def test_a_store_whose_gc_removed_records_upgrades_with_rows_without_bodies(tmp_path):
    root = _copy(tmp_path, "upgrade-format4-store")
    old = Store.open(root)
    eng = old.engine
    removed = {oid for oid in eng.iter_ids() if not eng.has_body(oid)}
    run_of = {}  # a removed record's run, from the old log's index rows
    for e in eng.entries():
        for r in e.recs:
            run_of[e.objs[r[0]][0]] = r[1]
    refs = dict(old.list_refs())
    deleted_run = next(runrefs.run_of(k) for k in refs if runrefs.is_deleted_ref(k))
    old_log = RunLog(old)
    with pytest.raises(Deleted) as was:
        old_log.records(deleted_run)
    partly = next(runrefs.run_of(k) for k in refs if runrefs.is_deletions_ref(k))
    gone_record = next(oid for oid in removed if run_of.get(oid) == partly)
    with pytest.raises(Erased) as was_record:
        old_log.store.get(gone_record)
    old_time = next(e.time for e in eng.entries() if any(r[1] == deleted_run for r in e.recs))
    assert len(removed) == 4 and {run_of.get(o) for o in removed} == {deleted_run, partly, None}

    got = U.upgrade(root)
    assert (got["status"], got["from"], got["to"], got["removed"]) == ("upgraded", 4, 6, 4)
    rows = {run: _removed_rows(root, run) for run in (deleted_run, partly)}
    assert rows[partly] == {gone_record}
    assert rows[deleted_run] == removed - {gone_record}  # its two records and the blob only it named
    assert all(run_of[o] == deleted_run for o in rows[deleted_run] if o in run_of)

    store = Store.open(root)
    log = RunLog(store)
    assert store.logs.catalog.is_deleted(deleted_run) and not store.logs.catalog.is_deleted(partly)
    entry = store.logs.catalog.entry(deleted_run)
    assert entry.time_us == int(old_time * 1_000_000) and entry.subject == "default"
    assert deleted_run not in store.run_names()
    with pytest.raises(Deleted) as now:
        log.records(deleted_run)
    assert str(now.value) == str(was.value)
    with pytest.raises(Erased) as now_record:
        store.get(gone_record)
    assert (type(now_record.value), str(now_record.value)) == (type(was_record.value), str(was_record.value))
    assert dict(store.list_refs())[runrefs.branch_ref(partly, 0)] == gone_record  # its head: the chain stays whole
    assert verify(log) == []
    gc(store)
    assert verify(RunLog(Store.open(root))) == []
    assert U.upgrade(root)["status"] == "already-format-6"


def test_a_deleted_labelled_run_keeps_its_labels_in_the_catalog_and_the_thread_starts_again(tmp_path):
    """A run whose run_started gc removed is catalogued from its row: its labels, so the label's next run is a new
    generation, found by those labels."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=3))
    gone = log.start_run(labels={"thread_id": "t-1"}, subject="dave")
    log.record_attempt(gone, 1, 0, "succeeded")
    D.delete_run(log, gone, reason="retention")
    gc(log.store)
    got = U.upgrade(root)
    assert got["status"] == "upgraded" and got["removed"] == 2
    store = Store.open(root)
    assert store.logs.catalog.entry(gone).labels == [["thread_id", "t-1"]]
    assert store.logs.catalog.is_deleted(gone)
    assert len(_removed_rows(root, gone)) == 2
    log = RunLog(store)
    again = log.start_run(labels={"thread_id": "t-1"})
    assert again != gone and log.find_run(thread_id="t-1") == again
    assert verify(log) == []


def test_a_removed_blob_put_alone_goes_without_its_body_to_each_run_whose_deleted_record_named_it(tmp_path):
    """A blob put in an entry of its own, named later by records of two runs deleted since, gc removed: it lands as
    a row without a body in each of those runs' logs, with the record naming it (where a format-6 commit copies a
    body, and where the run's deletion justifies its removal), not in the store log (verify would name it there)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=3))
    blob = log.put_blob(b"a prompt put alone")
    gone = [log.start_run(subject="dave") for _ in range(2)]
    for run in gone:
        log.record_attempt(run, 1, 0, "succeeded", prompt=blob)
    kept = log.start_run(subject="erin")
    log.record_attempt(kept, 1, 0, "succeeded")
    D.delete_runs(log, gone, reason="retention")
    gc(log.store)
    assert not log.store.engine.has_body(blob)
    U.upgrade(root)
    for run in gone:
        assert blob in _removed_rows(root, run)
    store = Store.open(root)
    assert blob not in _removed_rows(root) and not _removed_rows(root, kept)
    assert verify(RunLog(store)) == []


def test_deleted_journal_sessions_and_copy_sources_after_gc_upgrade_clean(tmp_path):
    """A session's journal versions (chain objects whose bodies, and the blobs they named, gc removed with the
    session) and the deleted source of a live copy: replayed with their chains' facts, every removed blob in the
    deleted run's log (its deletion lists it), the copy's records read as before, verify clean before and after gc."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=3))
    owner, _ = identity.ensure_owner_key(log.store)
    src = log.start_run(labels={"thread_id": "src"})
    log.record_attempt(src, 1, 0, "succeeded", output=log.put_blob(b"out of the source"))
    copy = log.fork_run(src, labels={"thread_id": "copy"})
    log.record_attempt(copy, 2, 0, "succeeded")
    session = J.start_session(log, "alice", run="session-1")
    worker = identity.generate()
    J.grant(log, owner, None, worker.public, subject="alice", rights=("read", "write", "delete"), name="worker")
    J.update_journal(log, session, worker, {"entries": [{"id": "1", "text": "first"}]})
    J.update_journal(log, session, worker, {"entries": [{"id": "1", "text": "second"}]})
    D.delete_run(log, src, reason="retention", key=owner)
    D.delete_run(log, session, reason="retention", key=owner)
    gc(log.store)
    want = [(r.id, r.kind, r.lsn) for r in log.records(copy)]
    old = log.store.engine
    removed = {oid for oid in old.iter_ids() if not old.has_body(oid)}
    assert U.upgrade(root)["removed"] == len(removed)
    assert _removed_rows(root) == set()  # nothing of the deleted runs in the store log
    assert removed <= _removed_rows(root, src) | _removed_rows(root, session)
    store = Store.open(root)
    assert [(r.id, r.kind, r.lsn) for r in RunLog(store).records(copy)] == want
    assert verify(RunLog(store)) == []
    gc(store)
    assert verify(RunLog(Store.open(root))) == []


def test_a_forged_row_without_a_body_in_a_live_run_is_named_by_verify(tmp_path):
    """A row may say its body is gone in any segment now (an upgrade writes such rows); hiding a live record's body
    that way keeps the chain checksum (it covers id, type and length, not blocks), so verify must name it."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run()
    rec = log.record_attempt(run, 1, 0, "succeeded")
    log_engine_of(log.store, run)
    log.store.logs.close()
    seg = sorted(glob.glob(os.path.join(run_log_root(root, run), "log", "*.seg")))[-1]
    with open(seg, "rb") as f:
        buf = f.read()
    off, last = SEG_HEADER.size, None
    while off < len(buf):
        _m, mlen, dlen = ENTRY_HEAD.unpack_from(buf, off)
        last = (off, mlen, dlen)
        off += ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
    off, mlen, dlen = last
    meta = msgspec.msgpack.decode(buf[off + ENTRY_HEAD.size : off + ENTRY_HEAD.size + mlen])
    row = next(o for o in meta["objs"] if o[0] == rec.id and o[1] == codec.RECORD)
    row[3], row[4] = REMOVED, 0
    forged = _enc.encode(meta)
    data = buf[off + ENTRY_HEAD.size + mlen : off + ENTRY_HEAD.size + mlen + dlen]
    checksum = buf[-32:]  # unchanged: the chain checksum does not cover the block layout
    length = ENTRY_HEAD.size + len(forged) + dlen + ENTRY_TRAILER.size
    with open(seg, "wb") as f:
        f.write(buf[:off] + ENTRY_HEAD.pack(b"OSE3", len(forged), dlen) + forged + data + ENTRY_TRAILER.pack(length, checksum))
    for derived in glob.glob(os.path.join(run_log_root(root, run), "log", "checkpoint")):
        os.unlink(derived)
    problems = verify(RunLog(Store.open(root)))
    assert [(p.code, p.subject, p.where, p.detail) for p in problems] == [
        ("missing-body", rec.id.hex(), seg, "gc removed the body of this record, but no recorded deletion or redaction covers it")]


_CRASH = r"""
import os, sys
from objstore.legacy import upgrade as U
def die(step, at=sys.argv[2]):
    if step == at:
        os.kill(os.getpid(), 9)
U._checkpoint = die
U.upgrade(sys.argv[1])
"""


@pytest.mark.parametrize("name,version", [("upgrade-format4-store", 4), ("upgrade-format5-store", 5)])
@pytest.mark.parametrize("step", ["built", "verified", "swap", "between-renames"])
def test_a_killed_upgrade_leaves_a_usable_store_and_upgrade_finishes(tmp_path, step, name, version):
    root = _copy(tmp_path, name)
    runs, refs, _objects = _everything(root)
    p = subprocess.run([sys.executable, "-c", _CRASH, root, step], capture_output=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    if step == "between-renames":
        assert not os.path.exists(root) and os.path.isdir(root + f".format{version}")
    else:
        assert _everything(root)[:2] == (runs, refs)  # the old store, usable as it was
    got = U.upgrade(root)
    assert got["status"] in ("upgraded", "finished")
    assert _everything(root)[:2] == (runs, refs)
    assert Store.open(root).logs.per_run
