"""The layout of a store on object storage, pinned (docs/FORMAT.md, "A store on S3-compatible object storage"):
fixtures/golden-s3.json holds every key of a small store with its bytes. It is read here by the documented
layout alone (msgpack, the entry trailer), then by the engine, and written again byte for byte."""

from __future__ import annotations

import json
import os
import struct
import sys

import msgspec

from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.s3.engine import S3Engine

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures")
sys.path.insert(0, FIX)
import make_golden_s3  # noqa: E402

GOLDEN = json.load(open(os.path.join(FIX, "golden-s3.json")))
KEYS = {k: bytes.fromhex(v) for k, v in GOLDEN["keys"].items()}
TRAILER = struct.Struct("<Q32s")  # whole entry length, chain checksum
HEAD_STRUCT = struct.Struct("<4sIQ")  # magic, meta length, data length


def _entry(raw: bytes, n: int) -> bytes:
    """The chain checksum an entry's trailer names, after checking its framing as documented."""
    magic, mlen, dlen = HEAD_STRUCT.unpack_from(raw, 0)
    assert magic == b"OSE3"
    length, checksum = TRAILER.unpack_from(raw, len(raw) - TRAILER.size)
    assert length == len(raw) == HEAD_STRUCT.size + mlen + dlen + TRAILER.size
    assert msgspec.msgpack.decode(raw[HEAD_STRUCT.size:HEAD_STRUCT.size + mlen])["n"] == n
    return checksum


def test_the_keys_read_by_the_documented_layout():
    head = msgspec.msgpack.decode(KEYS["HEAD"])
    fmt, n, checksum, chunk, tail = head
    assert fmt == "objstore-s3-head-1" and n == 20 and checksum.hex() == GOLDEN["position"][1]
    assert chunk[:2] == [1, 16] and len(chunk[2]) == 32
    key = f"chunk/{chunk[0]:012d}-{chunk[1]:012d}-{chunk[2].hex()}"
    cfmt, prev, first, slots = msgspec.msgpack.decode(KEYS[key])
    assert (cfmt, prev, first, len(slots)) == ("objstore-s3-chunk-1", None, 1, 16)
    sums = [_entry(s, i + 1) for i, s in enumerate(slots)]
    assert sums[-1] == chunk[2]
    assert len(tail) == 4 and all(isinstance(s, bytes) for s in tail[:3]) and tail[3][0] == 20
    sums += [_entry(s, 17 + i) for i, s in enumerate(tail[:3])]
    big = KEYS[f"entry/{20:012d}-{tail[3][1].hex()}"]
    sums.append(_entry(big, 20))
    assert len(big) > 64 << 10 and sums[-1] == checksum == tail[3][1]
    assert set(KEYS) == {"HEAD", key, f"entry/{20:012d}-{checksum.hex()}"}


def test_the_engine_reads_them_and_writes_them_again_byte_for_byte():
    b = MemoryBucket("s3://golden/store")
    for k, v in KEYS.items():
        b.poke(k, v)
    eng = S3Engine(b, None)
    pos = eng.refresh()
    assert [pos.entry, pos.checksum.hex()] == GOLDEN["position"]
    assert {k: (v.hex() if isinstance(v, bytes) else v) for k, v in eng.tables.refs.items()} == GOLDEN["refs"]
    for objects, _moves, _t in make_golden_s3.commits():
        assert eng.read(objects[0][0]) == objects[0][2]
    assert make_golden_s3.build().raw() == KEYS
