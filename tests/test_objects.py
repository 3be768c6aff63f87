"""Object backends: write once, re-hash on every read, packs with one commit point (invariant 1)."""

import os
import struct

import pytest
import zstandard

from objstore import codec
from objstore.errors import IntegrityError, ObjectNotFound
from objstore.objects import LOOSE_MAGIC, MemoryBackend, PackFile
from objstore.store import Store


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    if request.param == "memory":
        return Store.memory()
    return Store.init(str(tmp_path / "s"))


def test_put_get_roundtrip_and_dedup(store):
    a = store.put_blob(b"x" * 1000)
    b = store.put_blob(b"x" * 1000)
    assert a == b
    assert store.get_blob(a) == b"x" * 1000
    rid = store.put("record", {"k": 1, "ids": [a]})
    assert store.get(rid) == ("record", {"k": 1, "ids": [a]})
    assert store.get_raw(rid) == codec.encode("record", {"k": 1, "ids": [a]})


def test_batch_objects_visible_inside_and_durable_after(store):
    with store.batch():
        ids = [store.put("record", {"i": i}) for i in range(500)]
        assert store.get(ids[7]) == ("record", {"i": 7})
    for i, oid in enumerate(ids):
        assert store.get(oid) == ("record", {"i": i})
    assert sorted(store.backend.iter_ids()) == sorted(set(ids))


def test_unknown_id_is_typed(store):
    with pytest.raises(ObjectNotFound):
        store.get(bytes(32))


def test_existing_id_is_never_overwritten(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    oid = s.put_blob(b"original " * 20)
    path = s.backend.loose_path(oid)
    before = open(path, "rb").read()
    mtime = os.stat(path).st_mtime_ns
    ino = os.stat(path).st_ino
    assert s.backend.put(oid, [codec.encode("blob", b"original " * 20)]) is False
    assert open(path, "rb").read() == before
    assert os.stat(path).st_ino == ino and os.stat(path).st_mtime_ns == mtime


def test_loose_file_format(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    small = s.put_blob(b"hi")
    raw = open(s.backend.loose_path(small), "rb").read()
    assert raw == LOOSE_MAGIC + b"\x00" + codec.encode("blob", b"hi")
    big = s.put_blob(b"abc" * 10000)
    raw = open(s.backend.loose_path(big), "rb").read()
    assert raw[:5] == LOOSE_MAGIC + b"\x01"
    assert zstandard.ZstdDecompressor().decompress(raw[5:]) == codec.encode("blob", b"abc" * 10000)
    # Incompressible data is stored raw: compression only when smaller.
    rnd = os.urandom(5000)
    raw = open(s.backend.loose_path(s.put_blob(rnd)), "rb").read()
    assert raw[4] == 0


def test_every_read_rehashes(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    oid = s.put_blob(b"hello")
    path = s.backend.loose_path(oid)
    raw = bytearray(open(path, "rb").read())
    raw[-1] ^= 0x01
    open(path, "wb").write(raw)
    with pytest.raises(IntegrityError, match="hash mismatch"):
        s.get_blob(oid)


def test_huge_zstd_frame_declaration_is_refused_without_allocating(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    oid = codec.object_id(b"blob 3\x00abc")
    path = s.backend.loose_path(oid)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # A zstd frame header claiming 2**40 bytes of content, followed by junk.
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + struct.pack("<Q", 1 << 40) + b"\x00" * 8
    with open(path, "wb") as f:
        f.write(LOOSE_MAGIC + b"\x01" + frame)
    with pytest.raises(IntegrityError, match=r"zstd frame declares an impossible size \(1099511627776\)"):
        s.get(oid)


def test_pack_layout_single_commit_point(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    with s.batch():
        ids = [s.put("record", {"n": i, "pad": "y" * 300}) for i in range(2000)]
    packs = os.listdir(os.path.join(s.root, "packs"))
    assert len(packs) == 1, "one batch, one pack"
    assert os.listdir(os.path.join(s.root, "tmp")) == []
    pack = PackFile(os.path.join(s.root, "packs", packs[0]))
    assert set(pack.entries) == set(ids)
    assert pack.verify_checksum()
    assert len(pack.block_pos) > 1  # blocks, so one read does not inflate the whole pack
    # Log-like records compress well across a block.
    raw_total = sum(len(codec.encode("record", {"n": i, "pad": "y" * 300})) for i in range(2000))
    assert os.path.getsize(pack.path) < 0.6 * raw_total


def test_large_blob_streamed_from_file(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    src = tmp_path / "big.bin"
    chunk = os.urandom(1 << 16)
    with open(src, "wb") as f:
        for _ in range(64):  # 4 MiB
            f.write(chunk)
    oid = s.put_blob_file(str(src))
    assert oid == s.put_blob(open(src, "rb").read())
    assert s.get_blob(oid) == open(src, "rb").read()


def test_memory_backend_scan_flags_damage():
    b = MemoryBackend()
    data = codec.encode("blob", b"zz")
    oid = codec.object_id(data)
    b.put(oid, [data])
    b.objects[oid] = data[:-1] + b"y"
    items = list(b.scan())
    assert items[0].error is not None and "hash mismatch" in str(items[0].error)


def test_large_blob_streams_out_and_hash_checked(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for i in range(40):
            f.write(bytes([i]) * (1 << 16) + os.urandom(1 << 14))
    oid = s.put_blob_file(str(src))
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        n = s.copy_blob_to(oid, f)
    assert n == os.path.getsize(src) and open(out, "rb").read() == open(src, "rb").read()
    # damage the stored bytes: the stream ends in a typed error, not silent garbage
    p = s.backend.loose_path(oid)
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(p, "wb").write(bytes(data))
    with pytest.raises(IntegrityError):
        with open(tmp_path / "out2.bin", "wb") as f:
            s.copy_blob_to(oid, f)


def test_chain_walk_rehashes_packed_records(tmp_path):
    from objstore import RunLog

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("w")
    with log.store.batch():
        recs = [log.record_attempt(run, step=i, attempt=0, state="succeeded") for i in range(50)]
    assert [r.id for r in log.records(run)][1:] == [r.id for r in recs]
    # Damage one record inside the (raw-stored) block: every read path must notice.
    (name,) = os.listdir(os.path.join(root, "packs"))
    path = os.path.join(root, "packs", name)
    pack = PackFile(path)
    blk, off, ln = pack.entries[recs[20].id]
    data = bytearray(open(path, "rb").read())
    comp = data[pack.block_pos[blk]]
    if comp == 0:
        data[pack.block_pos[blk] + 9 + off + ln - 3] ^= 0x01
        open(path, "wb").write(bytes(data))
        fresh = RunLog(Store.open(root))
        with pytest.raises(IntegrityError, match=recs[20].id.hex()):
            fresh.records(run)
    else:  # compressed block: damage shows as a corrupt block or a hash mismatch, never as data
        data[pack.block_pos[blk] + 9 + 10] ^= 0x01
        open(path, "wb").write(bytes(data))
        fresh = RunLog(Store.open(root))
        with pytest.raises(IntegrityError):
            fresh.records(run)


def test_mutating_a_returned_record_does_not_leak_into_later_reads(tmp_path):
    from objstore import RunLog

    log = RunLog(Store.init(str(tmp_path / "s")))
    run = log.start_run("m")
    with log.store.batch():
        for i in range(5):
            log.record_attempt(run, step=i, attempt=0, state="succeeded")
    recs = log.records(run)
    recs[-1].body["state"] = "tampered"
    assert log.records(run)[-1].body["state"] == "succeeded"
