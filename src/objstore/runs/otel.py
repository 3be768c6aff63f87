"""A run as OpenTelemetry spans (GenAI semantic conventions), before any wire encoding.

This module owns the mapping from a run's objects to spans; ``otlp`` encodes the spans as OTLP
(protobuf, JSON) and sends them. docs/OTEL.md gives the mapping table. What it keeps:

* **Pinned conventions.** Attribute names and operation names are those of the GenAI semantic
  conventions ``SEMCONV_VERSION`` (``SCHEMA_URL`` is put on the export); a change of version is a
  change here and in docs/OTEL.md, never a silent drift.
* **Idempotent ids.** The trace id is derived from the run id, a span id from the id of the object
  it stands for (its first 8 bytes: object ids are hashes), so exporting the same run twice gives
  the same ids and a backend sees the same spans, not copies. The output has no export time.
* **One span per attempt.** Every attempt record is a span of its own, failed ones with status
  ERROR and their error text: retries are never folded into one span.
* **Times from the records.** A record's time is when it was written, i.e. when what it records
  had happened: a span *ends* at its record's time and *starts* at the time of the object before it
  on its chain (its parent record, or its branch's fork object), the moment the step could begin.
  The run's span starts at ``run_started`` and ends at the latest end of its spans. An
  ``execute_tool`` span of an intent ends at the time of the ``intent_committed`` record that
  commits it (the earliest, if branches commit it more than once); an intent never committed
  ends where it starts. A record without a time takes its parent's.
* **Live by default.** Like ``objstore export``, only the live lineage is exported (the live
  branch's records, then each parent's up to the fork point); ``all_branches`` adds every retained
  branch's own records. Fork objects are spans whose link points at the fork record's span.
* **No bodies unless asked.** Spans carry blob ids (``objstore.blob.*``); with ``bodies`` the
  blobs are read through the store's normal read path (``Store.get_blob``), which refuses a
  deleted or redacted blob (``Erased``): such a body is never exported, the span says it was
  withheld. Deleted records are header-only and export their header only. Derived material (a
  journal's derived turns, a startup context) is never exported, as in ``runs.export``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Erased
from . import records as R

if TYPE_CHECKING:
    from ..storage.store import Store
    from .chain import ChainReader, View

SEMCONV_VERSION = "1.37.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE_NAME = "objstore"
SERVICE_NAME = "objstore"

# span kinds and statuses as OTLP numbers them (trace.proto: SpanKind, Status.StatusCode)
KIND_INTERNAL, KIND_CLIENT = 1, 2
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2

Value = str | int | float | bool | list
_INT64 = (-(2**63), 2**63 - 1)


@dataclass
class Link:
    trace_id: bytes
    span_id: bytes
    attributes: dict[str, Value] = field(default_factory=dict)


@dataclass
class Span:
    span_id: bytes
    parent_id: bytes | None
    name: str
    kind: int
    start: float
    end: float
    status: int = STATUS_UNSET
    message: str = ""
    attributes: dict[str, Value] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)


@dataclass
class Trace:
    trace_id: bytes
    spans: list[Span]  # the run's span first, then oldest first


def trace_id(run: str) -> bytes:
    """The trace id of a run: 16 bytes of SHA-256 over a fixed prefix and the run id."""
    return hashlib.sha256(b"objstore/otel/trace\0" + run.encode("utf-8")).digest()[:16]


def span_id(oid: bytes) -> bytes:
    """The span id of an object: its id's first 8 bytes (never all zero, which OTLP forbids)."""
    sid = bytes(oid[:8])
    return sid if any(sid) else hashlib.sha256(b"objstore/otel/span\0" + bytes(oid)).digest()[:8]


def _value(v: Any) -> Value | None:
    if isinstance(v, bool) or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v if _INT64[0] <= v <= _INT64[1] else str(v)
    if isinstance(v, float):
        return v
    return None


