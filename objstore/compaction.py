"""The compaction core (seed T-745): one Host answer, frozen, rendered once, used twice.

``compact`` sends one signed read to the Host and **freezes** the answer at once
(its canonical JSON bytes; nothing later reads the Host's object again). The
rendering of those bytes (``render``) is the one text that goes into the
compactor input and into the new ``segment``. The core selects nothing and
authorizes nothing: a refusal is the Host's, and propagates with nothing written.

The rendered text holds the read result (the answer's canonical JSON, verbatim),
the SHA-256 of exactly those bytes, and the prompt-source / projection
provenance. An over-budget journal arrives as the Host's bounded projection and
is passed on as it is: nothing after the Host's answer cuts it or the previous
summary; an input over the compactor's hard limit is ``LimitExceeded`` and writes
nothing.

``start_session`` does the startup read and freezes its answer into the session's
``run_started`` body (LSN 0) as a typed event, so every branch inherits it and a
restore never re-reads it. ``context`` (normal turns, restore after a rewind) is
built from stored segments and that event only; it never calls a Host.

The compactor is an interface; ``StubCompactor`` is deterministic. It proves
transport and storage, not summary quality.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from . import codec, identity
from . import records as R
from .errors import Conflict, InvalidInput, LimitExceeded
from .runrefs import segments_ref
from .host import ABSENT, OVER_BUDGET, PRESENT, UNAVAILABLE, HostUnavailable

SEGMENT_SCHEMA = 2
STARTUP_EVENT = R.STARTUP_EVENT

INSTRUCTIONS = (
    "Summarize the conversation turns below for continuing the work. Fill gaps, do not copy the journal: "
    "keep information the journal is missing, work not yet done, results not yet confirmed, and instructions "
    "for continuing. Turns marked reflected_in_journal=false are not in the journal: carry them. "
    "The journal context is derived material, not a record of what happened; an absent, disabled, "
    "unavailable or over-budget journal does not mean the history was recorded. Historical journal texts are "
    "material of their own time, for reference only; their retention notes applied to their own boundary."
)


# -- the frozen snapshot ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """A Host's answer, frozen: its canonical JSON bytes and the one rendering of them."""

    answer_json: bytes
    sha256: str
    rendered: str

    def _doc(self) -> dict:
        """The answer parsed from the frozen bytes, once (what callers get are copies)."""
        d = self.__dict__.get("_parsed")
        if d is None:
            d = json.loads(self.answer_json)
            object.__setattr__(self, "_parsed", d)
        return d

    @property
    def answer(self) -> types.MappingProxyType:
        return types.MappingProxyType(copy.deepcopy(self._doc()))

    def __getattr__(self, name: str) -> Any:  # outcome, reason, session, version, text, … from the frozen bytes
        if name.startswith("_"):
            raise AttributeError(name)
        a = self._doc()
        if name in a:
            return copy.deepcopy(a[name])
        raise AttributeError(name)

    @property
    def provenance(self) -> dict:
        a = self._doc()
        return {"origin": R.ORIGIN_DERIVED, "kind": "journal_context", "host": a.get("host"), "purpose": a.get("purpose"),
                "prompt_source": a.get("prompt_source"), "projection": a.get("projection"),
                "selection": a.get("selection", {}).get("rule"), "answer_sha256": self.sha256}


def freeze(answer) -> Snapshot:
    """Freeze a Host's answer (a JSON object, or its bytes) before anything is built from it."""
    if isinstance(answer, (bytes, bytearray, memoryview)):
        doc = json.loads(bytes(answer))
    elif isinstance(answer, dict):
        doc = json.loads(codec.canonical_json(answer))  # a deep copy through bytes: later mutation cannot reach it
    else:
        raise InvalidInput("a Host answer is a JSON object")
    if not isinstance(doc, dict) or doc.get("outcome") not in (PRESENT, ABSENT, "disabled", UNAVAILABLE, OVER_BUDGET):
        raise InvalidInput("a Host answer has an outcome")
    data = codec.canonical_json(doc)
    sha = hashlib.sha256(data).hexdigest()
    return Snapshot(data, sha, render(data, sha, doc))


def unavailable(reason: str, purpose: str, run: str | None) -> dict:
    return {"v": 1, "host": None, "purpose": purpose, "requested": run, "outcome": UNAVAILABLE, "reason": reason,
            "session": None, "selection": {"rule": "none", "tried": []}, "text": None, "projection": None,
            "prompt_source": None}


