"""The log read as verify reads it: every entry from the segment files, independently of any engine's tables.

Each segment is read on its own (``scan_segment``: its header, its entries chained from it, each
block decompressed once and each object sliced out) so verify can check segments in parallel and
chain them after (``scan_log`` does it in order). A damaged entry ends a segment's scan (it hides
where the next one starts); a large blob is hash-checked while it streams (``HashedLarge``), never
held whole. Nothing here decides what a problem means: verify does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import blake3
import zstandard

from ...errors import BodyRemoved, IntegrityError
from . import packed
from .engine import ScanEntry, ScanProblem
from .entry import LogEntry
from .format import (
    COMP_RAW,
    COMP_ZSTD,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    ENTRY_TRAILER,
    LARGE_BLOB,
    MAX_META,
    REMOVED,
    SEG_HEADER,
    SEG_MAGIC,
    ZERO,
    _decompressor,
)
from .local_state import LocalBase
from .parse import parse_entry
from .segfile import _parse_split, _read_segment_header, packed_entries, stream_block


class SegmentHead(NamedTuple):
    """What a segment file's header says: its number, its first entry, the checksum it chains to."""

    seg: int
    first: int
    prev: bytes


class SegmentEnd(NamedTuple):
    """Where a segment's scan ended: the next entry number and the checksum of the last entry read;
    ``complete`` when every entry of the file was read (not stopped by ``upto`` or by damage)."""

    next_entry: int
    prev: bytes
    complete: bool


def scan_log(engine: LocalBase, upto: int) -> Iterator[ScanEntry | ScanProblem]:
    """Read entries 1..upto from the segment files, sequentially, independently of the engine's
    tables: each entry's checksum chain, then each block decompressed and each object sliced out.

    Yields ScanProblem (and stops) where the log itself is damaged."""
    prev, n, seg = ZERO, 1, 1
    while n <= upto:
        end: SegmentEnd | None = None
        for item in scan_segment(engine.seg_path(seg), engine.seg_path(seg + 1), seg, upto):
            if isinstance(item, SegmentHead):
                if item.seg != seg or item.first != n or item.prev != prev:
                    yield ScanProblem("broken-log-chain", engine.seg_path(seg), chain_break(seg, n, prev, item))
                    return
            elif isinstance(item, SegmentEnd):
                end = item
            elif isinstance(item, ScanProblem):
                if item.code == "missing-segment":
                    item = item._replace(detail=f"{item.detail}; the log ends at entry {n - 1}")
                yield item
                return
            else:
                yield item
        if end is None or end.next_entry > upto:
            return
        if not end.complete or not os.path.exists(engine.seg_path(seg + 1)):
            yield ScanProblem("missing-segment", engine.seg_path(seg + 1), f"segment {seg + 1} is missing; the log ends at entry {end.next_entry - 1}")
            return
        prev, n, seg = end.prev, end.next_entry, seg + 1


def chain_break(seg: int, n: int, prev: bytes, head: SegmentHead) -> str:
    """Why segment ``seg``'s header does not continue the log at entry ``n`` (checksum ``prev``)."""
    why = (f"its header says segment {head.seg}, first entry {head.first}" if (head.seg, head.first) != (seg, n)
           else f"its header chains to checksum {head.prev.hex()}, entry {n - 1} has {prev.hex()}")
    return f"segment {seg} does not continue the log at entry {n} ({why})"


def scan_segment(path: str, next_path: str, seg: int, upto: int | None,
                 prev: bytes | None = None) -> Iterator[SegmentHead | ScanEntry | ScanProblem | SegmentEnd]:
    """Read one segment file on its own: its header (SegmentHead), then its entries up to entry
    ``upto`` (None: all), each checksum chained from the header's (or from ``prev``), then a
    SegmentEnd. Needs nothing from other segments (verify checks segments in parallel and chains
    them after).

    A ScanProblem ends the scan of this file (a damaged entry hides where the next one starts),
    except garbage after the last entry of a sealed segment, which is followed by a SegmentEnd."""
    dec = _decompressor()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield ScanProblem("missing-segment", path, f"segment {seg} is missing")
        return
    try:
        if packed.is_packed(fd):
            yield from _scan_packed(fd, path, seg, upto, prev, dec)
            return
        raw = os.pread(fd, SEG_HEADER.size, 0)
        if len(raw) != SEG_HEADER.size or raw[:8] != SEG_MAGIC:
            yield ScanProblem("corrupt-segment", path, "bad segment header")
            return
        _, hseg, first, hprev = SEG_HEADER.unpack(raw)
        yield SegmentHead(hseg, first, hprev)
        prev = hprev if prev is None else prev
        n = first
        size = os.fstat(fd).st_size
        off = SEG_HEADER.size
        while off < size and (upto is None or n <= upto):
            head = os.pread(fd, ENTRY_HEAD.size, off)
            if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                if os.path.exists(next_path):
                    break  # garbage after the last entry of a sealed segment: reported below
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: bad entry header")
                return
            _, mlen, dlen = ENTRY_HEAD.unpack(head)
            length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
            if mlen > MAX_META or off + length > size:
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: truncated ({size - off} of {length} bytes)")
                return
            if dlen > LARGE_BLOB:  # a large blob: read meta and trailer, stream the blocks
                e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                                 dlen, off, prev, seg, n)
                buf = None
            else:
                buf = os.pread(fd, length, off)
                e = parse_entry(buf, 0, len(buf), prev, seg, n)
            if isinstance(e, str):
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: {e}")
                return
            if buf is not None:
                e = e._replace(offset=off, data_off=off + e.data_off)
            yield ScanEntry(e, _entry_objects(buf, e, off, dec, fd), path)
            prev, n = e.checksum, n + 1
            off += length
        if upto is not None and n > upto and off < size:
            yield SegmentEnd(n, prev, False)  # the snapshot ends inside this file
            return
        if off != size:
            yield ScanProblem("garbage-after-entry", path, f"{size - off} bytes after the last entry of sealed segment {seg}")
        yield SegmentEnd(n, prev, True)
    finally:
        os.close(fd)


