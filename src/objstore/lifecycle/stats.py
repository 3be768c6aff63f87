"""``objstore stats``: what a store holds and what it costs on disk, from the log and the file sizes.

Counts come from the entries' index rows (object rows, record rows, their ``refs``), never from a
decoded body: segments (sealed, packed, active), bytes stored against canonical bytes, runs (and
deleted runs), records, blobs (and the committed blobs no record names, which gc keeps), redacted
blobs and deleted records, the derived files (indexes, checkpoint, witness) and the state cache
(``state.db`` and its WAL, reported apart; summed over the runs' files on a store with a file per run), and the anchor of the log's head. On object storage the log's
figures are the same, and the keys and bytes of the bucket by kind (one LIST) stand for segments and derived files.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidInput
from ..runs.anchors import anchor_token
from ..storage import codec
from ..storage.log import packed
from ..storage.log.engine import Engine
from ..storage.log.format import REMOVED, Position
from ..storage.log.local import LogEngine
from . import delete

if TYPE_CHECKING:
    from ..storage.store import Store


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _bucket_keys(bucket: Any) -> dict[str, Any]:
    """Keys and bytes of a store on object storage by kind, from one LIST of its prefix (a request per 1000 keys):
    what it costs in the bucket. A store of a log per run has a HEAD, chunks and entries under each log's prefix
    (``store/``, ``runs/<xx>/<run>/``) and the catalog's keys; ``other`` is what no objstore writes there (another
    tool's keys under the prefix)."""
    from ..storage.s3 import layout as s3layout

    by_kind = {k: {"keys": 0, "bytes": 0} for k in ("head", "marker", "chunk", "entry", "catalog", "other")}
    for x in bucket.list(""):
        leaf = x.key[x.key.find("/", x.key.find("/", 5) + 1) + 1:] if x.key.startswith("runs/") else \
            x.key[len("store/"):] if x.key.startswith("store/") else x.key
        if leaf == s3layout.HEAD_KEY:
            kind = "head"
        elif x.key == s3layout.MARKER_KEY:
            kind = "marker"
        elif leaf.startswith(s3layout.CHUNK_PREFIX):
            kind = "chunk"
        elif leaf.startswith(s3layout.ENTRY_PREFIX):
            kind = "entry"
        elif x.key.startswith("catalog/"):
            kind = "catalog"
        else:
            kind = "other"
        by_kind[kind]["keys"] += 1
        by_kind[kind]["bytes"] += x.size
    return {"keys": sum(k["keys"] for k in by_kind.values()), "bytes": sum(k["bytes"] for k in by_kind.values()),
            "by_kind": by_kind}


def stats(store: Store) -> dict[str, Any]:
    """The figures ``objstore stats --json`` prints (docs/CLI.md gives the schema). On object storage the log's
    figures are the same (its entries are read at open anyway); segments and derived files are a disk store's,
    ``bucket`` (keys and bytes by kind, from a LIST) stands for them."""
    eng = store.engine
    if store.url is not None and store.logs.per_run:
        return _per_run_stats(store)
    if store.url is not None and store.root is not None:  # on object storage: only then is the S3 package loaded
        from ..storage.s3.engine import S3Engine

        s3 = cast(S3Engine, eng)  # store.url: the engine is the S3 one
        pos = s3.refresh()
        bucket = _bucket_keys(s3.bucket)
        figures = _log_figures(store, s3, pos)
        return {
            "store": store.url or store.root,
            "entries": pos.entry,
            "anchor": anchor_token(pos.entry, pos.checksum),
            "segments": None,
            "bucket": bucket,
            **figures,
            "stored_ratio": round(bucket["bytes"] / figures["canonical_bytes"], 4) if figures["canonical_bytes"] else None,
            "derived_bytes": None,
            "state_cache_bytes": _state_cache(store),
        }
    if not eng.log_files or store.root is None:
        raise InvalidInput("stats reads a store on disk or on object storage (this one lives in memory)")
    if store.logs.per_run:
        return _per_run_stats(store)
    eng = cast(LogEngine, eng)
    pos = eng.refresh()
    figures = _log_figures(store, eng, pos)
    segs, seg_bytes, derived = _files(eng)
    canonical = figures["canonical_bytes"]
    return {
        "store": store.root,
        "entries": pos.entry,
        "anchor": anchor_token(pos.entry, pos.checksum),
        "segments": {"count": len(segs), "packed": sum(1 for s in segs if s["kind"] == "packed"), "bytes": seg_bytes, "files": segs},
        "bucket": None,
        **figures,
        "stored_ratio": round(seg_bytes / canonical, 4) if canonical else None,
        "derived_bytes": derived,
        "state_cache_bytes": _state_cache(store),
    }