def render(answer_json: bytes, sha: str, a: dict) -> str:
    """The one rendering of a frozen answer: a header, the prompt-source / projection provenance,
    the SHA-256 of the answer's JSON and that JSON verbatim (the journal text, or its bounded
    projection, is its ``text`` field: one copy, covered by the hash)."""
    sel = a.get("selection") or {}
    tried = ", ".join(f"{t.get('session')} {t.get('outcome')}" for t in sel.get("tried", [])) or "nothing"
    if a.get("projection") == "bounded":
        om = a.get("omitted") or {}
        proj = f"bounded projection within {a.get('budget')} bytes ({len(om.get('entries', []))} entries omitted)"
    else:
        proj = a.get("projection") or "none"
    lines = [
        f"[journal context: derived material, not source. {a.get('purpose')} read, outcome {a['outcome']}"
        + (f" ({a['reason']})" if a.get("reason") else "") + "]",
        f"prompt source: {a.get('prompt_source') or 'none'}; projection: {proj}; selection: {sel.get('rule', 'none')} (tried: {tried})",
        f"read result sha256: {sha}",
        "read result: " + answer_json.decode("utf-8"),
    ]
    if a["outcome"] not in (PRESENT, OVER_BUDGET):
        lines.append("This does not mean the history was recorded.")
    return "\n".join(lines)


# -- compactors --------------------------------------------------------------------------------------

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
            f"{' v' + str(j['version']) if j.get('version') else ''}, previous summary {len(request['previous_summary'])} bytes, "
            f"{len(request['historical_journals'])} historical journal(s), {len(request.get('tasks', []))} open task(s)."
        )
        return {"role": self.role, "text": text}


# -- sessions: the startup read ------------------------------------------------------------------------

def start_session(log, subject: str | None = None, predecessor: str | None = None, *, run: str | None = None,
                  host=None, key: identity.Key | None = None, budget_bytes: int = 64 * 1024, **kw) -> str:
    """Start a session of ``subject``. The Host selects the startup journal (the predecessor's, else
    the newest of another session of the subject, else none) and its frozen answer becomes a typed
    ``journal_startup`` event in the ``run_started`` body. Without a Host the event records
    ``unavailable (no_host)``."""
    if not subject:
        raise InvalidInput("a session has a subject")
    if predecessor is not None and predecessor not in log.runs():
        raise InvalidInput(f"predecessor session {predecessor} does not exist")
    if host is None:
        answer = unavailable("no_host: no journal host configured", "startup", None)
    else:
        if key is None:
            raise InvalidInput("a startup read is a signed request: pass key=")
        req = identity.sign_request(key, "read", None, subject=subject,
                                    params={"purpose": "startup", "budget": budget_bytes, "predecessor": predecessor})
        try:
            answer = host.read(req)
        except HostUnavailable as e:
            answer = unavailable(f"read_failed: {e.reason}", "startup", None)
    snap = freeze(answer)
    event = {"type": STARTUP_EVENT, "answer": snap.answer_json.decode("utf-8"), "answer_sha256": snap.sha256,
             "rendered": snap.rendered}
    meta = {"session": True, "predecessor": predecessor, "startup": event}
    return log.start_run(run, subject=subject, meta=meta, **kw)


def startup_event(log, run: str) -> dict | None:
    """The session's typed startup event, recognised by its type only (never by body text)."""
    return R.startup_of(log.run_started(run).body)


# -- segments ----------------------------------------------------------------------------------------

def segments(log, run: str, *, trusted_only: bool = False) -> list[tuple[bytes, dict]]:
    """The run's segments, oldest first, by following ``previous`` from the ref. ``trusted_only``:
    only those signed by a compacting key allowed to read the session then (what restore and
    later compactions build on; ``host.LocalJournalHost.segment_trusted``)."""
    from .host import LocalJournalHost

    out = []
    sid = log.store.read_ref(segments_ref(run))
    while isinstance(sid, bytes):
        seg = log.store.get_typed(sid, codec.SEGMENT)
        out.append((sid, seg))
        sid = seg["previous"]
    out.reverse()
    if trusted_only:
        check = LocalJournalHost(log).segment_trusted
        out = [(sid, seg) for sid, seg in out if check(run, sid, seg)[0]]
    return out


