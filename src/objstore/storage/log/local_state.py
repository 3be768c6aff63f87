"""The local log engine's state, its files, and the methods its parts call on one another.

``LocalBase`` holds what a ``LogEngine`` is made of: the tables, the tail position (segment and
offset of the end of the last complete entry), the open descriptors, the indexes held, the head
witness found at open. Each concern of the engine is a class of its own module over this base
(``local_catchup``, ``local_objects``, ``local_index``, ``checkpoint``, ``witness``, ``local_write``);
``local.LogEngine`` combines them. A method one part calls on another part is declared here, with
its signature, and defined in the module named beside it.

Kept here:

* one descriptor per segment file, opened on first use and kept until ``close`` (or the engine is
  collected); one that gc replaced is kept open too, as another thread may still read it; likewise
  one per sealed index file a lookup used (read with ``pread``: ``segindex.FileBytes``); one on the
  adopted checkpoint's file, whose active rows are read where a lookup asks, kept by those rows (the
  tables' ``frozen``) until they are dropped or the engine is collected: a checkpoint replaced since
  is another file, and these rows are the ones the adopted fields go with;
* a missing segment is ``CorruptLog``, never an empty one;
* ``_mu`` guards the tables and the tail position within a process; ``_wlock`` (threads) and the
  ``lock`` file's ``flock`` (processes) serialize writers; the ``sync`` file (``groupsync``) lets
  writer processes share flushes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ...errors import CorruptLog
from ..fileutil import FsyncPolicy
from . import blockcache
from .engine import Engine
from .entry import LogEntry
from .format import SEG_HEADER, ZERO, Loc, Position
from .idxtrust import VerifiedIndexes
from .rules import EntryEffect
from .segfile import Packed, _write_segment_header, seg_name
from .tables import LogState

OPEN_CHECKPOINT = 200  # a reader that replayed this many entries at open leaves a checkpoint behind...
OPEN_CHECKPOINT_BYTES = 128 << 10  # ...or this many bytes of log
REWRITE_WHOLE = 64 << 10  # ...or adopted a checkpoint of this many bytes or more that it had to read whole (written
# before its zsum): rewritten once in the current layout, so the next open reads its fields, not its active rows


def top_segment(names: list[str]) -> int:
    """The highest segment number among a log directory's file names (1 if none): of the ``.seg``
    names whose stem is all digits, the greatest number. When every ``.seg`` name is ten digits (as
    the engine names them), the greatest name is that number: no name is parsed but that one."""
    segs = [f for f in names if f.endswith(".seg")]
    if segs and all(len(f) == 14 and f[:-4].isdigit() for f in segs):
        return int(max(segs)[:-4])
    return max([int(f[:-4]) for f in segs if f[:-4].isdigit()] or [1])


class LocalBase(Engine):
    """A local log engine's state and files; its concerns are defined by the classes over it."""

    def __init__(self, root: str, policy: FsyncPolicy, checkpoint: bool = True, entry_view: Any = None, run: str | None = None) -> None:
        """``checkpoint=False``: neither adopt nor write a checkpoint; every entry from the first is
        replayed (its rules and root checked): what verify reads the log with. ``entry_view`` and ``run``: a
        run's log of format 6 (``Engine.entry_view``)."""
        self.root = root
        self.entry_view = entry_view
        self.run = run
        self.dir = os.path.join(root, "log")
        self.policy = policy
        self.tables = LogState()
        # a run's log of format 6 reads whether another run is deleted in that run's log (the birth rule)
        self.tables.elsewhere = getattr(getattr(entry_view, "__self__", None), "run_deleted", None)
        self._mu = threading.RLock()  # guards the tables and the tail position within this process
        self._wlock = threading.Lock()  # writers of this process, one at a time
        self._seg = 1  # segment the tail is in
        self._off = SEG_HEADER.size  # end of the last complete entry in it
        self._fds: dict[int, int] = {}
        self._packs: dict[int, Packed | None] = {}  # segment -> its packed entries (None: an ordinary segment)
        self._replaced_fds: list[int] = []  # descriptors of segment files gc replaced (other threads may still read them)
        self._lfd: int | None = None  # the writer lock's descriptor, opened on first write
        self._sync_fd: int | None = None  # <root>/sync (groupsync), opened on first durable commit
        self._wfd: tuple[int, int] | None = None  # (segment, descriptor) we append to
        self._paths: dict[int, str] = {}
        self._idx: dict[int, Any] = {}  # sealed segment -> SegmentIndex
        self._built: dict[int, bytes] = {}  # sealed segment -> digest of the index this process built from the log
        self._verified = VerifiedIndexes(self.dir)  # index files already hashed to the digest the log names (a hint)
        self._bad_idx: dict[int, bytes] = {}  # sealed segment -> the index bytes its wrong file should hold
        self._hint = 0  # segment of the last object found through an index
        # object -> where a sealed segment's index found it (with its body): a sealed segment changes only when gc
        # replaces its file, which drops this (``_drop_segment``); a body every commit names (a prompt) is then one
        # dict look-up instead of a search of the sealed indexes per commit
        self._sealed_locs: dict[bytes, Any] = {}
        self._ckpt_at = (0, 0)  # (entry, offset) of the last checkpoint this process wrote or loaded
        self._blocks = blockcache.SHARED  # decompressed blocks, keyed by the token of the descriptor they were read on
        self._fd_tok: dict[int, int] = {}  # descriptor of a segment file -> its file token (blockcache), while open
        self.torn: tuple | None = None  # (segment, offset, length, reason) of a torn tail seen by the last refresh
        self.damaged: tuple | None = None  # (segment, offset, reason) of a bad entry that is not a torn tail
        self.prefix_ok = False  # answer from the readable prefix of a damaged log instead of raising (verify)
        self.breach = False  # the damage is a sound entry that breaks a rule of the log (or its root), not bad bytes
        self._sealed = False  # the last entry taken in is its segment's seal entry
        self._wit_path = os.path.join(self.dir, "witness")
        self._wit_fd: int | None = None
        self._sync_cv = threading.Condition(threading.Lock())  # group commit: who syncs, who waits
        self._syncing = False
        self._written: tuple[Position, int, int] = (Position(0, ZERO), -1, 0)  # newest entry this process wrote, its file and segment
        self._durable = 0  # entries of this process up to this number are durable
        self._old_wfds: list[int] = []
        self._ckpt_busy = False
        self._ckpt_whole = 0  # the size of the checkpoint if it had to be read whole (one written before its zsum), else 0
        self._use_checkpoint = True
        self._wit = self.witness()  # the head witness as this process found it at open
        self.witness_problem: tuple[str, str] | None = None  # (code, detail): log-truncated / witness-mismatch
        try:  # the highest segment present: a gap below it is a missing segment, not the log's end
            self._top = top_segment(os.listdir(self.dir))
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
            if (entries >= OPEN_CHECKPOINT or (entries and (self._seg, self._off) > (ckpt_seg, self._ckpt_at[1] + OPEN_CHECKPOINT_BYTES))
                    or (self._ckpt_whole >= REWRITE_WHOLE and self._ckpt_at[0] > 0)):  # a large one read whole: rewritten once
                self._checkpoint()  # best effort (a read-only store just replays again next time)

    def tail(self) -> tuple[Position, int, int]:
        """(position, segment, end offset) of the newest complete entry, taken together: what a
        backup copies is exactly the log up to there (sealed segments whole, the active one to ``end``)."""
        with self._mu:
            self.refresh()
            return self.tables.pos, self._seg, self._off

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
            self._fd_tok[fd] = blockcache.token()
            self._fds[n] = fd
        return fd

    def close(self) -> None:
        for idx in list(self._idx.values()):
            idx.close()  # an index file read with pread holds its descriptor
        self._idx.clear()
        for fd in [*self._fds.values(), *self._replaced_fds]:
            os.close(fd)
        self._fds.clear()
        self._blocks.discard(set(self._fd_tok.values()))  # never read again (a token is never handed out twice): memory back
        self._fd_tok.clear()
        self._replaced_fds = []
        for extra in (self._lfd, self._sync_fd, self._wfd[1] if self._wfd else None, self._wit_fd, *self._old_wfds):
            if extra is not None:
                os.close(extra)
        self._lfd = self._sync_fd = self._wfd = self._wit_fd = None
        self._old_wfds = []
        frozen = getattr(getattr(self, "tables", None), "frozen", None)
        if frozen is not None:
            frozen.close()  # an adopted checkpoint's active rows, read from its file by pread (checkpoint.adoption_lazy)

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

    def idx_path(self, seg: int) -> str:
        return os.path.join(self.dir, f"{seg:010d}.idx")

    def where(self, oid: bytes) -> str:
        loc = self.loc(oid)
        return self.seg_path(loc.seg) if loc else ""

    # -- defined by the parts (declared here so each part may call the others) --------------
    def witness(self) -> tuple[int, bytes] | None:
        raise NotImplementedError  # witness.py

    def _check_witness(self) -> None:
        raise NotImplementedError  # witness.py

    def repair_explains(self, w: tuple[int, bytes]) -> bool:
        raise NotImplementedError  # witness.py

    def _write_witness(self, entry: int, checksum: bytes) -> None:
        raise NotImplementedError  # witness.py

    def refresh(self) -> Position:
        raise NotImplementedError  # local_catchup.py

    def _packed(self, seg: int) -> Packed | None:
        raise NotImplementedError  # local_catchup.py

    def _apply(self, e: LogEntry, plan: EntryEffect | None = None) -> str | None:
        raise NotImplementedError  # local_catchup.py

    def _segment_entries(self, seg: int, prev: bytes, n: int) -> Iterator[LogEntry]:
        raise NotImplementedError  # local_catchup.py

    def _read_loc(self, oid: bytes, loc: Loc) -> bytes:
        raise NotImplementedError  # local_objects.py

    def read(self, oid: bytes) -> bytes:
        raise NotImplementedError  # local_objects.py

    def _confirmed(self, run: str, branch: int, lsn: int, oid: bytes, parent: bytes | None | bool = False) -> bool:
        raise NotImplementedError  # local_objects.py

    def loc(self, oid: bytes) -> Loc | None:
        raise NotImplementedError  # local_index.py

    def _drop_segment(self, seg: int) -> bool:
        raise NotImplementedError  # local_index.py

    def forget_segment(self, seg: int) -> bool:
        raise NotImplementedError  # local_index.py

    def _sealed_index_bytes(self, seg: int) -> bytes:
        raise NotImplementedError  # local_index.py

    def _retire_active(self) -> None:
        raise NotImplementedError  # local_index.py

    def _drop_frozen(self) -> bool:
        raise NotImplementedError  # local_index.py

    def _load_checkpoint(self) -> None:
        raise NotImplementedError  # checkpoint.py

    def _checkpoint(self) -> None:
        raise NotImplementedError  # checkpoint.py
