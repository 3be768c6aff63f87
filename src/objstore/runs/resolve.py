"""Naming runs the way git names commits: what a RUN argument may be, and what it means.

This module owns run-spec resolution (``resolve_run``), the short id ``runs`` shows
(``short_ids``), and the names reserved for specs (``check_new_run_id``). A spec is, in
this order of precedence:

1. an exact run id — always wins, whatever else it would also match;
2. ``latest`` — the run whose ``run_started`` record has the greatest log position (the
   engine's commit order, never wall-clock time); ``latest~N`` is the N-th run started
   before it (``latest~0`` is ``latest``);
3. a unique prefix of a run id, or of a generated id's random suffix (the short id:
   ``r20261201-052011123456-9f3c2a7b1e04`` is also ``9f3c``, ``9f3c2a7b``, …).

An ambiguous prefix raises ``AmbiguousRun`` (exit 5) naming up to ten candidates; no match
raises ``RunNotFound`` (exit 4). Resolution reads refs and the engine's run-start index
only: never a record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import AmbiguousRun, InvalidInput, RunNotFound
from ..storage import runrefs
from . import records as R

if TYPE_CHECKING:
    from .chain import ChainReader

LATEST = "latest"
MAX_CANDIDATES = 10
SHORT_MIN = 8  # hex digits of the suffix ``runs`` shows at least (more when needed to be unique)

# A generated id (``api.new_run_id``): time to the µs (older ones: to the ms), 48 random bits.
_GENERATED = re.compile(r"^r\d{8}-\d{9,12}-([0-9a-f]{12})$")
_LATEST = re.compile(r"^latest(?:~(.*))?$")


def suffix_of(run: str) -> str | None:
    """The random suffix of a generated run id, or None for any other id."""
    m = _GENERATED.match(run)
    return m.group(1) if m else None


def is_reserved(run: str) -> bool:
    """``latest`` and ``latest~…`` name runs by position; no run may be called that."""
    return _LATEST.match(run) is not None


def check_new_run_id(run: str) -> str:
    """Refuse a reserved name for a new run (InvalidInput); ids of existing stores are untouched."""
    if is_reserved(run):
        raise InvalidInput(f"run id {run!r} is reserved ('latest' and 'latest~N' name the newest runs)")
    return run


def _runs(log: ChainReader) -> list[str]:
    return log.store.run_names()


def _exists(log: ChainReader, run: str) -> bool:
    refs = log.store.run_refs(run)
    return isinstance(refs.get(runrefs.branch_ref(run, 0)), bytes)


def runs_by_start(log: ChainReader) -> list[str]:
    """Every run, oldest first by the log position of its ``run_started`` record (ties — runs
    started in one commit — by id). Runs whose start is not indexed (damaged) come first."""
    store = log.store
    runs = _runs(log)
    pos = {r: store.run_order(r) for r in runs}
    return sorted(runs, key=lambda r: (-1 if pos[r] is None else pos[r], r))


def _latest(log: ChainReader, spec: str, back: str | None) -> str:
    if back is None or back == "":
        n = 0
        if back == "":
            raise InvalidInput(f"malformed run spec {spec!r}: expected 'latest' or 'latest~N' (N a number)")
    elif back.isdigit() and back.isascii():
        n = int(back)
    else:
        raise InvalidInput(f"malformed run spec {spec!r}: expected 'latest' or 'latest~N' (N a number)")
    for i, run in enumerate(log.store.runs_newest_first()):
        if i == n:
            return run
    count = len(_runs(log))
    raise RunNotFound(f"{spec} (the store has {count} run{'s' if count != 1 else ''})")


def candidates(runs: Iterable[str], prefix: str) -> list[str]:
    """Runs whose id, or whose generated id's random suffix, starts with ``prefix``, sorted."""
    out = []
    for r in runs:
        if r.startswith(prefix):
            out.append(r)
            continue
        s = suffix_of(r)
        if s is not None and s.startswith(prefix):
            out.append(r)
    return sorted(out)


def ambiguity_text(cands: list[str]) -> str:
    """``a, b, c`` — at most ``MAX_CANDIDATES`` of them, then ``and N more``."""
    shown = ", ".join(cands[:MAX_CANDIDATES])
    more = len(cands) - MAX_CANDIDATES
    return shown + (f" and {more} more" if more > 0 else "")


def resolve_run(log: ChainReader, spec: str) -> str:
    """The run id ``spec`` names (see the module docstring); raises RunNotFound, AmbiguousRun or
    InvalidInput."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInput("a run must be named: an id, a unique prefix of one, or 'latest'")
    m = _LATEST.match(spec)
    if m is None or spec == LATEST:
        R.check_run_id(spec)  # not a possible id: InvalidInput, as before specs existed
        if _exists(log, spec):
            return spec
    if m:
        return _latest(log, spec, m.group(1))
    cands = candidates(_runs(log), spec)
    if len(cands) == 1:
        return cands[0]
    if not cands:
        raise RunNotFound(spec)
    raise AmbiguousRun(spec, f"{len(cands)} runs: {ambiguity_text(cands)}")


def _lcp(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def short_ids(runs: Iterable[str]) -> dict[str, str]:
    """{run: the short id ``runs`` shows}: the shortest prefix (at least ``SHORT_MIN`` digits) of
    a generated id's random suffix that ``resolve_run`` resolves to it alone; other ids as they are."""
    runs = list(runs)
    names = sorted([(r, r) for r in runs] + [(s, r) for r in runs if (s := suffix_of(r)) is not None])
    out = {r: r for r in runs}
    for i, (name, run) in enumerate(names):
        if name == run:
            continue
        need = 0
        for step in (-1, 1):  # the nearest names of other runs on each side bound the prefix
            j = i + step
            while 0 <= j < len(names) and names[j][1] == run:
                j += step
            if 0 <= j < len(names):
                need = max(need, _lcp(name, names[j][0]))
        out[run] = name[: max(SHORT_MIN, need + 1)] if need < len(name) else run
    return out
