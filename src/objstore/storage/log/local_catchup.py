"""Catching up: taking the entries appended since our position into the tables (no lock: readers never lock).

A reader's view is a position: every complete, checksummed entry up to it, nothing after. Kept here:

* an entry is folded into the tables from its meta alone, only after its rules, its deletions'
  authority and its root are checked (``_apply``); one that fails is damage at its offset (a
  *breach*), and nothing of it is taken;
* a last entry that is incomplete or fails its checksum is a torn tail, invisible; a bad entry
  followed by a complete one, or one the head witness says was made durable, is damage, never a
  torn tail to cut;
* a segment is followed by the next only after its seal entry, whose header must continue the
  chain; a later segment after an unsealed end makes that end damage;
* readers stop before damage every time (``prefix_ok``: verify reads the prefix instead of raising).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ...errors import CorruptLog
from . import packed
from .engine import deletion_rule, entry_bodies
from .entry import LogEntry, block_starts
from .format import COMP_GONE, ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, MAX_META, REMOVED, SEG_HEADER, ZERO, Loc, Position
from .local_state import LocalBase
from .parse import has_entry_after, parse_entry
from .rules import EntryEffect, plan_taken
from .segfile import Packed, _parse_split, _read_segment_header, packed_entries
from .witness import witness_disagreement

TAIL_WINDOW = 4 << 20  # readers take in the log's tail this many bytes at a time


class CatchUp(LocalBase):
    """Reading the log: catching up on the tail, and the entries of a segment in order."""

    def refresh(self) -> Position:
        """Take in every complete entry appended since our position (no lock: readers never lock).

        Raises CorruptLog where the log is damaged before its end (a bad entry followed by good
        ones, an entry that breaks a rule, a missing segment) unless the engine was opened to read
        the readable prefix (``prefix_ok``): the tables then stop before the damage."""
        with self._mu:
            while True:
                self._read_tail()
                if self.damaged is not None:
                    if self.prefix_ok:
                        return self.tables.pos
                    seg, off, why = self.damaged
                    raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} ({why}); the log is readable "
                                     "only up to it (run 'objstore verify')")
                if not self._sealed:
                    if self._seg < self._top or (self.torn is not None and os.path.exists(self.seg_path(self._seg + 1))):
                        # A later segment exists, so this one was sealed: its end is not a torn tail.
                        why = self.torn[-1] if self.torn is not None else "no seal entry"
                        self.torn, self.damaged = None, (self._seg, self._off, f"segment {self._seg} ends at offset {self._off} ({why}) "
                                                         "but a later segment exists")
                        continue
                    return self.tables.pos
                nxt = self._seg + 1
                try:
                    fd = self._fd(nxt)
                except CorruptLog:
                    if self._seg < self._top:
                        self.damaged = (self._seg, self._off, f"segment {nxt} is missing (segment {self._top} exists)")
                        if self.prefix_ok:
                            return self.tables.pos
                        raise CorruptLog(self.seg_path(nxt), f"segment missing (segment {self._top} exists)") from None
                    return self.tables.pos  # sealed, the next segment not created yet (its sealer died): the next writer makes it
                hdr = _read_segment_header(fd, self.seg_path(nxt))
                if hdr[2] != self.tables.pos.entry + 1 or hdr[3] != self.tables.pos.checksum:
                    self.damaged = (nxt, 0, "segment header does not continue the previous segment's chain")
                    if self.prefix_ok:
                        return self.tables.pos
                    raise CorruptLog(self.seg_path(nxt), "segment header does not continue the previous segment's chain")
                self._retire_active()
                self._seg, self._off, self._sealed = nxt, SEG_HEADER.size, False

    def _packed(self, seg: int) -> Packed | None:
        """The packed entries of segment ``seg`` if gc packed it (cached per file), else None."""
        if seg in self._packs:
            return self._packs[seg]
        fd = self._fd(seg)
        pk = packed_entries(fd, seg) if packed.is_packed(fd) else None
        self._packs[seg] = pk
        return pk

    def _take_packed(self, pk: Packed) -> None:
        """Take in the entries of a packed (sealed) segment after our position."""
        seg = self._seg
        if self._sealed:
            return
        if pk.problem is not None:
            self.torn, self.damaged = None, (seg, SEG_HEADER.size, f"packed segment {seg}: {pk.problem}")
            return
        first = pk.entries[0].n
        if self.tables.pos.entry + 1 == first and self.tables.pos.checksum != pk.prev:
            self.torn, self.damaged = None, (seg, SEG_HEADER.size, "packed segment does not continue the previous segment's chain")
            return
        for e in pk.entries[self.tables.pos.entry + 1 - first:]:
            bad = self._apply(e)
            if bad is not None:
                self.torn, self.damaged, self.breach = None, (seg, e.offset, f"entry {e.n}: {bad}"), True
                return
            self._off = e.offset + 1
        # The next segment's first entry names the index this segment had when it was sealed;
        # the packed file carries that digest (the log's own value is what it is checked against).
        self._built.setdefault(seg, pk.orig_idx)
        self.torn = None

    def _read_tail(self) -> None:
        if self.damaged is not None:
            return  # readers stop before damage, every time
        pk = self._packed(self._seg)
        if pk is not None:
            self._take_packed(pk)
            return
        fd = self._fd(self._seg)
        size = os.fstat(fd).st_size
        if self._off == SEG_HEADER.size and self._seg == 1 and self.tables.pos.entry == 0:
            _read_segment_header(fd, self.seg_path(1))
        if size <= self._off or self._sealed:
            self.torn = None
            return
        t = self.tables
        while self._off < size:
            off = self._off
            # Read in windows of up to 4 MiB; an entry larger than that (a large blob) is read as
            # its meta and trailer only: the tables need no block.
            head = os.pread(fd, ENTRY_HEAD.size, off)
            e = None
            window = TAIL_WINDOW
            if len(head) == ENTRY_HEAD.size and head[:4] == ENTRY_MAGIC:
                _, mlen, dlen = ENTRY_HEAD.unpack(head)
                length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
                if mlen <= MAX_META and length <= 2 * TAIL_WINDOW:
                    window = max(window, length)  # the first entry always fits its window
                if (dlen > TAIL_WINDOW or length > 2 * TAIL_WINDOW) and mlen <= MAX_META and off + length <= size:
                    e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                                     dlen, off, t.pos.checksum, self._seg, t.pos.entry + 1)
            if e is None:
                buf = os.pread(fd, min(size - off, window), off)
                pos = 0
                while pos < len(buf):
                    e = parse_entry(buf, pos, len(buf), t.pos.checksum, self._seg, t.pos.entry + 1)
                    if isinstance(e, str):
                        break
                    bad = self._apply(e._replace(offset=off + pos, data_off=off + e.data_off))
                    if bad is not None:
                        self.torn, self.damaged, self.breach = None, (self._seg, off + pos, f"entry {e.n}: {bad}"), True
                        self._off = off + pos
                        return
                    pos += e.length
                    if e.seal:
                        break
                self._off = off + pos
                if self._sealed:
                    self.torn = None
                    return
                if pos == len(buf) or (pos > 0 and self._off < size):
                    continue  # the window ended inside an entry: read on from there
            if isinstance(e, str):
                self._bad_tail_entry(fd, size, e)
                return
            assert e is not None  # a split entry: a window's entries were applied above, and its end continued or returned
            bad = self._apply(e)
            if bad is not None:
                self.torn, self.damaged, self.breach = None, (self._seg, off, f"entry {e.n}: {bad}"), True
                return
            self._off = off + e.length
            if self._sealed:
                break
        self.torn = None

    def _bad_tail_entry(self, fd: int, size: int, e: str) -> None:
        """The entry at the tail position does not read (``e`` says why): a torn tail to cut, or
        damage if a complete entry follows it or the head witness says it was made durable."""
        t = self.tables
        rest = os.pread(fd, size - self._off, self._off)
        # Look for a complete entry only past what the bad entry's own header claims: a
        # torn write can hold anything inside its range, an entry-shaped blob included.
        start = 1
        if len(rest) >= ENTRY_HEAD.size and rest[:4] == ENTRY_MAGIC:
            _, bad_mlen, bad_dlen = ENTRY_HEAD.unpack_from(rest, 0)
            if bad_mlen <= MAX_META:
                start = ENTRY_HEAD.size + bad_mlen + bad_dlen + ENTRY_TRAILER.size
        w = None
        if start < len(rest) and has_entry_after(rest, start, t.pos.entry + 2):
            # Not a torn write: a complete entry follows the bad one. Bit rot in the middle of
            # the log must never be cut away; readers stop here and writers refuse.
            self.torn = None
            self.damaged = (self._seg, self._off, f"{e}; complete entries follow it")
        elif (w := self.witness()) is not None and w[0] > t.pos.entry:
            # Acknowledged means kept: the witness says this entry was made durable, so
            # whatever is wrong with it is damage, never a torn write to cut. A reader (no
            # lock) may have read it while its writer was still writing it: read it again.
            if self._entry_now_complete(fd, t.pos.checksum, t.pos.entry + 1):
                self.torn = None
                return  # completed meanwhile: the next refresh takes it in
            self.torn = None
            self.damaged = (self._seg, self._off, f"{e}; entry {t.pos.entry + 1} was made durable "
                            f"(the head witness names entry {w[0]})")
        else:
            self.torn = (self._seg, self._off, len(rest), e)

    def _entry_now_complete(self, fd: int, prev: bytes, n: int) -> bool:
        """Whether the entry at the tail position reads whole and checksummed now."""
        head = os.pread(fd, ENTRY_HEAD.size, self._off)
        if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
            return False
        _, mlen, dlen = ENTRY_HEAD.unpack(head)
        if mlen > MAX_META:
            return False
        length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
        got = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, self._off), os.pread(fd, ENTRY_TRAILER.size, self._off + length - ENTRY_TRAILER.size),
                           dlen, self._off, prev, self._seg, n)
        return not isinstance(got, str)

    def _apply(self, e: LogEntry, plan: EntryEffect | None = None) -> str | None:
        """Fold one entry into the tables from its meta alone (no block is read), after checking
        it against the rules and its root; returns what is wrong with it instead (nothing changes)."""
        t = self.tables
        first = e.offset == SEG_HEADER.size
        if plan is None:
            if first and e.seg > 1:
                if e.idx is None or e.idx[0] != e.seg - 1:
                    return f"the first entry of segment {e.seg} does not name the index of segment {e.seg - 1}"
            elif e.idx is not None:
                return "only the first entry of a segment names an index"
            got = plan_taken(t, e)
            if isinstance(got, str):
                return got
            bad = deletion_rule(self, e.n, e.objs, e.moves, lambda: entry_bodies(e, e.seg, self._read_loc), got)
            if bad is not None:
                return bad
            plan = got
        bstarts = block_starts(e)
        for oid, otype, length, bi, boff in e.objs:
            if bi == REMOVED:
                t.locs[oid] = Loc(e.n, e.seg, 0, COMP_GONE, 0, 0, 0, length, otype)
                continue
            comp, raw, stored = e.blocks[bi][:3]
            t.locs[oid] = Loc(e.n, e.seg, bstarts[bi], comp, stored, raw, boff, length, otype)
        if e.idx is not None and self._built.get(e.idx[0], e.idx[1]) != e.idx[1]:
            return f"it names an index of segment {e.idx[0]} that is not the one its entries give"
        t.commit(plan, e.n, e.checksum, e.time)
        for seg, _f, _i in e.rw or ():
            # Every process that takes in a rewrite entry (not only gc's) lets go of the old file's
            # index and packed entries: its lookups must see the removed rows, or a writer would
            # deduplicate a new put against a body that is gone.
            self._drop_segment(seg)
        w = self._wit
        if w is not None and w[0] == e.n and w[1] != e.checksum:
            self.witness_problem = witness_disagreement(w, e.n, e.checksum)
        if e.seal:
            self._sealed = True
        return None

    def entries(self) -> Iterator[LogEntry]:
        """Every complete entry in log order (verify, ref log). Stops at a torn tail."""
        prev, n, seg = ZERO, 1, 1
        while os.path.exists(self.seg_path(seg)):
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            if hdr[2] != n or hdr[3] != prev:
                raise CorruptLog(self.seg_path(seg), "segment header does not continue the previous segment's chain")
            sealed = False
            for e in self._segment_entries(seg, prev, n):
                yield e
                prev, n, sealed = e.checksum, e.n + 1, e.seal
            if not sealed:
                return
            seg += 1

    def _segment_entries(self, seg: int, prev: bytes, n: int) -> Iterator[LogEntry]:
        """The complete entries of one segment, up to its seal entry or its first bad entry (meta
        and trailer only: no block is read)."""
        pk = self._packed(seg)
        if pk is not None:
            if pk.problem is None and pk.entries[0].n == n and pk.prev == prev:
                yield from pk.entries
            return
        fd = self._fd(seg)
        size = os.fstat(fd).st_size
        off = SEG_HEADER.size
        while off < size:
            head = os.pread(fd, ENTRY_HEAD.size, off)
            if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                return
            _, mlen, dlen = ENTRY_HEAD.unpack(head)
            if mlen > MAX_META or off + ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size > size:
                return  # declares more bytes than the file holds: a torn tail (nothing is read for it)
            meta = os.pread(fd, ENTRY_HEAD.size + mlen, off)
            trailer = os.pread(fd, ENTRY_TRAILER.size, off + ENTRY_HEAD.size + mlen + dlen)
            e = _parse_split(meta, trailer, dlen, off, prev, seg, n)
            if isinstance(e, str):
                return
            yield e
            if e.seal:
                return
            prev, n = e.checksum, n + 1
            off += e.length
