"""The packed segment's layout (docs/FORMAT.md "Packed segment"), pinned by fixtures/golden3-packed.seg: read here
by the documented layout alone — struct, zstd, msgpack, BLAKE3, no objstore code — as a second implementation
would, it holds the entries of golden3-raw.seg (same times, moves, rows, roots, so the same chain checksums) and
the same objects; opened as a store with the segment that follows it, it reads and verifies."""

import os
import shutil
import struct

import blake3
import msgspec
import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures")
_enc = msgspec.msgpack.Encoder(order="sorted")


def _raw_entries():
    """(n, checksum, objects {id: canonical}) of golden3-raw.seg, by the ordinary segment layout."""
    data = open(os.path.join(FIX, "golden3-raw.seg"), "rb").read()
    off, out, objs = 56, [], {}
    while off < len(data):
        _magic, mlen, dlen = struct.unpack_from("<4sIQ", data, off)
        meta = msgspec.msgpack.decode(data[off + 16 : off + 16 + mlen])
        blocks, pos = [], off + 16 + mlen
        for comp, _raw, stored in meta["blocks"]:
            b = data[pos : pos + stored]
            blocks.append(zstandard.ZstdDecompressor().decompress(b) if comp == 1 else b)
            pos += stored
        for oid, _t, length, bi, o in meta["objs"]:
            objs[oid] = blocks[bi][o : o + length]
        length, checksum = struct.unpack_from("<Q32s", data, off + 16 + mlen + dlen)
        out.append((meta["n"], checksum))
        off += length
    return out, objs


def test_the_packed_fixture_reads_by_the_documented_layout():
    data = open(os.path.join(FIX, "golden3-packed.seg"), "rb").read()
    magic, seg, first, count, prev, orig = struct.unpack_from("<8sQQQ32s32s", data, 0)
    assert (magic, seg, first, count, prev) == (b"OSPK\x03\x00\x00\x00", 1, 1, 4, bytes(32))
    moff, mstored, mraw, flen, last = struct.unpack_from("<QQQQ32s", data, len(data) - 64)
    assert flen == len(data) and moff + mstored == len(data) - 64
    meta = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(data[moff : moff + mstored], max_output_size=mraw))
    offsets, pos = [], 96
    for _c, _r, stored in meta["blocks"]:
        offsets.append(pos)
        pos += stored
    assert pos == moff
    raw_entries, raw_objs = _raw_entries()
    chain, objs = prev, {}
    for i, (t, moves, orows, cut, recs, prevs, root, seal, idx, rw) in enumerate(meta["entries"]):
        fields = [first + i, t, [[o[0], o[1], o[2]] for o in orows], moves, cut, recs, prevs, root, seal, idx]
        if rw is not None:
            fields.append(rw)
        chain = blake3.blake3(chain + _enc.encode(fields)).digest()
        if i < len(raw_entries):
            assert (first + i, chain) == raw_entries[i]  # the same chain checksum as the ordinary segment's entry
        for oid, _t, length, bi, o in orows:
            comp, rawlen, stored = meta["blocks"][bi]
            b = data[offsets[bi] : offsets[bi] + stored]
            b = zstandard.ZstdDecompressor().decompress(b, max_output_size=rawlen) if comp == 1 else b
            objs[oid] = b[o : o + length]
            assert blake3.blake3(objs[oid]).digest() == oid
        assert seal == (i == count - 1)
    assert chain == last
    assert objs == raw_objs
    nxt = open(os.path.join(FIX, "golden3-packed-next.seg"), "rb").read()
    assert struct.unpack_from("<8sQQ32s", nxt, 0) == (b"OSSG\x03\x00\x00\x00", 2, 5, last)


def test_the_packed_fixture_opens_and_verifies_as_a_store(tmp_path, monkeypatch):
    # The golden segments are of the one-log format (3 to 5): a store of one log takes them (format 6's own vectors
    # are docs/FORMAT.md's), whatever format new stores get.
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "3")
    from objstore.runs.api import RunLog
    from objstore.runs.verify import verify
    from objstore.storage.store import Store

    root = str(tmp_path / "s")
    Store.init(root)
    shutil.copy(os.path.join(FIX, "golden3-packed.seg"), os.path.join(root, "log", "0000000001.seg"))
    shutil.copy(os.path.join(FIX, "golden3-packed-next.seg"), os.path.join(root, "log", "0000000002.seg"))
    s = Store.open(root)
    _, raw_objs = _raw_entries()
    assert {oid: s.get_raw(oid) for oid in raw_objs} == raw_objs
    assert [p.line() for p in verify(RunLog(s))] == []
