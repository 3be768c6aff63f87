"""The log's format (format 3): its constants, positions, object locations and the chain checksum.

What every module of the log stands on. docs/FORMAT.md is the reference; the numbers here are its.

* An entry is ``ENTRY_HEAD`` (magic, meta length, data length), the meta (msgpack), its blocks and
  ``ENTRY_TRAILER`` (whole length, chain checksum). A segment file opens with ``SEG_HEADER``.
* The chain checksum (``logical_checksum``) covers an entry's logical content and the checksum of
  the entry before it, never compressed bytes or block layout: recompressing or repacking keeps it.
* A ``Position`` (entry number, checksum after it) names one exact state of the log.
"""

from __future__ import annotations

import struct
import threading
from typing import NamedTuple

import blake3
import msgspec
import zstandard

from .. import codec

SEG_MAGIC = b"OSSG\x03\x00\x00\x00"
SEG_HEADER = struct.Struct("<8sQQ32s")  # magic, segment number, first entry number, previous checksum
ENTRY_MAGIC = b"OSE3"
ENTRY_HEAD = struct.Struct("<4sIQ")  # magic, meta length, data length
ENTRY_TRAILER = struct.Struct("<Q32s")  # whole entry length, chain checksum
MAX_META = 256 << 20
MAX_ENTRY_DATA = 1 << 40
ZERO = b"\x00" * 32
BLOCK_BYTES = 128 << 10  # objects are laid into blocks of about this many raw bytes
LARGE_BLOB = 8 << 20  # blobs above this stream in and out, each in a block of its own
ZSTD_LEVEL = 1
COMP_RAW, COMP_ZSTD = 0, 1
COMP_GONE = 2  # an index row whose object's body gc removed (a recorded deletion or redaction named it)
REMOVED = -1  # a packed segment's object row whose body gc removed: no block
WITNESS_MAGIC = b"OSW3"
WITNESS = struct.Struct("<4sQ32s")  # magic, entry number, chain checksum: log/witness
LABEL_ROW = struct.Struct("<16sQ32s")  # a label row: key · entry number · record id (the index's chain row layout)
MIN_COMPRESS = 512  # smaller blocks are stored raw: zstd saves little there and costs a commit's worth of CPU
CHAIN_TYPES = ("journal", "segment", "grant", "deletion", "schema")  # object types whose entry row names their ``previous``
INTENT_KINDS = ("intent", "intent_committed")  # record kinds whose facts the tables keep (compensation)

_enc = msgspec.msgpack.Encoder(order="sorted", enc_hook=codec.id_hook)  # an Id in a low-level call: its plain bytes
_dec = msgspec.msgpack.Decoder()
STATS = {"entries_decoded": 0, "blocks_read": 0}  # what 'counted, not timed' tests count
_zc = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_zc, "c", None)
    if c is None:
        c = _zc.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        _zc.d = zstandard.ZstdDecompressor()
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    _compressor()
    return _zc.d


class Position(NamedTuple):
    """A log position: the number of entries it includes and the chain checksum after the last."""

    entry: int
    checksum: bytes


class Loc(NamedTuple):
    """Where an object is: entry number, segment, offset of its block's bytes, block kind, sizes, offset in block."""

    entry: int
    seg: int
    block_off: int  # file offset of the stored block
    comp: int
    stored_len: int
    block_raw: int
    off: int  # offset of the object's canonical bytes inside the decompressed block
    length: int  # canonical length
    otype: str


def logical_checksum(prev: bytes, n: int, t: float, objs: list, moves: list, cut: list | None, recs: list = (),  # type: ignore[assignment]
                     prevs: list = (), root: bytes = ZERO, seal: bool = False, idx: list | None = None,  # type: ignore[assignment]
                     rw: list | None = None) -> bytes:
    """The chain checksum: over logical content (ids, types, lengths, index rows, moves, the tables'
    root), never over compressed bytes or block layout, so recompression or a repack keeps it. A
    rewrite entry's ``rw`` is appended (only when present, so every other entry hashes as before)."""
    fields = [n, t, [[o[0], o[1], o[2]] for o in objs], moves, cut, recs, prevs, root, seal, idx]
    if rw is not None:
        fields.append(rw)
    logical = _enc.encode(fields)
    return blake3.blake3(prev + logical).digest()


def _show(v: object) -> str:
    """A ref value as messages spell it: hex for an id, the text of a symbolic ref, "(absent)"."""
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else str(v)
