"""Long logs (issue 16): adopting a checkpoint does not read the active segment's rows it carries.

A checkpoint is a MessagePack map that opens with ``active`` (the active segment's object and chain
rows, in the index layout) and ``labels`` and ends with ``zsum`` (``LogState.dump``). A fresh reader
reads every field but ``active`` and checks them by ``zsum``; the ``active`` rows are read from the
file where a look-up asks (``segindex.FileBytes`` over the checkpoint's descriptor). Counted at the
lowest layer: the bytes ``os.pread``/``os.preadv``/``read`` return on the checkpoint file's descriptors.
A checkpoint written before ``zsum`` (the map in sorted key order) is still read whole and adopted,
and the reader that read it whole writes one of the new layout once. A checkpoint whose fields were
edited without ``zsum`` recomputed is read whole (and judged as before: not adopted unless the log
commits to it)."""

from __future__ import annotations

import io
import os

import blake3
import msgspec
from helpers import log_engine_of, run_log_root

import objstore
from objstore.storage.fileutil import FsyncPolicy
from objstore.storage.log import checkpoint as ck
from objstore.storage.log import local_state, local_write, segindex
from objstore.storage.log.format import STATS, _enc
from objstore.storage.log.local import LogEngine


def _fill(root, monkeypatch, n=600):
    """One labelled run of ``n`` labelled records in its active segment, and a checkpoint of them."""
    monkeypatch.setattr(local_write, "CHECKPOINT_ENTRIES", 50)
    log = objstore.open_store(root)
    run = log.start_run(labels={"thread_id": "T"})
    for i in range(n):
        log.append(run, "attempt", {"step": i, "attempt": 0, "state": "running", "output": log.put_blob(b"x%d" % i)},
                   labels={"checkpoint_id": f"C{i}"})
    monkeypatch.undo()
    eng = log_engine_of(log.store, run)
    assert eng._seg == 1 and eng._ckpt_at[0] >= n - 50
    return run


def _ckpt(root, run):
    return os.path.join(run_log_root(root, run), "log", "checkpoint")


class _Reads:
    """Bytes read from one file through any descriptor opened on it (the lowest layer: the calls)."""

    def __init__(self, monkeypatch, path):
        self.path, self.bytes, self.calls = os.path.realpath(path), 0, 0
        pread, preadv, fdopen = os.pread, os.preadv, os.fdopen

        def mine(fd):
            try:
                return os.readlink(f"/proc/self/fd/{fd}") == self.path
            except OSError:
                return False

        def counted_pread(fd, n, off):
            out = pread(fd, n, off)
            if mine(fd):
                self.bytes += len(out)
                self.calls += 1
            return out

        def counted_preadv(fd, bufs, off, *a):
            got = preadv(fd, bufs, off, *a)
            if mine(fd):
                self.bytes += got
                self.calls += 1
            return got

        def counted_fdopen(fd, mode="r", *a, **k):
            f = fdopen(fd, mode, *a, **k)
            if mine(fd) and "b" in mode:
                data = f.read()
                f.close()
                self.bytes += len(data)
                self.calls += 1
                return io.BytesIO(data)
            return f

        monkeypatch.setattr(os, "pread", counted_pread)
        monkeypatch.setattr(os, "preadv", counted_preadv)
        monkeypatch.setattr(os, "fdopen", counted_fdopen)


