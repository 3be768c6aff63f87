"""Who may delete: the one copy of the deletion authority rule, and the object signatures it checks.

A deletion ref (``run/<R>/deleted``, ``run/<R>/deletions``, ``redacted/<id>``) moving to a
``deletion`` object hides bodies from every read at once and lets ``gc`` remove them for good, so
whether that deletion was authorised is a rule of APPLYING the entry, like the ref rules
(objstore.storage.refs): the writer refuses the entry, every reader that takes it in (catching up,
opening cold, a packed segment, an S3 log) stops before it, and verify names it. The rule:

* the object is a deletion of the scope and run (or blob) its ref names;
* where the store has an owner key (``keys/owner``, as of the entry) it is signed (``by``,
  ``sig`` over ``object_message``) by the owner, or by a key holding a live, owner-signed grant
  naming the right ``delete`` (the grant chain behind ``run/<R>/grant/<key>``, else
  ``subjects/<S>/grant/<key>`` for the run's subject; its newest owner-signed object committed at
  or before the deletion's entry, granting, not revoking), and ``grant`` names that grant; a grant
  object not signed by the owner counts for nothing; a redaction is signed by the owner only;
* each row of a ``records`` deletion names the deleted run's own record at that branch and LSN,
  of that kind, and not its run_started (LSN 0 of branch 0: that goes with the whole run only); each blob a ``run`` deletion lists (``blobs``: what gc removes with the run besides
  its records) is named by an object of the run's journal or segment chain.

``deletion_problems`` is the rule over one deletion object; ``entry_problem`` applies it to the
deletion refs an entry moves; ``ref_problem`` to the deletions behind one ref as of their own
entries (for what took them in without applying them: a checkpoint's reader, gc); ``moves_deletion`` is the cheap name check that keeps every other
commit from paying anything. The log is read through a small view (``EntryView`` for an entry
being applied, ``StoreView`` for a store at its position: verify, objstore.lifecycle.delete).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import ObjstoreError
from . import codec, runrefs

SCOPE_RUN, SCOPE_RECORDS, SCOPE_BLOB = "run", "records", "blob"  # a deletion's scopes (runs.records.SCOPES)
DELETE_RIGHT = "delete"  # the grant right that lets a key delete (runs.records.DELETE_RIGHT)
BREACH = "bad-deletion "  # how the rule's one line starts (verify names such an entry bad-deletion)
_OBJ_DOMAIN = b"objstore-signed-object-v1\x00"
_SUFFIXES = ("/" + runrefs.DELETED, "/" + runrefs.DELETIONS)
_REDACTED = runrefs.REDACTED_PREFIX
_RUN = runrefs.RUN_PREFIX


# -- signed objects -------------------------------------------------------------------------------

def verify_sig(public: str, signature: str, message: bytes) -> bool:
    # imported here: every process imports the engine, few ever check a signature
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public)).verify(bytes.fromhex(signature), message)
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


def object_message(value: dict) -> bytes:
    """What a signed object's ``sig`` covers: every other field, as canonical JSON."""
    return _OBJ_DOMAIN + codec.canonical_json({k: v for k, v in value.items() if k != "sig"})


def object_signed_by(value: dict, public: str) -> bool:
    return value.get("signer") == public and isinstance(value.get("sig"), str) and verify_sig(public, value["sig"], object_message(value))


# -- what the rule reads -----------------------------------------------------------------------------

class View(Protocol):
    def ref(self, name: str) -> Any: ...
    def body(self, oid: bytes) -> bytes | None: ...  # canonical bytes; None: not stored, or its body removed
    def entry_of(self, oid: bytes) -> int | None: ...
    def otype(self, oid: bytes) -> str | None: ...
    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None: ...


class EntryView:
    """The log as an entry being applied sees it: the tables before it, with its own moves and
    objects (``bodies``: the entry's objects' canonical bytes) on top."""

    def __init__(self, engine: Any, n: int, moves: list, types: dict, bodies: Callable[[bytes], bytes | None], chain: list = ()) -> None:  # type: ignore[assignment]
        self.engine, self.n, self.types, self.bodies = engine, n, types, bodies
        self.moved = {m[0]: m[2] for m in moves}
        self.chain = {(r, b, lsn): oid for r, b, lsn, oid in chain}  # the entry's own records (a copy's transfer lands them with their deletion)

    def ref(self, name: str) -> Any:
        return self.moved[name] if name in self.moved else self.engine.tables.refs.get(name)

    def body(self, oid: bytes) -> bytes | None:
        if oid in self.types:
            return self.bodies(oid)
        if self.engine.loc(oid) is None:  # never read() a missing id: that refreshes, mid-apply
            return None
        try:
            return bytes(self.engine.read(oid))
        except ObjstoreError:
            return None

    def entry_of(self, oid: bytes) -> int | None:
        return self.n if oid in self.types else self.engine.loc_entry(oid)

    def otype(self, oid: bytes) -> str | None:
        if oid in self.types:
            return str(self.types[oid])
        loc = self.engine.loc(oid)
        return None if loc is None else (loc.otype if hasattr(loc, "otype") else loc[1])

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        got = self.chain.get((run, branch, lsn))
        if got is not None:
            return got
        return self.engine.record_at(run, branch, lsn) if lsn >= 0 else None


