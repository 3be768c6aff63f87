"""``objstore backup DEST``: an online, incremental copy of a store that is itself a store.

``backup(store, dest)`` copies a consistent snapshot of the log while writers keep writing, and
never takes the writer lock (a commit never waits for a backup). It holds ``gc.lock`` shared for the
whole copy (``gc`` takes it exclusively, so no sealed segment is replaced under it), takes the log's
tail — the position, the active segment and the end offset of its last complete entry, together
(``LogEngine.tail``) — copies every sealed segment below the active one whole and the active one's
bytes ``[0, end)``: what writers append after ``end`` meanwhile is not copied.

Incremental. A sealed segment already in DEST with the same size, the same first 8 bytes (its magic)
and the same last 32 bytes (the chain checksum of its last entry) is kept, once checked: DEST's file is
read and its BLAKE3 compared with the file digest the log names (a packed segment), else with the one the
last backup recorded (in ``SRC/tmp/backup-digests/``, never in DEST: DEST cannot vouch for an edit of
itself) when it wrote and read back that file, else with SRC's
bytes hashed (``backup_copy``'s ``_intact``); a file that differs (bit rot keeps size, magic and last bytes) is copied
again and named (``recopied``). The same check covers the old bytes of a segment appended to.
A DEST segment that is a byte prefix of SRC's segment of that number (the last backup's active one:
DEST's last entry is whole and its checksum is SRC's at that offset — only those bytes are read)
gets only the new bytes, appended in place (a torn append is a torn tail, invisible to readers). A
DEST segment that no longer matches but ends with SRC's checksum (``gc`` rewrote SRC's: the same
entries) is replaced; one that does not (a copy torn by a crash) is replaced and every later DEST
segment removed first, so DEST stays a prefix of SRC's history at every instant — unless DEST's head
witness names an entry SRC does not have: DEST is then another history, refused. DEST segments beyond
SRC's tail are removed.

Checked: only what is copied is re-read. Each copied range is read back from DEST and its
BLAKE3 compared with the BLAKE3 of the bytes read from SRC; every copied entry's chain checksum is
recomputed from its meta and chained from the entry before (an ordinary segment's entries, or a
packed one's meta frame: ``engine.packed_entries``); each segment header (ordinary or packed) chains
to DEST's previous segment's last 32 bytes, its last entry's checksum; then DEST is opened
(its checkpoint — SRC's, copied, adopted only if DEST's log commits to it — plus a replay of the
rest) and must stand at exactly the snapshot's position. Only then is DEST's own head witness
written (atomically), so it never leads DEST's log.

Crash safety: DEST is created whole (staged next to it and renamed into place); whole segment copies
are written into ``DEST/tmp/``, fsynced (a batch at a time, so the disk writes them back together) and
renamed into place in increasing order (directory fsynced after each); a sealed segment's index is
never beside the other version of its segment; DEST's checkpoint goes before a segment it may point
into is replaced, and SRC's is copied only if DEST's log commits to it; the derived files (indexes,
checkpoint, witness) go through ``DEST/tmp/`` and a rename unsynced, as the engine writes its own.
Segments are copied in increasing order, so a ``kill -9`` at any point leaves DEST
a readable store of an older snapshot or the new one, and the next backup finishes. A backup that brings
a packed segment (one gc rewrote, which may lack bodies a deletion in a later segment justifies) builds
the new log whole in ``DEST/tmp/`` (kept files hard-linked) and exchanges it with ``DEST/log`` in one
``renameat2(RENAME_EXCHANGE)``, so DEST never holds a packed segment without the entries that explain it
(``backup_copy``'s ``_stage``, ``_swap``; where the file system cannot exchange directories they land in order). A full disk or
another OS error is ``StorageOSError`` (exit 10) with DEST as it was (the append truncated back, the
temporary file removed) or holding a longer prefix of the snapshot.

DEST must be absent (its parent must exist), an empty directory, or a store of the same history (its
first entry's checksum is SRC's, and so is the entry its witness names); anything else is ``InvalidInput`` (exit 5) with nothing written, as
is a DEST whose witness is ahead of SRC's head (a backup is never rolled back). DEST's writer lock is
held for the copy: a second backup into it, or a writer of it, is ``LockTimeout`` (exit 9).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

from ..errors import InvalidInput, LockTimeout, ObjstoreError, StorageOSError
from ..storage import gclock
from ..storage.fileutil import FsyncPolicy
from ..storage.log.format import Position
from ..storage.log.local import LogEngine
from ..storage.log.segfile import seg_name
from ..storage.log.witness import read_witness
from ..storage.store import Store
from ..storage.storedir import FORMAT_VERSION, MARKER, ONE_LOG_VERSIONS, read_marker
from . import delete
from .backup_copy import BackupResult, Progress, _Copier
from .backup_io import _UNKNOWN, _first_checksum, _tail32, _write_all


def backup(store: Store, dest: str, *, progress: Progress | None = None) -> BackupResult:
    """Copy a consistent snapshot of ``store`` to ``dest`` (see the module docstring; a store with a
    log per run: ``backup_runs``)."""
    engine = store.engine
    store.require_local("backup copies", f"'objstore clone {store.url} DIR' copies it")
    if not engine.log_files or store.root is None:
        raise InvalidInput("only a store on disk can be backed up")
    engine = cast(LogEngine, engine)
    src = os.path.realpath(store.root)
    dest = os.path.abspath(dest)
    _check_apart(src, dest)
    if store.logs.per_run:
        from .backup_runs import backup_runs

        return backup_runs(store, src, dest, progress)
    with gclock.gc_lock(src, shared=True, what="backup"):
        pos, tail_seg, end = engine.tail()
        # DEST gets SRC's checkpoint too: one a forger's process wrote past a deletion no authorised
        # key made would hide it from DEST's readers as from SRC's (gc refuses it alike)
        delete.check_authority(store)
        lengths = src_lengths(engine, tail_seg, end)
        fresh = _check_dest(dest, engine, pos)  # nothing is written before this passes
        policy = store.policy
        if fresh:
            create_dest(dest, policy)
        with dest_lock(dest):
            return _Copier(engine, dest, policy, progress).run(pos, tail_seg, lengths, src_version=read_marker(src))


# -- checks before anything is written ----------------------------------------------------------------------
def _check_apart(src: str, dest: str) -> None:
    real = os.path.realpath(dest)
    if real == src or real.startswith(src + os.sep) or src.startswith(real + os.sep):
        raise InvalidInput(f"backup destination {dest} is the store itself, inside it or around it")


def src_lengths(engine: LogEngine, tail_seg: int, end: int) -> dict[int, int]:
    """Segment -> bytes of it in the snapshot: sealed ones whole (they do not change while the gc lock
    is held), the active one up to the end of its last complete entry."""
    out = {}
    for k in range(1, tail_seg):
        try:
            out[k] = os.stat(engine.seg_path(k)).st_size
        except OSError as e:
            raise StorageOSError(f"read {engine.seg_path(k)}", e.strerror) from None
    out[tail_seg] = end
    return out


def _check_dest(dest: str, engine: LogEngine, pos: Position) -> bool:
    """True if DEST is to be created; raises InvalidInput (writing nothing) unless DEST is absent with
    an existing parent, an empty directory, or a format-3 store of the same history not ahead of SRC."""
    if not os.path.lexists(dest):
        parent = os.path.dirname(dest) or "."
        if not os.path.isdir(parent):
            raise InvalidInput(f"backup destination {dest}: its parent directory {parent} does not exist")
        return True
    if not os.path.isdir(dest):
        raise InvalidInput(f"backup destination {dest} exists and is not a directory")
    if not os.path.isfile(os.path.join(dest, MARKER)):
        try:
            empty = not os.listdir(dest)
        except OSError as e:
            raise StorageOSError(f"list {dest}", e.strerror) from None
        if empty:
            return True
        raise InvalidInput(f"backup destination {dest} is a non-empty directory that is not an objstore store")
    try:
        version = read_marker(dest)
    except ObjstoreError as e:
        raise InvalidInput(f"backup destination {dest} has an OBJSTORE marker that is not one: {e}") from None
    if version not in ONE_LOG_VERSIONS:
        raise InvalidInput(f"backup destination {dest} is a format-{version} store; a backup of this store is format "
                           f"{', '.join(map(str, ONE_LOG_VERSIONS))}")
    check_log_history(dest, engine, pos, f"backup destination {dest}")
    return False


def check_log_history(dest: str, engine: LogEngine, pos: Position, what: str) -> None:
    """InvalidInput unless the log rooted at ``dest`` (its ``log/``) is a copy of ``engine``'s history
    not ahead of ``pos``: its first entry's checksum is SRC's, and its witness is not beyond SRC's head."""
    dlog = os.path.join(dest, "log")
    first = os.path.join(dlog, seg_name(1))
    if not os.path.isfile(first):
        raise InvalidInput(f"{what} is a store without {first}")
    mine = _first_checksum(first)
    if mine is not None:  # DEST has entries: its first must be SRC's
        if mine is _UNKNOWN:  # DEST's first segment is packed (sealed): compare the checksum it ends with
            same = os.path.exists(engine.seg_path(2)) and _tail32(first) == _tail32(engine.seg_path(1))
        else:
            theirs = _first_checksum(engine.seg_path(1))
            if theirs is _UNKNOWN:  # SRC's is packed: a layout the engine reads
                theirs = next((e.checksum for e in engine.entries()), None)
            same = mine == theirs
        if not same:
            raise InvalidInput(f"{what} is a store of another history (its first entry is not this store's)")
    w = read_witness(os.path.join(dlog, "witness"))
    if w is not None and w[0] > pos.entry:
        raise InvalidInput(f"{what} holds entry {w[0]}, beyond this store's head (entry {pos.entry}); "
                           "refusing to roll a backup back")


