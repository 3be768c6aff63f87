"""Segment files by their bytes, for a backup, without opening the engine: the entry that ends at
an offset and its recomputed chain checksum (``segfile.entry_ending_at``, ``_last_entry``), the checksum of
entry ``n`` within a snapshot (``_checksum_at``), a file's first entry checksum and its last 32
bytes; read-only descriptors, whole writes and reads into a buffer. ``backup`` and
``backup_copy`` read SRC and DEST through these: what they return is checked (checksums recomputed
from metas and chained from the entry before), never taken from the file's word.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import StorageOSError
from ..storage.log import packed
from ..storage.log.format import ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, SEG_HEADER, SEG_MAGIC
from ..storage.log.local import LogEngine
from ..storage.log.segfile import _parse_split, _read_segment_header, entry_ending_at, packed_entries

MAGIC_LEN = 8
TAIL_LEN = 32


_UNKNOWN = b"?"


def _first_checksum(path: str) -> bytes | None:
    """The chain checksum of the first entry of an ordinary segment file; None if it has no entry;
    ``_UNKNOWN`` for another layout (a packed segment)."""
    try:
        with _ro(path) as fd:
            head = os.pread(fd, SEG_HEADER.size + ENTRY_HEAD.size, 0)
            if head[:MAGIC_LEN] != SEG_MAGIC:
                return _UNKNOWN
            if len(head) < SEG_HEADER.size + ENTRY_HEAD.size or head[SEG_HEADER.size:SEG_HEADER.size + 4] != ENTRY_MAGIC:
                return None
            _, mlen, dlen = ENTRY_HEAD.unpack_from(head, SEG_HEADER.size)
            trailer = os.pread(fd, ENTRY_TRAILER.size, SEG_HEADER.size + ENTRY_HEAD.size + mlen + dlen)
    except OSError as e:
        raise StorageOSError(f"read {path}", e.strerror) from None
    if len(trailer) != ENTRY_TRAILER.size:
        return None  # a torn first entry: no entry yet
    return bytes(ENTRY_TRAILER.unpack(trailer)[1])


def _tail32(path: str) -> bytes:
    try:
        with _ro(path) as fd:
            return os.pread(fd, TAIL_LEN, max(os.fstat(fd).st_size - TAIL_LEN, 0))
    except OSError as e:
        raise StorageOSError(f"read {path}", e.strerror) from None


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def _checksum_at(engine: LogEngine, tail_seg: int, lengths: dict[int, int], n: int) -> bytes | None:
    """The chain checksum of SRC's entry ``n`` within the snapshot (None if it has none): the segment
    holding it found by the headers' first entries, then its metas read (no block)."""
    for k in range(tail_seg, 0, -1):
        with _ro(engine.seg_path(k)) as fd:
            _, _, first, prev = _read_segment_header(fd, engine.seg_path(k))
            if first > n:
                continue
            if os.pread(fd, MAGIC_LEN, 0) == packed.PK_MAGIC:
                return next((e.checksum for e in packed_entries(fd, k).entries if e.n == n), None)
            off, m = SEG_HEADER.size, first
            while off < lengths[k]:
                head = os.pread(fd, ENTRY_HEAD.size, off)
                if len(head) != ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                    return None
                _, mlen, dlen = ENTRY_HEAD.unpack(head)
                length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
                e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                                 dlen, off, prev, k, m)
                if isinstance(e, str):
                    return None
                if e.n == n:
                    return e.checksum
                prev, m, off = e.checksum, m + 1, off + length
            return None
    return None

def _last_entry(fd: int, size: int, seg: int) -> tuple[bytes, int] | None:
    """(checksum, number of the next entry) of the entry ending at ``size`` in an ordinary segment,
    checked (its meta gives its trailer's checksum from the entry before it); for a file of only a
    header, (the header's previous checksum, its first entry); None if no whole entry ends there."""
    if size == SEG_HEADER.size:
        _, _, first, prev = SEG_HEADER.unpack(os.pread(fd, SEG_HEADER.size, 0))
        return prev, first
    e = entry_ending_at(fd, size, seg)
    return None if e is None else (bytes(e.checksum), e.n + 1)


def _read_into(fd: int, buf: memoryview, off: int, want: int) -> memoryview:
    """Up to ``want`` bytes at ``off`` read into ``buf``: the part of it that was filled."""
    n = os.preadv(fd, [buf[: min(want, len(buf))]], off)
    return buf[:n]


@contextmanager
def _ro(path: str) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)
