"""Long logs (issue 16): a fresh reader trusts a sealed index without hashing every index it passes.

A sealed segment's index is used only once its bytes are known to hash to the digest the log names
(invariant 15). A reader that hashed one records the file's identity in ``log/idx-verified``
(``storage.log.idxtrust``); a later fresh reader that finds the same file (device, inode, size,
mtime, ctime) and the same digest named by the log reads it without hashing. Counted at the lowest
layer: the bytes hashed (``segindex.file_hash``) and the bytes read (``FileBytes.__getitem__``, one
``pread`` each) of index files, for a store of 3 and one of 30 sealed segments. And an index edited
on disk after it was recorded — bytes flipped in place, or forged with its trailing checksum
recomputed, or replaced — is hashed again on the read that uses it, changes no answer, and verify
names it with its exact line."""

from __future__ import annotations

import os
import time

import pytest
from helpers import log_engine_of, run_log_root

import objstore
from objstore.storage import labels as SL
from objstore.storage.log import idxtrust, local_write, segindex


@pytest.fixture(autouse=True)
def _short_racy_window(monkeypatch):
    """Index files are recorded only once older than RACY_NS; a short window keeps the tests quick."""
    monkeypatch.setattr(idxtrust, "RACY_NS", 20_000_000)


def _past_racy_window():
    time.sleep(0.05)


def _build(root, monkeypatch, sealed):
    """One labelled run whose records (each labelled, each naming a blob) span ``sealed`` sealed segments."""
    monkeypatch.setattr(local_write, "SEAL_BYTES", 4096)
    log = objstore.open_store(root)
    run = log.start_run(labels={"thread_id": "T", "ns": ""})
    first = log.put_blob(b"the oldest blob")
    log.append(run, "attempt", {"step": 0, "attempt": 0, "state": "running", "output": first}, labels={"checkpoint_id": "C0"})
    i = 0
    engine = log_engine_of(log.store, run)  # the log holding the run's records: the run's own (format 6)
    while engine._seg <= sealed:
        i += 1
        log.append(run, "attempt", {"step": i, "attempt": 0, "state": "running", "output": log.put_blob(os.urandom(200))},
                   labels={"checkpoint_id": f"C{i}"})
    monkeypatch.undo()  # SEAL_BYTES back; the fixture's RACY_NS too: set it again
    monkeypatch.setattr(idxtrust, "RACY_NS", 20_000_000)
    assert engine._seg == sealed + 1
    return run, first


def _lookups(root, run, first):
    """A fresh reader's open and one look-up of each kind that passes every sealed index: a label
    (newest commit first, so every segment's rows) and the oldest object's location."""
    log = objstore.open_store(root)
    got = [r.body["step"] for r in log.find_records(run, checkpoint_id="C0")]
    assert got == [0]
    assert log.store.get_blob(first) == b"the oldest blob"
    return log


class _Counts:
    def __init__(self, monkeypatch):
        self.hashed = 0
        self.read = 0
        self.reads = 0
        hash_ = segindex.file_hash
        getitem = segindex.FileBytes.__getitem__

        def counted_hash(data):
            self.hashed += len(data)
            return hash_(data)

        def counted_read(fb, sl):
            out = getitem(fb, sl)
            self.read += len(out)
            self.reads += 1
            return out

        monkeypatch.setattr(segindex, "file_hash", counted_hash)
        monkeypatch.setattr(segindex.FileBytes, "__getitem__", counted_read)


@pytest.mark.parametrize("sealed", [3, 30])
def test_a_fresh_reader_hashes_no_index_a_reader_before_it_hashed(tmp_path, monkeypatch, sealed):
    root = str(tmp_path / "s")
    run, first = _build(root, monkeypatch, sealed)
    sizes = [os.path.getsize(os.path.join(run_log_root(root, run), "log", f"{s:010d}.idx")) for s in range(1, sealed + 1)]
    _past_racy_window()
    c = _Counts(monkeypatch)
    _lookups(root, run, first)  # the first fresh reader: hashes each index it uses, and records it
    assert 0 < c.hashed <= sum(sizes)
    assert os.path.exists(os.path.join(run_log_root(root, run), "log", idxtrust.NAME))
    c.hashed = c.read = c.reads = 0
    _lookups(root, run, first)
    assert c.hashed == 0, "a fresh reader hashed index files a reader before it had checked"
    # what it reads of each sealed index is a binary search's pages, not the file: bounded by the
    # read block, whatever the index's size (and the number of segments only multiplies it)
    assert c.read <= sealed * (3 * segindex.BLOCK + 2048), (c.read, sizes)
    assert c.reads <= sealed * 40


