"""``objstore upgrade`` of a store of one log (formats 3, 4, 5) to format 6, a log per run, in place.

The new store is built next to the old one, in ``PATH.upgrade-tmp``, by replaying the old log entry by entry
through the ordinary Store API: each old entry becomes one entry in each log it touches — the objects and ref moves
of run R go to R's log, the store-wide ones to the store log — with its time (so the catalog keeps the runs' start
order) and reasons. Where an object goes: a record or fork object to its run's log; a chain object (journal, segment,
grant, deletion, schema) to the log of the ref the entry moves to it; a blob to the log of each run whose record or
journal/segment object of the entry names it (a body a later record of another run names is copied into that run's
log by the commit that names it, as every format-6 commit does), else to the store log (the owner key, a blob put
alone). An object whose body the old store's gc removed (a deleted run's records and fork objects, a deleted
record, a redacted or no longer named blob) is replayed as its row without a body (block ``REMOVED``, as in a
packed segment) and the index facts its old row carried, into the log its run or its entry's records give: the
run log keeps the whole chain, the rules judge the same facts, and verify still asks that a deletion or redaction
covers every removed body. A run whose ``run_started`` gc removed is catalogued from that row: its labels; its
subject and source went with the body (the old store no longer knew them either: the default subject). A run
deletion also writes the catalog's deletion marker, as ``delete_runs`` does. Deletions are judged by the rules of
format 6 as they are replayed: each cites the store log as the replay stands, which holds every grant and key the
old log held before it.

Before anything changes, a fresh open of the new store is checked against the old one: every ref (the runs' cite
refs aside), every object id the old log holds a body for (the same canonical bytes), every id it names without a
body, and every run. Then
``PATH`` becomes ``PATH.format<N>`` and the new store ``PATH``, fsyncing the parent after each rename; a crash
between the two renames is finished by running ``upgrade`` again (``legacy.upgrade``), and a crash before them
leaves the old store as it was (the staging directory is removed on the next run).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import BodyRemoved, IntegrityError, ObjectNotFound, Refused
from ..storage import codec, runrefs
from ..storage.log.entry import RemovedBody
from ..storage.log.facts import body_refs
from ..storage.log.format import REMOVED
from ..storage.store import Store

_CHAIN = {codec.JOURNAL, codec.COMPACTION_SEGMENT, codec.GRANT, codec.DELETION, codec.SCHEMA} \
    if hasattr(codec, "COMPACTION_SEGMENT") else {codec.JOURNAL, codec.GRANT, codec.DELETION, codec.SCHEMA}


class RunLogsMismatch(IntegrityError):
    """The format-6 store built by upgrade does not hold what the old store holds."""


def build(old: Store, staging: str) -> dict:
    """Replay ``old`` (a store of one log) into a new format-6 store at ``staging``; returns counts."""
    new = Store.init(staging, fsync="off", format=6)
    try:
        return build_into(old, new)
    finally:
        new.logs.close()


def build_into(old: Store, new: Store) -> dict:
    """Replay ``old`` (a store of one log) into ``new``, an empty store of a log per run (format 6 on disk, or 7 on
    object storage: ``legacy.bucket``); returns counts. ``new`` is left open."""
    entries = commits = 0
    eng = old.engine
    named = {ref for e in eng.entries() for r in e.recs for ref in r[6]}  # every id a record names
    pending: dict[bytes, int] = {}  # removed blobs put before any record named them: id -> length
    listed: dict[bytes, set] = {}  # blob -> the deleted runs whose deletion lists it (their journals' bodies)
    for name, value in old.list_refs():
        if runrefs.is_deleted_ref(name) and isinstance(value, bytes):
            for b in old.deletion_object(value).get("blobs") or ():
                if isinstance(b, bytes):
                    listed.setdefault(b, set()).add(runrefs.run_of(name))
    for e in eng.entries():
        entries += 1
        for log, objs, moves in _route(old, e, named, pending, listed):
            with new.batch_in(log) as txn:
                txn.when = e.time
                txn.replay = True  # the old moves as they were; format 6's rules still judge every entry
                for oid, otype, canon, value, facts in objs:
                    if isinstance(canon, RemovedBody):
                        txn.put_removed(oid, otype, canon.length, facts)
                    else:
                        txn.put(oid, otype, canon, value)
                for name, o, n, reason in moves:
                    txn.set_ref(name, o, n, reason)
            commits += 1
            if log is not None and any(runrefs.is_deleted_ref(m[0]) and m[2] is not None for m in moves):
                new.logs.catalog.mark_deleted(log)  # type: ignore[attr-defined]  # as delete_runs does, once it landed
    return {"entries": entries, "commits": commits}


def _route(old: Store, e: Any, named: set, pending: dict, listed: dict) -> list[tuple[str | None, list, list]]:
    """The commits entry ``e`` becomes: (run or None for the store log, [(id, type, bytes, value, facts)], [moves]).
    An object whose body gc removed comes as a ``RemovedBody`` with the index facts its old row carried. A removed
    blob no record of its entry names, but a later record does (``named``), waits in ``pending`` and goes into the
    entry of each record naming it, in that record's run's log — where a format-6 commit would have copied it,
    and where the deletion of that record justifies its removal (verify judges each log by its own deletions). A
    removed blob a journal or segment object of its entry named (their bodies are gone: ``listed`` says which, from
    the run deletions that list them) goes to that run's log."""
    eng = old.engine
    facts_of = {e.objs[r[0]][0]: list(r[1:]) for r in (*e.recs, *e.prevs)}
    objs: dict[bytes, tuple[str, Any, Any]] = {}
    for o in e.objs:
        oid, otype = o[0], o[1]
        if o[3] == REMOVED:
            objs[oid] = (otype, RemovedBody(o[2]), None)  # gc removed its body: its row, without it
            continue
        try:
            canon = eng.read(oid)
        except BodyRemoved:
            objs[oid] = (otype, RemovedBody(o[2]), None)
            continue
        value = None if otype == codec.BLOB else codec.decode(canon, oid, False)[1]
        objs[oid] = (otype, canon, value)
    targets: dict[bytes, set[str | None]] = {oid: set() for oid in objs}
    moves_of: dict[str | None, list] = {}
    for name, o, n, reason in e.moves:
        log = runrefs.run_of(name)
        moves_of.setdefault(log, []).append([name, o, n, reason])
        if isinstance(n, bytes) and n in objs and objs[n][0] != codec.BLOB:
            targets[n].add(log)
        elif isinstance(n, bytes) and n in objs and name == runrefs.OWNER_REF:
            targets[n].add(None)
    for oid, (otype, _c, value) in objs.items():
        if otype in (codec.RECORD, codec.FORK) and isinstance(value, dict) and isinstance(value.get("run"), str):
            targets[oid].add(value["run"])
        elif otype == codec.RECORD and value is None and oid in facts_of:
            targets[oid].add(facts_of[oid][0])  # a removed record: its run, from its row
    late: dict[bytes, set[str | None]] = {}  # pending removed blobs records of this entry name -> their runs
    for oid, (otype, _c, value) in list(objs.items()):  # what a record, journal or segment names goes with it
        if otype == codec.BLOB:
            continue
        if otype == codec.RECORD and oid in facts_of:
            refs = list(facts_of[oid][5])  # the row's refs: every id the body names (a removed body's too)
        elif otype == codec.RECORD and isinstance(value, dict) and isinstance(value.get("body"), dict):
            refs = body_refs(value["body"])
        elif isinstance(value, dict):
            refs = _named(value)
        else:
            continue
        for ref in refs:
            if isinstance(ref, bytes) and ref in objs and objs[ref][0] == codec.BLOB:
                targets[ref] |= targets[oid]
            elif otype == codec.RECORD and isinstance(ref, bytes) and ref in pending:
                late.setdefault(ref, set()).update(targets[oid])
    for ref, runs in late.items():
        objs[ref] = (codec.BLOB, RemovedBody(pending[ref]), None)
        targets[ref] = runs
    for oid, (otype, canon, _v) in objs.items():
        if otype == codec.BLOB and isinstance(canon, RemovedBody) and not targets[oid]:
            targets[oid] = {r for r in listed.get(oid, ()) if r in moves_of}  # the deleted run's journal named it
    out: dict[str | None, tuple[list, list]] = {}
    for oid, (otype, canon, value) in objs.items():
        where = targets[oid]
        if not where and isinstance(canon, RemovedBody) and otype == codec.BLOB and oid in named:
            pending[oid] = canon.length  # placed with the first record that names it (above, a later entry)
            continue
        if not where and isinstance(canon, RemovedBody) and otype != codec.BLOB:
            # no run of this entry claims a removed object (a fork object whose branch move names another): a
            # log of format 6 holds it nowhere it could be read from, so this store stays on its format
            raise Refused(f"upgrade: gc removed {otype} {oid.hex()} of entry {e.n}, which no run of that entry names; "
                          "this store is not upgraded: it stays as it is, and this objstore goes on reading it")
        for log in where or {None}:  # a blob or object nothing of the entry names: the store log's
            out.setdefault(log, ([], []))[0].append((oid, otype, canon, value, facts_of.get(oid)))
    for log, moves in moves_of.items():
        out.setdefault(log, ([], []))[1].extend(moves)
    order = sorted(out, key=lambda k: (k is not None, k or ""))  # the store log first: what runs' entries cite
    return [(log, out[log][0], out[log][1]) for log in order]


