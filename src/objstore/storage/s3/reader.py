"""The reading half of the S3 engine: HEAD taken in, chunks and large entries fetched and cached, objects read.

Readers revalidate HEAD with ``If-None-Match`` (a 304 is one cheap request) and never trust a cached
HEAD; chunks and large entries are cached on local disk by key and checked on use (their entries
parse and chain to the checksum the key names). A copy is named with the gc generation it was read
under, so a copy from before gc rewrote keys in place is never read after it. ``scan`` reads the
bucket itself (never a copy this process did not fetch): what verify proves is what every reader reads.
Decompressed blocks are held in the process's block cache (``log.blockcache``) under a token of this reader
that changes wherever what it read may have moved; every object taken out of one is re-hashed.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import blake3
import msgspec
import zstandard

from ...errors import BodyRemoved, Busy, CorruptLog, IntegrityError, ObjectNotFound
from .. import codec
from ..log import blockcache
from ..log.engine import Engine, ScanEntry, ScanProblem, deletion_rule, entry_bodies
from ..log.entry import LogEntry, block_starts
from ..log.format import COMP_GONE, COMP_RAW, COMP_ZSTD, REMOVED, ZERO, Loc, Position, _decompressor
from ..log.parse import parse_entry
from ..log.rules import EntryEffect, plan_taken
from ..log.tables import LogState
from .bucket import NOT_MODIFIED, Bucket
from .entries import block_object, objects_of
from .layout import (
    CHUNK_FMT,
    CHUNK_PREFIX,
    HEAD_FMT,
    HEAD_KEY,
    MARKER_KEY,
    TAIL_ENTRIES,
    Chunk,
    Head,
    chunk_decoder,
    chunk_key,
    chunk_range,
    chunk_ref_ok,
    entry_key,
    head_decoder,
    lease_ok,
    marker_bytes,
    marker_version,
)

# How stale a read may be: 0 (the default) revalidates HEAD at every refresh (one conditional GET, a 304 when
# nothing changed), so a process sees every commit made before its read, as on disk. A short-lived reader (a CLI
# command) may read as of its start instead (Ctx.log sets a window).
FRESH_SECONDS = float(os.environ.get("OBJSTORE_S3_FRESH_MS", "0")) / 1000
CHUNK_CACHE = 64  # decoded chunks kept in memory
PREFETCH_ABOVE = 8  # a walk back over more chunks than this LISTs them and GETs them in parallel first
PREFETCH_THREADS = 8


def _position_in(body: bytes) -> tuple[int, bytes] | None:
    """(entry, checksum) a HEAD's bytes name, or None if they do not parse."""
    try:
        head = head_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return (head.n, head.checksum) if isinstance(head.checksum, bytes) and head.n >= 0 else None


