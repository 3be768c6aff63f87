"""Group commit across processes: one fdatasync covers the entries several writer processes wrote.

Writers of one log append under its writer lock and make their entries durable after releasing it.
Each process used to fdatasync for its own entry, so P writers flushed up to P times for entries one
flush would cover. They share the file ``<root>/sync`` (beside the writer lock ``<root>/lock``) to
tell whether a flush that covers their entry has happened:

* it holds two counters, ``started`` and ``completed``, the segment the last completed sync flushed,
  and a CRC over them, so a read racing a write is seen as unreadable, never as other numbers;
* a syncer holds the file's ``flock`` exclusively: it sets ``started`` to q, calls fdatasync on its
  segment file, then sets ``completed`` to q and the segment to its own;
* a writer reads ``started`` (s) after its entry's write returned. A sync numbered above s set its
  number after that read, so its fdatasync began after the write and, if it flushed the segment file
  the entry is in, covers it: once ``completed`` > s with that segment the entry is durable and the
  writer returns without a flush of its own (a flush of another segment covers nothing of it: a
  segment is sealed only once durable, so only a syncer slow to flush the sealed one can leave its
  number over an entry of the next). Otherwise
  it waits out the sync in flight (a shared lock, granted to every waiter at once), looks again, and
  if still not covered becomes the syncer under the exclusive lock: its own fdatasync, issued after its
  own write, covers its entry whatever the counters say.

The file is a hint, not part of the log: missing, unreadable, zeroed or rolled back it costs a flush,
never durability (a writer trusts only a ``completed`` above the ``started`` it read itself, after its
write; only a file swapped for one with higher counters between those two reads could mislead it). A process
killed anywhere in this leaves the lock released (the kernel drops a dead process's ``flock``) and at
worst ``started`` above ``completed``: nobody counts that sync, the next syncer makes its own.
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Callable

SYNC_FILE = "sync"
_HEAD = struct.Struct("<QQQ")  # started, completed, the segment the last completed sync flushed
_REC = struct.Struct("<QQQI")  # the same, and the CRC-32 of those 24 bytes
NEVER = 1 << 64  # the ``started`` of an unreadable file: no sync counts as covering the entry


def open_sync(root: str) -> int | None:
    """A descriptor of ``<root>/sync`` (created if missing), or None if it cannot be opened: the
    writer then makes each of its entries durable itself."""
    try:
        return os.open(os.path.join(root, SYNC_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None


def _counts(fd: int) -> tuple[int, int, int] | None:
    """(started, completed, segment), or None: absent, short, or torn by a write in progress."""
    try:
        raw = os.pread(fd, _REC.size, 0)
    except OSError:
        return None
    if len(raw) != _REC.size:
        return None
    started, completed, seg, crc = _REC.unpack(raw)
    if zlib.crc32(raw[:_HEAD.size]) != crc or completed > started:
        return None  # torn by a write in progress, or not counters a syncer writes
    return started, completed, seg


def _set(fd: int, started: int, completed: int, seg: int) -> None:
    head = _HEAD.pack(started, completed, seg)
    try:
        os.pwrite(fd, head + struct.pack("<I", zlib.crc32(head)), 0)
    except OSError:
        pass  # a hint: unwritten, the other writers make their own flushes


def started(fd: int) -> int:
    """The ``started`` counter now; read after an entry's write returned (NEVER if unreadable)."""
    c = _counts(fd)
    return NEVER if c is None else c[0]


def _covered(fd: int, s: int, seg: int) -> bool:
    c = _counts(fd)
    return c is not None and c[1] > s and c[2] == seg


def await_durable(fd: int, s: int, seg: int, sync: Callable[[], None], synced: int) -> bool:
    """Return once an fdatasync of segment ``seg`` issued after the write that read ``started`` =
    ``s`` has completed: True when another process's flush covered it, False when this one ran
    ``sync()`` (its fdatasync of segment ``synced``, between setting ``started`` and ``completed``,
    under the exclusive lock). An OSError of ``sync`` propagates; the lock is released whatever happens."""
    if _covered(fd, s, seg):
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # A sync is in flight (or waiters are looking): wait it out with every other waiter at
        # once, look again, and only then queue for the exclusive lock (two waits at most).
        fcntl.flock(fd, fcntl.LOCK_SH)
        fcntl.flock(fd, fcntl.LOCK_UN)
        if _covered(fd, s, seg):
            return True
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        c = _counts(fd) or (0, 0, 0)
        if c[1] > s and c[2] == seg:
            return True
        q = c[0] + 1
        _set(fd, q, c[1], c[2])
        sync()
        _set(fd, q, q, synced)
        return False
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
