"""The log on S3-compatible object storage: one HEAD object, immutable chunks, a conditional PUT per commit.

The entries are the local engine's format-3 entries (``engine.build_entry`` / ``parse_entry``), chained
by the same checksum and checked against the same tables root; only where they live differs:

- ``HEAD`` holds the log's position (entry number, checksum) and its newest entries inline (at most
  ``TAIL_ENTRIES`` and ``INLINE_BYTES``), and names the newest chunk. It never grows with history.
- ``chunk/<first>-<last>-<checksum of last>`` holds a run of older entries and names the chunk before
  it. Every racer computes the same key and the same bytes for a chunk (it holds committed entries
  only), so writing it is a plain PUT, and the checksum in its key makes any cached copy safe.
- ``entry/<n>-<checksum>`` holds one entry too large to sit inline (written before the HEAD swap that
  names it; invisible until then).

A commit is exactly one ``PUT HEAD If-Match: <etag>`` (plus a chunk or entry PUT first when the tail
is full or the entry large). A failed precondition is decided by content: HEAD is read again, and if
our entry (its checksum at its number) is there, the commit landed; if HEAD did not change, the 412
was false and the same PUT is retried; otherwise the foreign entries are taken in, and the commit is
rebuilt on the new head when every ref it read or moves still holds what it held (else ``Conflict``).
Retries are bounded in time with jittered backoff, then ``Busy``.

Readers revalidate HEAD with ``If-None-Match`` (a 304 is one cheap request) and never trust a cached
HEAD; chunks and large entries are cached on local disk by key and checked on use (their entries
parse and chain to the checksum the key names).
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import blake3
import msgspec
import zstandard

from ...errors import BodyRemoved, Busy, CorruptLog, IntegrityError, MultiLogBatch, ObjectNotFound, Refused, StaleBase
from .. import codec, runrefs
from .bucket import NOT_MODIFIED, Bucket
from ..engine import (
    COMP_GONE,
    COMP_RAW,
    COMP_ZSTD,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    ENTRY_TRAILER,
    MIN_COMPRESS,
    REMOVED,
    ZERO,
    Engine,
    Entry,
    LargeBlob,
    Loc,
    Plan,
    Position,
    ScanEntry,
    ScanProblem,
    Tables,
    Txn,
    _compressor,
    _decompressor,
    _show,
    block_starts,
    build_entry,
    deletion_rule,
    entry_bodies,
    parse_entry,
    plan_taken,
    txn_bodies,
)

HEAD_KEY = "HEAD"
MARKER_KEY = "OBJSTORE"
CHUNK_PREFIX = "chunk/"
ENTRY_PREFIX = "entry/"
TAIL_ENTRIES = 16
INLINE_BYTES = 64 << 10
BUSY_SECONDS = float(os.environ.get("OBJSTORE_S3_BUSY_SECONDS", "30"))  # how long a commit retries before Busy
# How stale a read may be: 0 (the default) revalidates HEAD at every refresh (one conditional GET, a 304 when
# nothing changed), so a process sees every commit made before its read, as on disk. A short-lived reader (a CLI
# command) may read as of its start instead (Ctx.log sets a window).
FRESH_SECONDS = float(os.environ.get("OBJSTORE_S3_FRESH_MS", "0")) / 1000
CHUNK_CACHE = 64  # decoded chunks kept in memory
PREFETCH_ABOVE = 8  # a walk back over more chunks than this LISTs them and GETs them in parallel first
PREFETCH_THREADS = 8
SKIPPED_KEEP = 1024
SKIPPED_BYTES = 64 << 20
GC_SETTLE_SECONDS = float(os.environ.get("OBJSTORE_S3_GC_SETTLE_SECONDS", "0.5"))  # gc reads what it rewrote back after this

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()
_meta_enc = msgspec.msgpack.Encoder(order="sorted")  # an entry's meta, as engine.build_entry encodes it
_meta_dec = msgspec.msgpack.Decoder()


class Head(msgspec.Struct, array_like=True, frozen=True):
    """HEAD: format tag, entry count, checksum of the last entry, the newest chunk, the inline tail, and the gc
    generation (how many gc runs rewrote keys in place; omitted while 0)."""

    fmt: str
    n: int
    checksum: bytes
    chunk: list | None  # [first, last, checksum] of the newest chunk
    tail: list  # slots of entries chunk.last+1 .. n: entry bytes, or [n, checksum] of an entry/ key
    gc: int = 0


class Chunk(msgspec.Struct, array_like=True, frozen=True):
    fmt: str
    prev: list | None
    first: int
    slots: list


_head_dec = msgspec.msgpack.Decoder(Head)
_chunk_dec = msgspec.msgpack.Decoder(Chunk)
HEAD_FMT = "objstore-s3-head-1"
CHUNK_FMT = "objstore-s3-chunk-1"


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


def encode_head(h: Head) -> bytes:
    """HEAD's bytes: five elements while no gc rewrote anything (the layout before the gc generation), six after."""
    fields: list = [h.fmt, h.n, h.checksum, h.chunk, h.tail]
    if h.gc:
        fields.append(h.gc)
    return _enc.encode(fields)


