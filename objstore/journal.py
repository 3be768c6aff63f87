"""Sessions, journal versions, signed grants and the TaskStore (seed T-745).

A *session* is a run whose records are conversation ``turn``s. Its *journal* is a
versioned document about the work: each version an immutable ``journal`` object
(schema 2) behind the forward-only ref ``run/<run>/journal``. A version names the
record it reflects through (``reflects_through``: a turn is reflected when it is
that record or one of its ancestors, following parent links through fork
objects), carries the canonical-JSON body as a blob and, as its proof of
authorship, the writer's signed request.

*Grants* (schema 2) are objects signed by the store's owner key naming a
grantee's public key, chained behind ``run/<run>/grant/<public key>`` (or
``subjects/<subject>/grant/<public key>`` for a subject-wide grant); a
revocation or supersession is a new signed grant object, never an erasure.
Whether a key may do something is decided by the Host (``objstore.host``) from
these signed objects, never from a name the caller gives itself.

Tasks (the TaskStore) are records ``task_opened {task, title}`` and
``task_closed {task, outcome}``; a branch's open tasks are the fold of its
lineage.

This module also re-exports the compaction core (``objstore.compaction``) and
the Hosts (``objstore.host``), so ``from objstore import journal as J`` reaches
the whole T-745 surface.
"""

from __future__ import annotations

import hashlib
import json
import time

from . import codec, identity
from . import records as R
from .errors import InvalidInput, Refused
from .identity import Key
from .refs import check_ref_name
from .runrefs import journal_ref, run_grant_ref, segments_ref, subject_grant_ref

JOURNAL_SCHEMA = 2
GRANT_SCHEMA = 2
ROLES = ("worker", "job")
RIGHTS = ("read", "write")
MAX_BODY_DEPTH = codec.MAX_JSON_DEPTH  # nesting levels of a journal body: the limit of every JSON input


grant_ref = run_grant_ref  # the name the T-745 surface has always used


# -- grants: objects signed by the owner key -------------------------------------------------------

def _check_owner(log, key: Key) -> None:
    owner = identity.owner_public(log.store)
    if owner is None:
        raise Refused("this store has no owner key yet (run 'objstore init', which creates one)")
    if key.public != owner:
        raise Refused(f"only the store's owner key signs grants (this key is {key.public[:16]}…, the owner is {owner[:16]}…)")


def _grant_obj(log, ref: str, *, run, subject, grantee, action, role, rights, name, reason, supersedes, owner: Key) -> dict:
    old = log.store.read_ref(ref)
    seq = log.store.get_typed(old, codec.GRANT).get("seq", 0) + 1 if old else 1
    obj = {"v": GRANT_SCHEMA, "run": run, "subject": subject, "grantee": grantee, "name": name, "action": action,
           "role": role, "rights": list(rights), "supersedes": supersedes, "previous": old, "seq": seq,
           "reason": reason, "time": time.time()}
    return identity.sign_object(owner, obj)


def _scope(log, run: str | None, subject: str | None) -> tuple[str | None, str]:
    if run is not None:
        s = log.subject(run)  # raises RunNotFound
        if subject is not None and subject != s:
            raise InvalidInput(f"run {run} belongs to subject {s!r}, not {subject!r}")
        return run, s
    if not isinstance(subject, str) or not subject or "/" in subject:
        raise InvalidInput("a grant names a run (session) or a subject (without '/')")
    check_ref_name(subject_grant_ref(subject, "0" * 64))  # the subject must fit in a ref name
    return None, subject


def _write_grant(log, owner: Key, run, subject, public, action, *, role="worker", rights=RIGHTS, name="", reason="",
                 supersedes=None) -> bytes:
    _check_owner(log, owner)
    public = identity.check_public(public)
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}")
    rights = sorted(set(rights))
    if not rights or any(r not in RIGHTS for r in rights):
        raise InvalidInput(f"rights must be some of {', '.join(RIGHTS)}")
    run, subject = _scope(log, run, subject)
    ref = grant_ref(run, public) if run is not None else subject_grant_ref(subject, public)
    check_ref_name(ref)
    with log.store.batch():
        obj = _grant_obj(log, ref, run=run, subject=subject, grantee=public, action=action, role=role, rights=rights,
                         name=name, reason=reason, supersedes=supersedes, owner=owner)
        gid = log.store.put(codec.GRANT, obj)
        log.store.set_ref(ref, obj["previous"], gid, f"{action} {name or public[:16]}")
    return gid


