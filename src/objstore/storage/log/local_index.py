"""Where things are: object locations, the chain index and label rows, across the active segment and the sealed segments' indexes.

The active segment's rows are in the tables (from its entries, or a checkpoint's ``frozen`` rows,
which are checked against the records they point at when used, and dropped for the entries' own
rows when one fails). A sealed segment's rows are in its index file, used only if its BLAKE3 is
the digest the log names for it (the next segment's first entry), else built again from the
segment's entries and checked against that digest; a wrong file is left for verify to name and
replaced by the next writer. When gc replaces a segment file, every process that takes in the
rewrite entry lets go of the old file's index and packed entries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import blake3

from ...errors import CorruptLog
from . import segindex
from .engine import Engine
from .format import COMP_GONE, Loc
from .local_state import LocalBase
from .segfile import _read_segment_header
from .segrows import _loc_of, _segment_rows, _write_index
from .tables import LogState


class SegmentIndexes(LocalBase):
    """Object locations, chain and label rows; sealed segments' indexes, built or loaded."""

    def loc(self, oid: bytes) -> Loc | None:
        t = self.tables
        loc = t.locs.get(oid)
        if loc is not None:
            return loc
        if t.frozen is not None:
            row = t.frozen.find(oid)
            if row is not None:
                return _loc_of(row, self._seg)
        loc = self._sealed_locs.get(oid)
        if loc is not None:
            return loc
        hint = self._hint  # walks and folds read neighbours: try the segment of the last hit first
        if 0 < hint < self._seg and hint in self._idx:
            row = self._idx[hint].find(oid)
            if row is not None:
                if row[7] != COMP_GONE:
                    return self._found_sealed(oid, _loc_of(row, hint))
                hint = 0  # a removed body may be stored again later: search every segment, newest first
        for seg in range(self._seg - 1, 0, -1):
            if seg != hint:
                try:
                    idx = self._index(seg)
                except CorruptLog:
                    continue  # a missing or damaged sealed segment: its objects are not found (verify names it)
                row = idx.find(oid)
                if row is not None:
                    self._hint = seg
                    loc = _loc_of(row, seg)
                    return loc if row[7] == COMP_GONE else self._found_sealed(oid, loc)
        return None

    def _found_sealed(self, oid: bytes, loc: Loc) -> Loc:
        """Remember where a sealed segment holds ``oid``'s body (bounded: forgotten wholesale when full). Not a body
        gc removed: stored again later, the newer copy is the one to find."""
        cache = self._sealed_locs
        if len(cache) >= 4096:
            cache.clear()
        cache[oid] = loc
        return loc

    def iter_chain(self, run: str, branch: int, lsn: int = 0) -> Iterator[tuple[int, bytes]]:
        tip = self.tables.tips.get((run, branch))
        if tip is None or lsn > tip[0]:
            return
        key = segindex.chain_key(run, branch)
        prev: bytes | None | bool = False
        for seg in range(1, self._seg):
            idx = self._index(seg)
            for l, oid in idx.chain_from(key, lsn):
                if l != lsn:
                    return  # a gap: the index is damaged (verify names it); stop rather than guess
                self._hint = seg
                yield l, oid
                prev = oid
                lsn += 1
        frozen = self.tables.frozen
        if frozen is not None:
            rows = list(frozen.chain_from(key, lsn))
            ok = all(l == lsn + i for i, (l, _) in enumerate(rows))
            check_prev = prev
            for l, oid in rows:
                if not ok or not self._confirmed(run, branch, l, oid, check_prev if l > 0 else False):
                    ok = False
                    break
                check_prev = oid
            if not ok and self._drop_frozen():
                yield from Engine.iter_chain(self, run, branch, lsn)
                return
            for l, oid in rows:
                yield l, oid
                lsn += 1
        yield from Engine.iter_chain(self, run, branch, lsn)

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        t = self.tables
        oid = t.chain.get((run, branch, lsn))
        if oid is not None:
            return oid
        tip = t.tips.get((run, branch))
        if tip is None or lsn > tip[0]:
            return None
        if lsn == tip[0]:
            return tip[1]  # the tables' root covers the tips
        key = segindex.chain_key(run, branch)
        if t.frozen is not None:
            oid = t.frozen.record_at(key, lsn)
            if oid is not None:
                if self._confirmed(run, branch, lsn, oid):
                    return oid
                self._drop_frozen()
                return self.record_at(run, branch, lsn)
        for seg in range(self._seg - 1, 0, -1):
            oid = self._index(seg).record_at(key, lsn)
            if oid is not None:
                return oid
        return None

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """The active segment's rows (the tail's, and the checkpoint's, which the caller checks
        against the record as it does every row), then each sealed segment's index, newest first:
        a binary search per segment, reading only the rows with this key."""
        rows = self.tables.label_rows(key)  # the active segment's: in the root, whoever wrote the checkpoint
        for seg in range(self._seg - 1, 0, -1):
            try:
                idx = self._index(seg)
            except CorruptLog:
                continue  # a missing or damaged sealed segment: its rows are not found (verify names it)
            rows.extend(idx.key_rows(key))
        return sorted(set(rows), reverse=True)

    def iter_ids(self) -> Iterator[bytes]:
        for seg in range(1, self._seg):
            for row in self._index(seg).objects():
                yield row[0]
        if self.tables.frozen is not None:
            for row in self.tables.frozen.objects():
                yield row[0]
        yield from list(self.tables.locs)

    def _index(self, seg: int) -> segindex.SegmentIndex:
        """A sealed segment's index: the file if its BLAKE3 is the digest the log names for it,
        else built again from the segment's entries (and checked against that digest)."""
        idx = self._idx.get(seg)
        if idx is not None:
            return idx
        named = self.tables.idx.get(seg) or self._built.get(seg)
        idx = (self._open_vouched(seg, named) or self._load_named(seg, named)) if named is not None else None
        if idx is None:
            idx = self._rebuild_index(seg, named)
        idx.checked = True
        self._idx[seg] = idx
        return idx

    def _open_vouched(self, seg: int, named: bytes) -> segindex.SegmentIndex | None:
        """``_load_named``'s common case, in few steps (a label search opens every sealed index): the
        hint file vouches for this very file with ``named`` and holds its chain fan-out. None: any
        other case (``_load_named`` decides it)."""
        v = self._verified
        row = v.row(seg)
        if row is None or row[1] != named or row[2] is None:
            return None
        try:
            fd = os.open(self.idx_path(seg), os.O_RDONLY)
        except OSError:
            return None
        data = None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != row[0]:
                os.close(fd)
                return None
            data = segindex.FileBytes(fd, st.st_size)
            idx = segindex.SegmentIndex(data, seg, lazy_fan=True)
        except (OSError, segindex.IndexError_):
            if data is not None:
                data.close()
            else:
                os.close(fd)
            return None
        if int.from_bytes(row[2][-4:], "little") != idx.nchain:
            idx.close()  # a fan-out that does not count this index's chain rows: computed again (_load_named)
            return None
        idx.stat, idx.chain_fan = st, row[2]
        return idx

    def _load_named(self, seg: int, named: bytes) -> segindex.SegmentIndex | None:
        """Segment ``seg``'s index file if its bytes hash to ``named``: hashed unless the hint file
        vouches for this very file (``idxtrust``), and recorded there once hashed."""
        started = time.time_ns()  # before the file is opened: an edit after it gives a later ctime than the row holds
        verified = self._verified
        hashed: list = []
        idx = segindex.load_named(self.idx_path(seg), seg, named, lambda st: verified.vouches(seg, st, named),
                                  lambda st, got: hashed.append(got))
        if idx is None:
            return None
        # the chain fan-out hint (a label search reads the rows of its key's first byte at once: SegmentIndex._hinted)
        fan = None if hashed else verified.chain_fan(seg)
        if fan is not None and int.from_bytes(fan[-4:], "little") != idx.nchain:
            fan = None  # it does not count this index's chain rows: computed again, and kept with the row
        if fan is None:
            try:
                fan = idx.compute_chain_fan()
            except (OSError, segindex.IndexError_):
                fan = None
            if idx.stat is None:
                pass  # (load_named always gives a stat; nothing to record without one)
            elif hashed:
                verified.note(seg, idx.stat, named, started, fan)
            elif fan is not None:
                verified.note_fan(seg, idx.stat, named, fan)
        idx.chain_fan = fan
        return idx

    def _rebuild_index(self, seg: int, named: bytes | None) -> segindex.SegmentIndex:
        """Index a sealed segment from its entries' metas (the file is missing or is not the one
        the log names)."""
        data = self._scan_index_bytes(seg)
        if named is not None and blake3.blake3(data).digest() != named and not self._rewritten_and_linked(seg, data):
            raise CorruptLog(self.seg_path(seg), f"its entries do not give the index the log names for it ({named.hex()[:16]}…)")
        if os.path.exists(self.idx_path(seg)):
            self._bad_idx[seg] = data  # readers leave a wrong index file for verify to name; the next writer replaces it
        else:
            _write_index(self.idx_path(seg), data)
        return segindex.SegmentIndex(data, seg)

    def _rewritten_and_linked(self, seg: int, data: bytes) -> bool:
        """Whether an index built from segment ``seg``'s file may stand for the one the log names
        although its digest differs: gc rewrote the segment (the file is packed, or the log names a
        rewrite of it whose file is not in place yet), and the file's entries end with the checksum
        the next segment's header chains from, so they are exactly the log's entries; only the
        layout of their blocks differs, and every read re-hashes what it reads."""
        if self._packed(seg) is None and seg not in self.tables.packs:
            return False
        try:
            nxt = _read_segment_header(self._fd(seg + 1), self.seg_path(seg + 1))
        except CorruptLog:
            return False
        return segindex.SegmentIndex(data, seg).checksum == nxt[3]

    def _drop_segment(self, seg: int) -> bool:
        """Let go of sealed segment ``seg``'s index, packed entries and (if its file was replaced)
        descriptor; True if the file was replaced or an index was held."""
        fd = self._fds.get(seg)
        try:
            st = os.stat(self.seg_path(seg))
        except OSError:
            return False
        with self._mu:
            changed = fd is None or os.fstat(fd).st_ino != st.st_ino
            if fd is not None and changed:
                self._replaced_fds.append(self._fds.pop(seg))  # another thread may be reading it: closed with the engine
            had = self._idx.pop(seg, None) is not None
            self._packs.pop(seg, None)
            self._sealed_locs.clear()
            self._hint = 0  # loc() tries the hint's segment only through a loaded index
        return changed or had

    def forget_segment(self, seg: int) -> bool:
        """Drop what this process holds of sealed segment ``seg`` (its descriptor, index, packed
        entries) if its file was replaced by gc, and catch up on the log: the next read opens the
        file in place now. True if anything was dropped."""
        dropped = self._drop_segment(seg)
        try:
            self.refresh()
        except CorruptLog:
            pass
        return dropped

    def _scan_index_bytes(self, seg: int) -> bytes:
        hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
        objects: dict = {}
        chain: list = []
        last = None
        for e in self._segment_entries(seg, hdr[3], hdr[2]):
            _segment_rows(e, objects, chain)
            last = e
        if last is None or not last.seal:
            raise CorruptLog(self.seg_path(seg), "sealed segment does not read to its seal entry; cannot index it")
        return segindex.build(seg, hdr[2], last.n, last.checksum, objects.values(), chain)

    def _sealed_index_bytes(self, seg: int) -> bytes:
        """The index of a segment being sealed (or sealed): from our own tables if every row of
        them came from the log's entries, else from the segment itself (a checkpoint's rows are
        never named by the log)."""
        if seg == self._seg and self.tables.frozen is None:
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            return self._index_bytes(seg, hdr[2], self.tables)
        return self._scan_index_bytes(seg)

    def _index_bytes(self, seg: int, first: int, t: LogState) -> bytes:
        objects, chain = t.active_rows()
        return segindex.build(seg, first, t.pos.entry, t.pos.checksum, objects, chain)

    def _retire_active(self) -> None:
        """The active segment was sealed: its objects and chain rows move to its index."""
        seg = self._seg
        t = self.tables
        if t.frozen is None and seg not in self._built:
            # The digest of the index our own rows give (checked against the one the log names
            # next); the index itself is mapped from its file on first use, not held in memory.
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            self._built[seg] = blake3.blake3(self._index_bytes(seg, hdr[2], t)).digest()
        t.locs = {}
        t.chain = {}
        t.frozen = None  # (the label rows stay until the next segment's first entry names this one's index: they are in the root)

    def _drop_frozen(self) -> bool:
        """The checkpoint's rows of the active segment failed a check against the content they
        point at: replace them by rows taken from the segment's own entries. True if dropped."""
        t = self.tables
        if t.frozen is None:
            return False
        hdr = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))
        objects: dict = {}
        chain: list = []
        for e in self._segment_entries(self._seg, hdr[3], hdr[2]):
            if e.n > t.pos.entry:
                break
            _segment_rows(e, objects, chain, labels=False)  # label rows are in the root: never from the checkpoint
        t.frozen = None
        for row in objects.values():
            oid, entry, bo, st, raw, off, ln, comp, otype = row
            t.locs.setdefault(oid, Loc(entry, self._seg, bo, comp, st, raw, off, ln, otype))
        for run, branch, lsn, oid in chain:
            t.chain.setdefault((run, branch, lsn), oid)
        return True
