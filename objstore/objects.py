"""Object backends: where canonical object bytes live, and nothing else.

One small interface (``ObjectBackend``) with two implementations:

* ``MemoryBackend`` — a dict, for tests and throwaway work.
* ``LocalBackend`` — the embedded default on a filesystem:
  - *loose objects* ``objects/ab/<62 hex>``, one file each, written once through
    a temp file + fsync + link(2) (link refuses to overwrite an existing id);
  - *packs* ``packs/pack-<hash>.pack``, one immutable file per batch holding
    zstd-compressed blocks of many objects plus a sorted index and a checksummed
    trailer. The pack is written to ``tmp/``, fsynced, and renamed into place:
    that rename is the single commit point, so a crash leaves at most an
    unreferenced temp file, never a visible half-pack. Many objects, one fsync.

Every read re-hashes the canonical bytes and raises ``IntegrityError`` naming
the object and its path on mismatch. ``scan()`` walks every stored object for
``verify`` (including damaged ones), so verify never trusts the read path.

Nothing here deletes objects. A later, explicit ``gc`` will need only
``iter_ids`` and a per-backend delete of unreachable ids; packs being immutable
means gc would rewrite live objects into a new pack and then drop old packs.
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from typing import Iterable, Iterator, NamedTuple

import blake3
import zstandard

from . import codec
from .errors import CorruptPack, IntegrityError, InvalidInput, LimitExceeded, ObjectNotFound
from .fileutil import FsyncPolicy, atomic_file

LOOSE_MAGIC = b"OSO\x01"
COMP_NONE = 0
COMP_ZSTD = 1
PACK_MAGIC = b"OSPK\x01\x00\x00\x00"
PACK_TRAILER_MAGIC = b"OSPX"
_TRAILER = struct.Struct("<Q32s4s")  # index offset, blake3 of all bytes before, magic
_BLOCK = struct.Struct("<BII")  # compression, raw length, stored length
_ENTRY = struct.Struct("<32sIII")  # id, block number, offset in block, length
_BLOCKPOS = struct.Struct("<Q")

BLOCK_TARGET = 128 * 1024  # raw bytes per pack block: small enough to read one object cheaply
LOOSE_THRESHOLD = 8 * 1024 * 1024  # objects above this go loose, streamed, not into packs
MAX_INMEMORY = 1 << 30  # a stored frame claiming more than this is treated as corrupt
ZSTD_LEVEL = 1  # packs: level 1 is ~2.4x faster than 3 on 128 KiB blocks and still ~3x smaller than raw for records


class ScanItem(NamedTuple):
    """One stored object as found on disk; exactly one of canonical/error is set."""

    oid: bytes | None
    where: str
    canonical: bytes | None
    error: IntegrityError | None


class ScanBatch(NamedTuple):
    """Objects found together (one pack block, one loose file): (id, canonical bytes)
    pairs not yet hash-checked, plus what could not even be read."""

    where: str
    items: list
    errors: list  # of ScanItem


class ObjectBackend:
    """The interface every backend implements (local, memory, and later S3)."""

    def has(self, oid: bytes) -> bool:
        raise NotImplementedError

    def get(self, oid: bytes) -> bytes:
        """Canonical bytes of ``oid``, hash-checked; ObjectNotFound/IntegrityError."""
        raise NotImplementedError

    def put(self, oid: bytes, parts, size: int | None = None) -> bool:
        """Store one object whose canonical bytes are ``b''.join(parts)``; False if present.

        ``parts`` may be any iterable (a streamed file); then ``size`` gives the total."""
        raise NotImplementedError

    def put_many(self, items: list[tuple[bytes, bytes]]) -> int:
        """Store many (id, canonical) durably with one commit point; returns count new."""
        raise NotImplementedError

    def iter_ids(self) -> Iterator[bytes]:
        raise NotImplementedError

    def scan_batches(self) -> Iterator[ScanBatch]:
        """Every stored object, for verify; hash checks are the caller's."""
        raise NotImplementedError

    def scan(self) -> Iterator[ScanItem]:
        """Every stored object, hash-checked, one at a time."""
        for batch in self.scan_batches():
            yield from batch.errors
            for oid, data in batch.items:
                try:
                    yield ScanItem(oid, batch.where, check_hash(oid, data, batch.where), None)
                except IntegrityError as e:
                    yield ScanItem(oid, batch.where, None, e)

    def where(self, oid: bytes) -> str:
        return oid.hex()


