"""The logs of one store (``LogSet``): which log holds a run, a ref, an object, and which one a commit writes.

A store of format 6 (``storage.runlogs``) has a log per run and a store log; every older store, a store on
object storage and a memory store have one log that holds everything (``OneLog``). ``Store`` and every layer
above it ask this interface, never an engine chosen by hand, so the same code serves both shapes:

* ``run_log(run)`` — the log that holds run ``run``'s records, fork objects and run-scoped refs;
* ``store_log`` — the log of the store-wide refs (the owner key, subject grants, schemas, redactions, anchors);
* ``for_ref(name)`` — the log a ref lives in (``run/<R>/…``: R's log; anything else: the store log);
* ``locate(oid)`` — a log holding an object, searched in the logs this process has open, then wider;
* ``transaction(timeout)`` — one commit, of one log.

Invariants kept here: a ref is read from, and moved in, exactly one log (``for_ref``); a commit writes one log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from . import runrefs
from .log.engine import Engine
from .log.txn import Txn


class LogSet:
    """Where a store's runs, refs and objects are: the interface ``Store`` is written against."""

    store_log: Engine
    per_run = False  # a log per run (format 6): runs share nothing, a listing reads the catalog
    prefix_ok = False  # read the readable prefix of a damaged log instead of raising (every log of the store)

    def run_log(self, run: str) -> Engine:
        """The log of run ``run`` (for a run with no log yet on a per-run store: an empty log, never created by reading)."""
        raise NotImplementedError

    def for_ref(self, name: str) -> Engine:
        run = runrefs.run_of(name)
        return self.store_log if run is None else self.run_log(run)

    def locate(self, oid: bytes) -> Engine:
        """A log that holds ``oid`` (the store log when none does: its read raises ObjectNotFound)."""
        raise NotImplementedError

    def open_logs(self) -> list[Engine]:
        """The logs this process has open (the store log first)."""
        raise NotImplementedError

    def run_ids(self) -> list[str]:
        """Every run the store has, in the order runs were started (a run whose start is not committed: absent)."""
        raise NotImplementedError

    def all_logs(self) -> Iterator[tuple[str | None, Engine]]:
        """(run or None for the store log, log) of every log of the store, the store log first."""
        raise NotImplementedError

    def transaction(self, timeout: float | None = None, optimistic: bool = False) -> AbstractContextManager[Txn]:
        """One commit. ``optimistic``: a self-contained commit its caller re-runs on ``StaleBase``
        (``Store.atomically``), so it need not hold its log against other processes (``Txn.hold_log``)."""
        raise NotImplementedError

    def start_order(self, run: str) -> tuple | int | None:
        """A key that orders runs by start (None: the run's start is not indexed)."""
        raise NotImplementedError

    def has(self, oid: bytes) -> bool:
        """Some log of the store holds ``oid`` (caught up first if the logs open say no)."""
        raise NotImplementedError

    def date(self, run: str, oid: bytes) -> int | None:
        """When ``oid`` entered the store, in run ``run``'s order: the entry of the run's log that stored it, or
        for an object of the store log the first entry of the run's log that cited a position holding it (after
        every entry if none did yet); None if neither log holds it."""
        raise NotImplementedError

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """(order, record id) of the label rows with this key (storage.labels), newest first."""
        raise NotImplementedError

    def ref_logs(self, prefix: str) -> Iterable[Engine]:
        """The logs that may hold refs whose names start with ``prefix`` (not a run's own prefix), opened one at a
        time as the caller walks them."""
        raise NotImplementedError

    def ids_with_prefix(self, text: str) -> set[bytes]:
        """Ids of the objects whose hex starts with ``text``, in the logs ``resolve_id`` searches."""
        out: set[bytes] = set()
        for e in self.open_logs():
            e.refresh()
            out.update(oid for oid in e.iter_ids() if oid.hex().startswith(text))
        return out

    def release(self, run: str | None = None) -> None:
        """Close run ``run``'s log (None: every run's log) if this process has it open (a pass over every run
        keeps one open at a time); the next ask opens it again. A store of one log keeps it."""

    def close(self) -> None:
        for e in self.open_logs():
            e.close()


class OneLog(LogSet):
    """A store whose one log holds everything (formats 3 to 5, object storage, memory)."""

    def __init__(self, engine: Engine) -> None:
        self.store_log = engine

    def run_log(self, run: str) -> Engine:
        return self.store_log

    def for_ref(self, name: str) -> Engine:
        return self.store_log

    def locate(self, oid: bytes) -> Engine:
        return self.store_log

    def open_logs(self) -> list[Engine]:
        return [self.store_log]

    def run_ids(self) -> list[str]:
        e = self.store_log
        e.refresh()
        with e._mu:
            t = e.tables
            return sorted(t.run_refs, key=lambda r: (t.starts.get(r, 0), r))

    def all_logs(self) -> Iterator[tuple[str | None, Engine]]:
        yield None, self.store_log

    def transaction(self, timeout: float | None = None, optimistic: bool = False) -> AbstractContextManager[Txn]:
        return self.store_log.transaction(timeout)  # (a log of a whole store on disk is held by its lock throughout)

    def has(self, oid: bytes) -> bool:
        e = self.store_log
        if e.has(oid):
            return True
        e.refresh()
        return e.has(oid)

    def start_order(self, run: str) -> tuple | int | None:
        return self.store_log.tables.starts.get(run)

    def date(self, run: str, oid: bytes) -> int | None:
        return self.store_log.loc_entry(oid)

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        with self.store_log._mu:
            return self.store_log.label_rows(key)

    def ref_logs(self, prefix: str) -> Iterable[Engine]:
        return [self.store_log]

    def close(self) -> None:
        self.store_log.close()


def tables_lock(engine: Engine) -> Any:
    return engine._mu


__all__ = ["LogSet", "OneLog"]
