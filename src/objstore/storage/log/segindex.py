"""Persistent indexes of sealed segments (``log/<segment>.idx``), in the manner of git's ``.idx``.

A sealed segment never changes, so its index is written once, when it is
sealed, and read by ``pread`` and binary search: opening a store does not read
the objects of sealed segments, whatever their number. An index is derived
data: it is rebuilt from its segment whenever it is missing or does not match
(its header names the segment's last entry and chain checksum), and verify
compares it with a fresh build.

Layout (little-endian)::

    "OSIX" u8 version=1, 3 reserved
    u64 segment · u64 first entry · u64 last entry · 32 bytes: last entry's chain checksum
    u32 object count · u32 chain row count
    256 × u32 fan-out: number of objects whose id's first byte is <= i
    object rows, sorted by id: id(32) u64 entry u64 block offset u32 stored length
        u32 block raw length u32 offset in block u32 length u8 compression u8 type
    chain rows, sorted: key(16) = BLAKE3("<run>\\0<branch>")[:16] · u64 LSN · record id(32)
    32 bytes: BLAKE3 of everything before
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Iterable, Iterator

import blake3

from ..fileutil import write_derived

IDX_MAGIC = b"OSIX\x01\x00\x00\x00"
HEAD = struct.Struct("<8sQQQ32sII")
FANOUT = struct.Struct("<256I")
OBJ = struct.Struct("<32sQQIIIIBB")
CHAIN = struct.Struct("<16sQ32s")
TYPES = ("blob", "record", "fork", "journal", "segment", "grant", "deletion", "schema")
TYPE_CODE = {t: i for i, t in enumerate(TYPES)}


def chain_key(run: str, branch: int) -> bytes:
    return blake3.blake3(f"{run}\x00{branch}".encode()).digest()[:16]


def build(seg: int, first: int, last: int, checksum: bytes, objects: Iterable[tuple], chain: Iterable[tuple]) -> bytes:
    """Index bytes. ``objects``: (id, entry, block_off, stored, raw, off, length, comp, type);
    ``chain``: (run, branch, lsn, id), or (key, lsn, id) rows taken from another index."""
    rows = sorted(objects, key=lambda r: r[0])
    keys: dict = {}  # (run, branch) -> chain key, computed once per branch

    def keyed(c: tuple) -> tuple:
        if len(c) == 3:
            return c
        k = keys.get((c[0], c[1]))
        if k is None:
            k = keys[(c[0], c[1])] = chain_key(c[0], c[1])
        return k, c[2], c[3]

    crow = sorted(map(keyed, chain))
    fan = [0] * 256
    for r in rows:
        fan[r[0][0]] += 1
    root_sum = 0
    for i in range(256):
        root_sum += fan[i]
        fan[i] = root_sum
    parts = [HEAD.pack(IDX_MAGIC, seg, first, last, checksum, len(rows), len(crow)), FANOUT.pack(*fan)]
    parts.extend(OBJ.pack(oid, e, bo, st, raw, off, ln, comp, TYPE_CODE[t]) for oid, e, bo, st, raw, off, ln, comp, t in rows)
    parts.extend(CHAIN.pack(k, lsn, oid) for k, lsn, oid in crow)
    body = b"".join(parts)
    return body + blake3.blake3(body).digest()


def obj_row(oid: bytes, entry: int, block_off: int, stored: int, raw: int, off: int, length: int, comp: int, otype: str) -> bytes:
    return OBJ.pack(oid, entry, block_off, stored, raw, off, length, comp, TYPE_CODE[otype])


def chain_row(key: bytes, lsn: int, oid: bytes) -> bytes:
    return CHAIN.pack(key, lsn, oid)


def build_packed(seg: int, first: int, last: int, checksum: bytes, obj_rows: list, chain_rows: list) -> bytes:
    """``build`` from rows already packed (obj_row / chain_row): what verify uses, so that a
    segment's expected index costs a few bytes per object rather than a tuple of Python objects."""
    obj_rows.sort()  # ids lead each row: byte order is id order
    chain_rows.sort(key=lambda r: (r[:16], int.from_bytes(r[16:24], "little")))  # LSNs are little-endian
    fan = [0] * 256
    for r in obj_rows:
        fan[r[0]] += 1
    root_sum = 0
    for i in range(256):
        root_sum += fan[i]
        fan[i] = root_sum
    body = b"".join((HEAD.pack(IDX_MAGIC, seg, first, last, checksum, len(obj_rows), len(chain_rows)), FANOUT.pack(*fan),
                     b"".join(obj_rows), b"".join(chain_rows)))
    return body + blake3.blake3(body).digest()


class IndexError_(Exception):
    """An index file that cannot be used (the caller rebuilds it)."""