_hash = blake3.blake3


def check_hash(oid: bytes, canonical: bytes, where: str) -> bytes:
    """``canonical`` if it hashes to ``oid``, else the most precise IntegrityError."""
    if _hash(canonical).digest() != oid:
        # Name the damage precisely when the header tells it (truncation, garbage, bad header).
        codec.split_header(canonical, oid, where)
        raise IntegrityError(oid.hex(), where, "hash mismatch (content does not match id)")
    return canonical


class MemoryBackend(ObjectBackend):
    def __init__(self):
        self.objects: dict[bytes, bytes] = {}

    def has(self, oid):
        return oid in self.objects

    def get(self, oid):
        try:
            data = self.objects[oid]
        except KeyError:
            raise ObjectNotFound(oid.hex()) from None
        return check_hash(oid, data, "memory")

    def put(self, oid, parts, size=None):
        if oid in self.objects:
            return False
        self.objects[oid] = b"".join(parts)
        return True

    def put_many(self, items):
        items = items.items() if isinstance(items, dict) else items
        n = 0
        for oid, data in items:
            if oid not in self.objects:
                self.objects[oid] = data
                n += 1
        return n

    def iter_ids(self):
        return iter(list(self.objects))

    def scan_batches(self):
        yield ScanBatch("memory", list(self.objects.items()), [])


def _decompress(data: bytes, what: str, where: str) -> bytes:
    try:
        params = zstandard.get_frame_parameters(data)
    except zstandard.ZstdError as e:
        raise IntegrityError(what, where, f"bad zstd frame: {e}") from None
    size = params.content_size
    if size < 0 or size > MAX_INMEMORY:
        raise IntegrityError(what, where, f"zstd frame declares an impossible size ({size})")
    dobj = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = dobj.decompress(data)
    except zstandard.ZstdError as e:
        raise IntegrityError(what, where, f"zstd data corrupt: {e}") from None
    if not dobj.eof:
        raise IntegrityError(what, where, "truncated zstd frame")
    if dobj.unused_data:
        raise IntegrityError(what, where, f"garbage after object ({len(dobj.unused_data)} extra bytes)")
    if len(out) != size:
        raise IntegrityError(what, where, "zstd frame size mismatch")
    return out


