"""What gc keeps for live copies (``fork_run``, LangGraph ``copy_thread``): the records and fork objects of a
source run that a live copy's lineage folds over, though the source (or those records) was deleted.

On a store of one log the copies are found from its entries' rows (a ``run_started`` whose parent is set starts a
copy); on a store of a log per run from the catalog (``Catalog.copies``, and the copies of those in turn), so gc of
a source reads the logs of its copies and of no other run. Read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ObjstoreError
from ..storage import codec
from ..storage.erased import live_copy_roots
from ..storage.log.local import LogEngine

if TYPE_CHECKING:
    from ..storage.store import Store


def _kept_by_copies(store: Store, eng: LogEngine, deleted_runs: set) -> set:
    """Every record and fork object the lineage of a live copy reaches before its own records:
    found from the entries' rows (a run_started whose parent is set starts a copy), then walked back
    through parent links and fork objects into the source (and its sources). On a store of a log per
    run the copies of this log's run are the catalog's (``Catalog.copies``, and theirs in turn): no other
    log is read but theirs."""
    roots = _copy_roots(store, eng, deleted_runs)
    logs = getattr(store, "logs", None)
    per_run = logs is not None and logs.per_run

    def read(oid: bytes) -> bytes:
        return (logs.locate(oid) if per_run else eng).read(oid)  # type: ignore[union-attr]

    kept: set = set()
    for oid in roots:
        cur: Any = oid
        while isinstance(cur, bytes) and cur not in kept:
            try:
                otype, value = codec.decode(read(cur), cur, False)
            except ObjstoreError:
                break  # gone already (an earlier gc, with what lies behind it) or damaged: verify names that
            if not isinstance(value, dict) or otype not in (codec.RECORD, codec.FORK):
                break
            if cur != oid:
                kept.add(cur)
            cur = value.get("parent") if otype == codec.RECORD else value.get("parent_record")
    return kept


def _copy_roots(store: Store, eng: LogEngine, deleted_runs: set) -> list:
    """The cross-run fork objects the live copies reaching into this log start at."""
    logs = getattr(store, "logs", None)
    if logs is None or not logs.per_run:
        roots = []
        for e in eng.entries():
            for r in e.recs:
                if r[5] == "run_started" and r[4] is not None and r[1] not in deleted_runs:
                    roots.append(r[4])  # the copy's cross-run fork object
        return roots
    run = getattr(eng, "run", None)
    if run is None:
        return []  # the store log holds no run
    return live_copy_roots(logs, run)  # the copies of this run, and theirs (their lineage passes through this log)


def _parent_of(eng: LogEngine, oid: bytes) -> bytes | None:
    """A record's parent, from its body (None if its body is gone already or unreadable)."""
    try:
        value = codec.decode(eng.read(oid), oid, False)[1]
    except ObjstoreError:
        return None
    parent = value.get("parent") if isinstance(value, dict) else None
    return parent if isinstance(parent, bytes) else None