def _files(eng: LogEngine) -> tuple[list, int, dict]:
    """(segment files: number, kind, bytes; their total; derived files' bytes) of one log on disk."""
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
    return segs, seg_bytes, derived


_SUMMED = ("canonical_bytes", "records", "blobs", "unreferenced_blobs", "objects", "removed_bodies")


def _per_run_stats(store: Store) -> dict[str, Any]:
    """``stats`` of a store of a log per run: every log read in turn (the store log, then each run's), the
    figures summed; ``logs`` gives each log's own (``log``: ``store`` or the run), ``entries`` and ``anchor``
    are the store log's (each run's head is in ``logs``)."""
    assert store.root is not None
    total: dict[str, Any] = {k: 0 for k in _SUMMED}
    by_type: dict[str, int] = {}
    files: list = []
    per_log = []
    seg_bytes = 0
    derived = {"indexes": 0, "checkpoint": 0, "witness": 0}
    store_pos = None
    remote = store.url is not None
    for run, log in store.logs.all_logs():
        eng = cast(LogEngine, log)
        pos = eng.refresh()
        store_pos = pos if run is None else store_pos
        f = _entry_figures(eng, pos)
        segs, nbytes, d = ([], 0, dict.fromkeys(derived, 0)) if remote else _files(eng)
        label = "store" if run is None else run
        for k in _SUMMED:
            total[k] += f[k]
        for t, n in f["objects_by_type"].items():
            by_type[t] = by_type.get(t, 0) + n
        files += [{"log": label, **x} for x in segs]
        seg_bytes += nbytes
        for k in derived:
            derived[k] += d[k]
        per_log.append({"log": label, "entries": pos.entry, "anchor": anchor_token(pos.entry, pos.checksum), "segments": len(segs),
                        "segment_bytes": nbytes, "records": f["records"], "blobs": f["blobs"], "canonical_bytes": f["canonical_bytes"]})
    assert store_pos is not None
    runs = set(store.logs.run_ids())
    deleted_runs = set(delete.deleted_runs(store))
    total.update({"runs": len(runs - deleted_runs), "deleted_runs": len(deleted_runs & runs), "objects_by_type": dict(sorted(by_type.items())),
                  "deleted_records": sum(len(store.covered_records(r)) for r in runs - deleted_runs),
                  "redacted_blobs": len(delete.redacted_blobs(store))})
    canonical = total["canonical_bytes"]
    bucket = _bucket_keys(store.logs.bucket) if remote else None  # type: ignore[attr-defined]
    stored = bucket["bytes"] if bucket is not None else seg_bytes
    return {
        "store": store.url or store.root,
        "entries": store_pos.entry,
        "anchor": anchor_token(store_pos.entry, store_pos.checksum),
        "segments": None if remote else {"count": len(files), "packed": sum(1 for s in files if s["kind"] == "packed"), "bytes": seg_bytes,
                                         "files": files},
        "bucket": bucket,
        **total,
        "stored_ratio": round(stored / canonical, 4) if canonical else None,
        "derived_bytes": None if remote else derived,
        "state_cache_bytes": _state_cache(store),
        "logs": per_log,
    }


def _state_cache(store: Store) -> dict[str, int]:
    """Bytes of the state cache's files, summed over every run's on a store with a file per run."""
    from ..runs.state import StateCache

    out = dict.fromkeys(("state.db", "state.db-wal", "state.db-shm"), 0)
    for path in StateCache.for_store(store).files.files():
        name = os.path.basename(path)
        out[name] = out.get(name, 0) + _size(path)
    return out


def _entry_figures(eng: Engine, pos: Position) -> dict[str, Any]:
    """What one log's entries say, up to ``pos`` (index rows only): objects, canonical bytes, records, blobs."""
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
            removed += o[3] == REMOVED
            records += o[1] == codec.RECORD
            if o[1] == codec.BLOB:
                blobs += 1
                blob_ids.add(o[0])
        for r in e.recs:
            named.update(r[6])
    return {"canonical_bytes": canonical, "records": records, "blobs": blobs, "unreferenced_blobs": len(blob_ids - named),
            "objects": objects, "objects_by_type": by_type, "removed_bodies": removed}


def _log_figures(store: Store, eng: Engine, pos: Position) -> dict[str, Any]:
    """What the log's entries say, up to ``pos``: objects and their canonical bytes, runs, records, blobs."""
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
            if o[3] == REMOVED:
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
    return {
        "canonical_bytes": canonical,
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
    }