class PackFile:
    """An immutable pack: blocks, then a sorted index, then a checksummed trailer."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            if self.size < len(PACK_MAGIC) + _TRAILER.size:
                raise CorruptPack(path, "truncated (too short for header and trailer)")
            if f.read(len(PACK_MAGIC)) != PACK_MAGIC:
                raise CorruptPack(path, "bad pack header")
            f.seek(self.size - _TRAILER.size)
            idx_off, self.checksum, magic = _TRAILER.unpack(f.read(_TRAILER.size))
            if magic != PACK_TRAILER_MAGIC or not len(PACK_MAGIC) <= idx_off <= self.size - _TRAILER.size:
                raise CorruptPack(path, "bad or missing trailer (truncated or garbage appended)")
            f.seek(idx_off)
            index = f.read(self.size - _TRAILER.size - idx_off)
        self.idx_off = idx_off
        try:
            (nblocks,) = struct.unpack_from("<I", index, 0)
            p = 4 + nblocks * _BLOCKPOS.size
            self.block_pos = [x[0] for x in _BLOCKPOS.iter_unpack(index[4:p])]
            (count,) = struct.unpack_from("<I", index, p)
            p += 4
            if len(index) != p + count * _ENTRY.size:
                raise struct.error("index length mismatch")
            self.entries = {e[0]: (e[1], e[2], e[3]) for e in _ENTRY.iter_unpack(index[p:])}
        except struct.error as e:
            raise CorruptPack(path, f"corrupt index: {e}") from None
        if len(self.entries) != count:
            raise CorruptPack(path, "corrupt index: duplicate ids")

    @classmethod
    def adopt(cls, path: str, meta: dict) -> "PackFile":
        """A PackFile for a pack this process just wrote, from ``write_pack``'s metadata."""
        self = cls.__new__(cls)
        self.path, self.name = path, os.path.basename(path)
        self.size, self.checksum, self.idx_off = meta["size"], meta["checksum"], meta["idx_off"]
        self.block_pos, self.entries = meta["block_pos"], meta["entries"]
        return self

    def block_members(self, n: int) -> list:
        """[(offset, length, id)] of block ``n``, in block order (built once per pack)."""
        by = self.__dict__.get("_by_block")
        if by is None:
            by = self._by_block = {}
            for oid, (blk, off, ln) in self.entries.items():
                by.setdefault(blk, []).append((off, ln, oid))
            for v in by.values():
                v.sort()
        return by.get(n, [])

    def read_block(self, n: int, f=None) -> bytes:
        if n >= len(self.block_pos):
            raise CorruptPack(self.path, f"index names block {n}, pack has {len(self.block_pos)}")
        pos = self.block_pos[n]
        own = f is None
        f = f or open(self.path, "rb")
        try:
            f.seek(pos)
            comp, raw_len, stored = _BLOCK.unpack(f.read(_BLOCK.size))
            data = f.read(stored)
        finally:
            if own:
                f.close()
        where = f"{self.path} block {n}"
        if len(data) != stored:
            raise CorruptPack(self.path, f"block {n} truncated")
        if comp == COMP_NONE:
            out = data
        elif comp == COMP_ZSTD:
            out = _decompress(data, f"block {n}", where)
        else:
            raise CorruptPack(self.path, f"block {n} has unknown compression {comp}")
        if len(out) != raw_len:
            raise CorruptPack(self.path, f"block {n} length mismatch")
        return out

    def verify_checksum(self) -> bool:
        import blake3

        h = blake3.blake3()
        with open(self.path, "rb") as f:
            remaining = self.size - _TRAILER.size
            while remaining:
                chunk = f.read(min(remaining, 1 << 22))
                if not chunk:
                    return False
                h.update(chunk)
                remaining -= len(chunk)
        return h.digest() == self.checksum


