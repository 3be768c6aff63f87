"""The storage engine: one append-only log of commit entries per store (format 3).

A *commit entry* carries everything one commit does: its objects and its ref
moves ``(name, old, new, reason)``, its time, and a trailer holding its length
and a BLAKE3 checksum over the entry's logical content (object ids, types,
uncompressed lengths, ref moves, time, cut) plus the previous entry's checksum.
The log is therefore a hash chain, and an entry is one ``write`` and one
``fdatasync``: the only commit point. Nothing else is ever written on the
commit path.

Entries live in segment files ``log/<10 digits>.seg``; the highest-numbered one
is active, the others are sealed and never change. Writers serialize on an
exclusive ``flock`` of ``lock`` (across processes) plus an in-process lock
(across threads); under it a writer catches up on entries others appended,
cuts a torn tail (recording the cut in its own entry), checks expectations
against the current refs, appends, syncs and releases.

Readers never take the writer lock. A reader's view of the log is a position:
every complete, checksummed entry up to it and nothing after. A last entry
that is incomplete or fails its checksum is torn and invisible.

The engine keeps, derived from the entries and nothing else: the ref table,
the location of every object, and the chain index (per branch: LSN -> record
id, and the intent records with their LSNs), which makes fork and rewind O(1).

Two engines share one interface (``Engine``): ``LogEngine`` (files) and
``MemoryEngine`` (tests, throwaway stores). docs/FORMAT.md is the reference.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, NamedTuple

import blake3
import msgspec
import zstandard

from ..errors import (
    BodyRemoved,
    CorruptLog,
    IntegrityError,
    InvalidInput,
    LockTimeout,
    ObjectNotFound,
    ObjstoreError,
    Refused,
    SnapshotGone,
    StorageOSError,
)
from . import authority, codec, packed, segindex
from . import labels as labels_mod
from .fileutil import FsyncPolicy, write_derived
from .log.engine import Engine, ScanEntry, ScanProblem, deletion_rule, entry_bodies, txn_bodies
from .log.entry import Entry, LargeBlob, block_starts, build_entry
from .log.format import (
    COMP_GONE,
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
    STATS,
    WITNESS,
    WITNESS_MAGIC,
    ZERO,
    Loc,
    Position,
    _dec,
    _decompressor,
    logical_checksum,
)
from .log.parse import _check_meta, _meta_shape_problem, _rows_shape_problem, _rw_shape_problem, has_entry_after, parse_entry
from .log.root import root_digest
from .log.rules import Plan, plan_taken
from .log.tables import Tables
from .log.txn import Txn

SEAL_BYTES = 8 << 20  # a segment is sealed once it passes this size
CHECKPOINT_ENTRIES = 1000  # a writer checkpoints the tables after this many entries...
CHECKPOINT_BYTES = 4 << 20  # ...or this many bytes of log since the last checkpoint (readers add their own)
OPEN_CHECKPOINT = 200  # a reader that replayed this many entries at open leaves a checkpoint behind...
OPEN_CHECKPOINT_BYTES = 128 << 10  # ...or this many bytes of log
TAIL_WINDOW = 4 << 20  # readers take in the log's tail this many bytes at a time
PRECHECK_RAW = 16 << 20  # a block declaring more raw bytes is hash-checked while streaming before it is held
CHECK_SIZE_ABOVE = 1 << 20  # a stored length above this is checked against the segment file's size before reading
REPAIRS_REF = "log/repairs"  # the ref naming the newest repair's note (lifecycle.repair writes it)

# -- the log on disk ----------------------------------------------------------------------


def seg_name(n: int) -> str:
    return f"{n:010d}.seg"


class LogEngine(Engine):
    log_files = True

    def __init__(self, root: str, policy: FsyncPolicy, checkpoint: bool = True) -> None:
        """``checkpoint=False``: neither adopt nor write a checkpoint; every entry from the first is
        replayed (its rules and root checked): what verify reads the log with."""
        self.root = root
        self.dir = os.path.join(root, "log")
        self.policy = policy
        self.tables = Tables()
        self._mu = threading.RLock()  # guards the tables and the tail position within this process
        self._wlock = threading.Lock()  # writers of this process, one at a time
        self._seg = 1  # segment the tail is in
        self._off = SEG_HEADER.size  # end of the last complete entry in it
        self._fds: dict[int, int] = {}
        self._packs: dict[int, Packed | None] = {}  # segment -> its packed entries (None: an ordinary segment)
        self._replaced_fds: list[int] = []  # descriptors of segment files gc replaced (other threads may still read them)
        self._lfd: int | None = None  # the writer lock's descriptor, opened on first write
        self._wfd: tuple[int, int] | None = None  # (segment, descriptor) we append to
        self._paths: dict[int, str] = {}
        self._idx: dict[int, Any] = {}  # sealed segment -> SegmentIndex
        self._built: dict[int, bytes] = {}  # sealed segment -> digest of the index this process built from the log
        self._bad_idx: dict[int, bytes] = {}  # sealed segment -> the index bytes its wrong file should hold
        self._hint = 0  # segment of the last object found through an index
        self._ckpt_at = (0, 0)  # (entry, offset) of the last checkpoint this process wrote or loaded
        self._block_cache: tuple | None = None
        self.torn: tuple | None = None  # (segment, offset, length, reason) of a torn tail seen by the last refresh
        self.damaged: tuple | None = None  # (segment, offset, reason) of a bad entry that is not a torn tail
        self.prefix_ok = False  # answer from the readable prefix of a damaged log instead of raising (verify)
        self.breach = False  # the damage is a sound entry that breaks a rule of the log (or its root), not bad bytes
        self._sealed = False  # the last entry taken in is its segment's seal entry
        self._wit_path = os.path.join(self.dir, "witness")
        self._wit_fd: int | None = None
        self._sync_cv = threading.Condition(threading.Lock())  # group commit: who syncs, who waits
        self._syncing = False
        self._written: tuple[Position, int] = (Position(0, ZERO), -1)  # newest entry this process wrote, and its file
        self._durable = 0  # entries of this process up to this number are durable
        self._old_wfds: list[int] = []
        self._ckpt_busy = False
        self._use_checkpoint = True
        self._wit = self.witness()  # the head witness as this process found it at open
        self.witness_problem: tuple[str, str] | None = None  # (code, detail): log-truncated / witness-mismatch
        try:  # the highest segment present: a gap below it is a missing segment, not the log's end
            self._top = max([int(f[:-4]) for f in os.listdir(self.dir) if f.endswith(".seg") and f[:-4].isdigit()] or [1])
        except OSError:
            self._top = 1
        self._use_checkpoint = checkpoint
        if checkpoint:
            self._load_checkpoint()
        ckpt_seg = self._seg
        try:
            self.refresh()
        except CorruptLog:
            pass  # damage before the log's end: the store opens (verify names it), every later refresh raises it again
        else:
            self._check_witness()
            entries = self.tables.pos.entry - self._ckpt_at[0]
            if entries >= OPEN_CHECKPOINT or (entries and (self._seg, self._off) > (ckpt_seg, self._ckpt_at[1] + OPEN_CHECKPOINT_BYTES)):
                self._checkpoint()  # best effort (a read-only store just replays again next time)

    def tail(self) -> tuple[Position, int, int]:
        """(position, segment, end offset) of the newest complete entry, taken together: what a
        backup copies is exactly the log up to there (sealed segments whole, the active one to ``end``)."""
        with self._mu:
            self.refresh()
            return self.tables.pos, self._seg, self._off

    # -- the head witness -----------------------------------------------------------------
    def witness(self) -> tuple[int, bytes] | None:
        """(entry, checksum) the newest writer made durable, from ``log/witness``; None if the file
        is absent, short or unreadable (no witness, not damage)."""
        return read_witness(self._wit_path)

    def _check_witness(self) -> None:
        """Compare the log with the witness read at open: shorter is ``log-truncated``; a checksum
        the log does not have at that entry is ``witness-mismatch`` (writers refuse; readers warn)."""
        w = self._wit
        if w is None:
            return
        if self.witness_problem is None:
            pos = self.tables.pos
            self.witness_problem = witness_disagreement(w, pos.entry, pos.checksum if w[0] == pos.entry else None)
        if self.witness_problem is not None and self.repair_explains(w):
            self.witness_problem = None

    def repair_explains(self, w: tuple[int, bytes]) -> bool:
        """Whether the newest repair's note (the blob ``log/repairs`` names) records head witness
        ``w`` as the one it found: a repair killed after its entry and before it wrote the witness
        leaves that witness behind, which its own recorded cut explains (the store stays writable;
        the next commit writes a witness of the repaired log). Read only when the witness disagrees."""
        oid = self.tables.refs.get(REPAIRS_REF)
        if not isinstance(oid, bytes):
            return False
        try:
            otype, body = codec.decode(self.read(oid))
            note = msgspec.json.decode(body) if otype == codec.BLOB and isinstance(body, bytes) else None
        except (ObjstoreError, msgspec.DecodeError, ValueError):
            return False
        return isinstance(note, dict) and note.get("witness") == [w[0], w[1].hex()]

    def _write_witness(self, entry: int, checksum: bytes) -> None:
        """After the entry's fdatasync, before the commit returns; never synced itself: it may lag
        the log (a crash before it) but never lead it."""
        try:
            if self._wit_fd is None:
                self._wit_fd = os.open(self._wit_path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._wit_fd, WITNESS.pack(WITNESS_MAGIC, entry, checksum), 0)
        except OSError:
            pass  # no witness is only less protection, never a failed commit
        self._wit = (entry, checksum)

    # -- files --------------------------------------------------------------------------
    def segment_bytes(self, segs: Iterable[int]) -> int:
        """The size on disk of these segment files (a missing one counts 0)."""
        total = 0
        for s in segs:
            try:
                total += os.path.getsize(self.seg_path(s))
            except OSError:
                pass
        return total

    def seg_path(self, n: int) -> str:
        p = self._paths.get(n)
        if p is None:
            p = self._paths[n] = os.path.join(self.dir, seg_name(n))
        return p

    def _fd(self, n: int) -> int:
        fd = self._fds.get(n)
        if fd is None:
            try:
                fd = os.open(self.seg_path(n), os.O_RDONLY)
            except FileNotFoundError:
                raise CorruptLog(self.seg_path(n), "segment missing") from None
            self._fds[n] = fd
        return fd

    def close(self) -> None:
        for fd in [*self._fds.values(), *self._replaced_fds]:
            os.close(fd)
        self._fds.clear()
        self._replaced_fds = []
        for extra in (self._lfd, self._wfd[1] if self._wfd else None, self._wit_fd, *self._old_wfds):
            if extra is not None:
                os.close(extra)
        self._lfd = self._wfd = self._wit_fd = None
        self._old_wfds = []

    def __del__(self) -> None:
        # An engine nobody holds gives its descriptors back (a long test run, a service that
        # opens stores per request), not only one whose close() was called.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, a half-made engine: nothing to do
            pass

    @staticmethod
    def create(root: str, policy: FsyncPolicy) -> None:
        d = os.path.join(root, "log")
        os.makedirs(d, exist_ok=True)
        _write_segment_header(os.path.join(d, seg_name(1)), 1, 1, ZERO, policy)
        open(os.path.join(root, "lock"), "ab").close()
        policy.dir(d)

    # -- reading the log ----------------------------------------------------------------
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

    def _apply(self, e: Entry, plan: Plan | None = None) -> str | None:
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

    def entries(self) -> Iterator[Entry]:
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

    def _segment_entries(self, seg: int, prev: bytes, n: int) -> Iterator[Entry]:
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

    # -- reading objects ----------------------------------------------------------------
    def _read_block(self, loc: Loc) -> bytes:
        c = self._block_cache
        if c is not None and c[0] == (loc.seg, loc.block_off):
            return c[1]
        STATS["blocks_read"] += 1
        try:
            stored = os.pread(self._fd(loc.seg), loc.stored_len, loc.block_off)
        except OSError as e:
            raise StorageOSError(f"read {self.seg_path(loc.seg)}", e) from None
        if len(stored) != loc.stored_len:
            raise IntegrityError("?", self.seg_path(loc.seg), f"block at offset {loc.block_off} truncated")
        if loc.comp == COMP_ZSTD:
            try:
                raw = _decompressor().decompress(stored, max_output_size=loc.block_raw)
            except zstandard.ZstdError as e:
                raise IntegrityError("?", self.seg_path(loc.seg), f"zstd data corrupt: {e}") from None
            if len(raw) != loc.block_raw:
                raise IntegrityError("?", self.seg_path(loc.seg), "block decompresses to the wrong size")
        else:
            raw = stored
        if loc.otype != codec.BLOB:
            self._block_cache = ((loc.seg, loc.block_off), raw)
        return raw

    def _check_loc(self, oid: bytes, loc: Loc, prehash_above: int = PRECHECK_RAW) -> None:
        """Refuse a location whose declared sizes cannot be true before reading or allocating for it
        (a crafted entry or index row may declare gigabytes for a few stored bytes): the object must
        lie inside its block, the stored bytes inside the segment file, and a block that would
        decompress to more than PRECHECK_RAW bytes is hash-checked while it streams, before it is
        ever held whole."""
        if loc.comp == COMP_GONE:
            raise BodyRemoved(oid.hex())
        path = self.seg_path(loc.seg)
        if loc.off < 0 or loc.length < 0 or loc.off + loc.length > loc.block_raw or (loc.comp == COMP_RAW and loc.stored_len != loc.block_raw):
            raise IntegrityError(oid.hex(), path, f"its location is impossible (object {loc.off}+{loc.length} in a block of {loc.block_raw} bytes, {loc.stored_len} stored)")
        if loc.comp not in (COMP_RAW, COMP_ZSTD):
            raise IntegrityError(oid.hex(), path, f"unknown block compression {loc.comp}")
        if loc.stored_len > CHECK_SIZE_ABOVE and loc.block_off + loc.stored_len > os.fstat(self._fd(loc.seg)).st_size:
            raise IntegrityError(oid.hex(), path, f"block at offset {loc.block_off} ({loc.stored_len} bytes) lies past the end of the segment file")
        if loc.comp == COMP_ZSTD and loc.block_raw > prehash_above:
            try:
                problem = codec.check_stream(stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw),
                                             loc.block_raw, [(loc.off, loc.length, oid)])
            except IntegrityError as e:
                problem = e.args[2]
            if problem is not None:
                raise IntegrityError(oid.hex(), path, problem)

    def _read_loc(self, oid: bytes, loc: Loc) -> bytes:
        self._check_loc(oid, loc)
        try:
            raw = self._read_block(loc)
        except CorruptLog:
            raise  # a missing or unreadable segment: named as it is
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), e.args[1], e.args[2]) from None
        data = raw[loc.off : loc.off + loc.length]
        if len(data) != loc.length or blake3.blake3(data).digest() != oid:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id)")
        return data

    def read(self, oid: bytes) -> bytes:
        loc = self.loc(oid)
        if loc is None:
            self.refresh()
            loc = self.loc(oid)
            if loc is None and self._drop_frozen():
                loc = self.loc(oid)
            if loc is None:
                raise ObjectNotFound(oid.hex())
        try:
            return self._read_loc(oid, loc)
        except IntegrityError:
            # A checkpoint's row of the active segment points at the wrong bytes: take the rows
            # from the segment's entries instead, then try once more.
            if loc.seg == self._seg and self._drop_frozen():
                return self._read_loc(oid, self.loc(oid) or loc)
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                return self._read_loc(oid, self._relocated(oid))
            raise

    def _relocated(self, oid: bytes) -> Loc:
        """Where ``oid`` is after gc replaced the segment this process had it in: a body removed
        meanwhile is a snapshot gone (this reader knew it as live), never bytes of another object."""
        loc = self.loc(oid)
        if loc is None:
            raise ObjectNotFound(oid.hex())
        if loc.comp == COMP_GONE:
            raise SnapshotGone(f"object {oid.hex()} was removed by gc after a recorded deletion")
        return loc

    def _confirmed(self, run: str, branch: int, lsn: int, oid: bytes, parent: bytes | None | bool = False) -> bool:
        """Whether the record ``oid`` is what a checkpoint's chain row says: (run, branch, lsn), and
        the parent when given. Rows the log names (its entries, indexes it names) need no check."""
        try:
            v = codec.decode(self._read_loc(oid, self.loc(oid) or _NO_LOC), oid, False)[1]
            return (isinstance(v, dict) and v.get("run") == run and v.get("branch") == branch and v.get("lsn") == lsn
                    and (parent is False or v.get("parent") == parent))
        except (IntegrityError, ObjstoreError, ValueError, TypeError):
            return False

    def where(self, oid: bytes) -> str:
        loc = self.loc(oid)
        return self.seg_path(loc.seg) if loc else ""

    # -- sealed segments' indexes and the checkpoint -------------------------------------
    def loc(self, oid: bytes) -> Loc | None:
        t = self.tables
        loc = t.locs.get(oid)
        if loc is not None:
            return loc
        if t.frozen is not None:
            row = t.frozen.find(oid)
            if row is not None:
                return _loc_of(row, self._seg)
        hint = self._hint  # walks and folds read neighbours: try the segment of the last hit first
        if 0 < hint < self._seg and hint in self._idx:
            row = self._idx[hint].find(oid)
            if row is not None:
                if row[7] != COMP_GONE:
                    return _loc_of(row, hint)
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
                    return _loc_of(row, seg)
        return None

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
            idx.release()  # done with this segment's rows: its pages leave our resident set
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
            rows.extend(idx.chain_from(key, 0))
        return sorted(set(rows), reverse=True)

    def iter_ids(self) -> Iterator[bytes]:
        for seg in range(1, self._seg):
            for row in self._index(seg).objects():
                yield row[0]
        if self.tables.frozen is not None:
            for row in self.tables.frozen.objects():
                yield row[0]
        yield from list(self.tables.locs)

    def idx_path(self, seg: int) -> str:
        return os.path.join(self.dir, f"{seg:010d}.idx")

    def _index(self, seg: int) -> segindex.SegmentIndex:
        """A sealed segment's index: the file if its BLAKE3 is the digest the log names for it,
        else built again from the segment's entries (and checked against that digest)."""
        idx = self._idx.get(seg)
        if idx is not None:
            return idx
        _read_segment_header(self._fd(seg + 1), self.seg_path(seg + 1))
        named = self.tables.idx.get(seg) or self._built.get(seg)
        idx = segindex.load_named(self.idx_path(seg), seg, named) if named is not None else None
        if idx is None:
            idx = self._rebuild_index(seg, named)
        idx.checked = True
        self._idx[seg] = idx
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
            self._block_cache = None
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

    def _index_bytes(self, seg: int, first: int, t: Tables) -> bytes:
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

    def _load_checkpoint(self) -> None:
        """Start from the checkpoint if the log commits to it: the entry it claims to follow is
        where it says, with its checksum, and the checkpoint's tables hash to the root that entry
        names. Otherwise replay from the first segment. Either way ``refresh`` takes in the rest.

        Whoever wrote the checkpoint (its BLAKE3 is recomputable), an edited ref, tip, intent or
        start changes the root; its rows of the active segment are checked against the records
        they point at when used (``_confirmed``, ``_drop_frozen``)."""
        path = os.path.join(self.dir, "checkpoint")
        try:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < 32 or blake3.blake3(data[:-32]).digest() != data[-32:]:
                raise ValueError("checkpoint checksum")
            t, seg, off = Tables.load(data[:-32])
            if t.pos.entry > 0:
                e = self._entry_ending_at(seg, off, t.pos.entry)
                if e.checksum != t.pos.checksum:
                    raise ValueError("checkpoint does not match the log")
                if root_digest(t.acc) != e.root:
                    raise ValueError("checkpoint tables do not hash to the root the log names")
                sealed = e.seal
            else:
                sealed = False
        except (OSError, ValueError, KeyError, TypeError, IndexError, msgspec.DecodeError, CorruptLog, segindex.IndexError_, struct.error):
            return  # derived data that does not match (or was crafted): replay the log instead
        self.tables, self._seg, self._off, self._sealed = t, seg, off, sealed
        self._ckpt_at = (t.pos.entry, off)
        t.adopted, t.confirm = t.pos.entry, self._confirm_adopted

    def _confirm_adopted(self, name: str, value: bytes) -> None:
        """The authority rule over the deletions behind ``name`` (at ``value``) that the adopted
        checkpoint took in, as of their own entries (``Tables.obey``): each one that keeps it is
        remembered; one that breaks it is damage at its entry, as a replaying reader finds it."""
        with self._mu:
            t = self.tables
            view = authority.EntryView(self, 0, [], {}, lambda oid: None)
            got = authority.ref_problem(view, name, value, t.adopted, t.checked)
            if got is None:
                return
            did, n, bad = got
            loc = self.loc(did)
            seg, off = (loc.seg, 0) if loc is not None else (1, 0)
            if os.path.exists(self.seg_path(seg)):
                hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
                off = next((e.offset for e in self._segment_entries(seg, hdr[3], hdr[2]) if e.n == n), 0)
            self.torn, self.damaged, self.breach = None, (seg, off, f"entry {n}: {bad}"), True
            raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} (entry {n}: {bad}); the log is readable "
                             "only up to it (run 'objstore verify')")

    def _entry_ending_at(self, seg: int, off: int, n: int) -> Entry:
        """The entry whose trailer ends at ``off`` in segment ``seg`` (its checksum chain is not
        checked here: the caller compares the checksum with what it expects)."""
        fd = self._fd(seg)
        trailer = os.pread(fd, ENTRY_TRAILER.size, off - ENTRY_TRAILER.size)
        if len(trailer) != ENTRY_TRAILER.size:
            raise ValueError("no entry there")
        length, checksum = ENTRY_TRAILER.unpack(trailer)
        start = off - length
        if start < SEG_HEADER.size:
            raise ValueError("no entry there")
        head = os.pread(fd, ENTRY_HEAD.size, start)
        if len(head) != ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
            raise ValueError("no entry there")
        _, mlen, dlen = ENTRY_HEAD.unpack(head)
        if ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size != length:
            raise ValueError("no entry there")
        m = _dec.decode(os.pread(fd, mlen, start + ENTRY_HEAD.size))
        got = Entry(m["n"], m["t"], m["moves"], m["objs"], m["blocks"], m["cut"], seg, start, start + ENTRY_HEAD.size + mlen, length,
                    checksum, m["recs"], m["prevs"], m["root"], m["seal"], m["idx"], m.get("rw"))
        if got.n != n or type(got.root) is not bytes or type(got.seal) is not bool:
            raise ValueError("not the entry the checkpoint names")
        # The checksum in the trailer must be the one the meta gives, chained to the entry before
        # (else an edited meta could sit behind a real trailer).
        if start == SEG_HEADER.size:
            prev = _read_segment_header(fd, self.seg_path(seg))[3]
        else:
            pt = os.pread(fd, ENTRY_TRAILER.size, start - ENTRY_TRAILER.size)
            if len(pt) != ENTRY_TRAILER.size:
                raise ValueError("no entry there")
            prev = ENTRY_TRAILER.unpack(pt)[1]
        if logical_checksum(prev, got.n, got.time, got.objs, got.moves, got.cut, got.recs, got.prevs, got.root, got.seal, got.idx, got.rw) != checksum:
            raise ValueError("the entry's meta does not give its checksum")
        return got

    def _checkpoint(self) -> None:
        """Write the tables at the current position (no fsync: a lost checkpoint means a longer replay)."""
        path = os.path.join(self.dir, "checkpoint")
        if self._ckpt_busy or not self._use_checkpoint:
            return  # another thread of this process is writing one
        if self._packed(self._seg) is not None:
            return  # the log ends in a packed segment (a copy caught between two files): no offset there to name
        self._ckpt_busy = True
        try:
            with self._mu:
                first = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))[2]
                data = self.tables.dump(self._seg, self._off, first)
                at = (self.tables.pos.entry, self._off)
            write_derived(path, data + blake3.blake3(data).digest())
        except OSError:
            return
        finally:
            self._ckpt_busy = False
        self._ckpt_at = at

    def copy_blob(self, oid: bytes, out: IO[bytes]) -> int | None:
        """Stream a large blob's body to ``out``, hash-checked before the first byte is written (and
        again as it is written: the file could change in between); None if not large."""
        loc = self.loc(oid)
        if loc is None or loc.otype != codec.BLOB or loc.block_raw <= LARGE_BLOB or loc.comp != COMP_ZSTD:
            return None
        if loc.off != 0 or loc.length != loc.block_raw:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "a large blob's block holds other bytes than the blob")
        # Two passes: the body is hash-checked while it streams (nothing held, nothing written), then
        # written. A damaged or crafted blob (64 KiB that claims gigabytes) fails before one byte goes out.
        try:
            self._check_loc(oid, loc, prehash_above=0)
        except IntegrityError:
            if not (loc.seg < self._seg and self.forget_segment(loc.seg)):
                raise
            loc = self._relocated(oid)  # gc replaced the file this process had open: check it where it is now
            self._check_loc(oid, loc, prehash_above=0)
        h = blake3.blake3()
        skip = None
        n = 0
        try:
            for chunk in stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw):
                h.update(chunk)
                if skip is None:  # the canonical header "blob <n>\0" is not the body
                    nul = chunk.find(b"\x00")
                    skip, chunk = nul + 1, chunk[nul + 1 :]
                out.write(chunk)
                n += len(chunk)
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), e.args[2]) from None
        if h.digest() != oid:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id); the bytes already written are not that blob")
        return n

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:
        loc = self.loc(oid)
        if loc is None or loc.otype == codec.BLOB:
            return None
        self._check_loc(oid, loc)
        try:
            raw = self._read_block(loc)  # wrong bytes (gc replaced the file) fail the caller's hash: it reads again by read()
        except IntegrityError:
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                loc = self._relocated(oid)
                self._check_loc(oid, loc)
                return self._read_block(loc), loc
            raise
        return raw, loc

    # -- writing ------------------------------------------------------------------------
    @contextmanager
    def transaction(self, timeout: float | None = None, repair_after: int | None = None) -> Iterator[Txn]:
        """A commit under the writer lock. ``repair_after`` (``objstore repair``): the log is
        damaged after entry N, which must be the end of its readable prefix in the last segment;
        this commit's entry cuts everything after N off the segment and records what it removed
        (its ``cut``), and the head witness names it afterwards."""
        deadline = None if timeout is None else time.monotonic() + timeout
        written = None
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeout("the store's writer lock", timeout)
        try:
            self._os_lock(deadline, timeout)
            try:
                try:
                    self.refresh()
                except CorruptLog:
                    pass
                if repair_after is not None:
                    self._prepare_repair(repair_after)
                if self.damaged is not None:
                    seg, off, why = self.damaged
                    raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} ({why}); "
                                     "refusing to write (run 'objstore verify')")
                if self.witness_problem is not None and self._wit is not None and self.repair_explains(self._wit):
                    self.witness_problem = None  # met while catching up: the witness predates a repair's cut
                if self.witness_problem is not None:
                    raise CorruptLog(self._wit_path, f"{self.witness_problem[0]}: {self.witness_problem[1]}; refusing to write "
                                     "(run 'objstore verify'; 'objstore repair' only after restoring from a backup failed)")
                if self._sealed:
                    self._seal()  # its sealer died between the seal entry and the next segment
                for seg, data in list(self._bad_idx.items()):
                    _write_index(self.idx_path(seg), data)  # a wrong index file, replaced by a writer
                    del self._bad_idx[seg]
                txn = Txn(self)
                try:
                    yield txn
                    moves = txn.ref_moves()
                    if txn.objects or moves:
                        written = self._commit(txn, moves)
                finally:
                    for spill in txn.spills:
                        spill.discard()
            finally:
                assert self._lfd is not None  # _os_lock opened it
                fcntl.flock(self._lfd, fcntl.LOCK_UN)
        finally:
            self._wlock.release()
        # Group commit: the entry is written; it is made durable outside the locks, so the threads
        # of this process that write meanwhile share one fdatasync. The commit returns (is
        # acknowledged) only once its own entry is durable.
        if written is not None:
            self._sync_upto(written)
            # Off the commit path's locks: other writers go on while this thread writes the checkpoint.
            if self.tables.pos.entry - self._ckpt_at[0] >= CHECKPOINT_ENTRIES or self._off - self._ckpt_at[1] >= CHECKPOINT_BYTES:
                self._checkpoint()

    def _prepare_repair(self, n: int) -> None:
        """Make the next entry cut everything after entry ``n`` (see ``transaction``)."""
        pos = self.tables.pos
        last = max([int(f[:-4]) for f in os.listdir(self.dir) if f.endswith(".seg") and f[:-4].isdigit()] or [1])
        if n != pos.entry:
            raise InvalidInput(f"the log reads through entry {pos.entry}; repair cuts only after the last readable entry "
                               f"(--cut-after {pos.entry}), or restore from a backup")
        if self._seg != last or self._sealed:
            raise InvalidInput(f"entry {n} is not in the last segment ({last}); cutting whole segments is not repair: restore from a backup")
        size = os.fstat(self._fd(self._seg)).st_size
        if size > self._off:
            self.torn = (self._seg, self._off, size - self._off, "repair")
        self.damaged = None
        self.breach = False
        self.witness_problem = None

    def _sync_upto(self, n: int) -> None:
        """Return once entry ``n`` (written by this process) is durable: one thread syncs for every
        entry written before it started, the others wait for it. The head witness follows each
        sync."""
        with self._sync_cv:
            while self._durable < n:
                if self._syncing:
                    self._sync_cv.wait()
                    continue
                self._syncing = True
                target, fd = self._written
                err = None
                self._sync_cv.release()
                try:
                    if self.policy.enabled:
                        os.fdatasync(fd)
                except OSError as e:
                    err = e
                finally:
                    self._sync_cv.acquire()
                    self._syncing = False
                    self._sync_cv.notify_all()
                if err is not None:
                    raise StorageOSError("make a commit entry durable (fdatasync)", err)
                if target.entry > self._durable:
                    self._durable = target.entry
                    self._write_witness(target.entry, target.checksum)

    def _os_lock(self, deadline: float | None, timeout: float | None) -> None:
        # One lock file descriptor per engine, kept open: flock excludes other open file
        # descriptions (other processes, other Store objects); threads wait on _wlock first.
        if self._lfd is None:
            try:
                self._lfd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StorageOSError("open the writer lock", e) from None
        lfd = self._lfd
        if deadline is None:
            fcntl.flock(lfd, fcntl.LOCK_EX)
            return
        while True:
            try:
                fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout("the store's writer lock", timeout) from None
                time.sleep(0.002)

    def _writer(self, seg: int) -> int:
        w = self._wfd
        if w is None or w[0] != seg:
            if w is not None:
                self._old_wfds.append(w[1])  # closed with the engine: another thread may still be syncing it
                self._wfd = None
            try:
                self._wfd = w = (seg, os.open(self.seg_path(seg), os.O_WRONLY))
            except OSError as e:
                raise StorageOSError("open the active segment", e) from None
        return w[1]

    def _commit(self, txn: Txn, moves: list) -> int | None:
        """Write one entry (not yet synced: returns its number for _sync_upto; None if synced)."""
        t = self.tables
        cut = None
        seg, off = self._seg, self._off
        objects = [(oid, otype, c) for oid, (otype, c) in txn.objects.items()]
        idx = self._first_entry_idx(seg, off)
        plan = t.plan(t.pos.entry + 1, [(o[0], o[1]) for o in objects], txn.facts, moves, idx)
        if isinstance(plan, str):
            raise Refused(plan)
        bad = deletion_rule(self, t.pos.entry + 1, objects, moves, lambda: txn_bodies(txn.objects), plan)
        if bad is not None:
            raise Refused(bad)
        wfd = self._writer(seg)
        try:
            if self.torn is not None:
                removed = os.pread(self._fd(seg), self.torn[2], self.torn[1])
                cut = [seg, self.torn[1], len(removed), blake3.blake3(removed).hexdigest()]
                os.ftruncate(wfd, off)
                self.torn = None
        except OSError as err:
            raise StorageOSError("cut a torn tail", err) from None
        when = time.time() if txn.when is None else float(txn.when)
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, idx=idx)
        if off + e.length >= SEAL_BYTES:  # the last entry of this segment says so
            raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, seal=True, idx=idx)
        self._write_entry(wfd, raw, off, sync=False)
        with self._mu:
            # Our own entry: applied from what we hold, never read back.
            self._apply(e._replace(seg=seg, offset=off, data_off=off + e.data_off), plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd)
        if e.seal:
            self._sync_upto(e.n)  # a segment is sealed only once everything in it is durable
            try:
                self._seal()
            except (ObjstoreError, OSError, segindex.IndexError_):
                pass  # the commit is durable already; the next writer finishes the seal
            return None
        return e.n

    def _write_entry(self, wfd: int, raw: bytes | list, off: int, sync: bool = True) -> None:
        try:
            if isinstance(raw, list):
                _write_parts(wfd, raw, off)
            else:
                written = os.pwrite(wfd, raw, off)
                if written != len(raw):
                    raise OSError(28, f"short write ({written} of {len(raw)} bytes)")
            if sync and self.policy.enabled:
                os.fdatasync(wfd)
        except OSError as err:
            try:
                os.ftruncate(wfd, off)  # leave no torn bytes behind if we can
            except OSError:
                pass
            raise StorageOSError("append a commit entry", err) from None

    def _first_entry_idx(self, seg: int, off: int) -> list | None:
        """[segment, digest] the first entry of segment ``seg`` names: the previous segment's index."""
        if seg == 1 or off != SEG_HEADER.size:
            return None
        digest = self._built.get(seg - 1)  # built from the log's entries when this process retired it
        if digest is None:
            digest = blake3.blake3(self._sealed_index_bytes(seg - 1)).digest()
        return [seg - 1, digest]

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:
        return scan_log(self, upto)

    def finish_seal(self, timeout: float | None = None) -> None:
        """Write the active segment's first entry if its sealer died before it (what the next writer
        would do anyway), so every sealed segment is followed by the entry naming its index."""
        self.refresh()
        if self._off == SEG_HEADER.size and self._seg > 1:
            with self.transaction(timeout) as _txn:
                if self._off == SEG_HEADER.size and self._seg > 1:
                    self._write_bare()

    def seal_now(self, timeout: float | None = None) -> int:
        """Seal the active segment now (gc: so a small store is cleaned like a big one), unless it
        holds nothing but its first entry; the number of the last sealed segment (0: none)."""
        with self.transaction(timeout) as _txn:
            if self._off == SEG_HEADER.size and self._seg > 1:
                self._write_bare()  # a sealer died before the new segment's first entry: write it
            if not (self._off == SEG_HEADER.size or self._bare_only()):
                self._write_bare(seal=True)
                self._seal()
        return self._seg - 1

    def _bare_only(self) -> bool:
        """Whether every entry of the active segment carries no object and no move (its first entry,
        rewrite entries): sealing it would only make gc pack gc's own entries, time after time."""
        hdr = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))
        for e in self._segment_entries(self._seg, hdr[3], hdr[2]):
            if e.objs or e.moves or e.cut:
                return False
        return True

    def _cut_torn(self) -> list | None:
        if self.torn is None:
            return None
        seg = self._seg
        try:
            removed = os.pread(self._fd(seg), self.torn[2], self.torn[1])
            os.ftruncate(self._writer(seg), self._off)
        except OSError as err:
            raise StorageOSError("cut a torn tail", err) from None
        self.torn = None
        return [seg, self._off, len(removed), blake3.blake3(removed).hexdigest()]

    def _write_bare(self, seal: bool = False, rw: list | None = None) -> Entry:
        """Write (and sync) an entry with no object and no move, under the writer lock: a seal entry,
        the first entry of a segment, or a rewrite entry (``rw``)."""
        t = self.tables
        idx = self._first_entry_idx(self._seg, self._off)
        plan = t.plan(t.pos.entry + 1, [], {}, [], idx, rw)
        if isinstance(plan, str):
            raise Refused(plan)
        cut = self._cut_torn()
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, time.time(), [], [], cut, root=plan.root, seal=seal, idx=idx, rw=rw)
        off = self._off
        wfd = self._writer(self._seg)
        self._write_entry(wfd, raw, off)  # synced: an entry gc relies on is durable before it goes on
        with self._mu:
            self._apply(e._replace(seg=self._seg, offset=off, data_off=off + e.data_off), plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd)
            self._durable = max(self._durable, e.n)  # the fdatasync covered every earlier write to this file
            self._write_witness(e.n, e.checksum)
        return e

    def commit_rewrite(self, rows: list, timeout: float | None = None) -> Position:
        """Commit a rewrite entry (gc): ``rows`` = [[segment, BLAKE3 of its new file, BLAKE3 of its new
        index], …] for sealed segments whose files were replaced by ones with the same entries."""
        with self.transaction(timeout) as _txn:
            self._write_bare(rw=rows)
            for seg, _f, _i in rows:
                self.forget_segment(seg)
        return self.tables.pos

    def _seal(self) -> None:
        """Start the next segment; the current one (its last entry has the seal flag) is never
        appended to again. The sealer then writes the new segment's first entry at once, naming the
        sealed segment's index by digest, so readers adopt only the index the log commits to."""
        seg = self._seg
        try:
            if not os.path.exists(self.seg_path(seg + 1)):
                _write_segment_header(self.seg_path(seg + 1), seg + 1, self.tables.pos.entry + 1, self.tables.pos.checksum, self.policy)
                self.policy.dir(self.dir)
        except OSError as e:
            raise StorageOSError("seal a segment", e) from None
        data = self._sealed_index_bytes(seg)
        _write_index(self.idx_path(seg), data)
        with self._mu:
            self._built[seg] = blake3.blake3(data).digest()
            self._retire_active()
            self._seg, self._off, self._sealed = seg + 1, SEG_HEADER.size, False
        self._write_bare()  # the new segment's first entry: it names the index just built
        self._checkpoint()


