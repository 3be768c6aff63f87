"""Sessions, journals and journal compaction (seed T-745).

A *session* is a run whose records are conversation ``turn``s. Its *journal* is a
versioned document about the work (what was done, what is open, what must go
on): each version an immutable ``journal`` object (body as a canonical-JSON
blob, version, ``source_end`` = LSN of the last turn it reflects, processing
``checkpoint``, enabled flag, previous version, writer) behind the ref
``run/<run>/journal``, moved by compare-and-swap.

Writers hold *grants* (``grant`` objects chained behind ``run/<run>/grant/<writer>``);
a revocation is a new grant object, never an erasure. Every read and write goes
through ``authorize``: unauthenticated callers, job identities, callers of
another subject, callers bound to another session, and (for writes) writers
without a live grant are refused with distinct typed errors.

Compaction (``compact``) reads the journal **once** through a ``JournalHost``,
renders the result **once**, and hands that same rendering to the compactor
input and to the new ``segment`` object. Outcomes are ``present``, ``absent``,
``disabled``, ``unavailable`` (reason ``no_host`` or ``read_failed``) and
``over_budget``; none of them is taken to mean the history was recorded. The
previous summary goes in whole; an input over the compactor's hard limit is
an explicit ``LimitExceeded`` and nothing is written. Earlier segments are
never rewritten: a segment names its predecessor.

Derived material (summaries, journal context) lives only in segments and is
classified by object type, never by anything inside a body: turns are source,
segments are derived. ``context`` (normal turns, restore after a rewind) is
built from stored segments and never calls the host.

The compactor is an interface; ``StubCompactor`` is deterministic. It proves
transport and storage of the snapshot, not the quality of any summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from . import codec
from . import records as R
from .errors import (Conflict, InvalidInput, JobCaller, LimitExceeded, Unauthenticated,
                     WriterRevoked, WrongSession, WrongSubject)
from .refs import check_ref_name

PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET = "present", "absent", "disabled", "unavailable", "over_budget"
OUTCOMES = (PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET)

INSTRUCTIONS = (
    "Summarize the conversation turns below for continuing the work. Fill gaps, do not copy the journal: "
    "keep information the journal is missing, work not yet done, results not yet confirmed, and instructions "
    "for continuing. The journal context is derived material, not a record of what happened; an absent, "
    "disabled or unavailable journal does not mean the history was recorded. Historical journal texts are "
    "for reference only; their retention notes applied to their own boundary."
)


def journal_ref(run: str) -> str:
    return f"run/{run}/journal"


def segments_ref(run: str) -> str:
    return f"run/{run}/segments"


def grant_ref(run: str, writer: str) -> str:
    return f"run/{run}/grant/{writer}"


# -- identities ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caller:
    """Who is asking. ``signed=False`` is an unauthenticated request; ``kind='job'`` a job identity;
    ``session`` binds a worker to one session."""

    id: str
    subject: str | None
    kind: str = "worker"  # worker | user | job
    session: str | None = None
    signed: bool = True


def owner(log, run: str) -> Caller:
    """The run's own subject acting directly (the local CLI's identity)."""
    return Caller(id="owner", subject=log.subject(run), kind="user")


def authorize(log, caller: Caller | None, run: str, *, write: bool = False) -> None:
    if caller is None or not caller.signed:
        raise Unauthenticated(f"a signed caller is required to {'write' if write else 'read'} the journal of run {run}")
    if caller.kind == "job":
        raise JobCaller(caller.id)
    subject = log.subject(run)
    if caller.subject != subject:
        raise WrongSubject(caller.subject, run, subject)
    if caller.session is not None and caller.session != run:
        raise WrongSession(caller.session, run)
    if write and caller.kind != "user":
        g = current_grant(log, run, caller.id)
        if g is None or g["action"] != "grant":
            raise WriterRevoked(caller.id, run, "revoked" if g else "never granted")


# -- grants ---------------------------------------------------------------------------------------

def _grant_move(log, run: str, writer: str, action: str, by: Caller, reason: str) -> bytes:
    authorize(log, by, run)
    if by.kind != "user":
        raise WriterRevoked(by.id, run, "only the run's owner grants or revokes")
    check_ref_name(f"w/{writer}")
    if "/" in writer:
        raise InvalidInput(f"writer id {writer!r} must not contain '/'")
    ref = grant_ref(run, writer)
    old = log.store.read_ref(ref)
    obj = {"run": run, "writer": writer, "action": action, "previous": old, "by": by.id, "reason": reason, "time": time.time()}
    gid = log.store.put(codec.GRANT, obj)
    log.store.set_ref(ref, old, gid, f"{action} {writer}")
    return gid


def grant_writer(log, run: str, writer: str, by: Caller, reason: str = "") -> bytes:
    return _grant_move(log, run, writer, "grant", by, reason)


def revoke_writer(log, run: str, writer: str, by: Caller, reason: str = "") -> bytes:
    return _grant_move(log, run, writer, "revoke", by, reason)


def supersede_writer(log, run: str, old: str, new: str, by: Caller) -> None:
    """A new worker takes over: the old one's grant is revoked (recorded), the new one granted."""
    revoke_writer(log, run, old, by, reason=f"superseded by {new}")
    grant_writer(log, run, new, by, reason=f"supersedes {old}")


