"""``objstore stats``: what a store holds and what it costs on disk, from the log and the file sizes.

Counts come from the entries' index rows (object rows, record rows, their ``refs``), never from a
decoded body: segments (sealed, packed, active), bytes stored against canonical bytes, runs (and
deleted runs), records, blobs (and the committed blobs no record names, which gc keeps), redacted
blobs and deleted records, the derived files (indexes, checkpoint, witness) and the state cache
(``state.db`` and its WAL, reported apart), and the anchor of the log's head.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..storage import codec, engine, packed
from . import delete

if TYPE_CHECKING:
    from ..storage.store import Store


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def stats(store: Store) -> dict[str, Any]:
    """The figures ``objstore stats --json`` prints (docs/CLI.md gives the schema)."""
    eng = store.engine
    store.require_local("stats reads", "objstore clone it to a directory to see its figures")
    if not isinstance(eng, engine.LogEngine) or store.root is None:
        raise InvalidInput("stats reads a store on disk (this one lives in memory)")
    pos = eng.refresh()
    t = eng.tables
    objects = records = blobs = removed = canonical = 0
    blob_ids: set = set()
    named: set = set()
    by_type: dict[str, int] = {}
    for e in eng.entries():
        if e.n > pos.entry:
            break
        for o in e.objs:
            objects += 1
            canonical += o[2]
            by_type[o[1]] = by_type.get(o[1], 0) + 1
            if o[3] == engine.REMOVED:
                removed += 1
            if o[1] == codec.RECORD:
                records += 1
            elif o[1] == codec.BLOB:
                blobs += 1
                blob_ids.add(o[0])
        for r in e.recs:
            named.update(r[6])
    runs = {r for r, _b in t.tips}
    deleted_runs = set(delete.deleted_runs(store))
    redacted = len(delete.redacted_blobs(store))
    covered = sum(len(store.covered_records(r)) for r in runs - deleted_runs)
    segs = []
    seg_bytes = 0
    for s in range(1, eng._seg + 1):
        p = eng.seg_path(s)
        size = _size(p)
        seg_bytes += size
        try:
            with open(p, "rb") as f:
                kind = "packed" if f.read(8) == packed.PK_MAGIC else ("active" if s == eng._seg else "sealed")
        except OSError:
            kind = "missing"
        segs.append({"segment": s, "kind": kind, "bytes": size})
    idx_bytes = sum(_size(eng.idx_path(s)) for s in range(1, eng._seg))
    derived = {"indexes": idx_bytes, "checkpoint": _size(os.path.join(eng.dir, "checkpoint")), "witness": _size(os.path.join(eng.dir, "witness"))}
    state = {name: _size(os.path.join(store.root, name)) for name in ("state.db", "state.db-wal", "state.db-shm")}
    return {
        "store": store.root,
        "entries": pos.entry,
        "anchor": f"objstore-anchor:1:{pos.entry}:{pos.checksum.hex()}",
        "segments": {"count": len(segs), "packed": sum(1 for s in segs if s["kind"] == "packed"), "bytes": seg_bytes, "files": segs},
        "canonical_bytes": canonical,
        "stored_ratio": round(seg_bytes / canonical, 4) if canonical else None,
        "runs": len(runs - deleted_runs),
        "deleted_runs": len(deleted_runs & runs),
        "records": records,
        "blobs": blobs,
        "unreferenced_blobs": len(blob_ids - named),
        "objects": objects,
        "objects_by_type": dict(sorted(by_type.items())),
        "deleted_records": covered,
        "removed_bodies": removed,
        "redacted_blobs": redacted,
        "derived_bytes": derived,
        "state_cache_bytes": state,
    }
