"""Long logs (issue 16): a label search reads one window of each sealed index, and the hint that names it decides nothing.

A reader that hashed a sealed index (or found it vouched for by ``log/idx-verified``) records beside
its row the index's chain fan-out: for each first byte of a key, how many chain rows have a key whose
first byte is at most it (``SegmentIndex.compute_chain_fan``). A later fresh reader's label search then
reads, per sealed index, its header and the rows of the key's first byte with the row on either side
(``SegmentIndex._hinted``), instead of a binary search's probes. Counted at the lowest layer: the
``pread`` calls on index files (``FileBytes.__getitem__``). The hint is derived data anyone can write:
the rows on either side must have a smaller and a larger first byte, else the search is the binary
search of before; a forged fan-out changes no answer."""

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
    monkeypatch.setattr(idxtrust, "RACY_NS", 20_000_000)


def _build(root, monkeypatch, sealed=3):
    """One labelled run whose labelled records span ``sealed`` sealed segments, each index's chain
    section several times ``segindex.BLOCK`` (a binary search probes before it reads)."""
    with monkeypatch.context() as m:
        m.setattr(local_write, "SEAL_BYTES", 160 << 10)
        log = objstore.open_store(root)
        run = log.start_run(labels={"thread_id": "T"})
        engine = log_engine_of(log.store, run)
        i = 0
        while engine._seg <= sealed:
            with log.batch():
                for _ in range(20):
                    log.append(run, "attempt", {"step": i, "attempt": 0, "state": "running"}, labels={"checkpoint_id": f"C{i}", "task_id": f"T{i % 7}"})
                    i += 1
    for seg in range(1, sealed + 1):
        idx = segindex.load(os.path.join(run_log_root(root, run), "log", f"{seg:010d}.idx"), seg)
        assert idx.nchain * segindex.CHAIN.size > 4 * segindex.BLOCK, idx.nchain
        idx.close()
    time.sleep(0.05)  # past the racy window: the first reader records what it hashed
    return run, i


def _answers(root, run, n):
    log = objstore.open_store(root)
    return {c: sorted(r.body["step"] for r in log.find_records(run, checkpoint_id=c)) for c in [f"C{i}" for i in range(0, n, 37)] + ["none"]} | {
        t: len(log.find_records(run, task_id=t)) for t in ("T0", "T3", "T9")}


class _IndexReads:
    def __init__(self, monkeypatch):
        self.calls = 0
        getitem = segindex.FileBytes.__getitem__

        def counted(fb, sl):
            self.calls += 1
            return getitem(fb, sl)

        monkeypatch.setattr(segindex.FileBytes, "__getitem__", counted)


def test_a_label_search_reads_one_window_per_sealed_index(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run, n = _build(root, monkeypatch)
    _answers(root, run, n)  # the first reader hashes the indexes and records their fan-outs
    rows = idxtrust.VerifiedIndexes(os.path.join(run_log_root(root, run), "log"))._read()
    assert sorted(rows) == [1, 2, 3] and all(r[2] is not None for r in rows.values())
    log = objstore.open_store(root)
    eng = log_engine_of(log.store, run)
    with monkeypatch.context() as m:
        reads = _IndexReads(m)
        got = eng.label_rows(SL.key(run, "checkpoint_id", "C5"))  # in the oldest segment: every sealed index is searched
    assert len(got) == 1 and eng.loc(got[0][1]).seg == 1
    assert reads.calls <= 3 * 2, reads.calls  # per index: its header, and one window


def test_a_forged_fan_out_changes_no_answer(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run, n = _build(root, monkeypatch)
    truth = _answers(root, run, n)
    d = os.path.join(run_log_root(root, run), "log")
    rows = idxtrust._parse(open(os.path.join(d, idxtrust.NAME), "rb").read())
    count = {seg: int.from_bytes(r[2][-4:], "little") for seg, r in rows.items()}  # each index's chain rows
    for forged in ([0] * 128 + [10] * 128, [i * 3 for i in range(256)], [7] * 255 + [9], list(range(256))):
        # each ends with its index's chain row count (a fan-out that does not is not used at all)
        fans = {seg: segindex.FANOUT.pack(*forged[:255], count[seg]) for seg in rows}
        rows = {seg: (ident, digest, fans[seg]) for seg, (ident, digest, _f) in rows.items()}
        with open(os.path.join(d, idxtrust.NAME), "wb") as f:
            f.write(idxtrust._dump(rows))
        assert _answers(root, run, n) == truth, forged
        log = objstore.open_store(root)
        log.find_records(run, checkpoint_id="C1")
        eng = log_engine_of(log.store, run)
        assert all(eng._idx[s].chain_fan == fans[s] for s in (1, 2, 3)), "the forged hint was used"


def test_a_row_without_a_fan_out_gets_one(tmp_path, monkeypatch):
    """A row recorded before fan-outs were (version 1 of the file) still vouches; the reader computes
    the fan-out and keeps it with the row."""
    root = str(tmp_path / "s")
    run, n = _build(root, monkeypatch, sealed=2)
    truth = _answers(root, run, n)
    p = os.path.join(run_log_root(root, run), "log", idxtrust.NAME)
    rows = idxtrust._parse(open(p, "rb").read())
    body = idxtrust.MAGIC_V1 + b"".join(idxtrust.ROW_V1.pack(seg, *ident, digest) for seg, (ident, digest, _f) in sorted(rows.items()))
    with open(p, "wb") as f:
        f.write(body + idxtrust.blake3.blake3(body).digest())
    assert all(r[2] is None for r in idxtrust._parse(open(p, "rb").read()).values())
    hashed = []
    file_hash = segindex.file_hash
    monkeypatch.setattr(segindex, "file_hash", lambda data: hashed.append(len(data)) or file_hash(data))
    assert _answers(root, run, n) == truth
    assert hashed == [], "a version-1 row still vouches for its file"
    assert idxtrust._parse(open(p, "rb").read()) == rows, "the fan-outs are kept with the rows again"


def test_a_fan_out_of_an_index_without_chain_rows_is_kept():
    """An index with no chain rows (a segment of bodies only) has a fan-out of zeros: kept as it is,
    not taken for "none" (else every reader would compute it again and rewrite the file)."""
    ident = (1, 2, 3, 4, 5)
    rows = {1: (ident, b"d" * 32, segindex.FANOUT.pack(*[0] * 256)), 2: (ident, b"e" * 32, None),
            3: (ident, b"f" * 32, segindex.FANOUT.pack(*range(256)))}
    back = idxtrust._parse(idxtrust._dump(rows))
    assert back == rows


def test_a_fan_out_that_does_not_count_the_chain_rows_is_computed_again(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    run, n = _build(root, monkeypatch, sealed=2)
    truth = _answers(root, run, n)
    p = os.path.join(run_log_root(root, run), "log", idxtrust.NAME)
    rows = idxtrust._parse(open(p, "rb").read())
    good = {seg: bytes(r[2]) for seg, r in rows.items()}
    with open(p, "wb") as f:
        f.write(idxtrust._dump({seg: (ident, digest, bytes(1024)) for seg, (ident, digest, _f) in rows.items()}))
    assert _answers(root, run, n) == truth
    assert {seg: bytes(r[2]) for seg, r in idxtrust._parse(open(p, "rb").read()).items()} == good, "computed again and kept"
