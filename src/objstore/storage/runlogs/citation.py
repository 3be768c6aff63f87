"""Citations: a run-log entry whose rules read the store log names the store-log position it read.

A run's log holds its grants, deletions and journal; the store log holds what they are judged by — the owner
key, subject grants, schemas. An entry of a run's log that read the store log (a batch that read a store-log ref,
or one moving a ref whose rule reads it: a deletion, a grant, a journal or segment version) moves the run's
``run/<R>/cite`` ref to ``store@<entry>:<checksum>``: the store-log position it was decided at. Readers and
verify apply its rules at that position (``CrossView``: store-log objects after it do not exist for the entry).

The writer takes the store log's lock *shared* while it re-checks what it read and writes its entry, so no
store-log commit lands between the check and the entry (a plain append takes nothing of the store log).
A cite never goes back within a run's log (``storage.refs.check_move``). A revocation of a subject-wide grant is
followed by a *fence* in each run of the subject (``Store.fence``): an entry moving the run's cite to the store log's
position after the revocation, after which the run's log accepts only entries citing that position or a later one —
so no entry can be judged by a grant the store log has revoked, whatever position its writer names.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import Conflict, CorruptLog, LockTimeout, StorageOSError
from .. import runrefs
from ..authority import EntryView
from ..log.entry import LogEntry
from ..log.format import ZERO, _show
from ..log.parse import parse_entry

if TYPE_CHECKING:
    from .multitxn import LogTxn

AFTER = 1 << 62  # how a store-log object no run entry cited yet dates: after every entry


def needs_cite(txn: LogTxn) -> bool:
    """Whether the batch's entry must name the store-log position it is decided at."""
    if txn.store_reads or txn.cite_now:
        return True
    inner = txn.inner
    if inner is None:
        return False
    for name, m in inner.moves.items():  # the moves ref_moves() lists, without building the list (every commit asks)
        if m[0] != m[1] and _judged_by_store(name):
            return True
    return False


_JUDGED_SUFFIXES = tuple("/" + s for s in (runrefs.DELETIONS, runrefs.DELETED, runrefs.JOURNAL, runrefs.SEGMENTS))


def _judged_by_store(name: str) -> bool:
    """A deletions, deleted, journal, segments or grant ref (``runrefs.is_*_ref``, in one pass: every commit asks)."""
    if name.startswith(runrefs.RUN_PREFIX):
        return name.endswith(_JUDGED_SUFFIXES) or "/grant/" in name
    return name.startswith(runrefs.SUBJECT_PREFIX) and "/grant/" in name


@contextmanager
def shared_lock(root: str, timeout: float | None) -> Iterator[None]:
    """The store log's writer lock, shared: store-log writers wait; other run writers share it."""
    try:
        fd = os.open(os.path.join(root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageOSError("open the store log's lock", e) from None
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout("the store log's lock (shared)", timeout) from None
                time.sleep(0.002)
        yield
    finally:
        os.close(fd)  # closing the descriptor lets the lock go


def recheck(txn: LogTxn, store_log: Any) -> None:
    """Conflict unless every store-log ref the batch read still holds what it read."""
    store_log.refresh()
    refs = store_log.tables.refs
    for name, value in txn.store_reads.items():
        now = refs.get(name)
        if now != value:
            raise Conflict(name, _show(value), _show(now))


class CiteHistory:
    """(run-log entry, cited store-log entry) of every citing entry of one run's log, oldest first: read from the
    log's entries once, then extended by the entries after (``at``)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.upto = 0
        self.last = (0, ZERO)  # (n, checksum) of the last entry read (an S3 log's entries are read on from it)
        self.rows: list[tuple[int, int]] = []

    def _catch_up(self) -> None:
        end = self.engine.tables.pos.entry
        if end <= self.upto:
            return
        name = runrefs.cite_ref(self.engine.run)
        for e in self._applied(end):
            if e.n <= self.upto:
                continue
            for m in e.moves:
                if m[0] == name:
                    got = runrefs.parse_cite(m[2])
                    if got is not None:
                        self.rows.append((e.n, got[0]))
            if e.n >= end:
                break
        self.upto = end

    def _applied(self, end: int) -> Iterator[LogEntry]:
        """The log's entries up to ``end``, as it has applied them. The rules of the entry it applies next ask for
        them: an S3 log's ``entries()`` would first take in its HEAD again — re-entering the apply that asks (at open:
        the same entries applied again, without end) — so its entries past ``upto`` are read from where it took them."""
        entry_bytes = getattr(self.engine, "_entry_bytes", None)
        if entry_bytes is None:
            yield from self.engine.entries()
            return
        at, prev = self.last if self.last[0] <= self.upto else (0, ZERO)
        for n in range(at + 1, end + 1):
            raw, key = entry_bytes(n)
            e = parse_entry(raw, 0, len(raw), prev, 0, n)
            if isinstance(e, str):
                raise CorruptLog(f"{self.engine.bucket.url.rstrip('/')}/{key}", f"entry {n}: {e}")
            prev = e.checksum
            self.last = (n, prev)
            yield e

    def first_seeing(self, store_entry: int, extra: tuple[int, int] | None = None) -> int | None:
        """The first run-log entry whose cited position includes store-log entry ``store_entry`` (None: none)."""
        self._catch_up()
        for n, c in self.rows:
            if c >= store_entry:
                return n
        if extra is not None and extra[1] >= store_entry:
            return extra[0]
        return None


class CrossView(EntryView):
    """A run-log entry as its rules see the store: its run's log before it (with its own moves and objects), and
    the store log as the run's entries cited it. A store-log object dates, in the run's order, to the first run
    entry whose cite includes it: so "stored by entry e" compares with run entries as one log's objects do."""

    def __init__(self, engine: Any, store_log: Any, history: CiteHistory, cite: tuple[int, bytes] | None, n: int,
                 moves: list, types: dict, bodies: Any, chain: list | tuple = ()) -> None:
        super().__init__(engine, n, moves, types, bodies, list(chain))
        self.store_log = store_log
        self.history = history
        self.extra = None if cite is None else (n, cite[0])
        # neither this entry nor one before it in the run's log cites the store log: no writer writes such an entry
        # whose rules read the store log (each cites where it was decided), so a forged one is judged by the store
        # log as it stands — not as if no store-log object (the owner key, a grant) existed yet
        self.uncited = cite is None
        if cite is not None and cite[0] > store_log.tables.pos.entry:
            store_log.refresh()

    def ref(self, name: str) -> Any:
        if runrefs.run_of(name) is not None:
            return super().ref(name)
        return self.store_log.tables.refs.get(name)

    def body(self, oid: bytes) -> bytes | None:
        got = super().body(oid)
        if got is not None or oid in self.types:
            return got
        if self.store_log.loc(oid) is None:
            return None
        try:
            return bytes(self.store_log.read(oid))
        except Exception:  # noqa: BLE001 - unreadable: judged as absent, as EntryView does
            return None

    def entry_of(self, oid: bytes) -> int | None:
        if oid in self.types or self.engine.loc(oid) is not None:
            return super().entry_of(oid)
        e = self.store_log.loc_entry(oid)
        if e is None:
            return None
        if self.uncited:
            return 0
        seen = self.history.first_seeing(e, self.extra)
        return AFTER if seen is None else seen

    def otype(self, oid: bytes) -> str | None:
        got = super().otype(oid)
        if got is not None:
            return got
        loc = self.store_log.loc(oid)
        return None if loc is None else (loc.otype if hasattr(loc, "otype") else loc[1])


__all__ = ["CiteHistory", "CrossView", "needs_cite", "recheck", "shared_lock"]
