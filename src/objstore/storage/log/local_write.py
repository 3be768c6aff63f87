"""Writing: the writer lock, commit entries, group commit, sealing, repair and rewrite entries.

Kept here:

* writers serialize on an in-process lock and an exclusive ``flock`` of ``lock``; a writer catches
  up as a reader before queueing for the ``flock`` (less to take in while holding it); under it a
  writer catches up on the rest, refuses a damaged log or one its head witness disagrees with, cuts a torn tail
  (recording the cut in its own entry), checks the entry against the rules, appends, and releases;
* an entry is one write and one fdatasync: the only commit point. The sync happens outside the locks
  so threads of one process share it, and writer processes too (``groupsync``: a flush another
  process began after our write covers our entry); a commit returns only once its own entry is
  durable. The syncer catches up without the writer lock first, so its flush names (and the head
  witness written after it) the newest entry it covers, and its next commit has less to take in
  under the lock;
* a segment is sealed only once everything in it is durable; the sealer then starts the next segment
  and writes its first entry, naming the sealed segment's index by digest;
* ``repair`` cuts only after the last readable entry of the last segment, and records what it cut.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import AbstractContextManager
from typing import Any

import blake3

from ...errors import CorruptLog, InvalidInput, LockTimeout, ObjstoreError, Refused, StorageOSError
from . import segindex
from .engine import deletion_rule, txn_bodies
from .entry import LogEntry, build_entry
from .format import SEG_HEADER, Position
from .local_state import LocalBase
from .segfile import _read_segment_header, _write_parts, _write_segment_header
from .segrows import _write_index
from .txn import Txn

SEAL_BYTES = 8 << 20  # a segment is sealed once it passes this size
CHECKPOINT_ENTRIES = 1000  # a writer checkpoints the tables after this many entries...
CHECKPOINT_BYTES = 4 << 20  # ...or this many bytes of log since the last checkpoint (readers add their own)


class _Commit:
    """``Writer.transaction``'s block (a class, not a generator: every commit goes through it)."""

    __slots__ = ("w", "timeout", "repair_after", "txn")

    def __init__(self, w: Writer, timeout: float | None, repair_after: int | None) -> None:
        self.w, self.timeout, self.repair_after = w, timeout, repair_after

    def __enter__(self) -> Txn:
        self.txn = self.w._begin(self.timeout, self.repair_after)
        return self.txn

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        self.w._end(self.txn, et is not None)


