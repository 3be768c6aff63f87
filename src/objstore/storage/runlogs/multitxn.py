"""One commit of a store of logs (``LogTxn``): it writes the log of the first ref it touches, and only that log.

A batch does not say which run it is for; its refs do. So a ``LogTxn`` holds its objects until a ref is read
or moved, then *binds* to that ref's log: takes that log's writer lock (its own, never the store's) and opens
the log's own ``Txn`` under it, into which it hands every object so far and after. Refs of other logs are read
as of now, lock-free, like any reader's. A batch that has only read its log may rebind to another log on its
first ref move (fork_run reads its source, then writes the copy): the first lock is let go before the second
is taken, so no commit ever holds two logs' locks and none can deadlock. A ref move to a second log is
refused (``MultiLogBatch``) with nothing written.

Invariants kept here:

* a commit is one entry of one log, written under that log's lock alone;
* a body a record of the entry names is in that entry's log when the entry lands (put by the batch, held by
  the process, or read from the log that holds it): no run names a body only another run holds;
* objects committed with no ref are held by the process (``Held``) until a record that names them is committed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from ...errors import MultiLogBatch, Refused
from .. import codec
from ..log.engine import Engine
from ..log.entry import LargeBlob, RemovedBody
from ..log.facts import object_facts
from ..log.txn import Txn
from ..refs import chain_type, forward_only


class _Rebind(Exception):
    """Unwinds a bound log's transaction that wrote nothing (the batch moves to another log)."""


