"""Refs: validated names, compare-and-swap moves, and an append-only ref log.

A ref is a small file ``refs/<name>`` holding either ``<64 hex id>\\n`` or a
symbolic target ``ref: <other name>\\n`` (the live ref of a run names its live
branch that way, like git's HEAD). Names follow git's check-ref-format rules.

``set_if_equals(name, old, new, reason)`` (dulwich's name) is the only way a ref
moves. Under the ref's lock it re-reads the current value, compares it with
``old``, appends the move to the ref log ``logs/<name>`` (fsynced), writes the
new value into the lock file (fsynced) and renames the lock file over the ref
(directory fsynced), as git does. The loser of a race gets ``Conflict``.

Locking: ``<name>.lock`` is created atomically with link(2) (O_EXCL semantics)
from a temp file that its creator already holds an flock on, and removed after
the rename. A crashed holder's flock dies with it, so a contender that can take
the flock on an existing lock file knows the holder is gone and breaks the lock
(only if the path still names that same inode). No stale lock outlives a crash.

Ref log order: the log entry is written *before* the rename. After a crash in
between, the log's last entry names a move that did not happen; ``verify``
accepts a ref equal to the last entry's ``old`` for that reason, and the next
move under the lock first appends a ``recovery`` entry putting the log and the
ref back in agreement.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from typing import Iterator

from .errors import Conflict, InvalidRefName, RefNotFound
from .fileutil import FsyncPolicy, tmp_name

_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
SYMREF_PREFIX = "ref: "


def check_ref_name(name: str) -> str:
    """Return ``name`` if valid, else raise InvalidRefName (git check-ref-format rules)."""
    if not isinstance(name, str) or not name:
        raise InvalidRefName(name, "empty")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidRefName(name, "must not start or end with '/'")
    if _BAD_CHARS.search(name):
        raise InvalidRefName(name, "control character, space or one of ~^:?*[\\")
    if ".." in name:
        raise InvalidRefName(name, "contains '..'")
    if "@{" in name or name == "@":
        raise InvalidRefName(name, "contains '@{' or is '@'")
    if name.endswith("."):
        raise InvalidRefName(name, "ends with '.'")
    for comp in name.split("/"):
        if not comp:
            raise InvalidRefName(name, "empty path component")
        if comp.startswith("."):
            raise InvalidRefName(name, "a component starts with '.'")
        if comp.endswith(".lock"):
            raise InvalidRefName(name, "a component ends with '.lock'")
    if len(name) > 1024:
        raise InvalidRefName(name[:40] + "...", "longer than 1024 characters")
    return name


def format_value(value: bytes | str) -> str:
    """bytes id → hex; 'ref: x' passes through."""
    if isinstance(value, bytes):
        return value.hex()
    return value


class RefStore:
    """Interface; values are ``bytes`` ids or ``'ref: name'`` strings, None = absent."""

    def read(self, name: str) -> bytes | str | None:
        raise NotImplementedError

    def set_if_equals(self, name: str, old, new, reason: str) -> None:
        raise NotImplementedError

    def list(self, prefix: str = "") -> Iterator[tuple[str, bytes | str]]:
        raise NotImplementedError

    def log(self, name: str) -> list[dict]:
        raise NotImplementedError


def _parse_value(text: str, name: str, path: str):
    from .errors import IntegrityError

    text = text.rstrip("\n")
    if text.startswith(SYMREF_PREFIX):
        return text
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    raise IntegrityError(name, path, f"corrupt ref file: {text[:80]!r}")


class MemoryRefStore(RefStore):
    def __init__(self):
        self.refs: dict[str, bytes | str] = {}
        self.logs: dict[str, list[dict]] = {}

    def read(self, name):
        check_ref_name(name)
        return self.refs.get(name)

    def set_if_equals(self, name, old, new, reason):
        check_ref_name(name)
        cur = self.refs.get(name)
        if cur != old:
            raise Conflict(name, _show(old), _show(cur))
        self.logs.setdefault(name, []).append(_entry(old, new, reason))
        if new is None:
            self.refs.pop(name, None)
        else:
            self.refs[name] = new

    def list(self, prefix=""):
        for k in sorted(self.refs):
            if k.startswith(prefix):
                yield k, self.refs[k]

    def log(self, name):
        return list(self.logs.get(name, []))


def _show(v) -> str:
    if v is None:
        return "(absent)"
    return format_value(v)


def _entry(old, new, reason) -> dict:
    return {
        "old": None if old is None else format_value(old),
        "new": None if new is None else format_value(new),
        "time": time.time(),
        "pid": os.getpid(),
        "reason": reason,
    }


class FileRefStore(RefStore):
    def __init__(self, root: str, policy: FsyncPolicy):
        self.root = root
        self.refdir = os.path.join(root, "refs")
        self.logdir = os.path.join(root, "logs")
        self.tmpdir = os.path.join(root, "tmp")
        self.policy = policy

    def path(self, name: str) -> str:
        return os.path.join(self.refdir, *check_ref_name(name).split("/"))

    def log_path(self, name: str) -> str:
        return os.path.join(self.logdir, *check_ref_name(name).split("/"))

    def read(self, name):
        path = self.path(name)
        try:
            with open(path, "r", encoding="ascii", errors="replace") as f:
                text = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            return None
        return _parse_value(text, name, path)

    # -- locking -----------------------------------------------------------
    def _lock(self, path: str) -> int:
        lock = path + ".lock"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = tmp_name(self.tmpdir, "lock")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, str(os.getpid()).encode())
        delay = 0.0002
        try:
            while True:
                try:
                    os.link(tmp, lock)
                    return fd
                except FileExistsError:
                    self._break_if_stale(lock)
                time.sleep(delay)
                delay = min(delay * 2, 0.01)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.unlink(tmp)

    @staticmethod
    def _break_if_stale(lock: str) -> None:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # holder alive
            try:
                st = os.stat(lock)
            except FileNotFoundError:
                return
            if st.st_ino == os.fstat(fd).st_ino:
                os.unlink(lock)  # holder died holding it: its flock is gone
        finally:
            os.close(fd)

    def _unlock(self, path: str, fd: int, renamed: bool) -> None:
        try:
            if not renamed:
                os.unlink(path + ".lock")
        finally:
            os.close(fd)

    # -- moves -------------------------------------------------------------
    def set_if_equals(self, name, old, new, reason):
        path = self.path(name)
        fd = self._lock(path)
        renamed = False
        try:
            cur = self.read(name)
            self._recover_log(name, cur)
            if cur != old:
                raise Conflict(name, _show(old), _show(cur))
            self._append_log(name, _entry(old, new, reason))
            if new is None:
                os.unlink(path)
            else:
                # As git does: the lock file becomes the new ref. Our flock stays on that
                # inode until close, and breakers compare inodes, so this is safe.
                data = (format_value(new) + "\n").encode("ascii")
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
                self.policy.file(fd)
                os.replace(path + ".lock", path)
                renamed = True
            self.policy.dir(os.path.dirname(path))
        finally:
            self._unlock(path, fd, renamed)

    def _last_log_entry(self, name: str) -> dict | None:
        """The last complete ref log entry, reading only the file's tail."""
        try:
            with open(self.log_path(name), "rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - 65536))
                tail = f.read()
        except FileNotFoundError:
            return None
        lines = tail.split(b"\n")
        if size > len(tail):
            lines = lines[1:]  # the window may start mid-line
        for line in reversed(lines):
            if line.strip():
                try:
                    return json.loads(line)
                except ValueError:
                    continue  # a torn last line (crash mid-append) is not a move
        return None

    def _recover_log(self, name: str, cur) -> None:
        entry = self._last_log_entry(name)
        last = entry["new"] if entry else None
        now = None if cur is None else format_value(cur)
        if last != now:
            self._append_log(name, _entry(last, cur, "recovery: the previous logged move was not applied (crash)"))

    def _append_log(self, name: str, entry: dict) -> None:
        path = self.log_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            self.policy.file(fd)
        finally:
            os.close(fd)

    def list(self, prefix=""):
        base = self.refdir
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for fn in filenames:
                if fn.endswith(".lock"):
                    continue
                full = os.path.join(dirpath, fn)
                name = os.path.relpath(full, base).replace(os.sep, "/")
                if name.startswith(prefix):
                    out.append(name)
        for name in sorted(out):
            value = self.read(name)
            if value is not None:
                yield name, value

    def log(self, name):
        path = self.log_path(name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        entries = []
        for line in data.splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                # A torn last line (crash mid-append) is not a move; a torn middle line is corruption.
                entries.append({"corrupt": line.decode("utf-8", "replace")})
        if entries and "corrupt" in entries[-1] and not data.endswith(b"\n"):
            entries.pop()
        return entries