def write_pack(f, items, level: int = ZSTD_LEVEL) -> dict:
    """Write a pack holding ``items`` (distinct (id, canonical) pairs) to ``f``.

    Objects go to block ``start // BLOCK_TARGET`` by where they start in the
    concatenation, so a block holds at most BLOCK_TARGET bytes plus one object.
    Returns what a reader needs (``PackFile.adopt``), so a fresh pack is not re-read.
    """
    import itertools

    oids = [k for k, _ in items]
    datas = [v for _, v in items]
    lens = list(map(len, datas))
    starts = [0, *itertools.accumulate(lens)][:-1]
    target = BLOCK_TARGET
    blks = [x // target for x in starts]
    # renumber blocks densely (an object larger than a block can leave gaps)
    firsts: dict[int, int] = {}
    for i, b in enumerate(blks):
        firsts.setdefault(b, i)
    order = sorted(firsts)
    dense = {b: n for n, b in enumerate(order)}
    bounds = [firsts[b] for b in order] + [len(datas)]

    h = blake3.blake3()
    compress = zstandard.ZstdCompressor(level=level, write_content_size=True).compress
    pos = 0
    block_pos: list[int] = []

    def emit(chunk: bytes):
        nonlocal pos
        h.update(chunk)
        f.write(chunk)
        pos += len(chunk)

    emit(PACK_MAGIC)
    for n in range(len(order)):
        raw = b"".join(datas[bounds[n] : bounds[n + 1]])
        comp = compress(raw)
        kind, data = (COMP_ZSTD, comp) if len(comp) < len(raw) else (COMP_NONE, raw)
        block_pos.append(pos)
        emit(_BLOCK.pack(kind, len(raw), len(data)) + data)
    blk_starts = [starts[i] for i in bounds[:-1]]
    dblk = [dense[b] for b in blks]
    entries = dict(zip(oids, zip(dblk, [s - blk_starts[d] for s, d in zip(starts, dblk)], lens)))
    idx_off = pos
    index = [struct.pack("<I", len(block_pos)), struct.pack(f"<{len(block_pos)}Q", *block_pos), struct.pack("<I", len(entries))]
    pack_entry = _ENTRY.pack
    index += [pack_entry(oid, *entries[oid]) for oid in sorted(entries)]
    emit(b"".join(index))
    checksum = h.digest()
    f.write(_TRAILER.pack(idx_off, checksum, PACK_TRAILER_MAGIC))
    return {"block_pos": block_pos, "entries": entries, "idx_off": idx_off, "checksum": checksum, "size": pos + _TRAILER.size}


class LocalBackend(ObjectBackend):
    def __init__(self, root: str, policy: FsyncPolicy):
        self.root = root
        self.policy = policy
        self.objdir = os.path.join(root, "objects")
        self.packdir = os.path.join(root, "packs")
        self.tmpdir = os.path.join(root, "tmp")
        self.packs: dict[str, PackFile] = {}
        self.index: dict[bytes, PackFile] = {}  # id -> the pack holding it (first one loaded wins)
        self._blocks: OrderedDict = OrderedDict()
        self._loaded = False

    # -- layout ------------------------------------------------------------
    def loose_path(self, oid: bytes) -> str:
        h = oid.hex()
        return os.path.join(self.objdir, h[:2], h[2:])

    def where(self, oid: bytes) -> str:
        self._load_packs()
        pack = self.index.get(oid)
        if pack:
            return f"{pack.path} block {pack.entries[oid][0]}"
        return self.loose_path(oid)

    def _load_packs(self, force: bool = False) -> None:
        if self._loaded and not force:
            return
        try:
            names = sorted(n for n in os.listdir(self.packdir) if n.endswith(".pack"))
        except FileNotFoundError:
            names = []
        for name in names:
            if name in self.packs:
                continue
            try:
                pack = PackFile(os.path.join(self.packdir, name))
            except CorruptPack:
                continue  # unreadable packs are verify's business; reads of their ids then miss
            self._adopt(pack)
        self._loaded = True

    def _adopt(self, pack: PackFile) -> None:
        # Which pack serves an id stored twice does not matter: the bytes are identical.
        self.packs[pack.name] = pack
        self.index.update(dict.fromkeys(pack.entries, pack))

    # -- reads -------------------------------------------------------------
    def has(self, oid):
        self._load_packs()
        if oid in self.index or os.path.exists(self.loose_path(oid)):
            return True
        self._load_packs(force=True)  # another process may have committed a pack
        return oid in self.index

    def block_items(self, oid: bytes):
        """(block key, [(id, canonical bytes)]) of the pack block holding ``oid``, hashes
        *not* checked (the caller checks each); None if ``oid`` is not in a pack.

        For sequential readers (chain walks): one call yields a block's neighbours too."""
        if not self._loaded:
            self._load_packs()
        pack = self.index.get(oid)
        if pack is None:
            return None
        blk = pack.entries[oid][0]
        members = pack.block_members(blk)
        block = self._block(pack, blk)
        return (pack.name, blk), [(m, block[off : off + ln]) for off, ln, m in members]

    def _block(self, pack: PackFile, n: int) -> bytes:
        key = (pack.name, n)
        data = self._blocks.get(key)
        if data is None:
            data = pack.read_block(n)
            self._blocks[key] = data
            if len(self._blocks) > 64:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return data

    def get(self, oid):
        if not self._loaded:
            self._load_packs()
        pack = self.index.get(oid)
        if pack is None:
            path = self.loose_path(oid)
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                self._load_packs(force=True)
                pack = self.index.get(oid)
                if pack is None:
                    raise ObjectNotFound(oid.hex()) from None
            else:
                return check_hash(oid, self._loose_canonical(oid.hex(), raw, path), path)
        blk, off, ln = pack.entries[oid]
        data = self._block(pack, blk)[off : off + ln]
        if len(data) == ln and _hash(data).digest() == oid:
            return data
        where = f"{pack.path} block {blk}"  # built only when there is something to report
        if len(data) != ln:
            raise IntegrityError(oid.hex(), where, "truncated object in pack block")
        return check_hash(oid, data, where)

    def copy_payload(self, oid: bytes, out, chunk: int = 1 << 20) -> int:
        """Stream a loose object's payload into ``out`` without holding it in memory;
        the hash is checked at the end (IntegrityError then: discard what was written).
        Packed objects are small and go through ``get``. Returns the payload size."""
        self._load_packs()
        if oid in self.index:
            data = self.get(oid)
            otype, off = codec.split_header(data, oid)
            if otype != codec.BLOB:
                raise InvalidInput(f"object {oid.hex()} is a {otype}, not a blob")
            out.write(data[off:])
            return len(data) - off
        path = self.loose_path(oid)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise ObjectNotFound(oid.hex()) from None
        with f:
            head = f.read(5)
            if len(head) < 5 or head[:4] != LOOSE_MAGIC or head[4] not in (COMP_NONE, COMP_ZSTD):
                raise IntegrityError(oid.hex(), path, "bad stored header (magic/format version)")
            src = zstandard.ZstdDecompressor().stream_reader(f) if head[4] == COMP_ZSTD else f
            h = blake3.blake3()
            first = src.read(64)
            h.update(first)
            nul = first.find(b"\x00")
            if nul < 0:
                raise IntegrityError(oid.hex(), path, "bad header: no terminator")
            if not first.startswith(b"blob "):
                raise InvalidInput(f"object {oid.hex()} is a {first.split(b' ')[0].decode('ascii', 'replace')}, not a blob")
            out.write(first[nul + 1 :])
            n = len(first) - nul - 1
            while True:
                try:
                    block = src.read(chunk)
                except zstandard.ZstdError as e:
                    raise IntegrityError(oid.hex(), path, f"zstd data corrupt: {e}") from None
                if not block:
                    break
                h.update(block)
                out.write(block)
                n += len(block)
        if h.digest() != oid:
            raise IntegrityError(oid.hex(), path, "hash mismatch (content does not match id)")
        return n

    @staticmethod
    def _loose_canonical(name: str, raw: bytes, path: str) -> bytes:
        if len(raw) < 5 or raw[:4] != LOOSE_MAGIC:
            raise IntegrityError(name, path, "bad stored header (magic/format version)")
        comp = raw[4]
        if comp == COMP_NONE:
            return raw[5:]
        if comp == COMP_ZSTD:
            return _decompress(raw[5:], name, path)
        raise IntegrityError(name, path, f"unknown compression id {comp}")

    # -- writes ------------------------------------------------------------
    def put(self, oid, parts, size=None):
        if self.has(oid):
            return False
        path = self.loose_path(oid)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        total = size if size is not None else sum(len(p) for p in parts)
        if total > MAX_INMEMORY:
            raise LimitExceeded(f"object of {total} bytes is over the {MAX_INMEMORY}-byte object limit")
        try:
            with atomic_file(path, self.tmpdir, self.policy, replace=False) as f:
                f.write(LOOSE_MAGIC)
                if total >= 64:
                    # Stream-compress the parts so a large blob is never joined in memory.
                    comp = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
                    f.write(bytes([COMP_ZSTD]))
                    with comp.stream_writer(f, size=total, closefd=False) as w:
                        for p in parts:
                            w.write(p)
                    if f.tell() - 5 >= total:  # compression did not pay: store raw
                        f.seek(4)
                        f.truncate()
                        f.write(bytes([COMP_NONE]))
                        for p in parts:
                            f.write(p)
                else:
                    f.write(bytes([COMP_NONE]))
                    for p in parts:
                        f.write(p)
        except FileExistsError:
            return False  # a concurrent writer stored the same id first: identical by definition
        return True

    def put_many(self, items):
        items = items if isinstance(items, dict) else dict(items)
        if not items:
            return 0
        self._load_packs()  # not forced: an id another process packed meanwhile is only stored twice
        index = self.index
        # A loose copy of the same id may exist; a second, identical copy in a pack is harmless.
        fresh = [(k, v) for k, v in items.items() if k not in index] if index else list(items.items())
        if any(len(v) > LOOSE_THRESHOLD for _, v in fresh):
            for k, v in fresh:
                if len(v) > LOOSE_THRESHOLD:
                    self.put(k, [v])
            fresh = [(k, v) for k, v in fresh if len(v) <= LOOSE_THRESHOLD]
        if not fresh:
            return 0
        os.makedirs(self.packdir, exist_ok=True)
        import secrets

        path = os.path.join(self.packdir, f"pack-{secrets.token_hex(16)}.pack")
        with atomic_file(path, self.tmpdir, self.policy) as f:
            meta = write_pack(f, fresh)
        self._adopt(PackFile.adopt(path, meta))
        return len(fresh)

    def iter_ids(self):
        self._load_packs(force=True)
        yield from list(self.index)
        for oid, _ in self._iter_loose():
            if oid is not None and oid not in self.index:
                yield oid

    def _iter_loose(self):
        try:
            fans = sorted(os.listdir(self.objdir))
        except FileNotFoundError:
            return
        for fan in fans:
            d = os.path.join(self.objdir, fan)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                try:
                    oid = bytes.fromhex(fan + name)
                    if len(oid) != codec.ID_LEN:
                        oid = None
                except ValueError:
                    oid = None
                yield oid, path

    def scan_batches(self):
        for oid, path in self._iter_loose():
            if oid is None:
                err = IntegrityError(os.path.basename(path), path, "stray file in object directory (not an object id)")
                yield ScanBatch(path, [], [ScanItem(None, path, None, err)])
                continue
            try:
                with open(path, "rb") as f:
                    raw = f.read()
                yield ScanBatch(path, [(oid, self._loose_canonical(oid.hex(), raw, path))], [])
            except IntegrityError as e:
                yield ScanBatch(path, [], [ScanItem(oid, path, None, e)])
        try:
            names = sorted(os.listdir(self.packdir))
        except FileNotFoundError:
            names = []
        for name in names:
            path = os.path.join(self.packdir, name)
            if not name.endswith(".pack"):
                yield ScanBatch(path, [], [ScanItem(None, path, None, CorruptPack(path, "stray file in pack directory"))])
                continue
            yield from self._scan_pack(path)

    def _scan_pack(self, path):
        try:
            pack = PackFile(path)
        except CorruptPack as e:
            yield ScanBatch(path, [], [ScanItem(None, path, None, e)])
            return
        if not pack.verify_checksum():
            yield ScanBatch(path, [], [ScanItem(None, path, None, CorruptPack(path, "checksum mismatch (pack bytes damaged)"))])
        by_block: dict[int, list] = {}
        for oid, (blk, off, ln) in pack.entries.items():
            by_block.setdefault(blk, []).append((off, ln, oid))
        with open(path, "rb") as f:
            for blk in sorted(by_block):
                where = f"{path} block {blk}"
                entries = sorted(by_block[blk])
                try:
                    block = pack.read_block(blk, f)
                except IntegrityError as e:
                    errs = [ScanItem(oid, where, None, IntegrityError(oid.hex(), where, f"unreadable pack block: {e}")) for _, _, oid in entries]
                    yield ScanBatch(where, [], errs)
                    continue
                yield ScanBatch(where, [(oid, block[off : off + ln]) for off, ln, oid in entries], [])