def _named(value: dict) -> list:
    """Blob ids a journal or segment object names (its body, its summarized turns)."""
    got = []
    for v in value.values():
        if isinstance(v, bytes) and len(v) == 32:
            got.append(v)
        elif isinstance(v, list):
            got.extend(x for x in v if isinstance(x, bytes) and len(x) == 32)
    return got


def check(old: Store, staging: str) -> dict:
    """Prove the new store at ``staging`` holds the old store's refs, runs and every object with a body."""
    new = Store.open(staging)
    try:
        return check_against(old, new, staging)
    finally:
        new.logs.close()


def check_against(old: Store, new: Store, staging: str) -> dict:
    """Prove ``new`` (a fresh open of the store built, named ``staging`` in a line) holds the old store's refs, runs
    and every object with a body (RunLogsMismatch otherwise)."""
    new.build_id_index()
    old_refs = dict(old.list_refs())
    new_refs = {k: v for k, v in new.list_refs() if not runrefs.is_cite_ref(k)}
    if old_refs != new_refs:
        missing = sorted(set(old_refs) ^ set(new_refs)) or sorted(k for k in old_refs if old_refs[k] != new_refs.get(k))
        raise RunLogsMismatch(staging, f"refs differ: {', '.join(missing[:5])}")
    if sorted(old.run_names()) != sorted(new.run_names()):
        raise RunLogsMismatch(staging, "the runs differ")
    objects = removed = 0
    eng = old.engine
    for oid in eng.iter_ids():
        if not eng.has_body(oid):
            if not new.logs.has(oid):  # a row whose body gc removed stays a row: its id is still named
                raise RunLogsMismatch(staging, f"object {oid.hex()} (its body removed by gc) is missing")
            removed += 1
            continue
        want = eng.read(oid)
        try:
            got = new.logs.locate(oid).read(oid)
        except ObjectNotFound:
            raise RunLogsMismatch(staging, f"object {oid.hex()} is missing") from None
        if got != want:
            raise RunLogsMismatch(staging, f"object {oid.hex()} differs")
        objects += 1
    return {"objects": objects, "removed": removed, "refs": len(old_refs), "runs": len(new.run_names())}


def staged_ok(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "store", "log"))


__all__ = ["RunLogsMismatch", "build", "build_into", "check", "check_against"]
