"""The episode query surface (seed T1.7): one run, its branches, every attempt.

``episode(log, run, all_branches=False, source="state")`` answers from the
materialized state cache (caught up first) or, with ``source="refold"``, from a
cold re-fold of the raw chain that ignores the cache entirely. Both paths build
the same ``EpisodeView`` and ``to_json()`` serializes it canonically (sorted
keys, compact), so equality of the two answers is equality of bytes.

Order (the documented key): branches by branch number; within a branch, attempts
by ``(step, attempt, lsn)``. Every attempt is present, failed ones included.

Views carry blob refs (hex ids) and never blob bodies; neither path reads a blob.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from . import codec, views
from .fold import fold
from .state import refold_branch

if TYPE_CHECKING:
    from .chain import ChainReader, View
    from .runlog import RunLog

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


def episode(log: RunLog, run: str, *, all_branches: bool = False, source: str = "state", view: View | None = None) -> EpisodeView:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}")
    view = view or log.view(run)
    wanted = sorted(view.heads) if all_branches else [view.live]
    branches = []
    root_state = None
    attempts: msgspec.Raw | list[dict]
    for b in wanted:
        got = log.state.read_branch(log, view, b) if source == "state" else None
        if got is not None:
            state, fork_id, frags = got
            fk = dict(log.store.get_typed(fork_id, codec.FORK), id=fork_id) if fork_id else None
            attempts = msgspec.Raw(b"[" + b",".join(frags) + b"]")
        else:
            state, fk, attempts = refold_branch(log, view, b)
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


def _segments(groups: list[tuple[int, list, dict | None]]) -> list[tuple[int, int | None, dict | None]]:
    """(branch, last LSN — None for the branch's own head —, fork object), root first, from history groups."""
    segs: list[tuple[int, int | None, dict | None]] = []
    upto = None
    for b, _, fk in groups:
        segs.append((b, upto, fk))
        upto = fk["parent_lsn"] if fk else None  # the cut-off is read from the fork object
    segs.reverse()
    return segs


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
    sa, sb = _segments(ha), _segments(hb)
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
        "forks": {str(x): [views.fork(f) for _, _, f in segs if f] for x, segs in ((a, sa), (b, sb))},
        "common": {"branch": common_branch, "lsn": common_lsn},
        "only_a": [views.record(r) for r in la if r.id not in ids_b],
        "only_b": [views.record(r) for r in lb if r.id not in ids_a],
        "state": changes,
    }