def read_witness(path: str) -> tuple[int, bytes] | None:
    """(entry, checksum) a head witness file names; None if it is absent, short or unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(WITNESS.size + 1)
    except OSError:
        return None
    if len(raw) != WITNESS.size or raw[:4] != WITNESS_MAGIC:
        return None
    _, entry, checksum = WITNESS.unpack(raw)
    return entry, checksum


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


def _segment_rows(e: Entry, objects: dict, chain: list, labels: bool = True) -> None:
    """Add one entry's index rows (object rows as segindex.build takes them, chain rows) from its meta."""
    starts = block_starts(e)
    for oid, otype, length, bi, boff in e.objs:
        if bi == REMOVED:
            objects[oid] = (oid, e.n, 0, 0, 0, 0, length, COMP_GONE, otype)
            continue
        comp, raw, stored = e.blocks[bi][:3]
        objects[oid] = (oid, e.n, starts[bi], stored, raw, boff, length, comp, otype)
    for r in e.recs:
        oid = e.objs[r[0]][0]
        chain.append((r[1], r[2], r[3], oid))
        if labels and len(r) > 8:  # a labelled record: its label rows, (key, entry number, id)
            chain.extend((k, e.n, oid) for k in labels_mod.index_keys(r[1], r[2], r[3], r[5], r[8]))


