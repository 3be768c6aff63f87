"""How many files the store's caches of open things may hold in one process.

A process that touches many runs keeps some of them open: run logs (``runlogs.logs``: a lock, segment,
append, sync and witness descriptor each) and per-run state files (``runs.statefiles``: a database, its
WAL and its shared-memory index). Each cache is bounded, least recently used first out; the bound is taken
from the process's soft ``RLIMIT_NOFILE`` so that both caches together keep to a small share of it. On a
default Linux limit of 1 024 a process touching thousands of runs (``verify``, ``gc``, a LangGraph server)
then never fails with "too many open files", while a raised limit lets the caches grow to their ceiling.
"""

from __future__ import annotations

try:
    import resource
except ImportError:  # not POSIX: no limit to read, the ceilings hold
    resource = None  # type: ignore[assignment]

SHARE = 4  # the caches together may use 1/SHARE of the soft limit


def soft_limit() -> int | None:
    """The process's soft limit on open files, or None if it has none (or it cannot be read)."""
    if resource is None:
        return None
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def bound(per_item: int, floor: int, ceiling: int) -> int:
    """How many items, each holding up to ``per_item`` descriptors, one cache may keep open: half of the
    caches' share of the soft limit, between ``floor`` and ``ceiling``."""
    soft = soft_limit()
    if soft is None:
        return ceiling
    return max(floor, min(ceiling, soft // (SHARE * 2 * per_item)))
