"""The materialized state cache: a SQLite copy of the records a fold reads, serving only what the
log confirms.

It is only a cache. Every branch row records the branch head it reflects, so
staleness is a comparison with the branch ref: a row behind its ref is caught
up by streaming the records it lacks from the log's chain index; a row whose
head is not on the chain is thrown away and rebuilt. Nothing is ever written
here except from records read out of the object store, so dropping the file
loses nothing (``rebuild`` makes it again).

Nothing decides from it (invariant 15), and nothing it serves is taken on its word: a forger can
rewrite any byte of ``state.db`` and recompute whatever it holds, so every served value is derived
from bytes the log confirms. Each branch's ``recs`` rows hold the canonical bytes of its own
records (never a blob body). Serving a branch (``open_branch``, ``state``, ``summary``), in one
SQLite snapshot, checks the branch row against the log (deletions head, tip LSN, fork object:
``confirm``), then folds the branch's lineage from the cached bytes (``_records``): each row's
bytes are hashed (BLAKE3) and the record at an LSN is the one whose hash is
the id the log's chain index holds there, and nothing else; a record a recorded deletion covers is
header-only from the log's deletion row, as in every reader. The fold and the attempt views come
from ``fold_stream`` (``runs.refold``) — the function the re-fold uses on records read from the log — so the two
answers are the same bytes by construction. The branch's own records must all confirm (else
``Diverged``); an inherited (pre-fork) part is read from its branch's rows as far as they confirm
and from the log past that. The row's stored folded state and summary must equal that fold (else
``Diverged``): they are never served themselves. Fork points and compensation flags are read from
the fork objects. A branch that fails is a cache miss: the query re-folds that branch from the
log, the rows are left as they are for ``verify`` to name (``state-diverged``) and ``rebuild`` to
remake. What this costs: a fold of the branch's lineage (hashing and decoding each record from the
cache, no reads of the log's blocks), where the re-fold also locates and reads every record in the
log.

Recorded deletion (issue 17): a record a partial deletion covers folds header-only here as in
every re-fold (its bytes are not kept), and each branch row names the head of its run's
``run/<R>/deletions`` chain it reflects (``dels``): a row reflecting another head is behind
(refolded), whoever deleted, since a deletion moves no branch head. A deleted run is never served
(every read stops at its ``deleted`` ref); ``drop_deleted`` / ``drop_deleted_and_vacuum`` (gc)
remove its rows.

Tables (per run, per branch): ``branch`` (head, tip LSN, fork point, folded state, summary, the
deletions head it reflects); ``recs`` (LSN order, one row up to ``RCHUNK`` records: its first LSN,
record count, and the canonical bytes of those records as a zstd-compressed msgpack list in LSN order).
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
import zstandard
from blake3 import blake3

from ..errors import StateCacheError
from ..storage import codec
from ..storage.fileutil import no_gc
from . import records as R
from .chain import _new_record
from .fold import apply, empty_state, fold
from .refold import attempt_view, fold_stream, refold_branch

if TYPE_CHECKING:
    from ..storage.store import Store
    from .chain import ChainReader, View

SCHEMA_VERSION = "6"  # 6: recs rows hold the records' canonical bytes; no attempt views (issue 13)

RCHUNK = 1024  # records per ``recs`` row (at most)
_CHUNK_BYTES = 1 << 22  # canonical bytes per ``recs`` row (at most, but for one record larger than it)
_MAX_CHUNK = 1 << 28  # what a row may decompress to: more is a damaged row

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
CREATE TABLE IF NOT EXISTS recs(
  run TEXT, branch INTEGER, lsn INTEGER, n INTEGER, data BLOB,
  PRIMARY KEY(run, branch, lsn)) WITHOUT ROWID;
"""
_TABLES = ("branch", "recs")
_OLD_TABLES = ("attempt", "rec", "intent", "commit_")  # earlier schemas', dropped on sight

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()

# What a damaged or foreign cache row raises when read: a query then answers from the log.
_ROW_DAMAGE = (sqlite3.Error, OSError, msgspec.DecodeError, TypeError, ValueError, KeyError, IndexError, zstandard.ZstdError)
_zc = zstandard.ZstdCompressor(level=3)
_zd = zstandard.ZstdDecompressor()


