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

from typing import Any

import msgspec

from . import codec
from . import records as R
from .fold import apply, empty_state
from .state import attempt_view

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


def _branch_view(view, b, fk, state, attempts) -> BranchView:
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


def episode(log, run: str, *, all_branches: bool = False, source: str = "state", view=None) -> EpisodeView:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}")
    view = view or log.view(run)
    wanted = sorted(view.heads) if all_branches else [view.live]
    branches = []
    root_state = None
    for b in wanted:
        if source == "state":
            state = log.state.state(log, view, b)
            fork_id = log.state.fork_id(run, b)
            fk = dict(log.store.get_typed(fork_id, codec.FORK), id=fork_id) if fork_id else None
            frags = log.state.attempt_fragments(run, b)
            attempts = msgspec.Raw(b"[" + b",".join(frags) + b"]")
        else:
            own, fk = log.chain(view.head(b))
            lineage = (log.lineage_from(fk["parent_record"]) if fk else []) + own
            state = empty_state()
            atts = []
            for r in lineage:
                apply(state, r)  # workflow_version as folded at each record, as the cache sees it
                if r.branch == b and r.kind == R.ATTEMPT:
                    atts.append((r.body["step"], r.body["attempt"], r.lsn, attempt_view(r, state["workflow_version"])))
            atts.sort(key=lambda t: t[:3])
            attempts = [a[3] for a in atts]
        if root_state is None or b == 0:
            root_state = state
        branches.append(_branch_view(view, b, fk, state, attempts))
    return EpisodeView(
        run=run,
        subject=root_state["subject"],
        workflow_version=root_state["workflow_version"],
        meta=root_state["meta"],
        live_branch=view.live,
        all_branches=all_branches,
        branches=branches,
    )
