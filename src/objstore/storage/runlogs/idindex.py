"""The id → run index of a store of format 6 (``<store>/index/ids``): which run's log holds an object, for a bare id.

A run's output names its objects ``RUN:ID``, which opens that run's log alone. A bare id (``show ID``) names no
run: without this index finding it means opening every run's log, newest first, until one holds it (O(runs)).
``objstore index`` (and ``gc``) writes the index: every object id of every run's log, sorted, each with the run
that holds it, and the catalog order key of the newest run it covers. A look-up binary-searches the file (mapped,
never read whole), then confirms the hit against that run's log (``Engine.has``): the index is a derived file
and decides nothing (invariant 15). Runs catalogued after the index was built are searched first, newest first;
an id the index does not hold, nor those runs, is then looked for in every run (an edited index costs time, never
a wrong answer).

Layout: ``objstore-idindex-1\\n``, then a msgpack header ``[newest order key, [run, …]]`` preceded by its u32
length, then rows of 36 bytes — the object id (32) and the u32 index of its run in the header's list — sorted by id.
Written whole to a temporary file and renamed over the old one.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from typing import Any

import msgspec

from ..fileutil import FsyncPolicy, atomic_file

MAGIC = b"objstore-idindex-1\n"
ROW = struct.Struct(">32sI")
_U32 = struct.Struct(">I")


class IdIndex:
    """A built index, mapped for look-ups."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.runs: list[str] = []
        self.newest = ""
        self._map: Any = None
        self._rows_at = 0
        self._count = 0
        self._load()

    def _load(self) -> None:
        try:
            f = open(self.path, "rb")
        except OSError:
            return
        with f:
            try:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                return
        try:
            if m[:len(MAGIC)] != MAGIC:
                raise ValueError("magic")
            at = len(MAGIC)
            (hlen,) = _U32.unpack_from(m, at)
            newest, runs = msgspec.msgpack.decode(m[at + 4:at + 4 + hlen])
            if not isinstance(newest, str) or not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
                raise ValueError("header")
            at += 4 + hlen
            if (len(m) - at) % ROW.size:
                raise ValueError("rows")
        except (ValueError, struct.error, msgspec.DecodeError):
            m.close()
            return  # not an index we can read: as if there were none (look-ups search the runs)
        self._map, self._rows_at, self._count = m, at, (len(m) - at) // ROW.size
        self.runs, self.newest = runs, newest

    def run_of(self, oid: bytes) -> str | None:
        """The run the index says holds ``oid`` (a claim, to be confirmed), or None."""
        m = self._map
        if m is None:
            return None
        lo, hi = 0, self._count
        while lo < hi:
            mid = (lo + hi) // 2
            got, ri = ROW.unpack_from(m, self._rows_at + mid * ROW.size)
            if got < oid:
                lo = mid + 1
            elif got > oid:
                hi = mid
            else:
                return self.runs[ri] if ri < len(self.runs) else None
        return None

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def build(path: str, tmpdir: str, policy: FsyncPolicy, newest: str, runs: Iterator[tuple[str, Iterator[bytes]]]) -> int:
    """Write the index of ``runs`` ((run, its ids)); ``newest``: the catalog order key of the newest run covered.
    Returns the number of ids. Memory: a 36-byte row per id (sorted once, in C)."""
    names: list[str] = []
    rows: list[bytes] = []
    for run, ids in runs:
        ri = len(names)
        names.append(run)
        rows.extend(ROW.pack(oid, ri) for oid in ids)
    rows.sort()  # by id (the first 32 bytes), in C
    count = len(rows)
    header = msgspec.msgpack.encode([newest, names])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_file(path, tmpdir, policy) as f:
        f.write(MAGIC + _U32.pack(len(header)) + header)
        f.write(b"".join(rows))
    return count


__all__ = ["IdIndex", "build"]
