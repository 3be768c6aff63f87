"""The pure fold: records in, state out. No I/O, no clock, no hidden inputs.

A record a partial deletion covers is folded as a header-only record (``apply``): it counts in
``records`` and nothing else, the same in the state cache, a re-fold and verify's fold.

A run's own fields (``run``, ``subject``, ``workflow_version``, ``meta``) come from ``run_started``
records at LSN 0 of branch 0 only — of the run, and for a copy of its sources first — so a reader
can take them from those few records in the log (``ChainReader.run_fields``) instead of trusting
a cached fold (invariant 15).

The state of a branch is the fold of its lineage: the parent branch's records up
to the fork LSN (recursively), then the branch's own records. The chain walking
that feeds this lives in ``api``; this module only says what each record
does to the state, so the materialized cache and a cold re-fold cannot differ
unless one of them is fed different records.

State shape (all keys str; serialized canonically with ``codec``)::

    {run, subject, workflow_version, meta, status, error,
     records,            # records folded, inherited ones included
     attempts, failed_attempts,
     steps:   {"<step>": {attempts, state, last_attempt}},
     intents: {"<id>": {step, effect, idempotent, committed}},
     turns}
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from . import records as R


def empty_state() -> dict:
    return {
        "run": None,
        "subject": None,
        "workflow_version": None,
        "meta": None,
        "status": "running",
        "error": None,
        "records": 0,
        "attempts": 0,
        "failed_attempts": 0,
        "steps": {},
        "intents": {},
        "turns": 0,
    }


def apply(state: dict, rec: R.Record) -> dict:
    """Fold one record into ``state`` in place and return it. A header-only record (its body taken
    by a recorded deletion: ``records.header_only``) counts as a record and contributes nothing else."""
    b = rec.body
    k = rec.kind
    state["records"] += 1
    if R.DELETED_FIELD in b:
        return state
    if k == R.RUN_STARTED:
        if rec.lsn != 0 or rec.branch != 0:
            return state  # a run starts at LSN 0 of branch 0 (the writer writes no other): what is elsewhere starts nothing
        state["run"] = rec.run
        state["subject"] = b["subject"]
        state["workflow_version"] = b["workflow_version"]
        state["meta"] = b["meta"]
    elif k == R.ATTEMPT:
        state["attempts"] += 1
        if b["state"] == "failed":
            state["failed_attempts"] += 1
        key = str(b["step"])
        step = state["steps"].get(key)
        if step is None:
            step = state["steps"][key] = {"attempts": 0, "state": None, "last_attempt": None}
        step["attempts"] += 1
        step["state"] = b["state"]
        step["last_attempt"] = b["attempt"]
    elif k == R.INTENT:
        state["intents"][b["intent"]] = {
            "step": b["step"],
            "effect": b["effect"],
            "idempotent": b["idempotent"],
            "committed": False,
        }
    elif k == R.INTENT_COMMITTED:
        it = state["intents"].get(b["intent"])
        if it is not None:
            it["committed"] = True
    elif k == R.RUN_FINISHED:
        state["status"] = b["status"]
        state["error"] = b["error"]
    elif k == R.TURN:
        state["turns"] += 1
    return state


def fold(recs: Iterable[R.Record], state: dict | None = None) -> dict:
    """Fold records (oldest first) onto a copy of ``state`` (or an empty state)."""
    s = copy.deepcopy(state) if state is not None else empty_state()
    for rec in recs:
        apply(s, rec)
    return s