def _write_copy(path: str, data: bytes) -> None:
    """Put a cache copy in place whole (written aside, renamed: a reader never sees half of one). Not
    synced: a copy lost to a crash is read from the bucket again. A cache that cannot be written is
    only slower."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


class S3Reader(Engine):
    """The Engine interface over a ``Bucket``; ``cache`` is a local directory for immutable keys."""

    fresh_seconds = FRESH_SECONDS
    needs_upgrade: int | None = None  # the format of a store of one HEAD (3-5): read, never written

    def refuse_old_format(self) -> None:
        """BucketNeedsUpgrade before any write to a store of one HEAD (a commit, gc's rewrites, a new marker)."""
        if self.needs_upgrade is not None:
            from ...errors import BucketNeedsUpgrade

            raise BucketNeedsUpgrade(self.bucket.url, self.needs_upgrade, self.bucket.url)

    def __init__(self, bucket: Bucket, cache: str | None = None, entry_view: Any = None, run: str | None = None) -> None:
        """``entry_view`` and ``run``: a run's log of a store of logs (``Engine.entry_view``), set before the
        log is read at open (its entries are judged with them)."""
        self.bucket = bucket
        self.cache = cache
        if entry_view is not None:
            self.entry_view = entry_view
        self.run = run
        self.tables = LogState()
        self._mu = threading.RLock()
        self._wlock = threading.Lock()
        self._etag: str | None = None
        self._head: Head | None = None
        self._checked = 0.0
        self._src: dict[int, tuple] = {}  # entry -> ("tail", bytes) | ("chunk", key, slot index) | ("entry", key)
        self._chunks: OrderedDict[str, Chunk] = OrderedDict()
        self._last_entry: tuple[str, bytes] | None = None  # the entry/ key read last, and its bytes
        # decompressed blocks (the process's block cache), keyed by this token, entry, offset and sizes: a new token
        # wherever what this reader read before may have moved (an entry relocated, a copy dropped, a gc generation)
        self._blocks = blockcache.SHARED
        self._blk_tok = blockcache.token()
        self._gen = 0  # the gc generation of the HEAD taken in last
        self._skipped: OrderedDict[bytes, bytes] = OrderedDict()  # blobs puts left out as stored, newest last
        self._skipped_bytes = 0
        self._cks: dict[int, bytes] = {}  # entry -> its chain checksum (a rewritten entry must keep it)
        self._from_cache: set[str] = set()
        self._fetched: dict[str, bytes] = {}  # key -> BLAKE3 of the bytes this process GOT from the bucket for it  # keys read from the local cache since the last check failed
        self.root = None
        self.damaged: CorruptLog | None = None
        self.head_unchanged = False  # HEAD answered 304 to the copy this cache kept: nothing new since then
        self._cached_head: bytes | None = None
        self._seen_before: tuple[int, bytes] | None = None  # (entry, checksum) of the HEAD this cache kept last
        if cache:
            os.makedirs(os.path.join(cache, "keys"), exist_ok=True)
            try:  # the HEAD this cache saw last, with its ETag: revalidated at open (a 304), never trusted unasked
                with open(os.path.join(cache, "HEAD"), "rb") as f:
                    tag, _, body = f.read().partition(b"\n")
                # A 304 says the server's HEAD still has this ETag; the copy is believed only if it is the
                # bytes that ETag names (an S3 ETag of a plain PUT is their MD5), so an edited copy is not.
                if hashlib.md5(body, usedforsecurity=False).hexdigest() == tag.decode("ascii"):
                    self._etag, self._cached_head = tag.decode("ascii"), body
                # what this machine read last, believed or not: a HEAD read now that does not extend it is named
                # (a copy edited here can only make reads refuse, never change what they answer)
                self._seen_before = _position_in(body)
            except (OSError, UnicodeDecodeError):
                self._etag = None
        try:
            self.refresh(force=True)  # like a log on disk, the log is read at open...
        except CorruptLog:
            pass  # ...and a damaged one opens: every read raises (verify reads the readable prefix)

    # -- reading the log ------------------------------------------------------------------
    def refresh(self, force: bool = False) -> Position:
        """Take in what HEAD has past our position. A damaged log raises CorruptLog on every call
        (the tables keep the readable prefix), unless ``prefix_ok``: then the prefix's position."""
        try:
            pos = self._refresh(force or self.damaged is not None)
        except CorruptLog as err:
            self.damaged = err
            if self.prefix_ok:
                return self.tables.pos
            raise
        self.damaged = None
        return pos

    def _refresh(self, force: bool) -> Position:
        with self._mu:
            now = time.monotonic()
            if not force and self._head is not None and now - self._checked < self.fresh_seconds:
                return self.tables.pos
            if self._etag is None:
                got = self.bucket.get(HEAD_KEY)
            else:
                got = self.bucket.get_if_changed(HEAD_KEY, self._etag)
            self._checked = time.monotonic()
            if got is None:
                if self.tables.pos.entry:
                    raise CorruptLog(self._where(HEAD_KEY), f"HEAD is gone; this process has read {self.tables.pos.entry} entries")
                if self._seen_before is not None and self._seen_before[0] > 0:
                    raise CorruptLog(self._where(HEAD_KEY), f"HEAD is gone; this machine read entry {self._seen_before[0]} of "
                                                            f"this log before (kept in {self.cache})")
                return self.tables.pos
            if got is NOT_MODIFIED:
                if self._head is None and self._cached_head is not None:  # the cached copy, now revalidated
                    head = self._parse_head(self._cached_head)
                    self._take_checked(head)
                    self._head, self._cached_head, self.head_unchanged = head, None, True
                return self.tables.pos
            head = self._parse_head(got.data)
            self._take_checked(head)
            if self._seen_before is not None:
                self._not_behind(head, self._seen_before)
                self._seen_before = None
            self._head, self._etag = head, got.etag
            self._keep_head(got)
            return self.tables.pos

    def _not_behind(self, head: Head, seen: tuple[int, bytes]) -> None:
        """A HEAD read afresh must extend the one this machine's cache kept (a copy that hashes to its ETag): the log
        read before cannot have lost entries, nor had its entry there replaced. A server (or someone with write access
        to the bucket) putting an older HEAD back is named here, instead of the older log being served."""
        n, checksum = seen
        where = self._where(HEAD_KEY)
        if head.n < n:
            raise CorruptLog(where, f"HEAD went back from entry {n} (read before on this machine, kept in {self.cache}) "
                                    f"to entry {head.n}: a rolled-back log")
        if n and self._cks.get(n, checksum) != checksum:
            raise CorruptLog(where, f"HEAD's log has another entry {n} than the one read before on this machine "
                                    f"(kept in {self.cache}): a rewritten log")

    def _take_checked(self, head: Head) -> None:
        try:
            self._take(head)
        except CorruptLog:
            if not self._drop_cached():
                raise
            self._take(head)  # a damaged local cache copy, not a damaged log: from the bucket again

    def _keep_head(self, got: Any) -> None:
        if not self.cache:
            return
        try:
            _write_copy(os.path.join(self.cache, "HEAD"), got.etag.encode("ascii") + b"\n" + got.data)
        except UnicodeEncodeError:
            pass  # an ETag that is not ASCII is not kept: only the next open's first request is dearer

    def _where(self, key: str) -> str:
        return f"{self.bucket.url.rstrip('/')}/{key}"

    def _parse_head(self, data: bytes) -> Head:
        try:
            head = head_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptLog(self._where(HEAD_KEY), f"HEAD does not parse: {e}") from None
        if head.fmt != HEAD_FMT or head.n < 0 or len(head.checksum) != 32 or len(head.tail) > head.n:
            raise CorruptLog(self._where(HEAD_KEY), "HEAD is not an objstore S3 head")
        if head.chunk is not None and not chunk_ref_ok(head.chunk):
            raise CorruptLog(self._where(HEAD_KEY), "HEAD names a malformed chunk")
        if not lease_ok(head.lease):
            raise CorruptLog(self._where(HEAD_KEY), "HEAD holds a malformed lease")
        return head

    def _take(self, head: Head) -> list[bytes]:
        """Apply the entries ``head`` has past our position; returns their checksums."""
        if head.gc != self._gen:
            if head.gc < self._gen:
                raise CorruptLog(self._where(HEAD_KEY), f"HEAD's gc generation went back from {self._gen} to {head.gc}")
            self._new_generation(head.gc)
        t = self.tables
        ours = t.pos.entry
        if head.n < ours:
            raise CorruptLog(self._where(HEAD_KEY), f"HEAD went back from entry {ours} to entry {head.n} (a rolled-back log)")
        if head.n == ours:
            if head.checksum != t.pos.checksum:
                if self.damaged is not None:
                    raise self.damaged  # the HEAD that failed before, read again: the damage found then
                raise CorruptLog(self._where(HEAD_KEY), f"HEAD names another entry {ours} than the one this process read")
            self._retake_tail(head)  # the same entries, perhaps with bodies gc removed: their bytes, not their meaning, changed
            return []
        tail_first = head.n - len(head.tail) + 1
        slots: list[tuple[int, Any, tuple]] = []  # (n, slot, source)
        if ours + 1 < tail_first:
            slots = self._chunk_slots(head.chunk, ours + 1, tail_first - 1)
        for i, slot in enumerate(head.tail):
            n = tail_first + i
            if n > ours:
                slots.append((n, slot, ("tail",)))
        got = []
        for n, slot, src in slots:
            raw, src2 = self._slot_bytes(n, slot, src)
            e = parse_entry(raw, 0, len(raw), t.pos.checksum, 0, n)
            if isinstance(e, str):
                raise CorruptLog(self._where(src2[1] if src2[0] in ("chunk", "entry") else HEAD_KEY), f"entry {n}: {e}")
            why = self._apply(e, None, raw)
            if why is not None:
                raise CorruptLog(self._where(HEAD_KEY), f"entry {n} breaks a rule: {why}")
            self._src[n] = src2
            self._cks[n] = e.checksum
            got.append(e.checksum)
        if t.pos.checksum != head.checksum:
            raise CorruptLog(self._where(HEAD_KEY), f"HEAD names checksum {head.checksum.hex()[:16]} for entry {head.n}, its entries chain to {t.pos.checksum.hex()[:16]}")
        return got

    def _retake_tail(self, head: Head) -> None:
        first = head.n - len(head.tail) + 1
        for i, slot in enumerate(head.tail):
            src = self._src.get(first + i)
            if isinstance(slot, bytes) and src is not None and src[0] == "tail" and src[1] != slot:
                self._relocate(first + i, slot, ("tail", slot))

    def _relocate(self, n: int, raw: bytes | None = None, src: tuple | None = None) -> bool:
        """Take entry ``n``'s object locations again from its bytes (``raw``, else read afresh from the
        bucket): gc rewrote it without the bodies it removed, so its blocks moved. The entry must be
        the one the log holds (same checksum); whether anything was taken."""
        old = self._src.get(n)
        if old is None:
            return False
        if raw is None:
            if old[0] == "tail":
                self.refresh(force=True)
                return False
            self._forget_cached(old[1])
            raw, _key = self._entry_bytes(n)
            src = old
        e = parse_entry(raw, 0, len(raw), self._cks.get(n - 1, ZERO), 0, n)
        if not isinstance(e, LogEntry) or e.checksum != self._cks.get(n):
            return False  # not the entry this process took in (the chain from its predecessor and its own checksum say so)
        with self._mu:
            self._set_locs(e)
            if src is not None:
                self._src[n] = src
            self._blk_tok = blockcache.token()
        return True

    def _slot_bytes(self, n: int, slot: Any, src: tuple) -> tuple[bytes, tuple]:
        if isinstance(slot, bytes):
            return slot, (("tail", slot) if src[0] == "tail" else src)
        if isinstance(slot, list) and len(slot) == 2 and slot[0] == n and isinstance(slot[1], bytes):
            key = entry_key(n, slot[1])
            return self._immutable(key), ("entry", key)
        raise CorruptLog(self._where(HEAD_KEY), f"entry {n}: malformed slot")

    def _prefetch(self, lo: int, hi: int) -> None:
        """Before a long walk back (a cold open): LIST the chunk keys and GET those covering lo..hi that
        the cache lacks, PREFETCH_THREADS at a time, into the cache (the walk then checks each as
        usual). A key a lost commit left is fetched too and never used."""
        if not self.cache:
            return
        want = []
        for x in self.bucket.list(CHUNK_PREFIX):
            try:
                first, last = chunk_range(x.key)
            except ValueError:
                continue
            path = self._cache_path(x.key)
            if last >= lo and first <= hi and path is not None and not os.path.exists(path):
                want.append(x.key)
        if len(want) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(PREFETCH_THREADS) as pool:
                list(pool.map(self._immutable, want))
            self._from_cache.difference_update(want)

    def _chunk_slots(self, tip: list | None, lo: int, hi: int) -> list:
        """The slots of entries lo..hi, from the chunks walked back from ``tip``."""
        chain: list[tuple[str, Chunk]] = []
        ref = tip
        if tip is not None and (tip[1] - lo) // TAIL_ENTRIES >= PREFETCH_ABOVE:
            path = self._cache_path(chunk_key(*tip))
            if path is not None and not os.path.exists(path) and chunk_key(*tip) not in self._chunks:
                self._prefetch(lo, hi)  # a cold cache (a warm one holds the newest chunk: no LIST)
        while True:
            if ref is None:
                raise CorruptLog(self._where(HEAD_KEY), f"the chunks end before entry {lo}")
            first, last, cks = ref
            key = chunk_key(first, last, cks)
            ch = self._chunk(key, first, last)
            chain.append((key, ch))
            if first <= lo:
                break
            ref = ch.prev
            if ref is not None and (not chunk_ref_ok(ref) or ref[1] != first - 1):
                raise CorruptLog(self._where(key), "it names a chunk that does not end just before it")
        out = []
        for key, ch in reversed(chain):
            for i, slot in enumerate(ch.slots):
                n = ch.first + i
                if lo <= n <= hi:
                    out.append((n, slot, ("chunk", key, i)))
        return out

    def _chunk(self, key: str, first: int, last: int) -> Chunk:
        ch = self._chunks.get(key)
        if ch is not None:
            self._chunks.move_to_end(key)
            return ch
        data = self._immutable(key)
        try:
            ch = chunk_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptLog(self._where(key), f"chunk does not parse: {e}") from None
        if ch.fmt != CHUNK_FMT or ch.first != first or len(ch.slots) != last - first + 1:
            raise CorruptLog(self._where(key), "chunk does not hold the entries its key names")
        self._chunks[key] = ch
        while len(self._chunks) > CHUNK_CACHE:
            self._chunks.popitem(last=False)
        return ch

    def _cache_path(self, key: str) -> str | None:
        # A copy is named with the gc generation it was read under: gc rewrites keys in place (same key,
        # same checksums, fewer bodies), so a copy from before a gc is never read after it.
        return os.path.join(self.cache, "keys", f"g{self._gen}_" + key.replace("/", "_")) if self.cache else None

    def _new_generation(self, gen: int) -> None:
        """gc rewrote keys in place since this process read them: forget every copy (on disk, in memory)
        and every location taken from them, and take the log in again from its first entry."""
        self._gen = gen
        if self.cache:
            keys = os.path.join(self.cache, "keys")
            try:
                for name in os.listdir(keys):
                    if not name.startswith(f"g{gen}_"):
                        os.unlink(os.path.join(keys, name))
            except OSError:
                pass  # copies of an older generation are never read: their names say so
        self.tables = LogState()
        self._src, self._cks = {}, {}
        self._chunks.clear()
        self._last_entry = None
        self._blk_tok = blockcache.token()
        self._fetched.clear()
        self._from_cache.clear()

    def _drop_cached(self) -> bool:
        """Forget every cached copy read since the last drop; whether there was any (worth a retry)."""
        used, self._from_cache = self._from_cache, set()
        for key in used:
            self._forget_cached(key)
        return bool(used)

    def _immutable(self, key: str) -> bytes:
        """An immutable key's bytes: from the local cache when there (the caller checks them: a
        copy that fails its check is dropped and read from the bucket again), else GET."""
        path = self._cache_path(key)
        if path is not None:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                self._from_cache.add(key)
                return data
            except OSError:
                pass
        got = self.bucket.get(key)
        if got is None:
            raise CorruptLog(self._where(key), "missing (HEAD or a chunk names it)")
        self._fetched[key] = blake3.blake3(got.data).digest()
        if path is not None:
            _write_copy(path, got.data)
        return got.data

    def _bucket_bytes(self, key: str) -> bytes | None:
        """A key's bytes as the bucket holds them, for verify: what this process GOT from the bucket
        itself (its cache copy, if it still hashes to what arrived), else a GET; None if absent."""
        want = self._fetched.get(key)
        path = self._cache_path(key)
        if want is not None and path is not None:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                if blake3.blake3(data).digest() == want:
                    return data
            except OSError:
                pass
        got = self.bucket.get(key)
        if got is None:
            return None
        if path is not None and key.startswith(CHUNK_PREFIX):  # kept, as GOT: the next pass over it (verify's walk of
            self._fetched[key] = blake3.blake3(got.data).digest()  # the named keys) reads it here, not again
            _write_copy(path, got.data)
        return got.data

    def _forget_cached(self, key: str) -> None:
        self._fetched.pop(key, None)
        self._chunks.pop(key, None)
        self._blk_tok = blockcache.token()
        if self._last_entry is not None and self._last_entry[0] == key:
            self._last_entry = None
        path = self._cache_path(key)
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _apply(self, e: LogEntry, plan: EntryEffect | None, raw: bytes | None = None) -> str | None:
        t = self.tables
        if plan is None:
            if e.idx is not None or e.rw is not None or e.seal or e.cut is not None:
                return "an S3 log's entries name no segment, index, rewrite or cut"
            got = plan_taken(t, e)
            if isinstance(got, str):
                return got
            held = raw if raw is not None else b""
            bad = deletion_rule(self, e.n, e.objs, e.moves, lambda: entry_bodies(e, 0, lambda oid, loc: block_object(held, loc)), got)
            if bad is not None:
                return bad
            plan = got
        self._set_locs(e)
        t.commit(plan, e.n, e.checksum, e.time)
        return None

    def _set_locs(self, e: LogEntry) -> None:
        locs = self.tables.locs
        bstarts = block_starts(e)
        for oid, otype, length, bi, boff in e.objs:
            if bi == REMOVED:
                locs[oid] = Loc(e.n, 0, 0, COMP_GONE, 0, 0, 0, length, otype)
                continue
            cur = locs.get(oid)
            if cur is not None and cur.entry != e.n and cur.comp != COMP_GONE:
                continue  # stored earlier too (a body put again after gc removed one): the first that has it
            comp, raw, stored = e.blocks[bi][:3]
            locs[oid] = Loc(e.n, 0, bstarts[bi], comp, stored, raw, boff, length, otype)

    def _entry_bytes(self, n: int) -> tuple[bytes, str]:
        src = self._src.get(n)
        if src is None:
            raise ObjectNotFound(f"entry {n}")
        if src[0] == "tail":
            return src[1], HEAD_KEY
        if src[0] == "entry":
            seen = self._last_entry
            if seen is not None and seen[0] == src[1]:
                return seen[1], src[1]
            raw = self._immutable(src[1])
            self._last_entry = (src[1], raw)  # a large entry's objects are read one after another
            return raw, src[1]
        key, i = src[1], src[2]
        first, last = chunk_range(key)
        slot = self._chunk(key, first, last).slots[i]
        raw, _ = self._slot_bytes(n, slot, ("chunk", key, i))
        return raw, key

    def read(self, oid: bytes) -> bytes:
        loc = self.loc(oid)
        if loc is None:
            self.refresh(force=True)
            loc = self.loc(oid)
            if loc is None:
                raise ObjectNotFound(oid.hex())
        assert isinstance(loc, Loc)
        try:
            return self._read_loc(oid, loc)
        except (BodyRemoved, IntegrityError, CorruptLog) as err:
            # A damaged cache copy, or an entry gc rewrote (its blocks moved): read it afresh, once. A removal
            # read from a copy too: gc's form of an entry keeps its checksum, so a copy could be edited into it.
            if isinstance(err, BodyRemoved):
                src = self._src.get(loc.entry)
                if src is None or src[0] == "tail" or src[1] not in self._from_cache:
                    raise
            self._drop_cached()
            if not self._relocate(loc.entry):
                raise
            loc = self.loc(oid)
            assert isinstance(loc, Loc)
            return self._read_loc(oid, loc)

    def _read_loc(self, oid: bytes, loc: Loc) -> bytes:
        if loc.comp == COMP_GONE:
            raise BodyRemoved(oid.hex())
        raw, key = self._entry_bytes(loc.entry)
        where = (self._blk_tok, loc.entry, loc.block_off, loc.comp, loc.stored_len, loc.block_raw)
        block = self._blocks.get(where) if loc.length != loc.block_raw else None  # one alone in its block is never held
        held = block is not None
        if block is None:
            block = self._block(oid, loc, raw, key, where)
        data = block[loc.off : loc.off + loc.length]
        ok = len(data) == loc.length and blake3.blake3(data).digest() == oid
        if not ok and held:  # the block cache holds bytes, not checked objects: the entry's bytes decide
            self._blocks.drop(where)
            data = self._block(oid, loc, raw, key, where)[loc.off : loc.off + loc.length]
            ok = len(data) == loc.length and blake3.blake3(data).digest() == oid
        if not ok:
            raise IntegrityError(oid.hex(), self._where(key), "hash mismatch (content does not match id)")
        return data

    def _block(self, oid: bytes, loc: Loc, raw: bytes, key: str, where: tuple) -> bytes:
        """``loc``'s block out of its entry's bytes ``raw``, decompressed, and held unless the object fills it alone."""
        stored = raw[loc.block_off : loc.block_off + loc.stored_len]
        if len(stored) != loc.stored_len:
            raise IntegrityError(oid.hex(), self._where(key), "block truncated")
        if loc.comp == COMP_ZSTD:
            try:
                block = _decompressor().decompress(stored, max_output_size=loc.block_raw)
            except zstandard.ZstdError as e:
                raise IntegrityError(oid.hex(), self._where(key), f"zstd data corrupt: {e}") from None
        elif loc.comp == COMP_RAW:
            block = stored
        else:
            raise IntegrityError(oid.hex(), self._where(key), f"unknown block compression {loc.comp}")
        if loc.length != loc.block_raw:  # an object alone in its block: no neighbour to serve
            self._blocks.put(where, block)  # the objects of one block are read together (a walk, a listing, a checkpoint's parts)
        return block

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:
        loc = self.loc(oid)
        if not isinstance(loc, Loc) or loc.otype == codec.BLOB or loc.comp == COMP_GONE:
            return None
        raw, key = self._entry_bytes(loc.entry)
        stored = raw[loc.block_off : loc.block_off + loc.stored_len]
        block = _decompressor().decompress(stored, max_output_size=loc.block_raw) if loc.comp == COMP_ZSTD else stored
        return block, loc

    def entries(self) -> Iterator[LogEntry]:
        self.refresh()
        upto = self.tables.pos.entry
        prev = ZERO
        for n in range(1, upto + 1):
            raw, key = self._entry_bytes(n)
            e = parse_entry(raw, 0, len(raw), prev, 0, n)
            if isinstance(e, str):
                raise CorruptLog(self._where(key), f"entry {n}: {e}")
            prev = e.checksum
            yield e

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:
        """Entries 1..upto with their objects, read from the bucket itself (never a cache copy this
        process did not fetch: an auditor proves what every other reader will read): HEAD, then each
        chunk with one GET — or none, when this process GOT it from the bucket at open and its copy
        still hashes to what arrived."""
        got = self.bucket.get(HEAD_KEY)
        if got is None:
            if upto:
                yield ScanProblem("corrupt-entry", self._where(HEAD_KEY), "HEAD is missing")
            return
        try:
            head = self._parse_head(got.data)
        except CorruptLog as err:
            yield ScanProblem("corrupt-entry", self._where(HEAD_KEY), str(err.args[1]))
            return
        refs: list = []  # chunk refs, newest first
        walked: dict[str, Chunk] = {}  # each chunk is read once (the walk back needs its prev link)
        ref = head.chunk
        while ref is not None:
            refs.append(ref)
            if ref[0] == 1:
                break
            key = chunk_key(*ref)
            ch = self._decode_chunk(key, ref, self._bucket_bytes(key))
            if isinstance(ch, str):
                yield ScanProblem("corrupt-entry", self._where(key), ch)
                return
            walked[key] = ch
            ref = ch.prev
            if ref is not None and (not chunk_ref_ok(ref) or ref[1] != refs[-1][0] - 1):
                yield ScanProblem("corrupt-entry", self._where(key), "it names a chunk that does not end just before it")
                return
        prev, n = ZERO, 1
        dec = _decompressor()
        sources: list[tuple[str, int, list]] = []
        for ref in reversed(refs):
            sources.append((chunk_key(*ref), ref[0], []))
        sources.append((HEAD_KEY, head.n - len(head.tail) + 1, list(head.tail)))
        for key, first, slots in sources:
            if n > upto:
                return
            if key != HEAD_KEY:
                ch2 = walked.pop(key, None)
                if ch2 is None:
                    got2 = self._decode_chunk(key, None, self._bucket_bytes(key))
                    if isinstance(got2, str):
                        yield ScanProblem("corrupt-entry", self._where(key), got2)
                        return
                    ch2 = got2
                slots = ch2.slots
            if first != n:
                yield ScanProblem("corrupt-entry", self._where(key), f"it starts at entry {first}, the log before it ends at entry {n - 1}")
                return
            for slot in slots:
                if n > upto:
                    return
                where = key
                if isinstance(slot, bytes):
                    raw = slot
                elif isinstance(slot, list) and len(slot) == 2 and slot[0] == n and isinstance(slot[1], bytes):
                    where = entry_key(n, slot[1])
                    got3 = self._bucket_bytes(where)
                    if got3 is None:
                        yield ScanProblem("corrupt-entry", self._where(where), f"entry {n} is missing")
                        return
                    raw = got3
                else:
                    yield ScanProblem("corrupt-entry", self._where(key), f"entry {n}: malformed slot")
                    return
                e = parse_entry(raw, 0, len(raw), prev, 0, n)
                if isinstance(e, str):
                    yield ScanProblem("corrupt-entry", self._where(where), f"entry {n}: {e}")
                    return
                prev, n = e.checksum, n + 1
                yield ScanEntry(e, objects_of(raw, e, dec), self._where(where))
            named = head.checksum if key == HEAD_KEY else bytes.fromhex(key.rsplit("-", 1)[1])
            if prev != named:
                yield ScanProblem("corrupt-entry", self._where(key), f"its entries chain to {prev.hex()[:16]}, it names {named.hex()[:16]}")
                return

    def _decode_chunk(self, key: str, ref: list | None, data: bytes | None) -> Chunk | str:
        if data is None:
            return "the chunk is missing (HEAD or a later chunk names it)"
        try:
            ch = chunk_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return f"the chunk does not parse: {e}"
        first, last = chunk_range(key)
        if ch.fmt != CHUNK_FMT or ch.first != first or len(ch.slots) != last - first + 1:
            return "the chunk does not hold the entries its key names"
        return ch

    def snapshot(self) -> Position:
        return self.refresh(force=True)

    def anchor(self) -> Position:
        return self.refresh(force=True)

    def close(self) -> None:
        self._blocks.discard({self._blk_tok})  # (blocks of its earlier tokens age out of the cache)
        self.bucket.close()

    # -- the store's marker --------------------------------------------------------------------
    def read_marker(self) -> int | None:
        got = self.bucket.get(MARKER_KEY)
        if got is None:
            return None
        return marker_version(got.data, self._where(MARKER_KEY))

    def mark_version(self, version: int) -> None:
        """Raise the bucket's marker to ``version`` (never lower it), by compare-and-swap."""
        self.refuse_old_format()
        for _ in range(50):
            got = self.bucket.get(MARKER_KEY)
            if got is None:
                raise CorruptLog(self._where(MARKER_KEY), "the store's marker is gone")
            if marker_version(got.data, self._where(MARKER_KEY)) >= version:
                return
            if self.bucket.put_if_match(MARKER_KEY, marker_bytes(version), got.etag) is not None:
                return
        raise Busy(self.bucket.url, 50, 0)