class StoreView(EntryView):
    """A store at its reader's position (inside a batch: as the batch sees its refs)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store.engine, 0, [], {}, lambda oid: None)
        self.store = store

    def ref(self, name: str) -> Any:
        return self.store.read_ref(name)

    def body(self, oid: bytes) -> bytes | None:
        self.engine = self.store.logs.locate(oid)  # the log holding it (a store of one log: that log)
        return super().body(oid)

    def entry_of(self, oid: bytes) -> int | None:
        return self.store.logs.locate(oid).loc_entry(oid)

    def otype(self, oid: bytes) -> str | None:
        self.engine = self.store.logs.locate(oid)
        return super().otype(oid)

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        return self.store.indexed_record(run, branch, lsn)


def _decoded(view: View, oid: Any, want: str) -> dict | None:
    if type(oid) is not bytes:
        return None
    raw = view.body(oid)
    if raw is None:
        return None
    try:
        t, v = codec.decode(raw, oid, False)
    except (ObjstoreError, ValueError, TypeError):
        return None
    return v if t == want and isinstance(v, dict) else None


def owner_at(view: View, at_entry: int | None = None) -> str | None:
    """The owner public key (hex) as of entry ``at_entry`` (None: as the view stands): the blob
    behind the write-once ref ``keys/owner``, if it was stored by then."""
    oid = view.ref(runrefs.OWNER_REF)
    if type(oid) is not bytes:
        return None
    if at_entry is not None:
        e = view.entry_of(oid)
        if e is not None and e > at_entry:
            return None
    raw = view.body(oid)
    try:
        text = codec.decode(raw, oid, False)[1].strip().decode("ascii").lower() if raw is not None else ""
    except (ObjstoreError, ValueError, TypeError, AttributeError):
        text = ""
    # set_owner stores the key as 64 hex digits; anything else is an owner key nobody can match
    return text if len(text) == 64 else "unreadable owner key"


def grant_counts(ref: str, g: dict, owner: str | None) -> bool:
    """Whether a grant object counts behind ``ref``: signed by the owner key and about the key,
    run and subject the ref names (a genuine grant copied behind another ref grants nothing). The
    one copy of the rule: the journal Host (who may read and write) and the deletion authority
    (who may delete) both count grants with it."""
    if owner is None or not object_signed_by(g, owner):
        return False  # unsigned (legacy) or forged objects grant nothing
    scope, _, key = ref.rpartition("/grant/")
    kind, _, name = scope.partition("/")
    if g.get("grantee") != key:
        return False
    return g.get("run") == name if kind == "run" else (g.get("run") is None and g.get("subject") == name)


def effective_grant(view: View, ref: str, owner: str | None, at_entry: int | None) -> tuple[bytes, dict] | None:
    """(id, value) of the newest owner-signed grant object about ``ref`` committed at or before
    ``at_entry`` (None: any), or None."""
    gid = view.ref(ref)
    seen: set = set()
    while type(gid) is bytes and gid not in seen:
        seen.add(gid)
        g = _decoded(view, gid, codec.GRANT)
        if g is None:
            return None
        if grant_counts(ref, g, owner):
            e = view.entry_of(gid)
            if at_entry is None or (e is not None and e <= at_entry):
                return gid, g
        gid = g.get("previous")
    return None


def run_subject(view: View, run: str) -> str | None:
    """A run's subject from its run_started record, or None when it cannot be read (gc removed it)."""
    v = _decoded(view, view.record_at(run, 0, 0), codec.RECORD)
    body = v.get("body") if v is not None else None
    s = body.get("subject") if isinstance(body, dict) else None
    return s if isinstance(s, str) else None


