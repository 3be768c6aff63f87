"""A store of format 6 (``RunLogs``): a store log, a log per run, and the catalog that lists the runs.

Layout under the store's directory (docs/FORMAT.md "Format 6"):

* ``store/`` — the store log: a log (``storage.log``, ``LogEngine``) of the store-wide refs — the owner key,
  subject grants, ``schema/<kind>``, ``redacted/<id>``, anchor manifests — and the objects they name;
* ``runs/<xx>/<run>/`` — run ``run``'s log (``xx``: ``catalog.shard``): its records, fork objects, the bodies
  its records name, and its refs (branches, live, journal, segments, grants, deletions, deleted);
* ``catalog/`` — one create-once entry per run (``catalog``), written before the run's log holds an entry.

A run's log is opened when something of that run is asked for, and stays open for the life of the store object
(its tables are what a reader of that run reads). Opening the store opens the store log only: a read costs the
logs it touches. Writers of different runs share nothing: each commit takes its own log's lock
(``multitxn.LogTxn``).

Invariants kept here: a run's refs live only in its log, a store-wide ref only in the store log
(``for_ref``); a run's log is created (empty) before the catalog entry, and the catalog entry before the log's
first entry, so a crash leaves at most an entry-less log or an entry without a log, never a run without its
catalog entry.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import ObjectNotFound, StorageOSError
from .. import codec, fdbudget, runrefs
from .. import labels as L
from ..fileutil import FsyncPolicy
from ..log.engine import Engine
from ..log.entry import LargeBlob, RemovedBody
from ..log.local import LogEngine
from ..log.memory import MemoryEngine
from ..log.txn import Txn
from ..logset import LogSet
from .catalog import Catalog, CatalogEntry, entry_of, shard
from .held import Held

if TYPE_CHECKING:  # imported where used: a reader of runs never loads the write path, citations or the id index
    from .citation import CiteHistory, CrossView
    from .idindex import IdIndex
    from .multitxn import LogTxn

STORE_LOG = "store"
MAX_OPEN = 256  # run logs a process keeps open at most (each holds a few descriptors); past it the least recently used goes
FDS_PER_LOG = 7  # lock, read and append descriptors of its segment, sync, witness, a sealed index, the adopted checkpoint: what the bound counts
RUNS = "runs"
CATALOG = "catalog"
INDEX = "index"  # derived files: index/ids (idindex)


def run_dir(root: str, run: str) -> str:
    return os.path.join(root, RUNS, shard(run), run)


def create_layout(root: str, policy: FsyncPolicy) -> None:
    """The directories of a new store of format 6 (its marker is the caller's)."""
    LogEngine.create(os.path.join(root, STORE_LOG), policy)
    for d in (RUNS, CATALOG, "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    policy.dir(root)


class RunLogs(LogSet):
    """The logs of a store of format 6."""

    per_run = True

    def __init__(self, root: str, policy: FsyncPolicy) -> None:
        self.root = root
        self.policy = policy
        self.tmp = os.path.join(root, "tmp")
        self.store_log = LogEngine(os.path.join(root, STORE_LOG), policy)
        self.store_log.one_log_per_commit = True  # the store's capability, declared where callers ask it (store.engine)
        self.catalog = Catalog(os.path.join(root, CATALOG), policy, self.tmp)
        self.held = Held()
        self.prefix_ok = False  # every log answers from its readable prefix (verify): set by Store.open(readable_prefix=)
        self._runs: OrderedDict[str, LogEngine] = OrderedDict()  # the open run logs, least recently used first
        self._evictable = False  # more than half of max_open open: keep the order of use
        self._hist: dict[int, CiteHistory] = {}  # id of an open run log -> its citations
        self._index: IdIndex | None = None  # index/ids, mapped on the first bare id not found in the open logs
        # reentrant: opening a run's log replays its entries, and the birth rule of a label set's generation g >= 1
        # opens generation g-1's log (run_deleted) from inside run_log (a plain Lock deadlocked there)
        self._mu = threading.RLock()
        self.max_open = fdbudget.bound(FDS_PER_LOG, 8, MAX_OPEN)  # 1 024 descriptors: 21 logs at once

    # -- which log ------------------------------------------------------------------------------
    def _already_open(self, run: str) -> Engine | None:
        """Run ``run``'s log if this process has it open (moved to the recent end of the open logs' order)."""
        log = self._runs.get(run)
        if log is not None and self._evictable:
            try:
                self._runs.move_to_end(run)
            except KeyError:
                pass  # evicted by another thread meanwhile: this caller still holds it
        return log

    def run_log(self, run: str, create: bool = False) -> Engine:
        log = self._already_open(run)
        if log is not None:
            return log
        with self._mu:
            log = self._runs.get(run)
            if log is not None:
                return log
            d = run_dir(self.root, run)
            if not os.path.isdir(os.path.join(d, "log")):
                if not create:
                    return _ABSENT  # read as empty; looked for again on the next ask
                self._create_run_log(d)
            try:
                log = LogEngine(d, self.policy, entry_view=self.entry_view, run=run)
            except OSError as e:
                raise StorageOSError(f"open the log of run {run}", e) from None
            log.prefix_ok = self.prefix_ok
            if log.damaged is not None and not log.prefix_ok:
                log.refresh()  # damage before the log's end (a forged deletion, bad bytes): the read stops here
            self._runs[run] = log
            self._evictable = len(self._runs) > self.max_open // 2
            while len(self._runs) > self.max_open:
                self._evict()
            return log

    def _evict(self) -> None:
        """Let the least recently used run log go (called with ``_mu`` held). It is not closed here: whoever still
        holds it (a batch bound to it, a reader mid-walk) goes on using it, and its descriptors close when the last
        holder lets it go (``LocalBase.__del__``); a later ask opens it again."""
        run, log = self._runs.popitem(last=False)
        self._hist.pop(id(log), None)

    def _create_run_log(self, d: str) -> None:
        parent = os.path.dirname(d)
        staging = os.path.join(parent, f".{os.path.basename(d)}.new-{os.getpid()}-{threading.get_ident()}")
        try:
            os.makedirs(parent, exist_ok=True)
            LogEngine.create(staging, self.policy)
            try:
                os.rename(staging, d)  # the log appears whole; another creator's won: theirs is the same empty log
            except OSError:
                _rmtree(staging)
                if not os.path.isdir(os.path.join(d, "log")):
                    raise
            self.policy.dir(parent)
        except OSError as e:
            raise StorageOSError(f"create the log {d}", e) from None

    @staticmethod
    def absent(log: Engine) -> bool:
        """Whether ``log`` is the empty stand-in of a run that has no log."""
        return log is _ABSENT

    def for_ref(self, name: str, create: bool = False) -> Engine:
        run = runrefs.run_of(name)
        return self.store_log if run is None else self.run_log(run, create)

    def open_logs(self) -> list[Engine]:
        return [self.store_log, *list(self._runs.values())]

    def locate(self, oid: bytes) -> Engine:
        """The log to read ``oid`` from: one holding it with its body where one does (an object is stored in the log
        of every run that names it, and gc removes the body from a deleted run's log only), else one that knows it
        (its read names the removal), else the store log."""
        if self.held.has(oid):
            return self.held
        known: list[Engine] = []  # the first log found knowing the object without its body

        def found(log: Engine) -> bool:
            if not log.has(oid):
                return False
            if log.has_body(oid):
                return True
            if not known:
                known.append(log)
            return False

        logs = self.open_logs()
        for log in logs:
            if found(log):
                return log
        for log in logs:
            log.refresh()
            if found(log):
                return log
        index = self._id_index()
        newer: set[str] = set()
        for key, run in self.catalog.newest_first():  # runs the index has not seen first, newest first
            if index.newest and f"{key}-{run}" <= index.newest:
                break
            newer.add(run)
            if run not in self._runs and found(self.run_log(run)):
                return self.run_log(run)
        claimed = index.run_of(oid)
        if claimed is not None:
            log = self.run_log(claimed)
            if found(log):  # the index is a claim: the run's log confirms it
                return log
        for _key, run in self.catalog.newest_first():  # not where the index says: every run, newest first
            if run not in self._runs and run not in newer:
                log = self.run_log(run)
                if found(log):
                    return log
        return known[0] if known else self.store_log

    def _id_index(self) -> IdIndex:
        from .idindex import IdIndex

        if self._index is None:
            self._index = IdIndex(os.path.join(self.root, INDEX, "ids"))
        return self._index

    def build_index(self) -> dict:
        """Write ``index/ids``: every run's object ids with their run (``objstore index``; gc too). Returns
        {"runs": n, "ids": n}."""
        newest = next(iter(self.catalog.newest_first()), None)
        mark = "" if newest is None else f"{newest[0]}-{newest[1]}"
        runs = [r for _k, r in self.catalog.oldest_first()]

        def each() -> Iterator[tuple[str, Iterator[bytes]]]:
            for run in runs:
                log = self.run_log(run)
                if log is _ABSENT:
                    continue
                log.refresh()
                yield run, log.iter_ids()

        from .idindex import build as idindex_build

        count = idindex_build(os.path.join(self.root, INDEX, "ids"), self.tmp, self.policy, mark, each())
        if self._index is not None:
            self._index.close()
        self._index = None
        return {"runs": len(runs), "ids": count}

    def has(self, oid: bytes) -> bool:
        return self.locate(oid).has(oid)

    def ids_with_prefix(self, text: str) -> set[bytes]:
        """Every log's ids with this prefix: a prefix is unique only over the whole store, so every run is
        searched (O(runs); ``RUN:PREFIX`` searches one run)."""
        out: set[bytes] = set()
        for _run, log in self.all_logs():
            log.refresh()
            out.update(oid for oid in log.iter_ids() if oid.hex().startswith(text))
        return out

    def copy_source(self, oid: bytes) -> tuple[str, bytes | LargeBlob] | None:
        """(type, canonical bytes) of a body another log (or the process) holds, for a run's entry naming it."""
        got = self.held.get(oid)
        if got is not None:
            return got
        log = self.locate(oid)
        if not log.has_body(oid):
            return None
        try:
            data = log.read(oid)
        except ObjectNotFound:
            return None
        return codec.split_header(data, oid)[0], data

    def hold(self, objects: dict, spills: list) -> None:
        self.held.hold(objects, spills)

    # -- runs ---------------------------------------------------------------------------------
    def run_ids(self) -> list[str]:
        out = []
        for _key, run in self.catalog.oldest_first():
            if os.path.isdir(os.path.join(run_dir(self.root, run), "log")):
                out.append(run)
        return out

    def start_order(self, run: str) -> tuple | int | None:
        e = self.catalog.entry(run)
        return None if e is None else (e.time_us, run)

    def all_logs(self) -> Iterator[tuple[str | None, Engine]]:
        yield None, self.store_log
        for run in self.run_ids():
            yield run, self.run_log(run)

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """Run labels (store scope) from the catalog, confirmed by the caller against each run's first record;
        a record label's key names one run's log, searched in the runs this process has open."""
        out = []
        for k, run in self.catalog.by_label_key(key):
            oid = self.run_log(run).record_at(run, 0, 0)
            if oid is not None:
                out.append((int(k, 16), oid))
        if out:
            return out
        rows: list[tuple[int, bytes]] = []
        for log in list(self._runs.values()):
            with log._mu:
                rows.extend(log.label_rows(key))
        return sorted(set(rows), reverse=True)

    def ref_logs(self, prefix: str) -> Iterator[Engine]:
        yield self.store_log
        if prefix and not runrefs.RUN_PREFIX.startswith(prefix) and not prefix.startswith(runrefs.RUN_PREFIX):
            return
        for r in self.run_ids():  # one at a time: the open-log cache stays bounded over any number of runs
            yield self.run_log(r)

    # -- commits ------------------------------------------------------------------------------
    def transaction(self, timeout: float | None = None, optimistic: bool = False) -> AbstractContextManager[Txn]:
        """A batch of this store's logs: the ``LogTxn`` is its own context manager (it commits as the block ends,
        or discards what it holds if the block raised)."""
        from .multitxn import LogTxn

        txn = LogTxn(self, timeout)
        txn.optimistic = optimistic
        return txn

    def before_commit(self, log: Engine, txn: LogTxn) -> None:
        """Under ``log``'s lock, before its entry is written: a run log's first entry needs the run's catalog entry."""
        moves = txn.ref_moves()
        if log is self.store_log or not moves:
            return
        run = next((runrefs.run_of(m[0]) for m in moves), None)
        if run is None:
            return
        if log.position().entry == 0:
            self.catalog.add(self._catalog_entry(run, txn))
        prefix = runrefs.run_grant_prefix(run)
        for m in moves:
            if m[0].startswith(prefix) and m[1] is None:  # a new grant chain: findable by its key
                self.catalog.mark_grant(run, m[0][len(prefix):])

    def _catalog_entry(self, run: str, txn: LogTxn) -> CatalogEntry:
        """The run's catalog entry, from the ``run_started`` record its first entry holds (what it can say of a
        run whose first entry holds none: the default subject). Its time, the catalog's order, is the commit's
        (the entry's time: now, or the time a copy or an upgrade keeps), not the time the record states."""
        from .multitxn import record_values, value_of

        when = time.time() if txn.when is None else float(txn.when)
        subject, labels, copy_of = "default", None, None
        for _oid, v in record_values(txn):
            if v.get("run") == run and v.get("kind") == "run_started" and v.get("branch") == 0 and v.get("lsn") == 0:
                body = v.get("body")
                if isinstance(body, dict) and isinstance(body.get("subject"), str):
                    subject = body["subject"]
                labels = v.get("labels")
                parent = v.get("parent")
                if isinstance(parent, bytes):
                    fork = value_of(txn, parent)
                    if isinstance(fork, dict) and isinstance(fork.get("parent_run"), str):
                        copy_of = fork["parent_run"]
                break
        else:
            for oid, (otype, _c) in txn.objects.items():  # a copy's first entry holding its fork alone (a split push)
                fork = value_of(txn, oid) if otype == codec.FORK else None
                if isinstance(fork, dict) and fork.get("run") == run and isinstance(fork.get("parent_run"), str):
                    copy_of = fork["parent_run"]
            # An upgrade replaying a run whose run_started gc removed: its row's facts still say its labels; its
            # subject and source went with its body (the old store knows them no more than this one)
            for oid, (otype, c) in txn.objects.items():
                f = txn.facts.get(oid)
                if isinstance(c, RemovedBody) and otype == codec.RECORD and f is not None and f[:3] == [run, 0, 0] \
                        and f[4] == "run_started":
                    labels = dict(f[7]) if len(f) > 7 and L.rows_ok(f[7]) else None
                    break
        return entry_of(run, int(when * 1_000_000), subject, labels, copy_of)

    def needs_citing(self, txn: LogTxn) -> bool:
        """Whether a batch's commit is of a run's log and its entry is judged by the store log (``citing``)."""
        from .citation import needs_cite

        log = txn.bound
        return log is not None and log.run is not None and txn.inner is not None and needs_cite(txn)

    @contextmanager
    def citing(self, txn: LogTxn) -> Iterator[None]:
        """Around a run-log commit whose entry is judged by the store log (``needs_citing``): hold the store log's
        lock shared, re-check what the batch read of it, and move the run's cite ref to the store log's position."""
        from .citation import recheck, shared_lock

        log = txn.bound
        assert log is not None and log.run is not None and txn.inner is not None
        run = log.run
        with shared_lock(os.path.join(self.root, STORE_LOG), txn.timeout):
            recheck(txn, self.store_log)
            pos = self.store_log.position()
            name = runrefs.cite_ref(run)
            old = txn.inner.read_ref(name)
            new = runrefs.cite_value(pos.entry, pos.checksum)
            if old != new:
                txn.inner.set_ref(name, old, new, "cite the store log")
            yield

    def entry_view(self, engine: Engine, n: int, moves: list, types: dict, bodies: Any, chain: list) -> CrossView:
        """The view a run-log entry's rules read: its run's log, and the store log at the position it cites."""
        from .citation import CrossView

        run = engine.run
        cite = None
        if run is not None:
            name = runrefs.cite_ref(run)
            moved = next((m[2] for m in moves if m[0] == name), None)
            cite = runrefs.parse_cite(moved if moved is not None else engine.tables.refs.get(name))
        return CrossView(engine, self.store_log, self.history(engine), cite, n, moves, types, bodies, chain)

    def run_deleted(self, run: str) -> bool:
        """Whether ``run`` is deleted, read in its own log as it stands (the birth rule of a run's log: a label
        set's generation g is born only beside deleted generations 0 … g−1, whose deletions are in their logs)."""
        log = self.run_log(run)
        if log is _ABSENT:
            return False
        log.refresh()
        name = runrefs.deleted_ref(run)
        gone = log.tables.refs.get(name)
        if gone is not None:
            log.tables.obey(name, gone)  # a generation born past a deletion: only one that holds
        return gone is not None

    def date(self, run: str, oid: bytes) -> int | None:
        log = self.run_log(run)
        e = log.loc_entry(oid)
        if e is not None:
            return e
        s = self.store_log.loc_entry(oid)
        if s is None:
            return None
        from .citation import AFTER

        seen = self.history(log).first_seeing(s) if log is not _ABSENT else None
        return AFTER if seen is None else seen

    def history(self, engine: Engine) -> CiteHistory:
        from .citation import CiteHistory

        h = self._hist.get(id(engine))
        if h is None:
            h = self._hist[id(engine)] = CiteHistory(engine)
        return h

    def reopen_store_log(self) -> LogEngine:
        """A fresh engine of the store log in place of this process's, whose files a copy as it is replaced under it
        (``lifecycle.transfer_logs``): an engine reads its active segment through a descriptor, so a segment renamed
        over it is never seen, and a write through the path would land at the old offset of the new file."""
        with self._mu:
            old = self.store_log
            self.store_log = LogEngine(os.path.join(self.root, STORE_LOG), self.policy)
            self.store_log.one_log_per_commit = True
            self._hist.pop(id(old), None)
        old.close()
        return self.store_log

    def release(self, run: str | None = None) -> None:
        with self._mu:
            if run is None:
                logs, self._runs = list(self._runs.values()), OrderedDict()
            else:
                one = self._runs.pop(run, None)
                logs = [one] if one is not None else []
            for log in logs:
                self._hist.pop(id(log), None)  # (ids of closed engines are reused)
        for log in logs:
            log.close()

    def close(self) -> None:
        self.store_log.close()
        with self._mu:
            logs, self._runs = list(self._runs.values()), OrderedDict()
        for log in logs:
            log.close()


_ABSENT: Engine = MemoryEngine()  # the empty log a run without one reads as (never written: writes create the log)


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def is_format6(root: str) -> bool:
    return os.path.isdir(os.path.join(root, STORE_LOG, "log"))


__all__ = ["RunLogs", "create_layout", "run_dir"]