def grant(log, owner: Key, run: str | None, public: str, *, subject: str | None = None, role: str = "worker",
          rights=RIGHTS, name: str = "", reason: str = "") -> bytes:
    """Grant ``public`` (a worker's or job's key) rights on a session (``run``) or, with ``run=None``,
    on every session of ``subject``. Signed by the owner key; returns the grant object's id."""
    return _write_grant(log, owner, run, subject, public, "grant", role=role, rights=rights, name=name, reason=reason)


def revoke(log, owner: Key, run: str | None, public: str, *, subject: str | None = None, reason: str = "revoked") -> bytes:
    """Revoke a key's grant (a new signed grant object; the old one stays in the chain)."""
    ref_run, subj = _scope(log, run, subject)
    ref = grant_ref(ref_run, public) if ref_run is not None else subject_grant_ref(subj, public)
    cur = log.store.read_ref(ref)
    g = log.store.get_typed(cur, codec.GRANT) if isinstance(cur, bytes) else {}
    return _write_grant(log, owner, run, subject, public, "revoke", role=g.get("role", "worker"), rights=("read",),
                        name=g.get("name") or "", reason=reason)


def supersede(log, owner: Key, run: str | None, old_public: str, new_public: str, *, subject: str | None = None,
              name: str = "", reason: str = "") -> tuple[bytes, bytes]:
    """A new worker takes over: in one commit the old key's grant is revoked ("superseded by …")
    and the new key granted ("supersedes …")."""
    old_public, new_public = identity.check_public(old_public), identity.check_public(new_public)
    ref_run, subj = _scope(log, run, subject)
    old_ref = grant_ref(ref_run, old_public) if ref_run is not None else subject_grant_ref(subj, old_public)
    cur = log.store.read_ref(old_ref)
    old_name = log.store.get_typed(cur, codec.GRANT).get("name") or "" if isinstance(cur, bytes) else ""
    with log.store.batch():
        r = _write_grant(log, owner, run, subject, old_public, "revoke", name=old_name,
                         reason=reason or f"superseded by {name or new_public[:16] + '…'}", supersedes=None)
        g = _write_grant(log, owner, run, subject, new_public, "grant", name=name, reason=reason or "supersedes a worker",
                         supersedes=old_public)
    return r, g


def grant_chain(log, ref: str) -> list[tuple[bytes, dict]]:
    """(id, grant) of a grant ref's chain, oldest first."""
    out = []
    gid = log.store.read_ref(ref)
    while isinstance(gid, bytes):
        g = log.store.get_typed(gid, codec.GRANT)
        out.append((gid, g))
        gid = g.get("previous")
    out.reverse()
    return out


def grant_history(log, run: str, public: str) -> list[dict]:
    return [g for _, g in grant_chain(log, grant_ref(run, public))]


# -- journal versions --------------------------------------------------------------------------------

def journal_body_bytes(body: dict) -> bytes:
    """A journal body as stored: canonical JSON (sorted keys, no spaces, non-ASCII kept)."""
    return codec.canonical_json(body)