def frozen_of(log, seg: dict) -> dict:
    """A segment's frozen snapshot, whatever its schema: outcome, body hash, projection, rendered text."""
    if seg.get("v") == SEGMENT_SCHEMA:
        s = seg["snapshot"]
        return {"outcome": s["outcome"], "body_sha256": s["body_sha256"], "projection": s["projection"],
                "answer_sha256": s["answer_sha256"], "version": s["version"], "session": s["session"],
                "rendered": log.store.get_blob(s["rendered"]).decode("utf-8"), "identical_to": s.get("identical_to")}
    j = seg["journal"]  # schema 1: the body hash was the hash of the whole body, read in full
    return {"outcome": j["outcome"], "body_sha256": j.get("sha256"), "projection": "full" if j.get("sha256") else None,
            "answer_sha256": None, "version": j.get("version"), "session": j.get("session"),
            "rendered": log.store.get_blob(j["rendered"]).decode("utf-8"), "identical_to": None}


def frozen_of_startup(ev: dict) -> dict:
    """A startup event's frozen snapshot, in ``frozen_of``'s shape."""
    sa = json.loads(ev["answer"])
    return {"outcome": sa["outcome"], "body_sha256": sa.get("body_sha256"), "projection": sa.get("projection"),
            "answer_sha256": ev["answer_sha256"], "version": sa.get("version"), "session": sa.get("session"),
            "rendered": ev["rendered"], "identical_to": None}


def _timeline(log, run: str, view):
    """(live lineage, id -> position, trusted segments oldest first, applicable segment), shared by
    compaction and restore: the segment chain is walked and its signatures checked once."""
    lineage = log.lineage(view, view.live)
    idx = {r.id: i for i, r in enumerate(lineage)}
    segs = segments(log, run, trusted_only=True)
    return lineage, idx, segs, _applicable(segs, idx)


def _applicable(segs: list, idx: dict) -> tuple[bytes, dict] | None:
    """The newest segment whose covered turns are on the live timeline (after a rewind, an older one)."""
    for sid, seg in reversed(segs):
        if seg["covered_through"] is None or seg["covered_through"] in idx:
            return sid, seg
    return None


def _turn_text(log, r: R.Record) -> str:
    return log.store.get_blob(r.body["content"]).decode("utf-8", "replace") if r.body.get("content") else ""


def _tasks_at(log, lineage, idx, seg: dict | None) -> list[dict]:
    """Open tasks: the segment's stored list plus task records after its head, or the whole fold."""
    from .journal import fold_tasks

    if seg is not None and seg.get("v") == SEGMENT_SCHEMA and seg.get("through") in idx:
        return fold_tasks(lineage[idx[seg["through"]] + 1:], seg["tasks"])
    return fold_tasks(lineage)


@dataclass
class CompactionResult:
    segment_id: bytes
    segment: dict
    snapshot: Snapshot
    rendered: str
    request_bytes: bytes
    summary: str


