"""The episode query surface (seed T1.7): one run, its branches, every attempt.

``episode(log, run, all_branches=False, source="state")`` answers from the
materialized state cache (caught up first) or, with ``source="refold"``, from a
cold re-fold of the raw chain that ignores the cache entirely. Both paths build
the same ``EpisodeView`` and ``to_json()`` serializes it canonically (sorted
keys, compact), so equality of the two answers is equality of bytes.

Order (the documented key): branches by branch number; within a branch, attempts
by ``(step, attempt, lsn)``. Every attempt is present, failed ones included.

Views carry blob refs (hex ids) and never blob bodies; neither path reads a blob.

``iter_episode`` (branch views whose attempts stream) and ``iter_episode_json`` (the bytes of
``to_json()``, streamed) answer the same query in bounded memory from the state cache. Fork
points and compensation flags always come from the fork objects; the cache serves only what it
confirms against the log (``StateCache.open_branch``), and a branch it cannot confirm is
re-folded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from ..storage import codec
from . import records as R
from . import views
from .fold import fold
from .refold import attempt_view, refold_stream

if TYPE_CHECKING:
    from .api import RunLog
    from .chain import ChainReader, View

SOURCES = ("state", "refold")

_json = msgspec.json.Encoder(order="sorted")
_jdec = msgspec.json.Decoder()


class BranchView(msgspec.Struct, omit_defaults=False):
    branch: int
    live: bool
    head: str
    parent_branch: int | None
    parent_lsn: int | None
    parent_record: str | None
    fork: str | None
    reason: str | None
    compensation_required: bool
    compensation: list
    status: str
    attempts_total: int
    failed_attempts: int
    attempts: Any  # list of AttemptView dicts, or msgspec.Raw of their canonical JSON


class EpisodeView(msgspec.Struct):
    run: str
    subject: str | None
    workflow_version: str | None
    meta: Any
    live_branch: int
    all_branches: bool
    branches: list

    def to_json(self) -> bytes:
        """Canonical serialization: the same view always gives the same bytes."""
        return _json.encode(self)

    def attempts(self, branch: int | None = None) -> list[dict]:
        out = []
        for b in self.branches:
            if branch is None or b.branch == branch:
                a = b.attempts
                out.extend(_jdec.decode(a) if isinstance(a, msgspec.Raw) else a)
        return out


def _branch_view(view: View, b: int, fk: dict | None, state: dict, attempts: Any) -> BranchView:
    comp = fk["compensation"] if fk else []
    return BranchView(
        branch=b,
        live=b == view.live,
        head=view.heads[b].hex(),
        parent_branch=fk["parent_branch"] if fk else None,
        parent_lsn=fk["parent_lsn"] if fk else None,
        parent_record=fk["parent_record"].hex() if fk else None,
        fork=fk["id"].hex() if fk else None,
        reason=fk["reason"] if fk else None,
        compensation_required=bool(comp),
        compensation=codec.to_jsonable(comp),
        status=state["status"],
        attempts_total=state["attempts"],
        failed_attempts=state["failed_attempts"],
        attempts=attempts,
    )


def _branch_parts(log: RunLog, view: View, b: int, source: str) -> tuple[dict, dict | None, Iterator[bytes]]:
    """(summary or folded state, fork object, attempt views as canonical JSON in query order) of
    one branch. The fork object — fork point and compensation flags — is always the log's; the
    views stream from the state cache when it confirms them against the log, else (a miss, or
    ``source="refold"``) from a re-fold of that branch."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}")
    got = log.state.open_branch(log, view, b) if source == "state" else None
    if got is not None:
        summary, frags = got
        return summary, log.fork_object(view, b), frags
    return refold_stream(log, view, b)


def _wanted(view: View, all_branches: bool) -> list[int]:
    return sorted(view.heads) if all_branches else [view.live]


def episode(log: RunLog, run: str, *, all_branches: bool = False, source: str = "state", view: View | None = None) -> EpisodeView:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}")
    view = view or log.view(run)
    branches = []
    root_state = None
    for b in _wanted(view, all_branches):
        state, fk, frags = _branch_parts(log, view, b, source)
        attempts = msgspec.Raw(b"[" + b",".join(frags) + b"]")
        if root_state is None or b == 0:
            root_state = state
        branches.append(_branch_view(view, b, fk, state, attempts))
    assert root_state is not None  # wanted is never empty: a run has a live branch
    return EpisodeView(
        run=run,
        subject=root_state["subject"],
        workflow_version=root_state["workflow_version"],
        meta=root_state["meta"],
        live_branch=view.live,
        all_branches=all_branches,
        branches=branches,
    )


def inherited_attempts(log: ChainReader, view: View, branch: int) -> list[tuple[int, int, dict]]:
    """The attempts a branch inherits from its ancestors, oldest first, as (branch, LSN, AttemptView):
    those before each fork point, on the branch they were recorded on. ``episode`` lists a branch's
    own attempts (its ``attempts_total`` counts these too); ``objstore episode`` shows both, as
    ``log`` shows a branch's ancestors. Reads records only, never a blob body."""
    out = []
    wfv = None
    for rec in log.iter_lineage(view, branch):
        if rec.kind == R.RUN_STARTED and rec.lsn == 0 and rec.branch == 0:  # as fold.apply: a run starts only there
            wfv = rec.body.get("workflow_version")
        elif rec.kind == R.ATTEMPT and rec.branch != branch and R.DELETED_FIELD not in rec.body:
            out.append((rec.branch, rec.lsn, attempt_view(rec, wfv)))
    return out


