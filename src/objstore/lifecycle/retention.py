"""Retention: which runs ``objstore gc --delete-runs-older-than`` / ``--delete-runs-inactive-for`` deletes, and the
AGE those options take. Read-only: the deletions are ``lifecycle.delete``'s, the collection ``lifecycle.gc``'s."""

from __future__ import annotations

import time
from typing import Any

from ..errors import InvalidInput


def parse_age(text: str, now: float | None = None) -> float:
    """Seconds in an AGE (``--delete-runs-older-than``, ``--delete-runs-inactive-for``,
    ``--prune-unreferenced-older-than``): ``now`` minus the time ``text`` names, read by the one time
    parser ``--since`` uses (``runs.history.parse_time``: ``90d``, ``1.5d``, ``2.days``, ``'2 hours'``,
    ``1h30m``, an ISO date, ...). A time in the future is no age (InvalidInput)."""
    from ..runs.history import parse_time

    now = time.time() if now is None else now
    age = now - parse_time(text, now)
    if age < 0:
        raise InvalidInput(f"age {text!r} names a time in the future")
    return age


def runs_older_than(log: Any, seconds: float, now: float | None = None) -> list[str]:
    """The runs (not deleted) whose ``run_started`` record is older than ``seconds``, oldest first.
    A run without a recorded start time is never chosen by age."""
    import time as _time

    cutoff = (_time.time() if now is None else now) - seconds
    found = []
    for run in log.runs():
        t = log.run_started(run).time
        if isinstance(t, (int, float)) and t < cutoff:
            found.append((t, run))
    return [r for _t, r in sorted(found)]


def runs_inactive_for(log: Any, seconds: float, now: float | None = None) -> list[str]:
    """The runs (not deleted) whose last activity is older than ``seconds``, least recently active
    first. Last activity is read now, from each run's newest entries: the time of every branch's head
    (its newest record, or the fork object of a branch with none yet) and of its newest recorded
    deletion of records. A run with no readable time is never chosen."""
    import time as _time

    from ..errors import Erased

    cutoff = (_time.time() if now is None else now) - seconds
    found = []
    for run in log.runs():
        try:
            view = log.view(run)
        except Erased:
            continue
        times = []
        for oid in [*view.heads.values(), *([view.deletions] if view.deletions else [])]:
            try:
                t = log.store.get(oid)[1].get("time")
            except Erased:  # a head whose body a deletion withholds: the deletion's time counts instead
                continue
            if isinstance(t, (int, float)) and not isinstance(t, bool):
                times.append(t)
        if times and max(times) < cutoff:
            found.append((max(times), run))
    return [r for _t, r in sorted(found)]