def chunk_key(first: int, last: int, checksum: bytes) -> str:
    return f"{CHUNK_PREFIX}{first:012d}-{last:012d}-{checksum.hex()}"


def entry_key(n: int, checksum: bytes) -> str:
    return f"{ENTRY_PREFIX}{n:012d}-{checksum.hex()}"


class S3Txn(Txn):
    """A Txn that remembers what it read, so a commit rebuilt on a newer head is checked against it."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.seen: dict[str, Any] = {}
        self.seen_prefixes: dict[str, dict] = {}
        self.skipped: dict[bytes, tuple] = {}  # id -> (type, canonical) of puts left out as stored already

    def watch(self, name: str, value: Any, prefix: bool = False) -> None:
        """Add a ref (or, with ``prefix``, every ref under a prefix: {name: value}) this commit's
        decision was taken on to its read set, as a ``read_ref`` would."""
        if prefix:
            self.seen_prefixes.setdefault(name, dict(value))
        else:
            self.seen.setdefault(name, value)

    def put(self, oid: bytes, otype: str, canonical: bytes | LargeBlob, value: dict | None = None) -> None:
        loc = self.engine.tables.locs.get(oid)
        if loc is not None and loc.comp != COMP_GONE and oid not in self.objects:
            # stored already, so left out of the entry; kept here in case gc removes that body before this
            # commit lands (the commit, rebuilt after gc's HEAD swap, then stores it again)
            self.skipped[oid] = (otype, canonical)
            keep = getattr(self.engine, "recently_skipped", None)
            if keep is not None and otype == codec.BLOB and isinstance(canonical, bytes):
                keep(oid, canonical)
        super().put(oid, otype, canonical, value)

    def read_ref(self, name: str) -> bytes | str | None:
        m = self.moves.get(name)
        if m is not None:
            return m[1]
        v = self.engine.tables.refs.get(name)
        self.seen.setdefault(name, v)
        return v


class S3Engine(Engine):
    """The Engine interface over a ``Bucket``; ``cache`` is a local directory for immutable keys."""

    retry_seconds = BUSY_SECONDS  # Store.atomically re-runs a stale self-contained commit this long
    one_log_per_commit = True  # a commit's ref moves touch one run's log (MultiLogBatch otherwise)
    fresh_seconds = FRESH_SECONDS

    def __init__(self, bucket: Bucket, cache: str | None = None) -> None:
        self.bucket = bucket
        self.cache = cache
        self.tables = Tables()
        self._mu = threading.RLock()
        self._wlock = threading.Lock()
        self._etag: str | None = None
        self._head: Head | None = None
        self._checked = 0.0
        self._src: dict[int, tuple] = {}  # entry -> ("tail", bytes) | ("chunk", key, slot index) | ("entry", key)
        self._chunks: OrderedDict[str, Chunk] = OrderedDict()
        self._last_entry: tuple[str, bytes] | None = None  # the entry/ key read last, and its bytes
        self._last_block: tuple[tuple, bytes] | None = None  # (entry, offset, length) of the structured block read last, decompressed
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
        if cache:
            os.makedirs(os.path.join(cache, "keys"), exist_ok=True)
            try:  # the HEAD this cache saw last, with its ETag: revalidated at open (a 304), never trusted unasked
                with open(os.path.join(cache, "HEAD"), "rb") as f:
                    tag, _, body = f.read().partition(b"\n")
                # A 304 says the server's HEAD still has this ETag; the copy is believed only if it is the
                # bytes that ETag names (an S3 ETag of a plain PUT is their MD5), so an edited copy is not.
                if hashlib.md5(body, usedforsecurity=False).hexdigest() == tag.decode("ascii"):
                    self._etag, self._cached_head = tag.decode("ascii"), body
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
                return self.tables.pos
            if got is NOT_MODIFIED:
                if self._head is None and self._cached_head is not None:  # the cached copy, now revalidated
                    head = self._parse_head(self._cached_head)
                    self._take_checked(head)
                    self._head, self._cached_head, self.head_unchanged = head, None, True
                return self.tables.pos
            head = self._parse_head(got.data)
            self._take_checked(head)
            self._head, self._etag = head, got.etag
            self._keep_head(got)
            return self.tables.pos

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
            head = _head_dec.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptLog(self._where(HEAD_KEY), f"HEAD does not parse: {e}") from None
        if head.fmt != HEAD_FMT or head.n < 0 or len(head.checksum) != 32 or len(head.tail) > head.n:
            raise CorruptLog(self._where(HEAD_KEY), "HEAD is not an objstore S3 head")
        if head.chunk is not None and not _chunk_ref_ok(head.chunk):
            raise CorruptLog(self._where(HEAD_KEY), "HEAD names a malformed chunk")
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
            e = parse_entry(raw, 0, len(raw), t.pos.checksum, 0, n, True)
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
        e = parse_entry(raw, 0, len(raw), self._cks.get(n - 1, ZERO), 0, n, True)
        if not isinstance(e, Entry) or e.checksum != self._cks.get(n):
            return False  # not the entry this process took in (the chain from its predecessor and its own checksum say so)
        with self._mu:
            self._set_locs(e)
            if src is not None:
                self._src[n] = src
            self._last_block = None
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
                first, last = _chunk_range(x.key)
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
            if ref is not None and (not _chunk_ref_ok(ref) or ref[1] != first - 1):
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
            ch = _chunk_dec.decode(data)
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
        self.tables = Tables()
        self._src, self._cks = {}, {}
        self._chunks.clear()
        self._last_entry = self._last_block = None
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
        return None if got is None else got.data

    def _forget_cached(self, key: str) -> None:
        self._fetched.pop(key, None)
        self._chunks.pop(key, None)
        self._last_block = None
        if self._last_entry is not None and self._last_entry[0] == key:
            self._last_entry = None
        path = self._cache_path(key)
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _apply(self, e: Entry, plan: Plan | None, raw: bytes | None = None) -> str | None:
        t = self.tables
        if plan is None:
            if e.idx is not None or e.rw is not None or e.seal or e.cut is not None:
                return "an S3 log's entries name no segment, index, rewrite or cut"
            got = plan_taken(t, e)
            if isinstance(got, str):
                return got
            held = raw if raw is not None else b""
            bad = deletion_rule(self, e.n, e.objs, e.moves, lambda: entry_bodies(e, 0, lambda oid, loc: _block_object(held, loc)), got)
            if bad is not None:
                return bad
            plan = got
        self._set_locs(e)
        t.commit(plan, e.n, e.checksum, e.time)
        return None

    def _set_locs(self, e: Entry) -> None:
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
        first, last = _chunk_range(key)
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
        where = (loc.entry, loc.block_off, loc.stored_len)
        cached = self._last_block
        if cached is not None and cached[0] == where:
            block = cached[1]
        else:
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
            if loc.otype != codec.BLOB:
                self._last_block = (where, block)  # records of one block are read together (a walk, a listing)
        data = block[loc.off : loc.off + loc.length]
        if len(data) != loc.length or blake3.blake3(data).digest() != oid:
            raise IntegrityError(oid.hex(), self._where(key), "hash mismatch (content does not match id)")
        return data

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:
        loc = self.loc(oid)
        if not isinstance(loc, Loc) or loc.otype == codec.BLOB or loc.comp == COMP_GONE:
            return None
        raw, key = self._entry_bytes(loc.entry)
        stored = raw[loc.block_off : loc.block_off + loc.stored_len]
        block = _decompressor().decompress(stored, max_output_size=loc.block_raw) if loc.comp == COMP_ZSTD else stored
        return block, loc

    def entries(self) -> Iterator[Entry]:
        self.refresh()
        upto = self.tables.pos.entry
        prev = ZERO
        for n in range(1, upto + 1):
            raw, key = self._entry_bytes(n)
            e = parse_entry(raw, 0, len(raw), prev, 0, n, True)
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
            if ref is not None and (not _chunk_ref_ok(ref) or ref[1] != refs[-1][0] - 1):
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
                e = parse_entry(raw, 0, len(raw), prev, 0, n, True)
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
            ch = _chunk_dec.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return f"the chunk does not parse: {e}"
        first, last = _chunk_range(key)
        if ch.fmt != CHUNK_FMT or ch.first != first or len(ch.slots) != last - first + 1:
            return "the chunk does not hold the entries its key names"
        return ch

    def snapshot(self) -> Position:
        return self.refresh(force=True)

    def anchor(self) -> Position:
        return self.refresh(force=True)

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Txn]:
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            from ...errors import LockTimeout
            raise LockTimeout("this process's S3 writer lock", timeout)
        try:
            if self._head is None or self.damaged is not None:
                self.refresh(force=True)  # optimistic otherwise: a stale head costs a 412, not a request per commit
            txn = S3Txn(self)
            try:
                yield txn
                moves = txn.ref_moves()
                if txn.objects or moves:
                    runs = sorted({r for m in moves if (r := _run_of_ref(m[0])) is not None})
                    if len(runs) > 1:
                        raise MultiLogBatch(f"{len(runs)} runs", ", ".join(runs[:3]) + (", …" if len(runs) > 3 else ""))
                    self._commit(txn, moves)
            finally:
                for spill in txn.spills:
                    spill.discard()
        finally:
            self._wlock.release()

    def _commit(self, txn: S3Txn, moves: list) -> None:
        deadline = time.monotonic() + BUSY_SECONDS
        when = time.time() if txn.when is None else float(txn.when)
        objects_all = [(oid, otype, c.read_all() if isinstance(c, LargeBlob) else c) for oid, (otype, c) in txn.objects.items()]
        delay = 0.004
        attempts = 0
        moved = False
        while True:
            attempts += 1
            with self._mu:
                t = self.tables
                objects = [o for o in objects_all if o[0] not in t.locs]
                skipped = dict(txn.skipped)
                for f in txn.facts.values():  # blobs the records name, put (and left out) by an earlier commit
                    for ref in f[5] if len(f) > 5 and isinstance(f[5], list) else ():
                        if ref not in skipped and (got := self._skipped.get(ref)) is not None:
                            skipped[ref] = (codec.BLOB, got)
                for oid, (otype, canon) in skipped.items():
                    loc = t.locs.get(oid)
                    if (loc is None or loc.comp == COMP_GONE) and otype != codec.RECORD and oid not in txn.objects:
                        data = canon.read_all() if isinstance(canon, LargeBlob) else canon
                        objects.append((oid, otype, data))  # its body went (gc) while this commit was built
                n = t.pos.entry + 1
                plan = t.plan(n, [(o[0], o[1]) for o in objects], txn.facts, moves, None)
                if isinstance(plan, str):
                    raise Refused(plan)
                bad = deletion_rule(self, n, objects, moves, lambda objects=objects: txn_bodies({o[0]: (o[1], o[2]) for o in objects}), plan)
                if bad is not None:
                    raise Refused(bad)
                raw, e = build_entry(t.pos.checksum, n, max(when, t.last_time or 0.0), objects, moves, None, facts=txn.facts, root=plan.root)
                assert isinstance(raw, bytes)
                head, etag = self._head, self._etag
            new_head, pre = self._next_head(head, n, raw, e.checksum)
            for key, data in pre:
                if key.startswith(CHUNK_PREFIX):
                    self._put_chunk(key, data)
                else:
                    self.bucket.put(key, data)
            body = encode_head(new_head)
            if etag is None:
                new_etag = self.bucket.put_if_absent(HEAD_KEY, body)
            else:
                new_etag = self.bucket.put_if_match(HEAD_KEY, body, etag)
            with self._mu:
                if new_etag is not None:
                    if self.tables.pos.entry == n - 1 and self._etag == etag:
                        self._apply(e, plan)
                        self._src[n] = self._src_of(new_head, n)
                        self._cks[n] = e.checksum
                        self._retail(new_head)
                        self._head, self._etag, self._checked = new_head, new_etag, time.monotonic()
                        return
                    self.refresh(force=True)  # a reader thread moved us meanwhile: take it in from HEAD
                    return
                # 412 (or 404): decided by content
                self.refresh(force=True)
                landed = self._landed(n, e.checksum)
                if landed:
                    return
                moved = self._etag != etag
                if moved:
                    self._check_still(txn, moves)
            if time.monotonic() >= deadline:
                raise Busy(self.bucket.url, attempts, BUSY_SECONDS)
            if moved and attempts <= 8:
                # another writer's entry landed and ours is rebuilt on it: sending at once is what makes the
                # next swap ours (a backoff here hands HEAD back to whoever just won); a little jitter keeps
                # the losers from arriving together
                time.sleep(random.random() * 0.002)
            else:  # a false 412 (HEAD unchanged), or a long losing streak: back off
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.1)

    def recently_skipped(self, oid: bytes, canonical: bytes) -> None:
        """Remember a blob a put left out as stored: a record naming it may commit after gc removed that
        body, and is then rebuilt with these bytes (bounded: SKIPPED_KEEP blobs, SKIPPED_BYTES)."""
        if len(canonical) > SKIPPED_BYTES // 4:
            return
        with self._mu:
            self._skipped[oid] = canonical
            self._skipped.move_to_end(oid)
            self._skipped_bytes += len(canonical)
            while len(self._skipped) > SKIPPED_KEEP or self._skipped_bytes > SKIPPED_BYTES:
                _o, old = self._skipped.popitem(last=False)
                self._skipped_bytes -= len(old)

    def _put_chunk(self, key: str, data: bytes) -> None:
        """Create a chunk once. Every writer rolling the same tail computes the same key; the copy there
        may differ from ours only by bodies gc removed (from the tail, or from the chunk in place), so
        the two are merged entry by entry keeping the form with fewer bodies, by compare-and-swap:
        a removed body never comes back, and a body nothing removed is never lost."""
        if self.bucket.put_if_absent(key, data) is not None:
            return
        for _ in range(20):
            got = self.bucket.get(key)
            if got is None:
                if self.bucket.put_if_absent(key, data) is not None:
                    return
                continue
            if got.data == data:
                return
            merged = _merge_chunks(got.data, data)
            if merged is None or merged == got.data:
                return  # not a chunk of the same entries (verify names it), or ours adds nothing
            if self.bucket.put_if_match(key, merged, got.etag) is not None:
                return
        raise Busy(self.bucket.url, 20, 0)

    def _landed(self, n: int, checksum: bytes) -> bool:
        """Whether our entry ``n`` (``checksum``) is in the log now (a PUT whose answer was lost
        or a 412 after it landed). Entries taken in were parsed and chained, so the checksum in an
        applied entry's trailer is the one its content gives."""
        if self.tables.pos.entry < n:
            return False
        try:
            raw, _ = self._entry_bytes(n)
        except (ObjectNotFound, CorruptLog):
            return False
        return raw[-32:] == checksum

    def _check_still(self, txn: S3Txn, moves: list) -> None:
        """The foreign entries left every ref this commit read or moves as it was, else Conflict."""
        refs = self.tables.refs
        for name, old, _new, _reason in moves:
            if refs.get(name) != old:
                raise StaleBase(name, _show(old), _show(refs.get(name)))
        for name, old in txn.seen.items():
            if name not in txn.moves and refs.get(name) != old:
                raise StaleBase(name, _show(old), _show(refs.get(name)))
        for prefix, items in txn.seen_prefixes.items():
            run = _run_of_ref(prefix)
            now = {k: v for k, v in (self.tables.run_refs.get(run, {}) if run is not None else refs).items() if k.startswith(prefix)}
            for k in set(now) | set(items):
                if k not in txn.moves and now.get(k) != items.get(k):
                    raise StaleBase(k, _show(items.get(k)), _show(now.get(k)))

    def _next_head(self, head: Head | None, n: int, raw: bytes, checksum: bytes) -> tuple[Head, list]:
        pre: list[tuple[str, bytes]] = []
        if len(raw) > INLINE_BYTES:
            pre.append((entry_key(n, checksum), raw))
            slot: Any = [n, checksum]
        else:
            slot = raw
        if head is None:
            return Head(HEAD_FMT, n, checksum, None, [slot]), pre
        tail = list(head.tail)
        size = sum(len(s) if isinstance(s, bytes) else 48 for s in tail) + (len(slot) if isinstance(slot, bytes) else 48)
        if len(tail) + 1 > TAIL_ENTRIES or size > INLINE_BYTES:
            first = head.n - len(tail) + 1
            if tail:
                ch = Chunk(CHUNK_FMT, head.chunk, first, tail)
                pre.insert(0, (chunk_key(first, head.n, head.checksum), _enc.encode(ch)))
                return Head(HEAD_FMT, n, checksum, [first, head.n, head.checksum], [slot], head.gc), pre
        tail.append(slot)
        return Head(HEAD_FMT, n, checksum, head.chunk, tail, head.gc), pre

    def _src_of(self, head: Head, n: int) -> tuple:
        slot = head.tail[-1]
        return ("tail", slot) if isinstance(slot, bytes) else ("entry", entry_key(n, slot[1]))

    def _retail(self, head: Head) -> None:
        """After our own swap: entries that left the inline tail are now in the chunk HEAD names."""
        if head.chunk is None:
            return
        first, last, _c = head.chunk
        key = chunk_key(*head.chunk)
        for i, n in enumerate(range(first, last + 1)):
            src = self._src.get(n)
            if src is not None and src[0] == "tail":
                self._src[n] = ("chunk", key, i)

    def close(self) -> None:
        self.bucket.close()

    # -- gc: bodies recorded deletions name, keys no entry names --------------------------------
    def remove_bodies(self, gone: set) -> tuple[dict, dict]:
        """Rewrite every chunk, entry key and HEAD tail slot that stores a body of ``gone`` without it:
        the same entries (same checksums, so anchors hold), their blocks laid again. Chunks and entry
        keys are PUT again under their keys; HEAD by compare-and-swap (retried on the newer HEAD).
        Then, after GC_SETTLE_SECONDS, every key written is read back and stripped again if a writer
        that was rolling a stale HEAD's tail into that chunk PUT its old bytes over ours meanwhile.
        Returns ({id: type} removed, {id: bytes} of the removed blobs)."""
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
                new_head = Head(HEAD_FMT, head.n, head.checksum, head.chunk, slots, head.gc)
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
            new = Head(HEAD_FMT, head.n, head.checksum, head.chunk, list(head.tail), head.gc + 1)
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
        first, _last = _chunk_range(key)
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
        self.bucket.put(key, _enc.encode(Chunk(CHUNK_FMT, ch.prev, ch.first, slots)))
        self._forget_cached(key)
        for n in sorted(set(ns)):
            if isinstance(slots[n - first], bytes):
                self._relocate(n, slots[n - first], ("chunk", key, n - first))
        return True

    def _stripped(self, n: int, raw: bytes, gone: set, removed: dict, blobs: dict) -> bytes | None:
        e = parse_entry(raw, 0, len(raw), self._cks.get(n - 1, ZERO), 0, n, True)
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
            got = self.bucket.get(key)
            ch = self._decode_chunk(key, None, got.data if got is not None else None)
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
                    first, last = _chunk_range(x.key)
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

    # -- the store's marker --------------------------------------------------------------------
    def read_marker(self) -> int | None:
        got = self.bucket.get(MARKER_KEY)
        if got is None:
            return None
        return marker_version(got.data, self._where(MARKER_KEY))

    def mark_version(self, version: int) -> None:
        """Raise the bucket's marker to ``version`` (never lower it), by compare-and-swap."""
        for _ in range(50):
            got = self.bucket.get(MARKER_KEY)
            if got is None:
                raise CorruptLog(self._where(MARKER_KEY), "the store's marker is gone")
            if marker_version(got.data, self._where(MARKER_KEY)) >= version:
                return
            if self.bucket.put_if_match(MARKER_KEY, marker_bytes(version), got.etag) is not None:
                return
        raise Busy(self.bucket.url, 50, 0)


