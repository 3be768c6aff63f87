"""Blob bodies a deletion leaves unnamed, withheld from every read at once (before gc removes them).

A recorded deletion (a whole run, or some records of one) hides those records at once; the blobs
they name go with them when nothing live names them any more — the same reachability gc applies
(objstore.lifecycle.gc ``doomed``): a blob another live record, a live journal or segment object, a
ref, or a record a live copy's lineage reaches still names stays readable. Reading the body of one
that is not is ``Deleted`` (exit 12), naming the deletion and its reason, like naming the run.

What it costs a read, so that a big store never pays a scan per read:

* the blobs the deleted records name (``dead``) are worked out once per process and again only after
  an entry that moves a deletion ref (the tables count those: ``LogState.dgen``), from the deleted
  records still stored (a run gc has been through is skipped at its tips);
* a blob not among them — every blob, on a store with no deletion pending gc — is served at once;
* only a blob a deleted record names is looked for, and for all of them at once: one pass over the
  entries from the oldest segment storing one of them (metas: each record's ``refs`` row; journal
  and segment objects read), then each newer entry once as the log grows — so reading many such blobs
  (a live thread's parts it shares with a deleted one) costs one pass, not one per blob, and a blob
  found live stays so until the next deletion.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..errors import Deleted, ObjstoreError
from . import codec, runrefs
from .log.entry import LogEntry
from .log.facts import body_refs
from .log.format import COMP_GONE, REMOVED
from .log.segfile import _read_segment_header

_SUFFIXES = ("/" + runrefs.DELETED, "/" + runrefs.DELETIONS)


class _Dead:
    def __init__(self, key: tuple, pos: Any, blobs: dict, records: dict, deleted: set, refs: list = ()) -> None:  # type: ignore[assignment]
        self.key, self.pos = key, pos  # (the tables, their deletion count): what the sets below are of
        self.refs = refs  # (name, value) of the deletion refs the sets are worked out from
        self.blobs = blobs  # blob id -> id of the deletion whose records name it
        self.records = records  # record id -> the blob ids it names (every record a deletion covers)
        self.deleted = deleted  # runs deleted whole
        # Which of ``blobs`` something live names, found in ONE pass over the entries from the oldest
        # segment storing one of them, then over each newer entry once: later entries only add namers
        # and a deletion makes a new _Dead. (Looking per blob cost a pass over the log per blob read.)
        self.named: set = set()  # named by a live record, journal or segment object, or copy lineage
        self.scanned: tuple | None = None  # (segment, entry number) the pass has read through
        self.refnamed: set = set()  # named by a ref outside the deleted runs, at self.pos
        self.ref_pos: Any = None


def check_blob(store: Any, oid: bytes) -> None:
    """Deleted if the blob ``oid`` is named only by records deletions cover (see the module docstring).

    On a store of a log per run a blob is stored in the log of every run whose record names it, and each log
    decides for its own copy: the blob is withheld when every log this process has open that holds it withholds
    it (a live run's log holding it serves it), with the first such log's deletion."""
    logs = getattr(store, "logs", None)
    if logs is None or not logs.per_run:
        _check_in(store, store.engine, oid)
        return
    first: Deleted | None = None
    for eng in logs.open_logs():
        if eng.loc(oid) is None:
            continue
        try:
            _check_in(store, eng, oid)
            return
        except Deleted as e:
            first = first or e
    if first is not None:
        raise first


def _check_in(store: Any, eng: Any, oid: bytes) -> None:
    dead = _dead(store, eng)
    did = dead.blobs.get(oid)
    if did is None or oid in dead.named:
        return
    if dead.ref_pos != dead.pos:  # once per log position, for every blob at once
        _still_named(store, dead, eng)
    if oid not in dead.named and oid not in dead.refnamed:
        # Withheld by what the deletions together leave unnamed: each is checked before a read obeys
        # them (a deletion a checkpoint brought in is checked once per process; else a set look-up).
        for name, value in dead.refs:
            eng.tables.obey(name, value)
        raise Deleted(f"blob {oid.hex()}", did.hex(), store.deletion_object(did).get("reason", ""))


def _dead(store: Any, eng: Any) -> _Dead:
    with eng._mu:
        t = eng.tables
        key = (id(t), t.dgen)
        cache: dict = store.__dict__.setdefault("_dead_blobs", {})  # log (its directory) -> its _Dead
        where = getattr(eng, "root", None) or id(eng)  # a run log let go and opened again is the same log
        got: _Dead | None = cache.get(where)
        if got is not None and got.key == key:
            got.pos = t.pos  # a later entry may name one of them again: _still_named reads it once
            return got
        # no deletion moved since (or a new process): one pass over the ref names
        refs = [(n, v) for n, v in t.refs.items() if n.endswith(_SUFFIXES) and n.startswith(runrefs.RUN_PREFIX)]
        pos = t.pos
    blobs: dict = {}
    records: dict = {}
    deleted: set = set()
    for name, did in refs:
        run = runrefs.run_of(name)
        if run is None or type(did) is not bytes:
            continue
        if runrefs.is_deleted_ref(name):
            deleted.add(run)
            for b in store.deletion_object(did).get("blobs") or ():
                if type(b) is bytes:
                    blobs.setdefault(b, did)
            for branch in [b for (r, b) in list(eng.tables.tips) if r == run]:
                tip = eng.tables.tips.get((run, branch))
                if tip is None or _gone(eng, tip[1]):
                    continue  # gc has been through this branch: what it named is gone, or kept as live
                for _lsn, rid in eng.iter_chain(run, branch, 0):
                    _note(eng, rid, did, blobs, records)
        else:
            for rid, hit in store.covered_records(run, did, obey=False).items():
                _note(eng, rid, hit[0], blobs, records)
    got = _Dead(key, pos, blobs, records, deleted, refs)
    cache[where] = got
    return got


def _gone(eng: Any, oid: bytes) -> bool:
    loc = eng.loc(oid)
    return loc is None or (loc.comp == COMP_GONE if hasattr(loc, "comp") else False)


def _note(eng: Any, rid: bytes, did: bytes, blobs: dict, records: dict) -> None:
    if rid in records or _gone(eng, rid):
        return
    try:
        v = codec.decode(eng.read(rid), rid, False)[1]
    except ObjstoreError:
        return
    body = v.get("body") if isinstance(v, dict) else None
    named = body_refs(body) if isinstance(body, dict) else []
    records[rid] = frozenset(named)
    for b in named:
        blobs.setdefault(b, did)


def _entries_after(eng: Any, seg: int, n: int) -> Iterator[tuple[int, LogEntry]]:
    """(segment, entry) of the entries after entry ``n`` from segment ``seg`` on, meta only; every
    entry after ``n``, on another engine (segment 0)."""
    if not eng.log_files:
        for e in eng.entries():
            if e.n > n:
                yield 0, e
        return
    while os.path.exists(eng.seg_path(seg)):
        hdr = _read_segment_header(eng._fd(seg), eng.seg_path(seg))
        sealed = False
        for e in eng._segment_entries(seg, hdr[3], hdr[2]):
            if e.n > n:
                yield seg, e
            sealed = e.seal
        if not sealed:
            return
        seg += 1


def _ids_in(value: Any, out: set) -> None:
    """Every 32-byte bytes value in a decoded object (a journal or segment object's ids)."""
    if type(value) is bytes:
        if len(value) == 32:
            out.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _ids_in(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _ids_in(v, out)


def _still_named(store: Any, dead: _Dead, eng: Any) -> None:
    """Bring ``dead.named`` up to the log's position: read the entries not read yet (a record no
    deletion covers names blobs in its ``refs`` row; a journal or segment object of a run not deleted
    names the ids in it; a live copy's lineage reaches covered records, which gc keeps), and, once per
    position, the refs (a ref outside the deleted runs naming a blob itself keeps it; on a store of a log per
    run the store log's refs too, and the copies of a run are the catalog's)."""
    logs: Any = getattr(store, "logs", None)
    per_run = logs is not None and logs.per_run
    if dead.ref_pos != dead.pos:
        refs = list(eng.tables.refs.items()) + (list(logs.store_log.tables.refs.items()) if per_run else [])
        dead.refnamed = {v for name, v in refs if type(v) is bytes and v in dead.blobs and runrefs.run_of(name) not in dead.deleted}
        dead.ref_pos = dead.pos
    if dead.scanned is None:
        segs = [loc.seg for b in dead.blobs if (loc := eng.loc(b)) is not None and hasattr(loc, "seg")]
        dead.scanned = (min(segs, default=1), 0)  # a record naming a blob is committed with it or after it
    seg, n = dead.scanned
    if n >= dead.pos.entry:
        return
    copies = []
    last = seg
    for at, e in _entries_after(eng, seg, n):
        if e.n > dead.pos.entry:
            break  # not taken in by this reader yet: read at a later position
        last, n = at, e.n
        for r in e.recs:
            rid = e.objs[r[0]][0]
            if rid not in dead.records and r[1] not in dead.deleted:
                dead.named.update(b for b in r[6] if b in dead.blobs)
            if r[5] == "run_started" and r[4] is not None and r[1] not in dead.deleted:
                copies.append(r[4])
        for o in e.objs:
            if o[1] in (codec.JOURNAL, codec.COMPACTION_SEGMENT) and o[3] != REMOVED:
                try:
                    v = codec.decode(eng.read(o[0]), o[0], False)[1]
                except ObjstoreError:
                    continue
                if isinstance(v, dict) and v.get("run") not in dead.deleted:
                    ids: set = set()
                    _ids_in(v, ids)
                    dead.named.update(b for b in ids if b in dead.blobs)
    dead.scanned = (max(last, dead.scanned[0]), n)
    if per_run:
        copies = live_copy_roots(logs, getattr(eng, "run", None))
    read = (lambda oid: logs.locate(oid).read(oid)) if per_run else eng.read
    for start in copies:  # a live copy goes on into its source: the records its lineage reaches are its history
        cur: Any = start
        seen: set = set()
        while type(cur) is bytes and cur not in seen:
            seen.add(cur)
            named = dead.records.get(cur)
            if named:
                dead.named.update(b for b in named if b in dead.blobs)
            try:
                otype, v = codec.decode(read(cur), cur, False)
            except ObjstoreError:
                break
            if not isinstance(v, dict) or otype not in (codec.RECORD, codec.FORK):
                break
            cur = v.get("parent") if otype == codec.RECORD else v.get("parent_record")


def live_copy_roots(logs: Any, run: str | None) -> list:
    """The cross-run fork objects the live copies of ``run`` (and theirs) start at, from the catalog."""
    out: list = []
    todo, seen = ([run], {run}) if run is not None else ([], set())
    while todo:
        for copy in logs.catalog.copies(todo.pop()):
            if copy in seen:
                continue
            seen.add(copy)
            todo.append(copy)
            clog = logs.run_log(copy)
            if isinstance(clog.tables.refs.get(runrefs.deleted_ref(copy)), bytes):
                continue
            first = clog.record_at(copy, 0, 0)
            if first is None:
                continue
            try:
                v = codec.decode(clog.read(first), first, False)[1]
            except ObjstoreError:
                continue
            if isinstance(v, dict) and isinstance(v.get("parent"), bytes):
                out.append(v["parent"])
    return out
