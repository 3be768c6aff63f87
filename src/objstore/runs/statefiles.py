"""The files of the state cache (``runs.state``) and the SQLite connections open to them.

Where the rows are: a store with one log (formats 3 to 5) keeps one ``state.db`` at its root, holding every
run's rows; a store with a log per run (format 6) keeps one beside each run's log
(``runs/<xx>/<run>/state.db``, the directory holding that log's ``log/`` and ``lock``), holding that run's
rows only, so readers of different runs share no file, no lock and no WAL; a store in memory keeps its
cache in one ``:memory:`` database.

Invariants kept here:

* a run's rows are read from and written to one file, ``path_of(run)`` (a copy's inherited part is read
  from its source run's file: the source's rows are the source's);
* only a refresh creates a file (``conn(run, create=True)``); every read of a run with no file reads
  nothing (``None``), so verifying or listing runs never leaves files behind, and a read never creates a
  run's directory;
* at most ``max_open`` connections stay open per cache (least recently used closed first; ``MAX_OPEN``, or
  fewer under a low open-files limit: ``storage.fdbudget``), so a process
  reading 100 000 runs does not keep 100 000 files open; a connection inside a transaction is never
  closed under its user.

A file that SQLite cannot read is set aside (``<file>.corrupt-<time>``) and made again: it is only a cache.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import StateCacheError
from ..storage import fdbudget
from ..storage.runlogs.logs import run_dir

if TYPE_CHECKING:
    from ..storage.store import Store

SCHEMA_VERSION = "6"  # 6: recs rows hold the records' canonical bytes; no attempt views (issue 13)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS branch(
  run TEXT, branch INTEGER, head BLOB, tip_lsn INTEGER, fork BLOB,
  parent_branch INTEGER, parent_lsn INTEGER, state BLOB, summary BLOB, dels BLOB,
  PRIMARY KEY(run, branch));
CREATE TABLE IF NOT EXISTS recs(
  run TEXT, branch INTEGER, lsn INTEGER, n INTEGER, data BLOB,
  PRIMARY KEY(run, branch, lsn)) WITHOUT ROWID;
"""
TABLES = ("branch", "recs")
_OLD_TABLES = ("attempt", "rec", "intent", "commit_")  # earlier schemas', dropped on sight

FILE = "state.db"
SUFFIXES = ("", "-wal", "-shm")  # the database, its WAL and its shared-memory index
MEMORY = ":memory:"
MAX_OPEN = 64  # connections one cache keeps open at most (per-run files); fewer under a low open-files limit
FDS_PER_FILE = 3  # the database, its WAL, its shared-memory index


class StateFiles:
    """The state cache's files of one store: one (``path``), or one per run (``runs_root`` set: format 6)."""

    def __init__(self, path: str, runs_root: str | None = None, run_ids: Callable[[], list[str]] | None = None) -> None:
        self.path = path  # the one file (one log, or memory); with a file per run: the store's root
        self.runs_root = runs_root
        self._run_ids = run_ids
        self._open: OrderedDict[str, sqlite3.Connection] = OrderedDict()  # path -> connection, oldest use first
        self._mu = threading.Lock()
        self.max_open = fdbudget.bound(FDS_PER_FILE, 4, MAX_OPEN)  # 1 024 descriptors: 42 files at once

    @property
    def per_run(self) -> bool:
        return self.runs_root is not None

    def path_of(self, run: str) -> str:
        """The file holding run ``run``'s rows."""
        if self.runs_root is None:
            return self.path
        return os.path.join(run_dir(self.runs_root, run), FILE)

    def exists(self, run: str | None = None) -> bool:
        """Whether the file of ``run`` (None: any file of the store) is there, without creating one."""
        if self.path == MEMORY:
            return True
        if run is not None or self.runs_root is None:
            p = self.path if run is None else self.path_of(run)
            return p in self._open or os.path.exists(p)
        return bool(self._open) or any(True for _ in self.runs_with_files())

    def runs_with_files(self) -> Iterator[str]:
        """Every run (in the store's run order) whose file exists: the files a walk over all runs visits,
        one at a time (a file per run only)."""
        for run in self._run_ids() if self._run_ids is not None else []:
            p = self.path_of(run)
            if p in self._open or os.path.exists(p):
                yield run

    def conn(self, run: str | None, create: bool = True) -> sqlite3.Connection | None:
        """The connection to the file of ``run`` (None: the one file), opened now if need be; None when the
        file is not there and ``create`` is false (a read: there is nothing cached)."""
        p = self.path if run is None else self.path_of(run)
        with self._mu:
            db = self._open.get(p)
            if db is not None:
                self._open.move_to_end(p)
                return db
        if not create and p != MEMORY and not os.path.exists(p):
            return None
        db = _open(p)
        with self._mu:
            other = self._open.get(p)
            if other is not None:  # another thread opened it meanwhile: one connection per file
                db.close()
                self._open.move_to_end(p)
                return other
            self._open[p] = db
            self._evict()
        return db

    def _evict(self) -> None:
        """Close the least recently used connections past ``max_open`` (never one in a transaction)."""
        if len(self._open) <= self.max_open:
            return
        for p in list(self._open)[:-1]:
            if len(self._open) <= self.max_open:
                break
            db = self._open[p]
            if db.in_transaction:
                continue
            del self._open[p]
            try:
                db.close()
            except sqlite3.Error:
                pass

    def forget(self, run: str | None) -> None:
        """Close the connection to the file of ``run`` (None: the one file); the next use opens it again."""
        p = self.path if run is None else self.path_of(run)
        with self._mu:
            db = self._open.pop(p, None)
        if db is not None:
            try:
                db.close()
            except sqlite3.Error:
                pass

    def open_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        with self._mu:
            dbs = list(self._open.values())
            self._open.clear()
        for db in dbs:
            try:
                db.close()
            except sqlite3.Error:
                pass

    def files(self) -> list[str]:
        """Every state file of the store on disk (database, WAL, shared memory) that exists."""
        if self.path == MEMORY:
            return []
        bases = [self.path_of(r) for r in self.runs_with_files()] if self.per_run else [self.path]
        return [b + s for b in bases for s in SUFFIXES if os.path.exists(b + s)]