def marker_bytes(version: int) -> bytes:
    import json
    return json.dumps({"format": "objstore", "version": version, "engine": "s3"}).encode() + b"\n"


def marker_version(data: bytes, where: str) -> int:
    import json
    try:
        meta = json.loads(data)
        version = meta.get("version") if isinstance(meta, dict) else None
    except ValueError:
        meta, version = None, None
    if not isinstance(meta, dict) or meta.get("format") != "objstore" or type(version) is not int:
        from ...errors import StoreFormatError
        raise StoreFormatError(where, "not an objstore marker")
    return version


def _removed_rows(raw: bytes) -> int:
    """How many of an entry's object rows name a body gc removed (-1 if its meta does not decode)."""
    try:
        _magic, mlen, _dlen = ENTRY_HEAD.unpack_from(raw, 0)
        objs = _meta_dec.decode(raw[ENTRY_HEAD.size : ENTRY_HEAD.size + mlen])["objs"]
        return sum(1 for o in objs if o[3] == REMOVED)
    except (struct.error, msgspec.DecodeError, KeyError, TypeError, IndexError):
        return -1


def _merge_chunks(a: bytes, b: bytes) -> bytes | None:
    """Two copies of one chunk (the same entries, perhaps with other bodies removed), merged slot by
    slot into the one with the most rows removed; None if they are not copies of one chunk."""
    try:
        ca, cb = _chunk_dec.decode(a), _chunk_dec.decode(b)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if (ca.fmt, ca.prev, ca.first, len(ca.slots)) != (cb.fmt, cb.prev, cb.first, len(cb.slots)):
        return None
    slots = []
    for x, y in zip(ca.slots, cb.slots, strict=True):
        if x == y or not (isinstance(x, bytes) and isinstance(y, bytes)):
            slots.append(x)
            continue
        if x[-32:] != y[-32:]:
            return None  # other entries, not other forms of one
        slots.append(y if _removed_rows(y) > _removed_rows(x) else x)  # readers check the chain of what is kept
    return _enc.encode(Chunk(ca.fmt, ca.prev, ca.first, slots))


