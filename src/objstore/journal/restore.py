"""Segments and restore (docs/JOURNAL.md, conditions 3, 5 and 9).

A compaction's result is a ``segment`` (schema 2) behind the forward-only ref
``run/<run>/segments``: the summary, the frozen journal snapshot, the turns it covers, the
retained tail, the open tasks, signed by the compacting key. ``segments`` walks the chain;
``context`` (normal turns, restore after a rewind) is built from the stored segments and the
session's startup event only — it never calls a Host.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import Erased
from ..runs import records as R
from ..runs.records import COMPACTION_SEGMENT_SCHEMA
from ..storage import codec
from ..storage.runrefs import segments_ref
from .host import At, LocalJournalHost
from .sessions import fold_tasks, startup_event
from .snapshot import Snapshot

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..runs.chain import ChainReader, View



def segments(log: RunLog, run: str, *, trusted_only: bool = False, at: At | None = None) -> list[tuple[bytes, dict]]:
    """The run's segments, oldest first, by following ``previous`` from the ref. ``trusted_only``:
    only those signed by a compacting key allowed to read the session then (what restore and
    later compactions build on; ``host.LocalJournalHost.compaction_segment_trusted``). The ref and the grants
    are read as of one position: ``at``, or one captured here (default: the ref now)."""
    if trusted_only and at is None:
        at = At(log.store, [run], [])
    out = []
    sid = log.store.read_ref(segments_ref(run)) if at is None else at.ref(segments_ref(run))
    while isinstance(sid, bytes):
        seg = log.store.get_typed(sid, codec.COMPACTION_SEGMENT)
        out.append((sid, seg))
        sid = seg["previous"]
    out.reverse()
    if trusted_only:
        check = LocalJournalHost(log).compaction_segment_trusted
        out = [(sid, seg) for sid, seg in out if check(run, sid, seg, at)[0]]
    return out


def frozen_of(log: ChainReader, seg: dict) -> dict:
    """A segment's frozen snapshot, whatever its schema: outcome, body hash, projection, rendered text."""
    if seg.get("v") == COMPACTION_SEGMENT_SCHEMA:
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


def _timeline(log: RunLog, run: str, view: View, at: At | None = None
              ) -> tuple[list[R.Record], dict[bytes, int], list[tuple[bytes, dict]], tuple[bytes, dict] | None]:
    """(live lineage, id -> position, trusted segments oldest first, applicable segment), shared by
    compaction and restore: the segment chain is walked and its signatures checked once. With
    ``at`` (the position ``view`` was built from), the segments and grants are read there too."""
    lineage = log.lineage(view, view.live)
    idx: dict[bytes, int] = {r.id: i for i, r in enumerate(lineage)}
    segs = segments(log, run, trusted_only=True, at=at)
    return lineage, idx, segs, _applicable(segs, idx)


def _applicable(segs: list, idx: dict) -> tuple[bytes, dict] | None:
    """The newest segment whose covered turns are on the live timeline (after a rewind, an older one)."""
    for sid, seg in reversed(segs):
        if seg["covered_through"] is None or seg["covered_through"] in idx:
            return sid, seg
    return None


def _turn_text(log: ChainReader, r: R.Record) -> str:
    if not r.body.get("content"):
        return ""
    try:
        return log.store.get_blob(r.body["content"]).decode("utf-8", "replace")
    except Erased:
        return ""  # a redacted turn says nothing, as a deleted one does: the session stays readable


def _tasks_at(log: ChainReader, lineage: list[R.Record], idx: dict[bytes, int], seg: dict | None) -> list[dict]:
    """Open tasks: the segment's stored list plus task records after its head, or the whole fold."""
    if seg is not None and seg.get("v") == COMPACTION_SEGMENT_SCHEMA and seg.get("through") in idx:
        return fold_tasks(lineage[idx[seg["through"]] + 1:], seg["tasks"])
    return fold_tasks(lineage)


def context(log: RunLog, run: str, view: View | None = None) -> list[dict]:
    """What the model sees next: the applicable segment's summary and frozen journal (derived,
    labelled) — or, before any, the session's startup event — the open tasks, the retained tail,
    then later turns (source). Never calls a Host. Without ``view``, the branches, the segments
    and the grants that vouch for them are read at one position."""
    at = None
    if view is None:
        at = At(log.store, [run], [])
        view = log.view_from(run, at.run_refs(run))
    lineage, idx, _, app = _timeline(log, run, view, at)
    items = []
    start = 0
    retained: set = set()
    if app:
        sid, seg = app
        f = frozen_of(log, seg)
        items.append({"origin": R.ORIGIN_DERIVED, "kind": "summary", "role": seg["summary_role"], "segment": sid.hex(),
                      "text": log.store.get_blob(seg["summary"]).decode("utf-8")})
        prov = seg["journal"]["provenance"] if seg.get("v") != COMPACTION_SEGMENT_SCHEMA else \
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
                items.append({"origin": R.ORIGIN_SOURCE, "kind": "turn", "role": r.body.get("role"), "lsn": r.lsn, "text": _turn_text(log, r)})
    for r in lineage[start:]:
        if r.kind == R.TURN and r.id not in retained:
            items.append({"origin": R.ORIGIN_SOURCE, "kind": "turn", "role": r.body.get("role"), "lsn": r.lsn, "text": _turn_text(log, r)})
    return items


def classify(otype: str, value: Any) -> str:
    """Origin of stored material, by object type and record kind only (never by body markers)."""
    if otype == codec.RECORD:
        return R.ORIGIN_SOURCE if value.get("kind") == R.TURN else "log"
    if otype in (codec.COMPACTION_SEGMENT, codec.JOURNAL):
        return R.ORIGIN_DERIVED
    return "other"
