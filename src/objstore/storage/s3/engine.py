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

A writer's **lease** (``take_lease``): a batch whose body reads refs and decides (``Store.batch`` in a caller's
hands) first takes its log's lease — ``[epoch + 1, its holder id]`` written into HEAD by one compare-and-swap —
and its commit's swap gives it back (``[epoch, b""]``), so no other process commits to the log between the
batch's reads and its entry: the batch never meets ``StaleBase``, as under a log's lock on disk. A commit that
holds no lease (a self-contained append, re-run on ``StaleBase`` by ``Store.atomically``) waits while another's
lease is held, so appends queue behind a batch instead of racing it. A lease lapses when its HEAD has not changed
for ``LEASE_SECONDS`` as the waiter's own clock measures (no clocks are compared between machines): a killed
holder costs the next writer that long, once; a later commit takes the log over with the next epoch, and the
lapsed holder's swap then fails on HEAD's ETag and is rebuilt (or refused by ``StaleBase``) like any stale commit.

Readers revalidate HEAD and check every cached copy on use (``reader``).

Here: the commit (``S3Txn``, ``S3Engine.transaction``) and ``S3Engine``, which stands on the reader
(``reader``) and gc's rewrites (``gc``); ``layout`` has the bytes of each key, ``entries`` an entry's objects.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from ...errors import Busy, CorruptLog, MultiLogBatch, ObjectNotFound, Refused, StaleBase
from .. import codec, runrefs
from ..log.engine import deletion_rule, txn_bodies
from ..log.entry import LargeBlob, build_entry
from ..log.format import COMP_GONE, ZERO, _show
from ..log.txn import Txn
from .entries import merge_chunks
from .gc import BodyRemoval
from .layout import (
    CHUNK_FMT,
    CHUNK_PREFIX,
    HEAD_FMT,
    HEAD_KEY,
    INLINE_BYTES,
    TAIL_ENTRIES,
    Chunk,
    Head,
    chunk_key,
    encode_head,
    encoder,
    entry_key,
)

BUSY_SECONDS = float(os.environ.get("OBJSTORE_S3_BUSY_SECONDS", "30"))  # how long a commit retries before Busy
LEASE_SECONDS = float(os.environ.get("OBJSTORE_S3_LEASE_SECONDS", "10"))  # an unchanged HEAD's lease lapses after this
FREE = b""  # the holder of a lease nobody holds
_WAIT = object()  # (_lease_for: another's lease is live)
SKIPPED_KEEP = 1024
SKIPPED_BYTES = 64 << 20


class S3Txn(Txn):
    """A Txn that remembers what it read, so a commit rebuilt on a newer head is checked against it."""

    def __init__(self, engine: S3Engine) -> None:
        super().__init__(engine)
        self.s3 = engine  # self.engine as what it is: remembering skipped blobs is the S3 engine's own
        self.seen: dict[str, Any] = {}
        self.seen_prefixes: dict[str, dict] = {}
        self.skipped: dict[bytes, tuple] = {}  # id -> (type, canonical) of puts left out as stored already
        self.leased = False  # this commit holds its log's lease (take_lease): its swap gives it back

    def hold_log(self, timeout: float | None) -> None:
        self.s3.take_lease(self, timeout)

    def watch(self, name: str, value: Any, prefix: bool = False) -> None:
        """Add a ref (or, with ``prefix``, every ref under a prefix: {name: value}) this commit's
        decision was taken on to its read set, as a ``read_ref`` would."""
        if prefix:
            self.seen_prefixes.setdefault(name, dict(value))
        else:
            self.seen.setdefault(name, value)

    def put(self, oid: bytes, otype: str, canonical: bytes | LargeBlob, value: dict | None = None, facts: list | None = None) -> None:
        loc = self.engine.tables.locs.get(oid)
        if loc is not None and loc.comp != COMP_GONE and oid not in self.objects:
            # stored already, so left out of the entry; kept here in case gc removes that body before this
            # commit lands (the commit, rebuilt after gc's HEAD swap, then stores it again)
            self.skipped[oid] = (otype, canonical)
            if otype == codec.BLOB and isinstance(canonical, bytes):
                self.s3.recently_skipped(oid, canonical)
        super().put(oid, otype, canonical, value, facts)

    def read_ref(self, name: str) -> bytes | str | None:
        m = self.moves.get(name)
        if m is not None:
            return m[1]
        v = self.engine.tables.refs.get(name)
        self.seen.setdefault(name, v)
        return v


