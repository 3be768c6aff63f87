"""gc on object storage: bodies that recorded deletions name are removed from the keys that store them.

The entries stay (same checksums, so anchors hold); their blocks are laid again without the bodies,
each chunk and entry key PUT again under its own key and HEAD swapped by compare-and-swap, then one
HEAD swap raises the gc generation so every reader and writer drops what it read before. Also here:
the keys the log names and those it does not (what a writer PUT before a HEAD swap it lost).
"""

from __future__ import annotations

import os
import random
import time

from ...errors import Busy, CorruptLog
from .. import codec
from ..log.format import COMP_GONE, ZERO, Loc
from ..log.parse import parse_entry
from .entries import strip_entry
from .layout import (
    CHUNK_FMT,
    CHUNK_PREFIX,
    ENTRY_PREFIX,
    HEAD_FMT,
    HEAD_KEY,
    Chunk,
    Head,
    chunk_key,
    chunk_range,
    encode_head,
    encoder,
    entry_key,
)
from .reader import S3Reader

GC_SETTLE_SECONDS = float(os.environ.get("OBJSTORE_S3_GC_SETTLE_SECONDS", "0.5"))  # gc reads what it rewrote back after this


class BodyRemoval(S3Reader):
    """The S3 reader, with gc's in-place rewrites and the inventory of the bucket's keys."""

    def remove_bodies(self, gone: set) -> tuple[dict, dict]:
        """Rewrite every chunk, entry key and HEAD tail slot that stores a body of ``gone`` without it:
        the same entries (same checksums, so anchors hold), their blocks laid again. Chunks and entry
        keys are PUT again under their keys; HEAD by compare-and-swap (retried on the newer HEAD).
        Then, after GC_SETTLE_SECONDS, every key written is read back and stripped again if a writer
        that was rolling a stale HEAD's tail into that chunk PUT its old bytes over ours meanwhile.
        Returns ({id: type} removed, {id: bytes} of the removed blobs)."""
        self.refuse_old_format()
        removed: dict = {}
        blobs: dict = {}
        written: dict[str, list[int]] = {}
        for _ in range(20):
            self.refresh(force=True)
            with self._mu:
                targets = sorted({loc.entry for oid in gone if isinstance(loc := self.tables.locs.get(oid), Loc) and loc.comp != COMP_GONE})
                srcs = {n: self._src[n] for n in targets}
            if not targets:
                break
            tail = []
            for n, src in srcs.items():
                if src[0] in ("chunk", "entry"):
                    written.setdefault(src[1], []).append(n)
                else:
                    tail.append(n)
            for key in {src[1] for src in srcs.values() if src[0] != "tail"}:
                self._strip_key(key, written[key], gone, removed, blobs)
            if tail:
                with self._mu:
                    head, etag = self._head, self._etag
                assert head is not None and etag is not None
                first = head.n - len(head.tail) + 1
                slots = list(head.tail)
                for n in tail:
                    i = n - first
                    if 0 <= i < len(slots) and isinstance(slots[i], bytes):
                        new = self._stripped(n, slots[i], gone, removed, blobs)
                        if new is not None:
                            slots[i] = new
                new_head = Head(HEAD_FMT, head.n, head.checksum, head.chunk, slots, head.gc, head.lease)
                if self.bucket.put_if_match(HEAD_KEY, encode_head(new_head), etag) is not None:
                    self.refresh(force=True)
        else:
            raise Busy(self.bucket.url, 20, 0)
        if written:
            time.sleep(GC_SETTLE_SECONDS)
            for key, ns in written.items():
                self._strip_key(key, ns, gone, removed, blobs)
        if removed:
            self._bump_generation()
        return removed, blobs

    def _bump_generation(self) -> None:
        """One HEAD swap that raises the gc generation: every reader and writer that takes it in drops
        what it read before gc rewrote keys in place, and a writer whose commit was built before it
        loses its swap and builds again from what the bucket now holds."""
        for _ in range(200):
            self.refresh(force=True)
            with self._mu:
                head, etag = self._head, self._etag
            if head is None or etag is None:
                return
            new = Head(HEAD_FMT, head.n, head.checksum, head.chunk, list(head.tail), head.gc + 1, head.lease)
            if self.bucket.put_if_match(HEAD_KEY, encode_head(new), etag) is not None:
                self.refresh(force=True)
                return
            time.sleep(random.random() * 0.01)
        raise Busy(self.bucket.url, 200, 0)

    def _strip_key(self, key: str, ns: list[int], gone: set, removed: dict, blobs: dict) -> bool:
        """Read ``key`` (a chunk or an entry key) from the bucket and PUT it again without the bodies of
        ``gone`` its entries ``ns`` store; whether it had any."""
        got = self.bucket.get(key)
        if got is None:
            raise CorruptLog(self._where(key), "missing (HEAD or a chunk names it)")
        if key.startswith(ENTRY_PREFIX):
            n = ns[0]
            new = self._stripped(n, got.data, gone, removed, blobs)
            if new is None:
                return False
            self.bucket.put(key, new)
            self._forget_cached(key)
            self._relocate(n, new, ("entry", key))
            return True
        first, _last = chunk_range(key)
        ch = self._decode_chunk(key, None, got.data)
        if isinstance(ch, str):
            raise CorruptLog(self._where(key), ch)
        slots = list(ch.slots)
        changed = False
        for n in sorted(set(ns)):
            i = n - first
            if isinstance(slots[i], bytes):
                new = self._stripped(n, slots[i], gone, removed, blobs)
                if new is not None:
                    slots[i], changed = new, True
        if not changed:
            return False
        self.bucket.put(key, encoder.encode(Chunk(CHUNK_FMT, ch.prev, ch.first, slots)))
        self._forget_cached(key)
        for n in sorted(set(ns)):
            if isinstance(slots[n - first], bytes):
                self._relocate(n, slots[n - first], ("chunk", key, n - first))
        return True

    def _stripped(self, n: int, raw: bytes, gone: set, removed: dict, blobs: dict) -> bytes | None:
        e = parse_entry(raw, 0, len(raw), self._cks.get(n - 1, ZERO), 0, n)
        if isinstance(e, str) or e.checksum != self._cks.get(n):
            raise CorruptLog(self._where(HEAD_KEY), f"entry {n}: {e if isinstance(e, str) else 'not the entry the log chains'}")
        got = strip_entry(raw, e, gone)
        if got is None:
            return None
        new, rem = got
        for oid, (otype, data) in rem.items():
            removed[oid] = otype
            if otype == codec.BLOB:
                blobs[oid] = data
        return new

    def named_keys(self) -> set[str]:
        """Every chunk and entry key the log names (HEAD's chunk chain, and entry keys in any slot)."""
        self.refresh(force=True)
        with self._mu:
            head = self._head
        if head is None:
            return set()
        keys: set[str] = set()
        for slot in head.tail:
            if isinstance(slot, list):
                keys.add(entry_key(slot[0], slot[1]))
        ref = head.chunk
        while ref is not None:
            key = chunk_key(*ref)
            keys.add(key)
            ch = self._decode_chunk(key, None, self._bucket_bytes(key))  # (verify GOT it already: no second GET)
            if isinstance(ch, str):
                raise CorruptLog(self._where(key), ch)
            for j, slot in enumerate(ch.slots):
                if isinstance(slot, list):
                    keys.add(entry_key(ch.first + j, slot[1]))
            ref = ch.prev
        return keys

    def unnamed_keys(self) -> list:
        """(key, size, modified) of every chunk/ and entry/ key no entry names: what a writer PUT
        before a HEAD swap it lost (never read). Listed before the log is walked, so a key a writer
        PUTs meanwhile is not in the list at all."""
        listed = [x for p in (CHUNK_PREFIX, ENTRY_PREFIX) for x in self.bucket.list(p)]
        named = self.named_keys()
        with self._mu:
            head = self._head
        covered = head.chunk[1] if head is not None and head.chunk is not None else 0
        top = head.n if head is not None else 0
        out = []
        for x in listed:
            if x.key in named:
                continue
            try:
                if x.key.startswith(CHUNK_PREFIX):
                    first, last = chunk_range(x.key)
                    cks = bytes.fromhex(x.key.rsplit("-", 1)[1])
                    if first > covered and (last > top or self._cks.get(last) == cks):
                        continue  # entries past the named chunks, which the next commit may still name it for
                elif int(x.key[len(ENTRY_PREFIX):].split("-", 1)[0]) > top:
                    continue  # an entry past HEAD: a commit in flight may still name it
            except ValueError:
                pass
            out.append(x)
        return out

    def stored_bytes(self) -> int:
        return sum(x.size for x in self.bucket.list(""))
