"""The block cache (objstore.storage.log.blockcache) on the local engine's read path, counted at the lowest
layer: every zstd decompression the engine makes goes through its thread's ZstdDecompressor, wrapped here.

* reading every small blob of one packed blob block decompresses it once (issue 19: it was once per blob);
* the budget holds: held bytes are the blocks held (each charged ``ENTRY_COST`` more), never above the budget; a block read after
  more blocks than fit is decompressed again; a block bigger than ``max_block`` is never held;
* after a gc rewrite (a new file under the same name) a reader that held the old file's blocks reads the new
  file's: the surviving bytes, a removed body is ``BodyRemoved`` as for a reader that held nothing, and a
  damaged byte in the new file fails exactly as it does for that reader (the old file's block is never served);
* a held block is bytes, not a trusted object: one that does not hash to the id read is dropped and the file
  read again;
* threads reading through one small cache get the right bytes, the budget holding.
"""

from __future__ import annotations

import gc
import hashlib
import os
import threading

import pytest
from helpers import log_engine_of
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.errors import BodyRemoved, IntegrityError
from objstore.lifecycle import gc as GC
from objstore.storage.log import blockcache, packed
from objstore.storage.log import format as F

N = 40  # small blobs: one packed blob block (~30 KB raw)
C = blockcache.ENTRY_COST  # what a block held is charged beside its bytes


class Counting:
    """The engine's ZstdDecompressor, its decompress calls counted (raw lengths kept)."""

    def __init__(self, inner):
        self.inner, self.sizes = inner, []

    def decompress(self, data, *a, **kw):
        out = self.inner.decompress(data, *a, **kw)
        self.sizes.append(len(out))
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def zstd_calls(monkeypatch):
    F._decompressor()  # this thread's decompressor exists
    counting = Counting(F._zc.d)
    monkeypatch.setattr(F._zc, "d", counting)
    return counting


def _body(i: int, words: int = 12) -> bytes:
    return b" ".join(hashlib.sha256(b"%d %d" % (i, j)).hexdigest().encode() for j in range(words))


def _packed_store(root: str, n: int = N, words: int = 12, loose: bytes | None = None) -> list[bytes]:
    """A run whose n records each name a small blob, committed in one batch, then gc'd: the blobs lie in
    packed blob blocks. ``loose``: one more blob put last that nothing names (a prune removes it)."""
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("R")
    ids = []
    with log.store.batch():
        for i in range(n):
            b = log.put_blob(_body(i, words))
            log.record_attempt("R", i, 0, "succeeded", prompt=b)
            ids.append(bytes(b))
        if loose is not None:
            ids.append(bytes(log.put_blob(loose)))
    GC.gc(log.store)
    return ids


def _engine(root: str, oid: bytes, cache: blockcache.BlockCache | None = None):
    eng = Store.open(root).logs.locate(oid)
    eng._blocks = cache if cache is not None else blockcache.BlockCache(16 << 20)
    return eng


def _outcome(eng, oid: bytes):
    try:
        return eng.read(oid)
    except (BodyRemoved, IntegrityError) as e:
        return type(e)


def test_reading_every_blob_of_a_packed_block_decompresses_it_once(tmp_path, zstd_calls):
    root = str(tmp_path / "s")
    ids = _packed_store(root)
    eng = _engine(root, ids[0])
    locs = [eng.loc(i) for i in ids]
    assert len({(loc.seg, loc.block_off) for loc in locs}) == 1 and locs[0].comp == F.COMP_ZSTD  # one zstd block
    assert packed.is_packed(eng._fd(locs[0].seg))
    zstd_calls.sizes.clear()
    for i, oid in enumerate(ids):
        assert eng.read(oid) == b"blob %d\x00" % len(_body(i)) + _body(i)
    assert zstd_calls.sizes == [locs[0].block_raw]  # once, the whole block
    assert eng._blocks.held == locs[0].block_raw + C and len(eng._blocks) == 1
    for oid in ids:  # and again: nothing more
        eng.read(oid)
    assert len(zstd_calls.sizes) == 1


