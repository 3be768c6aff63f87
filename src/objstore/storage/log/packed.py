"""The packed segment file: a sealed segment as ``objstore gc`` rewrites it (docs/FORMAT.md "Packed segment").

A sealed segment holds one commit entry after another, each with its own small blocks; a store of
one-record commits therefore keeps every record in a block of its own and an entry meta beside it.
``gc`` rewrites a sealed segment into this layout: the same entries (the same entry numbers, times,
moves, object rows, index rows and roots, so the same chain checksums and every anchor still
verifies), but the objects merged into large compressed blocks (records with records, blobs with
blobs) and every entry's meta in one compressed frame at the end::

    header   "OSPK" 03 00 00 00 · u64 segment · u64 first entry · u64 entry count
             · 32 bytes: chain checksum before the first entry · 32 bytes: digest of the original index
    blocks   the stored bytes of every block, back to back
    meta     one zstd frame: msgpack {"entries": [[t, moves, objs, cut, recs, prevs, root, seal, idx, rw], …],
                                      "blocks": [[compression, raw length, stored length], …]}
    trailer  u64 meta offset · u64 meta stored length · u64 meta raw length · u64 file length
             · 32 bytes: chain checksum of the last entry

An object row is ``[id, type, length, block, offset]`` with ``block`` an index into the segment's
blocks, or -1 when gc removed the body (a deletion or redaction named it): the id, type and length
stay, so the chain checksums and the index rows stay. This module knows the layout only; the engine
checks the chain (each checksum recomputed from the metas, the last one equal to the trailer's and to
the next segment's header) and ``objstore.lifecycle.gc`` decides what goes in.
"""

from __future__ import annotations

import os
import struct
from typing import Any, NamedTuple

import blake3
import msgspec
import zstandard

PK_MAGIC = b"OSPK\x03\x00\x00\x00"
PK_HEADER = struct.Struct("<8sQQQ32s32s")  # magic, segment, first entry, entry count, previous checksum, original index digest
PK_TRAILER = struct.Struct("<QQQQ32s")  # meta offset, meta stored length, meta raw length, file length, last checksum
MAX_PACK_META = 1 << 30
META_LEVEL = 6  # the metas are read once per open that replays the segment: worth a denser frame

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()


class PackedFile(NamedTuple):
    """What a packed segment file says, its structure checked (its chain is the engine's to check)."""

    seg: int
    first: int
    entry_count: int
    prev: bytes
    orig_idx: bytes
    entries: list  # [[t, moves, objs, cut, recs, prevs, root, seal, idx, rw], …]
    blocks: list  # [[comp, raw, stored], …]
    offsets: list  # file offset of each block
    last: bytes  # the trailer's chain checksum of the last entry
    size: int


class PackError(ValueError):
    """A packed segment file that does not parse (the caller names the file)."""


def is_packed(fd: int) -> bool:
    return os.pread(fd, 8, 0) == PK_MAGIC