class Diverged(Exception):
    """The cache's rows of a branch disagree with the log (the message says how): a cache miss."""


def _chunk(parts: list[bytes]) -> bytes:
    """A ``recs`` row's ``data``: the canonical bytes of its records, in LSN order."""
    return _zc.compress(_enc.encode(parts))


def _unchunk(data: Any) -> list[bytes]:
    """The canonical record bytes a ``recs`` row holds, in order; raises (a ``_ROW_DAMAGE`` type)
    when the row is not a chunk this code could have written."""
    if not isinstance(data, bytes):
        raise TypeError("a record row is not a chunk of records")
    parts = _dec.decode(_zd.decompress(data, max_output_size=_MAX_CHUNK))
    if not isinstance(parts, list) or not all(isinstance(b, bytes) for b in parts):
        raise ValueError("a record row is not a list of records' bytes")
    return parts


_ARRAY = b"\xdd"  # msgpack array32: a row's payloads, framed as one array, decode in one call


def _payload(canonical: bytes) -> Any:
    """The decoded payload of a record's canonical bytes already hash-checked against its id (so
    they are what the writer wrote: ``record <length>`` NUL payload)."""
    return _dec.decode(memoryview(canonical)[canonical.index(b"\x00", 0, 40) + 1:])


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
        view's head, confirmed against the log first (``_confirmed``); None if the cache cannot
        answer (the caller re-folds): behind a pinned view, busy, read-only, unreadable or diverged
        from the log — a cache never makes a query fail."""
        got = self._serve(chains, view, branch)
        if got is None:
            return None
        state, views = got
        return summary_of(state), views

    def _serve(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, Iterator[bytes]] | None:
        """(folded state, attempt views) of ``branch`` from the cache's confirmed records, or None."""
        try:
            if not self.try_refresh(chains, view, branch):
                return None
            lineage = chains.lineage_parts(view, branch)
            for v, b, _upto in lineage[:-1]:
                if v.run == view.run:
                    self.try_refresh(chains, view, b)  # the inherited part: confirmed rows, not the log, when they can
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None
        db = self.db
        try:
            db.execute("BEGIN")
            try:
                row = db.execute("SELECT head, tip_lsn, fork, dels, state, summary FROM branch WHERE run=? AND branch=?",
                                 (view.run, branch)).fetchone()
                if row is None or not isinstance(row[0], bytes) or bytes(row[0]) != view.head(branch):
                    return None  # another process moved the cache on between refresh and read
                return self._confirmed(chains, view, branch, row, lineage=lineage)
            finally:
                db.execute("COMMIT")
        except Diverged:
            return None  # left as it is: verify names it, rebuild remakes it
        except _ROW_DAMAGE:
            self._heal(view.run, branch)
            return None

    def _confirmed(self, chains: ChainReader, view: View, branch: int, row: tuple, stored_state: bool = True,
                   lineage: list | None = None) -> tuple[dict, Iterator[bytes]]:
        """The branch's folded state and attempt views, derived from records the log confirms (raises
        ``Diverged`` otherwise): the row's own checks (``confirm``), then the fold of the branch's
        lineage from the cached records' canonical bytes, each re-hashed against the id the log's chain
        index holds at its LSN (``_records``). The row's stored summary and (``stored_state``) folded
        state must be that fold: they are never served, but a row holding another is not the log's."""
        if not isinstance(row[4], bytes) or not isinstance(row[5], bytes):
            raise TypeError("a branch row's state or summary is not what this code writes")
        self.confirm(chains, view, branch, row[1], row[2], row[3])
        with no_gc():
            try:
                lineage = lineage if lineage is not None else chains.lineage_parts(view, branch)
                state, views = fold_stream(self._lineage(chains, lineage), view.run, branch)
            finally:
                chains.store.forget_decoded()
        why = None
        if row[5] != _enc.encode(summary_of(state)):
            why = "cached summary is not the fold of the log's records"
        elif stored_state and row[4] != _enc.encode(state):
            why = "cached folded state is not the fold of the log's records"
        if why is not None:
            close = getattr(views, "close", None)
            if close is not None:
                close()
            raise Diverged(why)
        return state, views

    @_cache_op("read cached state")
    def diverged(self, chains: ChainReader, view: View, branch: int) -> str | None:
        """Why ``branch``'s rows cannot be served at the view's head (``_confirmed``'s finding, or the
        damage met reading them), or None when they confirm; nothing is refreshed or healed.
        What verify reports as ``state-diverged``."""
        db = self.db
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT head, tip_lsn, fork, dels, state, summary FROM branch WHERE run=? AND branch=?",
                             (view.run, branch)).fetchone()
            if row is None:
                return None
            # the stored folded state verify compares with its own fold, and names in its own words
            _state, views = self._confirmed(chains, view, branch, row, stored_state=False)
            for _ in views:
                pass
        except Diverged as e:
            return str(e)
        except _ROW_DAMAGE as e:
            return f"a cached row is damaged ({type(e).__name__})"
        finally:
            db.execute("COMMIT")
        return None

    def confirm(self, chains: ChainReader, view: View, branch: int, tip: Any, fork: Any, dels: Any) -> None:
        """Raise ``Diverged`` (saying how) unless the branch row, as this connection reads it, is the
        log's at the view's head: the run's partial deletions (the head of its deletions chain), tip
        LSN, fork object. (What the row's records say is confirmed as they are read: ``_records``.)"""
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

    def _lineage(self, chains: ChainReader, lineage: list) -> Iterator[R.Record]:
        """``chains.iter_lineage`` over ``lineage`` (``chains.lineage_parts``) from the cache's confirmed records: the branch's own
        from its rows (all of them, or ``Diverged``); each inherited part from its branch's rows as
        far as they confirm, and from the log past that (a parent's damage is its own miss)."""
        for v, b, upto in lineage[:-1]:
            yield from self._records(chains, v, b, upto, strict=False)
        v, b, upto = lineage[-1]
        yield from self._records(chains, v, b, upto, strict=True)

    def _records(self, chains: ChainReader, view: View, branch: int, upto: int | None, strict: bool) -> Iterator[R.Record]:
        """A branch's own records, LSN 0..``upto`` (default: its head), as ``chains.iter_own`` gives
        them, from the cache's rows: the row's records' canonical bytes, in LSN order, are hashed
        (BLAKE3) and a record is served only if it is the id the log's chain index holds at its LSN; one the
        log's deletion rows cover is header-only, as every reader reads it. ``strict`` (the branch
        asked for): rows that do not give exactly LSNs 0..head raise ``Diverged``; otherwise the
        records from the first LSN the rows cannot confirm on are read from the log."""
        run = view.run
        store = chains.store
        if upto is not None and upto >= 0 and store.indexed_record(run, branch, upto) is not None:
            last = upto
        else:
            head_lsn = chains.next_of(view.head(branch))[0] - 1
            last = head_lsn if upto is None else min(upto, head_lsn)
        if last < 0:
            return
        if store.indexed_record(run, branch, last) is None:  # records of an open batch: not the log's yet
            if strict:
                raise Diverged(f"the log's chain index has no record at the head's LSN {last}")
            yield from chains.iter_own(view, branch, upto)
            return
        head = view.head(branch) if strict else None  # an inherited part needs no head (verify's views have none)
        erased = store.erased_records
        ids = store.engine.iter_chain(run, branch, 0)
        expect = 0
        why = None
        rows = self.db.execute("SELECT lsn, n, data FROM recs WHERE run=? AND branch=? ORDER BY lsn", (run, branch))
        try:
            for first, n, data in rows:
                if expect > last:
                    if strict:
                        why = f"cached record rows cover more than the branch's {last + 1} LSNs"
                    break
                if first != expect or type(n) is not int or not 0 < n <= RCHUNK:
                    why = f"cached record rows break off at LSN {expect}"
                    break
                try:
                    parts = _unchunk(data)
                except _ROW_DAMAGE:
                    if strict:
                        raise
                    break
                got_recs, pays, at, why = self._confirm_row(parts, first, n, last, ids, strict, head, erased)
                # one decode for the row: every payload is a whole record's (its bytes hash to the log's
                # id), so each element of the array is exactly one of them, in order
                values = iter(_dec.decode(_ARRAY + len(pays).to_bytes(4, "big") + b"".join(pays)) if pays else ())
                for lsn, oid, hit in got_recs:
                    if hit is not None:
                        yield chains._header_only(oid, hit)
                    else:
                        p = next(values)
                        if p["kind"].startswith("x."):
                            chains.check_ext(oid, p)
                        yield _new_record(R.Record, (oid, p["run"], branch, lsn, p["parent"], p["kind"], p.get("time"), p["body"]))
                    expect = lsn + 1
                if why is None and strict and at != len(parts) and first + n - 1 <= last:
                    why = f"cached record row at LSN {first} holds records the log's chain index does not"
                if why is not None:
                    break
                expect = first + n
        finally:
            rows.close()
        if strict and why is None and expect != last + 1:
            why = f"cached record rows cover {expect} LSNs, the branch has {last + 1}"
        if why is not None and strict:
            raise Diverged(why)
        if expect <= last:
            # the rest from the log, up to the LSN the chain index holds (a view of the branch ending
            # there: verify's views name only the branch they check)
            at_last = view._replace(heads={**view.heads, branch: store.indexed_record(run, branch, last) or view.head(branch)})
            yield from chains.iter_own(at_last, branch, last, start=expect)

    @staticmethod
    def _confirm_row(parts: list[bytes], first: int, n: int, last: int, ids: Iterator[tuple[int, bytes]], strict: bool,
                     head: bytes | None, erased: Any) -> tuple[list[tuple[int, bytes, tuple | None]], list[memoryview], int, str | None]:
        """One ``recs`` row of ``_records`` against the log's chain index (``ids``, consumed as far as
        the row goes): (LSN, id, deletion row) of each record it confirms, in order, their payloads,
        how many of the row's records were read, and why it stopped confirming (None: it did not).
        ``strict``: the head's LSN ``last`` must hold ``head``."""
        at = 0
        why = None
        got_recs: list[tuple[int, bytes, tuple | None]] = []  # (LSN, id, deletion row) confirmed so far
        pays: list[memoryview] = []  # their payloads, each hashed with its header to the log's id
        for lsn in range(first, min(first + n, last + 1)):
            got = next(ids, None)
            if got is None or got[0] != lsn:
                why = f"cached record rows reach LSN {first + n - 1}, the log's chain index ends at LSN {lsn - 1}"
                break
            oid = got[1]
            if strict and lsn == last and oid != head:
                why = f"the log's chain index holds {oid.hex()} at the head's LSN {last}"
                break
            hit = erased.get(oid) if erased else None
            if hit is None:
                rec = parts[at] if at < len(parts) else b""
                at += 1
                if blake3(rec).digest() != oid or rec[:7] != b"record ":
                    why = f"cached record at LSN {lsn} is not the log's record {oid.hex()} there"
                    break
                pays.append(memoryview(rec)[rec.index(b"\x00", 0, 40) + 1:])
            got_recs.append((lsn, oid, hit))
        return got_recs, pays, at, why

    def read_branch(self, chains: ChainReader, view: View, branch: int) -> tuple[dict, bytes | None, list[bytes]] | None:
        """(summary, fork id, attempt fragments) of ``branch`` at the view's head, confirmed, in
        memory; None if the cache cannot answer (see ``open_branch``). The fork id is the log's."""
        got = self.open_branch(chains, view, branch)
        if got is None:
            return None
        summary, views = got
        fk = chains.fork_object(view, branch)
        return summary, (fk["id"] if fk is not None else None), list(views)

    def summary(self, chains: ChainReader, view: View, branch: int) -> dict:
        """``summary_of`` the branch's folded state at the view's head."""
        return summary_of(self.state(chains, view, branch))

    def state(self, chains: ChainReader, view: View, branch: int) -> dict:
        """The folded state of ``branch`` at the view's head: the cache's confirmed fold, or the log's."""
        got = self._serve(chains, view, branch)
        if got is not None:
            state, views = got
            close = getattr(views, "close", None)
            if close is not None:
                close()
            return state
        # the cache is past this (pinned) view, moved on meanwhile, or diverged: answer from the log
        return refold_branch(chains, view, branch)[0]

    @_cache_op("read cached attempts")
    def attempt_rows(self, run: str, branch: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(step, attempt, lsn, canonical JSON of the view) of the attempts a branch's cached records
        hold, in query order, as stored (unconfirmed: what verify compares with its own fold, after
        ``diverged`` has confirmed them). The workflow version is the cached state's: only a run's
        ``run_started`` sets it, before any attempt of the run."""
        got = self.db.execute("SELECT state FROM branch WHERE run=? AND branch=?", (run, branch)).fetchone()
        wv = _dec.decode(got[0]).get("workflow_version") if got is not None and isinstance(got[0], bytes) else None
        out = []
        for (chunk,) in self.db.execute("SELECT data FROM recs WHERE run=? AND branch=? ORDER BY lsn", (run, branch)).fetchall():
            for data in _unchunk(chunk):
                oid = blake3(data).digest()
                p = _payload(data)
                if p["kind"] == R.ATTEMPT and p["run"] == run and R.DELETED_FIELD not in p["body"]:
                    r = _new_record(R.Record, (oid, p["run"], branch, p["lsn"], p["parent"], p["kind"], p.get("time"), p["body"]))
                    b = p["body"]
                    out.append((b["step"], b["attempt"], p["lsn"], codec.canonical_json_plain(attempt_view(r, wv))))
        out.sort(key=lambda t: t[:3])
        yield from out

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
        it lacks from the log's chain index (memory does not grow with history: records are
        written a row at a time)."""
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
        """Fold the branch's records from LSN ``start`` on into ``state`` and add their canonical bytes
        to the record rows (a record a deletion covers has none: its header is the log's deletion
        row); the new tip. Memory: one row (``RCHUNK`` records or ``_CHUNK_BYTES``)."""
        run = view.run
        db = self.db
        parts: list[bytes] = []
        first, n, size = start, 0, 0
        if start:
            last = db.execute("SELECT lsn, n, data FROM recs WHERE run=? AND branch=? ORDER BY lsn DESC LIMIT 1", (run, branch)).fetchone()
            if last is None or type(last[0]) is not int or type(last[1]) is not int or last[0] + last[1] != start:
                raise ValueError("cached record rows do not reach the cached tip")
            if last[1] < RCHUNK:  # the last row is partial: it is rewritten with the new records
                old = _unchunk(last[2])
                if sum(map(len, old)) < _CHUNK_BYTES:
                    parts, first, n, size = old, last[0], last[1], sum(map(len, old))
        erased = chains.store.erased_records
        tip = start - 1
        for r in chains.iter_own(view, branch, start=start):
            apply(state, r)
            tip = r.lsn
            if not (erased and r.id in erased):
                data = self._canonical(chains, r.id)
                parts.append(data)
                size += len(data)
            n += 1
            if n >= RCHUNK or size >= _CHUNK_BYTES:
                db.execute("INSERT OR REPLACE INTO recs VALUES(?,?,?,?,?)", (run, branch, first, n, _chunk(parts)))
                parts, first, n, size = [], r.lsn + 1, 0, 0
        if n:
            db.execute("INSERT OR REPLACE INTO recs VALUES(?,?,?,?,?)", (run, branch, first, n, _chunk(parts)))
        return tip

    @staticmethod
    def _canonical(chains: ChainReader, oid: bytes) -> bytes:
        """A record's canonical bytes: its decoded value (the walk has just read its block) encoded
        again, which is what the writer wrote; bytes of another form are read as they are."""
        _otype, p = chains.store.get_decoded(oid)
        data = codec.encode(codec.RECORD, p)
        if codec.hash_bytes(data) != oid:
            data = chains.store.get_raw(oid)
        return data


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