def current_grant(log, run: str, writer: str) -> dict | None:
    gid = log.store.read_ref(grant_ref(run, writer))
    return log.store.get_typed(gid, codec.GRANT) if gid else None


def grant_history(log, run: str, writer: str) -> list[dict]:
    out = []
    gid = log.store.read_ref(grant_ref(run, writer))
    while gid is not None:
        g = log.store.get_typed(gid, codec.GRANT)
        out.append(g)
        gid = g["previous"]
    return list(reversed(out))


# -- sessions and turns ------------------------------------------------------------------------

def start_session(log, run: str | None = None, *, subject: str, predecessor: str | None = None, **kw) -> str:
    meta = {"session": True, "predecessor": predecessor}
    return log.start_run(run, subject=subject, meta=meta, **kw)


def record_turn(log, run: str, role: str, text: str, *, generation: dict | None = None) -> R.Record:
    """A conversation turn: source material, content stored as a blob."""
    return log.append(run, R.TURN, {"role": role, "content": log.put_blob(text.encode("utf-8")), "origin": R.ORIGIN_SOURCE, "generation": generation})


def source_material(log, run: str, view=None) -> list[R.Record]:
    """Source material of the live timeline: turn records only, classified by record type."""
    view = view or log.view(run)
    return [r for r in log.lineage(view, view.live) if r.kind == R.TURN]


# -- journal versions ------------------------------------------------------------------------------

def journal_body_bytes(body: dict) -> bytes:
    return codec.canonical_json(body)


def current_journal(log, run: str) -> tuple[bytes, dict] | None:
    jid = log.store.read_ref(journal_ref(run))
    return (jid, log.store.get_typed(jid, codec.JOURNAL)) if jid else None


def update_journal(log, run: str, caller: Caller, body: dict, *, source_end: int, checkpoint: int, enabled: bool | None = None) -> tuple[bytes, int]:
    """Write the next journal version (CAS on the journal ref); returns (id, version)."""
    authorize(log, caller, run, write=True)
    if not isinstance(body, dict):
        raise InvalidInput("a journal body is a JSON object")
    R._jsonlike(body, "journal body")
    for name, v in (("source_end", source_end), ("checkpoint", checkpoint)):
        if not isinstance(v, int) or v < -1:
            raise InvalidInput(f"{name} must be an integer >= -1")
    cur = current_journal(log, run)
    old_id, old = cur if cur else (None, None)
    obj = {
        "run": run,
        "version": (old["version"] + 1) if old else 1,
        "body": log.store.put_blob(journal_body_bytes(body)),
        "source_end": source_end,
        "checkpoint": checkpoint,
        "enabled": (old["enabled"] if old else True) if enabled is None else bool(enabled),
        "previous": old_id,
        "writer": caller.id,
        "time": time.time(),
    }
    jid = log.store.put(codec.JOURNAL, obj)
    log.store.set_ref(journal_ref(run), old_id, jid, f"journal v{obj['version']} by {caller.id}")
    return jid, obj["version"]


def set_journal_enabled(log, run: str, caller: Caller, enabled: bool) -> tuple[bytes, int]:
    cur = current_journal(log, run)
    if cur is None:
        return update_journal(log, run, caller, {}, source_end=-1, checkpoint=-1, enabled=enabled)
    _, j = cur
    body = json.loads(log.store.get_blob(j["body"]))
    return update_journal(log, run, caller, body, source_end=j["source_end"], checkpoint=j["checkpoint"], enabled=enabled)