# -- collecting the objects ---------------------------------------------------------------
def _groups(log: ChainReader, view: View, all_branches: bool) -> list[tuple[list[R.Record], dict | None]]:
    """(own records oldest first, fork object or None) per exported chain piece: every branch's own
    records with ``all_branches`` (they hold the live lineage too), else the live lineage: the live
    branch's own, then each parent's up to its fork point (stopping at a copy's cross-run fork)."""
    if all_branches:
        return [log.chain(view.head(b)) for b in sorted(view.heads)]
    out = []
    head: bytes | None = view.head(view.live)
    while head is not None:
        own, fk = log.chain(head)
        out.append((own, fk))
        if fk is None or fk.get("parent_run"):
            break
        head = fk["parent_record"]
    out.reverse()
    return out


class _Builder:
    def __init__(self, store: Store, run: str, live: int, bodies: bool) -> None:
        self.store = store
        self.run = run
        self.live = live
        self.bodies = bodies
        self.trace = trace_id(run)
        self.times: dict[bytes, float | None] = {}
        self.parent: dict[bytes, bytes | None] = {}
        self.records: dict[bytes, R.Record] = {}
        self.span_of: dict[bytes, bytes] = {}  # object id -> the span standing for it
        self.root = b""

    def time_of(self, oid: bytes | None) -> float | None:
        seen = 0
        while oid is not None and seen < 1_000_000:
            t = self.times.get(oid)
            if t is not None:
                return t
            oid = self.parent.get(oid)
            seen += 1
        return None

    def window(self, oid: bytes) -> tuple[float, float]:
        end = self.time_of(oid)
        p = self.parent.get(oid)
        start = self.time_of(p) if p is not None else None
        end = end if end is not None else (start if start is not None else 0.0)
        return (start if start is not None and start <= end else end), end

    def base(self, r: R.Record) -> dict[str, Value]:
        return {"objstore.run": r.run, "objstore.record.id": r.id.hex(), "objstore.branch": r.branch, "objstore.lsn": r.lsn,
                "objstore.kind": r.kind}

    def blob_attrs(self, r: R.Record, attrs: dict[str, Value]) -> None:
        for name in R.BLOB_FIELDS:
            ref = r.body.get(name)
            if not isinstance(ref, bytes):
                continue
            attrs[f"objstore.blob.{name}"] = ref.hex()
            if not self.bodies:
                continue
            try:
                data = self.store.get_blob(ref)
            except Erased as e:
                attrs[f"objstore.body.{name}.withheld"] = e.code
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                attrs[f"objstore.body.{name}.withheld"] = "not-utf-8"
                continue
            attrs[f"objstore.body.{name}"] = text


def build(log: ChainReader, run: str, view: View | None = None, *, all_branches: bool = False, bodies: bool = False) -> Trace:
    """The spans of ``run`` (see the module docstring); ``bodies`` reads blob bodies through the store."""
    view = view or log.view(run)
    groups = _groups(log, view, all_branches)
    bld = _Builder(log.store, view.run, view.live, bodies)
    forks: list[dict] = []
    for own, fk in groups:
        if fk is not None:
            forks.append(fk)
            bld.times[bytes(fk["id"])] = fk.get("time")
            bld.parent[bytes(fk["id"])] = None if fk.get("parent_run") else bytes(fk["parent_record"])
        for r in own:
            bld.records[bytes(r.id)] = r
            bld.times[bytes(r.id)] = r.time
            bld.parent[bytes(r.id)] = None if r.parent is None else bytes(r.parent)
    ordered = [r for own, _ in groups for r in own]
    started = next((r for r in ordered if r.kind == R.RUN_STARTED), None)
    bld.root = span_id(started.id if started is not None else trace_id(view.run)[:8] + b"\x01")
    if started is not None:
        bld.span_of[bytes(started.id)] = bld.root
    commits = _commits(bld, ordered)
    spans: list[Span] = []
    for r in ordered:
        if r.kind == R.RUN_STARTED or bytes(r.id) in bld.span_of:
            continue  # the run's span; a commit that is part of its intent's span (intents come before their commits)
        if r.kind == R.TURN and R.deleted_by(r) is None and r.body.get("origin", R.ORIGIN_SOURCE) != R.ORIGIN_SOURCE:
            continue  # derived material is never exported
        spans.append(_record_span(bld, r, commits))
    for fk in forks:
        spans.append(_fork_span(bld, fk))
    spans.sort(key=lambda s: (s.start, s.end))
    return Trace(bld.trace, [_run_span(bld, view, started, spans, groups)] + spans)