def check_body(body) -> dict:
    """A journal body is a JSON object; its ``entries`` (what a bounded projection keeps or omits
    whole) are an ordered list of objects with unique string ids and an optional ``status``."""
    if not isinstance(body, dict):
        raise InvalidInput("a journal body is a JSON object")
    # The one rule set of every JSON input (codec.check_json_value): iterative, so a body nested
    # ~500 deep is refused rather than a RecursionError; NaN / Infinity, integers outside
    # int64/uint64 and lone surrogates are refused, not stored as null or crashing the encoder.
    codec.check_json_value(body, "journal body", InvalidInput, MAX_BODY_DEPTH)
    entries = body.get("entries")
    if entries is not None:
        if not isinstance(entries, list):
            raise InvalidInput("journal body: entries must be a list")
        seen = set()
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not e["id"]:
                raise InvalidInput(f"journal body: entries[{i}] must be an object with a non-empty string id")
            if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in e["id"]):  # the omitted: line is one line
                raise InvalidInput(f"journal body: entries[{i}].id must not hold control characters")
            if e["id"] in seen:
                raise InvalidInput(f"journal body: entry id {e['id']!r} appears twice")
            seen.add(e["id"])
            if "status" in e and not isinstance(e["status"], str):
                raise InvalidInput(f"journal body: entries[{i}].status must be a string")
    return body


def parse_body(data: bytes) -> dict:
    """A journal body from JSON text (a file, stdin) through the one input parser
    (``codec.parse_json``: no duplicate keys, finite numbers, int64/uint64, nesting within
    bounds); then ``check_body``."""
    body = codec.parse_json(data, "journal body", InvalidInput, MAX_BODY_DEPTH)
    return check_body(body)


def current_journal(log, run: str) -> tuple[bytes, dict] | None:
    jid = log.store.read_ref(journal_ref(run))
    return (jid, log.store.get_typed(jid, codec.JOURNAL)) if isinstance(jid, bytes) else None


def journal_body(log, j: dict) -> dict:
    return json.loads(log.store.get_blob(j["body"]))


def resolve_record(log, run: str, ref) -> bytes | None:
    """``reflects_through`` / ``checkpoint`` as given: None, ``latest`` (the live head record), an
    LSN on the live branch, or a record id (prefix) of this run."""
    if ref is None:
        return None
    if isinstance(ref, bytes):
        oid = ref
    elif isinstance(ref, int) and not isinstance(ref, bool):
        view = log.view(run)
        return log.record_at(view, view.live, ref)
    elif ref == "latest":
        view = log.view(run)
        head = view.head(view.live)
        otype, _ = log.store.get(head)
        if otype != codec.RECORD:
            raise InvalidInput(f"run {run}'s live branch has no record of its own yet")
        return head
    else:
        oid = log.store.resolve_id(str(ref))
    rec = log.record(oid)
    if rec.run != run:
        raise InvalidInput(f"record {oid.hex()[:12]} belongs to run {rec.run}, not {run}")
    return oid


def update_journal(log, run: str, key: Key, body: dict, *, reflects_through=None, checkpoint=None,
                   enabled: bool | None = None, host=None, expect_head: bytes | None | str = "current") -> tuple[bytes, int]:
    """Write the next journal version through a Host (default: the in-process one) as ``key``.

    The request is signed over the body hash and the expected head (default: the head now), so a
    version lands only on the head its writer saw (``Conflict`` otherwise). Returns (id, version)."""
    from .host import LocalJournalHost

    host = host or LocalJournalHost(log)
    body = check_body(body)
    data = journal_body_bytes(body)
    rt = resolve_record(log, run, reflects_through)
    cp = resolve_record(log, run, checkpoint)
    if expect_head == "current":
        cur = log.store.read_ref(journal_ref(run))
        expect_head = cur if isinstance(cur, bytes) else None
    params = {"reflects_through": rt.hex() if rt else None, "checkpoint": cp.hex() if cp else None, "enabled": enabled}
    req = identity.sign_request(key, "update", run, params=params, body=data,
                                expect_head=expect_head.hex() if expect_head else None)
    out = host.update(req, data)
    return bytes.fromhex(out["journal"]), out["version"]


def set_journal_enabled(log, run: str, key: Key, enabled: bool, *, host=None) -> tuple[bytes, int]:
    """A new version with the same body and reflection, enabled or disabled."""
    cur = current_journal(log, run)
    if cur is None:
        return update_journal(log, run, key, {}, enabled=enabled, host=host)
    _, j = cur
    rt = j.get("reflects_through") if j.get("v") == JOURNAL_SCHEMA else None
    cp = j.get("checkpoint") if isinstance(j.get("checkpoint"), bytes) else None
    return update_journal(log, run, key, journal_body(log, j), reflects_through=rt, checkpoint=cp, enabled=enabled, host=host)