def _layout(path):
    """(size of the file, length of its active rows' bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    m = msgspec.msgpack.decode(data[:-32])
    return len(data), len(m["active"])


def test_a_fresh_reader_adopts_the_checkpoint_without_reading_its_active_rows(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch)
    path = _ckpt(root, run)
    size, active = _layout(path)
    assert active > 3 * (size - active), "the active rows are most of the file"
    with monkeypatch.context() as m:
        reads = _Reads(m, path)
        log = objstore.open_store(root)
        eng = log_engine_of(log.store, run)
        assert eng._ckpt_at != (0, 0) and eng.tables.frozen is not None, "adopted"
        at_open = reads.bytes
        # the adopted rows answer: an old record by its label (a chain row, an object row, each read where asked)
        got = log.find_records(run, checkpoint_id="C3")
        assert [r.body["step"] for r in got] == [3]
        looked_up = reads.bytes - at_open
    # every field but the active rows, and of those the index header and fan-out table only
    assert at_open <= size - active + segindex.HEAD.size + segindex.FANOUT.size + 64, (at_open, size, active)
    assert 0 < looked_up < active // 4, (looked_up, active)


def _old_layout(path):
    """Rewrite the checkpoint at ``path`` as written before zsum: the map in sorted key order, no zsum."""
    with open(path, "rb") as f:
        data = f.read()
    m = msgspec.msgpack.decode(data[:-32])
    del m["zsum"]
    old = _enc.encode(m)
    with open(path, "wb") as f:
        f.write(old + blake3.blake3(old).digest())
    return m, old


def test_a_checkpoint_written_before_zsum_is_read_whole_adopted_and_rewritten_once(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch)
    path = _ckpt(root, run)
    m, old = _old_layout(path)
    size = os.path.getsize(path)
    assert size >= local_state.REWRITE_WHOLE
    with monkeypatch.context() as mp:
        reads = _Reads(mp, path)
        log = objstore.open_store(root)
        eng = log_engine_of(log.store, run)
        assert eng._ckpt_whole, "the old checkpoint is read whole"
        assert eng._ckpt_at[0] == eng.tables.pos.entry > m["entry"], "adopted, and one of the new layout written at the tail"
        assert reads.bytes >= size - 32
    with open(path, "rb") as f:
        new = f.read()
    assert new != old + blake3.blake3(old).digest() and msgspec.msgpack.decode(new[:-32])["zsum"], "rewritten in the new layout"
    log = objstore.open_store(root)
    eng = log_engine_of(log.store, run)
    assert eng._ckpt_at[0] == eng.tables.pos.entry and not eng._ckpt_whole, "the next reader adopts it without reading it whole"
    assert [r.body["step"] for r in log.find_records(run, checkpoint_id="C7")] == [7]


def test_a_small_checkpoint_written_before_zsum_is_read_whole_and_left_as_it_is(tmp_path, monkeypatch):
    """Below ``REWRITE_WHOLE`` bytes a reader reads an older checkpoint whole and writes nothing (a
    store opened only to be read, an upgrade refused, stays byte for byte)."""
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch, n=60)
    path = _ckpt(root, run)
    _m, old = _old_layout(path)
    assert os.path.getsize(path) < local_state.REWRITE_WHOLE
    log = objstore.open_store(root)
    eng = log_engine_of(log.store, run)
    assert eng._ckpt_whole and eng._ckpt_at != (0, 0), "adopted, read whole"
    assert [r.body["step"] for r in log.find_records(run, checkpoint_id="C9")] == [9]
    with open(path, "rb") as f:
        assert f.read() == old + blake3.blake3(old).digest(), "left as it is"


def test_fields_edited_without_zsum_send_the_reader_to_the_whole_file(tmp_path, monkeypatch):
    """A branch's newest record id flipped in the tips and the trailing BLAKE3 recomputed (zsum left as it was): the file is read whole
    and judged by the one rule; its tables do not hash to the log's root, so it is not adopted."""
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch)
    path = _ckpt(root, run)
    with open(path, "rb") as f:
        data = f.read()
    m = msgspec.msgpack.decode(data[:-32])
    head = next(v for k, v in m["refs"] if k.endswith("/branch/0"))
    at = data.rindex(head) + 31  # its last copy: in the fields after the rows (the branch's tip), root-covered
    assert at > len(data) - len(_enc.encode({"x": m["tips"], "y": m["time"], "z": m["zsum"], "v": 3})) - 64
    body = bytearray(data[:-32])
    body[at] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(body) + blake3.blake3(bytes(body)).digest())
    fd = os.open(path, os.O_RDONLY)
    try:
        assert ck.adoption_lazy(fd, lambda *a: None) is None, "zsum does not match: not taken lazily"
    finally:
        os.close(fd)
    before = STATS["entries_decoded"]
    log = objstore.open_store(root)
    eng = log_engine_of(log.store, run)
    assert eng._ckpt_whole and STATS["entries_decoded"] - before >= m["entry"], "not adopted (its tables do not hash to the log's root): replayed"
    assert [r.body["step"] for r in log.find_records(run, checkpoint_id="C5")] == [5]


def test_the_map_opens_with_active_and_labels_and_ends_with_zsum(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch, n=60)
    with open(_ckpt(root, run), "rb") as f:
        data = f.read()
    assert blake3.blake3(data[:-32]).digest() == data[-32:]
    keys = list(msgspec.msgpack.decode(data[:-32]))
    assert keys[:2] == ["active", "labels"] and keys[-1] == "zsum", keys


def test_label_rows_edited_are_not_adopted(tmp_path, monkeypatch):
    """``zsum`` does not cover the label rows: the root does. A label row edited (trailing BLAKE3
    recomputed) is read lazily and refused by the one rule; the reader replays the log."""
    root = str(tmp_path / "s")
    run = _fill(root, monkeypatch)
    path = _ckpt(root, run)
    with open(path, "rb") as f:
        data = f.read()
    m = msgspec.msgpack.decode(data[:-32])
    at = data.index(m["labels"][:56]) + 20  # the first row's entry number
    body = bytearray(data[:-32])
    body[at] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(body) + blake3.blake3(bytes(body)).digest())
    plain = LogEngine(run_log_root(root, run), FsyncPolicy("off"), checkpoint=False)  # reads the segments, writes no checkpoint
    fd = os.open(path, os.O_RDONLY)
    try:
        got = ck.adoption_lazy(fd, plain._entry_ending_at)
    finally:
        os.close(fd)
    assert got == f"its tables do not hash to the root of entry {m['entry']}", got
    before = STATS["entries_decoded"]
    log = objstore.open_store(root)
    eng = log_engine_of(log.store, run)
    assert not eng._ckpt_whole and STATS["entries_decoded"] - before >= m["entry"], "not adopted: replayed"
    assert [r.body["step"] for r in log.find_records(run, checkpoint_id="C0")] == [0]