class Writer(LocalBase):
    """Commits to one local log: locking, appending, syncing, sealing, repairing, rewriting."""

    def transaction(self, timeout: float | None = None, repair_after: int | None = None) -> AbstractContextManager[Txn]:
        """A commit under the writer lock. ``repair_after`` (``objstore repair``): the log is
        damaged after entry N, which must be the end of its readable prefix in the last segment;
        this commit's entry cuts everything after N off the segment and records what it removed
        (its ``cut``), and the head witness names it afterwards."""
        return _Commit(self, timeout, repair_after)

    def _begin(self, timeout: float | None, repair_after: int | None) -> Txn:
        """Under both writer locks (taken here, ``_wlock`` then the ``flock``): the log caught up and fit to write,
        and a new transaction on it. Raises with both locks let go."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeout("the store's writer lock", timeout)
        try:
            if not self._os_lock_now():
                # Another process holds the lock: catch up as a reader while it does (no thread of this process is
                # mid-commit: _wlock is ours), so what is left to take in under the lock is what others wrote
                # while we queued. Uncontended, the catch-up under the lock below is the only one.
                try:
                    self.refresh()
                except (ObjstoreError, OSError):
                    pass  # met again, and dealt with, under the lock
                self._os_lock(deadline, timeout)
            try:
                self._fit_to_write(repair_after)
                return Txn(self)
            except BaseException:
                assert self._lfd is not None  # _os_lock opened it
                fcntl.flock(self._lfd, fcntl.LOCK_UN)
                raise
        except BaseException:
            self._wlock.release()
            raise

    def _fit_to_write(self, repair_after: int | None) -> None:
        """Under the writer lock: catch up on the rest, refuse a damaged log or one its head witness disagrees with,
        finish a dead sealer's work and replace a wrong index file."""
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

    def _end(self, txn: Txn, failed: bool) -> None:
        """The end of ``_begin``'s transaction: its entry written (unless the block ``failed`` or it holds nothing),
        both locks let go, then the entry made durable and, every so often, the tables checkpointed."""
        written = None
        try:
            try:
                if not failed:
                    moves = txn.ref_moves()
                    if txn.objects or moves:
                        written = self._commit(txn, moves)
            finally:
                for spill in txn.spills:
                    spill.discard()
                assert self._lfd is not None  # _os_lock opened it
                fcntl.flock(self._lfd, fcntl.LOCK_UN)
        finally:
            self._wlock.release()
        # Group commit: the entry is written; it is made durable outside the locks, so the threads
        # of this process that write meanwhile share one fdatasync. The commit returns (is
        # acknowledged) only once its own entry is durable.
        if written is not None and not txn.defer_sync:  # deferred: the log's next synced commit covers it (Txn)
            self._sync_upto(*written)
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

    def _sync_upto(self, n: int, s: int, seg: int) -> None:
        """Return once entry ``n`` (written by this process in segment ``seg``; ``s``: the sync
        counter read after its write, ``groupsync.started``) is durable: one thread of this process
        makes it so for every entry it wrote before, the others wait for it."""
        if not self.policy.enabled:  # nothing to flush: the head witness names the newest entry written, at once
            with self._sync_cv:
                if self._durable < n:
                    newest = self._written[0]
                    self._write_witness(newest.entry, newest.checksum)  # never fails a commit
                    self._durable = max(self._durable, newest.entry)
            return
        with self._sync_cv:
            while self._durable < n:
                if self._syncing:
                    self._sync_cv.wait()
                    continue
                self._syncing = True
                written = self._written
                err = None
                self._sync_cv.release()
                try:
                    done = self._make_durable(n, s, seg, written)
                except OSError as e:
                    err = e
                finally:
                    self._sync_cv.acquire()
                    self._syncing = False
                    self._sync_cv.notify_all()
                if err is not None:
                    raise StorageOSError("make a commit entry durable (fdatasync)", err)
                self._durable = max(self._durable, done)

    def _make_durable(self, n: int, s: int, seg: int, newest: tuple[Position, int, int]) -> int:
        """Make this process's entries up to ``n`` durable (``newest``: its newest entry, the file
        and the segment it is in); the entry number up to which they now are. Another process's
        flush of ``seg`` that began after the write of ``n`` covers it (then nothing is written
        here); else this one flushes the newest entry's file and writes the head witness. Only with
        fsync on: with it off, ``_sync_upto`` writes the witness itself."""
        from . import groupsync  # on the first durable commit: a reader never loads it

        written, fd, wseg = newest
        if self._sync_fd is None:
            self._sync_fd = groupsync.open_sync(self.root)
        if self._sync_fd is None:
            os.fdatasync(fd)
            self._write_witness(written.entry, written.checksum)
            return written.entry
        covers = [written]

        def sync() -> None:
            covers[0] = self._horizon(written, fd)
            os.fdatasync(fd)
            self._write_witness(covers[0].entry, covers[0].checksum)

        if groupsync.await_durable(self._sync_fd, s, seg, sync, wseg):
            return n  # an entry written before n's write is covered by the same flush
        return covers[0].entry

    def _sync_started(self) -> int:
        """The group-sync counter, read right after an entry's write (0 when nothing is synced)."""
        if not self.policy.enabled:
            return 0
        from . import groupsync

        if self._sync_fd is None:
            self._sync_fd = groupsync.open_sync(self.root)
        return groupsync.NEVER if self._sync_fd is None else groupsync.started(self._sync_fd)

    def _horizon(self, written: Position, fd: int) -> Position:
        """The newest entry a flush of ``fd`` about to begin covers: every complete entry in that
        file, found by catching up without the writer lock (what this process's next commit would
        take in under it), else ``written``. Skipped while another thread of this process holds
        ``_wlock``: its entry may be written and not yet applied, and a catch-up would take it twice."""
        if not self._wlock.acquire(blocking=False):
            return written
        try:
            with self._mu:
                try:
                    self.refresh()
                except (ObjstoreError, OSError):
                    return written  # damage, an unreadable file: the writer lock's holder meets it; flush what we wrote
                w, pos = self._wfd, self.tables.pos
                if w is not None and w[1] == fd and w[0] == self._seg and pos.entry >= written.entry:
                    return pos
                return written
        finally:
            self._wlock.release()

    def _lock_fd(self) -> int:
        # One lock file descriptor per engine, kept open: flock excludes other open file
        # descriptions (other processes, other Store objects); threads wait on _wlock first.
        if self._lfd is None:
            try:
                self._lfd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StorageOSError("open the writer lock", e) from None
        return self._lfd

    def _os_lock_now(self) -> bool:
        """Take the ``flock`` if no other open file description holds it; whether it was taken."""
        try:
            fcntl.flock(self._lock_fd(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _os_lock(self, deadline: float | None, timeout: float | None) -> None:
        lfd = self._lock_fd()
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

    def _commit(self, txn: Txn, moves: list) -> tuple[int, int, int] | None:
        """Write one entry (not yet synced: returns its number, the sync counter read after its
        write and its segment, for _sync_upto; None if synced)."""
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
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, idx=idx,
                             seg=seg, at=off)
        if off + e.length >= SEAL_BYTES:  # the last entry of this segment says so
            raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, seal=True,
                                 idx=idx, seg=seg, at=off)
        self._write_entry(wfd, raw, off, sync=False)
        started = self._sync_started()
        with self._mu:
            # Our own entry: applied from what we hold, never read back.
            self._apply(e, plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd, seg)
        if e.seal:
            self._sync_upto(e.n, started, seg)  # a segment is sealed only once everything in it is durable
            try:
                self._seal()
            except (ObjstoreError, OSError, segindex.IndexError_):
                pass  # the commit is durable already; the next writer finishes the seal
            return None
        return e.n, started, seg

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

    def _write_bare(self, seal: bool = False, rw: list | None = None) -> LogEntry:
        """Write (and sync) an entry with no object and no move, under the writer lock: a seal entry,
        the first entry of a segment, or a rewrite entry (``rw``)."""
        t = self.tables
        idx = self._first_entry_idx(self._seg, self._off)
        plan = t.plan(t.pos.entry + 1, [], {}, [], idx, rw)
        if isinstance(plan, str):
            raise Refused(plan)
        cut = self._cut_torn()
        off, seg = self._off, self._seg
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, time.time(), [], [], cut, root=plan.root, seal=seal, idx=idx, rw=rw,
                             seg=seg, at=off)
        wfd = self._writer(seg)
        self._write_entry(wfd, raw, off)  # synced: an entry gc relies on is durable before it goes on
        with self._mu:
            self._apply(e, plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd, seg)
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