def _commits(bld: _Builder, ordered: list[R.Record]) -> dict[bytes, list[R.Record]]:
    """intent record id -> the intent_committed records that commit it (walking back their chains)."""
    out: dict[bytes, list[R.Record]] = {}
    for c in ordered:
        if c.kind != R.INTENT_COMMITTED or R.deleted_by(c) is not None:
            continue
        oid = bld.parent.get(bytes(c.id))
        while oid is not None:
            r = bld.records.get(oid)
            if r is not None and r.kind == R.INTENT and R.deleted_by(r) is None and r.body.get("intent") == c.body.get("intent"):
                out.setdefault(oid, []).append(c)
                break
            oid = bld.parent.get(oid)
    return out


def _record_span(bld: _Builder, r: R.Record, commits: dict[bytes, list[R.Record]]) -> Span:
    sid = span_id(r.id)
    bld.span_of[bytes(r.id)] = sid
    start, end = bld.window(bytes(r.id))
    attrs = bld.base(r)
    span = Span(sid, bld.root, r.kind, KIND_INTERNAL, start, end, attributes=attrs)
    gone = R.deleted_by(r)
    if gone is not None:
        attrs["objstore.deleted"] = gone.hex()
        span.name = f"{r.kind} (deleted)"
        return span
    b = r.body
    if r.kind == R.ATTEMPT:
        _attempt(bld, r, span)
    elif r.kind == R.INTENT:
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": str(b.get("effect")),
                      "gen_ai.tool.call.id": str(b.get("intent")), "objstore.step": b.get("step", 0),
                      "objstore.intent.idempotent": bool(b.get("idempotent"))})
        span.name = f"execute_tool {b.get('effect')}"
        done = sorted(commits.get(bytes(r.id), []), key=lambda c: (c.time is None, c.time or 0.0))
        attrs["objstore.intent.committed"] = bool(done)
        if done:
            attrs["objstore.intent.committed_records"] = [c.id.hex() for c in done]
            span.end = max(span.start, bld.time_of(bytes(done[0].id)) or span.end)
            span.status = STATUS_OK
            for c in done:
                bld.span_of[bytes(c.id)] = sid
    elif r.kind == R.TURN:
        attrs.update({"gen_ai.operation.name": "chat", "objstore.turn.role": str(b.get("role"))})
        span.name, span.kind = f"chat {b.get('role')}", KIND_CLIENT
        bld.blob_attrs(r, attrs)
    elif r.kind == R.RUN_FINISHED:
        attrs["objstore.run.status"] = str(b.get("status"))
        if b.get("status") == "failed":
            span.status, span.message = STATUS_ERROR, str(b.get("error") or "run failed")
            attrs["error.type"] = "run_failed"
        else:
            span.status = STATUS_OK
    elif r.kind == R.INTENT_COMMITTED:  # one whose intent is not exported (deleted): a span of its own
        attrs["objstore.intent"] = str(b.get("intent"))
    elif r.kind in (R.TASK_OPENED, R.TASK_CLOSED):
        attrs["objstore.task"] = str(b.get("task"))
    return span


