"""The gc lock: ``gc`` rewrites sealed segments, ``backup`` copies them; the two never overlap.

``gc`` holds ``gc.lock`` exclusively while it seals, rewrites and replaces segment files; a
backup holds it shared while it copies, so every sealed file it copies is one version whole and
no file it has named vanishes under it. Writers and readers never take it: a commit never waits
for gc or backup. An ``flock`` dies with its process, so a ``kill -9`` leaves no stale lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import LockTimeout, StorageOSError

GC_LOCK = "gc.lock"


@contextmanager
def gc_lock(root: str, *, shared: bool, timeout: float = 600.0, what: str = "gc") -> Iterator[None]:
    """Hold ``<root>/gc.lock`` (shared for a backup, exclusive for gc), waiting at most ``timeout`` s."""
    path = os.path.join(root, GC_LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageOSError(f"open {path}", e.strerror) from None
    try:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{path} for {what} (another gc or backup holds it)", timeout) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        yield
    finally:
        os.close(fd)