def test_the_budget_holds_and_evicts_the_least_recently_used(tmp_path, zstd_calls):
    root = str(tmp_path / "s")
    ids = _packed_store(root, n=150, words=300)  # ~3 MiB of blobs: several ~1 MiB packed blob blocks
    probe = _engine(root, ids[0])
    blocks: dict = {}
    for oid in ids:
        loc = probe.loc(oid)
        blocks.setdefault(loc.block_off, (oid, loc.block_raw))
    assert len(blocks) >= 3
    (a, ra), (b, rb), (c, rc) = [blocks[k] for k in sorted(blocks)][:3]
    cache = blockcache.BlockCache(ra + rb + rc + 3 * C - 1, max_block=max(ra, rb, rc))  # two of them fit, not three
    eng = _engine(root, ids[0], cache)
    zstd_calls.sizes.clear()
    eng.read(a)
    eng.read(b)
    assert zstd_calls.sizes == [ra, rb] and cache.held == ra + rb + 2 * C
    eng.read(a)  # a is now the most recently used...
    eng.read(c)  # ...so b goes to make room for c
    assert zstd_calls.sizes == [ra, rb, rc] and cache.held == ra + rc + 2 * C and cache.evicted == 1
    assert cache.held <= cache.budget
    eng.read(a)
    assert len(zstd_calls.sizes) == 3  # still held
    eng.read(b)
    assert zstd_calls.sizes[3:] == [rb]  # evicted: decompressed again
    assert cache.held == sum(len(v) + C for v in cache._blocks.values()) <= cache.budget

    small = blockcache.BlockCache(64 << 20, max_block=ra - 1)  # a block bigger than max_block is never held
    eng = _engine(root, ids[0], small)
    zstd_calls.sizes.clear()
    eng.read(a)
    eng.read(a)
    assert zstd_calls.sizes == [ra, ra] and small.held == 0


def test_a_reader_that_held_the_old_file_reads_the_rewritten_one(tmp_path, zstd_calls):
    root = str(tmp_path / "s")
    ids = _packed_store(root, loose=b"a blob nothing names, put last")
    loose = ids.pop()
    eng = _engine(root, ids[0])
    for oid in [*ids, loose]:
        eng.read(oid)  # the old file's block is held
    old = eng.loc(ids[0])
    GC.gc(Store.open(root), prune_unreferenced_older_than=0)  # a redaction: the file is rewritten without `loose`
    eng.refresh()
    new = eng.loc(ids[0])
    assert packed.is_packed(eng._fd(new.seg)) and new.seg == old.seg and new.block_raw < old.block_raw
    zstd_calls.sizes.clear()
    for i, oid in enumerate(ids):
        assert eng.read(oid) == b"blob %d\x00" % len(_body(i)) + _body(i)
    assert zstd_calls.sizes == [new.block_raw]  # the new file's block, read once
    with pytest.raises(BodyRemoved):
        eng.read(loose)
    fresh = _engine(root, ids[0])
    with pytest.raises(BodyRemoved):  # what a reader that held nothing raises
        fresh.read(loose)