def test_the_bytes_hashed_do_not_grow_with_the_sealed_segments(tmp_path, monkeypatch):
    hashed = {}
    for sealed in (3, 30):
        root = str(tmp_path / f"s{sealed}")
        run, first = _build(root, monkeypatch, sealed)
        _past_racy_window()
        _lookups(root, run, first)
        c = _Counts(monkeypatch)
        _lookups(root, run, first)
        hashed[sealed] = c.hashed
        monkeypatch.undo()
        monkeypatch.setattr(idxtrust, "RACY_NS", 20_000_000)
    assert hashed == {3: 0, 30: 0}


def _flip(path):
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))


def _forge(path, run):
    """Drop the label row of C0 and recompute the index's own checksum: only the log's digest tells."""
    idx = segindex.load(path, 1)
    key = SL.key(run, "checkpoint_id", "C0")
    rows = [r for r in idx.chain_rows() if r[0] != key]
    assert len(rows) < idx.nchain
    data = segindex.build(1, idx.first, idx.last, idx.checksum, list(idx.object_rows()), rows)
    idx.close()
    with open(path, "r+b") as f:  # in place: same inode
        f.write(data)
        f.truncate()
    assert segindex.load(path, 1).check_sum()


def _replace(path, run):
    """The forged index written beside and renamed over the file (a new inode)."""
    _forge(path, run)
    with open(path, "rb") as f:
        data = f.read()
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


@pytest.mark.parametrize("edit", [lambda p, r: _flip(p), _forge, _replace], ids=["bytes flipped", "forged, checksum recomputed", "replaced"])
@pytest.mark.parametrize("soon", [False, True], ids=["edited later", "edited at once"])
def test_an_index_edited_after_it_was_recorded_is_hashed_again_and_named(tmp_path, monkeypatch, edit, soon):
    root = str(tmp_path / "s")
    run, first = _build(root, monkeypatch, 3)
    _past_racy_window()
    _lookups(root, run, first)  # recorded in idx-verified
    c = _Counts(monkeypatch)
    _lookups(root, run, first)
    assert c.hashed == 0
    path = os.path.join(run_log_root(root, run), "log", "0000000001.idx")
    if not soon:
        _past_racy_window()  # (edited at once: within the same clock tick as nothing; the row's ctime is older anyway)
    edit(path, run)
    c.hashed = 0
    log = _lookups(root, run, first)  # the answer is the log's: the edited file is not used
    assert c.hashed > 0, "the edited index was not hashed again"
    monkeypatch.undo()
    problems = objstore.verify(log)
    assert [(p.code, p.subject) for p in problems] == [("damaged-index", path)], problems


def test_a_file_changed_within_the_racy_window_is_not_recorded(tmp_path):
    d = str(tmp_path)
    path = os.path.join(d, "0000000001.idx")
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    st = os.stat(path)
    v = idxtrust.VerifiedIndexes(d)
    v.note(1, st, b"d" * 32, started_ns=st.st_ctime_ns + idxtrust.RACY_NS // 2)
    assert not os.path.exists(v.path)
    assert not idxtrust.VerifiedIndexes(d).vouches(1, st, b"d" * 32)
    v.note(1, st, b"d" * 32, started_ns=st.st_ctime_ns + 2 * idxtrust.RACY_NS)
    fresh = idxtrust.VerifiedIndexes(d)
    assert fresh.vouches(1, st, b"d" * 32)
    assert not fresh.vouches(1, st, b"e" * 32), "a row vouches only for the digest the log names"
    assert not fresh.vouches(2, st, b"d" * 32)


def test_a_torn_or_foreign_hint_file_vouches_for_nothing(tmp_path):
    d = str(tmp_path)
    path = os.path.join(d, "0000000001.idx")
    with open(path, "wb") as f:
        f.write(b"x" * 100)
    st = os.stat(path)
    v = idxtrust.VerifiedIndexes(d)
    v.note(1, st, b"d" * 32, started_ns=st.st_ctime_ns + 2 * idxtrust.RACY_NS)
    with open(v.path, "rb") as f:
        data = f.read()
    for bad in (data[:-1], data[:10], b"", data[:-33] + bytes([data[-33] ^ 1]) + data[-32:]):
        with open(v.path, "wb") as f:
            f.write(bad)
        assert not idxtrust.VerifiedIndexes(d).vouches(1, st, b"d" * 32)