def witness_disagreement(w: tuple[int, bytes], end: int, checksum_at_w: bytes | None) -> tuple[str, str] | None:
    """(code, detail) where the head witness ``w`` (entry, checksum) disagrees with a log that ends
    at entry ``end`` and holds ``checksum_at_w`` at the witness's entry (None: not known); else None."""
    if w[0] > end:
        return "log-truncated", f"the log ends at entry {end}, but the head witness says entry {w[0]} was made durable"
    if checksum_at_w is not None and checksum_at_w != w[1]:
        return "witness-mismatch", f"the head witness names entry {w[0]} with checksum {w[1].hex()}, the log has {checksum_at_w.hex()}"
    return None


def _write_index(path: str, data: bytes) -> None:
    """Best effort: an index is derived data, and the caller keeps the bytes it built (a read-only
    store, or a concurrent writer of the same file, only means it is built again next time)."""
    try:
        segindex.write(path, data)
    except OSError:
        pass


_NO_LOC = Loc(0, 0, 0, COMP_RAW, 0, 0, 0, 0, "record")


def _loc_of(row: tuple, seg: int) -> Loc:
    oid, entry, bo, st, raw, off, ln, comp, tc = row
    if tc >= len(segindex.TYPES):
        raise IntegrityError(oid.hex(), f"index of segment {seg}", f"index row names unknown type code {tc}")
    return Loc(entry, seg, bo, comp, st, raw, off, ln, segindex.TYPES[tc])


