"""The cold re-fold: a branch's folded state and attempt views from records read out of the log.

``refold_branch`` and ``refold_stream`` are the oracle the state cache (``runs.state``) is checked
against: they read the branch's lineage through the chain reader and never look at the cache.
``fold_stream`` is the one fold both go through — the re-fold on records read from the log, the
cache on the records its rows confirm — so the two answers are the same bytes by construction
(invariant 15: nothing decides from the cache). Attempt views past ``_SPILL`` are sorted on disk
(a temporary SQLite file, unlinked at once), so a long history folds in bounded memory.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..storage import codec
from ..storage.fileutil import no_gc
from . import records as R
from .fold import apply, empty_state

if TYPE_CHECKING:
    from .chain import ChainReader, View

_SPILL = 50000  # attempt views a streamed fold sorts in memory; past it, on disk


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
    with no_gc():
        try:
            fk = chains.fork_object(view, branch)
            state, views = fold_stream(chains.iter_lineage(view, branch), view.run, branch)
        finally:
            chains.store.forget_decoded()
    return state, fk, views


def fold_stream(records: Iterable[R.Record], run: str, branch: int) -> tuple[dict, Iterator[bytes]]:
    """(folded state, the branch's own attempt views as canonical JSON in query order) of a
    lineage's records, oldest first: what a re-fold and the cache's confirmed records both go
    through, so the two answers are the same bytes by construction."""
    held: list[tuple[int, int, int, bytes]] = []
    spill = None
    jenc = codec.canonical_json_plain
    state = empty_state()
    for r in records:
        apply(state, r)  # workflow_version as folded at each record
        if r.branch == branch and r.kind == R.ATTEMPT and R.DELETED_FIELD not in r.body and r.run == run:
            b = r.body
            held.append((b["step"], b["attempt"], r.lsn, jenc(attempt_view(r, state["workflow_version"]))))
            if len(held) >= _SPILL:
                spill = spill or _Spill()
                spill.add(held)
                held = []
    if spill is None:
        held.sort(key=lambda t: t[:3])
        return state, (t[3] for t in held)
    spill.add(held)
    return state, spill.sorted()


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
