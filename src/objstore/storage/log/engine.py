"""The engine interface (``Engine``): what ``Store`` is written against and every engine implements.

Two engines implement it in this package (``LogEngine``: segment files; ``MemoryEngine``: tests,
throwaway stores) and one beside it (``S3Engine``: object storage); each passes
``tests/storage/test_engine_contract.py``. The optional capabilities a caller may use are declared here
with the behaviour of an engine that lacks them, so callers call them, never probe for them.

Invariants every engine keeps:

* a commit is all or nothing, and applies an entry only after ``LogState.plan`` and the deletion
  authority rule (``deletion_rule``) accepted it — the same functions every reader applies;
* a reader's snapshot is a ``Position``: every complete, checksummed entry up to it and nothing after.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import IO, Any, NamedTuple

import blake3
import zstandard

from ...errors import CorruptLog, IntegrityError, ObjectNotFound, ObjstoreError
from .. import authority
from .entry import LogEntry, RemovedBody, block_starts
from .format import COMP_GONE, REMOVED, Loc, Position
from .rules import EntryEffect
from .tables import LogState
from .txn import Txn


class ScanEntry(NamedTuple):
    """One entry as verify sees it: the entry, its objects ``(id, type, canonical bytes or the
    IntegrityError that stopped them)``, and the file it is in."""

    entry: LogEntry
    objects: list
    where: str


class ScanProblem(NamedTuple):
    code: str
    where: str
    detail: str


def deletion_rule(engine: Engine, n: int, objs: list, moves: list, bodies: Any, plan: EntryEffect) -> str | None:
    """The deletion authority rule (objstore.storage.authority) for entry ``n`` (``objs``: rows
    (id, type, …) of its objects; ``plan``: its plan, whose chain rows place its own records),
    wherever it is applied: None unless it moves a deletion ref (a name check: every other commit
    pays nothing), else what breaks the rule. ``bodies()`` gives the function from an object of the
    entry to its canonical bytes."""
    if not authority.moves_deletion(moves):
        return None
    factory = engine.entry_view
    types = {o[0]: o[1] for o in objs}
    view = authority.EntryView(engine, n, moves, types, bodies(), plan.chain) if factory is None else \
        factory(engine, n, moves, types, bodies(), plan.chain)
    return authority.entry_problem(view, n, moves)


def entry_bodies(e: LogEntry, seg: int, read_loc: Any) -> Any:
    """``bodies`` for ``deletion_rule`` over an entry being taken in: each object read (hash-checked)
    where the entry holds it, through ``read_loc(oid, loc)``; None if it cannot be read."""
    def body(oid: bytes) -> bytes | None:
        starts = block_starts(e)
        for o in e.objs:
            if o[0] == oid and o[3] != REMOVED:
                comp, raw, stored = e.blocks[o[3]][:3]
                try:
                    data = read_loc(oid, Loc(e.n, seg, starts[o[3]], comp, stored, raw, o[4], o[2], o[1]))
                except (ObjstoreError, OSError, IndexError, zstandard.ZstdError):
                    return None
                return bytes(data) if blake3.blake3(data).digest() == oid else None
        return None
    return body


def txn_bodies(objects: dict) -> Any:
    """``bodies`` for ``deletion_rule`` over a writer's transaction ({id: (type, canonical)})."""
    def body(oid: bytes) -> bytes | None:
        got = objects.get(oid)
        if got is None:
            return None
        c = got[1]
        if isinstance(c, RemovedBody):
            return None
        return bytes(c.read_all() if hasattr(c, "read_all") else c)
    return body