class S3Engine(BodyRemoval):
    """The Engine interface over a ``Bucket``; ``cache`` is a local directory for immutable keys."""

    retry_seconds = BUSY_SECONDS  # Store.atomically re-runs a stale self-contained commit this long
    one_log_per_commit = True  # a commit's ref moves touch one run's log (MultiLogBatch otherwise)

    # -- writing ---------------------------------------------------------------------------
    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Txn]:
        self.refuse_old_format()
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            from ...errors import LockTimeout
            raise LockTimeout("this process's S3 writer lock", timeout)
        try:
            if self._head is None or self.damaged is not None:
                self.refresh(force=True)  # optimistic otherwise: a stale head costs a 412, not a request per commit
            txn = S3Txn(self)
            stale = False
            try:
                yield txn
                moves = txn.ref_moves()
                if txn.objects or moves:
                    runs = sorted({r for m in moves if (r := _run_of_ref(m[0])) is not None})
                    if len(runs) > 1:
                        raise MultiLogBatch(f"{len(runs)} runs", ", ".join(runs[:3]) + (", …" if len(runs) > 3 else ""))
                    self._commit(txn, moves)
            except StaleBase:
                stale = True  # a self-contained commit is run again at once: a lease handed to it is kept for that
                if not txn.leased:
                    self._hold_for_rerun()
                raise
            finally:
                # not given back by a commit (nothing to commit, or it raised): a batch's own, or one handed to this
                # engine while its append queued (kept across the re-run of a stale append, which gives it back)
                if txn.leased or (not stale and _lease(self._head)[1] == self.holder):
                    self._give_back()
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
        wait = _Wait()
        while True:
            attempts += 1
            lease = self._lease_for(txn, wait)
            if lease is _WAIT:  # another process's batch holds the log: queue behind it
                if time.monotonic() >= deadline:
                    raise Busy(self.bucket.url, attempts, BUSY_SECONDS)
                wait.sleep(self._queued())
                with self._mu:
                    etag = self._etag
                    self.refresh(force=True)
                    if self._etag != etag:
                        self._check_still(txn, moves)
                continue
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
                # foreign entries may have been taken in since the commit's reads (by a wait, a queue swap, a 412, another
                # thread's refresh): what it read must still hold, else StaleBase (a value compare of a few refs)
                self._check_still(txn, moves)
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
            new_head, pre = self._next_head(head, n, raw, e.checksum, lease)
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
                    txn.leased = False  # given back by this swap
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
                    txn.leased = False  # our swap landed, giving it back
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

    # -- the writer's lease --------------------------------------------------------------------
    @property
    def holder(self) -> bytes:
        """This engine's holder id in a lease (one per engine: threads of a process share its writer lock)."""
        h = self.__dict__.get("_holder")
        if h is None:
            h = self.__dict__["_holder"] = os.urandom(8)
        return h

    def take_lease(self, txn: S3Txn, timeout: float | None) -> None:
        """Hold this log's lease for ``txn`` (called with the writer lock held, before the batch reads a ref): wait
        while another holder's lease is live, then swap HEAD to the next epoch naming this engine. An empty log gets
        a HEAD of no entries holding the lease. LockTimeout after ``timeout`` seconds (None: Busy after the retry
        bound, which outlasts a lapse)."""
        from ...errors import LockTimeout

        limit = max(BUSY_SECONDS, 3 * LEASE_SECONDS) if timeout is None else timeout
        deadline = time.monotonic() + limit
        wait = _Wait()
        cached = self._head is not None and self.damaged is None  # the HEAD this engine holds: tried first, as a commit is
        while True:
            if not cached:
                self.refresh(force=True)
            cached = False  # (a 412 on the cached HEAD, or a lease to wait for: read HEAD again)
            with self._mu:
                head, etag = self._head, self._etag
            epoch, holder, nxt = _lease(head)
            if holder == self.holder:
                txn.leased = True  # handed over to this engine (it queued), or one a commit of it did not give back
                return
            if holder != FREE and not wait.lapsed(etag):
                if time.monotonic() >= deadline:
                    if timeout is not None:
                        raise LockTimeout(f"the lease of {self.bucket.url}", timeout)
                    raise Busy(self.bucket.url, wait.polls, limit)
                self._queue(head, etag, nxt)
                wait.sleep(self._queued())
                continue
            if head is None:
                new = Head(HEAD_FMT, 0, ZERO, None, [], 0, [epoch + 1, self.holder])
                tag = self.bucket.put_if_absent(HEAD_KEY, encode_head(new))
            else:
                new = msgspec.structs.replace(head, lease=[epoch + 1, self.holder])
                tag = self.bucket.put_if_match(HEAD_KEY, encode_head(new), etag) if etag is not None else None
            if tag is not None:
                with self._mu:
                    if self._etag == etag:
                        self._head, self._etag, self._checked = new, tag, time.monotonic()
                txn.leased = True
                return
            # 412: another writer's swap came first; read HEAD again

    def _hold_for_rerun(self) -> None:
        """A self-contained commit found the log moved under it while no lease was held: take the lease (one swap)
        for its re-run, which ``Store.atomically`` makes at once and which keeps and then gives it back with its
        entry. Without it a writer of a loop of batches, retaking the free lease a moment after each commit, won
        every race while the append backed off: a stale append saw the lease free, so never queued (starved into
        Busy under load). A held lease, or a swap another writer's came before, leaves HEAD as it is."""
        with self._mu:
            head, etag = self._head, self._etag
        epoch, holder, _nxt = _lease(head)
        if head is None or etag is None or holder != FREE:
            return
        new = msgspec.structs.replace(head, lease=[epoch + 1, self.holder])
        try:
            tag = self.bucket.put_if_match(HEAD_KEY, encode_head(new), etag)
        except Exception:  # noqa: BLE001 - only a help for the re-run: its own commit meets whatever this met
            return
        if tag is not None:
            with self._mu:
                if self._etag == etag:
                    self._head, self._etag, self._checked = new, tag, time.monotonic()

    def _give_back(self) -> None:
        """Free this engine's lease without an entry (a batch that committed nothing, or raised). A swap lost to gc
        rewriting HEAD is tried again; a lease taken over meanwhile is not ours to free. Left held if the server does
        not answer: it lapses."""
        from .bucket import RemoteError

        for _ in range(8):
            try:
                self.refresh(force=True)
                with self._mu:
                    head, etag = self._head, self._etag
                epoch, holder, nxt = _lease(head)
                if head is None or etag is None or holder != self.holder:
                    return
                new = msgspec.structs.replace(head, lease=_given_back(epoch, nxt))
                tag = self.bucket.put_if_match(HEAD_KEY, encode_head(new), etag)
            except (RemoteError, CorruptLog):
                return
            if tag is not None:
                with self._mu:
                    if self._etag == etag:
                        self._head, self._etag, self._checked = new, tag, time.monotonic()
                return

    def _queued(self) -> bool:
        """Whether the HEAD this engine holds names it in its lease's queue slot."""
        with self._mu:
            return _lease(self._head)[2] == self.holder

    def _queue(self, head: Head | None, etag: str | None, nxt: bytes) -> None:
        """Take the queue slot of a live lease (``[epoch, holder, next]``) if it is free: the holder's next swap then
        hands the lease to this engine, instead of freeing it for whoever polls first (a writer that just gave it
        back would always win). One slot: the others wait for it to empty. A refused swap changes nothing."""
        for _ in range(3):  # lost to the holder's swap: at once again on the HEAD it left (a holder of a loop of batches
            # takes the lease again right after giving it back; the slot is only won while it is held)
            if nxt != FREE or head is None or etag is None or head.lease is None or head.lease[1] in (FREE, self.holder):
                return
            new = msgspec.structs.replace(head, lease=[head.lease[0], head.lease[1], self.holder])
            tag = self.bucket.put_if_match(HEAD_KEY, encode_head(new), etag)
            if tag is not None:
                with self._mu:
                    if self._etag == etag:
                        self._head, self._etag, self._checked = new, tag, time.monotonic()
                return
            self.refresh(force=True)
            with self._mu:
                head, etag = self._head, self._etag
            nxt = _lease(head)[2]

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
            merged = merge_chunks(got.data, data)
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

    def _lease_for(self, txn: S3Txn, wait: _Wait) -> Any:
        """The lease the commit's HEAD carries (``_WAIT``: another's live lease is held, so wait): given back if this
        commit held it, taken over at the next epoch (and left free) if another's lapsed, else as it was."""
        with self._mu:
            head, etag = self._head, self._etag
        epoch, holder, nxt = _lease(head)
        if holder == self.holder:
            return _given_back(epoch, nxt)  # to the engine queued for it, if one is
        if holder == FREE:
            return None if head is None or head.lease is None else head.lease
        if not wait.lapsed(etag):
            if txn.leased:
                txn.leased = False  # ours lapsed and was taken over: this commit now queues like any other
            self._queue(head, etag, nxt)
            return _WAIT
        return [epoch + 1, FREE]

    def _next_head(self, head: Head | None, n: int, raw: bytes, checksum: bytes, lease: list | None = None) -> tuple[Head, list]:
        pre: list[tuple[str, bytes]] = []
        if len(raw) > INLINE_BYTES:
            pre.append((entry_key(n, checksum), raw))
            slot: Any = [n, checksum]
        else:
            slot = raw
        if head is None or head.n == 0:  # (a HEAD of no entries holds only a lease)
            return Head(HEAD_FMT, n, checksum, None, [slot], 0 if head is None else head.gc, lease), pre
        tail = list(head.tail)
        size = sum(len(s) if isinstance(s, bytes) else 48 for s in tail) + (len(slot) if isinstance(slot, bytes) else 48)
        if len(tail) + 1 > TAIL_ENTRIES or size > INLINE_BYTES:
            first = head.n - len(tail) + 1
            if tail:
                ch = Chunk(CHUNK_FMT, head.chunk, first, tail)
                pre.insert(0, (chunk_key(first, head.n, head.checksum), encoder.encode(ch)))
                return Head(HEAD_FMT, n, checksum, [first, head.n, head.checksum], [slot], head.gc, lease), pre
        tail.append(slot)
        return Head(HEAD_FMT, n, checksum, head.chunk, tail, head.gc, lease), pre

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


