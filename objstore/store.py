"""The store: one object backend plus one ref store, and group commit.

``Store`` is what every upper layer talks to. It types objects (``put``/``get``
encode and decode through ``codec``), and it offers ``batch()``: a group commit
in which objects are buffered, written as one pack with one fsync, and only then
are the batch's ref moves applied by compare-and-swap — so no ref ever names an
object that is not durable, and a crash mid-batch leaves only unreferenced bytes.

Inside a batch, reads see the batch's own pending objects and ref values.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from typing import Any, Iterator

import blake3

from . import codec
from .errors import Conflict, InvalidInput, ObjectNotFound, ObjstoreError, StoreFormatError, StoreNotFound
from .fileutil import FsyncPolicy, atomic_file
from .objects import LocalBackend, MemoryBackend, ObjectBackend
from .refs import FileRefStore, MemoryRefStore, RefStore

_hash = blake3.blake3
_encode = codec._enc.encode
_HEADS = {t: h for t, h in codec._HEAD.items() if t != codec.BLOB}

MARKER = "OBJSTORE"
FORMAT_VERSION = 1
DEFAULT_DIR = ".objstore"


def default_path() -> str:
    return os.environ.get("OBJSTORE_DIR") or DEFAULT_DIR


class Batch:
    """Pending objects and ref moves of one group commit."""

    def __init__(self):
        self.objects: dict[bytes, bytes] = {}  # insertion-ordered: the pack keeps write order
        self.refs: dict[str, list] = {}  # name -> [old at first touch, pending new, reason]
        self.seen: dict[str, Any] = {}  # refs read in this batch: a batch sees one snapshot of them


class Store:
    def __init__(self, backend: ObjectBackend, refs: RefStore, root: str | None = None, policy: FsyncPolicy | None = None):
        self.backend = backend
        self.refs = refs
        self.root = root
        self.policy = policy or FsyncPolicy()
        self._batch: Batch | None = None
        self._decoded: dict = {}  # the last pack block decoded by get_decoded

    # -- opening -----------------------------------------------------------
    @classmethod
    def memory(cls) -> "Store":
        return cls(MemoryBackend(), MemoryRefStore())

    @classmethod
    def init(cls, path: str | None = None, fsync: str | None = None) -> "Store":
        path = os.path.abspath(path or default_path())
        policy = FsyncPolicy(fsync)
        marker = os.path.join(path, MARKER)
        if os.path.exists(marker):
            return cls.open(path, fsync=fsync)
        if os.path.exists(path) and not os.path.isdir(path):
            raise InvalidInput(f"{path} exists and is not a directory")
        if os.path.isdir(path) and os.listdir(path):
            raise InvalidInput(f"{path} is a non-empty directory that is not a store; refusing to initialise it")
        for sub in ("objects", "packs", "refs", "logs", "tmp"):
            os.makedirs(os.path.join(path, sub), exist_ok=True)
        with atomic_file(marker, os.path.join(path, "tmp"), policy) as f:
            f.write(json.dumps({"format": "objstore", "version": FORMAT_VERSION}).encode() + b"\n")
        policy.dir(os.path.dirname(path) or ".")
        return cls.open(path, fsync=fsync)

    @classmethod
    def open(cls, path: str | None = None, fsync: str | None = None, create: bool = False) -> "Store":
        path = os.path.abspath(path or default_path())
        marker = os.path.join(path, MARKER)
        if not os.path.isfile(marker):
            if create:
                return cls.init(path, fsync=fsync)
            raise StoreNotFound(path)
        try:
            with open(marker, "rb") as f:
                meta = json.loads(f.read())
            version = meta["version"]
        except (ValueError, KeyError, TypeError):
            raise StoreFormatError(path, "unreadable OBJSTORE marker") from None
        if meta.get("format") != "objstore" or version != FORMAT_VERSION:
            raise StoreFormatError(path, f"format version {version!r}, this objstore reads {FORMAT_VERSION}")
        policy = FsyncPolicy(fsync)
        return cls(LocalBackend(path, policy), FileRefStore(path, policy), root=path, policy=policy)

    # -- objects -----------------------------------------------------------
    def put(self, otype: str, value: Any) -> bytes:
        if otype == codec.BLOB:
            return self.put_blob(value)
        if type(value) is dict and otype in _HEADS:  # the hot path: codec.encode, inlined
            payload = _encode(value)
            data = _HEADS[otype] % len(payload) + payload
        else:
            data = codec.encode(otype, value)
        oid = _hash(data).digest()
        b = self._batch
        if b is not None:
            b.objects[oid] = data
        else:
            self.backend.put(oid, [data])
        return oid

    def put_blob(self, data: bytes) -> bytes:
        """Store a blob once (deduplicated by content); returns its id."""
        data = bytes(data)
        head = codec.header(codec.BLOB, len(data))
        h = blake3.blake3(head)
        h.update(data)
        oid = h.digest()
        b = self._batch
        if b is not None and len(data) < (1 << 20):
            b.objects[oid] = head + data
        else:
            self.backend.put(oid, [head, data])
        return oid

    def put_blob_file(self, path: str, chunk: int = 1 << 20) -> bytes:
        """Store a file's bytes as a blob, streaming: never the whole file in memory."""
        size = os.path.getsize(path)
        head = codec.header(codec.BLOB, size)
        h = blake3.blake3(head)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(chunk), b""):
                h.update(block)
        oid = h.digest()
        if self.backend.has(oid):
            return oid

        self.backend.put(oid, _LazyParts(head, path, size, chunk), size=len(head) + size)
        return oid

    def get_raw(self, oid: bytes) -> bytes:
        b = self._batch
        if b is not None and oid in b.objects:
            return b.objects[oid]
        return self.backend.get(oid)

    def get_decoded(self, oid: bytes) -> tuple[str, Any]:
        """(type, value) like ``get`` minus the canonical re-encoding check, for chain walks.

        A packed object's whole block is hash-checked and decoded at once and kept
        until the walk leaves it: a chain's records sit together in write order."""
        hit = self._decoded.get(oid)
        if hit is not None:
            return hit
        b = self._batch
        got = None if (b is not None and oid in b.objects) else getattr(self.backend, "block_items", _none)(oid)
        if got is None:
            return codec.decode(self.get_raw(oid), oid, False)
        _, items = got
        decoded = {}
        decode = codec.decode
        for m, data in items:
            if _hash(data).digest() != m:
                continue  # a damaged neighbour is reported if and when it is asked for
            try:
                decoded[m] = decode(data, m, False)
            except ObjstoreError:
                pass
        self._decoded = decoded
        hit = decoded.get(oid)
        if hit is None:  # damaged: let the ordinary path raise the precise error
            return codec.decode(self.get_raw(oid), oid, False)
        return hit

    def forget_decoded(self) -> None:
        """Drop the decoded block, so values handed out cannot be seen again after a caller mutates them."""
        self._decoded = {}

    def get(self, oid: bytes) -> tuple[str, Any]:
        return codec.decode(self.get_raw(oid), oid)

    def get_typed(self, oid: bytes, otype: str) -> Any:
        t, value = self.get(oid)
        if t != otype:
            raise InvalidInput(f"object {oid.hex()} is a {t}, not a {otype}")
        return value

    def get_blob(self, oid: bytes) -> bytes:
        """A blob's body: the only call that reads blob bodies."""
        return self.get_typed(oid, codec.BLOB)

    def copy_blob_to(self, oid: bytes, out) -> int:
        """Write a blob's body to a binary file object, streaming large ones (hash checked at the end)."""
        if not hasattr(self.backend, "copy_payload"):
            data = self.get_blob(oid)
            out.write(data)
            return len(data)
        return self.backend.copy_payload(oid, out)

    def has(self, oid: bytes) -> bool:
        b = self._batch
        return (b is not None and oid in b.objects) or self.backend.has(oid)

    def resolve_id(self, text: str) -> bytes:
        """A full hex id, or a unique prefix of at least 4 hex digits."""
        text = text.strip().lower()
        if len(text) == codec.HEX_LEN:
            return codec.parse_id(text)
        if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
            raise InvalidInput(f"{text!r} is not an object id (64 hex digits, or a unique prefix of 4 or more)")
        hits = [oid for oid in self.backend.iter_ids() if oid.hex().startswith(text)]
        if not hits:
            raise ObjectNotFound(text)
        if len(hits) > 1:
            raise InvalidInput(f"id prefix {text!r} is ambiguous ({len(hits)} objects)")
        return hits[0]

    # -- refs --------------------------------------------------------------
    def read_ref(self, name: str):
        b = self._batch
        if b is None:
            return self.refs.read(name)
        if name in b.refs:
            return b.refs[name][1]
        if name not in b.seen:
            b.seen[name] = self.refs.read(name)
        return b.seen[name]

    def resolve_ref(self, name: str) -> bytes | None:
        value = self.read_ref(name)
        while isinstance(value, str):
            value = self.read_ref(value[5:])
        return value

    def set_ref(self, name: str, old, new, reason: str) -> None:
        """Compare-and-swap a ref; inside a batch, deferred to the commit point."""
        b = self._batch
        if b is None:
            self.refs.set_if_equals(name, old, new, reason)
            return
        if name in b.refs:
            entry = b.refs[name]
            if entry[1] != old:
                raise Conflict(name, _hex(old), _hex(entry[1]))
            entry[1] = new
            entry[2] = reason
        else:
            cur = self.refs.read(name)
            if cur != old:
                raise Conflict(name, _hex(old), _hex(cur))
            b.refs[name] = [old, new, reason]

    def list_refs(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        b = self._batch
        if b is None:
            yield from self.refs.list(prefix)
            return
        merged = dict(self.refs.list(prefix))
        for name, (_, new, _) in b.refs.items():
            if name.startswith(prefix):
                if new is None:
                    merged.pop(name, None)
                else:
                    merged[name] = new
        yield from sorted(merged.items())

    # -- group commit --------------------------------------------------------
    @contextmanager
    def batch(self):
        """Group commit: one pack, one fsync, then the ref moves; nested calls join the outer one."""
        if self._batch is not None:
            yield self._batch
            return
        b = self._batch = Batch()
        try:
            yield b
        except BaseException:
            self._batch = None
            raise
        self._batch = None
        self.backend.put_many(b.objects)
        for name, (old, new, reason) in b.refs.items():
            if old != new:
                self.refs.set_if_equals(name, old, new, reason)


class _LazyParts:
    """Parts of a streamed blob for LocalBackend.put: header, then file chunks."""

    def __init__(self, head, path, size, chunk):
        self.head, self.path, self.size, self.chunk = head, path, size, chunk

    def __iter__(self):
        yield self.head
        with open(self.path, "rb") as f:
            yield from iter(lambda: f.read(self.chunk), b"")


def _none(oid):
    return None


def _hex(v):
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else v
