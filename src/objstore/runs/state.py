"""The materialized state cache: a SQLite copy of what folding the log gives, and serves only
what it confirms against the log.

It is only a cache. Every branch row records the branch head it reflects, so
staleness is a comparison with the branch ref: a row behind its ref is caught
up by streaming the records it lacks from the log's chain index; a row whose
head is not on the chain is thrown away and rebuilt. Nothing is ever written
here except from records read out of the object store, so dropping the file
loses nothing (``rebuild`` makes it again).

Nothing decides from it (invariant 15). Before a branch is served (``open_branch``),
in one SQLite snapshot, the rows are confirmed against the log at the reader's view:
the row's head is the branch head and its tip LSN the head's LSN; its record rows
cover exactly LSNs 0..tip, each naming (a 128-bit prefix of) its record id, which
the log's chain index holds at that LSN; its attempt rows hold exactly the attempts
the record rows mark, each once, in query order; its fork id is the branch's fork
object. Fork points and compensation flags are never read from here: queries read
them from the fork object. A branch that fails a check is a cache miss: the query
re-folds that branch from the log, the rows are left as they are for ``verify`` to
name (``state-diverged``) and ``rebuild`` to remake. What the check cannot see is a
row's derived content rewritten in place (a view's JSON, the summary): that is only
confirmable by reading the records, which is what ``verify`` does. So the run's own fields —
run, subject, workflow version, meta — are never served from the rows: they are read from the
log's ``run_started`` records (``ChainReader.run_fields``, one record a run), whatever the rows say.

Recorded deletion (issue 17): a record a partial deletion covers folds header-only here as in
every re-fold, and each branch row names the head of its run's ``run/<R>/deletions`` chain it
reflects (``dels``): a row reflecting another head is behind (refolded), whoever deleted, since
a deletion moves no branch head. A deleted run is never served (every read stops at its
``deleted`` ref); ``drop_deleted`` / ``drop_deleted_and_vacuum`` (gc) remove its rows.

Tables (per run, per branch): ``branch`` (head, tip LSN, fork point, folded
state, summary, the deletions head it reflects); ``recs`` (LSN order, ``RCHUNK`` records a row: the record id
prefixes and one kind byte each — 1 for an attempt); ``attempt`` (query order,
one row a chunk of up to ``VCHUNK`` attempts of one step: its key columns name the
first attempt, ``view`` holds the zstd-compressed keys and canonical JSON views).
Chunks keep the file a fraction of the log; reads stream chunk by chunk.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec
import zstandard

from ..errors import StateCacheError
from ..storage import codec
from ..storage.fileutil import no_gc
from . import records as R
from .fold import apply, empty_state, fold

if TYPE_CHECKING:
    from ..storage.store import Store
    from .chain import ChainReader, View

SCHEMA_VERSION = "5"  # 5: branch.dels, the run's deletions head a row reflects (issue 17)

RCHUNK = 1024  # records per ``recs`` row
VCHUNK = 512  # attempts per ``attempt`` row
_RID = 16  # bytes of a record id a ``recs`` row keeps: a 128-bit prefix names it as well as the whole
_PENDING = 20000  # attempt views a refresh holds before writing them (its memory bound)
_SPILL = 50000  # attempt views a streamed re-fold sorts in memory; past it, on disk

# The part of the folded state an episode needs: small, whatever the history length.
SUMMARY_KEYS = ("subject", "workflow_version", "meta", "status", "attempts", "failed_attempts")


def summary_of(state: dict) -> dict:
    return {k: state[k] for k in SUMMARY_KEYS}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS branch(
  run TEXT, branch INTEGER, head BLOB, tip_lsn INTEGER, fork BLOB,
  parent_branch INTEGER, parent_lsn INTEGER, state BLOB, summary BLOB, dels BLOB,
  PRIMARY KEY(run, branch));
CREATE TABLE IF NOT EXISTS attempt(
  run TEXT, branch INTEGER, step INTEGER, attempt INTEGER, lsn INTEGER, n INTEGER, view BLOB,
  PRIMARY KEY(run, branch, step, attempt, lsn)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recs(
  run TEXT, branch INTEGER, chunk INTEGER, rids BLOB, kinds BLOB,
  PRIMARY KEY(run, branch, chunk)) WITHOUT ROWID;
"""
_TABLES = ("branch", "attempt", "recs")
_OLD_TABLES = ("rec", "intent", "commit_")  # schema 2's, dropped on sight

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()