class Engine:
    """The interface both engines implement; ``Store`` is written against it."""

    tables: LogState
    _mu: threading.RLock  # guards the tables (and a log's tail position) within this process
    prefix_ok = False  # read the readable prefix of a damaged log instead of raising CorruptLog
    witness_problem: tuple[str, str] | None = None  # (code, detail) when the head witness disagrees with the log
    log_files = False  # the log is segment files on this machine, checked byte by byte by objstore.storage.log.fsck
    # the view an entry's deletion authority rule reads (None: this log alone). A run's log of format 6 reads
    # the store log too, at the position the entry cites (storage.runlogs.citation).
    entry_view: Callable[..., Any] | None = None
    run: str | None = None  # the run whose log this is (format 6), None for a log of a whole store

    # -- optional capabilities: the defaults are those of an engine that lacks them ---------------
    retry_seconds: float | None = None  # optimistic commits (object storage): Store.atomically re-runs a stale one this long
    one_log_per_commit = False  # a commit's ref moves must touch one run's log (object storage: MultiLogBatch otherwise)
    mark_version: Callable[[int], None] | None = None  # raise the engine's own format marker (None: the store writes its file's)
    damaged: Any = None  # a bad entry before the log's end the last refresh saw: (segment, offset, reason), or the CorruptLog kept
    torn: tuple | None = None  # (segment, offset, length, reason) of a torn tail the last refresh saw (a log on disk)

    def copy_blob(self, oid: bytes, out: IO[bytes]) -> int | None:
        """Stream a large blob's body to ``out``, hash-checked before anything is written; its length,
        or None when this engine does not stream (the caller reads the body whole)."""
        return None

    def recently_skipped(self, oid: bytes, canonical: bytes) -> None:
        """A blob a commit left out as stored already (object storage keeps it until the commit lands)."""

    def close(self) -> None:
        """Release the engine's files and connections (an engine holding none: nothing to do)."""

    def refresh(self) -> Position:  # catch up on entries others appended (readers: no lock)
        raise NotImplementedError

    def position(self) -> Position:
        return self.tables.pos

    def loc(self, oid: bytes) -> Loc | tuple | None:  # a Loc; MemoryEngine: (entry, type, length)
        return self.tables.locs.get(oid)

    def has(self, oid: bytes) -> bool:
        return self.loc(oid) is not None

    def has_body(self, oid: bytes) -> bool:
        """Stored with its body: known, and not an object whose body gc removed."""
        loc = self.loc(oid)
        return loc is not None and not (isinstance(loc, Loc) and loc.comp == COMP_GONE)

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        """The chain index: the id of (run, branch)'s record at ``lsn`` (committed records only)."""
        return self.tables.chain.get((run, branch, lsn))

    def iter_ids(self) -> Iterator[bytes]:
        return iter(list(self.tables.locs))

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """(entry number, record id) of every label row with this key (storage.labels), newest
        entry first. Rows are claims: the caller checks each record carries the label."""
        return sorted(set(self.tables.label_rows(key)), reverse=True)

    def iter_chain(self, run: str, branch: int, lsn: int = 0) -> Iterator[tuple[int, bytes]]:
        """(lsn, id) of a branch's committed records from ``lsn`` on, in LSN order (chain index)."""
        chain = self.tables.chain
        while True:
            oid = chain.get((run, branch, lsn))
            if oid is None:
                return
            yield lsn, oid
            lsn += 1

    def entry_time(self) -> float | None:
        """Time of the newest entry (None for an empty log)."""
        return self.tables.last_time

    def read(self, oid: bytes) -> bytes:  # canonical bytes, hash-checked
        raise NotImplementedError

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:  # (raw block, loc) of the block holding oid, or None
        return None

    def loc_entry(self, oid: bytes) -> int | None:
        loc = self.loc(oid)
        if loc is None:
            return None
        return loc.entry if isinstance(loc, Loc) else loc[0]

    def transaction(self, timeout: float | None = None) -> AbstractContextManager[Txn]:
        raise NotImplementedError

    def entries(self) -> Iterator[LogEntry]:
        raise NotImplementedError

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:  # what verify reads: entries 1..upto with their objects
        raise NotImplementedError

    # -- the contract every engine keeps (tests/storage/test_engine_contract.py) ----------------------
    def commit(self, objects: Iterable[tuple[bytes, str, bytes]] = (), ref_moves: Iterable[tuple] = (), expectations: Iterable[tuple] = (),
               when: float | None = None) -> Position:
        """One commit: ``objects`` [(id, type, canonical bytes)], ``ref_moves`` [(name, old, new,
        reason)] as compare-and-swaps, ``expectations`` [(name, value)]; all or nothing. Returns
        the log position after it (unchanged if there was nothing to write)."""
        with self.transaction() as txn:
            txn.when = when
            for name, value in expectations:
                txn.expect(name, value)
            for oid, otype, canonical in objects:
                if blake3.blake3(canonical).digest() != oid:
                    raise IntegrityError(oid.hex(), "commit", "hash mismatch (content does not match id)")
                txn.put(oid, otype, canonical)
            for name, old, new, reason in ref_moves:
                txn.set_ref(name, old, new, reason)
        return self.position()

    def snapshot(self) -> Position:
        """The newest complete position (a reader's snapshot; taking it locks nothing)."""
        return self.refresh()

    def read_at(self, oid: bytes, snapshot: Position) -> bytes:
        """An object's canonical bytes as of ``snapshot``: not found if committed after it."""
        entry = self.loc_entry(oid)
        if entry is None or entry > snapshot.entry:
            raise ObjectNotFound(oid.hex())
        return self.read(oid)

    def refs_at(self, prefix: str = "", snapshot: Position | None = None) -> dict:
        """The ref table (names starting with ``prefix``) as of ``snapshot`` (default: now). An
        older snapshot is rebuilt from the entries' ref moves up to it."""
        if snapshot is None or snapshot == self.position():
            return {k: v for k, v in list(self.tables.refs.items()) if k.startswith(prefix)}
        refs: dict = {}
        for e in self.entries():
            if e.n > snapshot.entry:
                break
            for name, _old, new, _reason in e.moves:
                if new is None:
                    refs.pop(name, None)
                else:
                    refs[name] = new
            if e.n == snapshot.entry and e.checksum != snapshot.checksum:
                raise CorruptLog("log", f"entry {e.n} is not the one the snapshot names")
        return {k: v for k, v in refs.items() if k.startswith(prefix)}

    def anchor(self) -> Position:
        """The head of the log's hash chain (what 'objstore anchor' prints)."""
        return self.refresh()
