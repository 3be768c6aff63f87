"""Objects a process committed with no ref (``Held``): kept by the process until a record names them.

On a store of format 6 every body lives in the log of a run whose record names it; an object put outside any
run's batch (``Store.put_blob`` on its own) names no run yet. It is held here — in memory, or in its spill file
when large — readable like a stored object, and goes into the log of the first commit whose record names it
(``multitxn.LogTxn``). It is not durable until then: a process that exits first loses it, as it would lose the
id it never recorded. The cost of sharing: a prompt named by the records of 10 000 runs is stored 10 000 times
(once per run's log, compressed), which is what lets one run be deleted and gc'd without touching another.
"""

from __future__ import annotations

import threading
from typing import IO

from ...errors import ObjectNotFound
from ..log.engine import Engine
from ..log.entry import LargeBlob
from ..log.tables import LogState


class Held(Engine):
    """The objects this process holds for the next commit that names them (an engine with no log)."""

    def __init__(self) -> None:
        self.tables = LogState()
        self._mu = threading.RLock()
        self._objects: dict[bytes, tuple[str, bytes | LargeBlob]] = {}

    def hold(self, objects: dict, spills: list) -> None:
        with self._mu:
            for oid, got in objects.items():
                self._objects.setdefault(oid, got)

    def get(self, oid: bytes) -> tuple[str, bytes | LargeBlob] | None:
        return self._objects.get(oid)

    def has(self, oid: bytes) -> bool:
        return oid in self._objects

    def has_body(self, oid: bytes) -> bool:
        return oid in self._objects

    def loc(self, oid: bytes) -> None:
        return None

    def loc_entry(self, oid: bytes) -> int | None:
        return None

    def refresh(self) -> object:  # type: ignore[override]
        return self.tables.pos

    def read(self, oid: bytes) -> bytes:
        got = self._objects.get(oid)
        if got is None:
            raise ObjectNotFound(oid.hex())
        c = got[1]
        return c.read_all() if isinstance(c, LargeBlob) else bytes(c)

    def copy_blob(self, oid: bytes, out: IO[bytes]) -> int | None:
        return None


__all__ = ["Held"]