def test_a_damaged_byte_in_the_rewritten_file_is_not_hidden_by_the_old_files_block(tmp_path):
    """The blob block keeps its offset in the rewritten file (the records before it are the same), and every
    surviving blob its offset in the block; only the file under the name changed. A cache keyed by name and
    offset would serve the old file's block and hide the damage; keyed by the descriptor, the new file is read."""
    root = str(tmp_path / "s")
    ids = _packed_store(root, loose=b"a blob nothing names, put last")
    loose = ids.pop()
    eng = _engine(root, ids[0])
    for oid in ids:
        eng.read(oid)
    old = eng.loc(ids[0])
    GC.gc(Store.open(root), prune_unreferenced_older_than=0)
    fresh = _engine(root, ids[0])
    new = fresh.loc(ids[0])
    assert (new.seg, new.block_off) == (old.seg, old.block_off)
    with open(fresh.seg_path(new.seg), "r+b") as f:  # damage the new file's blob block
        f.seek(new.block_off + new.stored_len // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    fresh = _engine(root, ids[0])  # opened after the damage: nothing held
    want = [_outcome(fresh, oid) for oid in ids]
    assert IntegrityError in want  # the damage shows
    eng.refresh()
    assert [_outcome(eng, oid) for oid in ids] == want
    assert _outcome(eng, loose) is BodyRemoved


def test_a_held_block_that_does_not_hash_is_dropped_and_the_file_read_again(tmp_path, zstd_calls):
    root = str(tmp_path / "s")
    ids = _packed_store(root)
    eng = _engine(root, ids[0])
    loc = eng.loc(ids[3])
    key = eng._block_key(loc)
    eng._blocks.put(key, b"\x00" * loc.block_raw)  # bytes of the right size that are not the block
    zstd_calls.sizes.clear()
    assert eng.read(ids[3]) == b"blob %d\x00" % len(_body(3)) + _body(3)
    assert zstd_calls.sizes == [loc.block_raw]  # the file read again
    assert eng._blocks.get(key) != b"\x00" * loc.block_raw  # and the block held now is the file's


def test_threads_read_right_bytes_through_one_small_cache(tmp_path):
    root = str(tmp_path / "s")
    ids = _packed_store(root, n=150, words=300)
    raws = {loc.block_raw for loc in (_engine(root, ids[0]).loc(i) for i in ids)}
    cache = blockcache.BlockCache(max(raws) + min(raws) + 2 * C, max_block=max(raws))  # fewer blocks fit than there are
    eng = _engine(root, ids[0], cache)
    want = {oid: b"blob %d\x00" % len(_body(i, 300)) + _body(i, 300) for i, oid in enumerate(ids)}
    bad: list = []

    def reader(k: int) -> None:
        order = ids[k:] + ids[:k]  # each thread from another place
        for _ in range(3):
            for oid in order:
                if eng.read(oid) != want[oid]:
                    bad.append(oid)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert cache.evicted > 0 and cache.held <= cache.budget


def test_the_s3_reader_decompresses_a_block_of_blobs_once(tmp_path, zstd_calls):
    """The S3 engine reads through the same cache (its blocks are an entry's: one commit's blobs share one)."""
    from objstore.storage import codec
    from objstore.storage.s3.bucket import MemoryBucket
    from objstore.storage.s3.engine import S3Engine

    bucket = MemoryBucket()
    objs = []
    for i in range(N):
        canon = codec.encode("blob", _body(i))
        objs.append((codec.object_id(canon), "blob", canon))
    S3Engine(bucket, str(tmp_path / "w")).commit(objs, [("run/r/x", None, objs[0][0], "blobs")])
    reader = S3Engine(bucket, str(tmp_path / "r"))
    reader._blocks = blockcache.BlockCache(16 << 20)
    locs = [reader.loc(o[0]) for o in objs]
    assert len({(loc.entry, loc.block_off) for loc in locs}) == 1 and locs[0].comp == F.COMP_ZSTD
    zstd_calls.sizes.clear()
    for oid, _t, canon in objs:
        assert reader.read(oid) == canon
    assert zstd_calls.sizes == [locs[0].block_raw]
    held = next(iter(reader._blocks._blocks))
    reader._blocks.put(held, b"\x00" * locs[0].block_raw)  # a held block that is not the entry's bytes
    assert reader.read(objs[5][0]) == objs[5][2]  # dropped and taken from the entry again
    assert zstd_calls.sizes == [locs[0].block_raw] * 2


def test_the_budget_comes_from_the_environment_and_a_closed_engine_leaves_nothing(tmp_path, monkeypatch):
    for text, want in (("", 16 << 20), ("4", 4 << 20), ("0.5", 1 << 19), ("0", 0), ("lots", 16 << 20)):
        monkeypatch.setenv("OBJSTORE_BLOCK_CACHE_MIB", text)
        assert blockcache._budget_from_env() == want
    off = blockcache.BlockCache(0)
    off.put((1, 0, 1, 10, 10), b"x" * 10)
    assert off.held == 0 and len(off) == 0  # a budget of 0 holds nothing
    root = str(tmp_path / "s")
    ids = _packed_store(root)
    cache = blockcache.BlockCache(16 << 20)
    other = (blockcache.token(), 0, 1, 5, 5)
    cache.put(other, b"other")  # another engine's block
    eng = _engine(root, ids[0], cache)
    eng.read(ids[0])
    assert len(cache) == 2
    eng.close()
    assert list(cache._blocks) == [other] and cache.held == 5 + C


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get", "drop", "discard"]), st.integers(1, 3), st.integers(0, 5),
                          st.integers(1, 1100)), max_size=60))
