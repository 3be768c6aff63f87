"""Grants: who may read and write a session's journal, as objects signed by the owner key (docs/JOURNAL.md, condition 8).

A grant (schema 2) names a grantee's public key, a role (``worker`` or ``job``), rights
(``read``, ``write``; ``delete`` for recorded deletion, issue 17) and a scope — one session (``run/<run>/grant/<key>``) or every session of
a subject (``subjects/<subject>/grant/<key>``) — and is signed by the store's owner key. A
revocation or a supersession is a new signed grant object behind the same forward-only ref,
never an erasure. Whether a key may act is decided by the Host (``objstore.journal.host``) from these
objects, never from a name the caller gives itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import InvalidInput, Refused
from ..runs.records import DEFAULT_RIGHTS, GRANT_SCHEMA, RIGHTS, ROLES
from ..storage import codec, identity, runrefs
from ..storage.identity import Key
from ..storage.refs import check_ref_name
from ..storage.runrefs import run_grant_ref, subject_grant_ref

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..runs.chain import ChainReader


grant_ref = run_grant_ref  # the name the journal API has always used


def _check_owner(log: ChainReader, key: Key) -> None:
    owner = identity.owner_public(log.store)
    if owner is None:
        raise Refused("this store has no owner key yet (run 'objstore init', which creates one)")
    if key.public != owner:
        raise Refused(f"only the store's owner key signs grants (this key is {key.public[:16]}…, the owner is {owner[:16]}…)")


def _grant_obj(log: ChainReader, ref: str, *, run: str | None, subject: str, grantee: str, action: str, role: str, rights: Iterable[str],
               name: str, reason: str, supersedes: str | None, owner: Key) -> dict:
    old = log.store.read_ref(ref)
    seq = log.store.get_typed(old, codec.GRANT).get("seq", 0) + 1 if isinstance(old, bytes) else 1
    obj = {"v": GRANT_SCHEMA, "run": run, "subject": subject, "grantee": grantee, "name": name, "action": action,
           "role": role, "rights": list(rights), "supersedes": supersedes, "previous": old, "seq": seq,
           "reason": reason, "time": time.time()}
    return identity.sign_object(owner, obj)


def _scope(log: ChainReader, run: str | None, subject: str | None) -> tuple[str | None, str]:
    if run is not None:
        s = log.subject(run)  # raises RunNotFound
        if subject is not None and subject != s:
            raise InvalidInput(f"run {run} belongs to subject {s!r}, not {subject!r}")
        return run, s
    if not isinstance(subject, str) or not subject or "/" in subject:
        raise InvalidInput("a grant names a run (session) or a subject (without '/')")
    check_ref_name(subject_grant_ref(subject, "0" * 64))  # the subject must fit in a ref name
    return None, subject


def _write_grant(log: RunLog, owner: Key, run: str | None, subject: str | None, public: str, action: str, *, role: str = "worker",
                 rights: Iterable[str] = DEFAULT_RIGHTS, name: str = "", reason: str = "", supersedes: str | None = None) -> bytes:
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


def grant(log: RunLog, owner: Key, run: str | None, public: str, *, subject: str | None = None, role: str = "worker",
          rights: Iterable[str] = DEFAULT_RIGHTS, name: str = "", reason: str = "") -> bytes:
    """Grant ``public`` (a worker's or job's key) rights on a session (``run``) or, with ``run=None``,
    on every session of ``subject``. Signed by the owner key; returns the grant object's id.
    ``rights`` default to read and write; ``delete`` (recorded deletion of the run, or of any run
    of the subject: ``objstore.lifecycle.delete``) is given only when named."""
    return _write_grant(log, owner, run, subject, public, "grant", role=role, rights=rights, name=name, reason=reason)


def revoke(log: RunLog, owner: Key, run: str | None, public: str, *, subject: str | None = None, reason: str = "revoked") -> bytes:
    """Revoke a key's grant (a new signed grant object; the old one stays in the chain)."""
    ref_run, subj = _scope(log, run, subject)
    ref = grant_ref(ref_run, public) if ref_run is not None else subject_grant_ref(subj, public)
    with log.store.batch():  # the role and name copied from the grant the revocation follows
        cur = log.store.read_ref(ref)
        g = log.store.get_typed(cur, codec.GRANT) if isinstance(cur, bytes) else {}
        rid = _write_grant(log, owner, run, subject, public, "revoke", role=g.get("role", "worker"), rights=("read",),
                           name=g.get("name") or "", reason=reason)
    if ref_run is None:
        _fence_subject(log, subj)
    return rid


def _fence_subject(log: RunLog, subject: str) -> None:
    """After a subject-wide revocation (a store-log commit), fence each run of the subject: its log accepts no
    entry judged at a store-log position before the revocation (a store of one log: nothing to do)."""
    if not log.store.logs.per_run:
        return

    def fence() -> None:
        for run in log.store.subject_runs(subject):
            if runrefs.branch_ref(run, 0) in log.store.run_refs(run):  # a run whose start was killed has no log to fence
                log.store.fence(run)

    log.store.after_commit(fence)  # inside a caller's batch: once it has committed (a fence writes each run's log)


def supersede(log: RunLog, owner: Key, run: str | None, old_public: str, new_public: str, *, subject: str | None = None,
              name: str = "", reason: str = "") -> tuple[bytes, bytes]:
    """A new worker takes over: in one commit the old key's grant is revoked ("superseded by …")
    and the new key granted ("supersedes …")."""
    old_public, new_public = identity.check_public(old_public), identity.check_public(new_public)
    ref_run, subj = _scope(log, run, subject)
    old_ref = grant_ref(ref_run, old_public) if ref_run is not None else subject_grant_ref(subj, old_public)
    with log.store.batch():  # the old name read from the grant the revocation follows
        cur = log.store.read_ref(old_ref)
        old_name = log.store.get_typed(cur, codec.GRANT).get("name") or "" if isinstance(cur, bytes) else ""
        r = _write_grant(log, owner, run, subject, old_public, "revoke", name=old_name,
                         reason=reason or f"superseded by {name or new_public[:16] + '…'}", supersedes=None)
        g = _write_grant(log, owner, run, subject, new_public, "grant", name=name, reason=reason or "supersedes a worker",
                         supersedes=old_public)
    if ref_run is None:
        _fence_subject(log, subj)
    return r, g


def grant_chain(log: ChainReader, ref: str) -> list[tuple[bytes, dict]]:
    """(id, grant) of a grant ref's chain, oldest first."""
    return grant_chain_from(log, log.store.read_ref(ref))


def grant_chain_from(log: ChainReader, head: object) -> list[tuple[bytes, dict]]:
    """(id, grant) of the chain ending at ``head`` (a grant ref's value, say as of a Host
    request's position; None: no chain), oldest first."""
    out = []
    gid = head
    while isinstance(gid, bytes):
        g = log.store.get_typed(gid, codec.GRANT)
        out.append((gid, g))
        gid = g.get("previous")
    out.reverse()
    return out


def grant_history(log: ChainReader, run: str, public: str) -> list[dict]:
    return [g for _, g in grant_chain(log, grant_ref(run, public))]