def compact(log, run: str, compactor, *, host, key: identity.Key | None, keep_tail: int = 4, budget_bytes: int = 64 * 1024,
            historical: bool = True) -> CompactionResult:
    """Compact the live timeline of a session: one signed Host read, one frozen answer, one rendering,
    one new segment (compare-and-swap on the segments ref; earlier segments are never rewritten)."""
    from .journal import reflected_through

    if not isinstance(keep_tail, int) or keep_tail < 0:
        raise InvalidInput("keep_tail must be a non-negative integer")
    if key is None:
        raise InvalidInput("a compaction is signed by its key (the segment and the Host read): pass key=")
    head = log.store.read_ref(segments_ref(run))  # the segment this compaction builds on; CAS from it at the end
    head = head if isinstance(head, bytes) else None
    view = log.view(run)
    lineage, idx, segs, prev = _timeline(log, run, view)

    # The one read; the answer is frozen before anything is built from it.
    if host is None:
        answer = unavailable("no_host: no journal host configured", "compaction", run)
    else:
        req = identity.sign_request(key, "read", run, params={"purpose": "compaction", "budget": budget_bytes, "predecessor": None})
        try:
            answer = host.read(req)
        except HostUnavailable as e:
            answer = unavailable(f"read_failed: {e.reason}", "compaction", run)
    snap = freeze(answer)
    a = json.loads(snap.answer_json)

    start = idx[prev[1]["covered_through"]] + 1 if prev and prev[1]["covered_through"] is not None else 0
    turns = [r for r in lineage[start:] if r.kind == R.TURN]
    cut = max(0, len(turns) - keep_tail)
    summarize, tail = turns[:cut], turns[cut:]
    rt = a.get("reflects_through") if a["outcome"] in (PRESENT, OVER_BUDGET) else None
    reflected = reflected_through(log, bytes.fromhex(rt)) if rt else set()
    unreflected = [r for r in summarize if r.id not in reflected]
    tasks = _tasks_at(log, lineage, idx, None)

    prev_summary = log.store.get_blob(prev[1]["summary"]).decode("utf-8") if prev else ""
    # the startup snapshot too: before the first segment it is the only old journal the compactor can see
    hist, identical_to = _historical(log, run, a, historical, segs)

    def turn_item(r):
        return {"branch": r.branch, "lsn": r.lsn, "id": r.id.hex(), "role": r.body["role"],
                "reflected_in_journal": r.id in reflected, "text": _turn_text(log, r)}

    request = {
        "instructions": INSTRUCTIONS,
        "previous_summary": prev_summary,
        "historical_journals": hist,
        "journal": {"outcome": a["outcome"], "reason": a.get("reason"), "session": a.get("session"),
                    "version": a.get("version"), "answer_sha256": snap.sha256, "body_sha256": a.get("body_sha256"),
                    "reflects_through": rt, "checkpoint": a.get("checkpoint"), "provenance": snap.provenance,
                    "identical_to_historical": identical_to.hex() if identical_to else None, "text": snap.rendered},
        "tasks": tasks,
        "turns": [turn_item(r) for r in summarize],
        "retained_tail": [turn_item(r) for r in tail],
    }
    request_bytes = codec.canonical_json(request)
    if len(request_bytes) > compactor.max_input_bytes:
        raise LimitExceeded(f"compactor input is {len(request_bytes)} bytes, over its hard limit of {compactor.max_input_bytes}; "
                            "nothing was truncated and nothing was written")
    # a copy: the segment below shares lists with ``request`` (tasks), and a compactor may mutate its input
    reply = compactor(json.loads(request_bytes), request_bytes)
    if not isinstance(reply, dict) or not isinstance(reply.get("text"), str) or not isinstance(reply.get("role"), (str, type(None))):
        raise InvalidInput("the compactor must answer {'role': str, 'text': str}; nothing was written")
    summary = reply["text"]

    store = log.store
    with store.batch():
        cur = store.read_ref(segments_ref(run))
        if (cur if isinstance(cur, bytes) else None) != head:
            raise Conflict(segments_ref(run), "the segment this compaction started from", "a newer segment (concurrent compaction)")
        seg = {
            "v": SEGMENT_SCHEMA,
            "run": run,
            "seq": store.get_typed(head, codec.SEGMENT)["seq"] + 1 if head else 1,
            "previous": head,
            "branch": view.live,
            "covered_through": summarize[-1].id if summarize else (prev[1]["covered_through"] if prev else None),
            "through": lineage[-1].id,
            "summary": store.put_blob(summary.encode("utf-8")),
            "summary_role": reply.get("role"),
            "origin": R.ORIGIN_DERIVED,
            "snapshot": {
                "answer": store.put_blob(snap.answer_json), "answer_sha256": snap.sha256,
                "rendered": store.put_blob(snap.rendered.encode("utf-8")), "outcome": a["outcome"],
                "session": a.get("session"), "version": a.get("version"), "body_sha256": a.get("body_sha256"),
                "projection": a.get("projection"), "identical_to": identical_to,
            },
            "tasks": tasks,
            "retained": [r.id for r in tail],
            "unreflected": [r.id for r in unreflected],
            "input": store.put_blob(request_bytes),
            "input_sha256": hashlib.sha256(request_bytes).hexdigest(),
            "compactor": compactor.name,
            "time": time.time(),
        }
        seg = identity.sign_object(key, seg)  # restore trusts only segments of keys allowed to compact
        sid = store.put(codec.SEGMENT, seg)
        store.set_ref(segments_ref(run), head, sid, f"compaction {seg['seq']}")
    return CompactionResult(sid, seg, snap, snap.rendered, request_bytes, summary)