def test_the_cache_is_an_lru_of_bytes(ops):
    """Against a plain model (a list, most recent last): the same blocks held in the same order, ``held`` their
    charge, never above the budget, and each token's keys exactly its blocks (what ``discard`` drops)."""
    cache = blockcache.BlockCache(2000 + 3 * C, max_block=1000)
    model: list = []  # [(key, raw)], least recently used first
    for op, tok, off, size in ops:
        key = (tok, off)
        at = next((i for i, (k, _) in enumerate(model) if k == key), None)
        if op == "put":
            raw = bytes([off]) * size
            cache.put(key, raw)
            if size <= 1000:  # a bigger block is not held (nor does it move one held under its key)
                if at is not None:
                    model.pop(at)
                model.append((key, raw))
                while sum(len(r) + C for _, r in model) > cache.budget:
                    model.pop(0)
        elif op == "get":
            assert cache.get(key) == (model[at][1] if at is not None else None)
            if at is not None:
                model.append(model.pop(at))
        elif op == "drop":
            cache.drop(key)
            if at is not None:
                model.pop(at)
        else:
            cache.discard({tok})
            model = [(k, r) for k, r in model if k[0] != tok]
        assert list(cache._blocks.items()) == model
        assert cache.held == sum(len(r) + C for _, r in model) <= cache.budget
        assert {t: keys for t, keys in cache._by_tok.items()} == {t: {k for k, _ in model if k[0] == t} for t in {k[0] for k, _ in model}}


def test_an_object_alone_in_its_block_is_never_held(tmp_path, zstd_calls):
    """One-record commits (no gc): each record and blob fills a block of its own; a walk of them leaves the
    cache empty (nothing to serve a neighbour from), and a block shared by two objects is held."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("R")
    recs = [log.record_attempt("R", i, 0, "succeeded", prompt=log.put_blob(_body(i, 30))) for i in range(5)]
    ids = [bytes(r.id) for r in recs] + [bytes(r.body["prompt"]) for r in recs]
    eng = _engine(root, ids[0])
    for oid in ids:
        loc = eng.loc(oid)
        assert loc.length == loc.block_raw
        eng.read(oid)
        eng.read(oid)
    assert len(eng._blocks) == 0 and eng._blocks.hits == eng._blocks.misses == 0
    with log.store.batch():  # two blobs in one commit: one block
        pair = [bytes(log.put_blob(_body(100 + i, 30))) for i in range(2)]
        log.record_attempt("R", 9, 0, "succeeded", prompt=pair[0], output=pair[1])
    eng.refresh()
    assert eng.loc(pair[0]).block_off == eng.loc(pair[1]).block_off
    zstd_calls.sizes.clear()
    eng.read(pair[0])
    eng.read(pair[1])
    assert len(eng._blocks) == 1 and len(zstd_calls.sizes) == 1


def test_an_engine_finalized_while_the_cache_is_busy_in_this_thread_does_not_deadlock(tmp_path):
    """The garbage collector may finalize an engine nobody holds during any allocation, in the thread that holds
    the cache's lock (it allocates under it); the engine's close drops its blocks through that lock. Seen in a full
    test run: a backup's discard, a collection inside it, an old engine's __del__ discarding: a hang."""
    from objstore.storage.fileutil import FsyncPolicy
    from objstore.storage.log.local import LogEngine

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run()
    rec = log.record_attempt(run, 1, 0, "succeeded")
    held = log_engine_of(log.store, run)
    engine = LogEngine(held.root, FsyncPolicy(None), entry_view=held.entry_view, run=run)  # its own: nothing else holds it
    engine.read(rec.id)  # a segment open: a token of its own
    cycle: list = [engine]
    cycle.append(cycle)  # only the cyclic collector frees it: its __del__ runs inside gc.collect()
    del engine, cycle
    done = threading.Event()

    def busy() -> None:
        with blockcache.SHARED._mu:  # what discard and put hold while they allocate
            gc.collect()
        done.set()

    t = threading.Thread(target=busy, daemon=True)
    t.start()
    t.join(30)
    assert done.is_set(), "the finalizer's discard waited for a lock its own thread held"
