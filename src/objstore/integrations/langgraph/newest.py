"""The saver's memory of each run's newest checkpoint on its live branch: where the next ``put`` goes.

A ``put`` goes on the live branch when its parent is the newest live checkpoint there, and a
``put_writes`` finds its checkpoint (and the writes already after it) the same way; reading that
from the log is a walk back from the branch head, decoding each record passed. The answer is a
function of three things the run's view names: the live branch, that branch's head and the head of
the run's records deletions (a deletion makes a record header-only without moving any head). So
this memory keeps, per run, the answer together with those three values as this saver last wrote
them, and gives it back only when a fresh view (read from the log for every call) names the same
three: a memory another writer made stale (another process, another saver object, a deletion) is
never used, the walk is. The append that follows still carries ``expect_head`` (``put``), so a
writer slipping in between the view and the append is a ``Conflict`` as before.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from ...runs import records as R


class Newest(NamedTuple):
    """A run's live branch as this saver left it: its newest checkpoint and the records after it."""

    live: int
    head: bytes
    deletions: bytes | None
    checkpoint: R.Record
    after: tuple[R.Record, ...]  # newest first, as the walk back from the head gives them


class NewestMemory:
    """``Newest`` per run, valid only for the view it was taken from (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Newest] = {}
        self.hits = 0  # answers given from memory (tests count them; a miss walks the log)

    def get(self, view: Any) -> Newest | None:
        """The remembered answer for ``view`` (a ``runs.chain.View``), or None when the log moved."""
        with self._lock:
            m = self._runs.get(view.run)
        if m is None or m.live != view.live or m.head != view.head(view.live) or m.deletions != view.deletions:
            return None
        self.hits += 1
        return m

    def put(self, view: Any, rec: R.Record, checkpoint: R.Record, after: tuple[R.Record, ...]) -> None:
        """Remember the live branch after this saver appended ``rec`` to it, when ``rec`` was built
        on the head ``view`` names (nothing slipped in between): its newest checkpoint is
        ``checkpoint`` (``rec`` itself for a put), followed by ``after``. Two threads of one
        saver may finish in any order: an older record never replaces a newer one's memory."""
        # rec[0], rec[4]: its id and parent as the plain bytes the tuple holds (.id / .parent wrap them)
        if rec.branch != view.live or rec[4] != view.heads.get(view.live):
            self.forget(view.run)
            return
        new = Newest(view.live, rec[0], view.deletions, checkpoint, after)
        with self._lock:
            old = self._runs.get(view.run)
            if old is None or old.live != new.live or _lsn(old) < rec.lsn:
                self._runs[view.run] = new

    def forget(self, run: str) -> None:
        with self._lock:
            self._runs.pop(run, None)


def _lsn(m: Newest) -> int:
    return m.after[0].lsn if m.after else m.checkpoint.lsn