def _parse_split(meta: bytes, trailer: bytes, dlen: int, off: int, prev: bytes, seg: int, n: int) -> Entry | str:
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
    return Entry(e_n, t, moves, objs, blocks, cut, seg, off, off + len(meta), length, checksum, recs, prevs, root, seal, idx, rw)


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
        bad = (_meta_shape_problem(n, t, moves, objs, pf.blocks, removed_ok=True) or _rows_shape_problem(objs, recs, prevs, root, seal, idx)
               or _rw_shape_problem(rw))
        if bad is None and seal != (i == pf.entry_count - 1):
            bad = "only its last entry is a seal entry"
        if bad is not None:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {bad}")
        try:
            checksum = logical_checksum(prev, n, t, objs, moves, cut, recs, prevs, root, seal, idx, rw)
        except (TypeError, msgspec.EncodeError) as e:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {e}")
        out.append(Entry(n, t, moves, objs, pf.blocks, cut, seg, SEG_HEADER.size + i, packed.PK_HEADER.size, 0, checksum,
                         recs, prevs, root, seal, idx, rw, pf.offsets))
        prev, n = checksum, n + 1
    if prev != pf.last:
        return Packed([], pf.orig_idx, pf.prev, "its entries do not chain to the checksum its trailer names")
    return Packed(out, pf.orig_idx, pf.prev, None)



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


def scan_log(engine: LogEngine, upto: int) -> Iterator[ScanEntry | ScanProblem]:
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


def _entry_objects(buf: bytes | None, e: Entry, base: int, dec: zstandard.ZstdDecompressor, fd: int) -> list:
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
        got = raws.get(bi)
        if got is None or isinstance(got, str):
            out.append((oid, otype, IntegrityError(oid.hex(), "", got or "block missing")))
            continue
        data = got if isinstance(got, HashedLarge) else got[off : off + length]
        out.append((oid, otype, data))
    return out
