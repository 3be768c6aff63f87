"""Entries built outside a writer, exactly as a writer builds them: golden fixtures and forged entries.

A test that must show what a reader does with a checksum-valid entry crafted byte by byte builds
it here: the same index rows (the record facts), the same rules and root (``LogState.plan``), the
same layout (``build_entry``) as ``LogEngine``'s commit path. Nothing in the store calls it.
"""

from __future__ import annotations

from ...errors import Refused
from .entry import LogEntry, build_entry
from .facts import facts_of as _facts_of
from .format import ZERO
from .rules import EntryEffect
from .tables import LogState


def encode_entry(prev: bytes, n: int, t: float, objects: list, moves: list, cut: list | None,
                 compress: bool = True, tables: LogState | None = None) -> tuple[bytes | list, bytes]:
    """(entry bytes, checksum) for ``objects`` = [(id, type, canonical bytes)], with the index rows
    taken from the objects themselves and the root of ``tables`` (default: empty) after the entry.

    What a crafted entry looks like when its author computes everything a writer computes: tests
    use it to forge checksum-valid entries."""
    t0 = tables if tables is not None else LogState()
    facts = _facts_of(objects)
    got = t0.plan(n, [(o[0], o[1]) for o in objects], facts, moves, None)
    root = got.root if isinstance(got, EntryEffect) else ZERO
    data, entry = build_entry(prev, n, t, objects, moves, cut, compress, facts=facts, root=root)
    return data, entry.checksum


def encode_next(tables: LogState, t: float, objects: list, moves: list, compress: bool = True, seg: int = 1,
                off: int = 0, idx: list | None = None) -> tuple[bytes | list, LogEntry]:
    """The next entry after ``tables``' position, built as a writer builds it (index rows, rules,
    root), and ``tables`` advanced past it; raises Refused if it breaks a rule. For the golden
    fixtures and for tests that must craft checksum-valid entries byte by byte."""
    facts = _facts_of(objects)
    n = tables.pos.entry + 1
    plan = tables.plan(n, [(o[0], o[1]) for o in objects], facts, moves, idx)
    if isinstance(plan, str):
        raise Refused(plan)
    data, e = build_entry(tables.pos.checksum, n, t, objects, moves, None, compress, facts=facts, root=plan.root, idx=idx,
                          seg=seg, at=off)
    tables.commit(plan, n, e.checksum, t)
    return data, e
