"""Recorded deletion and redaction: the one way a body leaves a store, on the record.

This module owns the writing side of issue 17's logical deletion (``objstore delete`` and
``objstore redact``); ``gc`` (objstore.lifecycle.gc) later removes the bodies from the files.

* ``delete_run`` / ``delete_runs`` — whole runs: one ``deletion`` object per run (scope ``run``)
  behind the write-once ref ``run/<R>/deleted``; the run vanishes from every listing and query
  at once, and naming it gives ``Deleted`` (exit 12) with the deletion's id and reason.
* ``delete_branch_from`` / ``delete_records`` — some records of one run (scope ``records``): one
  deletion object listing ``[id, branch, lsn, kind]`` of each covered record, chained behind the
  forward-only ref ``run/<R>/deletions`` (its ``previous`` is the ref's value before). A covered
  record folds as a header-only record: it keeps its LSN and kind, contributes nothing else, and
  views show its body as ``{"deleted": <deletion id>}``. The run's other records, its branches
  and its forks stay as they are; appending to the run goes on.
* ``redact`` — one blob (scope ``blob``) behind the write-once ref ``redacted/<id>``: every read
  of its body is ``Redacted`` (exit 12), whoever names it.

Each call commits exactly one entry (one transaction), or nothing. Nothing un-deletes: the refs
are write-once or forward-only (objstore.storage.refs), for every writer and every reader.

Authorization. Where the store has an owner key, a deletion is signed (``by``, ``sig``: ed25519
over the object without ``sig``, ``identity.object_message``) by the owner key or by a key the
owner granted the right ``delete`` on the run or on its subject (``grant`` names that grant;
``objstore.storage.authority`` decides, from the log, here, for every reader and in verify). An unsigned
deletion, a key without a live delete grant, and a revoked one are ``Refused`` (exit 8) and
nothing is written. A redaction is signed by the owner key only (a blob belongs to no one run).
A store without an owner key takes unsigned deletions (``by`` and ``sig`` nil).

Choices (docs/FORMAT.md "Deletion and redaction objects"): ``previous`` is nil for run and blob
scope; deleting a deleted run, redacting a redacted blob, or deleting only records already
deleted is a no-op that returns the existing deletion's id(s) and writes nothing; a partial
deletion may not cover the run's ``run_started`` record (LSN 0 of branch 0: delete the run).
Errors: an empty reason or an id of the wrong kind is InvalidInput (5); an unknown run, branch or
object is RunNotFound / BranchNotFound / ObjectNotFound (4); a refusal is Refused (8).

What deletion cannot hide: an object's id stays in the log and commits to its content, so a
guessable body (a phone number, a 6-digit code) can be confirmed from its id by hashing each
candidate. Bodies leave the files only at the next ``objstore gc``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import (
    BranchNotFound,
    CorruptLog,
    InvalidInput,
    ObjectNotFound,
    ObjstoreError,
    Refused,
    RunNotFound,
    StateCacheError,
    Unauthenticated,
)
from ..runs import records as R
from ..runs import schemas as S
from ..storage import authority, codec, identity, runrefs

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..runs.chain import ChainReader
    from ..storage.store import Store


# -- reading what was deleted (gc, stats, verify) ---------------------------------------------

def deleted_runs(store: Store) -> dict[str, bytes]:
    """{run: id of its deletion} of every deleted run (``run/<R>/deleted`` set)."""
    out = {}
    for name, value in store.list_refs(runrefs.RUN_PREFIX):
        if runrefs.is_deleted_ref(name) and isinstance(value, bytes):
            run = runrefs.run_of(name)
            if run is not None:
                out[run] = value
    return out


def deletion_of(store: Store, run: str) -> tuple[bytes, dict] | None:
    """(id, payload) of the deletion of the whole run ``run``, or None if it is not deleted."""
    did = store.run_refs(run).get(runrefs.deleted_ref(run))
    if not isinstance(did, bytes):
        return None
    return did, store.deletion_object(did)


def redacted_blobs(store: Store) -> dict[bytes, bytes]:
    """{blob id: id of its redaction} of every redacted blob (``redacted/<id>`` set)."""
    out = {}
    for name, value in store.list_refs(runrefs.REDACTED_PREFIX):
        if isinstance(value, bytes):
            try:
                out[codec.parse_id(name[len(runrefs.REDACTED_PREFIX):])] = value
            except InvalidInput:
                continue
    return out


def covered(store: Store) -> tuple[set[bytes], set[bytes]]:
    """(ids of every deleted record, ids of every redacted blob): what deletions cover, decided by
    the deletion objects — the records their ``records`` rows list, and every record of each run a
    ``run`` deletion names (those read from the log's chain index: a run deletion lists no rows).
    gc drops these bodies, except a blob some live record still names."""
    records: set[bytes] = set()
    for name, value in store.list_refs(runrefs.RUN_PREFIX):
        run = runrefs.run_of(name)
        if run is None or not isinstance(value, bytes):
            continue
        if runrefs.is_deletions_ref(name):
            records.update(store.covered_records(run, value))
        elif runrefs.is_deleted_ref(name):
            records.update(run_records(store, run))
    return records, set(redacted_blobs(store))


def covered_in(store: Store, log: Any) -> set[bytes]:
    """``covered``'s records, of the deletions whose refs are in ``log`` (one log of the store)."""
    records: set[bytes] = set()
    for name, value in list(log.tables.refs.items()):
        run = runrefs.run_of(name)
        if run is None or not isinstance(value, bytes):
            continue
        if runrefs.is_deletions_ref(name):
            records.update(store.covered_records(run, value))
        elif runrefs.is_deleted_ref(name):
            records.update(run_records(store, run))
    return records


def run_records(store: Store, run: str) -> set[bytes]:
    """Every record of run ``run`` its log's chain index places (bodies not read)."""
    log = store.logs.run_log(run)
    tips = {b for (r, b) in log.tables.tips if r == run}
    return {oid for b in tips for _lsn, oid in log.iter_chain(run, b, 0)}


def check_authority(store: Store, log: Any = None) -> None:
    """CorruptLog (exit 6, one line naming it) if a deletion the store's refs name breaks the
    authority rule as of its entry (objstore.storage.authority). Every reader refuses such an entry
    where it applies it; this is for what acts on deletions for good (gc), whose tables may come
    from a checkpoint (derived data a forger's process can write past the entry). Reads each
    deletion object and its signer's grants (what gc reads anyway), once per process: a second call
    (``clone`` checks before it makes DIR, ``transfer`` again) and the reads after it skip what it found kept."""
    view = authority.StoreView(store)
    logs = (e for _r, e in store.logs.all_logs()) if log is None else [log]
    for eng in logs:
        done = eng.tables.checked  # kept deletions this process knows (LogState.obey's): each checked once
        eng.refresh()
        for name, value in list(eng.tables.refs.items()):
            if authority.ref_wants(name) is None:
                continue
            got = authority.ref_problem(view, name, value, done=done)
            if got is not None:
                raise CorruptLog(eng.where(got[0]) if hasattr(eng, "where") else name, f"{got[2]}; refusing to act on it (run 'objstore verify')")


# -- writing deletions ------------------------------------------------------------------------

def _reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("a deletion needs a reason (--reason TEXT, not empty)")
    return codec.check_text(reason, "deletion reason")


def _key(store: Store, key: identity.Key | None) -> identity.Key | None:
    """The signing key: ``key``, else the default one (like the grant commands); None when the
    store has no owner key (deletions are unsigned there)."""
    if identity.owner_public(store) is None:
        return None
    if key is None:
        try:
            key = identity.default_key()
        except Unauthenticated:
            raise Unauthenticated("this store has an owner key: a deletion must be signed by it or by a key granted "
                                  "'delete' (--key FILE, $OBJSTORE_KEY, or $OBJSTORE_KEYS/owner.key); nothing was written") from None
    return key


def _authority(store: Store, key: identity.Key | None, run: str | None) -> bytes | None:
    """The grant that lets ``key`` delete in ``run`` (None: it is the owner, or the store has none);
    Refused if it may not. ``run`` None: a redaction, the owner's alone."""
    if key is None:
        return None
    owner = identity.owner_public(store)
    if key.public == owner:
        return None
    if run is None:
        raise Refused(f"a redaction is signed by the store's owner key ({str(owner)[:16]}…), not {key.public[:16]}…; nothing was written")
    view = authority.StoreView(store)
    gid = authority.delete_grant(view, key.public, run, authority.run_subject(view, run))
    if gid is None:
        raise Refused(f"key {key.public[:16]}… holds no live 'delete' grant on run {run} or its subject "
                      f"(the owner grants it: objstore journal grant RUN --pubkey FILE --delete); nothing was written")
    return gid


def _deletion(scope: str, *, run: str | None, records: list | None, blob: bytes | None, reason: str, previous: bytes | None,
              key: identity.Key | None, grant: bytes | None, blobs: list | None = None) -> dict:
    obj: dict[str, Any] = {"v": R.DELETION_SCHEMA, "scope": scope, "run": run, "records": records, "blob": blob, "reason": reason,
                           "time": time.time(), "by": key.public if key is not None else None, "grant": grant,
                           "previous": previous, "sig": None}
    if blobs:
        obj["blobs"] = blobs
    if key is not None:
        obj["sig"] = key.sign(identity.object_message(obj))
    bad = S.schema_problem(R.DELETION_TYPE, obj)
    assert bad is None, bad  # built here: a problem is a bug of this module
    return obj


def _session_blobs(store: Store, refs: dict, run: str) -> list:
    """The blobs a run's journal and compaction-segment objects name (a journal's body, a segment's
    summarized turns), sorted: listed in the run's deletion, so gc removes them with the run and
    verify can tell their removal from a loss (the objects naming them go too)."""
    found: set = set()
    for name in (runrefs.journal_ref(run), runrefs.segments_ref(run)):
        cur: Any = refs.get(name)
        seen: set = set()
        while isinstance(cur, bytes) and cur not in seen:
            seen.add(cur)
            try:
                otype, value = store.get(cur)
            except ObjstoreError:
                break
            if otype not in ("journal", "segment") or not isinstance(value, dict):
                break
            for _f, ref in R.object_refs(otype, value):
                loc = store.logs.run_log(run).loc(ref)
                if loc is not None and (loc.otype if hasattr(loc, "otype") else loc[1]) == codec.BLOB:
                    found.add(ref)
            cur = value.get("previous")
    return sorted(found)


def _run_refs(log: ChainReader, run: object) -> dict:
    if not isinstance(run, str):
        raise InvalidInput(f"a run id is a string, not {type(run).__name__}")
    R.check_run_id(run)
    refs = log.store.run_refs(run)
    if not isinstance(refs.get(runrefs.branch_ref(run, 0)), bytes):
        raise RunNotFound(run)
    return refs


def _drop_cached(log: ChainReader, runs: Iterable[str]) -> None:
    """The deleted runs' rows leave the state cache (best effort: a busy or read-only cache keeps
    them, and never serves them, since every read of a deleted run stops at its deleted ref)."""
    state = getattr(log, "state", None)
    if state is None:
        return
    for run in runs:
        try:
            state.drop(run)
        except StateCacheError:
            return


def delete_runs(log: RunLog, runs: Iterable[str], *, reason: str, key: identity.Key | None = None) -> list[bytes]:
    """Delete whole runs in one entry; returns each run's deletion id (an already deleted run's
    existing one: no-op). RunNotFound for an unknown run, nothing written. On object storage,
    where a commit touches one run's log, each run is one commit, in the order given: after a
    failure the runs before it are deleted, and running it again finishes the rest (idempotent)."""
    runs = list(runs)
    if not runs:
        raise InvalidInput("name at least one run to delete")
    if len(set(runs)) != len(runs):
        raise InvalidInput("a run is named twice")
    reason = _reason(reason)
    store = log.store
    for run in runs:
        _run_refs(log, run)  # unknown runs fail before a key is looked for
    key = _key(store, key)
    ids: list[bytes] = []
    fresh = []

    def one(run: str) -> bytes:
        refs = _run_refs(log, run)
        old = refs.get(runrefs.deleted_ref(run))
        if isinstance(old, bytes):
            return old
        grant = _authority(store, key, run)
        obj = _deletion(R.SCOPE_RUN, run=run, records=None, blob=None, reason=reason, previous=None, key=key, grant=grant,
                        blobs=_session_blobs(store, refs, run))
        did = store.put(codec.DELETION, obj)
        store.set_ref(runrefs.deleted_ref(run), None, did, f"delete run {run}: {reason}")
        fresh.append(run)
        return did

    per_run = store.engine.one_log_per_commit or store.logs.per_run
    try:
        if per_run:
            for run in runs:
                try:
                    ids.append(store.atomically(lambda run=run: one(run)))  # type: ignore[misc]
                except ObjstoreError as err:
                    err.landed = runs[:len(ids)]  # type: ignore[attr-defined]  # the runs deleted before it (one commit each)
                    raise
                _mark_deleted(store, run)
        else:
            with store.batch():
                for run in runs:
                    ids.append(one(run))
    finally:
        _drop_cached(log, fresh)
    return ids


def _mark_deleted(store: Store, run: str) -> None:
    """The catalog's create-once deletion marker, after the run log's deletion entry landed (the log
    decides; the marker is a finding aid listings may use, confirmed against the log)."""
    catalog = getattr(store.logs, "catalog", None)
    if catalog is not None:
        catalog.mark_deleted(run)


def delete_run(log: RunLog, run: str, *, reason: str, key: identity.Key | None = None) -> bytes:
    """Delete one whole run (see ``delete_runs``); returns its deletion id."""
    return delete_runs(log, [run], reason=reason, key=key)[0]


def _delete_rows(log: RunLog, run: str, pick: Any, *, reason: str, key: identity.Key | None) -> bytes | None:
    """One ``records`` deletion of the rows ``pick(view)`` lists [(id, branch, lsn, kind)]; None
    when every one of them is deleted already (nothing written)."""
    reason = _reason(reason)
    store = log.store
    refs = _run_refs(log, run)
    if isinstance(refs.get(runrefs.deleted_ref(run)), bytes):
        log.view(run)  # Deleted: the whole run is gone already
    key = _key(store, key)

    def commit() -> bytes | None:
        view = log.view(run)
        rows = sorted(pick(view), key=lambda r: (r[1], r[2]))
        if any(b == 0 and lsn == 0 for _o, b, lsn, _k in rows):
            raise InvalidInput(f"the run_started record of run {run} is not deleted alone: delete the whole run instead")
        done = store.covered_records(run, view.deletions)
        rows = [list(r) for r in rows if r[0] not in done]
        if not rows:
            return None
        grant = _authority(store, key, run)
        obj = _deletion(R.SCOPE_RECORDS, run=run, records=rows, blob=None, reason=reason, previous=view.deletions, key=key, grant=grant)
        did = store.put(codec.DELETION, obj)
        store.set_ref(runrefs.deletions_ref(run), view.deletions, did, f"delete {len(rows)} record{'s' if len(rows) != 1 else ''} of run {run}: {reason}")
        return did

    return store.atomically(commit)


def delete_branch_from(log: RunLog, run: str, branch: int, lsn: int, *, reason: str, key: identity.Key | None = None) -> bytes | None:
    """Delete the records of ``branch`` of ``run`` from LSN ``lsn`` to its head (its own records: a
    forked branch's inherited ones are its parent's); returns the deletion id (None: all deleted
    already). The branch stays, with header-only records; appends to it go on."""
    for what, v in (("branch", branch), ("LSN", lsn)):
        if type(v) is not int or v < 0:
            raise InvalidInput(f"{what} must be an integer >= 0, got {v!r}")

    def pick(view: Any) -> list:
        if branch not in view.heads:
            raise BranchNotFound(branch, run)
        head_lsn = log.next_of(view.head(branch))[0] - 1
        if lsn > head_lsn:
            raise InvalidInput(f"branch {branch} of run {run} has no record at LSN {lsn} (its head is at LSN {head_lsn})")
        return [(bytes(r.id), r.branch, r.lsn, r.kind) for r in log.iter_own(view, branch, start=lsn)]  # plain, as stored

    return _delete_rows(log, run, pick, reason=reason, key=key)


def delete_records(log: RunLog, run: str, ids: Iterable[bytes], *, reason: str, key: identity.Key | None = None) -> bytes | None:
    """Delete the records ``ids`` (all of run ``run``, each on one of its branches); returns the
    deletion id (None: all deleted already). InvalidInput for an id that is not such a record."""
    ids = list(ids)
    if not ids:
        raise InvalidInput("name at least one record to delete")
    store = log.store

    def pick(view: Any) -> list:
        rows = []
        for oid in ids:
            if type(oid) is not bytes or len(oid) != 32:
                if not (isinstance(oid, bytes) and len(oid) == 32):
                    raise InvalidInput("a record id is 32 bytes (parse hex with codec.parse_id)")
                oid = bytes(oid)  # an Id (codec.Id): the plain bytes it is
            hit = store.covered_records(run, view.deletions).get(oid)
            if hit is not None:
                rows.append((oid, hit[2], hit[3], hit[4]))
                continue
            try:
                otype, v = store.get(oid)
            except ObjectNotFound:
                raise ObjectNotFound(oid.hex()) from None
            if otype != codec.RECORD or v.get("run") != run:
                what = f"a record of run {v.get('run')}" if otype == codec.RECORD else f"a {otype}"
                raise InvalidInput(f"{oid.hex()} is {what}, not a record of run {run}")
            if store.indexed_record(run, v["branch"], v["lsn"]) != oid:
                raise InvalidInput(f"record {oid.hex()} is not on branch {v['branch']} of run {run}")
            rows.append((oid, v["branch"], v["lsn"], v["kind"]))
        if len({r[0] for r in rows}) != len(rows):
            raise InvalidInput("a record is named twice")
        return rows

    return _delete_rows(log, run, pick, reason=reason, key=key)


def redact(log: RunLog, blob_id: bytes, *, reason: str, key: identity.Key | None = None) -> bytes:
    """Redact one blob: its id stays (records naming it still verify), every read of its body is
    ``Redacted`` from now on, and the next gc drops the body. Returns the redaction's id (an
    already redacted blob's existing one: no-op). InvalidInput for an id that is not a blob."""
    reason = _reason(reason)
    store = log.store
    if type(blob_id) is not bytes or len(blob_id) != 32:
        if not (isinstance(blob_id, bytes) and len(blob_id) == 32):
            raise InvalidInput("a blob id is 32 bytes (parse hex with codec.parse_id)")
        blob_id = bytes(blob_id)  # an Id (codec.Id): the plain bytes it is
    old = store.read_ref(runrefs.redacted_ref(blob_id))
    if isinstance(old, bytes):
        return old
    holder = store.logs.locate(blob_id)
    loc = holder.loc(blob_id)
    if loc is None:
        holder.refresh()
        loc = holder.loc(blob_id)
    held = getattr(store.logs, "held", None)
    got = held.get(blob_id) if held is not None and loc is None else None
    if loc is None and got is None:
        raise ObjectNotFound(blob_id.hex())
    # a blob this process holds (put outside any run's batch, format 6) is redacted before any log stores it
    if got is not None:
        otype = got[0]
    else:
        assert loc is not None
        otype = loc.otype if hasattr(loc, "otype") else loc[1]
    if otype != codec.BLOB:
        raise InvalidInput(f"{blob_id.hex()} is a {otype}, not a blob: only a blob is redacted (delete records with 'objstore delete')")
    key = _key(store, key)
    grant = _authority(store, key, None)
    def commit() -> bytes:
        old = store.read_ref(runrefs.redacted_ref(blob_id))
        if isinstance(old, bytes):
            return old
        obj = _deletion(R.SCOPE_BLOB, run=None, records=None, blob=blob_id, reason=reason, previous=None, key=key, grant=grant)
        did = store.put(codec.DELETION, obj)
        store.set_ref(runrefs.redacted_ref(blob_id), None, did, f"redact blob {blob_id.hex()[:12]}: {reason}")
        return did

    return store.atomically(commit)