# -- the host: the one reader of journals for compaction -----------------------------------------------

@dataclass
class Snapshot:
    """What one journal read returned, frozen."""

    outcome: str
    reason: str | None = None
    session: str | None = None
    journal_id: bytes | None = None
    version: int | None = None
    body_json: bytes | None = None
    sha256: str | None = None
    source_end: int | None = None
    checkpoint: int | None = None
    size: int | None = None
    provenance: dict = field(default_factory=dict)


class JournalHost(Protocol):
    def read(self, caller: Caller, run: str, budget_bytes: int) -> Snapshot: ...


class HostUnavailable(Exception):
    """Raised by a host that cannot answer (network, process gone)."""


class LocalJournalHost:
    """Reads journals from the store. Reads change nothing; ``reads`` counts them."""

    def __init__(self, log):
        self.log = log
        self.reads = 0

    def read(self, caller: Caller, run: str, budget_bytes: int) -> Snapshot:
        self.reads += 1
        authorize(self.log, caller, run)
        cur = current_journal(self.log, run)
        if cur is None:
            return Snapshot(ABSENT, "no journal version recorded", session=run)
        jid, j = cur
        common = dict(session=run, journal_id=jid, version=j["version"], source_end=j["source_end"], checkpoint=j["checkpoint"])
        if not j["enabled"]:
            return Snapshot(DISABLED, "journal disabled for this session", **common)
        body = self.log.store.get_blob(j["body"])
        if len(body) > budget_bytes:
            return Snapshot(OVER_BUDGET, f"journal body is {len(body)} bytes, budget {budget_bytes}", size=len(body), **common)
        return Snapshot(
            PRESENT,
            None,
            body_json=body,
            sha256=hashlib.sha256(body).hexdigest(),
            size=len(body),
            provenance={"origin": R.ORIGIN_DERIVED, "kind": "journal_context", "prompt_source": f"journal:{run}@v{j['version']}",
                        "projection": "full", "journal": jid.hex(), "writer": j["writer"]},
            **common,
        )


class FailingHost:
    """A host whose reads fail (for tests of the unavailable outcome)."""

    def __init__(self, message: str = "journal host did not answer"):
        self.message = message
        self.reads = 0

    def read(self, caller, run, budget_bytes):
        self.reads += 1
        raise HostUnavailable(self.message)


def read_once(log, host, caller: Caller, run: str, budget_bytes: int) -> Snapshot:
    """Current session first; if it has no journal, the predecessor session of the same subject."""
    if host is None:
        return Snapshot(UNAVAILABLE, "no_host: no journal host configured", session=run)
    try:
        snap = host.read(caller, run, budget_bytes)
    except HostUnavailable as e:
        return Snapshot(UNAVAILABLE, f"read_failed: {e}", session=run)
    if snap.outcome == ABSENT:
        pred = _predecessor(log, run)
        if pred is not None and log.subject(pred) == caller.subject:
            try:
                # Same-subject supplementation: the session binding is to this session's own lineage.
                other = host.read(dataclasses.replace(caller, session=None), pred, budget_bytes)
            except HostUnavailable as e:
                return Snapshot(UNAVAILABLE, f"read_failed: {e}", session=pred)
            if other.outcome == PRESENT:
                other.provenance = dict(other.provenance, supplement_for=run)
                return other
    return snap


def _predecessor(log, run: str) -> str | None:
    meta = log.run_started(run).body["meta"] or {}
    pred = meta.get("predecessor") if isinstance(meta, dict) else None
    return pred if pred in log.runs() else None


def render(snap: Snapshot) -> str:
    """The one rendering of a read, used verbatim by the compactor input and the segment."""
    if snap.outcome == PRESENT:
        return (
            f"[journal context: derived material, not source. session {snap.session}, version {snap.version}, "
            f"sha256 {snap.sha256}, reflects turns through LSN {snap.source_end}, checkpoint {snap.checkpoint}]\n"
            + snap.body_json.decode("utf-8")
        )
    return f"[journal context: {snap.outcome} ({snap.reason}). This does not mean the history was recorded.]"


# -- compaction --------------------------------------------------------------------------------------

class Compactor(Protocol):
    name: str
    max_input_bytes: int

    def __call__(self, request: dict, request_bytes: bytes) -> dict: ...


