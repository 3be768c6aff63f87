"""Shell-completion candidates: run ids and branch numbers, read from a store.

Read only and forgiving: completion must never write to the store, never
print an error into the user's shell, and never be slow to give up — any
failure (no store, damaged store, unknown run) simply yields no candidates.
The CLI's ``shell_complete`` hooks call these; docs/CLI.md says how to turn
completion on (``eval "$(_OBJSTORE_COMPLETE=bash_source objstore)"``).
"""

from __future__ import annotations

from ..errors import ObjstoreError
from ..storage import runrefs
from ..storage.store import Store
from ..storage.storedir import discover
from .chain import ChainReader
from .resolve import LATEST, candidates, resolve_run


def open_store(path: str | None) -> Store | None:
    """The store at ``path`` (else the one ``discover`` finds from the current directory), or None."""
    try:
        return Store.open(path or discover())
    except (ObjstoreError, OSError, ValueError):
        return None


def runs(store: Store | None, incomplete: str) -> list[str]:
    """Run ids that ``incomplete`` could become (by id prefix, or by the prefix of a generated
    id's random suffix), then ``latest`` when it matches."""
    if store is None:
        return []
    try:
        out = candidates(store.run_names(), incomplete)
    except (ObjstoreError, OSError):
        return []
    if LATEST.startswith(incomplete):
        out.append(LATEST)
    return out


def branches(store: Store | None, run_spec: str | None, incomplete: str) -> list[str]:
    """Branch numbers (as strings) of the run ``run_spec`` names, that start with ``incomplete``."""
    if store is None or not run_spec:
        return []
    try:
        run = resolve_run(ChainReader(store), run_spec)  # reads only: no state cache, nothing that could write
        heads = runrefs.parse_run_refs(run, store.run_refs(run)).heads
    except (ObjstoreError, OSError):
        return []
    return [str(b) for b in sorted(heads) if str(b).startswith(incomplete)]
