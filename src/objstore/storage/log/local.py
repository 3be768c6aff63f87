"""The local log engine: one append-only log of commit entries in files (format 3), ``LogEngine``.

Entries live in segment files ``log/<10 digits>.seg``; the highest-numbered one is active, the
others are sealed and never change (gc may replace one by a packed file holding the same entries).
The engine keeps, derived from the entries and nothing else: the ref table, the location of every
object, and the chain index. Its parts, each a class over ``local_state.LocalBase``:

* ``local_catchup`` — taking in the entries others appended (readers never lock), torn tails, damage;
* ``local_objects`` — objects read and hash-checked, large blobs streamed;
* ``local_index`` — locations, chain index and label rows, sealed segments' indexes;
* ``checkpoint`` — adopting and writing the checkpoint;
* ``witness`` — the head witness;
* ``local_write`` — the writer lock, commit entries, group commit, seal, repair, rewrite.

docs/FORMAT.md is the reference for the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

from .checkpoint import Checkpoints
from .engine import ScanEntry, ScanProblem
from .local_catchup import CatchUp
from .local_index import SegmentIndexes
from .local_objects import ObjectReads
from .local_write import Writer
from .scan import scan_log
from .witness import Witness


class LogEngine(CatchUp, ObjectReads, SegmentIndexes, Checkpoints, Witness, Writer):
    """The ``Engine`` over a store's ``log/`` directory (see the module docstring for its parts)."""

    log_files = True  # its log is segment files on this machine: verify checks them byte by byte (fsck.LocalLogCheck)

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:
        return scan_log(self, upto)
