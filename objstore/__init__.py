"""objstore: a git-style, content-addressed, append-only store for AI-agent run histories.

Layers, one module each: ``codec`` (canonical bytes, ids), ``objects`` (backends:
loose files + packs, memory), ``refs`` (names, compare-and-swap, ref log),
``store`` (typed objects, group commit), ``records`` (the record model),
``fold`` (the pure fold), ``state`` (the materialized cache), ``runlog``
(chains, fork/rewind, views), ``query`` (episodes), ``export`` (outbox),
``ingest`` (JSON Lines), ``verify`` (fsck), ``journal`` (T-745 compaction),
``demo`` (the stub model and the demo run).
"""

from .errors import ObjstoreError
from .runlog import ForkResult, RunLog, View
from .store import Store

__version__ = "0.1.0"


def open_store(path: str | None = None, *, create: bool = True, fsync: str | None = None) -> RunLog:
    """Open (by default creating) a local store and return its run-log API."""
    return RunLog(Store.open(path, fsync=fsync, create=create))


__all__ = ["ObjstoreError", "ForkResult", "RunLog", "Store", "View", "open_store"]
