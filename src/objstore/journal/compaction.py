"""The compaction core: one Host answer, frozen, rendered once, used twice.

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

The pieces live beside it: ``snapshot`` (freeze, render), ``compactor`` (the interface and
the deterministic stub), ``sessions`` (the startup read, turns, tasks), ``segments`` (the
segment chain and restore), ``host`` (selection, authorization, projection), ``grants`` and
``identity`` (who may act), ``journal`` (versions).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import Conflict, InvalidInput, LimitExceeded
from ..runs import records as R
from ..storage import codec, identity
from ..storage.runrefs import segments_ref
from .compactor import INSTRUCTIONS
from .host import OVER_BUDGET, PRESENT, At, HostUnavailable
from .restore import COMPACTION_SEGMENT_SCHEMA, _tasks_at, _timeline, _turn_text, frozen_of, frozen_of_startup
from .sessions import is_session, startup_event
from .snapshot import Snapshot, freeze, unavailable
from .versions import reflected_through

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..runs.chain import ChainReader
    from .compactor import Compactor
    from .host import JournalHost


@dataclass
class CompactionResult:
    segment_id: bytes
    segment: dict
    snapshot: Snapshot
    rendered: str
    request_bytes: bytes
    summary: str


def compact(log: RunLog, run: str, compactor: Compactor, *, host: JournalHost | None, key: identity.Key | None, keep_tail: int = 4,
            budget_bytes: int = 64 * 1024, historical: bool = True) -> CompactionResult:
    """Compact the live timeline of a session: one signed Host read, one frozen answer, one rendering,
    one new segment (compare-and-swap on the segments ref; earlier segments are never rewritten)."""
    if not isinstance(keep_tail, int) or keep_tail < 0:
        raise InvalidInput("keep_tail must be a non-negative integer")
    if key is None:
        raise InvalidInput("a compaction is signed by its key (the segment and the Host read): pass key=")
    if not is_session(log, run):
        # a segment summarizes a session's turns for its next context; any other run has none to
        # summarize, and a segments ref on it would make it look like a session to every later reader
        raise InvalidInput(f"run {run} is not a session (a session is started by 'objstore session start' or "
                           "journal.start_session); only a session can be compacted")
    # One position for the timeline, the segment it builds on (CAS from it at the end) and the
    # grants that vouch for the segments: they were three reads, each catching up on its own.
    at = At(log.store, [run], [])
    head = at.ref(segments_ref(run))
    head = head if isinstance(head, bytes) else None
    view = log.view_from(run, at.run_refs(run))
    lineage, idx, segs, prev = _timeline(log, run, view, at)

    # The one read; the answer is frozen before anything is built from it.
    snap = freeze(_read_host(host, key, run, budget_bytes))
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

    request = _compactor_request(log, snap, a, rt, reflected, prev_summary, hist, identical_to, tasks, summarize, tail)
    request_bytes, reply = _ask(compactor, request)
    summary = reply["text"]

    store = log.store
    with store.batch():
        cur = store.read_ref(segments_ref(run))
        if (cur if isinstance(cur, bytes) else None) != head:
            raise Conflict(segments_ref(run), "the segment this compaction started from", "a newer segment (concurrent compaction)")
        seg = {
            "v": COMPACTION_SEGMENT_SCHEMA,
            "run": run,
            "seq": store.get_typed(head, codec.COMPACTION_SEGMENT)["seq"] + 1 if head else 1,
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
        sid = store.put(codec.COMPACTION_SEGMENT, seg)
        store.set_ref(segments_ref(run), head, sid, f"compaction {seg['seq']}")
    return CompactionResult(sid, seg, snap, snap.rendered, request_bytes, summary)


def _read_host(host: JournalHost | None, key: identity.Key, run: str, budget_bytes: int) -> dict | bytes:
    """Compaction's one read of the Host, signed by ``key``: its answer, or an ``unavailable`` one
    when there is no Host or the read fails."""
    answer: dict | bytes
    if host is None:
        answer = unavailable("no_host: no journal host configured", "compaction", run)
    else:
        req = identity.sign_request(key, "read", run, params={"purpose": "compaction", "budget": budget_bytes, "predecessor": None})
        try:
            answer = host.read(req)
        except HostUnavailable as e:
            answer = unavailable(f"read_failed: {e.reason}", "compaction", run)
    return answer


def _compactor_request(log: RunLog, snap: Snapshot, a: dict, rt: str | None, reflected: set, prev_summary: str,
                       hist: list[dict], identical_to: bytes | None, tasks: list, summarize: list[R.Record],
                       tail: list[R.Record]) -> dict:
    """The compactor's input: the previous summary, the historical journals, the frozen journal
    answer and its rendering, the open tasks, the turns to summarize and the retained tail."""
    def turn_item(r: R.Record) -> dict:
        return {"branch": r.branch, "lsn": r.lsn, "id": r.id.hex(), "role": r.body.get("role"),  # a deleted turn: header-only
                "reflected_in_journal": r.id in reflected, "text": _turn_text(log, r)}

    return {
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


def _ask(compactor: Compactor, request: dict) -> tuple[bytes, dict]:
    """(the request's canonical bytes, the compactor's reply): over its hard input limit, or a reply
    that is not ``{'role': str, 'text': str}``, raises with nothing written."""
    request_bytes = codec.canonical_json(request)
    if len(request_bytes) > compactor.max_input_bytes:
        raise LimitExceeded(f"compactor input is {len(request_bytes)} bytes, over its hard limit of {compactor.max_input_bytes}; "
                            "nothing was truncated and nothing was written")
    # a copy: the segment ``compact`` writes shares lists with ``request`` (tasks), and a compactor may mutate its input
    reply = compactor(json.loads(request_bytes), request_bytes)
    if not isinstance(reply, dict) or not isinstance(reply.get("text"), str) or not isinstance(reply.get("role"), (str, type(None))):
        raise InvalidInput("the compactor must answer {'role': str, 'text': str}; nothing was written")
    return request_bytes, reply


def _historical(log: ChainReader, run: str, a: dict, include: bool, segs: list) -> tuple[list[dict], bytes | None]:
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

    def item(label: str, oid: bytes, startup: bool, f: dict) -> dict:
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