def read(fd: int) -> PackedFile:
    """Parse a packed segment's header, trailer and meta frame (no block is read)."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, PK_HEADER.size, 0)
    if len(head) != PK_HEADER.size or head[:8] != PK_MAGIC:
        raise PackError("bad packed segment header")
    _, seg, first, count, prev, orig = PK_HEADER.unpack(head)
    if size < PK_HEADER.size + PK_TRAILER.size:
        raise PackError("packed segment shorter than its header and trailer")
    tr = os.pread(fd, PK_TRAILER.size, size - PK_TRAILER.size)
    moff, mstored, mraw, flen, last = PK_TRAILER.unpack(tr)
    if flen != size:
        raise PackError(f"packed segment is {size} bytes, its trailer says {flen}")
    if moff < PK_HEADER.size or moff + mstored != size - PK_TRAILER.size or mraw > MAX_PACK_META:
        raise PackError("packed segment trailer does not frame its meta")
    try:
        m = _dec.decode(zstandard.ZstdDecompressor().decompress(os.pread(fd, mstored, moff), max_output_size=mraw))
        entries, blocks = m["entries"], m["blocks"]
    except (zstandard.ZstdError, msgspec.DecodeError, KeyError, TypeError) as e:
        raise PackError(f"packed segment meta does not decode: {e}") from None
    if type(entries) is not list or type(blocks) is not list or len(entries) != count or count < 1:
        raise PackError("packed segment meta does not hold its entries")
    offsets = []
    off = PK_HEADER.size
    for b in blocks:
        if type(b) is not list or len(b) != 3 or not all(type(x) is int and x >= 0 for x in b):
            raise PackError(f"packed block {b!r:.60} is not [compression, raw length, stored length]")
        offsets.append(off)
        off += b[2]
    if off != moff:
        raise PackError("packed segment blocks do not end where its meta starts")
    for row in entries:
        if type(row) is not list or len(row) != 10:
            raise PackError("a packed entry is not [t, moves, objs, cut, recs, prevs, root, seal, idx, rw]")
    return PackedFile(seg, first, count, prev, orig, entries, blocks, offsets, last, size)


class Writer:
    """Writes one packed segment file: blocks as they come, then the meta frame and the trailer.
    The caller fsyncs and renames it into place (``finish`` returns the file's BLAKE3)."""

    def __init__(self, path: str, seg: int, first: int, count: int, prev: bytes, orig_idx: bytes) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.off = 0
        self.blocks: list = []
        self._write(PK_HEADER.pack(PK_MAGIC, seg, first, count, prev, orig_idx))

    def _write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            if n <= 0:
                raise OSError(28, "short write")
            view = view[n:]
        self.off += len(data)

    def block(self, comp: int, raw_len: int, stored: bytes | memoryview) -> int:
        """Append one block's stored bytes; its index in the segment's block list."""
        self.blocks.append([comp, raw_len, len(stored)])
        self._write(stored)
        return len(self.blocks) - 1

    def copy_block(self, fd: int, off: int, comp: int, raw_len: int, stored_len: int) -> int:
        """Append a block copied as stored from ``fd`` at ``off`` (a large blob: never recompressed)."""
        self.blocks.append([comp, raw_len, stored_len])
        left, pos = stored_len, off
        while left:
            chunk = os.pread(fd, min(left, 1 << 20), pos)
            if not chunk:
                raise PackError(f"a block of {stored_len} bytes at offset {off} is truncated")
            self._write(chunk)
            left -= len(chunk)
            pos += len(chunk)
        return len(self.blocks) - 1

    def finish(self, entries: list[Any], last: bytes, sync: bool) -> None:
        raw = _enc.encode({"entries": entries, "blocks": self.blocks})
        meta = zstandard.ZstdCompressor(level=META_LEVEL).compress(raw)
        moff = self.off
        self._write(meta)
        size = self.off + PK_TRAILER.size
        self._write(PK_TRAILER.pack(moff, len(meta), len(raw), size, last))
        if sync:
            os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.path)
        except OSError:
            pass


# -- a gc's rewrite in progress: tmp/gc/pending ------------------------------------------------------
PENDING = os.path.join("tmp", "gc", "pending")  # under the store's root


def file_digest(path: str) -> bytes:
    """BLAKE3 of a file, read in 1 MiB chunks (a segment is never held whole); raises OSError."""
    h = blake3.blake3()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


MAX_PENDING = 64 << 20  # bytes of tmp/gc/pending: one row (~75 bytes) per segment a gc packs, for ~900k segments


def encode_pending(rows: list) -> bytes:
    """The bytes of tmp/gc/pending: msgpack of the rewrite rows [[segment, file digest, index digest]],
    then their BLAKE3 (a torn or edited file reads as none)."""
    data = _enc.encode(rows)
    return data + blake3.blake3(data).digest()


def read_pending(root: str) -> list:
    """The rewrite rows a gc recorded before replacing files (it may have been killed since); [] if none."""
    try:
        with open(os.path.join(root, PENDING), "rb") as f:
            raw = f.read(MAX_PENDING + 1)  # a file bigger than any gc writes is not one: never loaded whole
        if len(raw) > MAX_PENDING or len(raw) < 32 or blake3.blake3(raw[:-32]).digest() != raw[-32:]:
            return []
        rows = _dec.decode(raw[:-32])
    except (OSError, ValueError, msgspec.DecodeError):
        return []
    return [r for r in rows if type(r) is list and len(r) == 3] if type(rows) is list else []