def _block_object(raw: bytes, loc: Loc) -> bytes:
    """One object of an entry from the entry's bytes (hash-checked by the caller)."""
    stored = raw[loc.block_off : loc.block_off + loc.stored_len]
    block = _decompressor().decompress(stored, max_output_size=loc.block_raw) if loc.comp == COMP_ZSTD else stored
    return block[loc.off : loc.off + loc.length]


def objects_of(raw: bytes, e: Entry, dec: Any = None) -> list:
    """(id, type, canonical bytes | IntegrityError | BodyRemoved) of an entry's objects, from its bytes."""
    dec = dec or _decompressor()
    blocks: list[Any] = []
    starts = block_starts(e)
    for bi, (comp, raw_len, stored_len) in enumerate(e.blocks):
        stored = raw[starts[bi] : starts[bi] + stored_len]
        if len(stored) != stored_len:
            blocks.append("block truncated")
        elif comp == COMP_ZSTD:
            try:
                got = dec.decompress(stored, max_output_size=raw_len)
                blocks.append(got if len(got) == raw_len else "block decompresses to the wrong size")
            except zstandard.ZstdError as err:
                blocks.append(f"zstd data corrupt: {err}")
        else:
            blocks.append(stored)
    out: list = []
    for oid, otype, length, bi, off in e.objs:
        if bi == REMOVED:
            out.append((oid, otype, BodyRemoved(oid.hex())))
            continue
        b = blocks[bi]
        out.append((oid, otype, IntegrityError(oid.hex(), "", b) if isinstance(b, str) else b[off : off + length]))
    return out


