"""One log's mechanics (format 3): an append-only log of commit entries, the tables derived from it, its engines.

A *commit entry* carries everything one commit does: its objects and its ref moves ``(name, old,
new, reason)``, its time, its index rows, the root of the tables after it, and a trailer holding
its length and a BLAKE3 chain checksum. An entry is one ``write`` and one ``fdatasync``: the only
commit point. docs/FORMAT.md is the reference.

Members, lowest first (each imports only those before it; none imports this ``__init__``):

* ``format`` — constants, ``Position``, ``Loc``, the chain checksum (``logical_checksum``);
* ``root`` — the root of the derived tables (a homomorphic set hash);
* ``entry`` — ``LogEntry``, large blobs, laying an entry out (``build_entry``);
* ``parse`` — reading an entry back and checking its meta (``parse_entry``);
* ``facts`` — the hook through which the run model hands the log its record facts;
* ``rules`` — ``EntryEffect`` and ``Rules.plan``: what an entry changes, or the rule it breaks;
* ``tables`` — ``LogState``: what the log says at a position; checkpoints' contents;
* ``craft`` — entries built outside a writer, as a writer builds them (fixtures, forged entries);
* ``txn`` — ``Txn``: a commit in the making;
* ``engine`` — ``Engine``: the interface every engine implements, its optional capabilities;
* ``memory`` — ``MemoryEngine``: the tables over dicts;
* ``segindex`` — a sealed segment's index file (``log/<segment>.idx``);
* ``packed`` — the packed segment file gc writes;
* ``segfile`` — segment files: names, headers, an entry read without its blocks (``entry_ending_at``), packed entries;
* ``segrows`` — the index rows an entry gives, and rows back into locations;
* ``local_state`` — ``LocalBase``: a local log's state, files and descriptors (what its parts share);
* ``scan`` — the log read as verify reads it, entry by entry, damage named;
* ``witness`` — the head witness (``log/witness``): reading it, comparing it with the log;
* ``checkpoint`` — the one rule by which a reader adopts a checkpoint (``adoption``), and writing one;
* ``local_catchup`` — taking in the tail: torn tails versus damage, applying entries;
* ``local_objects`` — reading objects, hash-checked, large blobs streamed;
* ``local_index`` — locations, the chain index, label rows, sealed segments' indexes;
* ``local_write`` — the writer lock, group commit, seal, repair, rewrite;
* ``local`` — ``LogEngine``: the local log, its parts put together;
* ``fsck`` — the log-level checks of ``objstore verify``: bytes, checksums, indexes, witness, torn tails.

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

# Import-light on purpose: importing any member runs this file first, so it imports none of them
# (members are reached as attributes, loaded on first use).
from ...lazy import member_getattr

__getattr__ = member_getattr(__name__)
