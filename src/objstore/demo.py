"""A deterministic stub model and the demo run built with it.

``StubModel`` stands in for a live LLM (there is none here): its answer is a
pure function of (path, step, attempt), so tests and the demo are repeatable.
It proves that the store records what an agent loop does; it says nothing
about any real model.

``six_step_run`` is the seed T2.3 scenario: six steps on branch 0 with one
retried attempt and a committed non-idempotent intent, failing at step 6;
then a rewind to LSN 3 and a different path on branch 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .runs.records import check_time

if TYPE_CHECKING:
    from .runs.api import RunLog


def _wall() -> float:
    return time.time()


# Ticks of the clock one ``six_step_run`` uses (16 records and the fork; room to spare): a start
# whose last tick falls outside the calendar is refused before anything is written.
SPAN = 64


def fixed_clock(start: float, step: float = 1.0) -> Callable[[], float]:
    """A deterministic clock: ``start``, ``start + step``, … — one tick per record written.

    ``start`` and the tick ``SPAN`` steps later must be times within years 1 to 9999
    (``records.check_time``; InvalidInput otherwise), so a demo never stops half-written."""
    check_time(start, "demo start time")
    check_time(start + SPAN * step, f"demo start time + {SPAN} ticks")
    n = [0]

    def clock() -> float:
        t = start + n[0] * step
        n[0] += 1
        return t

    return clock


@dataclass
class StubReply:
    ok: bool
    text: str
    usage: dict


class StubModel:
    """Deterministic: ``plan`` maps (step, attempt) to a failure message for that attempt."""

    def __init__(self, name: str = "stub-1", failures: dict | None = None):
        self.name = name
        self.failures = failures or {}
        self.calls = 0

    def __call__(self, path: str, step: int, attempt: int, prompt: str) -> StubReply:
        self.calls += 1
        err = self.failures.get((path, step, attempt))
        text = f"[{self.name}] {path} step {step} attempt {attempt}: " + (f"ERROR {err}" if err else f"done ({len(prompt)} chars of prompt)")
        return StubReply(ok=err is None, text=text, usage={"input_tokens": len(prompt.split()), "output_tokens": len(text.split())})


def run_step(log: RunLog, run: str, model: StubModel, path: str, step: int, task: str, max_attempts: int = 3,
             clock: Callable[[], float] | None = None) -> bool:
    """One agent step: call the model, record every attempt (failed ones too); retry on failure.

    ``clock``: a callable giving each record's time (default: the wall clock)."""
    clock = clock or _wall
    for attempt in range(max_attempts):
        prompt = f"{path}: step {step}: {task}"
        reply = model(path, step, attempt, prompt)
        log.record_attempt(
            run,
            step=step,
            attempt=attempt,
            state="succeeded" if reply.ok else "failed",
            prompt=log.put_blob(prompt.encode()),
            output=log.put_blob(reply.text.encode()),
            context={"path": path, "task": task},
            tools={"model": model.name},
            usage=reply.usage,
            error=None if reply.ok else reply.text,
            when=clock(),
        )
        if reply.ok:
            return True
    return False


def six_step_run(log: RunLog, run: str | None = None, subject: str = "demo", clock: Callable[[], float] | None = None) -> dict:
    """The seed T2.3 run; returns what happened (run id, fork result, heads).

    With a fixed ``run`` id and a deterministic ``clock`` (``fixed_clock``) every object id is
    the same on every call: that is how ``objstore demo --run ID --at EPOCH`` makes the output
    of ``fixtures/golden-log-graph.txt`` reproducible."""
    clock = clock or _wall
    model = StubModel(failures={("A", 2, 0): "context missing: customer id", ("A", 6, 0): "tool timeout", ("A", 6, 1): "tool timeout", ("A", 6, 2): "tool timeout"})
    run = log.start_run(run, subject=subject, workflow_version="wf-1", meta={"task": "refund order 1234"}, when=clock())
    # branch 0: lsn 0 run_started; 1 step1; 2-3 step2 (failed, retried); 4 intent; 5 commit; 6.. steps 3-6
    run_step(log, run, model, "A", 1, "look up the order", clock=clock)
    run_step(log, run, model, "A", 2, "find the customer", clock=clock)
    log.record_intent(run, "refund-1234", step=3, effect="issue_refund", idempotent=False, when=clock())
    log.commit_intent(run, "refund-1234", when=clock())
    for step, task in ((3, "issue the refund"), (4, "draft the email"), (5, "check the ledger")):
        run_step(log, run, model, "A", step, task, clock=clock)
    ok = run_step(log, run, model, "A", 6, "reconcile with the payment provider", max_attempts=1, clock=clock)
    log.finish_run(run, "succeeded" if ok else "failed", None if ok else "step 6 failed", when=clock())
    before = log.view(run)
    fork = log.rewind(run, 3, reason="step 6 failed: try the ledger-first path", when=clock())
    for step, task in ((3, "check the ledger first"), (4, "issue the refund via the ledger"), (5, "confirm with the customer")):
        run_step(log, run, model, "B", step, task, clock=clock)
    log.finish_run(run, "succeeded", when=clock())
    return {"run": run, "fork": fork, "branch0_head": before.heads[0], "model_calls": model.calls}