def strip_entry(raw: bytes, e: Entry, gone: set) -> tuple[bytes, dict] | None:
    """The entry's bytes without the bodies of ``gone`` (their rows kept, block REMOVED: the logical
    checksum covers ids, types and lengths, not blocks, so it is unchanged), and {id: (type, bytes)}
    of what was removed; None when it stores none of them."""
    objs = objects_of(raw, e)
    if not any(row[0] in gone and row[3] != REMOVED for row in e.objs):
        return None
    rows = [list(r) for r in e.objs]
    per_block: dict[int, list] = {}
    removed: dict = {}
    for i, (row, (oid, otype, data)) in enumerate(zip(e.objs, objs, strict=True)):
        if row[3] == REMOVED:
            continue
        if isinstance(data, (IntegrityError, BodyRemoved)):
            raise IntegrityError(oid.hex(), "", f"entry {e.n}: {data}")
        if oid in gone:
            removed[oid] = (otype, bytes(data))
            rows[i] = [oid, otype, row[2], REMOVED, 0]
        else:
            per_block.setdefault(row[3], []).append((i, bytes(data)))
    blocks: list = []
    data_parts: list = []
    for bi in sorted(per_block):
        members = per_block[bi]
        block = b"".join(d for _i, d in members)
        comp, stored = COMP_RAW, block
        if e.blocks[bi][0] == COMP_ZSTD and len(block) >= MIN_COMPRESS:
            z = _compressor().compress(block)
            if len(z) < len(block) - 16:
                comp, stored = COMP_ZSTD, z
        off = 0
        for i, d in members:
            rows[i][3], rows[i][4] = len(blocks), off
            off += len(d)
        blocks.append([comp, len(block), len(stored)])
        data_parts.append(stored)
    _magic, mlen, _dlen = ENTRY_HEAD.unpack_from(raw, 0)
    meta = _meta_dec.decode(raw[ENTRY_HEAD.size : ENTRY_HEAD.size + mlen])
    meta["objs"], meta["blocks"] = rows, blocks
    mb = _meta_enc.encode(meta)
    dlen = sum(len(d) for d in data_parts)
    length = ENTRY_HEAD.size + len(mb) + dlen + ENTRY_TRAILER.size
    new = b"".join((ENTRY_HEAD.pack(ENTRY_MAGIC, len(mb), dlen), mb, *data_parts, ENTRY_TRAILER.pack(length, e.checksum)))
    return new, removed


def _run_of_ref(name: str) -> str | None:
    """The run whose log a ref belongs to (None: the store log's)."""
    if name.startswith(runrefs.RUN_PREFIX):
        return name[len(runrefs.RUN_PREFIX):].split("/", 1)[0]
    return None


def _chunk_ref_ok(ref: Any) -> bool:
    return (isinstance(ref, list) and len(ref) == 3 and type(ref[0]) is int and type(ref[1]) is int
            and isinstance(ref[2], bytes) and len(ref[2]) == 32 and 1 <= ref[0] <= ref[1])


def _chunk_range(key: str) -> tuple[int, int]:
    a, b, _c = key[len(CHUNK_PREFIX):].split("-")
    return int(a), int(b)


__all__ = ["S3Engine", "HEAD_KEY", "MARKER_KEY"]
