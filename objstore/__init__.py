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

Importing the package imports only ``errors``: ``RunLog``, ``Store``, ``View``, ``ForkResult`` and
every submodule load on first use (PEP 562 ``__getattr__``), so ``objstore --help`` and
``import objstore`` do not pay for the storage engine, zstandard, SQLite or the T-745 modules
(issue 15: a fresh process's start-up CPU is import-bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ObjstoreError

if TYPE_CHECKING:
    from .runlog import ForkResult, RunLog, View
    from .store import Store

__version__ = "0.1.0"


def open_store(path: str | None = None, *, create: bool = True, fsync: str | None = None) -> RunLog:
    """Open (by default creating) a local store and return its run-log API."""
    from .runlog import RunLog
    from .store import Store

    return RunLog(Store.open(path, fsync=fsync, create=create))


def __getattr__(name: str) -> object:
    """The facade's classes, and submodules reached as attributes (``objstore.store.Store`` after a
    bare ``import objstore``, which worked when this file imported them eagerly), on first use."""
    if name in ("ForkResult", "RunLog", "View"):
        from . import runlog

        value: Any = getattr(runlog, name)
    elif name == "Store":
        from .store import Store

        value = Store
    elif not name.startswith("_"):
        import importlib

        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # a submodule that exists but fails to import: its own error
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups find it without this call
    return value


__all__ = ["ObjstoreError", "ForkResult", "RunLog", "Store", "View", "open_store"]
