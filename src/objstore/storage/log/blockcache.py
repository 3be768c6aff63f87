"""Decompressed blocks of the logs, held for the next read of a neighbour: one cache per process, bounded in bytes.

A block holds many objects: a packed segment (``objstore gc``, ``packed``) merges records into ~256 KiB
blocks and small blobs into ~1 MiB ones, an ordinary segment lays a commit's objects into ~128 KiB ones, and
an entry on object storage (``storage.s3``) has blocks of its own too. Reading the objects of one block one
after the other (a LangGraph checkpoint's parts, a chain walk) decompresses it once while it stays here, not
once per object. Every log engine of the process reads through ``SHARED``.

Kept here:

* **Bounded by bytes.** The bytes held (``held``: each block's length plus ``ENTRY_COST``) never exceed the
  budget; the least recently used block goes first. The budget is 16 MiB (``OBJSTORE_BLOCK_CACHE_MIB``, read
  once at import like the engines' other knobs; 0 holds nothing): 16 packed blob blocks or 64 packed record
  blocks, more than one LangGraph checkpoint's parts span (a 200-turn chat's latest checkpoint after gc: 3
  blocks, 190 KB), for a few percent of a reader's resident memory. A block bigger than an eighth of the
  budget is never held (one read must not flush every other block; a large blob streams in a block of its own),
  nor is a block holding only the object read (a one-record commit's: a walk of those costs the cache nothing).
* **Keyed by what was read, never by a file's name.** A key starts with a token (``token``) handed out once
  per process: the local engine takes one for each descriptor it opens on a segment file, so a file gc put in
  place under the same name, opened on a new descriptor, has keys of its own, and the old file's blocks are what
  the old descriptor, still open, reads too; the S3 reader takes a new one wherever what it read may have moved.
  Keyed by name and offset instead, a reader could take the old file's block for the new file's: never other
  bytes than an id's (every read re-hashes), but damage in the new file hidden, or a removed body's neighbours
  read from bytes gc replaced. An engine's ``close`` drops its tokens' blocks (``discard``, at the cost of the
  blocks it drops: a process that opens and closes thousands of run logs must not scan the cache each time);
  others age out.
* **Bytes, not trusted objects.** What is held is a block as decompressed, never a checked object: every read
  re-hashes the object it takes out, and a hash that fails on a held block drops the block and decompresses
  it from the file (or the entry's bytes) again, so those decide, not the cache.
* **Thread-safe.** One lock around the map, held for a dict operation only; decompression is the caller's
  and happens outside it (two threads may decompress one block at once: the second ``put`` replaces the
  first, the bytes held stay within the budget). The lock is re-entrant: an engine nobody holds any more is
  closed by its finalizer (``LocalBase.__del__``), which the cyclic garbage collector may run in this very
  thread during any allocation made under the lock, and its ``close`` calls ``discard`` (a plain lock
  deadlocked there). Every method leaves the map consistent between its allocations, so a nested ``discard``
  finds it whole.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict

MIB = 1 << 20
ENTRY_COST = 384  # bytes charged per block held beyond its own: key tuple and ints, map node, set entry (measured: ~355)


def _budget_from_env() -> int:
    text = os.environ.get("OBJSTORE_BLOCK_CACHE_MIB", "").strip()
    try:
        return max(0, int(float(text) * MIB)) if text else 16 * MIB
    except ValueError:
        return 16 * MIB


_tokens = itertools.count(1)


def token() -> int:
    """A file token never handed out before in this process (one per descriptor an engine opens)."""
    return next(_tokens)


class BlockCache:
    """Decompressed blocks by key (its first field a token), least recently used evicted first; ``held`` never
    above ``budget``. A block is charged its length plus ``ENTRY_COST`` (what holding it costs besides its bytes:
    its key, its place in the map and the token's set), so a cache of many small blocks keeps to the budget too."""

    def __init__(self, budget: int, max_block: int | None = None) -> None:
        self.budget = budget
        self.max_block = budget // 8 if max_block is None else max_block  # a bigger block is never held
        self._mu = threading.RLock()  # re-entrant: see the module docstring (a finalizer's discard)
        self._blocks: OrderedDict[tuple, bytes] = OrderedDict()
        self._by_tok: dict[int, set[tuple]] = {}  # token -> its keys held: ``discard`` costs the blocks it drops
        self.held = 0  # bytes charged for the blocks held
        self.hits = self.misses = self.evicted = 0

    def get(self, key: tuple) -> bytes | None:
        with self._mu:
            raw = self._blocks.get(key)
            if raw is None:
                self.misses += 1
                return None
            self._blocks.move_to_end(key)
            self.hits += 1
            return raw

    def put(self, key: tuple, raw: bytes) -> None:
        """Hold ``raw`` under ``key`` unless it is bigger than ``max_block``; evict the least recently used to fit."""
        n = len(raw)
        if n > self.max_block or n == 0 or n + ENTRY_COST > self.budget:
            return
        with self._mu:
            if key in self._blocks:
                self._pop(key)
            self._blocks[key] = raw
            keys = self._by_tok.get(key[0])
            if keys is None:
                self._by_tok[key[0]] = {key}
            else:
                keys.add(key)
            self.held += n + ENTRY_COST
            while self.held > self.budget:
                self._pop(next(iter(self._blocks)))
                self.evicted += 1

    def _pop(self, key: tuple) -> None:
        old = self._blocks.pop(key, None)
        if old is not None:
            self.held -= len(old) + ENTRY_COST
            keys = self._by_tok[key[0]]
            keys.discard(key)
            if not keys:
                del self._by_tok[key[0]]

    def drop(self, key: tuple) -> None:
        with self._mu:
            self._pop(key)

    def discard(self, tokens: set[int]) -> None:
        """Drop every block of these tokens (an engine closed their descriptors)."""
        with self._mu:
            for t in tokens:
                for key in list(self._by_tok.get(t, ())):
                    self._pop(key)

    def __len__(self) -> int:
        return len(self._blocks)


SHARED = BlockCache(_budget_from_env())  # every log engine of the process reads through this one