def delete_grant(view: View, key: str, run: str, subject: str | None, at_entry: int | None = None, owner: Any = False) -> bytes | None:
    """The id of the grant that lets public key ``key`` delete in ``run`` (as of log entry
    ``at_entry``; None: now), or None. A run grant chain with a counting object decides alone (a
    revocation there is not overruled by a subject grant), as the journal Host decides."""
    if owner is False:
        owner = owner_at(view, at_entry)
    got = effective_grant(view, runrefs.run_grant_ref(run, key), owner, at_entry)
    if got is None and subject is not None:
        got = effective_grant(view, runrefs.subject_grant_ref(subject, key), owner, at_entry)
    if got is None:
        return None
    gid, g = got
    ok = g.get("action") == "grant" and DELETE_RIGHT in (g.get("rights") or ())
    return gid if ok else None


def _hx(v: object) -> str:
    return v.hex() if isinstance(v, bytes) else repr(v)


def deletion_problems(view: View, value: dict, at_entry: int | None) -> list[str]:
    """What is wrong with the authority of a deletion object applied at entry ``at_entry``: its
    signature against ``by``, that ``by`` was the owner or held a live delete grant then (a
    redaction: the owner only), and that each covered record is the run's record at that place.
    Its shape is the schema's (runs.records); fields of the wrong type here are named as such."""
    by, sig, grant, run, scope = value.get("by"), value.get("sig"), value.get("grant"), value.get("run"), value.get("scope")
    if not (by is None or type(by) is str) or not (sig is None or type(sig) is str) or (by is None) != (sig is None) \
            or not (grant is None or type(grant) is bytes) or not (run is None or type(run) is str) or scope not in (SCOPE_RUN, SCOPE_RECORDS, SCOPE_BLOB):
        return ["it is not a well-formed deletion object (scope, run, by, sig, grant)"]
    out = []
    owner = owner_at(view, at_entry)
    if owner is not None and by is None:
        out.append("unsigned, but the store has an owner key")
    elif by is not None and not verify_sig(by, sig, object_message(value)):  # type: ignore[arg-type]  # sig is set with by
        out.append(f"its signature does not verify against its signer {by[:16]}…")
    elif by is not None and owner is not None and by != owner:
        if scope == SCOPE_BLOB or run is None:
            out.append(f"a redaction is signed by the owner key only, not {by[:16]}…")
        else:
            subject = run_subject(view, run)
            first = view.record_at(run, 0, 0)
            if subject is None and grant is not None and first is not None and view.body(first) is None:
                # gc removed the run's run_started (a deleted run): the subject is the one the named
                # owner-signed grant is about (delete_grant still checks it counts for this key). A
                # run the log does not place, or whose run_started names no subject, has none: only
                # the owner or a run grant deletes it.
                g = _decoded(view, grant, codec.GRANT)
                subject = g.get("subject") if g is not None else None
            gid = delete_grant(view, by, run, subject if isinstance(subject, str) else None, at_entry, owner)
            if gid is None:
                out.append(f"its signer {by[:16]}… held no live delete grant on run {run} at entry {at_entry}")
            elif grant != gid:
                out.append(f"it names grant {_hx(grant)}, the signer's delete grant is {gid.hex()}")
    elif by is not None and by == owner and grant is not None:
        out.append("signed by the owner key, yet names a grant")
    rows = value.get("records") or ()
    if scope == SCOPE_RECORDS and (run is None or type(rows) is not list):
        return out + ["it is not a well-formed deletion object (records)"]
    for row in rows if scope == SCOPE_RECORDS else ():
        if not (type(row) is list and len(row) == 4 and type(row[0]) is bytes and type(row[1]) is int and type(row[2]) is int):
            out.append("it is not a well-formed deletion object (a records row)")
            break
        oid, branch, lsn, kind = row
        if branch == 0 and lsn == 0:
            out.append(f"covers the run_started record of run {run} (LSN 0 of branch 0): only a run deletion does")
            continue
        if view.record_at(run, branch, lsn) != oid:  # type: ignore[arg-type]  # run checked above
            out.append(f"covers {oid.hex()} as run {run} branch {branch} LSN {lsn}, which the log's index does not hold there")
            continue
        raw = view.body(oid)
        got_kind = kind  # its body is gone (gc): the index row above placed it
        if raw is not None:
            try:
                v = codec.decode(raw, oid, False)[1]
                got_kind = v.get("kind") if isinstance(v, dict) else None
            except (ObjstoreError, ValueError, TypeError):
                pass
        if got_kind != kind:
            out.append(f"covers {oid.hex()} as a {kind} record, it is a {got_kind}")
    listed = value.get("blobs")
    if listed is not None and not (type(listed) is list and all(type(x) is bytes for x in listed)):
        return out + ["it is not a well-formed deletion object (blobs)"]
    if scope == SCOPE_RUN and type(run) is str and listed:
        unnamed = _unnamed_session_blobs(view, run, listed)
        if unnamed is not None:
            out.append(f"lists blob {_hx(unnamed)}, which no journal or segment object of run {run} names")
    if scope == SCOPE_BLOB and type(value.get("blob")) is bytes:
        t = view.otype(value["blob"])
        if t is not None and t != codec.BLOB:
            out.append(f"redacts {value['blob'].hex()}, which is a {t}, not a blob")
    return out