def _open(path: str) -> sqlite3.Connection:
    try:
        return _connect(path)
    except sqlite3.DatabaseError:
        if path == MEMORY:
            raise
        # An unreadable cache is only a cache: set it aside and rebuild from the objects.
        aside = f"{path}.corrupt-{int(time.time())}"
        for suffix in SUFFIXES:
            if os.path.exists(path + suffix):
                os.replace(path + suffix, aside + suffix)
        return _connect(path)


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    if path != MEMORY:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the tail only makes it stale
        db.execute("PRAGMA journal_size_limit=4194304")  # a big refresh leaves no big WAL behind
    db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is not None and row[0] != SCHEMA_VERSION:
        # A cache of another layout: throw it away, it is rebuilt from the objects.
        for t in TABLES + _OLD_TABLES:
            db.execute(f"DROP TABLE IF EXISTS {t}")
    if row is None or row[0] != SCHEMA_VERSION:
        db.executescript(SCHEMA)
        db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
    return db


def write_tx(db: sqlite3.Connection) -> AbstractContextManager[None]:
    class _T:
        def __enter__(s) -> None:
            db.execute("BEGIN IMMEDIATE")

        def __exit__(s, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
            db.execute("COMMIT" if et is None else "ROLLBACK")

    return _T()


def drop_deleted_in(db: sqlite3.Connection, store: Store) -> list[str]:
    """``StateCache.drop_deleted`` in one file: the rows of its deleted runs, and of its runs with rows
    folded before their newest partial deletion, leave it. Returns the deleted runs it held."""
    from ..storage import runrefs

    rows = db.execute("SELECT run, dels FROM branch").fetchall()
    gone, stale = [], []
    for r in sorted({r for r, _d in rows if isinstance(r, str)}):
        refs = store.run_refs(r)
        if isinstance(refs.get(runrefs.deleted_ref(r)), bytes):
            gone.append(r)
        else:  # rows folded before a partial deletion still hold what it covers: they go too
            dels = refs.get(runrefs.deletions_ref(r))
            if any(rr == r and _bytes_or_none(d) != (dels if isinstance(dels, bytes) else None) for rr, d in rows):
                stale.append(r)
    for r in gone + stale:
        with write_tx(db):
            for t in TABLES:
                db.execute(f"DELETE FROM {t} WHERE run=?", (r,))
    return gone


def vacuum_file(files: StateFiles, run: str | None, store: Store) -> list[str]:
    """Drop the deleted rows of one file (``run``'s; None: the one file), vacuum it and truncate its WAL."""
    try:
        db = files.conn(run, create=False)
        if db is None:
            return []
        db.execute("PRAGMA secure_delete=ON")  # freed pages are zeroed, not left holding the rows
        gone = drop_deleted_in(db, store)
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return gone
    except (StateCacheError, sqlite3.Error, OSError):
        return []
    finally:
        files.forget(run)


def _bytes_or_none(v: Any) -> bytes | None:
    return bytes(v) if isinstance(v, (bytes, memoryview)) else None
