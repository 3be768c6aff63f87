"""A backup's destination: made whole or not at all, locked against a second backup, and proved the same history as
the store it copies (its first entry, its segments) before anything is written into it. Used by the backup of a store of
one log (``backup``) and by that of a store of a log per run (``backup_runs``), log by log."""

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

from ..errors import InvalidInput, LockTimeout, ObjstoreError, StorageOSError
from ..storage.fileutil import FsyncPolicy
from ..storage.log.format import Position
from ..storage.log.local import LogEngine
from ..storage.log.segfile import seg_name
from ..storage.log.witness import read_witness
from ..storage.storedir import FORMAT_VERSION, MARKER, ONE_LOG_VERSIONS, read_marker
from .backup_io import _UNKNOWN, _first_checksum, _tail32, _write_all


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
    version = dest_version(dest)
    if version is None:
        return True
    if version not in ONE_LOG_VERSIONS:
        raise InvalidInput(f"backup destination {dest} is a format-{version} store; a backup of this store is format "
                           f"{', '.join(map(str, ONE_LOG_VERSIONS))}")
    check_log_history(dest, engine, pos, f"backup destination {dest}")
    return False


def dest_version(dest: str) -> int | None:
    """None if DEST is to be created (absent with an existing parent, or an empty directory), else the format of the
    store it holds; InvalidInput (writing nothing) for anything else. What a backup checks first, whatever its format."""
    if not os.path.lexists(dest):
        parent = os.path.dirname(dest) or "."
        if not os.path.isdir(parent):
            raise InvalidInput(f"backup destination {dest}: its parent directory {parent} does not exist")
        return None
    if not os.path.isdir(dest):
        raise InvalidInput(f"backup destination {dest} exists and is not a directory")
    if not os.path.isfile(os.path.join(dest, MARKER)):
        try:
            empty = not os.listdir(dest)
        except OSError as e:
            raise StorageOSError(f"list {dest}", e.strerror) from None
        if empty:
            return None
        raise InvalidInput(f"backup destination {dest} is a non-empty directory that is not an objstore store")
    try:
        return read_marker(dest)
    except ObjstoreError as e:
        raise InvalidInput(f"backup destination {dest} has an OBJSTORE marker that is not one: {e}") from None


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