def iter_episode(log: RunLog, run: str, *, all_branches: bool = False, source: str = "state",
                 view: View | None = None) -> Iterator[BranchView]:
    """``episode`` in bounded memory: one ``BranchView`` per branch (in order) whose ``attempts``
    is an iterator of AttemptView dicts, streamed from the state cache (or a re-fold of that
    branch on a miss). Drain a branch's attempts before asking for the next branch; the run's
    own fields (subject, workflow version, meta) are every branch's, read from its summary."""
    view = view or log.view(run)
    for b in _wanted(view, all_branches):
        state, fk, frags = _branch_parts(log, view, b, source)
        try:
            yield _branch_view(view, b, fk, state, (_jdec.decode(f) for f in frags))
        finally:
            close = getattr(frags, "close", None)
            if close is not None:
                close()  # ends the cache's read snapshot even if the caller stopped early


def iter_episode_json(log: RunLog, run: str, *, all_branches: bool = False, source: str = "state",
                      view: View | None = None) -> Iterator[bytes]:
    """The bytes of ``episode(...).to_json()``, streamed: attempts are never all in memory.
    Canonical JSON sorts keys, so a branch's ``attempts`` come first and the run's subject,
    workflow version and meta (known once branch 0, or the first branch, is read) come last."""
    view = view or log.view(run)
    head = _json.encode(EpisodeView(run=run, subject=None, workflow_version=None, meta=None, live_branch=view.live,
                                    all_branches=all_branches, branches=[]))
    cut = head.index(b'"branches":[]') + len(b'"branches":[')
    yield head[:cut]
    root_state = None
    for i, b in enumerate(_wanted(view, all_branches)):
        state, fk, frags = _branch_parts(log, view, b, source)
        try:
            if root_state is None or b == 0:
                root_state = state
            yield b'{"attempts":[' if i == 0 else b',{"attempts":['
            buf: list[bytes] = []
            size = 0
            for f in frags:
                if buf:
                    buf.append(b",")
                buf.append(f)
                size += len(f)
                if size >= 1 << 16:
                    yield b"".join(buf)
                    buf, size = [b""], 0  # the next fragment still needs its comma
            yield b"".join(buf)
            rest = _json.encode(_branch_view(view, b, fk, state, []))
            yield b"]" + rest[len(b'{"attempts":[]'):]
        finally:
            close = getattr(frags, "close", None)
            if close is not None:
                close()
    assert root_state is not None
    tail = _json.encode(EpisodeView(run=run, subject=root_state["subject"], workflow_version=root_state["workflow_version"],
                                    meta=root_state["meta"], live_branch=view.live, all_branches=all_branches, branches=[]))
    yield b"]" + tail[tail.index(b'"branches":[]') + len(b'"branches":[]'):]


def _lineage_parts(groups: list[tuple[int, list, dict | None]]) -> list[tuple[int, int | None, dict | None]]:
    """(branch, last LSN — None for the branch's own head —, fork object), root first, from history groups."""
    parts: list[tuple[int, int | None, dict | None]] = []
    upto = None
    for b, _, fk in groups:
        parts.append((b, upto, fk))
        upto = fk["parent_lsn"] if fk else None  # the cut-off is read from the fork object
    parts.reverse()
    return parts


def _state_diff(a: Any, b: Any, path: str, out: list) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _state_diff(a.get(k), b.get(k), f"{path}.{k}" if path else k, out)
    elif a != b:
        out.append({"path": path, "a": a, "b": b})


def diff(log: ChainReader, run: str, a: int, b: int, view: View | None = None) -> dict:
    """Compare two branches: where they part (read from their fork objects), the
    records unique to each side, and the difference of their folded states."""
    view = view or log.view(run)
    ha, hb = log.history(view, a), log.history(view, b)  # one walk per side serves everything below
    sa, sb = _lineage_parts(ha), _lineage_parts(hb)
    # Root-first, the lineages share whole segments until the first branch where
    # their cut-offs differ; there the shared history ends at the smaller cut-off.
    common_branch, common_lsn = None, None
    for (ba, ua, _), (bb, ub, _) in zip(sa, sb, strict=False):
        if ba != bb:
            break
        common_branch = ba
        cuts = [u for u in (ua, ub) if u is not None]
        common_lsn = min(cuts) if cuts else None
        if ua != ub:
            break
    la = [r for _, own, _ in reversed(ha) for r in own]
    lb = [r for _, own, _ in reversed(hb) for r in own]
    ids_a, ids_b = {r.id for r in la}, {r.id for r in lb}
    changes: list = []
    _state_diff(fold(la), fold(lb), "", changes)
    return {
        "run": run,
        "a": a,
        "b": b,
        "forks": {str(x): [views.fork(f) for _, _, f in parts if f] for x, parts in ((a, sa), (b, sb))},
        "common": {"branch": common_branch, "lsn": common_lsn},
        "only_a": [views.record(r) for r in la if r.id not in ids_b],
        "only_b": [views.record(r) for r in lb if r.id not in ids_a],
        "state": changes,
    }
