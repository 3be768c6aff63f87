"""The memory engine: the tables over dicts, for tests and throwaway stores.

Commits are atomic and in order under one in-process lock; nothing is on disk. It applies the
same rules as the log on disk (``LogState.plan``, the deletion authority rule) and computes the same
chain checksums, so a store behaves the same over either engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import LockTimeout, ObjectNotFound, Refused
from .. import codec
from .engine import Engine, ScanEntry, deletion_rule, txn_bodies
from .entry import LogEntry, RemovedBody
from .format import CHAIN_TYPES, Position, logical_checksum
from .tables import LogState
from .txn import Txn


class MemoryEngine(Engine):
    """The same tables over dicts: commits are atomic and in order, nothing is on disk."""

    def __init__(self) -> None:
        self.tables = LogState()
        self._lock = self._mu = threading.RLock()  # _mu: the tables' lock, as in LogEngine
        self._entries: list[LogEntry] = []
        self._objects: dict[bytes, bytes] = {}
        self.root = None

    def refresh(self) -> Position:
        return self.tables.pos

    def read(self, oid: bytes) -> bytes:
        data = self._objects.get(oid)
        if data is None:
            raise ObjectNotFound(oid.hex())
        return data

    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Txn]:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeout("the store's writer lock", timeout)
        try:
            txn = Txn(self)
            yield txn
            moves = txn.ref_moves()
            if txn.objects or moves:
                t = self.tables
                n = t.pos.entry + 1
                plan = t.plan(n, [(oid, ot) for oid, (ot, _) in txn.objects.items()], txn.facts, moves, None)
                if isinstance(plan, str):
                    raise Refused(plan)
                bad = deletion_rule(self, n, [(oid, ot) for oid, (ot, _) in txn.objects.items()], moves, lambda: txn_bodies(txn.objects), plan)
                if bad is not None:
                    raise Refused(bad)
                objs = []
                for oid, (otype, canon) in txn.objects.items():
                    if isinstance(canon, RemovedBody):  # only an upgrade writes these, into logs on disk
                        raise Refused(f"a log in memory holds every body it names: {oid.hex()} has none")
                    data = canon.read_all() if hasattr(canon, "read_all") else canon
                    self._objects[oid] = data
                    objs.append([oid, otype, len(data), 0, 0])
                    t.locs[oid] = (n, otype, len(data))
                recs = [[i, *txn.facts[o[0]]] for i, o in enumerate(objs) if o[1] == codec.RECORD and o[0] in txn.facts]
                prevs = [[i, *txn.facts[o[0]]] for i, o in enumerate(objs) if o[1] in CHAIN_TYPES and o[0] in txn.facts]
                now = time.time() if txn.when is None else float(txn.when)
                checksum = logical_checksum(t.pos.checksum, n, now, objs, moves, None, recs, prevs, plan.root)
                t.commit(plan, n, checksum, now)
                self._entries.append(LogEntry(n, now, moves, objs, [], None, 0, 0, 0, 0, checksum, recs, prevs, plan.root))
        finally:
            self._lock.release()

    def entries(self) -> Iterator[LogEntry]:
        return iter(list(self._entries))

    def scan(self, upto: int) -> Iterator[ScanEntry]:
        for e in self._entries[:upto]:
            yield ScanEntry(e, [(o[0], o[1], self._objects[o[0]]) for o in e.objs], "")