class FileBytes:
    """An index file's bytes read with ``pread`` where a lookup asks for them (``data[a:b]``), never
    mapped: a mapped file's pages count towards the reader's resident set, a whole large folio
    (up to 2 MB) per page touched, so binary searches over many segments' maps held most of every
    index resident. Owns its descriptor (closed with ``close`` or when collected)."""

    def __init__(self, fd: int, size: int, base: int = 0) -> None:
        """``base``: where these bytes start in the file (a checkpoint's ``active`` rows, ``size`` bytes long)."""
        self.fd, self.size, self.base = fd, size, base

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, sl: slice) -> bytes:
        start, stop, _ = sl.indices(self.size)
        if stop <= start:
            return b""
        got = os.pread(self.fd, stop - start, self.base + start)
        if len(got) != stop - start:
            raise IndexError_("truncated while read")
        return got

    def read(self, start: int, n: int) -> bytes:
        """``self[start:start + n]`` for ``0 <= start``, ``start + n <= len(self)``: one ``pread``."""
        got = os.pread(self.fd, n, self.base + start)
        if len(got) != n:
            raise IndexError_("truncated while read")
        return got

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


BLOCK = 16 << 10  # a binary search reads the rows left in one read once they fit in this many bytes
HINT_WINDOW = 64 << 10  # the chain rows of one first key byte are read at once if they fit in this many bytes
ITER_ROWS = 2048  # rows read at a time by a scan


def _lower_in(rows: bytes, key: bytes, lsn: int, lo: int, hi: int) -> int:
    """The first of the chain rows ``lo`` .. ``hi`` of ``rows`` (held in memory) at or after (key, lsn)."""
    size = CHAIN.size
    while lo < hi:
        mid = (lo + hi) // 2
        k, l, _ = CHAIN.unpack_from(rows, mid * size)
        if (k, l) < (key, lsn):
            lo = mid + 1
        else:
            hi = mid
    return lo


