"""objstore: a git-style, content-addressed, append-only store for AI-agent run histories.

Layers, one module each, lowest first:

* ``errors`` (the typed error hierarchy), ``codec`` (canonical bytes, ids, the one JSON input
  parser), ``fileutil`` (fsync, atomic rename);
* ``runrefs`` (the ref namespace of runs), ``refs`` (ref-name rules, forward-only refs);
* ``segindex``, ``engine`` (format 2: the log of commits), ``format1`` (the old layout, read
  for ``upgrade``), ``store`` (typed objects, batches, discovery), ``upgrade``;
* ``records`` (the record model), ``fold`` (the pure fold), ``chain`` (reading runs as chains),
  ``state`` (the materialized cache), ``runlog`` (``RunLog``: writing, fork and rewind);
* ``resolve`` (run ids from prefixes and ``latest~N``), ``views`` (the JSON shapes), ``query``
  (episodes), ``export`` (outbox), ``ingest`` (JSON Lines), ``verify`` (fsck);
* T-745: ``identity``, ``grants``, ``journal``, ``sessions``, ``host``, ``backend``,
  ``snapshot``, ``compactor``, ``compaction``, ``segments``;
* ``history`` (what ``objstore log`` shows: lazy entries, time filters, the branch graph);
* ``demo`` (the stub model and the demo run).

The command line (``objstore_cli``) is thin click commands over these.
"""

from .errors import ObjstoreError
from .runlog import ForkResult, RunLog, View
from .store import Store

__version__ = "0.1.0"


def open_store(path: str | None = None, *, create: bool = True, fsync: str | None = None) -> RunLog:
    """Open (by default creating) a local store and return its run-log API."""
    return RunLog(Store.open(path, fsync=fsync, create=create))


__all__ = ["ObjstoreError", "ForkResult", "RunLog", "Store", "View", "open_store"]
