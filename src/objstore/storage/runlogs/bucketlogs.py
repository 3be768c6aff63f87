"""A store of logs on object storage (format 7, ``BucketLogs``): format 6's logs, each with a HEAD of its own.

Keys under the store's prefix (docs/FORMAT.md "Format 7"):

* ``store/`` — the store log: ``HEAD``, ``chunk/…``, ``entry/…`` as an S3 log (``storage.s3``) holds them;
* ``runs/<xx>/<run>/`` — run ``run``'s log, the same keys under the run's own prefix (``xx``: ``catalog.shard``, a
  hash of the id, so runs spread over the key space a server partitions by: AWS serves 3 500 writes a second per
  prefix);
* ``catalog/`` — the create-once catalog (``bucketcatalog``).

So a commit to a run is a compare-and-swap of that run's HEAD only: writers of different runs never race, and a
reader of one run reads the store log's HEAD and that run's keys. Everything above the engines is format 6's
(``logs.RunLogs``): which log holds a ref or an object, the catalog entry before a run's first entry, the cite of
the store log a run's entry judged by it names. What differs is where a log lives, and how a citing commit
reads the store log: there is no lock to hold on a bucket, so it cites the store log's position as it revalidated
it just before the swap (one conditional GET), and the run's rules judge the entry against exactly that position
(on every reader, whatever landed in the store log after it).

The local directory (``root``: the store's cache, ``storedir.remote_cache_dir``) holds only derived files: each
log's cache of immutable keys (``store/``, ``runs/<xx>/<run>/``), the runs' state files beside them, the id index
and spill files. Deleting it loses nothing.

Invariants: those of ``logs`` (a run's refs only in its log, the store-wide ones only in the store log; the catalog
entry before the run log's first entry); a run's log is never created by reading it (its HEAD is created by its
first commit, ``If-None-Match: *``).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

from ...errors import InvalidInput
from .. import fdbudget, runrefs
from ..fileutil import FsyncPolicy
from ..log.engine import Engine
from ..s3.bucket import Bucket, SubBucket
from ..s3.engine import S3Engine
from .bucketcatalog import BucketCatalog
from .catalog import shard
from .held import Held
from .logs import _ABSENT, MAX_OPEN, RunLogs, run_dir

if TYPE_CHECKING:
    from .multitxn import LogTxn

STORE_PREFIX = "store/"
RUNS_PREFIX = "runs/"
FDS_PER_LOG = 1  # an S3 log holds no descriptor open (its bucket's connections are shared)


def run_prefix(run: str) -> str:
    return f"{RUNS_PREFIX}{shard(run)}/{run}/"


class BucketLogs(RunLogs):
    """The logs of a store of format 7 on ``bucket`` (the store's prefix), cached under ``root``."""

    per_run = True

    def __init__(self, bucket: Bucket, root: str) -> None:  # (RunLogs.__init__ opens files on disk: not called)
        import threading

        self.bucket = bucket
        self.root = root
        self.policy = FsyncPolicy("off")  # derived files only (the id index, state files): lost ones are rebuilt
        self.tmp = os.path.join(root, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        self.store_log = S3Engine(SubBucket(bucket, STORE_PREFIX), os.path.join(root, "store"))
        self.store_log.one_log_per_commit = True
        self.catalog = BucketCatalog(bucket)  # type: ignore[assignment]
        self.held = Held()
        self.prefix_ok = False
        self._runs: OrderedDict[str, Engine] = OrderedDict()  # type: ignore[assignment]
        self._evictable = False
        self._hist = {}
        self._index = None
        self._mu = threading.RLock()
        self.max_open = fdbudget.bound(FDS_PER_LOG, 8, MAX_OPEN * 4)

    @property
    def url(self) -> str:
        return self.bucket.url

    # -- which log ------------------------------------------------------------------------------
    def run_log(self, run: str, create: bool = False) -> Engine:
        log = self._already_open(run)
        if log is not None:
            return self._undamaged(log)
        with self._mu:
            log = self._runs.get(run)
            if log is not None:
                return self._undamaged(log)
            if not run or "/" in run or run in (".", ".."):  # a key under another run's prefix
                raise InvalidInput(f"not a run id: {run!r}")
            engine = S3Engine(SubBucket(self.bucket, run_prefix(run)), run_dir(self.root, run), entry_view=self.entry_view, run=run)
            engine.one_log_per_commit = True
            # a run's log reads as freshly as the store log: a CLI command's window (Ctx.log sets it on the store's
            # engine, the store log) then holds for every run it opens, not only for the first revalidation
            engine.fresh_seconds = cast(S3Engine, self.store_log).fresh_seconds
            if engine.position().entry == 0 and engine.damaged is None and not create:
                return _ABSENT  # no HEAD: a run without a log reads as empty (asked again next time)
            engine.prefix_ok = self.prefix_ok
            self._runs[run] = engine  # kept even damaged: a second refresh of a damaged log names its damage wrongly
            self._evictable = len(self._runs) > self.max_open // 2
            while len(self._runs) > self.max_open:
                self._evict()
            return self._undamaged(engine)

    @staticmethod
    def _undamaged(engine: Engine) -> Engine:
        """``engine``, unless it is damaged before its end (a forged deletion, bad bytes) and this is no verify: then what
        its reading found, raised to every asker (as a log on disk does at open), even one that reads only its tables."""
        damaged = getattr(engine, "damaged", None)
        if damaged is not None and not engine.prefix_ok:
            raise damaged
        return engine

    def run_ids(self) -> list[str]:
        """The catalogued runs, oldest first. A run whose first commit was killed after its catalog entry is listed
        too (its log reads as empty, as a run with an empty log on disk does)."""
        return [run for _key, run in self.catalog.oldest_first()]

    def run_url(self, run: str, xx: str | None = None) -> str:
        """Where run ``run``'s log is, as a line names it (``xx``: a shard it was found under)."""
        p = run_prefix(run) if xx is None else f"{RUNS_PREFIX}{xx}/{run}/"
        return f"{self.url.rstrip('/')}/{p.rstrip('/')}"

    def has_log(self, run: str) -> bool:
        """Whether run ``run``'s log has a HEAD (one GET; the log is opened and kept)."""
        return not self.absent(self.run_log(run))

    def walk_runs(self) -> Iterator[tuple[str, str, bool, bool]]:
        """(shard, run, catalogued, has a HEAD) of every run the catalog or ``runs/`` names, in key order: verify's walk
        (two LISTs: the catalog's ids, and every key under ``runs/`` — which is also where a key no HEAD reaches shows)."""
        ids = set(self.catalog.all_ids())
        heads: dict[str, str] = {}  # run -> shard it has a HEAD under
        for x in self.bucket.list(RUNS_PREFIX):
            parts = x.key[len(RUNS_PREFIX):].split("/")
            if len(parts) == 3 and parts[2] == "HEAD":
                heads[parts[1]] = parts[0]
        for run in sorted(ids | set(heads)):
            xx = heads.get(run, shard(run))
            yield xx, run, run in ids, run in heads

    def ids_of_runs_with_prefix(self, text: str) -> list[str]:
        return self.catalog.ids_with_prefix(text)  # type: ignore[attr-defined]

    # -- commits ------------------------------------------------------------------------------
    @contextmanager
    def citing(self, txn: LogTxn) -> Iterator[None]:
        """Around a run-log commit judged by the store log: the store log revalidated (its HEAD, one conditional GET),
        what the batch read of it re-checked, and the run's cite ref moved to that position. No lock is held: a
        store-log commit landing after this is after the cited position, which is what the entry is judged by."""
        from .citation import recheck

        log = txn.bound
        assert log is not None and log.run is not None and txn.inner is not None
        self.store_log.snapshot()  # HEAD revalidated now (one conditional GET), whatever the freshness window
        recheck(txn, self.store_log)
        pos = self.store_log.position()
        name = runrefs.cite_ref(log.run)
        old = txn.inner.read_ref(name)
        new = runrefs.cite_value(pos.entry, pos.checksum)
        if old != new:
            txn.inner.set_ref(name, old, new, "cite the store log")
        yield

    def reopen_store_log(self) -> Engine:  # type: ignore[override]
        raise InvalidInput(f"{self.url} is on object storage: its logs are copied key by key, not file by file")

    def close(self) -> None:
        super().close()
        self.bucket.close()


def is_bucket_logs(logs: object) -> bool:
    return isinstance(logs, BucketLogs)


__all__ = ["BucketLogs", "run_prefix", "STORE_PREFIX", "RUNS_PREFIX"]
