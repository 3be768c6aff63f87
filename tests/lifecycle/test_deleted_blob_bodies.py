"""A deleted run's blobs are withheld at once (issue 13 item 3): after ``objstore delete R``, the body
of a blob that only R's records name is ``Deleted`` (exit 12, the deletion's id and reason) for every
read of it by id — before gc removes it — while a blob another live run, or a live copy of R, still
names stays readable; gc then removes exactly the withheld ones.
"""

from __future__ import annotations

import pytest
from helpers import is_per_run, run_cli

from objstore import RunLog, Store
from objstore.errors import Deleted
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as GC


@pytest.fixture
def world(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("R")
    only = log.put_blob(b"a prompt only run R names")
    shared = log.put_blob(b"a prompt R and L both name")
    early = log.put_blob(b"a prompt of R before the copy's fork point")
    log.record_attempt("R", 0, 0, "succeeded", prompt=early)
    copy = log.fork_run("R")  # a live copy: its history goes on into R up to here
    log.record_attempt("R", 1, 0, "succeeded", prompt=only)
    log.record_attempt("R", 2, 0, "succeeded", prompt=shared)
    log.start_run("L")
    log.record_attempt("L", 0, 0, "succeeded", prompt=shared, output=log.put_blob(b"only L names this"))
    mine = log.store.get(log.store.indexed_record("L", 0, 1))[1]["body"]["output"]
    return root, log, {"only": only, "shared": shared, "early": early, "mine": mine}, copy


def test_a_blob_only_a_deleted_run_names_is_withheld_at_once(world):
    root, log, blobs, _copy = world
    did = D.delete_run(log, "R", reason="customer asked")
    for store in (log.store, Store.open(root)):  # this process, and a fresh one
        with pytest.raises(Deleted) as err:
            store.get_blob(blobs["only"])
        assert did.hex() in str(err.value) and "customer asked" in str(err.value)
        assert store.get_blob(blobs["shared"]) == b"a prompt R and L both name"  # L still names it
        assert store.get_blob(blobs["early"]) == b"a prompt of R before the copy's fork point"  # the copy reaches it
    _, out, err = run_cli("cat", "--body", blobs["only"].hex(), store=root, exit_code=12)
    assert out == "" and err.count("\n") == 1 and did.hex() in err and "customer asked" in err
    _, out, _ = run_cli("cat", "--body", blobs["shared"].hex(), store=root, exit_code=0)
    assert out == "a prompt R and L both name"
    run_cli("cat", "--body", blobs["early"].hex(), store=root, exit_code=0)
    # gc removes what was withheld, and keeps what was readable
    GC.gc(Store.open(root))
    fresh = Store.open(root)
    assert fresh.get_blob(blobs["shared"]) and fresh.get_blob(blobs["early"])
    run_cli("cat", "--body", blobs["only"].hex(), store=root, exit_code=12)
    run_cli("verify", store=root, exit_code=0)


def test_a_blob_a_later_live_record_names_again_is_readable(world):
    root, log, blobs, _copy = world
    D.delete_run(log, "R", reason="gone")
    with pytest.raises(Deleted):
        log.store.get_blob(blobs["only"])
    log.record_attempt("L", 1, 0, "succeeded", prompt=log.put_blob(b"a prompt only run R names"))
    assert log.store.get_blob(blobs["only"]) == b"a prompt only run R names"
    run_cli("cat", "--body", blobs["only"].hex(), store=root, exit_code=0)


def test_a_blob_of_records_a_partial_deletion_covers_is_withheld(world):
    root, log, blobs, _copy = world
    rec = log.store.indexed_record("R", 0, 2)  # the attempt naming 'only'
    did = D.delete_records(log, "R", [rec], reason="that step")
    with pytest.raises(Deleted) as err:
        Store.open(root).get_blob(blobs["only"])
    assert did.hex() in str(err.value)
    assert Store.open(root).get_blob(blobs["shared"])


def test_reading_a_blob_no_deleted_record_names_reads_no_entry(world, monkeypatch):
    """The read check costs a blob nothing deleted names a set lookup: no entry is read for it, and
    a blob deleted records do name is looked for once per log position, not once per read."""
    from objstore.storage import erased
    from objstore.storage.log.local import LogEngine

    root, log, blobs, _copy = world
    D.delete_run(log, "R", reason="gone")
    store = Store.open(root)
    with pytest.raises(Deleted):
        store.get_blob(blobs["only"])  # works out the deleted records' blobs, and looks for 'only'
    calls = []
    monkeypatch.setattr(erased, "_still_named", lambda *a: calls.append(a) or False)
    monkeypatch.setattr(LogEngine, "entries", lambda self: (_ for _ in ()).throw(AssertionError("an entry scan")))
    for _ in range(3):
        assert store.get_blob(blobs["mine"]) == b"only L names this"
        with pytest.raises(Deleted):
            store.get_blob(blobs["only"])
    assert calls == []


def test_a_blob_a_live_record_still_names_is_looked_for_once_not_once_per_commit(world, monkeypatch):
    """A blob a deleted run and a live one both name (a shared prompt) is found live once: later
    commits only add namers (a deletion starts over), so a reader beside a busy writer does not scan
    the log again for each read of it after each commit."""
    from objstore.storage import erased

    root, log, blobs, _copy = world
    D.delete_run(log, "R", reason="gone")
    assert log.store.get_blob(blobs["shared"])  # found live once
    real = erased._still_named
    calls = []
    monkeypatch.setattr(erased, "_still_named", lambda *a: calls.append(a) or real(*a))
    for i in range(3):
        log.record_attempt("L", 10 + i, 0, "succeeded")
        assert log.store.get_blob(blobs["shared"]) == b"a prompt R and L both name"
    assert calls == []
    with pytest.raises(Deleted):  # a withheld one is still withheld after those commits
        log.store.get_blob(blobs["only"])


def test_reading_many_blobs_a_live_run_shares_with_a_deleted_one_reads_the_log_once(tmp_path, monkeypatch):
    """A live thread's parts it shares with a deleted one (the same messages) are each named by a
    deleted record: finding them live is one pass over the log for all of them, not one per blob
    (reading a 20-part checkpoint after deleting a sibling thread was 20 passes)."""
    from objstore.storage.log.local import LogEngine

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    parts = [log.put_blob(f"message {i}".encode()) for i in range(20)]
    for run in ("dead", "live"):
        log.start_run(run)
        for i, b in enumerate(parts):
            log.record_attempt(run, i, 0, "succeeded", prompt=b)
    D.delete_run(log, "dead", reason="gone")
    store = Store.open(root)
    real = LogEngine._segment_entries
    reads = []
    monkeypatch.setattr(LogEngine, "_segment_entries", lambda self, *a: reads.append(a) or real(self, *a))
    assert store.get_blob(parts[0]) == b"message 0"
    first = len(reads)
    # one log: the pass over the log that finds them live; a log per run: the live run's own log holds each
    # part and has no deletion, so no entry is read at all (the deleted run's log is never consulted)
    assert first >= (0 if is_per_run(root) else 1)
    for i, b in enumerate(parts[1:], 1):
        assert store.get_blob(b) == f"message {i}".encode()
    assert len(reads) == first, f"{len(reads) - first} more segment reads for 19 more blobs"
