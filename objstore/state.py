"""The materialized state cache: a SQLite copy of what folding the log gives.

It is only a cache. Every branch row records the branch head it reflects, so
staleness is a comparison with the branch ref: a row behind its ref is caught
up by walking the chain back from the ref to the cached head and folding the
new records; a row whose head is not on the chain is thrown away and rebuilt.
Nothing is ever written here except from records read out of the object store,
so dropping the file loses nothing (``rebuild`` makes it again), and
``assert_refold_identical`` checks it against a cold re-fold.

Tables (per run, per branch): ``branch`` (head, tip LSN, fork point, folded
state), ``rec`` (LSN → record id: what makes fork O(1)), ``attempt`` (the
canonical JSON of each AttemptView, for the episode query), ``intent`` and
``commit_`` (for the compensation check at fork time).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from . import codec
from . import records as R
from .errors import StateCacheError
from .fileutil import no_gc
from .fold import apply, empty_state, fold

if TYPE_CHECKING:
    from .chain import ChainReader, View
    from .store import Store

SCHEMA_VERSION = "3"

# The part of the folded state an episode needs: small, whatever the history length.
SUMMARY_KEYS = ("subject", "workflow_version", "meta", "status", "attempts", "failed_attempts")


def summary_of(state: dict) -> dict:
    return {k: state[k] for k in SUMMARY_KEYS}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS branch(
  run TEXT, branch INTEGER, head BLOB, tip_lsn INTEGER, fork BLOB,
  parent_branch INTEGER, parent_lsn INTEGER, state BLOB, summary BLOB,
  PRIMARY KEY(run, branch));
CREATE TABLE IF NOT EXISTS attempt(
  run TEXT, branch INTEGER, step INTEGER, attempt INTEGER, lsn INTEGER, view BLOB,
  PRIMARY KEY(run, branch, step, attempt, lsn)) WITHOUT ROWID;
"""
_TABLES = ("branch", "attempt")
_OLD_TABLES = ("rec", "intent", "commit_")  # schema 2's, dropped on sight

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()

# What a damaged or foreign cache row raises when read: a query then answers from the log.
_ROW_DAMAGE = (sqlite3.Error, OSError, msgspec.DecodeError, TypeError, ValueError, KeyError, IndexError)