def reflected_ids(log, j: dict | None) -> set[bytes]:
    """The records a journal version reflects: ``reflects_through`` and its ancestors, through
    fork objects. A legacy version (a bare ``source_end`` LSN) reflects nothing."""
    if not j or j.get("v") != JOURNAL_SCHEMA or not isinstance(j.get("reflects_through"), bytes):
        return set()
    return reflected_through(log, j["reflects_through"])


def reflected_through(log, rid: bytes | None) -> set[bytes]:
    if rid is None:
        return set()
    return {r.id for r in log.lineage_from(rid)}


# -- sessions, turns, tasks ---------------------------------------------------------------------------

def record_turn(log, run: str, role: str, text: str, *, generation: dict | None = None) -> R.Record:
    """A conversation turn: source material, content stored as a blob."""
    return log.append(run, R.TURN, {"role": role, "content": log.put_blob(text.encode("utf-8")), "origin": R.ORIGIN_SOURCE, "generation": generation})


def source_material(log, run: str, view=None) -> list[R.Record]:
    """Source material of the live timeline: turn records only, classified by record type."""
    view = view or log.view(run)
    return [r for r in log.lineage(view, view.live) if r.kind == R.TURN]


def fold_tasks(recs, tasks: list | None = None) -> list[dict]:
    """Open tasks after folding task records (oldest first) onto ``tasks``: opened order kept."""
    out = {t["task"]: dict(t) for t in (tasks or [])}
    for r in recs:
        if r.kind == R.TASK_OPENED:
            out.setdefault(r.body["task"], {"task": r.body["task"], "title": r.body["title"]})
        elif r.kind == R.TASK_CLOSED:
            out.pop(r.body["task"], None)
    return list(out.values())


def open_tasks(log, run: str, view=None) -> list[dict]:
    """The live branch's open tasks: the fold of its lineage."""
    view = view or log.view(run)
    return fold_tasks(log.iter_lineage(view, view.live))


def open_task(log, run: str, task: str, title: str = "") -> R.Record:
    with log.store.batch():
        if any(t["task"] == task for t in open_tasks(log, run)):
            raise InvalidInput(f"task {task!r} is already open in run {run}")
        return log.append(run, R.TASK_OPENED, {"task": task, "title": title})


def close_task(log, run: str, task: str, outcome: str = "done") -> R.Record:
    with log.store.batch():
        if not any(t["task"] == task for t in open_tasks(log, run)):
            raise InvalidInput(f"task {task!r} is not open in run {run}")
        return log.append(run, R.TASK_CLOSED, {"task": task, "outcome": outcome})


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# The rest of the T-745 surface, under one name.
from .host import (ABSENT, DISABLED, OUTCOMES, OVER_BUDGET, PRESENT, UNAVAILABLE, FailingHost,  # noqa: E402
                   HostUnavailable, LocalJournalHost, project)
from .compaction import (INSTRUCTIONS, CompactionResult, Snapshot, StubCompactor, classify, compact, context,  # noqa: E402
                         freeze, render, segments, start_session)

__all__ = [
    "ABSENT", "DISABLED", "OUTCOMES", "OVER_BUDGET", "PRESENT", "UNAVAILABLE", "FailingHost", "HostUnavailable",
    "LocalJournalHost", "project", "INSTRUCTIONS", "CompactionResult", "Snapshot", "StubCompactor", "classify",
    "compact", "context", "freeze", "render", "segments", "start_session",
    "journal_ref", "segments_ref", "grant_ref", "subject_grant_ref", "grant", "revoke", "supersede", "grant_chain",
    "grant_history", "journal_body_bytes", "check_body", "parse_body", "current_journal", "journal_body", "resolve_record",
    "update_journal", "set_journal_enabled", "reflected_ids", "reflected_through", "record_turn", "source_material",
    "fold_tasks", "open_tasks", "open_task", "close_task",
]
