"""Journal Hosts: the one place that selects a journal, authorizes a caller and reads.

The seed's division of labour: **the Host selects and authorizes; the compaction
core neither selects nor decides.** A Host answers a signed ``Request``
(``objstore.storage.identity``):

- ``read`` (purpose ``startup`` or ``compaction``) selects the journal — at
  startup the predecessor session's, at compaction the current session's; if
  that one is absent, disabled or unavailable, the newest journal (by log
  position) of another session of the same subject; else none — and returns one
  *answer*: a JSON object with the outcome (``present``, ``absent``,
  ``disabled``, ``unavailable``, ``over_budget``), what was tried, and a
  **bounded projection** of the body (``project``).
- ``update`` writes the next journal version, compare-and-swap on the expected
  head the request was signed over.

Authorization is decided from the log: the request's signature, its time and
nonce, and the owner-signed grant objects in the Host's snapshot. Unsigned
requests are refused with ``Unauthenticated`` (the seed's 401), job identities
with ``JobCaller`` (its 403), another session or subject, a revoked, superseded
or never-granted key with their own typed errors. A journal version is itself
checked when read: its writer's signed request must verify and the writer must
have held a write grant when the version was committed, so a version written
around the Host (through the raw store API) is reported ``unavailable``, never
served.

**One log position per request** (the seed's "same transaction"): a request captures
its position once (``At``: the refs it reads, copied together under the engine's tables
lock) and authorizes, selects and reads the journal as of it; a key revoked, or a journal
version written, by another process after the capture is not seen by that request. An
update authorizes inside its batch (the writer lock), so no revocation lands between the
decision and the write.

``LocalJournalHost`` runs in the caller's process; ``objstore.journal.backend`` serves
the same Host over a Unix socket (``objstore journal-serve``) as its own process.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ..errors import (
    Conflict,
    HostUnavailable,
    InvalidInput,
    JobCaller,
    ObjstoreError,
    ReplayedRequest,
    RunNotFound,
    StaleRequest,
    Unauthenticated,
    WriterRevoked,
    WrongSession,
    WrongSubject,
)
from ..runs.records import ABSENT, DISABLED, OUTCOMES, OVER_BUDGET, PRESENT, UNAVAILABLE, check_run_id
from ..storage import authority, codec, identity, refs, runrefs
from ..storage.identity import Request
from .grants import grant_chain, grant_chain_from
from .versions import JOURNAL_SCHEMA, check_body

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..storage.log.format import Position
    from ..storage.store import Store


PURPOSES = ("startup", "compaction")
ANSWER_SCHEMA = 1


class JournalHost(Protocol):
    """What a caller talks to: ``LocalJournalHost``, ``backend.BackendHost`` (an answer's bytes), ``FailingHost``."""

    def read(self, req: Request) -> dict | bytes: ...

    def update(self, req: Request, body: bytes) -> dict: ...


@dataclass(frozen=True)
class Principal:
    key: str
    owner: bool
    role: str
    subject: str
    session: str | None
    name: str


# -- bounded projection ----------------------------------------------------------------------------

def omitted_line(ids: list[str], nbytes: int, full_sha: str) -> str:
    return f"omitted: entries {', '.join(ids) if ids else '(none)'} ({nbytes} bytes; sha256 {full_sha} of the full body)"


def project(body: bytes, budget: int) -> tuple[str, dict | None]:
    """The bounded projection of a canonical-JSON journal body: (text, omitted or None).

    Within budget, the text is the body itself. Otherwise whole entries are kept — open ones
    first, then the newest — while the projection (canonical JSON of the body with only the kept
    entries, a newline, and the ``omitted:`` line naming the rest) fits ``budget`` UTF-8 bytes;
    the kept entries stay in their original order. Nothing is ever cut inside an entry. Should
    the body's other fields alone not fit, they are omitted too (named in the line), and entries
    are still kept as they fit. Should not even that fit, the text is the ``omitted:`` line alone
    (over the budget only when the line itself does not fit: an answer that says what is missing
    is never silence). ``omitted["bytes"]`` is the number of body bytes not in the projection."""
    if len(body) <= budget:
        try:
            return body.decode("utf-8"), None
        except UnicodeDecodeError:
            pass  # (a legacy body) bytes that are not text: named as omitted below
    full_sha = hashlib.sha256(body).hexdigest()
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        # only a legacy version can hold one (the Host writes and serves JSON objects): nothing of
        # it can be kept whole (this used to raise out of the read)
        return omitted_line(["(the whole body: not a JSON object)"], len(body), full_sha), \
            {"entries": [], "fields": ["(body)"], "bytes": len(body), "body_sha256": full_sha}
    entries: list = doc["entries"] if isinstance(doc.get("entries"), list) else []
    ids = [e["id"] if isinstance(e, dict) and isinstance(e.get("id"), str) else f"#{i}" for i, e in enumerate(entries)]
    order = [i for i in reversed(range(len(entries))) if _is_open(entries[i])] + \
            [i for i in reversed(range(len(entries))) if not _is_open(entries[i])]
    fields = sorted(k for k in doc if k != "entries")

    def text_of(kept: set[int], keep_fields: bool) -> tuple[str, list[str], int]:
        base = {k: v for k, v in doc.items() if k != "entries"} if keep_fields else {}
        if "entries" in doc or kept:
            base["entries"] = [entries[i] for i in sorted(kept)]
        proj = codec.canonical_json(base)
        gone = [ids[i] for i in range(len(entries)) if i not in kept]
        named = gone + ([] if keep_fields else [f"field:{f}" for f in fields])
        line = omitted_line(named, len(body) - len(proj), full_sha)
        return proj.decode("utf-8") + "\n" + line, gone, len(proj)

    # The other fields go only when they alone do not fit; entries are then kept as they fit
    # (they were all dropped at once, even an open entry that fit). The projection's length is
    # counted, not parsed back out of the text (an entry id may hold a newline).
    keep_fields = True
    text, gone, plen = text_of(set(), keep_fields)
    if len(text.encode("utf-8")) > budget:
        keep_fields = False
        text, gone, plen = text_of(set(), keep_fields)
        if len(text.encode("utf-8")) > budget:  # not even "{}": the line alone (was "{}\n" + line, over a budget the line fit)
            return omitted_line(ids + [f"field:{f}" for f in fields], len(body), full_sha), \
                {"entries": ids, "fields": fields, "bytes": len(body), "body_sha256": full_sha}
    kept: set[int] = set()
    for i in order:
        t2, g2, p2 = text_of(kept | {i}, keep_fields)
        if len(t2.encode("utf-8")) > budget:
            break
        kept.add(i)
        text, gone, plen = t2, g2, p2
    return text, {"entries": gone, "fields": [] if keep_fields else fields, "bytes": len(body) - plen, "body_sha256": full_sha}


def _is_open(e: object) -> bool:
    return isinstance(e, dict) and e.get("status", "open") == "open"


# -- one position per request ---------------------------------------------------------------------

def capture_refs(store: Store, runs: list[str], names: list[str], positions: dict[int, Position] | None = None) \
        -> tuple[Position, dict[str, dict], dict[str, Any]]:
    """One log position and the refs a request reads at it, taken together under the engine's
    tables lock (two ``read_ref`` calls may see two positions: each catches up): ``(position,
    {run: that run's refs}, {name: value or None})``. O(those refs), never O(log) or O(all refs).
    Inside a batch, the batch's own moves are applied on top (its writer lock holds the log).
    (The engine primitive this stands for: ``Engine.capture(runs, names)``.)"""
    txn = store.current_batch()
    logs = store.logs
    if txn is not None:  # the batch's own log first (a batch writes the log of the first ref it reads)
        for r in runs:
            txn.read_ref(runrefs.branch_ref(r, 0))
        for n in names:
            txn.read_ref(n)  # a store-log ref a run's batch reads joins what its entry cites
    got_runs: dict[str, dict] = {}
    got_names: dict[str, Any] = {}
    if positions is None:
        positions = {}  # id of each log read -> its position, taken with its refs
    for log, want_runs, want_names in _by_log(logs, runs, names):
        if txn is None:
            log.refresh()
        with log._mu:
            t = log.tables
            positions[id(log)] = log.position()
            got_runs.update({r: dict(t.run_refs.get(r, {})) for r in want_runs})
            got_names.update({n: t.refs.get(n) for n in want_names})
    pos = positions[id(logs.run_log(runs[0]) if runs else logs.store_log)]
    watch = getattr(txn, "watch", None)
    if watch is not None:
        # An optimistic commit (object storage: no writer lock) must not land if a grant or the owner
        # key it was authorized by moved before it: those refs join its read set, and a commit whose
        # read set changed is rebuilt from the new head, where the decision is taken again.
        for name in names:
            watch(name, got_names[name])
        for watched in runs:
            prefix = runrefs.run_grant_prefix(watched)
            watch(prefix, {k: v for k, v in got_runs[watched].items() if k.startswith(prefix)}, prefix=True)
    if txn is not None:
        for name, (_, new, _) in txn.moves.items():
            run = runrefs.run_of(name)
            targets = [got_names] if name in got_names else []
            if run in got_runs:
                targets.append(got_runs[run])
            for d in targets:
                if new is None:
                    d.pop(name, None)
                else:
                    d[name] = new
    return pos, got_runs, got_names


def _by_log(logs: Any, runs: list[str], names: list[str]) -> list[tuple[Any, list[str], list[str]]]:
    """The runs and names a request reads, grouped by the log holding them (a store of one log: one group)."""
    out: dict[int, tuple[Any, list[str], list[str]]] = {}
    for r in runs:
        log = logs.run_log(r)
        out.setdefault(id(log), (log, [], []))[1].append(r)
    for n in names:
        log = logs.for_ref(n)
        out.setdefault(id(log), (log, [], []))[2].append(n)
    if not out:
        out[id(logs.store_log)] = (logs.store_log, [], [])
    return list(out.values())


def _newness(store: Store, run: str, jid: bytes) -> tuple:
    """How new a session's journal head is, comparable between sessions: its entry's number in a store of one
    log; in a store of a log per run, the time its entry was written (then the run's start order)."""
    if not store.logs.per_run:
        return (store.logs.date(run, jid) or -1,)
    log = store.logs.run_log(run)
    return (log.entry_time() or 0.0, store.run_order(run) or ())


class At:
    """One request's log position and the refs it reads there (a Host request reads nothing newer).

    Captured once (``capture_refs``, under the engine's tables lock): every ref of the
    request's runs (its session and a named predecessor: branches, journal, run grants) and the
    named refs (the owner key, the caller's subject grant). O(refs of those runs). Any other ref
    a request reaches (another session's journal on the same-subject fallback; a grant elsewhere
    named in a refusal) is a forward-only chain ref, read now and walked back along ``previous``
    to its newest object committed at or before the position — exact, since a chain ref moves
    only to an object stored by the same commit (``refs.check_move`` for journal and segment
    refs; engine format 3 applies it to grant refs too, wherever an entry is applied)."""

    def __init__(self, store: Store, runs: list[str], names: list[str], subject: str | None = None) -> None:
        self.store = store
        runs = list(dict.fromkeys(runs))
        self.session = runs[0] if runs else None
        if subject is not None and store.logs.per_run:
            # A log per run: the other sessions of the subject (the same-subject fallback reads them) are
            # captured now too, each log's position with its refs; a session started later is not there.
            runs += [r for r in store.subject_runs(subject) if r not in runs]
        names = list(dict.fromkeys([identity.OWNER_REF, *names]))
        self.positions: dict[int, Position] = {}
        self.pos, self._runs, self._names = capture_refs(store, runs, names, self.positions)
        self.entry: int = self.pos.entry  # the position in the request's session's log (its first run's)

    def run_refs(self, run: str) -> dict:
        """The refs of a captured run at this position (a copy: ``ChainReader.view_from`` takes it)."""
        return dict(self._runs[run])

    def has_run(self, run: str) -> bool:
        """Whether ``run`` existed at this position (one of the captured runs: its branch 0 ref)."""
        refs_of = self._runs.get(run)
        if refs_of is None:
            if self.store.logs.per_run:  # another run's log: it existed if its log held its start when asked
                return isinstance(self.store.read_ref(runrefs.branch_ref(run, 0)), bytes)
            at = self.store.run_started_entry(run)
            return at is not None and at <= self.entry
        return runrefs.branch_ref(run, 0) in refs_of

    def ref(self, name: str) -> bytes | str | None:
        """A ref's value at this position."""
        run = runrefs.run_of(name)
        if run is not None and run in self._runs:
            return self._runs[run].get(name)
        if name in self._names:
            return self._names[name]
        if not refs.forward_only(name):
            raise InvalidInput(f"ref {name} was not captured with the request's position")
        return self.back(name, self.store.read_ref(name))

    def back(self, name: str, value: bytes | str | None) -> bytes | None:
        """The value a forward-only ref ``name`` had at this position, from a newer ``value``."""
        if not isinstance(value, bytes):
            return None
        otype = refs.chain_type(name) if not name.startswith(runrefs.KEYS_PREFIX) else None
        log = self.store.logs.for_ref(name)
        bound = self.positions.get(id(log))
        if bound is None:  # a log not read with the request: as it stands now, from here on
            bound = self.positions[id(log)] = log.position()
        while isinstance(value, bytes):
            e = log.loc_entry(value)
            if e is None:  # an object the log does not hold cannot be dated: reading it names the damage
                return value
            if e <= bound.entry or otype is None:
                return value if e <= bound.entry else None
            prev = self.store.get_typed(value, otype).get("previous")
            value = prev if isinstance(prev, bytes) else None
        return None

    def refs_ending(self, prefix: str, suffix: str = "") -> list[tuple[str, bytes]]:
        """Forward-only refs under ``prefix`` ending in ``suffix`` as of this position: the captured
        runs' from the capture, the others read now and walked back (a ref made later is absent)."""
        out = []
        if self.store.logs.per_run:  # the captured runs' refs, those of the runs granting the key asked for, the store log's
            listed = [(n, v) for d in self._runs.values() for n, v in d.items() if n.startswith(prefix)]
            if suffix.startswith("/grant/"):
                for run in self.store.granted_runs(suffix[len("/grant/"):]):
                    if run not in self._runs:
                        listed += [(n, v) for n, v in self.store.run_refs(run).items() if n.startswith(prefix)]
            with self.store.engine._mu:
                listed += [(n, v) for n, v in self.store.engine.tables.refs.items() if n.startswith(prefix)]
        else:
            listed = list(self.store.list_refs(prefix))
        for name, value in sorted(listed):
            if not name.endswith(suffix) or not refs.forward_only(name):
                continue
            v = self.ref(name) if runrefs.run_of(name) in self._runs else self.back(name, value)
            if isinstance(v, bytes):
                out.append((name, v))
        return out


# -- the in-process Host ---------------------------------------------------------------------------

class LocalJournalHost:
    """The Host in the caller's process, over a ``RunLog``. ``reads`` counts journal reads
    (a read changes nothing in the store).

    ``on_authorized(req, principal)``, if set, is called by ``read`` between the authorization
    and the journal read (a test pauses the Host there while another process revokes the key
    and writes a newer version: the answer must still be as of the authorization).
    ``on_update_authorized(req, principal)`` is ``update``'s: called under the writer lock,
    between the decision and the write."""

    name = "local"
    on_authorized: Callable[[Request, Principal], object] | None = None
    on_update_authorized: Callable[[Request, Principal], object] | None = None

    def __init__(self, log: RunLog, *, max_skew: float = identity.MAX_SKEW, clock: Callable[[], float] = time.time) -> None:
        self.log = log
        self.reads = 0
        self.max_skew = max_skew
        self.clock = clock
        self._nonces: dict[str, float] = {}
        self._lock = threading.Lock()
        self._owner: str | None = None

    @property
    def owner(self) -> str | None:
        """The store's owner public key. ``keys/owner`` is written once, so once found it is kept
        (it was read and parsed from its blob several times per request)."""
        if self._owner is None:
            self._owner = identity.owner_public(self.log.store)
        return self._owner

    def owner_at(self, at: At) -> str | None:
        """The owner public key as of ``at`` (None if ``keys/owner`` was written after it)."""
        return self.owner if isinstance(at.ref(identity.OWNER_REF), bytes) else None

    def capture(self, req: Request, subject: str, *runs: str | None) -> At:
        """The position a request reads at: its session's refs (and those of ``runs``, say a named
        predecessor), the owner key and the caller's grant on the subject, captured together."""
        names = [identity.OWNER_REF]
        if isinstance(req.key, str) and req.key:
            names.append(runrefs.subject_grant_ref(subject, req.key))
        want = [r for r in (req.run, *runs) if isinstance(r, str)]
        return At(self.log.store, want, names, subject)

    # -- authorization ---------------------------------------------------------------------------
    def authorize(self, req: Request, body: bytes = b"", *, write: bool = False, at: At | None = None) -> Principal:
        """Authenticate ``req`` and decide, from the grants as of ``at`` (default: a position
        captured now), whether its key may read (or write) its session or subject."""
        subject = self._authenticate(req, body)
        if at is None:
            at = self.capture(req, subject)
        return self._decide(req, subject, at, write=write)

    def _authenticate(self, req: Request, body: bytes) -> str:
        """The request's signature, parameters, time and nonce; returns its subject."""
        if not isinstance(req, Request):
            raise Unauthenticated("the request is not a signed request")
        req.check()
        if not req.sig or not req.key:
            raise Unauthenticated("the request is not signed")
        try:
            identity.check_public(req.key)
        except InvalidInput:
            raise Unauthenticated("the request's key is not an ed25519 public key") from None
        if not isinstance(req.params, dict) or identity.body_hash(req.params, body) != req.body_sha256:
            raise Unauthenticated("the request's parameters or body do not match the hash it was signed over")
        if not identity.verify_sig(req.key, req.sig, req.message()):
            raise Unauthenticated(f"the signature of key {req.key[:16]}… does not verify")
        now = self.clock()
        try:
            skew = abs(now - req.time)
        except (TypeError, OverflowError):  # not a number, or an integer beyond any float (10**400) — was a crash
            skew = float("inf")
        if not skew <= self.max_skew:  # written so that a NaN is refused too
            raise StaleRequest(skew, self.max_skew)
        with self._lock:
            if req.nonce in self._nonces:
                raise ReplayedRequest(req.nonce)
            self._nonces[req.nonce] = req.time
            if len(self._nonces) > 4096:  # forget nonces whose requests would be stale anyway
                cutoff = now - 2 * self.max_skew
                self._nonces = {n: t for n, t in self._nonces.items() if t >= cutoff}
        run = req.run
        if run is not None:
            subject = self.log.subject(run)
            if req.subject is not None and req.subject != subject:
                raise WrongSubject(req.subject, run, subject)
        elif isinstance(req.subject, str) and req.subject:
            subject = req.subject
        else:
            raise InvalidInput("a request names a run or a subject")
        return subject

    def _decide(self, req: Request, subject: str, at: At, *, write: bool) -> Principal:
        if req.key == self.owner_at(at):
            return Principal(req.key, True, "owner", subject, None, "owner")
        return self._granted(req.key, req.run, subject, write=write, at=at)

    grant_counts = staticmethod(authority.grant_counts)  # the one rule (objstore.storage.authority)

    def _chain_state(self, ref: str, owner: str | None, at_entry: int | None = None, at: At | None = None,
                     session: str | None = None) -> dict | None:
        """The newest counting grant object of a chain (committed at or before ``at_entry``), the
        chain as of ``at`` (default: now)."""
        store = self.log.store
        chain = grant_chain(self.log, ref) if at is None else grant_chain_from(self.log, at.ref(ref))
        for gid, g in reversed(chain):
            if not self.grant_counts(ref, g, owner):
                continue
            if at_entry is not None:
                e = store.logs.date(session or runrefs.run_of(ref) or "", gid)
                if e is None or e > at_entry:
                    continue
            return g
        return None

    def grant_table(self, run: str) -> list[dict]:
        """Every grant chain on ``run`` and on its subject: each object with whether it counts, and
        the chain's effective state as the Host judges it (what ``objstore journal grants`` shows),
        all as of one position."""
        subject = self.log.subject(run)
        at = At(self.log.store, [run], [])
        owner = self.owner_at(at)
        rows = []
        for scope, prefix in (("run", runrefs.run_grant_prefix(run)), ("subject", runrefs.subject_grant_prefix(subject))):
            for ref, head in at.refs_ending(prefix):
                chain = [{"id": gid, "seq": g.get("seq"), "action": g.get("action"), "role": g.get("role"),
                          "rights": g.get("rights"), "name": g.get("name"), "reason": g.get("reason"),
                          "supersedes": g.get("supersedes"), "time": g.get("time"),
                          "signed": owner is not None and identity.object_signed_by(g, owner),
                          "counts": self.grant_counts(ref, g, owner)}
                         for gid, g in grant_chain_from(self.log, head)]
                eff = self._chain_state(ref, owner, at=at)
                rows.append({"ref": ref, "scope": scope, "grantee": ref.rsplit("/", 1)[1], "chain": chain,
                             "effective": None if eff is None else {k: eff.get(k) for k in ("action", "role", "rights", "name", "seq")}})
        return rows

    def grant_state(self, key: str, run: str | None, subject: str, at_entry: int | None = None, at: At | None = None) -> dict | None:
        """The key's effective grant on ``run`` (else on ``subject``): the newest owner-signed grant
        object committed at or before ``at_entry``, of the chains as of ``at`` (default: now)."""
        owner = self.owner if at is None else self.owner_at(at)
        g = self._chain_state(runrefs.run_grant_ref(run, key), owner, at_entry, at, run) if run is not None else None
        if g is None:
            g = self._chain_state(runrefs.subject_grant_ref(subject, key), owner, at_entry, at, run)
        return g

    def _granted(self, key: str, run: str | None, subject: str, *, write: bool, at: At) -> Principal:
        g = self.grant_state(key, run, subject, at=at)
        label = (g or {}).get("name") or f"{key[:16]}…"
        where = run or f"subject {subject}"
        if g is not None and g.get("role") == "job":
            raise JobCaller(label)
        if g is None:
            self._elsewhere(key, run, subject, at)
            raise WriterRevoked(label, where, "never granted")
        if g["action"] != "grant":
            raise WriterRevoked(label, where, g.get("reason") or "revoked")
        need = "write" if write else "read"
        if need not in g["rights"]:
            raise WriterRevoked(label, where, f"the grant does not include {need}")
        return Principal(key, False, g["role"], subject, g.get("run"), label)

    def _elsewhere(self, key: str, run: str | None, subject: str, at: At) -> None:
        """A key without a grant here: if it held one on another session or subject (as of ``at``), say so."""
        owner = self.owner_at(at)
        for name, _ in at.refs_ending("", f"/grant/{key}"):
            g = self._chain_state(name, owner, at=at)
            if g is None:
                continue
            if g.get("role") == "job":
                raise JobCaller(g.get("name") or f"{key[:16]}…")
            if g["subject"] != subject:
                raise WrongSubject(g["subject"], run or "(new session)", subject)
            if g.get("run") is not None and g["run"] != run:
                raise WrongSession(g["run"], run or f"a new session of {subject}")

    # -- reading -----------------------------------------------------------------------------------
    def trusted(self, session: str, jid: bytes, j: dict, body: bytes, at: At | None = None) -> tuple[bool, str]:
        """Whether a journal version was written through a Host by a key allowed to write it then
        (grants read as of ``at``, default now)."""
        store = self.log.store
        entry = store.logs.date(session, jid)
        if j.get("v") != 2:
            if self._legacy_ok(jid, session, at):
                return True, "legacy version written before the store had an owner key"
            return False, f"version {j.get('version')} is unsigned and was written after the owner key"
        try:
            req = Request.from_json(j.get("request"))
        except ObjstoreError as e:
            return False, str(e)
        params = {"reflects_through": _hex(j.get("reflects_through")), "checkpoint": _hex(j.get("checkpoint")),
                  "enabled": req.params.get("enabled") if isinstance(req.params, dict) else None}
        if (req.op != "update" or req.run != session or j.get("run") != session or req.key != j.get("writer") or req.params != params
                or (params["enabled"] is not None and j.get("enabled") is not params["enabled"])
                or j.get("body_sha256") != hashlib.sha256(body).hexdigest()
                or req.expect_head != _hex(j.get("previous")) or identity.body_hash(params, body) != req.body_sha256
                or not req.sig or not identity.verify_sig(req.key, req.sig, req.message())):
            return False, f"version {j.get('version')} does not carry a valid signed request for its content"
        # A writer can sign any bytes and store the version itself: what the Host would never have
        # written (not JSON, not canonical, not an object) is not served (it crashed project).
        if _body_problem(body) is not None:
            return False, f"version {j.get('version')} does not hold a canonical journal body"
        if not self._allowed_at(req.key, session, entry, "write", at):
            return False, f"version {j.get('version')} was written by a key without a write grant at the time"
        return True, "written by the owner or a granted worker"

    def _allowed_at(self, key: str, session: str, entry: int | None, right: str, at: At | None = None) -> bool:
        """Whether ``key`` was the owner, or a worker granted ``right`` on ``session``, at log entry ``entry``."""
        if key == (self.owner if at is None else self.owner_at(at)):
            return True
        g = self.grant_state(key, session, self.log.subject(session), at_entry=entry, at=at)
        return g is not None and g["action"] == "grant" and right in g["rights"] and g.get("role") == "worker"

    def _legacy_ok(self, oid: bytes, session: str, at: At | None = None) -> bool:
        """An unsigned (schema-1) object counts only if it predates the store's owner key."""
        store = self.log.store
        if (self.owner if at is None else self.owner_at(at)) is None:
            return True
        okey = store.read_ref(identity.OWNER_REF) if at is None else at.ref(identity.OWNER_REF)
        oe = store.logs.date(session, okey) if isinstance(okey, bytes) else None
        e = store.logs.date(session, oid)
        return e is not None and oe is not None and e < oe

    def compaction_segment_trusted(self, session: str, sid: bytes, seg: dict, at: At | None = None) -> tuple[bool, str]:
        """Whether a segment was written by a compaction of a key allowed to read the session then:
        signed by its compacting key (the owner, or a key granted read on it at the segment's log
        position). A segment appended through the raw store API by anyone else is not restored.
        Grants are read as of ``at`` (default: now)."""
        if seg.get("v") != 2:
            return (True, "legacy segment") if self._legacy_ok(sid, session, at) else (False, "unsigned segment written after the owner key")
        signer = seg.get("signer")
        if seg.get("run") != session or not isinstance(signer, str) or not identity.object_signed_by(seg, signer):
            return False, "segment is not signed by its compacting key"
        if not self._allowed_at(signer, session, self.log.store.logs.date(session, sid), "read", at):
            return False, "segment was signed by a key without a grant at the time"
        return True, "compacted by the owner or a granted worker"

    def _read_journal(self, session: str, budget: int, at: At) -> dict:
        """The journal of ``session`` as of ``at``: its newest version then, checked and projected."""
        head = at.ref(runrefs.journal_ref(session))
        cur = (head, self.log.store.get_typed(head, codec.JOURNAL)) if isinstance(head, bytes) else None
        base: dict[str, Any] = {"session": session, "journal": None, "version": None, "legacy": False, "writer": None,
                "written_entry": None, "reflects_through": None, "checkpoint": None, "source_end": None,
                "body_sha256": None, "body_bytes": None, "projection": None, "text": None, "omitted": None,
                "prompt_source": None}
        if cur is None:
            return dict(base, outcome=ABSENT, reason="no journal version recorded")
        jid, j = cur
        legacy = j.get("v") != 2
        base.update(journal=jid.hex(), version=j.get("version"), legacy=legacy, writer=j.get("writer"),
                    written_entry=self.log.store.logs.date(session, jid),
                    reflects_through=None if legacy else _hex(j.get("reflects_through")),
                    checkpoint=_hex(j.get("checkpoint")) if isinstance(j.get("checkpoint"), bytes) else None,
                    source_end=j.get("source_end") if legacy else None,
                    prompt_source=f"journal:{session}@v{j.get('version')} via host {self.name}")
        try:
            body = self.log.store.get_blob(j["body"])
        except ObjstoreError as e:
            return dict(base, outcome=UNAVAILABLE, reason=f"read_failed: {e}")
        ok, why = self.trusted(session, jid, j, body, at)
        if not ok:
            return dict(base, outcome=UNAVAILABLE, reason=f"read_failed: untrusted: {why}")
        if not j.get("enabled", True):
            return dict(base, outcome=DISABLED, reason="journal disabled for this session")
        text, omitted = project(body, budget)
        base.update(body_sha256=hashlib.sha256(body).hexdigest(), body_bytes=len(body), text=text, omitted=omitted,
                    projection="full" if omitted is None else "bounded")
        if omitted is None:
            return dict(base, outcome=PRESENT, reason=None)
        return dict(base, outcome=OVER_BUDGET,
                    reason=f"journal body is {len(body)} bytes, budget {budget}: bounded projection, {len(omitted['entries'])} entries omitted")

    def _same_subject_newest(self, subject: str, exclude: set, at: At) -> list[str]:
        """Other sessions of ``subject`` with a journal as of ``at``, newest journal version (by log position) first."""
        store = self.log.store
        found = []
        for name, val in at.refs_ending(runrefs.RUN_PREFIX, "/journal"):
            run = runrefs.journal_run(name)
            if run is None or run in exclude:
                continue
            gone = at.refs_ending(runrefs.deleted_ref(run))
            if gone:  # a deleted session is never selected (by a deletion that holds)
                store.obey_deletion(gone[0][0], gone[0][1])
                continue
            try:
                if self.log.subject(run) != subject:
                    continue
            except ObjstoreError:
                continue
            found.append((_newness(store, run, val), run))
        return [r for _, r in sorted(found, reverse=True)]

    def read(self, req: Request) -> dict:
        """Select, authorize and read once; returns the answer (a JSON object)."""
        self.reads += 1
        if not isinstance(req, Request) or req.op != "read":
            raise InvalidInput("a journal read is a signed request with op 'read'")
        p = req.params if isinstance(req.params, dict) else {}
        purpose, budget, pred = p.get("purpose"), p.get("budget"), p.get("predecessor")
        if purpose not in PURPOSES:
            raise InvalidInput(f"read purpose must be one of {', '.join(PURPOSES)}")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise InvalidInput("budget must be a non-negative integer (bytes)")
        # One position for the whole request: the grants that authorize it and the journal it
        # reads are those of the same log position (a revocation or a newer version committed by
        # another process after the capture is not seen by this request).
        subject = self._authenticate(req, b"")
        at = self.capture(req, subject, pred if isinstance(pred, str) and _is_run_id(pred) else None)
        principal = self._decide(req, subject, at, write=False)
        hook = self.on_authorized
        if hook is not None:
            hook(req, principal)
        if purpose == "compaction":
            if req.run is None:
                raise InvalidInput("a compaction read names its session")
            prefer = [("current", req.run)]
        else:
            if req.run is not None:
                raise InvalidInput("a startup read names the subject, not a session (the session does not exist yet)")
            prefer = [("predecessor", pred)] if pred is not None else []
        tried = []
        for rule, sess in prefer:
            if not isinstance(sess, str) or not _is_run_id(sess) or not at.has_run(sess):
                tried.append({"session": sess, "rule": rule, "outcome": ABSENT, "reason": "no such session"})
                continue
            if self.log.subject(sess) != subject:
                tried.append({"session": sess, "rule": rule, "outcome": UNAVAILABLE, "reason": "another subject: not read"})
                continue
            got = self._read_journal(sess, budget, at)
            tried.append({"session": sess, "rule": rule, "outcome": got["outcome"], "reason": got["reason"]})
            if got["outcome"] in (PRESENT, OVER_BUDGET):
                return self._answer(req, purpose, subject, budget, rule, tried, got)
        exclude = {s for _, s in prefer if isinstance(s, str)} | ({req.run} if req.run else set())  # a JSON list was a TypeError
        for sess in self._same_subject_newest(subject, exclude, at):
            got = self._read_journal(sess, budget, at)
            tried.append({"session": sess, "rule": "same_subject_newest", "outcome": got["outcome"], "reason": got["reason"]})
            if got["outcome"] in (PRESENT, OVER_BUDGET):
                return self._answer(req, purpose, subject, budget, "same_subject_newest", tried, got)
        first = tried[0] if tried else {"session": None, "outcome": ABSENT, "reason": f"no journal of subject {subject}"}
        got = {"session": None, "outcome": first["outcome"], "reason": first["reason"]}
        return self._answer(req, purpose, subject, budget, "none", tried, got)

    def _answer(self, req: Request, purpose: str, subject: str, budget: int, rule: str, tried: list[dict], got: dict) -> dict:
        out = {"v": ANSWER_SCHEMA, "host": self.name, "purpose": purpose, "requested": req.run, "subject": subject,
               "budget": budget, "selection": {"rule": rule, "tried": tried}}
        for k in ("outcome", "reason", "session", "journal", "version", "legacy", "writer", "written_entry",
                  "reflects_through", "checkpoint", "source_end", "body_sha256", "body_bytes", "projection", "text",
                  "omitted", "prompt_source"):
            out[k] = got.get(k)
        return out

    # -- writing -----------------------------------------------------------------------------------
    def update(self, req: Request, body: bytes) -> dict:
        """Write the next journal version of ``req.run``; CAS on the head the request names."""
        if not isinstance(req, Request) or req.op != "update":
            raise InvalidInput("a journal update is a signed request with op 'update'")
        subject = self._authenticate(req, body)
        run = req.run
        if run is None:
            raise InvalidInput("a journal update names its session")
        doc = codec.parse_json(body, "journal body")  # the one input parser: the body came over a wire
        check_body(doc)
        if codec.canonical_json(doc) != body:
            raise InvalidInput("journal body must be sent as canonical JSON (sorted keys, ',' ':' separators, UTF-8)")
        p = req.params
        # ``enabled`` by type, not by equality: 1 and 0 equal True and False, and a version holding
        # ``enabled: 1`` is one verify calls malformed
        if set(p) != {"reflects_through", "checkpoint", "enabled"} or not (p["enabled"] is None or isinstance(p["enabled"], bool)):
            raise InvalidInput("update parameters are reflects_through, checkpoint and enabled")
        rt, cp = self._own_record(run, p["reflects_through"], "reflects_through"), self._own_record(run, p["checkpoint"], "checkpoint")
        store = self.log.store

        def commit() -> tuple[bytes, dict]:
            # decided under the writer lock, at the position the version is written on: a key
            # revoked by another process before this commit cannot write (it could between a
            # decision taken before the batch and the write). On object storage, where no lock is
            # held, the grants it was decided on are the commit's read set: if one moved first, the
            # commit is run again on the new head and decided again (Store.atomically).
            principal = self._decide(req, subject, self.capture(req, subject), write=True)
            hook = self.on_update_authorized
            if hook is not None:
                hook(req, principal)
            cur = store.read_ref(runrefs.journal_ref(run))
            cur = cur if isinstance(cur, bytes) else None
            if _hex(cur) != req.expect_head:
                raise Conflict(runrefs.journal_ref(run), req.expect_head or "(none)", _hex(cur) or "(none)")
            old = store.get_typed(cur, codec.JOURNAL) if cur else None
            enabled = p["enabled"] if p["enabled"] is not None else (old.get("enabled", True) if old else True)
            obj: dict[str, Any] = {"v": JOURNAL_SCHEMA, "run": run, "version": (old["version"] + 1) if old else 1,
                   "body": store.put_blob(body), "body_sha256": hashlib.sha256(body).hexdigest(),
                   "reflects_through": rt, "checkpoint": cp, "enabled": enabled, "previous": cur,
                   "writer": req.key, "request": req.to_json(), "time": time.time()}
            jid = store.put(codec.JOURNAL, obj)
            store.set_ref(runrefs.journal_ref(run), cur, jid, f"journal v{obj['version']} by {principal.name}")
            return jid, obj

        jid, obj = store.atomically(commit)
        return {"journal": jid.hex(), "version": obj["version"]}

    def _own_record(self, run: str, h: Any, what: str) -> bytes | None:
        if h is None:
            return None
        try:
            oid = codec.parse_id(h)
            rec = self.log.record(oid)
        except ObjstoreError:
            raise InvalidInput(f"{what} {str(h)[:16]} is not a record of run {run}") from None
        if rec.run != run:
            raise InvalidInput(f"{what} {h[:12]} is a record of run {rec.run}, not {run}")
        return oid


class FailingHost:
    """A host whose reads fail (tests of the ``unavailable`` outcome)."""

    name = "failing"

    def __init__(self, message: str = "journal host did not answer") -> None:
        self.message = message
        self.reads = 0

    def read(self, req: Request) -> NoReturn:
        self.reads += 1
        raise HostUnavailable(self.message)

    def update(self, req: Request, body: bytes) -> NoReturn:
        raise HostUnavailable(self.message)


def _is_run_id(v: object) -> bool:
    """Whether ``v`` can name a run (a ref name can hold it): anything else names no session."""
    if not isinstance(v, str):
        return False
    try:
        check_run_id(v)
    except InvalidInput:
        return False
    return True


def _hex(v: object) -> str | None:
    return v.hex() if isinstance(v, bytes) else None


def _body_problem(body: bytes) -> str | None:
    """Why ``body`` is not what the Host writes (the canonical JSON of an object), or None. Not the
    whole ``check_body``: versions the Host wrote before a rule was added stay readable."""
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            return "not a JSON object"
        return None if codec.canonical_json(doc) == body else "not canonical JSON"
    except (ValueError, RecursionError) as e:
        return str(e)


__all__ = ["ABSENT", "DISABLED", "OUTCOMES", "OVER_BUDGET", "PRESENT", "UNAVAILABLE", "FailingHost", "HostUnavailable",
           "LocalJournalHost", "Principal", "project", "RunNotFound"]