def _cache_op(operation: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn the SQLite and OS failures of a cache operation into ``StateCacheError`` (exit 11):
    no ``sqlite3.Error`` leaves the library."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kw: Any) -> Any:
            try:
                return fn(*args, **kw)
            except (sqlite3.Error, OSError) as e:
                raise StateCacheError(operation, e) from e

        op.__name__, op.__doc__, op.__qualname__ = fn.__name__, fn.__doc__, fn.__qualname__
        return op

    return wrap


def attempt_view(rec: R.Record, run_workflow_version: str | None) -> dict:
    """The seed's AttemptView, exactly its fields; blob refs as hex, never bodies."""
    b = rec.body
    return {
        "step": b["step"],
        "attempt": b["attempt"],
        "state": b["state"],
        "workflow_version": b["workflow_version"] or run_workflow_version,
        "context": b["context"],
        "prompt": b["prompt"].hex() if b["prompt"] else None,
        "output": b["output"].hex() if b["output"] else None,
        "tools": b["tools"],
        "usage": b["usage"],
    }


def refold_branch(chains: ChainReader, view: View, branch: int) -> tuple[dict, dict | None, list[dict]]:
    """Cold re-fold from raw objects: (folded state, fork object, attempt views in query order).

    The oracle the cache is checked against; it never looks at the cache.
    """
    with no_gc():
        return _refold_branch(chains, view, branch)


def _refold_branch(chains: ChainReader, view: View, branch: int) -> tuple[dict, dict | None, list[dict]]:
    fk = chains.fork_object(view, branch)
    state = empty_state()
    atts = []
    for r in chains.iter_lineage(view, branch):
        apply(state, r)  # workflow_version as folded at each record, as the cache sees it
        if r.branch == branch and r.kind == R.ATTEMPT:
            atts.append((r.body["step"], r.body["attempt"], r.lsn, attempt_view(r, state["workflow_version"])))
    chains.store.forget_decoded()
    atts.sort(key=lambda t: t[:3])
    return state, fk, [a[3] for a in atts]


class StateCache:
    def __init__(self, path: str):
        self.path = path
        self._db: sqlite3.Connection | None = None

    @_cache_op("rebuild the state cache")
    def rebuild(self, chains: ChainReader, run: str | None = None) -> list[str]:
        """Drop the cache (of one run, or all) and fold it again from the raw objects; returns the runs."""
        runs = [run] if run else chains.runs()
        for r in runs:
            chains.view(r)  # an unknown run fails before anything is dropped
        self.drop(run)
        for r in runs:
            self.refresh(chains, chains.view(r))
        return runs

    def exists(self) -> bool:
        """Whether there is a cache at all (without creating one)."""
        return self._db is not None or self.path == ":memory:" or os.path.exists(self.path)

    @property
    def db(self) -> sqlite3.Connection:
        """Opened on first use, so commands that never query state never create the file."""
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError:
            if self.path == ":memory:":
                raise
            # An unreadable cache is only a cache: set it aside and rebuild from the objects.
            aside = f"{self.path}.corrupt-{int(time.time())}"
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix, aside + suffix)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        if self.path != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the tail only makes it stale
        db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
        row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is not None and row[0] != SCHEMA_VERSION:
            # A cache of another layout: throw it away, it is rebuilt from the objects.
            for t in _TABLES + _OLD_TABLES:
                db.execute(f"DROP TABLE IF EXISTS {t}")
        if row is None or row[0] != SCHEMA_VERSION:
            db.executescript(_SCHEMA)
            db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
        return db

    @classmethod
    def for_store(cls, store: Store) -> StateCache:
        if store.root is None:
            return cls(":memory:")
        return cls(os.path.join(store.root, "state.db"))

    # -- maintenance ---------------------------------------------------------
    @_cache_op("drop cached state")
    def drop(self, run: str | None = None) -> None:
        """Forget cached state (all runs, or one): the next query rebuilds or re-folds."""
        with self._tx():
            for t in _TABLES:
                if run is None:
                    self.db.execute(f"DELETE FROM {t}")
                else:
                    self.db.execute(f"DELETE FROM {t} WHERE run=?", (run,))

    def _tx(self) -> AbstractContextManager[None]:
        db = self.db

        class _T:
            def __enter__(s) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(s, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
                db.execute("COMMIT" if et is None else "ROLLBACK")

        return _T()

    @_cache_op("read cached state")
    def cached(self, run: str) -> dict:
        """branch -> (head it reflects, tip LSN, state dict) as stored; the state is None when the
        row is damaged (not the types this code writes, or not a decodable folded state)."""
        rows = self.db.execute("SELECT branch, head, tip_lsn, state FROM branch WHERE run=?", (run,)).fetchall()
        out = {}
        for b, h, t, s in rows:
            try:
                state = _dec.decode(s) if isinstance(s, bytes) else None
            except msgspec.DecodeError:
                state = None
            if not isinstance(state, dict):
                state = None
            out[b] = (bytes(h) if isinstance(h, bytes) else h, t, state)
        return out

    # -- refresh ---------------------------------------------------------------
    @_cache_op("refresh the state cache")
    def refresh(self, chains: ChainReader, view: View, branches: list[int] | None = None) -> None:
        for b in sorted(view.heads) if branches is None else branches:
            self._refresh_branch(chains, view, b)

    def read_branch(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, bytes | None, list[bytes]] | None:
        """(summary, fork id, attempt fragments) of ``branch`` exactly at the view's head, read in
        one SQLite snapshot; None if the cache cannot answer for that head (caller re-folds):
        behind a pinned view, busy, read-only or unreadable — a cache never makes a query fail."""
        try:
            return self._read_branch(chains, view, branch)
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None

    def _read_branch(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, bytes | None, list[bytes]] | None:
        if not self.try_refresh(chains, view, branch):
            return None
        db = self.db
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT head, summary, fork FROM branch WHERE run=? AND branch=?", (view.run, branch)).fetchone()
            if row is None or bytes(row[0]) != view.head(branch):
                return None  # another process moved the cache on between refresh and read
            frags = self.attempt_fragments(view.run, branch)
            if not all(isinstance(f, bytes) for f in frags):
                raise TypeError("an attempt row's view is not canonical JSON bytes")
        finally:
            db.execute("COMMIT")
        return _dec.decode(row[1]), (bytes(row[2]) if row[2] is not None else None), frags

    def summary(self, chains: ChainReader, view: View, branch: int) -> dict:
        """``summary_of`` the branch's folded state at the view's head, without loading the whole state."""
        return self._at_head(chains, view, branch, "summary", lambda st: summary_of(st))

    def state(self, chains: ChainReader, view: View, branch: int) -> dict:
        """The folded state of ``branch`` at the view's head."""
        return self._at_head(chains, view, branch, "state", lambda st: st)

    def _at_head(self, chains: ChainReader, view: View, branch: int, column: str, from_refold: Callable[[dict], dict]) -> dict:
        try:
            if self.try_refresh(chains, view, branch):
                row = self.db.execute(f"SELECT head, {column} FROM branch WHERE run=? AND branch=?", (view.run, branch)).fetchone()
                if row is not None and bytes(row[0]) == view.head(branch):
                    return _dec.decode(row[1])
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
        # the cache is past this (pinned) view, or moved on meanwhile: answer from the log
        return from_refold(refold_branch(chains, view, branch)[0])

    @_cache_op("read cached attempts")
    def attempt_rows(self, run: str, branch: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(step, attempt, lsn, canonical JSON of the view) of a branch's cached attempts, streamed."""
        return self.db.execute("SELECT step, attempt, lsn, view FROM attempt WHERE run=? AND branch=?", (run, branch))

    @_cache_op("read cached attempts")
    def attempt_fragments(self, run: str, branch: int) -> list[bytes]:
        rows = self.db.execute(
            "SELECT view FROM attempt WHERE run=? AND branch=? ORDER BY step, attempt, lsn", (run, branch)
        ).fetchall()
        return [r[0] for r in rows]

    def _ahead_of(self, chains: ChainReader, view: View, branch: int, tip: int) -> bool:
        """True if the cached row (at ``tip``) is newer than the view's head (an older pinned
        view): the log's chain index holds the view's head at an LSN below the row's."""
        head = view.head(branch)
        head_lsn = chains.next_of(head)[0] - 1
        if tip <= head_lsn:
            return False
        return head_lsn < 0 or chains.store.indexed_record(view.run, branch, head_lsn) == head

    def _heal(self, run: str, branch: int) -> None:
        """Forget a branch's rows after they failed to read, so the next refresh folds them again;
        best effort (a busy or read-only cache stays as it is, and queries answer from the log)."""
        self._db = None
        try:
            with self._tx():
                self.db.execute("DELETE FROM branch WHERE run=? AND branch=?", (run, branch))
                self.db.execute("DELETE FROM attempt WHERE run=? AND branch=?", (run, branch))
        except (sqlite3.Error, OSError):
            self._db = None

    @staticmethod
    def _valid_row(row: tuple | None) -> bool:
        """Whether a ``branch`` row has the types this code wrote (a cache edited by hand, or by
        another version, may not): a row that does not is thrown away and folded again."""
        if row is None:
            return False
        head, tip = row[0], row[1]
        return isinstance(head, bytes) and len(head) == 32 and type(tip) is int and all(
            v is None or isinstance(v, bytes) for v in row[2:4]) and all(v is None or type(v) is int for v in row[4:6])

    def try_refresh(self, chains: ChainReader, view: View, branch: int) -> bool:
        """Bring ``branch`` up to the view's head; False if the cache is already past it
        (an older pinned view), in which case the caller answers by re-folding."""
        row = self.db.execute("SELECT head, tip_lsn, NULL, NULL, NULL, NULL FROM branch WHERE run=? AND branch=?",
                              (view.run, branch)).fetchone()
        if self._valid_row(row) and row[0] != view.head(branch) and self._ahead_of(chains, view, branch, row[1]):
            return False
        self._refresh_branch(chains, view, branch)
        return True

    def _refresh_branch(self, chains: ChainReader, view: View, branch: int) -> None:
        with no_gc():
            try:
                self._refresh(chains, view, branch)
            finally:
                chains.store.forget_decoded()

    def _refresh(self, chains: ChainReader, view: View, branch: int) -> None:
        """Catch one branch's row up to the view's head in one transaction, streaming the records
        it lacks from the log's chain index (memory does not grow with history)."""
        run = view.run
        head = view.head(branch)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT head, tip_lsn, state, fork, parent_branch, parent_lsn FROM branch WHERE run=? AND branch=?",
                             (run, branch)).fetchone()
            if row is not None and not self._valid_row(row):
                db.execute("DELETE FROM branch WHERE run=? AND branch=?", (run, branch))
                db.execute("DELETE FROM attempt WHERE run=? AND branch=?", (run, branch))
                row = None
            if row is not None and bytes(row[0]) == head:
                db.execute("COMMIT")
                return
            if row is not None and self._ahead_of(chains, view, branch, row[1]):
                db.execute("COMMIT")
                return  # an older view must not wind the cache back; readers of it re-fold
            if row is not None:
                cached, tip = bytes(row[0]), row[1]
                on_chain = (tip < 0 and row[3] is not None and bytes(row[3]) == cached) or (
                    tip >= 0 and chains.store.indexed_record(run, branch, tip) == cached)
                if not on_chain:  # the cached head is not on the chain: the cache is wrong, not merely behind
                    db.execute("DELETE FROM branch WHERE run=? AND branch=?", (run, branch))
                    db.execute("DELETE FROM attempt WHERE run=? AND branch=?", (run, branch))
                    row = None
            if row is None:
                fk = chains.fork_object(view, branch)
                if fk is not None:
                    state = fold(chains.iter_lineage(view, fk["parent_branch"], upto=fk["parent_lsn"]))
                    fork_id, pb, pl = fk["id"], fk["parent_branch"], fk["parent_lsn"]
                else:
                    state, fork_id, pb, pl = empty_state(), None, None, None
                start = 0
            else:
                try:
                    state = _dec.decode(row[2])
                    if not isinstance(state, dict) or set(state) != set(empty_state()):
                        raise ValueError("not a folded state")
                except (msgspec.DecodeError, ValueError):  # a damaged row: fold the branch again
                    db.execute("ROLLBACK")
                    db.execute("BEGIN IMMEDIATE")
                    db.execute("DELETE FROM branch WHERE run=? AND branch=?", (run, branch))
                    db.execute("DELETE FROM attempt WHERE run=? AND branch=?", (run, branch))
                    db.execute("COMMIT")
                    return self._refresh(chains, view, branch)
                fork_id, pb, pl = row[3], row[4], row[5]
                start = row[1] + 1
            tip = start - 1
            att_rows = []
            jenc = codec.canonical_json_plain
            for r in chains.iter_own(view, branch, start=start):
                apply(state, r)
                tip = r.lsn
                if r.kind == R.ATTEMPT:
                    b = r.body
                    att_rows.append((run, branch, b["step"], b["attempt"], r.lsn, jenc(attempt_view(r, state["workflow_version"]))))
                    if len(att_rows) >= 10000:
                        db.executemany("INSERT OR REPLACE INTO attempt VALUES(?,?,?,?,?,?)", att_rows)
                        att_rows = []
            db.executemany("INSERT OR REPLACE INTO attempt VALUES(?,?,?,?,?,?)", att_rows)
            db.execute("INSERT OR REPLACE INTO branch VALUES(?,?,?,?,?,?,?,?,?)",
                       (run, branch, head, tip, fork_id, pb, pl, _enc.encode(state), _enc.encode(summary_of(state))))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