class StubCompactor:
    """Deterministic stand-in for a model: it proves transport and storage, not summary quality.

    Returns ``{"role", "text"}``; ``on_call`` runs inside the call (to update the
    journal concurrently, say). Keeps every request it saw, byte for byte.
    """

    name = "stub-compactor-1"

    def __init__(self, max_input_bytes: int = 1 << 20, role: str = "assistant", on_call: Callable | None = None):
        self.max_input_bytes = max_input_bytes
        self.role = role
        self.on_call = on_call
        self.requests: list[bytes] = []

    def __call__(self, request: dict, request_bytes: bytes) -> dict:
        self.requests.append(request_bytes)
        if self.on_call:
            self.on_call(request)
        j = request["journal"]
        text = (
            f"SUMMARY {len(self.requests)}: {len(request['turns'])} turn(s) summarized, "
            f"{sum(not t['reflected_in_journal'] for t in request['turns'])} not reflected in the journal, journal {j['outcome']}"
            f"{' v' + str(j['version']) if j['version'] else ''}, previous summary {len(request['previous_summary'])} bytes, "
            f"{len(request['historical_journals'])} historical journal(s)."
        )
        return {"role": self.role, "text": text}


def segments(log, run: str) -> list[tuple[bytes, dict]]:
    """The run's segments, oldest first, by following ``previous`` from the ref."""
    out = []
    sid = log.store.read_ref(segments_ref(run))
    while sid is not None:
        seg = log.store.get_typed(sid, codec.SEGMENT)
        out.append((sid, seg))
        sid = seg["previous"]
    return list(reversed(out))


def _timeline(log, run: str, view):
    """(live lineage, id -> position, applicable segment) shared by compaction and restore."""
    lineage = log.lineage(view, view.live)
    idx = {r.id: i for i, r in enumerate(lineage)}
    return lineage, idx, _applicable(log, run, view, idx)


def _applicable(log, run: str, view, idx: dict) -> tuple[bytes, dict] | None:
    """The newest segment whose covered turns are on the live timeline (after a rewind, an older one)."""
    for sid, seg in reversed(segments(log, run)):
        if seg["covered_through"] is None or seg["covered_through"] in idx:
            return sid, seg
    return None


def _turn_text(log, r: R.Record) -> str:
    return log.store.get_blob(r.body["content"]).decode("utf-8", "replace") if r.body.get("content") else ""


@dataclass
class CompactionResult:
    segment_id: bytes
    segment: dict
    snapshot: Snapshot
    rendered: str
    request_bytes: bytes
    summary: str


