"""The root of the derived tables: a homomorphic set hash every entry commits to.

Invariants kept here:

* the root depends on the set of table elements only, never on the order they were added in;
* adding or removing one element costs one XOF and one addition, whatever the store's size;
* a checkpoint's tables are adopted only if their recomputed root is the one the log names.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import blake3

from ..runrefs import RUN_PREFIX as _RUN_PREFIX
from ..runrefs import run_of as _run_of
from .format import _enc

# -- the root of the derived tables ------------------------------------------------------
#
# The tables a reader derives from the log (refs, branch tips, intent facts, run starts, the
# digests of sealed segments' indexes) are a set of elements. Their root is an LtHash-style
# homomorphic set hash: each element is expanded by BLAKE3's XOF to 2048 bytes, read as an
# integer, and the elements are summed modulo 2**16384; the root is BLAKE3 of the sum. Adding or
# removing an element is one XOF and one addition, so a commit updates the root in time that does
# not depend on the store's size, and a checkpoint's tables can be checked against the root the
# log commits to. (A sum of 256-bit hashes would not do: Wagner's generalized birthday attack finds
# collisions; at 16384 bits the sum is as hard to collide as LtHash16's 1024 lanes.)

ROOT_BYTES = 2048
_ROOT_MOD = (1 << (8 * ROOT_BYTES)) - 1


def element_hash(key: list) -> int:
    """One element of the tables' set as the root sums it: BLAKE3's XOF of its encoding, 2048 bytes, as an integer."""
    return int.from_bytes(blake3.blake3(_enc.encode(key)).digest(ROOT_BYTES), "little")


@lru_cache(maxsize=64)
def run_element(run: str, digest: bytes) -> int:
    """``element_hash(["R", run, digest])``, remembered: a commit takes its run's old share out of the root and puts
    the new one in, and the old one is what the commit before it put in (one XOF saved per run per commit)."""
    return element_hash(["R", run, digest])


def root_digest(root_sum: int) -> bytes:
    return blake3.blake3((root_sum & _ROOT_MOD).to_bytes(ROOT_BYTES, "little")).digest()


def run_digest(refs: dict, tips: dict, start: int | None) -> bytes | None:
    """One run's share of the tables, as one element: its refs, its chains' newest records and its
    run_started entry (None: the run has none of them)."""
    if not refs and not tips and start is None:
        return None
    return blake3.blake3(_enc.encode([sorted(refs.items()), sorted([b, lsn, oid] for b, (lsn, oid) in tips.items()), start])).digest()


def table_elements(refs: dict, tips: dict, intents: dict, starts: dict, idx: dict, run_refs: dict | None = None,
                   packs: dict | None = None) -> Iterator[list]:
    """Every element of the tables' set, as the root hashes it: one per run (``run_digest``), one
    per ref outside the runs, one per intent fact, one per index digest. ``run_refs``: ``refs``
    grouped by run already (``LogState.run_refs``), if the caller has it."""
    if run_refs is None:
        run_refs = {}
        for name, value in refs.items():
            run = _run_of(name)
            if run is not None:
                run_refs.setdefault(run, {})[name] = value
    for name, value in refs.items():
        if not name.startswith(_RUN_PREFIX) or _run_of(name) is None:
            yield ["r", name, value]
    run_tips: dict = {}
    for (run, branch), tip in tips.items():
        run_tips.setdefault(run, {})[branch] = tip
    for run in sorted(set(run_refs) | set(run_tips) | set(starts)):
        d = run_digest(run_refs.get(run, {}), run_tips.get(run, {}), starts.get(run))
        if d is not None:
            yield ["R", run, d]
    for run, facts in intents.items():
        for branch, lsn, kind, body, oid in facts:
            yield ["i", run, branch, lsn, kind, body, oid]
    for seg, digest in idx.items():
        yield ["x", seg, digest]
    for seg, digest in (packs or {}).items():
        yield ["w", seg, digest]


def tables_root(refs: dict, tips: dict, intents: dict, starts: dict, idx: dict, packs: dict | None = None) -> int:
    root_sum = 0
    for key in table_elements(refs, tips, intents, starts, idx, packs=packs):
        root_sum += element_hash(key)
    return root_sum & _ROOT_MOD