def _historical(log, run: str, a: dict, include: bool, segs: list) -> tuple[list[dict], bytes | None]:
    """Earlier frozen journal texts for the compactor, each body once, labelled historical.

    A text identical (same body hash) to the current journal is not repeated when the current
    answer carries the full body; when the current answer is a bounded projection, the earlier
    full text goes in once, labelled ``historical — identical to the current journal``, so the
    continuation it held is neither lost nor doubled. Returns (items, the id of the object holding
    the identical frozen text: a segment, or the ``run_started`` record of the startup event)."""
    cur_sha = a.get("body_sha256") if a["outcome"] in (PRESENT, OVER_BUDGET) else None
    cur_full = a["outcome"] == PRESENT
    items, seen, identical_to = [], set(), None
    sources = []  # (id of the object holding the frozen text, is the startup event, frozen fields)
    ev = startup_event(log, run)
    if ev is not None:
        sources.append((log.run_started(run).id, True, frozen_of_startup(ev)))
    for sid, seg in segs:
        sources.append((sid, False, frozen_of(log, seg)))

    def item(label, oid, startup, f):
        return {"label": label, "segment": None if startup else oid.hex(), "startup": startup,
                "record": oid.hex() if startup else None, "session": f["session"], "version": f["version"],
                "body_sha256": f["body_sha256"], "text": f["rendered"]}

    full_match = None
    for oid, startup, f in sources:
        if f["outcome"] not in (PRESENT, OVER_BUDGET) or not f["body_sha256"]:
            continue
        if cur_sha and f["body_sha256"] == cur_sha:
            identical_to = identical_to or oid
            if f["projection"] == "full" and full_match is None:
                full_match = (oid, startup, f)
            continue
        if f["body_sha256"] in seen:
            continue
        seen.add(f["body_sha256"])
        if include:
            items.append(item("historical journal text (material of its own time; its retention notes applied to its own boundary)",
                              oid, startup, f))
    if full_match is not None and not cur_full:
        identical_to = full_match[0]
        items.append(item(f"historical — identical to the current journal (sha256 {cur_sha})", *full_match))
    return items, identical_to


# -- restore: context for the next turn, from stored segments only ------------------------------------

def context(log, run: str, view=None) -> list[dict]:
    """What the model sees next: the applicable segment's summary and frozen journal (derived,
    labelled) — or, before any, the session's startup event — the open tasks, the retained tail,
    then later turns (source). Never calls a Host."""
    view = view or log.view(run)
    lineage, idx, _, app = _timeline(log, run, view)
    items = []
    start = 0
    retained: set = set()
    if app:
        sid, seg = app
        f = frozen_of(log, seg)
        items.append({"origin": R.ORIGIN_DERIVED, "kind": "summary", "role": seg["summary_role"], "segment": sid.hex(),
                      "text": log.store.get_blob(seg["summary"]).decode("utf-8")})
        prov = seg["journal"]["provenance"] if seg.get("v") != SEGMENT_SCHEMA else \
            Snapshot(log.store.get_blob(seg["snapshot"]["answer"]), f["answer_sha256"], f["rendered"]).provenance
        items.append({"origin": R.ORIGIN_DERIVED, "kind": "journal_context", "role": None, "segment": sid.hex(),
                      "outcome": f["outcome"], "sha256": f["answer_sha256"] or f["body_sha256"],
                      "body_sha256": f["body_sha256"], "provenance": prov, "text": f["rendered"]})
        if seg["covered_through"] is not None:
            start = idx[seg["covered_through"]] + 1
        retained = set(seg["retained"])
        tasks = _tasks_at(log, lineage, idx, seg)
    else:
        ev = startup_event(log, run)
        if ev is not None:
            f = frozen_of_startup(ev)
            prov = Snapshot(ev["answer"].encode("utf-8"), f["answer_sha256"], f["rendered"]).provenance
            items.append({"origin": R.ORIGIN_DERIVED, "kind": "journal_startup", "role": None, "segment": None,
                          "outcome": f["outcome"], "sha256": f["answer_sha256"], "body_sha256": f["body_sha256"],
                          "provenance": prov, "text": f["rendered"]})
        tasks = _tasks_at(log, lineage, idx, None)
    items.append({"origin": R.ORIGIN_SOURCE, "kind": "tasks", "role": None, "open": tasks})
    if app:
        for rid in app[1]["retained"]:
            if rid in idx:
                r = lineage[idx[rid]]
                items.append({"origin": R.ORIGIN_SOURCE, "kind": "turn", "role": r.body["role"], "lsn": r.lsn, "text": _turn_text(log, r)})
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
