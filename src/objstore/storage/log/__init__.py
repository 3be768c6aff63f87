"""One log's mechanics (format 3): an append-only log of commit entries, the tables derived from it, its engines.

A *commit entry* carries everything one commit does: its objects and its ref moves ``(name, old,
new, reason)``, its time, its index rows, the root of the tables after it, and a trailer holding
its length and a BLAKE3 chain checksum. An entry is one ``write`` and one ``fdatasync``: the only
commit point. docs/FORMAT.md is the reference.

Members, lowest first (each imports only those before it; none imports this ``__init__``):

* ``format`` — constants, ``Position``, ``Loc``, the chain checksum (``logical_checksum``);
* ``root`` — the root of the derived tables (a homomorphic set hash);
* ``entry`` — ``Entry``, large blobs, laying an entry out (``build_entry``);
* ``parse`` — reading an entry back and checking its meta (``parse_entry``);
* ``facts`` — the hook through which the run model hands the log its record facts;
* ``rules`` — ``Plan`` and ``Rules.plan``: what an entry changes, or the rule it breaks;
* ``tables`` — ``Tables``: what the log says at a position; checkpoints' contents;
* ``craft`` — entries built outside a writer, as a writer builds them (fixtures, forged entries);
* ``txn`` — ``Txn``: a commit in the making;
* ``engine`` — ``Engine``: the interface every engine implements, its optional capabilities;
* ``memory`` — ``MemoryEngine``: the tables over dicts.

Invariants of the log (the store-wide ones, numbered, are in the design notes; the numbers in
brackets are theirs):

1. An entry is visible whole or not at all: a reader takes an entry only complete, with a trailer
   that agrees and a chain checksum that matches; a torn last entry is invisible [1, 12].
2. The log is a hash chain: each entry's checksum covers its logical content and the checksum
   before it, never compressed bytes or layout, so a repack or recompression keeps it.
3. One function decides every entry (``Rules.plan``): the writer before writing it, every reader
   taking it in, verify replaying it; the deletion authority rule likewise (``engine.deletion_rule``).
4. The tables are derived from entries' metas alone, and their root is in every entry: adopted
   tables (a checkpoint) are checked against the root the log names.
5. Per-branch LSNs start at 0 and are contiguous; a record names its branch's head as parent [5, 13].
6. Readers never lock: a reader's view is a ``Position`` and nothing after it [13].
7. The log decodes no record: the record facts it indexes and rules over come from the run
   model, through ``facts``.
"""

from .engine import Engine, ScanEntry, ScanProblem
from .entry import Entry, LargeBlob
from .format import LARGE_BLOB, Loc, Position
from .memory import MemoryEngine
from .rules import Plan
from .tables import Tables
from .txn import Txn

__all__ = ["LARGE_BLOB", "Engine", "Entry", "LargeBlob", "Loc", "MemoryEngine", "Plan", "Position", "ScanEntry", "ScanProblem",
           "Tables", "Txn"]