# What a damaged or foreign cache row raises when read: a query then answers from the log.
_ROW_DAMAGE = (sqlite3.Error, OSError, msgspec.DecodeError, TypeError, ValueError, KeyError, IndexError, zstandard.ZstdError)
_zc = zstandard.ZstdCompressor(level=3)
_zd = zstandard.ZstdDecompressor()


class Diverged(Exception):
    """The cache's rows of a branch disagree with the log (the message says how): a cache miss."""


def _pack_chunk(entries: list[tuple[int, int, bytes]]) -> bytes:
    """An ``attempt`` row's ``view``: the (attempt, lsn) keys and views of one step's chunk."""
    keys = [k for a, lsn, _ in entries for k in (a, lsn)]
    return _zc.compress(_enc.encode([keys, [v for _, _, v in entries]]))


def _unpack_chunk(blob: Any, n: Any) -> tuple[list[int], list[bytes]]:
    """(flat keys, views) of a chunk; raises (a ``_ROW_DAMAGE`` type) when it is not one this code wrote."""
    if not isinstance(blob, bytes) or type(n) is not int:
        raise TypeError("an attempt row is not a chunk of views")
    keys, views = _dec.decode(_zd.decompress(blob, max_output_size=1 << 26))
    if not (isinstance(keys, list) and isinstance(views, list) and len(keys) == 2 * n == 2 * len(views) and n > 0
            and all(type(k) is int for k in keys) and all(isinstance(v, bytes) for v in views)):
        raise ValueError("an attempt chunk does not hold what its row says")
    return keys, views


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
        if r.branch == branch and r.kind == R.ATTEMPT and R.DELETED_FIELD not in r.body and r.run == view.run:
            atts.append((r.body["step"], r.body["attempt"], r.lsn, attempt_view(r, state["workflow_version"])))
    chains.store.forget_decoded()
    atts.sort(key=lambda t: t[:3])
    return state, fk, [a[3] for a in atts]


def refold_stream(chains: ChainReader, view: View, branch: int) -> tuple[dict, dict | None, Iterator[bytes]]:
    """``refold_branch`` with the attempt views as canonical JSON, streamed in query order in
    bounded memory: past ``_SPILL`` views they are sorted in a temporary SQLite file (unlinked
    at once; not the cache, which a re-fold never looks at)."""
    held: list[tuple[int, int, int, bytes]] = []
    spill = None
    jenc = codec.canonical_json_plain
    with no_gc():
        try:
            fk = chains.fork_object(view, branch)
            state = empty_state()
            for r in chains.iter_lineage(view, branch):
                apply(state, r)  # workflow_version as folded at each record, as the cache sees it
                if r.branch == branch and r.kind == R.ATTEMPT and R.DELETED_FIELD not in r.body and r.run == view.run:
                    b = r.body
                    held.append((b["step"], b["attempt"], r.lsn, jenc(attempt_view(r, state["workflow_version"]))))
                    if len(held) >= _SPILL:
                        spill = spill or _Spill()
                        spill.add(held)
                        held = []
        finally:
            chains.store.forget_decoded()
    if spill is None:
        held.sort(key=lambda t: t[:3])
        return state, fk, (t[3] for t in held)
    spill.add(held)
    return state, fk, spill.sorted()


