"""A sealed segment's index rows: those an entry's meta gives, and the locations rows give back.

``segindex`` is the index file's format; this module is how the log fills and reads it. An index
is derived data: ``_write_index`` is best effort, and a row is only ever used through the index
the log names by digest (or one built again from the segment's entries).
"""

from __future__ import annotations

from ...errors import IntegrityError
from .. import labels as labels_mod
from . import segindex
from .entry import LogEntry, block_starts
from .format import COMP_GONE, COMP_RAW, REMOVED, Loc


def _segment_rows(e: LogEntry, objects: dict, chain: list, labels: bool = True) -> None:
    """Add one entry's index rows (object rows as segindex.build takes them, chain rows) from its meta."""
    starts = block_starts(e)
    for oid, otype, length, bi, boff in e.objs:
        if bi == REMOVED:
            objects[oid] = (oid, e.n, 0, 0, 0, 0, length, COMP_GONE, otype)
            continue
        comp, raw, stored = e.blocks[bi][:3]
        objects[oid] = (oid, e.n, starts[bi], stored, raw, boff, length, comp, otype)
    for r in e.recs:
        oid = e.objs[r[0]][0]
        chain.append((r[1], r[2], r[3], oid))
        if labels and len(r) > 8:  # a labelled record: its label rows, (key, entry number, id)
            chain.extend((k, e.n, oid) for k in labels_mod.index_keys(r[1], r[2], r[3], r[5], r[8]))


def _write_index(path: str, data: bytes) -> None:
    """Best effort: an index is derived data, and the caller keeps the bytes it built (a read-only
    store, or a concurrent writer of the same file, only means it is built again next time)."""
    try:
        segindex.write(path, data)
    except OSError:
        pass


_NO_LOC = Loc(0, 0, 0, COMP_RAW, 0, 0, 0, 0, "record")


def _loc_of(row: tuple, seg: int) -> Loc:
    oid, entry, bo, st, raw, off, ln, comp, tc = row
    if tc >= len(segindex.TYPES):
        raise IntegrityError(oid.hex(), f"index of segment {seg}", f"index row names unknown type code {tc}")
    return Loc(entry, seg, bo, comp, st, raw, off, ln, segindex.TYPES[tc])