class LogTxn(Txn):
    """A batch of a store of logs: objects now, a log at its first ref."""

    def __init__(self, logs: Any, timeout: float | None) -> None:  # logs: its RunLogs (logs.py imports this module)
        # Txn's fields, as a batch sees them (its moves are the bound log's: a property below).
        self.engine = logs.store_log
        self.objects: dict[bytes, tuple[str, bytes | LargeBlob | RemovedBody]] = {}
        self.decoded: dict[bytes, dict] = {}
        self.facts: dict[bytes, list] = {}
        self.when: float | None = None
        self.spills: list = []
        self.inner: Txn | None = None
        self.replay = False
        self.logs = logs
        self.timeout = timeout
        self.bound: Engine | None = None
        self._cm: AbstractContextManager[Txn] | None = None
        self.store_reads: dict[str, Any] = {}  # store-log refs a run's batch read: its decision rests on them
        self.cite_now = False  # a fence: cite the store log's position even if nothing else needs it
        self.defer_sync = False  # Txn.defer_sync, handed to the bound log's transaction
        self.optimistic = False  # a self-contained commit (Store.atomically re-runs it on StaleBase): holds no lease

    def __enter__(self) -> LogTxn:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        self.finish(e if et is not None else None)

    @property
    def replay(self) -> bool:
        return self._replay

    @replay.setter
    def replay(self, value: bool) -> None:
        # an upgrade sets it on a batch already bound to its log (``Store.batch_in``): the log's Txn checks the moves
        self._replay = value
        if self.inner is not None:
            self.inner.replay = value

    @property
    def moves(self) -> dict[str, list]:
        return self.inner.moves if self.inner is not None else {}

    @moves.setter
    def moves(self, value: dict[str, list]) -> None:
        raise AttributeError("a batch's moves are its log's")

    # -- objects ------------------------------------------------------------------------------
    def put(self, oid: bytes, otype: str, canonical: bytes | LargeBlob, value: dict | None = None, facts: list | None = None) -> None:
        if oid in self.objects:
            return
        self.objects[oid] = (otype, canonical)
        if value is not None:
            self.decoded[oid] = value
        if facts is not None:
            self.facts[oid] = facts
        if self.inner is not None:
            self.inner.put(oid, otype, canonical, value, facts)

    def put_removed(self, oid: bytes, otype: str, length: int, facts: list | None) -> None:
        """A row whose body gc removed before an upgrade replays it (``Txn.put_removed``)."""
        if oid in self.objects:
            return
        self.objects[oid] = (otype, RemovedBody(length))
        if facts is not None:
            self.facts[oid] = list(facts)
        if self.inner is not None:
            self.inner.put_removed(oid, otype, length, facts)

    def has(self, oid: bytes) -> bool:
        return oid in self.objects or self.logs.has(oid)

    # -- refs ---------------------------------------------------------------------------------
    def read_ref(self, name: str) -> bytes | str | None:
        log = self.logs.for_ref(name)
        if self.bound is None:
            if self.logs.absent(log):
                return None  # a run with no log holds no ref: nothing to lock yet (a move to it creates the log, then
                # compares with what it finds under the log's lock)
            self._bind(log)
        if log is self.bound:
            assert self.inner is not None
            return self.inner.read_ref(name)
        log.refresh()
        value = log.tables.refs.get(name)
        if log is self.logs.store_log:
            self.store_reads.setdefault(name, value)
        return value

    def watch(self, name: str, value: Any, prefix: bool = False) -> None:
        """A ref (``prefix``: every ref under it) the batch decided on, read other than by ``read_ref`` (a run's grants
        by ``capture_refs``, its refs by ``run_refs``): into the read set of the log the batch writes, so an optimistic
        commit (object storage's) whose read set moved re-runs (a commit under the writer lock has none). A store-log
        ref is read by ``read_ref`` first, which puts it in ``store_reads``, re-checked when the entry cites."""
        if self.inner is not None and self.logs.for_ref(name) is self.bound:
            self.inner.watch(name, value, prefix)

    def set_ref(self, name: str, old: bytes | str | None, new: bytes | str | None, reason: str) -> None:
        if isinstance(new, bytes) and self.logs.held.has(new) and forward_only(name):
            # An object this process holds was put by an earlier commit: a chain ref that moves only to an object
            # of its own commit refuses it, as it refuses one stored earlier (its writer's grant is dated by it).
            want = chain_type(name)
            if want in ("journal", "segment", "deletion", "schema"):
                raise Refused(f"ref {name} moves only to a {want} stored in the same commit")
        inner = self._writer_for(name)
        inner.set_ref(name, old, new, reason)

    def expect(self, name: str, value: bytes | str | None) -> None:
        self._writer_for(name).expect(name, value)

    def _writer_for(self, name: str) -> Txn:
        log = self.logs.for_ref(name, create=True)
        if self.bound is None:
            self._bind(log)
        elif log is not self.bound:
            if self.inner is not None and self.inner.moves:
                names = sorted({m for m in self.inner.moves} | {name})
                raise MultiLogBatch("two logs", ", ".join(names[:3]) + (", …" if len(names) > 3 else ""))
            self._unbind()
            self._bind(log)
        assert self.inner is not None
        return self.inner

    def ref_moves(self) -> list:
        return self.inner.ref_moves() if self.inner is not None else []

    # -- binding ------------------------------------------------------------------------------
    def bind_to(self, run: str | None) -> None:
        """Write run ``run``'s log (None: the store log) whatever the batch touches first: a batch of objects
        alone lands there instead of being held by the process."""
        log = self.logs.store_log if run is None else self.logs.run_log(run, create=True)
        if self.bound is None:
            self._bind(log)
        elif log is not self.bound:
            raise MultiLogBatch("two logs", f"{run or 'the store log'} and the log this batch writes")

    def _bind(self, log: Engine) -> None:
        cm = log.transaction(self.timeout)
        inner = cm.__enter__()
        if not self.optimistic:
            try:
                inner.hold_log(self.timeout)  # before the batch reads anything of this log
            except BaseException as e:
                cm.__exit__(type(e), e, e.__traceback__)
                raise
        self._cm, self.inner, self.bound = cm, inner, log
        inner.replay = self.replay
        for oid, (otype, c) in self.objects.items():
            if isinstance(c, RemovedBody):
                inner.put_removed(oid, otype, c.length, self.facts.get(oid))
            else:
                inner.put(oid, otype, c, self.decoded.get(oid), self.facts.get(oid))

    def _unbind(self) -> None:
        cm, inner = self._cm, self.inner
        self._cm = self.inner = self.bound = None
        if cm is not None and inner is not None:
            inner.spills = []  # ours: they go with the log the batch lands in
            try:
                cm.__exit__(_Rebind, _Rebind(), None)
            except _Rebind:
                pass

    def _add_named_bodies(self) -> None:
        """Every body a record of this entry names, and every object a ref it moves names, into the entry if its log
        lacks it (held by the process, or stored in another log)."""
        assert self.inner is not None and self.bound is not None
        log, inner = self.bound, self.inner
        for name, _old, new, _reason in inner.ref_moves():
            if isinstance(new, bytes) and new not in self.objects and not log.has(new):
                got = self.logs.copy_source(new)
                if got is not None and got[0] == codec.RECORD and log is self.logs.store_log:
                    # a record is its run's, in its run's log: copied into the store log it would be a second
                    # chain the store log's rules refuse with a message about LSNs; say what is wrong instead
                    raise Refused(f"ref {name} is a ref of the store log and cannot name record {new.hex()}, which is in its "
                                  "run's log: name a run's record with a ref under run/<run>/")
                if got is not None:
                    self.objects[new] = got
                    inner.put(new, got[0], got[1])
        facts = inner.facts
        for oid, (otype, c) in list(self.objects.items()):
            if otype != codec.RECORD or isinstance(c, RemovedBody):  # a removed record's bodies went with it
                continue
            # its index row (put with it, or, for a record the log had, read from it): its refs are the body's ids
            f = facts.get(oid) or object_facts(otype, c.read_all() if isinstance(c, LargeBlob) else bytes(c), self.decoded.get(oid), oid)
            if f is None:
                continue  # a record that does not decode names nothing we can find
            for ref in f[5]:
                if not isinstance(ref, bytes) or ref in self.objects or log.has_body(ref):
                    continue
                got = self.logs.copy_source(ref)
                if got is not None:
                    self.objects[ref] = got
                    inner.put(ref, got[0], got[1])

    # -- the end ------------------------------------------------------------------------------
    def finish(self, exc: BaseException | None) -> None:
        """Commit (``exc`` None) or discard the batch."""
        failed: BaseException | None = None
        if exc is None and self.inner is not None:
            try:
                self._add_named_bodies()
                self.inner.when = self.when
                self.inner.defer_sync = self.defer_sync
                self.inner.spills.extend(self.spills)
                self.spills = []
                assert self.bound is not None
                self.logs.before_commit(self.bound, self)
            except BaseException as e:  # refused before the entry: the bound log's transaction ends (its lock let go)
                failed = exc = e
        cm = self._cm
        self._cm = None
        try:
            if cm is not None:
                if exc is None:
                    if self.logs.needs_citing(self):
                        with self.logs.citing(self):
                            cm.__exit__(None, None, None)
                    else:  # a plain append: nothing of the store log is taken
                        cm.__exit__(None, None, None)
                else:
                    cm.__exit__(type(exc), exc, exc.__traceback__)
            elif exc is None and self.objects:
                self.logs.hold(self.objects, self.spills)
                self.spills = []
        finally:
            for spill in self.spills:
                spill.discard()
        if failed is not None:
            raise failed


def record_values(txn: LogTxn) -> list[tuple[bytes, dict]]:
    """(id, payload) of the records a batch puts (decoded ones only: every put through Store has its value)."""
    return [(oid, v) for oid, v in txn.decoded.items() if txn.objects.get(oid, ("",))[0] == codec.RECORD and isinstance(v, dict)]


def value_of(txn: LogTxn, oid: bytes) -> Any:
    v = txn.decoded.get(oid)
    if v is not None:
        return v
    got = txn.objects.get(oid)
    if got is None or isinstance(got[1], (LargeBlob, RemovedBody)):
        return None
    try:
        return codec.decode(bytes(got[1]), oid, False)[1]
    except Exception:  # noqa: BLE001
        return None


__all__ = ["LogTxn"]