# -- DEST as a store -------------------------------------------------------------------------------------------
def create_dest(dest: str, policy: FsyncPolicy, version: int = FORMAT_VERSION,
                layout: Callable[[str, FsyncPolicy], None] = LogEngine.create) -> None:
    """An empty store of format ``version`` (its directories made by ``layout``) at ``dest``, staged beside
    it and renamed into place (onto an empty directory too), so DEST is a whole store or absent at every
    instant; the staging goes on failure."""
    parent = os.path.dirname(dest) or "."
    prefix = f".{os.path.basename(dest)}.backup-"
    remove_dead_stagings(parent, prefix)
    staging = os.path.join(parent, f"{prefix}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.makedirs(os.path.join(staging, "tmp"))
        layout(staging, policy)
        fd = os.open(os.path.join(staging, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, json.dumps({"format": "objstore", "version": version}).encode() + b"\n")
            policy.file(fd)
        finally:
            os.close(fd)
        policy.dir(staging)
        os.rename(staging, dest)
        policy.dir(parent)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise InvalidInput(f"backup destination {dest} was created by someone else meanwhile") from None
        raise StorageOSError(f"create the backup store {dest}", e.strerror) from None


def remove_dead_stagings(parent: str, prefix: str) -> None:
    """A staging directory of this DEST left by a backup killed before its rename (its pid is gone)."""
    try:
        names = [f for f in os.listdir(parent) if f.startswith(prefix)]
    except OSError:
        return
    for f in names:
        pid = f[len(prefix):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive: another backup is creating this DEST right now
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, f), ignore_errors=True)
        except OSError:
            continue


@contextmanager
def dest_lock(dest: str, wait: float = 0.0, path: str | None = None) -> Iterator[None]:
    """DEST's writer lock (``path``, default ``dest/lock``), exclusively, waiting at most ``wait`` seconds:
    no writer of DEST and no other backup into it."""
    path = path or os.path.join(dest, "lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageOSError(f"open {path}", e.strerror) from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{path} for a copy (another backup or a writer of {dest} holds it)", wait) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)
