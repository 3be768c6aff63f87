"""objstore: a git-style, content-addressed, append-only store for AI-agent run histories.

One import reaches the everyday API::

    import objstore
    log = objstore.open_store(".objstore")      # a RunLog
    with log.batch():                           # one commit entry, one fdatasync
        ...
    objstore.episode(log, run)                  # every attempt, failures too
    objstore.export(log, run)                   # the live branch's outbox
    objstore.verify(log)                        # prove the whole store

The code is in packages by subsystem, lowest first; imports only go down
(``tests/test_layers.py``):

* ``errors`` — the one typed error hierarchy (with each failure's exit code);
* ``storage`` — canonical bytes and ids, the format-3 log engine, the store, keys;
* ``runs`` — the run model: records, chains, the fold, the state cache, queries, verify;
* ``journal`` — sessions, journal versions, Hosts and compaction (docs/JOURNAL.md);
* ``lifecycle`` — what happens to a whole store: repair, deletion, gc, backup, push/clone, stats;
* ``legacy`` — the format-1 and format-2 readers and ``upgrade`` to format 3 (imported by the ``upgrade`` command only);
* ``integrations`` — other frameworks and engines (each a subpackage, imported by its users only);
* ``demo`` — the stub model and the demo run.

The command line (``objstore_cli``) is thin click commands over these.

Importing the package imports only ``errors``: everything else loads on first use (PEP 562
``__getattr__``), so ``objstore --help`` and ``import objstore`` do not pay for the engine,
zstandard, SQLite or the journal. The module paths of the flat layout before these packages
(``objstore.engine``, ``objstore.runlog`` …) still import, as aliases of their new homes (``OLD_PATHS``).
"""

from __future__ import annotations

from . import interrupt as _interrupt

_interrupt.install_if_the_command()  # before any other import: a Ctrl-C while starting is one line, not a traceback


import importlib
import importlib.machinery
import sys
import types
from typing import TYPE_CHECKING, Any

from .errors import ObjstoreError

if TYPE_CHECKING:
    from .runs.api import ForkResult, RunLog, View
    from .runs.query import EpisodeView
    from .runs.verify_report import Problem
    from .storage.store import Store

__version__ = "0.1.0"

# The record facts the log applies (``objstore.storage.log.facts``): the run model's, registered by
# module path, so registering imports nothing; the log imports the module on first use.
RECORD_FACTS = "objstore.runs.facts"


def open_store(path: str | None = None, *, create: bool = True, fsync: str | None = None) -> RunLog:
    """Open (by default creating) a local store and return its run-log API."""
    from .runs.api import RunLog
    from .storage.store import Store

    return RunLog(Store.open(path, fsync=fsync, create=create))


def episode(log: RunLog, run: str, **options: Any) -> EpisodeView:
    """Every attempt of a run, failures too, with blob refs and never bodies (``objstore.runs.query.episode``)."""
    from .runs.query import episode as _episode

    return _episode(log, run, **options)


def diff(log: RunLog, run: str, a: int, b: int) -> dict:
    """Two branches of a run: fork point, records unique to each side, difference of their states."""
    from .runs.query import diff as _diff

    return _diff(log, run, a, b)


def export(log: RunLog, run: str) -> list[dict]:
    """The outbox entries of the run's live branch (``objstore.runs.export.export``)."""
    from .runs.export import export as _export

    return _export(log, run)


def verify(log: RunLog, **options: Any) -> list[Problem]:
    """Prove the whole store by re-reading it; the problems found, empty when it is sound
    (``objstore.runs.verify.verify``: ``check_state=``, ``anchor=``, ``jobs=``)."""
    from .runs.verify import verify as _verify

    return _verify(log, **options)


# Where each module of the flat layout went. ``import objstore.engine`` still works and gives the
# module ``objstore.storage.log.local`` itself (one module object, so patching either name patches both).
# ``objstore.export`` and ``objstore.verify`` are the functions above now, not module paths.
OLD_PATHS = {
    **{m: "storage." + m for m in ("codec", "fileutil", "refs", "runrefs", "store", "identity")},
    "segindex": "storage.log.segindex",
    "engine": "storage.log.local",
    **{m: "runs." + m for m in ("records", "fold", "chain", "history", "resolve", "state", "views", "ingest",
                                "query", "completion")},
    **{m: "journal." + m for m in ("grants", "host", "sessions", "snapshot", "compactor", "compaction", "backend")},
    "segments": "journal.restore",
    **{m: "legacy." + m for m in ("format1", "format2", "upgrade")},
    "runlog": "runs.api",
    "repair": "lifecycle.repair",
}
MOVED = {"export": "runs.export", "verify": "runs.verify"}


class _OldPathFinder:
    """Resolves ``objstore.<old name>`` to the module at its new path: a meta path finder and its
    loader (duck-typed: ``importlib.abc`` would cost every start-up its import)."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        head, _, name = fullname.partition(".")
        if head != __name__:
            return None
        if name in MOVED:
            raise ModuleNotFoundError(f"{fullname} is now {__name__}.{MOVED[name]} ({fullname} is a function)", name=fullname)
        if name not in OLD_PATHS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by duck typing

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(f"{__name__}.{OLD_PATHS[spec.name.partition('.')[2]]}")
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system stamped the alias's spec on the real module: give it back its own
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


if not any(isinstance(f, _OldPathFinder) for f in sys.meta_path):
    sys.meta_path.append(_OldPathFinder())


def __getattr__(name: str) -> object:
    """The facade's classes, and subpackages (or old module paths) reached as attributes after a bare
    ``import objstore``, on first use."""
    if name in ("ForkResult", "RunLog", "View"):
        from .runs import api

        value: Any = getattr(api, name)
    elif name == "Store":
        from .storage.store import Store

        value = Store
    elif not name.startswith("_"):
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


__all__ = ["ObjstoreError", "ForkResult", "RunLog", "Store", "View", "open_store", "episode", "diff", "export", "verify"]
