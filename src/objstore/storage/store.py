"""The store: typed objects and refs over one engine, and commits.

``Store`` is what every upper layer talks to. ``put``/``get`` encode and decode
through ``codec``; refs move by compare-and-swap. Every write happens inside a
commit: ``batch()`` (also spelled ``transaction()``) holds the store's writer
lock for its duration, so everything it writes — objects and ref moves — lands
as one log entry with one fdatasync, or not at all. A write outside a batch is
a commit of its own. A batch belongs to its ``contextvars`` context (thread or
asyncio task): other threads' writes wait for the lock and never join it.

While a batch is open it blocks every other writer of the store (other
threads and other processes); ``batch(timeout=…)`` raises ``LockTimeout``
instead of waiting forever. Readers never wait for it.
"""

from __future__ import annotations

import errno
import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import blake3
import msgspec
import zstandard

from ..errors import (
    BodyRemoved,
    Busy,
    Deleted,
    InvalidId,
    InvalidInput,
    LimitExceeded,
    NewerFormat,
    ObjectNotFound,
    Redacted,
    RunNotFound,
    StaleBase,
    StorageOSError,
    StoreFormatError,
    StoreNeedsUpgrade,
    StoreNotFound,
)
from . import codec, erased, runrefs
from .batch import _BatchVar
from .fileutil import FsyncPolicy, atomic_file, tmp_name
from .log.engine import Engine
from .log.entry import LargeBlob, RemovedBody
from .log.format import LARGE_BLOB
from .log.local import LogEngine
from .log.memory import MemoryEngine
from .log.txn import Txn
from .logset import LogSet, OneLog
from .storedir import (
    BUCKET_READ_VERSIONS,
    BUCKET_VERSION,
    FORMAT_VERSION,
    MARKER,
    NEWEST_VERSION,
    READ_VERSIONS,
    RUNLOGS_VERSION,
    default_path,
    is_remote,
    mark_version,
    new_store_format,
    read_marker,
    remote_cache_dir,
    store_dir,
)

if TYPE_CHECKING:
    from .s3.bucket import Bucket

_hash = blake3.blake3
_T = TypeVar("_T")


def _check_oid(oid: object) -> bytes:
    """An object id as the API takes it: 32 bytes (``codec.parse_id`` turns hex into one)."""
    if type(oid) is not bytes or len(oid) != 32:
        if isinstance(oid, bytes) and len(oid) == 32:  # an Id (codec.Id): the plain bytes it is
            return bytes(oid)
        raise InvalidId(oid if isinstance(oid, str) else type(oid).__name__, "an object id is 32 bytes (parse hex with codec.parse_id)")
    return oid
_encode = codec._enc.encode
_HEADS = {t: h for t, h in codec._HEAD.items() if t != codec.BLOB}

MAX_BLOB = 1 << 30  # a blob handed over as bytes is held in memory whole; larger ones are refused
MAX_STREAMED_BLOB = 1 << 40  # a streamed blob (put_blob_stream / put-blob FILE) goes through a spill file