def _unnamed_session_blobs(view: View, run: str, listed: list) -> object:
    """A blob of ``listed`` that no object of the run's journal and segment chains names (its id in
    the object's bytes, as gc keeps what a journal names), else None. A chain object whose body is
    gone (gc removed it with the run) cannot be read: the list is then taken as made."""
    want = set(listed)
    for ref in (runrefs.journal_ref(run), runrefs.segments_ref(run)):
        cur, seen = view.ref(ref), set()
        while type(cur) is bytes and cur not in seen and want:
            seen.add(cur)
            raw = view.body(cur)
            if raw is None:
                return None
            want = {b for b in want if b not in raw}
            try:
                v = codec.decode(raw, cur, False)[1]
            except (ObjstoreError, ValueError, TypeError):
                break
            cur = v.get("previous") if isinstance(v, dict) else None
    return next((b for b in listed if b in want), None)


# -- the rule of applying an entry ---------------------------------------------------------------------

def moves_deletion(moves: list | dict) -> bool:
    """Whether an entry moves a deletion ref (cheap: a name check per move, true only for rare entries);
    ``moves``: its moves, or {name: value} of the refs it moves."""
    for m in moves:
        name = m if type(m) is str else m[0]
        # a pre-filter (a name outside run/ that ends so is let through, and ``ref_wants`` drops it)
        if name.endswith(_SUFFIXES) or name.startswith(_REDACTED):
            return True
    return False


def ref_wants(name: str) -> tuple[str, str | None, str | None] | None:
    """(scope, run, blob id hex) a deletion behind ref ``name`` must have, or None: not a deletion ref."""
    if name.startswith(_REDACTED):
        return SCOPE_BLOB, None, name[len(_REDACTED):]
    run = runrefs.run_of(name) if name.startswith(_RUN) else None
    if run is None:
        return None
    if runrefs.is_deleted_ref(name):
        return SCOPE_RUN, run, None
    if runrefs.is_deletions_ref(name):
        return SCOPE_RECORDS, run, None
    return None


def entry_problem(view: View, n: int, moves: list) -> str | None:
    """What breaks the deletion authority rule in entry ``n`` (one line naming the deletion), or None."""
    for m in moves:
        name, new = m[0], m[2]
        want = ref_wants(name)
        if want is None or type(new) is not bytes:
            continue
        value = _decoded(view, new, codec.DELETION)
        if value is None:
            return f"{BREACH}{new.hex()}: {name} moves to it, which is not a readable deletion object"
        blob = value.get("blob")
        got = (value.get("scope"), value.get("run"), blob.hex() if type(blob) is bytes else None)
        if got != want:
            return f"{BREACH}{new.hex()}: {name} moves to a {got[0]} deletion of {got[1] or got[2]}"
        found = deletion_problems(view, value, n)
        if found:
            return f"{BREACH}{new.hex()}: {found[0]} ({name})"
    return None


def ref_problem(view: View, name: str, value: Any, upto: int | None = None, done: set | None = None) -> tuple[bytes, int, str] | None:
    """(its id, its entry, one line) of the first deletion behind deletion ref ``name`` at ``value`` (a
    ``deletions`` ref: each one back through ``previous``) that breaks the rule as of its own entry
    (the entry storing it, which moved the ref to it), or None. ``upto``: only those stored at or
    before that entry (a later one was checked where its entry was applied); ``done``: ids known to
    keep the rule (the walk stops at one), and each one found to keep it is added."""
    did, seen = value, set()
    while type(did) is bytes and did not in seen and (done is None or did not in done):
        seen.add(did)
        at = view.entry_of(did)
        if upto is None or at is None or at <= upto:
            bad = entry_problem(view, at if at is not None else 0, [[name, None, did]])
            if bad is not None:
                return did, (at if at is not None else 0), bad
        if done is not None:
            done.add(did)
        v = _decoded(view, did, codec.DELETION) if runrefs.is_deletions_ref(name) else None
        did = v.get("previous") if v is not None else None
    return None
