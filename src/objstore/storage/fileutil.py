"""Durable file primitives: the fsync policy, atomic replace, directory sync.

The fsync policy is explicit and store-wide (``FsyncPolicy``):

* ``full`` (default): every new file is fsynced before its atomic rename into
  place, and the directory that received it is fsynced after, so an
  acknowledged write survives power loss.
* ``off``: no fsync at all. Atomic renames still keep every visible file whole
  after a *process* crash, but an OS crash can lose acknowledged writes. Meant
  for throwaway stores (tests, benchmarks of the CPU path).

Select with ``OBJSTORE_FSYNC=full|off`` or ``Store.open(..., fsync=...)``.
"""

from __future__ import annotations

import gc
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

FSYNC_FULL = "full"
FSYNC_OFF = "off"


class FsyncPolicy:
    def __init__(self, mode: str | None = None):
        mode = mode or os.environ.get("OBJSTORE_FSYNC") or FSYNC_FULL
        if mode not in (FSYNC_FULL, FSYNC_OFF):
            from ..errors import InvalidInput

            raise InvalidInput(f"fsync policy must be 'full' or 'off', not {mode!r}")
        self.mode = mode
        self.enabled = mode == FSYNC_FULL

    def file(self, fd: int) -> None:
        if self.enabled:
            os.fsync(fd)

    def dir(self, path: str) -> None:
        if self.enabled:
            fsync_dir(path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(tmpdir: str, prefix: str = "w") -> str:
    return os.path.join(tmpdir, f"{prefix}.{os.getpid()}.{secrets.token_hex(6)}")


@contextmanager
def atomic_file(path: str, tmpdir: str, policy: FsyncPolicy, *, replace: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file; on clean exit it appears at ``path`` whole or not at all.

    ``replace=False`` uses link(2), which fails with FileExistsError instead of
    overwriting: how immutable objects refuse to be written twice.
    """
    tmp = tmp_name(tmpdir)
    f = open(tmp, "xb")
    try:
        yield f
        f.flush()
        policy.file(f.fileno())
        f.close()
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
        policy.dir(os.path.dirname(path))
    except BaseException:
        f.close()
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_derived(path: str, data: bytes) -> None:
    """Replace a derived file (an index, the checkpoint) atomically, without fsync: one lost in a
    crash is rebuilt from the log. The temp name is per process and thread; raises OSError."""
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic GC while building large acyclic structures (chains, folds, scans).

    Without this, every few hundred allocations the collector rescans all the
    records built so far, which makes long walks quadratic.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
