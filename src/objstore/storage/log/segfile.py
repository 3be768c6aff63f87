"""Segment files: their names, their headers (ordinary and packed), and reading or writing an entry in one.

A segment file ``log/<10 digits>.seg`` starts with a header (magic, segment number, first entry
number, checksum of the entry before it), then its entries back to back. Kept here:

* a header is written aside and linked into place, never left partial (``_write_segment_header``);
* an entry read without its blocks (``_parse_split``, ``entry_ending_at``) is checked exactly as
  ``parse_entry`` checks a whole one: its meta's shape and the chain checksum in its trailer;
* ``entry_ending_at`` is the only reading of "the entry that ends at this offset" (a checkpoint's
  position, a copy's end);
* a packed segment's entries (``packed_entries``) have their checksums recomputed from their metas,
  chained from the file's header, the last equal to its trailer's; otherwise the file is damage;
* a block streams out decompressed (``stream_block``) without ever being held whole, and stops at
  the raw length the entry declares.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import NamedTuple

import msgspec
import zstandard

from ...errors import CorruptLog, IntegrityError, StorageOSError
from .. import codec
from ..fileutil import FsyncPolicy
from . import packed
from .entry import LargeBlob, LogEntry
from .format import ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, MAX_META, SEG_HEADER, SEG_MAGIC, STATS, ZERO, _dec, logical_checksum
from .parse import _check_meta, _meta_shape_problem, _rows_shape_problem, _rw_shape_problem


def seg_name(n: int) -> str:
    return f"{n:010d}.seg"


def segment_header(seg: int, first: int, prev: bytes) -> bytes:
    return SEG_HEADER.pack(SEG_MAGIC, seg, first, prev)


def _write_segment_header(path: str, seg: int, first: int, prev: bytes, policy: FsyncPolicy) -> None:
    # Written aside and linked into place: a crash never leaves a segment with a partial header
    # (link, like O_EXCL, refuses a segment that exists already).
    tmp = f"{path}.new.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, SEG_HEADER.pack(SEG_MAGIC, seg, first, prev))
        policy.file(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _read_segment_header(fd: int, path: str) -> tuple:
    """(magic, segment, first entry, previous checksum) of a segment file, ordinary or packed."""
    raw = os.pread(fd, _HEADER_READ, 0)  # one read whichever kind of segment it is
    if raw[:8] == packed.PK_MAGIC:
        if len(raw) < packed.PK_HEADER.size:
            raise CorruptLog(path, "bad packed segment header")
        magic, seg, first, _count, prev, _orig = packed.PK_HEADER.unpack_from(raw)
        return magic, seg, first, prev
    raw = raw[: SEG_HEADER.size]
    if len(raw) != SEG_HEADER.size or raw[:8] != SEG_MAGIC:
        raise CorruptLog(path, "bad segment header")
    return SEG_HEADER.unpack(raw)


_HEADER_READ = max(SEG_HEADER.size, packed.PK_HEADER.size)


def _parse_split(meta: bytes, trailer: bytes, dlen: int, off: int, prev: bytes, seg: int, n: int) -> LogEntry | str:
    """parse_entry over an entry whose blocks were not read (header+meta, then trailer)."""
    if len(trailer) < ENTRY_TRAILER.size:
        return "incomplete entry"
    mlen = len(meta) - ENTRY_HEAD.size
    length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
    tlen, checksum = ENTRY_TRAILER.unpack(trailer)
    if tlen != length:
        return "trailer length disagrees"
    got = _check_meta(meta[ENTRY_HEAD.size :], checksum, prev, n, dlen)
    if isinstance(got, str):
        return got
    e_n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx, rw = got
    return LogEntry(e_n, t, moves, objs, blocks, cut, seg, off, off + len(meta), length, checksum, recs, prevs, root, seal, idx, rw)


def entry_ending_at(fd: int, off: int, seg: int) -> LogEntry | None:
    """The entry of an ordinary segment whose trailer ends at ``off``, its checksum recomputed from its
    meta and the entry before it; None if no whole entry ends there. The one reading of "the entry
    that ends at an offset": a checkpoint's position (the engine, backup, verify), a copy's end
    (backup). Meta and trailer only (no block is read), and not counted as an entry taken in."""
    trailer = os.pread(fd, ENTRY_TRAILER.size, off - ENTRY_TRAILER.size)
    if len(trailer) != ENTRY_TRAILER.size:
        return None
    length, checksum = ENTRY_TRAILER.unpack(trailer)
    start = off - length
    if start < SEG_HEADER.size:
        return None
    head = os.pread(fd, ENTRY_HEAD.size, start)
    if len(head) != ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
        return None
    _, mlen, dlen = ENTRY_HEAD.unpack(head)
    if mlen > MAX_META or ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size != length:
        return None
    try:
        m = _dec.decode(os.pread(fd, mlen, start + ENTRY_HEAD.size))
        got = LogEntry(m["n"], m["t"], m["moves"], m["objs"], m["blocks"], m["cut"], seg, start, start + ENTRY_HEAD.size + mlen, length,
                    checksum, m["recs"], m["prevs"], m["root"], m["seal"], m["idx"], m.get("rw"))
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return None
    if type(got.n) is not int or type(got.root) is not bytes or type(got.seal) is not bool:
        return None
    # The checksum in the trailer must be the one the meta gives, chained to the entry before
    # (else an edited meta could sit behind a real trailer).
    if start == SEG_HEADER.size:
        hdr = os.pread(fd, SEG_HEADER.size, 0)
        if len(hdr) != SEG_HEADER.size:
            return None
        prev = SEG_HEADER.unpack(hdr)[3]
    else:
        pt = os.pread(fd, ENTRY_TRAILER.size, start - ENTRY_TRAILER.size)
        if len(pt) != ENTRY_TRAILER.size:
            return None
        prev = ENTRY_TRAILER.unpack(pt)[1]
    try:
        if logical_checksum(prev, got.n, got.time, got.objs, got.moves, got.cut, got.recs, got.prevs, got.root, got.seal, got.idx, got.rw) != checksum:
            return None
    except (TypeError, msgspec.EncodeError):
        return None
    return got


def _write_parts(fd: int, parts: list, off: int) -> None:
    """Write an entry given as parts (bytes, or LargeBlob spill files copied in chunks)."""
    for part in parts:
        if isinstance(part, LargeBlob):
            with open(part.path, "rb") as f:
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    written = os.pwrite(fd, chunk, off)
                    if written != len(chunk):
                        raise OSError(28, f"short write ({written} of {len(chunk)} bytes)")
                    off += written
        else:
            written = os.pwrite(fd, part, off)
            if written != len(part):
                raise OSError(28, f"short write ({written} of {len(part)} bytes)")
            off += written


def stream_block(fd: int, block_off: int, stored_len: int, raw_len: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The decompressed bytes of one zstd block, in chunks, never all in memory (large blobs);
    stops at ``raw_len`` bytes whatever the frame claims."""
    class _Region:
        def __init__(self) -> None:
            self.pos, self.end = block_off, block_off + stored_len

        def read(self, n: int = -1) -> bytes:
            n = self.end - self.pos if n < 0 else min(n, self.end - self.pos)
            try:
                data = os.pread(fd, n, self.pos) if n > 0 else b""
            except OSError as e:
                raise StorageOSError("read a segment file", e) from None
            self.pos += len(data)
            return data

    left = raw_len
    try:
        for data in codec.zstd_chunks(_Region(), raw_len, chunk):
            left -= len(data)
            yield data
    except zstandard.ZstdError as e:
        raise IntegrityError("?", "", f"zstd data corrupt: {e}") from None
    if left:
        raise IntegrityError("?", "", f"block decompresses to {raw_len - left} of {raw_len} bytes")