class Store:
    def __init__(self, engine: Engine, root: str | None = None, policy: FsyncPolicy | None = None, logs: LogSet | None = None) -> None:
        self.engine = engine  # the store log (a store of one log: that log)
        self.logs: LogSet = logs if logs is not None else OneLog(engine)
        self.root = root
        self._version = read_marker(root) if root is not None and os.path.exists(os.path.join(root, MARKER)) else FORMAT_VERSION
        self.policy = policy or FsyncPolicy()
        self._txn = _BatchVar(f"objstore-txn-{id(self)}")
        self._decoded: dict = {}  # the last record block decoded by get_decoded
        self.created = False  # set by ``init`` when it made the store
        self.url: str | None = None  # s3://bucket/prefix of a store on object storage (root is then its local cache)
        # recorded deletion (issue 17): run -> (head of its run/<R>/deletions chain, {record id: row}),
        # and every covered record this store has seen, {id: (deletion id, run, branch, lsn, kind)}
        self._covered: dict[str, tuple[Any, dict]] = {}
        self.erased_records: dict[bytes, tuple[bytes, str, int, int, str]] = {}

    # -- opening -----------------------------------------------------------
    @classmethod
    def memory(cls) -> Store:
        return cls(MemoryEngine())

    @classmethod
    def init(cls, path: str | None = None, fsync: str | None = None, format: int | None = None) -> Store:
        """Create a store at ``path`` (or open it if it is one already). The store's ``created`` says
        which: two processes creating one new store at once both succeed, one of them created it.
        ``format``: 6 (a log per run) or 3 (one log); default ``storedir.new_store_format()``."""
        path = path or default_path()
        if is_remote(path):
            return cls._open_remote(path, create=True)
        path = os.path.abspath(path)
        policy = FsyncPolicy(fsync)
        marker = os.path.join(path, MARKER)
        if os.path.exists(marker):
            return cls.open(path, fsync=fsync)
        if os.path.exists(path) and not os.path.isdir(path):
            raise InvalidInput(f"{path} exists and is not a directory")
        if os.path.isdir(path) and os.listdir(path):
            if os.path.exists(marker):  # another process's store appeared (whole) since the first look
                return cls.open(path, fsync=fsync)
            raise InvalidInput(f"{path} is a non-empty directory that is not a store; refusing to initialise it")
        parent = os.path.dirname(path) or "."
        try:
            os.makedirs(parent, exist_ok=True)
            staging = os.path.join(parent, f".{os.path.basename(path)}.init-{os.getpid()}-{id(policy)}")
            os.makedirs(os.path.join(staging, "tmp"))
            version = new_store_format() if format is None else format
            if version not in (FORMAT_VERSION, RUNLOGS_VERSION):
                raise InvalidInput(f"a new store is format {FORMAT_VERSION} (one log) or {RUNLOGS_VERSION} (a log per run), not {version!r}")
            if version == RUNLOGS_VERSION:
                from .runlogs.logs import create_layout

                create_layout(staging, policy)
            else:
                LogEngine.create(staging, policy)
            with atomic_file(os.path.join(staging, MARKER), os.path.join(staging, "tmp"), policy) as f:
                f.write(json.dumps({"format": "objstore", "version": version}).encode() + b"\n")
            policy.dir(staging)
            try:
                os.rename(staging, path)  # a whole store appears at once, or not at all
            except OSError:
                # Someone else created it meanwhile (or an empty directory was there): ours goes.
                _rmtree(staging)
                if os.path.isdir(path) and not os.listdir(path):
                    os.rmdir(path)
                    return cls.init(path, fsync, format)
                if not os.path.exists(marker):
                    raise
                return cls.open(path, fsync=fsync)  # theirs, whole: not created here
            policy.dir(parent)
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:  # the name given is not a path this system can hold: bad input
                raise InvalidInput(f"cannot create a store at {path}: {e.strerror}") from None
            raise StorageOSError(f"create a store at {path}", e) from None
        store = cls.open(path, fsync=fsync)
        store.created = True
        return store

    @classmethod
    def open(cls, path: str | None = None, fsync: str | None = None, create: bool = False, readable_prefix: bool = False) -> Store:
        """Open the store at ``path``. A log damaged before its end raises CorruptLog (exit 6) on
        every read, unless ``readable_prefix``: then reads answer from the entries before the
        damage (what verify does, to list everything it finds)."""
        path = path or default_path()  # OBJSTORE_DIR may name an s3:// store too
        store = cls._open_remote(path, create) if is_remote(path) else cls._open(path, fsync, create)
        store.engine.prefix_ok = store.logs.prefix_ok = readable_prefix
        return store

    @classmethod
    def _open_remote(cls, url: str, create: bool) -> Store:
        from .s3.client import open_bucket

        return cls.on_bucket(open_bucket(url), create=create)

    @classmethod
    def on_bucket(cls, bucket: Bucket, cache: str | None = None, create: bool = True) -> Store:
        """The store on one bucket and prefix of object storage: its marker object says its format; ``create``
        writes it if absent (create-once, so two creators agree on one store). A new store is format 7, a log per
        run with a HEAD each (``runlogs.bucketlogs``); a store of one HEAD (formats 3 to 5, ``storage.s3``) is read
        as it is and written only after ``objstore upgrade`` (``BucketNeedsUpgrade``). ``cache``: the local
        directory of its cache (default: ``remote_cache_dir``)."""
        from .s3.layout import MARKER_KEY, marker_bytes, marker_version

        url = bucket.url
        cache = cache or remote_cache_dir(url)
        try:
            os.makedirs(os.path.join(cache, "tmp"), exist_ok=True)  # spill files of large blobs, the marker's copy
        except OSError as e:
            raise StorageOSError(f"create the local cache {cache}", e) from None
        try:  # which store this cache is for, for the person who finds the directory
            with open(os.path.join(cache, "STORE_URL"), "w") as f:
                f.write(url + "\n")
        except OSError:
            pass
        marker = os.path.join(cache, "marker")  # the bucket's OBJSTORE as this cache read it last
        version = None
        try:  # a format-7 marker never changes (a format is left only by upgrade, which writes a new marker):
            with open(marker, "rb") as f:  # a copy of one saves the request; any other is asked again
                version = marker_version(f.read(), marker)
            if version != BUCKET_VERSION:
                version = None
        except (OSError, StoreFormatError):
            version = None
        created = False
        if version is None:
            version = _bucket_marker(bucket)
            if version is None:
                if not create:
                    raise StoreNotFound(url)
                created = bucket.put_if_absent(MARKER_KEY, marker_bytes(BUCKET_VERSION)) is not None
                version = _bucket_marker(bucket)
                if version is None:
                    raise StoreNotFound(url)
            if version > NEWEST_VERSION:
                raise NewerFormat("store", url, version, NEWEST_VERSION)
            if version not in BUCKET_READ_VERSIONS:
                raise StoreFormatError(url, f"format version {version!r}, this objstore reads {', '.join(map(str, BUCKET_READ_VERSIONS))} on object storage")
            if version == BUCKET_VERSION:
                try:
                    with atomic_file(marker, os.path.join(cache, "tmp"), FsyncPolicy("off")) as f:
                        f.write(marker_bytes(version))
                except OSError:
                    pass
        if version == BUCKET_VERSION:
            from .runlogs.bucketlogs import BucketLogs

            logs = BucketLogs(bucket, cache)
            store = cls(logs.store_log, root=cache, logs=logs)
        else:
            from .s3.engine import S3Engine

            engine = S3Engine(bucket, cache)
            engine.needs_upgrade = version  # read as it is; a write asks for the upgrade first
            store = cls(engine, root=cache)
        store._version = version
        store.url = url
        store.created = created
        return store

    def require_local(self, what: str, instead: str) -> None:
        """InvalidInput (exit 5) in one line when this store is on object storage: ``what`` works on a store
        on disk only; ``instead`` says what to do about it."""
        if self.url is not None:
            raise InvalidInput(f"{what} a store on disk; {self.url} is on object storage ({instead})")

    @classmethod
    def _open(cls, path: str | None, fsync: str | None, create: bool) -> Store:
        path = store_dir(os.path.abspath(path or default_path()))
        if not os.path.isfile(os.path.join(path, MARKER)):
            if create:
                return cls.init(path, fsync=fsync)
            raise StoreNotFound(path)
        version = read_marker(path)
        if version in (1, 2):
            raise StoreNeedsUpgrade(path, version, path)
        if version > NEWEST_VERSION:
            raise NewerFormat("store", path, version, NEWEST_VERSION)
        if version not in READ_VERSIONS:
            what = "a store on object storage" if version == BUCKET_VERSION else f"format version {version!r}"
            raise StoreFormatError(path, f"{what}, this objstore reads {', '.join(map(str, READ_VERSIONS))} on disk")
        policy = FsyncPolicy(fsync)
        if version == RUNLOGS_VERSION:
            from .runlogs.logs import RunLogs

            try:
                logs = RunLogs(path, policy)
            except OSError as e:
                raise StorageOSError(f"open the store log of {path}", e) from None
            return cls(logs.store_log, root=path, policy=policy, logs=logs)
        try:
            engine = LogEngine(path, policy)
        except OSError as e:
            raise StorageOSError(f"open the log of {path}", e) from None
        return cls(engine, root=path, policy=policy)

    # -- commits -----------------------------------------------------------
    def batch(self, timeout: float | None = None) -> AbstractContextManager[Txn]:
        """One commit: everything written inside lands together (one entry, one fdatasync) or not
        at all. Holds the writer lock throughout; nested calls join the outer one."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0):
            raise InvalidInput(f"batch timeout must be a non-negative number of seconds, got {timeout!r}")
        return _Batch(self, timeout)

    def after_commit(self, fn: Callable[[], Any]) -> None:
        """Call ``fn`` once the open batch has committed (now, if none is open; never, if the batch fails): a
        commit that must follow another one and may write other logs (a fence in each run after a revocation)."""
        state = self._txn.state()
        if state is None:
            fn()
        else:
            state[2].append(fn)

    transaction = batch

    @contextmanager
    def batch_in(self, run: str | None, timeout: float | None = None) -> Iterator[Txn]:
        """A batch that writes run ``run``'s log (None: the store log) even if it moves no ref: objects put in it
        are stored there, durable when it ends (a store of one log: ``batch``). On a store of a log per run an
        object put outside such a batch, with no ref, is held by the process until a record names it."""
        with self.batch(timeout) as txn:
            bind = getattr(txn, "bind_to", None)
            if bind is not None:
                bind(run)
            yield txn

    def atomically(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` as one commit. Inside an open batch it joins it. On an engine whose commits are
        optimistic (object storage: no lock is held while the body runs), a commit that another
        writer's entry made stale (``StaleBase``: a ref it read or moves changed) is run again on the
        new head, within the engine's retry bound, then ``Busy``. Only self-contained commits can be
        re-run, so a caller's own ``batch()`` gets the ``StaleBase`` (a ``Conflict``) instead."""
        if self._txn.get() is not None:
            return fn()
        bound = self.engine.retry_seconds
        if bound is None:
            with self.batch():
                return fn()
        deadline = time.monotonic() + bound
        tries = 0
        while True:
            tries += 1
            try:
                with _Batch(self, None, optimistic=True):
                    return fn()
            except StaleBase:
                if time.monotonic() >= deadline:
                    raise Busy(self.url or "the store", tries, bound) from None
                time.sleep(random.uniform(0.001, min(0.2, 0.002 * (1 << min(tries, 7)))))

    def store_log_commit(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` as one commit that writes the store log (a declaration any run may use: a record kind's schema).
        On a store of a log per run, inside a batch bound to a run's log (or not bound yet) it is a commit of its own,
        made before the batch's: a batch writes one log, and the declaration is idempotent, so it standing when the
        batch fails is harmless. Elsewhere it joins an open batch like ``atomically``. No deadlock: the batch may hold
        its run log's lock while this takes the store log's, and no writer takes a run log's lock while holding the
        store log's (storage.runlogs.multitxn)."""
        txn = self._txn.get()
        if txn is None or not self.logs.per_run or getattr(txn, "bound", None) is self.logs.store_log:
            return self.atomically(fn)
        token = self._txn.set([None, threading.get_ident()])  # this thread, outside the caller's batch
        try:
            return self.atomically(fn)
        finally:
            self._txn.reset(token)

    def current_batch(self) -> Txn | None:
        """The batch open in this context, if any (writes inside it join it)."""
        return self._txn.get()

    def put_in(self, txn: Txn, otype: str, value: dict, facts: list | None = None) -> bytes:
        """``put`` of a structured object into an open batch (the hot path of appends); ``facts``: its index row if
        the caller built it (``Txn.put``)."""
        try:
            payload = _encode(value)
        except Exception:
            value, payload = codec.checked_payload(value)
        data = _HEADS[otype] % len(payload) + payload
        oid = _hash(data).digest()
        txn.put(oid, otype, data, value, facts)
        return oid

    def in_batch(self) -> bool:
        return self._txn.get() is not None

    # -- objects -----------------------------------------------------------
    def put(self, otype: str, value: Any) -> bytes:
        if otype == codec.BLOB:
            return self.put_blob(value)
        if type(value) is dict and otype in _HEADS:  # the hot path: codec.encode, inlined
            try:
                payload = _encode(value)
            except Exception:
                value, payload = codec.checked_payload(value)
            data = _HEADS[otype] % len(payload) + payload
        else:
            data = codec.encode(otype, value)
        oid = _hash(data).digest()
        self._put(oid, otype, data, value)
        return oid

    def _put(self, oid: bytes, otype: str, data: bytes | LargeBlob, value: Any = None) -> Txn | None:
        """Into the open batch (returned), or as a commit of its own (None returned)."""
        txn = self._txn.get()
        if txn is None:
            with self.batch() as t:
                t.put(oid, otype, data, value)
            return None
        txn.put(oid, otype, data, value)
        return txn

    def require_version(self, version: int) -> None:
        """Raise the store's format marker to ``version`` before the first entry that needs it is
        written (a memory store has no marker). Cheap after the first call of a process."""
        if self.root is None or self._version >= version:
            return
        remote = self.engine.mark_version
        if remote is not None:
            remote(version)
        else:
            mark_version(self.root, version, self.policy)
        self._version = version

    def label_rows(self, key: bytes, run: str | None = None) -> list[tuple[int, bytes]]:
        """(order, record id) of the label rows with this key, newest first (storage.labels): a record
        label's rows are in its run's log (``run``), a run label's are store-wide (None)."""
        if run is not None:
            log = self.logs.run_log(run)
            with _tables_lock(log):
                return log.label_rows(key)
        return self.logs.label_rows(key)

    def put_blob(self, data: bytes) -> bytes:
        """Store a blob once (deduplicated by content); returns the id of exactly these bytes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidInput(f"a blob is bytes, not {type(data).__name__}")
        data = bytes(data)
        if len(data) > MAX_BLOB:
            raise LimitExceeded(f"blob of {len(data)} bytes is over the {MAX_BLOB}-byte limit")
        canon = codec.header(codec.BLOB, len(data)) + data
        oid = _hash(canon).digest()
        self._put(oid, codec.BLOB, canon)
        return oid

    def put_blob_stream(self, f: IO[bytes], limit: int = MAX_STREAMED_BLOB) -> bytes:
        """Store what a binary stream yields, read once: the id is the hash of exactly the bytes
        stored. Up to LARGE_BLOB bytes are held in memory; a larger input is spilled to a file
        under ``tmp/``, compressed as it is hashed, and copied into the log in chunks."""
        buf = bytearray()
        while len(buf) <= LARGE_BLOB:
            chunk = f.read(1 << 20)
            if not chunk:
                return self.put_blob(bytes(buf))
            buf += chunk
        if self.root is None:  # a memory store holds everything anyway
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return self.put_blob(bytes(buf))
                buf += chunk
                if len(buf) > MAX_BLOB:
                    raise LimitExceeded(f"blob input is over the {MAX_BLOB}-byte limit of a memory store")
        return self._put_large(buf, f, limit)

    def _put_large(self, first: bytearray, f: IO[bytes], limit: int) -> bytes:
        assert self.root is not None  # a memory store never spills
        tmpdir = os.path.join(self.root, "tmp")
        raw_path = tmp_name(tmpdir, "blob")
        z_path = raw_path + ".zst"
        keep = None  # the spill file an open batch still needs (it discards it when it ends)
        try:
            total = 0
            with open(raw_path, "wb") as raw:  # the input, read once: what is hashed is what is stored
                chunk = bytes(first)
                while chunk:
                    total += len(chunk)
                    if total > limit:
                        raise LimitExceeded(f"blob input is over the {limit}-byte limit")
                    raw.write(chunk)
                    chunk = f.read(1 << 20)
            head = codec.header(codec.BLOB, total)
            h = _hash(head)
            with open(raw_path, "rb") as src, open(z_path, "wb") as dst:
                with zstandard.ZstdCompressor(level=3).stream_writer(dst, size=len(head) + total, closefd=False) as zw:
                    zw.write(head)
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        h.update(chunk)
                        zw.write(chunk)
            oid = h.digest()
            large = LargeBlob(z_path, len(head) + total, os.path.getsize(z_path))
            txn = self._put(oid, codec.BLOB, large)
            if txn is not None:  # the open batch writes the spill file at its commit, then removes it
                txn.spills.append(large)
                keep = z_path
            return oid
        except OSError as e:
            raise StorageOSError("spill a large blob", e) from None
        finally:
            for p in (raw_path, z_path):
                if p != keep:
                    try:
                        os.unlink(p)
                    except OSError:
                        pass

    def put_blob_file(self, path: str) -> bytes:
        try:
            f = open(path, "rb")
        except OSError as e:
            raise StorageOSError(f"read {path!r}", e) from None
        with f:
            return self.put_blob_stream(f)

    def get_raw(self, oid: bytes) -> bytes:
        data = self._raw(oid)
        if data[:7] == b"record ":
            self._check_record(oid, data)
        return data

    def _raw(self, oid: bytes) -> bytes:
        """Canonical bytes, a redacted blob refused (get_raw adds the record checks; get makes
        them on the value it decodes anyway)."""
        _check_oid(oid)
        self.check_redacted(oid)
        txn = self._txn.get()
        if txn is not None:
            pending = txn.objects.get(oid)
            if pending is not None:  # a large blob of this batch is still in its spill file
                if isinstance(pending[1], RemovedBody):
                    raise BodyRemoved(oid.hex())
                return pending[1].read_all() if isinstance(pending[1], LargeBlob) else pending[1]
        data = self.logs.locate(oid).read(oid)
        if data[:5] == b"blob ":
            erased.check_blob(self, oid)  # only deleted records name it: withheld before gc removes it
        return data

    def get_one(self, oid: bytes) -> tuple[str, Any]:
        """(type, value) of one object as a chain walk reads it, without decoding its block: like
        ``get_decoded``, no per-record erasure check (the run model walks no deleted run but a copy's
        kept source, and folds covered records from their rows); a redacted blob is refused."""
        return codec.decode(self._raw(oid), oid, False)

    def get_decoded(self, oid: bytes) -> tuple[str, Any]:
        """(type, value) like ``get`` minus the canonical re-encoding check, for chain walks.

        A record's whole block is hash-checked and decoded at once and kept until the
        walk leaves it: a chain's records sit together in log order."""
        hit = self._decoded.get(oid)
        if hit is not None:
            return hit
        _check_oid(oid)
        txn = self._txn.get()
        got = None if (txn is not None and oid in txn.objects) else self.logs.locate(oid).read_block_of(oid)
        if got is None:
            return codec.decode(self.get_raw(oid), oid, False)
        raw, _ = got
        self._decoded = decoded = codec.decode_block(raw)
        codec.STATS["objects_decoded"] += len(decoded)
        hit = decoded.get(oid)
        if hit is None:  # damaged: let the ordinary path raise the precise error
            return codec.decode(self.get_raw(oid), oid, False)
        if hit[0] == codec.BLOB:
            self.check_redacted(oid)
            erased.check_blob(self, oid)
        return hit

    def forget_decoded(self) -> None:
        """Drop the decoded block, so values handed out cannot be seen again after a caller mutates them."""
        self._decoded = {}

    def get(self, oid: bytes) -> tuple[str, Any]:
        got = codec.decode(self._raw(oid), oid)
        if got[0] == codec.RECORD and isinstance(got[1], dict) and type(got[1].get("run")) is str:
            self.check_record_erasure(oid, got[1]["run"])
        return got

    def get_typed(self, oid: bytes, otype: str) -> Any:
        t, value = self.get(oid)
        if t != otype:
            raise InvalidInput(f"object {oid.hex()} is a {t}, not a {otype}")
        return value

    def get_blob(self, oid: bytes) -> bytes:
        """A blob's body: the only call that reads blob bodies."""
        return self.get_typed(oid, codec.BLOB)

    def copy_blob_to(self, oid: bytes, out: IO[bytes]) -> int:
        """Write a blob's body to a binary file object, hash-checked before anything is written: small
        blobs are read whole, large ones stream twice (checked, then written) in bounded memory."""
        _check_oid(oid)
        self.check_redacted(oid)
        erased.check_blob(self, oid)
        streamed = self.logs.locate(oid).copy_blob(oid, out)
        if streamed is not None:
            return streamed
        data = self.get_blob(oid)
        out.write(data)
        return len(data)

    def has(self, oid: bytes) -> bool:
        _check_oid(oid)
        txn = self._txn.get()
        if txn is not None:
            return txn.has(oid)
        return self.logs.has(oid)

    def resolve_id(self, text: str) -> bytes:
        """A full hex id, or a unique prefix of at least 4 hex digits; ``RUN:ID`` looks in run RUN's log (opening
        that log only, so a store of a log per run finds it at the cost of one run)."""
        text = text.strip()
        run, sep, rest = text.rpartition(":")
        if sep:
            log = self.logs.run_log(run)
            log.refresh()
            if runrefs.branch_ref(run, 0) not in log.tables.run_refs.get(run, {}):
                raise RunNotFound(run)
            text = rest.strip().lower()
            if len(text) == codec.HEX_LEN:
                oid = codec.parse_id(text)
                if not log.has(oid):
                    raise ObjectNotFound(f"{text} (in run {run})")
                return oid
            self._check_prefix(text)
            hits = sorted(oid for oid in log.iter_ids() if oid.hex().startswith(text))
            return self._one_hit(text, hits)
        text = text.lower()
        if len(text) == codec.HEX_LEN:
            return codec.parse_id(text)
        self._check_prefix(text)
        return self._one_hit(text, sorted(self.logs.ids_with_prefix(text)))

    @staticmethod
    def _check_prefix(text: str) -> None:
        if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
            raise InvalidInput(f"{text!r} is not an object id (64 hex digits, or a unique prefix of 4 or more)")

    @staticmethod
    def _one_hit(text: str, hits: list[bytes]) -> bytes:
        if not hits:
            raise ObjectNotFound(text)
        if len(hits) > 1:
            raise InvalidInput(f"id prefix {text!r} is ambiguous ({len(hits)} objects)")
        return hits[0]

    # -- refs --------------------------------------------------------------
    def read_ref(self, name: str) -> bytes | str | None:
        txn = self._txn.get()
        if txn is not None:
            return txn.read_ref(name)
        e = self.logs.for_ref(name)
        e.refresh()
        return e.tables.refs.get(name)

    def set_ref(self, name: str, old: bytes | str | None, new: bytes | str | None, reason: str) -> None:
        """Compare-and-swap a ref, committed with the batch it is in (or alone)."""
        from .refs import check_ref_name

        check_ref_name(name)
        if type(new) is not bytes and isinstance(new, bytes):  # an Id: the plain bytes it is
            new = bytes(new)
        txn = self._txn.get()
        if txn is None:
            with self.batch() as t:
                t.set_ref(name, old, new, reason)
        else:
            txn.set_ref(name, old, new, reason)

    def _touch(self, txn: Txn | None, run: str) -> None:
        """Inside a batch of a store of a log per run, a read of run ``run`` binds the batch to its log first (taking
        its lock) if the batch has none yet: what the batch decides on is then read under the lock it commits under,
        as on a store of one log, whose batch holds the writer lock from its start."""
        if txn is not None and self.logs.per_run and getattr(txn, "bound", True) is None:
            txn.read_ref(runrefs.live_ref(run))

    def run_refs(self, run: str) -> dict:
        """Every ref of one run at one log position, without touching other runs' refs."""
        txn = self._txn.get()
        self._touch(txn, run)
        e = self.logs.run_log(run)
        if txn is None:
            e.refresh()
        with _tables_lock(e):
            out = dict(e.tables.run_refs.get(run, {}))
        if txn is not None:
            prefix = runrefs.run_prefix(run)
            # An optimistic commit (object storage) decided on these refs: they join its read set, so a
            # commit of that run landing first makes it run again (as the writer lock orders them on disk).
            txn.watch(prefix, {k: v for k, v in out.items() if k not in txn.moves}, prefix=True)
            for name, (_, new, _) in txn.moves.items():
                if name.startswith(prefix):
                    if new is None:
                        out.pop(name, None)
                    else:
                        out[name] = new
        return out

    def run_names(self) -> list[str]:
        """Every run (a run exists once its branch 0 ref does), but deleted ones (``run/<R>/deleted``
        set: issue 17, gone from every listing)."""
        runs = []
        for r in self.logs.run_ids():
            e = self.logs.run_log(r)
            with _tables_lock(e):
                d = e.tables.run_refs.get(r, {})
                if runrefs.branch_ref(r, 0) not in d:
                    continue
                gone = d.get(runrefs.deleted_ref(r))
            if gone is not None:
                e.tables.obey(runrefs.deleted_ref(r), gone)  # hidden from the listing: only by a deletion that holds
            else:
                runs.append(r)
        return sorted(runs)

    def run_started_entry(self, run: str) -> int | None:
        """Log position (entry number, in the run's log) of a run's ``run_started`` record."""
        return self.logs.run_log(run).tables.starts.get(run)

    def runs_newest_first(self) -> Iterator[str]:
        """Every live run, newest start first (ties by id, the greater first). A store of a log per run walks its
        catalog from the newest end, opening only the runs it yields (and those it skips: a start killed before
        its first entry, a deleted run); a store of one log sorts its run-start index."""
        if not self.logs.per_run:
            runs = self.run_names()
            yield from sorted(runs, key=lambda r: (-1 if (p := self.run_order(r)) is None else p, r), reverse=True)
            return
        from .runlogs.logs import RunLogs

        for _k, run in cast(RunLogs, self.logs).catalog.newest_first():
            refs = self.run_refs(run)
            if runrefs.branch_ref(run, 0) not in refs:
                continue  # no log, or a log without its first entry: a killed start
            gone = refs.get(runrefs.deleted_ref(run))
            if gone is not None:
                self.obey_deletion(runrefs.deleted_ref(run), gone)
                continue
            yield run

    def subject_runs(self, subject: str) -> list[str]:
        """The runs catalogued with ``subject`` (a store of a log per run; newest first), to be confirmed
        against their logs by the caller; a store of one log has no catalog: every run."""
        if self.logs.per_run:
            from .runlogs.logs import RunLogs

            return [r for _k, r in cast(RunLogs, self.logs).catalog.by_subject(subject)]
        return self.run_names()

    def fence(self, run: str) -> None:
        """Move run ``run``'s cite to the store log's position now (a store of a log per run; else nothing): from
        here on the run's log accepts only entries judged at this store-log position or a later one. Written after
        a revocation of a grant the run's writers could hold (storage.runlogs.citation)."""
        if not self.logs.per_run:
            return
        with self.batch_in(run) as txn:
            txn.cite_now = True  # type: ignore[attr-defined]  # batch_in binds a LogTxn on a store of a log per run

    def build_id_index(self) -> dict:
        """Write the id → run index (a store of a log per run: ``index/ids``, storage.runlogs.idindex) so a bare id
        is found without opening every run's log. A store of one log finds every id in its log: nothing to build."""
        if not self.logs.per_run:
            return {"built": False, "runs": len(self.run_names()), "ids": None}
        from .runlogs.logs import RunLogs

        return {"built": True, **cast(RunLogs, self.logs).build_index()}

    def granted_runs(self, key: str) -> list[str]:
        """The runs whose logs hold a grant chain about public key ``key`` (found in the catalog of a store of a log
        per run, to be confirmed against their logs); a store of one log: every run."""
        if self.logs.per_run:
            from .runlogs.logs import RunLogs

            return cast(RunLogs, self.logs).catalog.granted(key)
        return self.run_names()

    def run_order(self, run: str) -> tuple | int | None:
        """Where a run is in the order runs were started (comparable between runs; None: not indexed)."""
        return self.logs.start_order(run)

    def indexed_record(self, run: str, branch: int, lsn: int) -> bytes | None:
        """The chain index's record id at (run, branch, lsn), or None (committed records only)."""
        if lsn < 0:
            return None
        self._touch(self._txn.get(), run)
        return self.logs.run_log(run).record_at(run, branch, lsn)

    def intent_records(self, run: str) -> list[tuple]:
        """(branch, lsn, kind, body, id) of the run's intent and intent_committed records that are
        on their branch's chain, from the chain index (committed records only)."""
        out = []
        for fact in list(self.logs.run_log(run).tables.intents.get(run, ())):
            if self.indexed_record(run, fact[0], fact[1]) == fact[4]:
                out.append(fact)
        return out

    def pending_intent_records(self, run: str) -> list[tuple]:
        """intent_records' facts of records written by the open batch (not committed, so not indexed)."""
        txn = self._txn.get()
        if txn is None:
            return []
        out = []
        for oid, v in txn.decoded.items():
            if txn.objects[oid][0] == codec.RECORD and v.get("run") == run and v.get("kind") in ("intent", "intent_committed"):
                out.append((v["branch"], v["lsn"], v["kind"], v["body"], oid))
        return out

    def list_refs(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        run = runrefs.run_of(prefix)
        if run is not None:
            items = self.run_refs(run)
        else:
            txn = self._txn.get()
            items = {}
            for log in self.logs.ref_logs(prefix):
                if txn is None:
                    log.refresh()
                with _tables_lock(log):
                    items.update(log.tables.refs)
            if txn is not None:
                for name, (_, new, _) in txn.moves.items():
                    if new is None:
                        items.pop(name, None)
                    else:
                        items[name] = new
        yield from sorted((n, v) for n, v in items.items() if n.startswith(prefix))

    def refs_snapshot(self, prefix: str = "", with_moves: bool = False) -> list[tuple[str, Any, list[dict]]]:
        """(name, value, its moves) of every ref under ``prefix``, each log read at one snapshot: the refs as of it and
        (``with_moves``) the moves of that log's entries up to it, in log order ({entry, name, old, new, time, reason};
        ``entry`` is the entry's number in the log holding the ref). A store of a log per run reads the store log and
        each run's log (one run's alone for a prefix ``run/<R>/…``)."""
        run = runrefs.run_of(prefix)
        logs: Iterable[Engine] = [self.logs.run_log(run)] if run is not None else self.logs.ref_logs(prefix)
        out: list[tuple[str, Any, list[dict]]] = []
        for log in logs:
            snap = log.snapshot()
            now = log.refs_at(prefix, snap)
            moves: dict[str, list[dict]] = {}
            if with_moves and now:
                for e in log.entries():
                    if e.n > snap.entry:
                        break
                    for ref, old, new, reason in e.moves:
                        if ref.startswith(prefix):
                            moves.setdefault(ref, []).append({"entry": e.n, "name": ref, "old": _show(old), "new": _show(new),
                                                              "time": e.time, "reason": reason})
            out.extend((name, value, moves.get(name, [])) for name, value in now.items())
        return sorted(out, key=lambda r: r[0])

    def ref_log(self, name: str | None = None, upto: int | None = None) -> Iterator[dict]:
        """Every ref move in log order (of one ref, or all), read from the commit entries; with
        ``upto``, only the moves of entries up to that one (a snapshot's)."""
        for e in (self.logs.store_log if name is None else self.logs.for_ref(name)).entries():
            if upto is not None and e.n > upto:
                return
            for ref, old, new, reason in e.moves:
                if name is None or ref == name:
                    yield {"entry": e.n, "name": ref, "old": _show(old), "new": _show(new), "time": e.time, "reason": reason}


    # -- recorded deletion and redaction (issue 17) ---------------------------------------
    # Reads of an erased body are refused here, the lowest layer above the engine: get_raw (and so
    # get, get_typed, get_blob), copy_blob_to and a blob handed out by get_decoded. A redacted blob
    # (``redacted/<id>`` set) raises Redacted; a record of a deleted run (``run/<R>/deleted``) or one
    # a partial deletion of its run covers raises Deleted. The refs are the tables of the reader's
    # position (a dict look-up: no refresh, no read unless something is erased); chain walks of
    # live runs (get_decoded) are not checked per record: the run model never walks a deleted run
    # and folds covered records from their deletion's rows (objstore.runs.chain).

    def deletion_object(self, did: bytes) -> dict:
        """A deletion object's payload, read below the erasure checks ({} if it is not one)."""
        try:
            t, v = codec.decode(self.logs.locate(did).read(did), did, False)
        except ObjectNotFound:
            return {}
        return v if t == codec.DELETION and isinstance(v, dict) else {}

    def obey_deletion(self, name: str, value: Any) -> None:
        """What every read does before it obeys deletion ref ``name`` at ``value`` (storage.log.tables: LogState.obey):
        a deletion this process took in from a checkpoint is checked against the authority rule
        there, once (CorruptLog if it breaks it)."""
        self.logs.for_ref(name).tables.obey(name, value)

    def check_redacted(self, oid: bytes) -> None:
        name = runrefs.REDACTED_PREFIX + oid.hex()
        d = self.engine.tables.refs.get(name)
        if isinstance(d, bytes):
            self.engine.tables.obey(name, d)
            raise Redacted(oid.hex(), d.hex(), self.deletion_object(d).get("reason", ""))

    def _check_record(self, oid: bytes, data: bytes) -> None:
        try:
            run = _run_of_record.decode(memoryview(data)[data.index(b"\x00") + 1:]).run
        except (ValueError, msgspec.DecodeError):
            return  # not decodable: the caller's decode names the damage
        if type(run) is str:
            self.check_record_erasure(oid, run)

    def check_record_erasure(self, oid: bytes, run: str) -> None:
        """Deleted if ``oid`` (a record of ``run``) is erased: its run deleted, or the record covered."""
        t = self.logs.run_log(run).tables
        rr = t.run_refs.get(run)
        if not rr:
            return
        d = rr.get(runrefs.deleted_ref(run))
        if isinstance(d, bytes):
            t.obey(runrefs.deleted_ref(run), d)
            raise Deleted(f"run {run}", d.hex(), self.deletion_object(d).get("reason", ""))
        if runrefs.deletions_ref(run) in rr:
            hit = self.covered_records(run).get(oid)
            if hit is not None:
                raise Deleted(f"record {oid.hex()}", hit[0].hex(), self.deletion_object(hit[0]).get("reason", ""))

    def covered_records(self, run: str, head: Any = False, obey: bool = True) -> dict[bytes, tuple[bytes, str, int, int, str]]:
        """{record id: (deletion id, run, branch, lsn, kind)} of the records of ``run`` that partial
        deletions cover, read from the ``run/<R>/deletions`` chain (at ``head``; default: the reader's
        position). Remembered by chain head: a new deletion reads only the objects it added. The
        covered records join ``erased_records``, which chain walks obey: the chain is checked first
        (``obey_deletion``), unless ``obey`` is False (storage.erased, which checks before it withholds)."""
        t = self.logs.run_log(run).tables
        if head is False:
            head = t.run_refs.get(run, {}).get(runrefs.deletions_ref(run))
        if not isinstance(head, bytes):
            return {}
        if obey:
            t.obey(runrefs.deletions_ref(run), head)
        got = self._covered.get(run)
        if got is not None and got[0] == head:
            return got[1]
        chain = []
        did: Any = head
        while isinstance(did, bytes) and (got is None or did != got[0]):
            v = self.deletion_object(did)
            chain.append((did, v))
            did = v.get("previous")
        out = dict(got[1]) if got is not None and did == got[0] else {}
        if got is not None and did != got[0]:  # not a continuation of what was read: read it all
            chain = []
            did = head
            while isinstance(did, bytes):
                v = self.deletion_object(did)
                chain.append((did, v))
                did = v.get("previous")
        for did, v in reversed(chain):  # oldest first: the first deletion of a record names it
            for row in v.get("records") or ():
                if type(row) is list and len(row) == 4 and type(row[0]) is bytes and row[0] not in out:
                    out[row[0]] = (did, run, row[1], row[2], row[3])
        self._covered[run] = (head, out)
        self.erased_records.update(out)
        return out


def _bucket_marker(bucket: Bucket) -> int | None:
    """The format version the bucket's marker says (None: no marker)."""
    from .s3.layout import MARKER_KEY, marker_version

    got = bucket.get(MARKER_KEY)
    return None if got is None else marker_version(got.data, f"{bucket.url.rstrip('/')}/{MARKER_KEY}")


class _RunOf(msgspec.Struct):
    run: Any = None


_run_of_record = msgspec.msgpack.Decoder(_RunOf)


class _Batch:
    """``Store.batch``'s block: the open batch of this context if there is one (the block joins it), else a new one
    of the store's logs, seen by this thread's writes until the block ends; what ``after_commit`` queued runs once
    it has committed. A class rather than a generator: every commit goes through it."""

    __slots__ = ("store", "timeout", "cm", "state", "token", "optimistic")

    def __init__(self, store: Store, timeout: float | None, optimistic: bool = False) -> None:
        self.store, self.timeout = store, timeout
        self.optimistic = optimistic  # Store.atomically's: re-run on StaleBase, so it takes no lease (Txn.hold_log)
        self.cm: AbstractContextManager[Txn] | None = None

    def __enter__(self) -> Txn:
        store = self.store
        txn = store._txn.get()
        if txn is not None:
            return txn
        cm = store.logs.transaction(self.timeout, self.optimistic)
        txn = cm.__enter__()
        self.cm = cm
        after: list[Callable[[], Any]] = []
        self.state: list[Any] = [txn, threading.get_ident(), after]
        self.token = store._txn.set(self.state)
        return txn

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        cm = self.cm
        if cm is None:
            return  # joined an outer batch: it commits
        self.cm = None
        state = self.state
        state[0] = None  # ended: contexts copied from this one (tasks, to_thread) no longer see it
        self.store._txn.reset(self.token)
        cm.__exit__(et, e, tb)
        if et is None:
            after: list[Callable[[], Any]] = state[2]
            for fn in after:  # committed: what had to follow it, each a commit of its own
                fn()


def _show(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.hex() if isinstance(v, bytes) else v


def _tables_lock(engine: Engine) -> AbstractContextManager:
    return engine._mu


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