class _Wait:
    """A waiter's view of a live lease: polls HEAD with a growing pause, and says the lease lapsed once the same HEAD
    (ETag) has stood for LEASE_SECONDS of this process's monotonic clock."""

    def __init__(self) -> None:
        self.etag: str | None = None
        self.since = 0.0
        self.pause = 0.002
        self.polls = 0

    def lapsed(self, etag: str | None) -> bool:
        now = time.monotonic()
        if etag != self.etag:
            self.etag, self.since, self.pause = etag, now, 0.002
            return False
        return now - self.since >= LEASE_SECONDS

    def sleep(self, queued: bool = False) -> None:
        """A pause before HEAD is read again: short while this waiter holds the queue slot (the lease is handed to it
        at the holder's next swap), growing otherwise."""
        self.polls += 1
        if queued:
            time.sleep(0.001 + 0.001 * random.random())
            return
        time.sleep(self.pause * (0.5 + random.random()))
        self.pause = min(self.pause * 1.5, 0.02)


def _lease(head: Head | None) -> tuple[int, bytes, bytes]:
    """(epoch, holder, next) of HEAD's lease (holder FREE: nobody holds it; next FREE: nobody queued for it)."""
    if head is None or head.lease is None:
        return 0, FREE, FREE
    lease = head.lease
    return lease[0], lease[1], lease[2] if len(lease) > 2 else FREE


def _given_back(epoch: int, nxt: bytes) -> list:
    """The lease its holder's swap leaves: handed to the engine queued for it (the next epoch), else free."""
    return [epoch + 1, nxt] if nxt != FREE else [epoch, FREE]


def _run_of_ref(name: str) -> str | None:
    """The run whose log a ref belongs to (None: the store log's)."""
    if name.startswith(runrefs.RUN_PREFIX):
        return name[len(runrefs.RUN_PREFIX):].split("/", 1)[0]
    return None



__all__ = ["S3Engine", "S3Txn"]