class Packed(NamedTuple):
    """A packed segment as the engine reads it: its entries (checksums recomputed and chained from
    its header), the digest of the index it had before gc packed it, and what is wrong with it."""

    entries: list
    orig_idx: bytes
    prev: bytes
    problem: str | None


def packed_entries(fd: int, seg: int) -> Packed:
    """Read a packed segment file's entries, each checksum recomputed from its meta and chained from
    the header's; the last must be the trailer's (a problem otherwise: the file is damage)."""
    try:
        pf = packed.read(fd)
    except (packed.PackError, OSError) as e:
        return Packed([], ZERO, ZERO, str(e))
    out: list = []
    prev, n = pf.prev, pf.first
    if pf.seg != seg:
        return Packed([], pf.orig_idx, pf.prev, f"packed file says segment {pf.seg}")
    STATS["entries_decoded"] += pf.entry_count
    for i, raw in enumerate(pf.entries):
        t, moves, objs, cut, recs, prevs, root, seal, idx, rw = raw
        bad = (_meta_shape_problem(n, t, moves, objs, pf.blocks) or _rows_shape_problem(objs, recs, prevs, root, seal, idx)
               or _rw_shape_problem(rw))
        if bad is None and seal != (i == pf.entry_count - 1):
            bad = "only its last entry is a seal entry"
        if bad is not None:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {bad}")
        try:
            checksum = logical_checksum(prev, n, t, objs, moves, cut, recs, prevs, root, seal, idx, rw)
        except (TypeError, msgspec.EncodeError) as e:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {e}")
        out.append(LogEntry(n, t, moves, objs, pf.blocks, cut, seg, SEG_HEADER.size + i, packed.PK_HEADER.size, 0, checksum,
                         recs, prevs, root, seal, idx, rw, pf.offsets))
        prev, n = checksum, n + 1
    if prev != pf.last:
        return Packed([], pf.orig_idx, pf.prev, "its entries do not chain to the checksum its trailer names")
    return Packed(out, pf.orig_idx, pf.prev, None)
