"""What an S3 store's bucket holds, key by key: HEAD, chunks, large entries, the store's marker.

- ``HEAD`` (``Head``) holds the log's position (entry number, checksum) and its newest entries inline (at most
  ``TAIL_ENTRIES`` and ``INLINE_BYTES``), names the newest chunk, and counts gc's in-place rewrites.
- ``chunk/<first>-<last>-<checksum of last>`` (``Chunk``) holds a run of older entries and names the chunk before it.
- ``entry/<n>-<checksum>`` holds one entry too large to sit inline.
- ``OBJSTORE`` is the store's marker (its format version), JSON as on disk.

These are the bytes docs/FORMAT.md describes; the engine (``engine``, ``reader``, ``gc``) decides what to write
and when. Keys are relative to the store's prefix.
"""

from __future__ import annotations

from typing import Any

import msgspec

HEAD_KEY = "HEAD"
MARKER_KEY = "OBJSTORE"
CHUNK_PREFIX = "chunk/"
ENTRY_PREFIX = "entry/"
TAIL_ENTRIES = 16
INLINE_BYTES = 64 << 10

encoder = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class Head(msgspec.Struct, array_like=True, frozen=True):
    """HEAD: format tag, entry count, checksum of the last entry, the newest chunk, the inline tail, the gc
    generation (how many gc runs rewrote keys in place; omitted while 0 and no lease was ever taken), and the
    writer's lease ``[epoch, holder]`` (``holder`` b"" when free; omitted until a lease is first taken)."""

    fmt: str
    n: int
    checksum: bytes
    chunk: list | None  # [first, last, checksum] of the newest chunk
    tail: list  # slots of entries chunk.last+1 .. n: entry bytes, or [n, checksum] of an entry/ key
    gc: int = 0
    lease: list | None = None  # [epoch, holder id] or [epoch, holder id, queued id]: engine.take_lease


class Chunk(msgspec.Struct, array_like=True, frozen=True):
    fmt: str
    prev: list | None
    first: int
    slots: list


head_decoder = msgspec.msgpack.Decoder(Head)
chunk_decoder = msgspec.msgpack.Decoder(Chunk)
HEAD_FMT = "objstore-s3-head-1"
CHUNK_FMT = "objstore-s3-chunk-1"


def encode_head(h: Head) -> bytes:
    """HEAD's bytes: five elements while no gc rewrote anything and no lease was taken (the layout before the gc
    generation), six with a gc generation, seven with a lease."""
    fields: list = [h.fmt, h.n, h.checksum, h.chunk, h.tail]
    if h.gc or h.lease is not None:
        fields.append(h.gc)
    if h.lease is not None:
        fields.append(h.lease)
    return encoder.encode(fields)


def lease_ok(lease: Any) -> bool:
    return lease is None or (isinstance(lease, list) and len(lease) in (2, 3) and type(lease[0]) is int and lease[0] >= 0
                             and all(isinstance(x, bytes) and len(x) <= 16 for x in lease[1:]))


def chunk_key(first: int, last: int, checksum: bytes) -> str:
    return f"{CHUNK_PREFIX}{first:012d}-{last:012d}-{checksum.hex()}"


def entry_key(n: int, checksum: bytes) -> str:
    return f"{ENTRY_PREFIX}{n:012d}-{checksum.hex()}"


def marker_bytes(version: int) -> bytes:
    import json
    return json.dumps({"format": "objstore", "version": version, "engine": "s3"}).encode() + b"\n"


def marker_version(data: bytes, where: str) -> int:
    import json
    try:
        meta = json.loads(data)
        version = meta.get("version") if isinstance(meta, dict) else None
    except ValueError:
        meta, version = None, None
    if not isinstance(meta, dict) or meta.get("format") != "objstore" or type(version) is not int:
        from ...errors import StoreFormatError
        raise StoreFormatError(where, "not an objstore marker")
    return version


def chunk_ref_ok(ref: Any) -> bool:
    return (isinstance(ref, list) and len(ref) == 3 and type(ref[0]) is int and type(ref[1]) is int
            and isinstance(ref[2], bytes) and len(ref[2]) == 32 and 1 <= ref[0] <= ref[1])


def chunk_range(key: str) -> tuple[int, int]:
    a, b, _c = key[len(CHUNK_PREFIX):].split("-")
    return int(a), int(b)