class _Spill:
    """A temporary SQLite table that sorts a re-fold's views on disk (its page cache bounds memory)."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="objstore-refold-", suffix=".db")
        os.close(fd)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=OFF")
            self.db.execute("CREATE TABLE v(step INTEGER, attempt INTEGER, lsn INTEGER, view BLOB, "
                            "PRIMARY KEY(step, attempt, lsn)) WITHOUT ROWID")
        finally:
            os.unlink(path)  # the open file lives on; nothing is left behind, even by a crash
        self.db.execute("BEGIN")

    def add(self, rows: list[tuple[int, int, int, bytes]]) -> None:
        self.db.executemany("INSERT INTO v VALUES(?,?,?,?)", rows)

    def sorted(self) -> Iterator[bytes]:
        try:
            for (v,) in self.db.execute("SELECT view FROM v ORDER BY step, attempt, lsn"):
                yield v
        finally:
            self.db.close()


class StateCache:
    def __init__(self, path: str):
        self.path = path
        self._db: sqlite3.Connection | None = None

    @_cache_op("rebuild the state cache")
    def rebuild(self, chains: ChainReader, run: str | None = None) -> list[str]:
        """Drop the cache (of one run, or all) and fold it again from the raw objects; returns the
        runs. The WAL is truncated afterwards, so the cache on disk is its tables' size."""
        runs = [run] if run else chains.runs()
        for r in runs:
            chains.view(r)  # an unknown run fails before anything is dropped
        self.drop(run)
        for r in runs:
            self.refresh(chains, chains.view(r))
        if self.path != ":memory:":
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
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
            db.execute("PRAGMA journal_size_limit=4194304")  # a big refresh leaves no big WAL behind
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

    @_cache_op("drop deleted runs' cached state")
    def drop_deleted(self, store: Store) -> list[str]:
        """Remove the rows of every run the log says is deleted (``run/<R>/deleted``), and of every
        run with rows folded before its newest partial deletion (they hold what it covers): their
        folded state leaves the cache (gc then vacuums the file). Returns the deleted runs."""
        from ..storage import runrefs

        if not self.exists():
            return []
        rows = self.db.execute("SELECT run, dels FROM branch").fetchall()
        gone, stale = [], []
        for r in sorted({r for r, _d in rows if isinstance(r, str)}):
            refs = store.run_refs(r)
            if isinstance(refs.get(runrefs.deleted_ref(r)), bytes):
                gone.append(r)
            else:  # rows folded before a partial deletion still hold what it covers: they go too
                dels = refs.get(runrefs.deletions_ref(r))
                if any(rr == r and _dels(d) != (dels if isinstance(dels, bytes) else None) for rr, d in rows):
                    stale.append(r)
        for r in gone + stale:
            self.drop(r)
        return gone

    def _tx(self) -> AbstractContextManager[None]:
        db = self.db

        class _T:
            def __enter__(s) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(s, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
                db.execute("COMMIT" if et is None else "ROLLBACK")

        return _T()

    def _forget(self, run: str, branch: int) -> None:
        for t in _TABLES:
            self.db.execute(f"DELETE FROM {t} WHERE run=? AND branch=?", (run, branch))

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

    @_cache_op("read cached state")
    def cached_deletions(self, run: str) -> dict:
        """branch -> the head of the run's deletions chain its row reflects (None: none): a row
        reflecting another head than the run's is behind (a cache miss), never served."""
        return {b: _dels(d) for b, d in self.db.execute("SELECT branch, dels FROM branch WHERE run=?", (run,)).fetchall()}

    # -- refresh ---------------------------------------------------------------
    @_cache_op("refresh the state cache")
    def refresh(self, chains: ChainReader, view: View, branches: list[int] | None = None) -> None:
        for b in sorted(view.heads) if branches is None else branches:
            self._refresh_branch(chains, view, b)

    # -- confirmed reads -------------------------------------------------------
    def open_branch(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, Iterator[bytes]] | None:
        """(summary, attempt views as canonical JSON, streamed in query order) of ``branch`` at the
        view's head, confirmed against the log first; None if the cache cannot answer (the caller
        re-folds): behind a pinned view, busy, read-only, unreadable or diverged from the log — a
        cache never makes a query fail. The views are read in the snapshot that was confirmed:
        drain or close the iterator before the next call."""
        try:
            if not self.try_refresh(chains, view, branch):
                return None
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None
        db = self.db
        try:
            db.execute("BEGIN")
            try:
                row = db.execute("SELECT head, tip_lsn, fork, summary, dels FROM branch WHERE run=? AND branch=?",
                                 (view.run, branch)).fetchone()
                if row is None or not isinstance(row[0], bytes) or bytes(row[0]) != view.head(branch):
                    db.execute("COMMIT")
                    return None  # another process moved the cache on between refresh and read
                summary = _dec.decode(row[3])
                if not isinstance(summary, dict) or set(summary) != set(SUMMARY_KEYS):
                    raise ValueError("not a summary")
                self.confirm(chains, view, branch, row[1], row[2], row[4])
                _log_fields(summary, chains.run_fields(view))
            except BaseException:
                db.execute("COMMIT")
                raise
        except Diverged:
            return None  # left as it is: verify names it, rebuild remakes it
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None
        return summary, self._stream_views(view.run, branch)

    @_cache_op("read cached state")
    def diverged(self, chains: ChainReader, view: View, branch: int) -> str | None:
        """Why ``branch``'s rows cannot be served at the view's head (``confirm``'s finding, or the
        damage met reading them), or None when they confirm; nothing is refreshed or healed.
        What verify reports as ``state-diverged``."""
        db = self.db
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT head, tip_lsn, fork, dels FROM branch WHERE run=? AND branch=?", (view.run, branch)).fetchone()
            if row is None:
                return None
            self.confirm(chains, view, branch, row[1], row[2], row[3])
        except Diverged as e:
            return str(e)
        except _ROW_DAMAGE as e:
            return f"a cached row is damaged ({type(e).__name__})"
        finally:
            db.execute("COMMIT")
        return None

    def _stream_views(self, run: str, branch: int) -> Iterator[bytes]:
        """The confirmed views, chunk by chunk, in the read transaction ``open_branch`` began."""
        return _Views(self.db, run, branch)

    def confirm(self, chains: ChainReader, view: View, branch: int, tip: Any, fork: Any, dels: Any) -> None:
        """Raise ``Diverged`` (saying how) unless the branch's rows, as this connection reads them,
        are exactly the log's at the view's head: the run's partial deletions (the head of its
        deletions chain), tip, fork object, one record row per LSN naming the log's record there,
        one attempt view per attempt record (header-only ones have none), in query order."""
        run = view.run
        reflects = chains.state_deletions(view)
        if _dels(dels) != reflects:
            raise Diverged(f"cached rows reflect deletions {_show(_dels(dels))}, the run's deletions head is {_show(reflects)}")
        head = view.head(branch)
        head_lsn = chains.next_of(head)[0] - 1
        if tip != head_lsn:
            raise Diverged(f"cached tip LSN {tip!r}, the branch head is at LSN {head_lsn}")
        fk = chains.fork_object(view, branch)
        want_fork = fk["id"] if fk is not None else None
        got_fork = bytes(fork) if isinstance(fork, bytes) else fork
        if got_fork != want_fork:
            raise Diverged(f"cached fork object {_show(got_fork)}, the branch's fork object is {_show(want_fork)}")
        kinds = bytearray()
        log_rows = chains.store.engine.iter_chain(run, branch, 0)
        expect = 0
        for chunk, rids, ks in self.db.execute("SELECT chunk, rids, kinds FROM recs WHERE run=? AND branch=? ORDER BY chunk",
                                               (run, branch)):
            if chunk != expect // RCHUNK or expect % RCHUNK or not isinstance(rids, bytes) or not isinstance(ks, bytes) \
                    or len(rids) != _RID * len(ks) or not 0 < len(ks) <= RCHUNK:
                raise Diverged(f"cached record rows break off at LSN {expect}")
            n = len(ks)
            mine = []
            for _ in range(n):
                got = next(log_rows, None)
                if got is None:
                    break
                mine.append(got[1])
            if len(mine) < n:
                raise Diverged(f"cached record rows reach LSN {expect + n - 1}, the log's chain index ends at LSN {expect + len(mine) - 1}")
            if b"".join(m[:_RID] for m in mine) != rids:
                i = next(i for i, m in enumerate(mine) if rids[i * _RID:(i + 1) * _RID] != m[:_RID])
                raise Diverged(f"cached record at LSN {expect + i} is not the log's record {mine[i].hex()} there")
            if expect + n - 1 == head_lsn and mine[-1] != head:
                raise Diverged(f"the log's chain index holds {mine[-1].hex()} at the head's LSN {head_lsn}")
            kinds += ks
            expect += n
            chains.store.engine.release_indexes()  # the index pages read so far leave the resident set
        if expect != head_lsn + 1:
            raise Diverged(f"cached record rows cover {expect} LSNs, the branch has {head_lsn + 1}")
        want = kinds.count(1)
        if kinds.count(0) + want != len(kinds):
            raise Diverged("a cached record row has a kind this code does not write")
        seen = 0
        prev = (-1, -1, -1)
        for step, attempt, lsn, n, blob in self.db.execute(
                "SELECT step, attempt, lsn, n, view FROM attempt WHERE run=? AND branch=? ORDER BY step, attempt, lsn", (run, branch)):
            if type(step) is not int:
                raise TypeError("an attempt row's step is not an integer")
            keys, _ = _unpack_chunk(blob, n)
            if (keys[0], keys[1]) != (attempt, lsn):
                raise Diverged(f"cached attempt chunk of step {step} does not start where its row says")
            for i in range(0, len(keys), 2):
                key = (step, keys[i], keys[i + 1])
                at = key[2]
                if key <= prev or not 0 <= at < len(kinds) or kinds[at] != 1:
                    raise Diverged(f"cached attempt view at LSN {at} is not an attempt of the cached records, once, in order")
                kinds[at] = 2
                prev = key
            seen += n
        if seen != want:
            raise Diverged(f"cached attempt views number {seen}, the cached records hold {want} attempts")

    def read_branch(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, bytes | None, list[bytes]] | None:
        """(summary, fork id, attempt fragments) of ``branch`` at the view's head, confirmed, in
        memory; None if the cache cannot answer (see ``open_branch``). The fork id is the log's."""
        got = self.open_branch(chains, view, branch)
        if got is None:
            return None
        summary, views = got
        try:
            frags = list(views)
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None
        fk = chains.fork_object(view, branch)
        return summary, (fk["id"] if fk is not None else None), frags

    def summary(self, chains: ChainReader, view: View, branch: int) -> dict:
        """``summary_of`` the branch's folded state at the view's head, without loading the whole state."""
        return self._at_head(chains, view, branch, "summary", lambda st: summary_of(st))

    def state(self, chains: ChainReader, view: View, branch: int) -> dict:
        """The folded state of ``branch`` at the view's head."""
        return self._at_head(chains, view, branch, "state", lambda st: st)

    def _at_head(self, chains: ChainReader, view: View, branch: int, column: str, from_refold: Callable[[dict], dict]) -> dict:
        try:
            if self.try_refresh(chains, view, branch):
                db = self.db
                db.execute("BEGIN")
                try:
                    row = db.execute(f"SELECT head, {column}, tip_lsn, fork, dels FROM branch WHERE run=? AND branch=?",
                                     (view.run, branch)).fetchone()
                    if row is not None and bytes(row[0]) == view.head(branch):
                        self.confirm(chains, view, branch, row[2], row[3], row[4])
                        got = _dec.decode(row[1])
                        if isinstance(got, dict):
                            return _log_fields(got, chains.run_fields(view))
                finally:
                    db.execute("COMMIT")
        except Diverged:
            pass  # left for verify to name; answered from the log
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
        # the cache is past this (pinned) view, moved on meanwhile, or diverged: answer from the log
        return from_refold(refold_branch(chains, view, branch)[0])

    @_cache_op("read cached attempts")
    def attempt_rows(self, run: str, branch: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(step, attempt, lsn, canonical JSON of the view) of a branch's cached attempts, streamed
        in query order, as stored (unconfirmed: what verify compares with its own fold)."""
        rows = self.db.execute("SELECT step, n, view FROM attempt WHERE run=? AND branch=? ORDER BY step, attempt, lsn",
                               (run, branch)).fetchall()  # chunk rows: few
        for step, n, blob in rows:
            keys, views = _unpack_chunk(blob, n)
            for i, v in enumerate(views):
                yield step, keys[2 * i], keys[2 * i + 1], v

    @_cache_op("read cached attempts")
    def attempt_fragments(self, run: str, branch: int) -> list[bytes]:
        return [v for _s, _a, _l, v in self.attempt_rows(run, branch)]

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
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None
        try:
            with self._tx():
                self._forget(run, branch)
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
        """Catch one branch's rows up to the view's head in one transaction, streaming the records
        it lacks from the log's chain index (memory does not grow with history: views are
        written every ``_PENDING`` attempts, records every ``RCHUNK``)."""
        run = view.run
        head = view.head(branch)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT head, tip_lsn, state, fork, parent_branch, parent_lsn, dels FROM branch WHERE run=? AND branch=?",
                             (run, branch)).fetchone()
            if row is not None and (not self._valid_row(row) or _dels(row[6]) != chains.state_deletions(view)):
                # a partial deletion since (made by any process: the view's ref says so) changes the
                # fold of records the row has folded already: the branch is folded again
                self._forget(run, branch)
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
                    self._forget(run, branch)
                    row = None
            if row is None:
                fk = chains.fork_object(view, branch)
                if fk is not None:
                    state = fold(chains.fork_base(view, fk))
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
                    self._forget(run, branch)
                    db.execute("COMMIT")
                    return self._refresh(chains, view, branch)
                fork_id, pb, pl = row[3], row[4], row[5]
                start = row[1] + 1
            try:
                tip = self._append(chains, view, branch, start, state)
            except _ROW_DAMAGE:
                if start == 0:
                    raise
                # the rows it would extend are damaged: fold the branch again from nothing
                db.execute("ROLLBACK")
                db.execute("BEGIN IMMEDIATE")
                self._forget(run, branch)
                db.execute("COMMIT")
                return self._refresh(chains, view, branch)
            db.execute("INSERT OR REPLACE INTO branch VALUES(?,?,?,?,?,?,?,?,?,?)",
                       (run, branch, head, tip, fork_id, pb, pl, _enc.encode(state), _enc.encode(summary_of(state)),
                        chains.state_deletions(view)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _append(self, chains: ChainReader, view: View, branch: int, start: int, state: dict) -> int:
        """Fold the branch's records from LSN ``start`` on into ``state`` and add their rows; the new tip."""
        run = view.run
        db = self.db
        c = start // RCHUNK
        rids, kinds = bytearray(), bytearray()
        if start % RCHUNK:  # the last record row is partial: it is rewritten with the new records
            got = db.execute("SELECT rids, kinds FROM recs WHERE run=? AND branch=? AND chunk=?", (run, branch, c)).fetchone()
            if got is None or len(got[1]) != start % RCHUNK:
                raise ValueError("cached record rows do not reach the cached tip")
            rids += got[0]
            kinds += got[1]
        pending: dict[int, list[tuple[int, int, bytes]]] = {}
        held = 0
        tip = start - 1
        jenc = codec.canonical_json_plain
        for r in chains.iter_own(view, branch, start=start):
            apply(state, r)
            tip = r.lsn
            rids += r.id[:_RID]
            if r.kind == R.ATTEMPT and R.DELETED_FIELD not in r.body:  # a header-only attempt has no view
                b = r.body
                kinds.append(1)
                pending.setdefault(b["step"], []).append((b["attempt"], r.lsn, jenc(attempt_view(r, state["workflow_version"]))))
                held += 1
                if held >= _PENDING:
                    self._add_views(run, branch, pending)
                    pending, held = {}, 0
            else:
                kinds.append(0)
            if len(kinds) == RCHUNK:
                db.execute("INSERT OR REPLACE INTO recs VALUES(?,?,?,?,?)", (run, branch, c, bytes(rids), bytes(kinds)))
                chains.store.engine.release_indexes()  # the index pages read so far leave the resident set
                c += 1
                rids, kinds = bytearray(), bytearray()
        if kinds:
            db.execute("INSERT OR REPLACE INTO recs VALUES(?,?,?,?,?)", (run, branch, c, bytes(rids), bytes(kinds)))
        self._add_views(run, branch, pending)
        return tip

    def _add_views(self, run: str, branch: int, pending: dict[int, list[tuple[int, int, bytes]]]) -> None:
        """Add new attempt views to their steps' chunks, keeping each step's chunks in (attempt, lsn)
        order: appended after the step's last chunk (filling it first), or — when an attempt sorts
        before one already cached, which a run numbering attempts out of order does — the step's
        chunks are merged and rewritten (memory: that one step)."""
        db = self.db
        for step, new in pending.items():
            new.sort(key=lambda e: (e[0], e[1]))
            last = db.execute("SELECT attempt, lsn, n, view FROM attempt WHERE run=? AND branch=? AND step=? "
                              "ORDER BY attempt DESC, lsn DESC LIMIT 1", (run, branch, step)).fetchone()
            if last is not None:
                keys, views = _unpack_chunk(last[3], last[2])
                if (keys[-2], keys[-1]) < (new[0][0], new[0][1]):
                    if last[2] < VCHUNK:  # fill the last chunk first
                        db.execute("DELETE FROM attempt WHERE run=? AND branch=? AND step=? AND attempt=? AND lsn=?",
                                   (run, branch, step, last[0], last[1]))
                        new = [(keys[2 * i], keys[2 * i + 1], v) for i, v in enumerate(views)] + new
                else:
                    old: list[tuple[int, int, bytes]] = []
                    for n, blob in db.execute("SELECT n, view FROM attempt WHERE run=? AND branch=? AND step=?",
                                              (run, branch, step)).fetchall():
                        ks, vs = _unpack_chunk(blob, n)
                        old.extend((ks[2 * i], ks[2 * i + 1], v) for i, v in enumerate(vs))
                    db.execute("DELETE FROM attempt WHERE run=? AND branch=? AND step=?", (run, branch, step))
                    new = sorted(old + new, key=lambda e: (e[0], e[1]))
            for i in range(0, len(new), VCHUNK):
                part = new[i:i + VCHUNK]
                db.execute("INSERT INTO attempt VALUES(?,?,?,?,?,?,?)",
                           (run, branch, step, part[0][0], part[0][1], len(part), _pack_chunk(part)))


class _Views(Iterator[bytes]):
    """A branch's cached views in query order, read in the SQLite snapshot that confirmed them;
    the snapshot ends (COMMIT) when the views run out, fail, or ``close()`` is called — also
    for an iterator never started, which a generator's ``finally`` would not cover."""

    def __init__(self, db: sqlite3.Connection, run: str, branch: int) -> None:
        self._db: sqlite3.Connection | None = db
        self._rows = db.execute("SELECT view, n FROM attempt WHERE run=? AND branch=? ORDER BY step, attempt, lsn", (run, branch))
        self._chunk: Iterator[bytes] = iter(())

    def __next__(self) -> bytes:
        try:
            while True:
                for v in self._chunk:
                    return v
                if self._db is None:
                    raise StopIteration
                row = self._rows.fetchone()
                if row is None:
                    raise StopIteration
                self._chunk = iter(_unpack_chunk(row[0], row[1])[1])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            self._rows.close()
            db.execute("COMMIT")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: S110 - a connection already gone has no snapshot left to end
            pass


def _log_fields(cached: dict, fields: dict) -> dict:
    """A cached state or summary with the run's own fields replaced by the log's (``run_fields``):
    the rows' confirmation sees record ids, not folded content, so these are never served from them."""
    for k, v in fields.items():
        if k in cached:
            cached[k] = v
    return cached


def _dels(v: Any) -> bytes | None:
    return bytes(v) if isinstance(v, (bytes, memoryview)) else None


def _show(v: bytes | None) -> str:
    return v.hex() if isinstance(v, bytes) else "(none)"


def drop_deleted_and_vacuum(store: Store) -> list[str]:
    """What gc does to the state cache: the rows of every deleted run leave it, then the file is
    vacuumed and its WAL truncated, so no page of theirs stays on disk. Best effort (a cache is
    derived data: a busy or read-only one is left as it is, and never serves a deleted run)."""
    cache = StateCache.for_store(store)
    if store.root is None or not cache.exists():
        return []
    try:
        cache.db.execute("PRAGMA secure_delete=ON")  # freed pages are zeroed, not left holding the rows
        gone = cache.drop_deleted(store)
        db = cache.db
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return gone
    except (StateCacheError, sqlite3.Error, OSError):
        return []
    finally:
        if cache._db is not None:
            cache._db.close()
            cache._db = None