class SegmentIndex:
    """Read-only view of one index file (or of index bytes held in memory)."""

    checked = False  # its bytes were checked against the digest the log names (or built from the log)
    stat: os.stat_result | None = None  # the fstat of its file when it was opened (load_named)

    def __init__(self, data: bytes | FileBytes, seg: int, lazy_fan: bool = False) -> None:
        """``lazy_fan``: the bytes are the ones the log names (hashed, or vouched for by ``idxtrust``):
        the object fan-out is unpacked and checked on the first ``find``, not here (a label search
        never uses it)."""
        if isinstance(data, FileBytes):
            size, self._read = data.size, data.read
        else:
            size = len(data)
            self._read = lambda start, n: data[start : start + n]
        if size < HEAD.size + FANOUT.size + 32:
            raise IndexError_("too short")
        head = self._read(0, HEAD.size + FANOUT.size)
        magic, iseg, first, last, checksum, nobj, nchain = HEAD.unpack_from(head, 0)
        if magic != IDX_MAGIC or iseg != seg:
            raise IndexError_("bad header")
        want = HEAD.size + FANOUT.size + nobj * OBJ.size + nchain * CHAIN.size + 32
        if size != want:
            raise IndexError_(f"size {size}, header says {want}")
        self.data = data
        self.seg, self.first, self.last, self.checksum = seg, first, last, checksum
        self.nobj, self.nchain = nobj, nchain
        self._head = head
        self._fan: tuple | None = None
        self.chain_fan: bytes | None = None  # a hint (idxtrust): 256 × u32, rows of the chain section whose key's first byte is <= i
        self._win: tuple[int, bytes] | None = None  # (first row, bytes) of the chain rows the last search read
        if not lazy_fan and self.fan is None:
            # a fan-out that is not a non-decreasing count ending at the object count would send a lookup
            # outside the rows (a crafted or damaged index): unusable, the caller rebuilds it
            raise IndexError_("fan-out table does not count the object rows")
        self.obj0 = HEAD.size + FANOUT.size
        self.chain0 = self.obj0 + nobj * OBJ.size

    @property
    def fan(self) -> tuple | None:
        """The object fan-out, or None if it does not count the object rows (then ``find`` finds nothing:
        only an index file edited after it was vouched for can have one; verify names it)."""
        if self._fan is None:
            fan = FANOUT.unpack_from(self._head, HEAD.size)
            self._fan = fan if fan[255] == self.nobj and list(fan) == sorted(fan) else ()
        return self._fan or None

    def check_sum(self) -> bool:
        return blake3.blake3(self.data[:-32]).digest() == bytes(self.data[-32:])

    def find(self, oid: bytes) -> tuple | None:
        """The object row (id, entry, block_off, stored, raw, off, length, comp, type code) or None."""
        fan = self.fan
        if fan is None:
            return None
        b = oid[0]
        lo = fan[b - 1] if b else 0
        hi = fan[b]
        data, base, size = self.data, self.obj0, OBJ.size
        while (hi - lo) * size > BLOCK:
            mid = (lo + hi) // 2
            p = base + mid * size
            k = data[p : p + 32]
            if k < oid:
                lo = mid + 1
            elif k > oid:
                hi = mid
            else:
                return OBJ.unpack(data[p : p + size])
        rows = data[base + lo * size : base + hi * size]  # the fan-out's bucket (or what is left of it): one read
        lo, hi = 0, len(rows) // size
        while lo < hi:
            mid = (lo + hi) // 2
            k = rows[mid * size : mid * size + 32]
            if k < oid:
                lo = mid + 1
            elif k > oid:
                hi = mid
            else:
                return OBJ.unpack_from(rows, mid * size)
        return None

    def _chain_lower(self, key: bytes, lsn: int) -> int:
        """The first chain row at or after (key, lsn) (or, for ``lsn`` 0 when no row has the key, a row
        that does not have it: what ``chain_from`` and ``record_at`` ask): within the rows of the key's first byte if the
        ``chain_fan`` hint says where they are (one read, checked against the rows around it), else
        probes that read one row each until the rows left fit in ``BLOCK`` bytes, which are read at
        once and searched in memory."""
        lo, hi = 0, self.nchain
        data, base, size = self.data, self.chain0, CHAIN.size
        got = self._hinted(key, lsn)
        if got is not None:
            return got
        while (hi - lo) * size > BLOCK:
            mid = (lo + hi) // 2
            k, l, _ = CHAIN.unpack(data[base + mid * size : base + (mid + 1) * size])
            if (k, l) < (key, lsn):
                lo = mid + 1
            else:
                hi = mid
        rows = data[base + lo * size : base + hi * size]
        if rows:
            self._win = (lo, rows)
        return lo + _lower_in(rows, key, lsn, 0, len(rows) // size)

    def _hinted(self, key: bytes, lsn: int) -> int | None:
        """``_chain_lower`` through the ``chain_fan`` hint, or None (no hint, too many rows, or the hint
        is wrong). The hint decides nothing: the rows just outside the range it names are read with
        it, and the range is used only if the row before it has a smaller first key byte and the row
        after it a larger one; every row of the key is then inside it, as the sorted file says."""
        cf = self.chain_fan
        if cf is None:
            return None
        b, n, size = key[0], self.nchain, CHAIN.size
        lo = int.from_bytes(cf[4 * b - 4 : 4 * b], "little") if b else 0
        hi = int.from_bytes(cf[4 * b : 4 * b + 4], "little")
        if not 0 <= lo <= hi <= n or (hi - lo) * size > HINT_WINDOW:
            return None
        a, z = (lo - 1 if lo else 0), (hi + 1 if hi < n else hi)
        if z <= a:
            return lo
        rows = self._read(self.chain0 + a * size, (z - a) * size)
        if (lo and rows[0] >= b) or (hi < n and rows[(z - 1 - a) * size] <= b):
            return None
        self._win = (a, rows)
        x, y = lo - a, hi - a
        if lsn == 0:  # a key's first row (a label's rows all have it): one search in C over the rows
            at = rows.find(key, x * size, y * size)
            while at >= 0 and at % size:
                at = rows.find(key, at + 1, y * size)
            return a + at // size if at >= 0 else hi  # none: row hi has another first byte (or is past the end)
        return a + _lower_in(rows, key, lsn, x, y)

    def record_at(self, key: bytes, lsn: int) -> bytes | None:
        at = self._chain_lower(key, lsn)
        if at >= self.nchain:
            return None
        k, l, oid = next(self._chain_block(at, 1))
        return oid if (k, l) == (key, lsn) else None

    def close(self) -> None:
        """Let go of the file (a map or a descriptor); bytes held in memory stay."""
        if isinstance(self.data, FileBytes):
            self.data.close()

    def chain_from(self, key: bytes, lsn: int) -> Iterator[tuple[int, bytes]]:
        """(lsn, id) of the rows of one chain from ``lsn`` on, in LSN order."""
        at = self._chain_lower(key, lsn)
        n = 16  # most chains a segment holds rows of are short (a label's): read few rows first, then more
        while at < self.nchain:
            got = 0
            for k, l, oid in self._chain_block(at, n):
                if k != key:
                    return
                yield l, oid
                got += 1
            at += got
            n = min(ITER_ROWS, n * 8)

    def key_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """``list(chain_from(key, 0))``: a label's rows, found in the rows the search read when they hold them."""
        at = self._chain_lower(key, 0)
        win, size = self._win, CHAIN.size
        if win is not None and win[0] <= at:
            rows, i = win[1], (at - win[0]) * size
            out = []
            while i + size <= len(rows) and rows[i : i + 16] == key:
                _k, l, oid = CHAIN.unpack_from(rows, i)
                out.append((l, oid))
                i += size
            if i + size <= len(rows) or win[0] + len(rows) // size >= self.nchain:
                return out  # a row of another key follows them in the window, or the rows end there
        return list(self.chain_from(key, 0))

    def _chain_block(self, at: int, n: int) -> Iterator[tuple]:
        """Up to ``n`` rows from row ``at`` (at least one): from the rows the last search read if they
        hold row ``at``, else read."""
        size = CHAIN.size
        win = self._win
        if win is not None and win[0] <= at < win[0] + len(win[1]) // size:
            i = (at - win[0]) * size
            return CHAIN.iter_unpack(win[1][i : i + n * size])
        n = min(n, self.nchain - at)
        return CHAIN.iter_unpack(self._read(self.chain0 + at * size, n * size))

    def compute_chain_fan(self) -> bytes:
        """The ``chain_fan`` hint of this index, from its chain rows' first bytes (one read of the chain section)."""
        firsts = self.data[self.chain0 : self.chain0 + self.nchain * CHAIN.size][:: CHAIN.size]
        return FANOUT.pack(*(bisect.bisect_right(firsts, b) for b in range(256)))

    def objects(self) -> Iterator[tuple]:
        for at in range(0, self.nobj, ITER_ROWS):
            n = min(ITER_ROWS, self.nobj - at)
            p = self.obj0 + at * OBJ.size
            yield from OBJ.iter_unpack(self.data[p : p + n * OBJ.size])

    def object_rows(self) -> Iterator[tuple]:
        """Rows as ``build`` takes them (type names, not codes)."""
        for oid, e, bo, st, raw, off, ln, comp, tc in self.objects():
            yield oid, e, bo, st, raw, off, ln, comp, TYPES[tc]

    def chain_rows(self) -> Iterator[tuple]:
        size = CHAIN.size
        for at in range(0, self.nchain, ITER_ROWS):
            n = min(ITER_ROWS, self.nchain - at)
            p = self.chain0 + at * size
            yield from CHAIN.iter_unpack(self.data[p : p + n * size])


def open_index(path: str) -> tuple[FileBytes, os.stat_result] | None:
    """An index file opened for ``pread`` (``FileBytes``), with the fstat of its descriptor; None
    if it is missing or empty. Nothing of it is read yet."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if st.st_size <= 32:
        os.close(fd)
        return None
    return FileBytes(fd, st.st_size), st


def file_hash(data: FileBytes) -> bytes:
    """BLAKE3-256 of a whole file, read in chunks (nothing of it stays resident)."""
    h = blake3.blake3()
    for off in range(0, len(data), 1 << 20):
        h.update(data[off : off + (1 << 20)])
    return h.digest()


def load_named(path: str, seg: int, digest: bytes, vouched: Callable[[os.stat_result], bool] | None = None,
               hashed: Callable[[os.stat_result, SegmentIndex], None] | None = None) -> SegmentIndex | None:
    """An index file if its BLAKE3-256 (of the whole file) is ``digest``, the one the log names for
    it; None otherwise. Read with ``pread`` where lookups ask (``FileBytes``). ``vouched(st)``:
    whether a file of that fstat is known to hash to ``digest`` already (``idxtrust``: then it is
    not hashed); ``hashed(st, index)`` is told of a file that was hashed and matched."""
    got = open_index(path)
    if got is None:
        return None
    data, st = got
    try:
        known = vouched is not None and vouched(st)
        if not known and file_hash(data) != digest:
            data.close()
            return None
        idx = SegmentIndex(data, seg, lazy_fan=True)
    except (OSError, IndexError_):
        data.close()
        return None
    idx.stat = st
    if not known and hashed is not None:
        hashed(st, idx)
    return idx


def load(path: str, seg: int, check: bool = True) -> SegmentIndex:
    """An index file read with ``pread`` (``FileBytes``); with ``check``, its own trailing BLAKE3 is
    verified first (a damaged file; only the log's digest tells a forged one)."""
    got = open_index(path)
    if got is None:
        raise IndexError_("missing or empty")
    data = got[0]
    try:
        if check:
            h = blake3.blake3()
            for off in range(0, len(data) - 32, 1 << 20):
                h.update(data[off : min(off + (1 << 20), len(data) - 32)])
            if h.digest() != data[len(data) - 32 :]:
                raise IndexError_("checksum mismatch")
        return SegmentIndex(data, seg)
    except (OSError, IndexError_):
        data.close()
        raise


def write(path: str, data: bytes) -> None:
    """Atomic replace; no fsync: an index lost in a crash is rebuilt from its segment."""
    write_derived(path, data)