def _scan_packed(fd: int, path: str, seg: int, upto: int | None, prev: bytes | None,
                 dec: zstandard.ZstdDecompressor) -> Iterator[SegmentHead | ScanEntry | ScanProblem | SegmentEnd]:
    """scan_segment over a packed segment: its entries from the meta frame, chained from its header,
    each object sliced out of the merged block it lies in (each block decompressed once). An object
    whose body gc removed is given as a BodyRemoved error: verify decides whether a deletion names it."""
    hdr = _read_segment_header(fd, path)
    yield SegmentHead(hdr[1], hdr[2], hdr[3])
    pk = packed_entries(fd, seg)
    if pk.problem is not None:
        yield ScanProblem("corrupt-segment", path, f"packed segment {seg}: {pk.problem}")
        return
    n = hdr[2]
    last = hdr[3] if prev is None else prev
    if prev is not None and prev != hdr[3]:
        yield ScanProblem("broken-log-chain", path, f"packed segment {seg} does not chain from checksum {prev.hex()}")
        return
    cache: dict[int, Any] = {}
    for e in pk.entries:
        if upto is not None and e.n > upto:
            yield SegmentEnd(e.n, last, False)
            return
        out: list = []
        for oid, otype, length, bi, off in e.objs:
            if bi == REMOVED:
                out.append((oid, otype, BodyRemoved(oid.hex())))
                continue
            got = cache.get(bi)
            if got is None:
                comp, raw_len, stored_len = e.blocks[bi][:3]
                bo = e.bofs[bi] if e.bofs is not None else 0
                if comp == COMP_ZSTD and raw_len > LARGE_BLOB:
                    h = blake3.blake3()
                    try:
                        for chunk in stream_block(fd, bo, stored_len, raw_len):
                            h.update(chunk)
                        got = HashedLarge(h.digest(), raw_len)
                    except IntegrityError as err:
                        got = err.args[2]
                else:
                    stored = os.pread(fd, stored_len, bo)
                    try:
                        got = dec.decompress(stored, max_output_size=raw_len) if comp == COMP_ZSTD else stored
                        if len(got) != raw_len:
                            got = "block decompresses to the wrong size" if comp == COMP_ZSTD else "block truncated"
                    except zstandard.ZstdError as err:
                        got = f"zstd data corrupt: {err}"
                if len(cache) > 4:
                    cache.clear()  # blocks are laid in entry order: an entry reads the blocks of its neighbours
                cache[bi] = got
            if isinstance(got, str):
                out.append((oid, otype, IntegrityError(oid.hex(), "", got)))
            else:
                out.append((oid, otype, got if isinstance(got, HashedLarge) else got[off : off + length]))
        yield ScanEntry(e, out, path)
        last, n = e.checksum, e.n + 1
    yield SegmentEnd(n, last, True)


class HashedLarge(NamedTuple):
    """What verify gets for a large blob's block: its BLAKE3, computed while streaming it."""

    digest: bytes
    length: int


def _entry_objects(buf: bytes | None, e: LogEntry, base: int, dec: zstandard.ZstdDecompressor, fd: int) -> list:
    out: list[tuple] = []
    starts = []
    pos = e.data_off - base
    for _comp, _raw_len, stored_len in e.blocks:
        starts.append(pos)
        pos += stored_len
    raws: dict[int, Any] = {}
    for bi, (comp, raw_len, stored_len) in enumerate(e.blocks):
        if comp == COMP_ZSTD and raw_len > LARGE_BLOB:
            h = blake3.blake3()
            try:
                for chunk in stream_block(fd, base + starts[bi], stored_len, raw_len):
                    h.update(chunk)
                raws[bi] = HashedLarge(h.digest(), raw_len)
            except IntegrityError as err:
                raws[bi] = err.args[2]
            continue
        stored = buf[starts[bi] : starts[bi] + stored_len] if buf is not None else os.pread(fd, stored_len, base + starts[bi])
        if comp == COMP_ZSTD:
            try:
                raw = dec.decompress(stored, max_output_size=raw_len)
                if len(raw) != raw_len:
                    raise zstandard.ZstdError("block decompresses to the wrong size")
            except zstandard.ZstdError as err:
                raws[bi] = f"zstd data corrupt: {err}"
                continue
        elif comp == COMP_RAW:
            raw = stored
        else:
            raws[bi] = f"unknown block compression {comp}"
            continue
        raws[bi] = raw
    for oid, otype, length, bi, off in e.objs:
        if bi == REMOVED:  # a row whose body is not in the log (an upgrade replayed it after gc): verify judges it
            out.append((oid, otype, BodyRemoved(oid.hex())))
            continue
        got = raws.get(bi)
        if got is None or isinstance(got, str):
            out.append((oid, otype, IntegrityError(oid.hex(), "", got or "block missing")))
            continue
        data = got if isinstance(got, HashedLarge) else got[off : off + length]
        out.append((oid, otype, data))
    return out