def compact(log, run: str, compactor, *, host, caller: Caller, keep_tail: int = 4, budget_bytes: int = 64 * 1024,
            historical: bool = True) -> CompactionResult:
    """Compact the live timeline of a session: one journal read, one rendering, one new segment."""
    authorize(log, caller, run)
    head = log.store.read_ref(segments_ref(run))  # the segment this compaction builds on; CAS from it at the end
    view = log.view(run)
    lineage, idx, prev = _timeline(log, run, view)
    start = idx[prev[1]["covered_through"]] + 1 if prev and prev[1]["covered_through"] is not None else 0
    turns = [r for r in lineage[start:] if r.kind == R.TURN]
    cut = max(0, len(turns) - keep_tail)
    summarize, tail = turns[:cut], turns[cut:]

    snap = read_once(log, host, caller, run, budget_bytes)  # the one read
    rendered = render(snap)  # the one rendering
    # Turns after the journal's source_end are not reflected in it: the compactor is told so, per turn.
    se = snap.source_end if snap.outcome == PRESENT and snap.session == run else -1
    unreflected = [r for r in summarize if r.lsn > se]

    prev_summary = log.store.get_blob(prev[1]["summary"]).decode("utf-8") if prev else ""
    hist = []
    if historical and prev:
        seen = {snap.journal_id} if snap.journal_id else set()
        for sid, seg in segments(log, run):
            j = seg["journal"]
            if j["journal_id"] is not None and j["journal_id"] not in seen and j["outcome"] == PRESENT:
                seen.add(j["journal_id"])
                hist.append({"label": "historical journal text (earlier compaction boundary; reference only)",
                             "segment": sid.hex(), "version": j["version"], "text": log.store.get_blob(j["rendered"]).decode("utf-8")})

    def turn_item(r):
        return {"branch": r.branch, "lsn": r.lsn, "role": r.body["role"], "reflected_in_journal": r.lsn <= se, "text": _turn_text(log, r)}

    request = {
        "instructions": INSTRUCTIONS,
        "previous_summary": prev_summary,
        "historical_journals": hist,
        "journal": {"outcome": snap.outcome, "reason": snap.reason, "session": snap.session, "version": snap.version,
                    "sha256": snap.sha256, "source_end": snap.source_end, "checkpoint": snap.checkpoint,
                    "provenance": snap.provenance, "text": rendered},
        "turns": [turn_item(r) for r in summarize],
        "retained_tail": [turn_item(r) for r in tail],
    }
    request_bytes = codec.canonical_json(request)
    if len(request_bytes) > compactor.max_input_bytes:
        raise LimitExceeded(f"compactor input is {len(request_bytes)} bytes, over its hard limit of {compactor.max_input_bytes}; "
                            "nothing was truncated and nothing was written")
    reply = compactor(request, request_bytes)
    summary = reply["text"]

    store = log.store
    seg = {
        "run": run,
        "seq": store.get_typed(head, codec.SEGMENT)["seq"] + 1 if head else 1,
        "previous": head,
        "branch": view.live,
        "covered_through": summarize[-1].id if summarize else (prev[1]["covered_through"] if prev else None),
        "summary": store.put_blob(summary.encode("utf-8")),
        "summary_role": reply.get("role"),
        "origin": R.ORIGIN_DERIVED,
        "journal": {
            "outcome": snap.outcome, "reason": snap.reason, "session": snap.session, "journal_id": snap.journal_id,
            "version": snap.version, "body": store.put_blob(snap.body_json) if snap.body_json is not None else None,
            "sha256": snap.sha256, "source_end": snap.source_end, "checkpoint": snap.checkpoint,
            "provenance": snap.provenance, "rendered": store.put_blob(rendered.encode("utf-8")),
        },
        "retained": [r.id for r in tail],
        "unreflected": [r.id for r in unreflected],
        "input": store.put_blob(request_bytes),
        "input_sha256": hashlib.sha256(request_bytes).hexdigest(),
        "compactor": compactor.name,
        "time": time.time(),
    }
    sid = store.put(codec.SEGMENT, seg)
    try:
        store.set_ref(segments_ref(run), seg["previous"], sid, f"compaction {seg['seq']}")
    except Conflict:
        raise Conflict(segments_ref(run), "the segment this compaction started from", "a newer segment (concurrent compaction)") from None
    return CompactionResult(sid, seg, snap, rendered, request_bytes, summary)


# -- restore: context for the next turn, from stored segments only ----------------------------------------

def context(log, run: str, view=None) -> list[dict]:
    """What the model sees next: the applicable segment's summary and frozen journal (derived,
    labelled), its retained tail, then later turns (source). Never reads the journal."""
    view = view or log.view(run)
    lineage, idx, app = _timeline(log, run, view)
    items = []
    start = 0
    if app:
        sid, seg = app
        items.append({"origin": R.ORIGIN_DERIVED, "kind": "summary", "role": seg["summary_role"], "segment": sid.hex(),
                      "text": log.store.get_blob(seg["summary"]).decode("utf-8")})
        j = seg["journal"]
        items.append({"origin": R.ORIGIN_DERIVED, "kind": "journal_context", "role": None, "segment": sid.hex(),
                      "outcome": j["outcome"], "sha256": j["sha256"], "provenance": j["provenance"],
                      "text": log.store.get_blob(j["rendered"]).decode("utf-8")})
        for rid in seg["retained"]:
            if rid in idx:
                r = lineage[idx[rid]]
                items.append({"origin": R.ORIGIN_SOURCE, "kind": "turn", "role": r.body["role"], "lsn": r.lsn, "text": _turn_text(log, r)})
        if seg["covered_through"] is not None:
            start = idx[seg["covered_through"]] + 1
        retained = set(seg["retained"])
    else:
        retained = set()
    for r in lineage[start:]:
        if r.kind == R.TURN and r.id not in retained:
            items.append({"origin": R.ORIGIN_SOURCE, "kind": "turn", "role": r.body["role"], "lsn": r.lsn, "text": _turn_text(log, r)})
    return items


def classify(otype: str, value: Any) -> str:
    """Origin of stored material, by object type and record kind only (never by body markers)."""
    if otype == codec.RECORD:
        return R.ORIGIN_SOURCE if value.get("kind") == R.TURN else "log"
    if otype in (codec.SEGMENT, codec.JOURNAL):
        return R.ORIGIN_DERIVED
    return "other"