def _attempt(bld: _Builder, r: R.Record, span: Span) -> None:
    """An attempt: ``execute_tool`` when its ``tools`` name a tool, else ``chat`` (a model call)."""
    b, attrs = r.body, span.attributes
    tools: dict = b["tools"] if isinstance(b.get("tools"), dict) else {}
    usage: dict = b["usage"] if isinstance(b.get("usage"), dict) else {}
    attrs.update({"objstore.step": b["step"], "objstore.attempt": b["attempt"], "objstore.attempt.state": b["state"]})
    if isinstance(tools.get("tool"), str):
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tools["tool"]})
        span.name = f"execute_tool {tools['tool']}"
    else:
        attrs["gen_ai.operation.name"] = "chat"
        span.kind = KIND_CLIENT
        model = tools.get("model")
        if isinstance(model, str):
            attrs["gen_ai.request.model"] = model
        span.name = f"chat {model}" if isinstance(model, str) else "chat"
    for ours, theirs in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens")):
        v = usage.get(ours)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT64[1]:
            attrs[theirs] = v
    if isinstance(b.get("workflow_version"), str):
        attrs["objstore.workflow_version"] = b["workflow_version"]
    if b["state"] == "failed":
        span.status, span.message = STATUS_ERROR, str(b.get("error") or "attempt failed")
        attrs["error.type"] = "attempt_failed"
    elif b["state"] == "succeeded":
        span.status = STATUS_OK
    bld.blob_attrs(r, attrs)


def _fork_span(bld: _Builder, fk: dict) -> Span:
    """A fork object: a span (start = end = its time) linked to the span of its fork record."""
    oid = bytes(fk["id"])
    t = bld.time_of(oid)
    t = t if t is not None else bld.window(oid)[1]
    comp = fk.get("compensation") or []
    attrs: dict[str, Value] = {"objstore.run": bld.run, "objstore.fork.id": oid.hex(), "objstore.branch": fk["branch"],
                               "objstore.fork.parent_branch": fk["parent_branch"], "objstore.fork.parent_lsn": fk["parent_lsn"],
                               "objstore.fork.reason": str(fk.get("reason") or ""),
                               "objstore.compensation_required": bool(comp)}
    if comp:
        attrs["objstore.compensation"] = [f"{x.get('intent')} ({x.get('effect')}, step {x.get('step')})" for x in comp]
    parent_rec = bytes(fk["parent_record"])
    if fk.get("parent_run"):
        attrs["objstore.fork.parent_run"] = str(fk["parent_run"])
        link = Link(trace_id(str(fk["parent_run"])), span_id(parent_rec))
    else:
        link = Link(bld.trace, bld.span_of.get(parent_rec, span_id(parent_rec)))
    link.attributes = {"objstore.link": "fork_point", "objstore.record.id": parent_rec.hex()}
    sid = span_id(oid)
    bld.span_of[oid] = sid
    return Span(sid, bld.root, f"fork branch {fk['branch']}", KIND_INTERNAL, t, t,
                status=STATUS_UNSET, attributes=attrs, links=[link])


def _run_span(bld: _Builder, view: View, started: R.Record | None, spans: list[Span],
              groups: list[tuple[list[R.Record], dict | None]]) -> Span:
    b = started.body if started is not None and R.deleted_by(started) is None else {}
    wv = str(b.get("workflow_version") or "")
    attrs: dict[str, Value] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": view.run,
                               "gen_ai.conversation.id": view.run, "objstore.run": view.run, "objstore.live_branch": view.live,
                               "objstore.branch_count": len(view.heads)}
    if wv:
        attrs["gen_ai.agent.name"] = wv
        attrs["objstore.workflow_version"] = wv
    if isinstance(b.get("subject"), str):
        attrs["objstore.subject"] = b["subject"]
    if started is not None:
        attrs["objstore.record.id"] = started.id.hex()
    start = bld.time_of(bytes(started.id)) if started is not None else None
    ends = [s.end for s in spans]
    start = start if start is not None else min([s.start for s in spans], default=0.0)
    span = Span(bld.root, None, f"invoke_agent {wv}".strip(), KIND_INTERNAL, start, max([start] + ends), attributes=attrs)
    live_own = next((own for own, fk in groups if own and own[-1].branch == view.live), [])
    last = live_own[-1] if live_own else None
    if last is not None and last.kind == R.RUN_FINISHED and R.deleted_by(last) is None:
        if last.body.get("status") == "failed":
            span.status, span.message = STATUS_ERROR, str(last.body.get("error") or "run failed")
            attrs["error.type"] = "run_failed"
        else:
            span.status = STATUS_OK
    return span
