"""Read-only access to format-1 stores, for ``upgrade`` (and nothing else).

Format 1 (docs/FORMAT.md before the log engine) kept a store directory::

    OBJSTORE                   {"format": "objstore", "version": 1}
    objects/ab/<62 hex>        loose objects: "OSO" 0x01 · compression (0 none, 1 zstd) · data
    packs/pack-<32 hex>.pack   packs: header, blocks, sorted index, checksummed trailer
    refs/<name>                "<64 hex>\\n" or "ref: <name>\\n"
    logs/<name>                ref log, JSON Lines {"old","new","time","pid","reason"}
    tmp/, state.db             ignored (temp files; a disposable cache)

This module owns that layout's parsing: loose objects (incl. zstd), packs (incl.
index and blocks), ref files and ref logs. It never writes. Every object it
returns is hash-checked against its id, and damage raises ``IntegrityError``
(``CorruptPack`` for a damaged pack) naming the file. A torn *last* ref log line
(a crash mid-append, no final newline) is not a move and is skipped, as format 1
itself did; any other unparseable line is damage. Files in ``objects/`` or
``packs/`` whose names cannot be objects or packs are not objects and are skipped.
"""

from __future__ import annotations

import heapq
import json
import os
import struct
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple, cast

import blake3
import zstandard

from ..errors import (
    CorruptPack,
    IntegrityError,
    ObjectNotFound,
    StorageOSError,
    StoreFormatError,
    StoreNotFound,
)
from ..storage import codec, runrefs

LOOSE_MAGIC = b"OSO\x01"
COMP_NONE = 0
COMP_ZSTD = 1
PACK_MAGIC = b"OSPK\x01\x00\x00\x00"
PACK_TRAILER_MAGIC = b"OSPX"
_TRAILER = struct.Struct("<Q32s4s")  # index offset, blake3 of all bytes before, magic
_BLOCK = struct.Struct("<BII")  # compression, raw length, stored length
_ENTRY = struct.Struct("<32sIII")  # id, block number, offset in block, length
MAX_INMEMORY = 1 << 30  # a frame claiming more than this is corrupt (format 1's own limit)
PRECHECK_RAW = 16 << 20  # a frame declaring more is hash-checked while streaming before it is held
SYMREF = runrefs.SYMREF_PREFIX


class Move(NamedTuple):
    """One ref log line: values are 32-byte ids, 'ref: <name>' strings, or None (absent)."""

    name: str
    old: bytes | str | None
    new: bytes | str | None
    time: float | None
    reason: str


def check_hash(oid: bytes, canonical: bytes, where: str) -> bytes:
    if blake3.blake3(canonical).digest() != oid:
        codec.split_header(canonical, oid, where)  # names truncation / garbage / bad header precisely
        raise IntegrityError(oid.hex(), where, "hash mismatch (content does not match id)")
    return canonical


def _decompress(data: bytes, what: str, where: str, members: list[tuple[int, int, bytes]] | None = None,
                expect: int | None = None) -> bytes:
    """One zstd frame, decompressed. ``members`` ((offset, length, id) of the objects in it) and
    ``expect`` (the size its container declares) bound what a crafted frame can make a reader
    hold: a frame that declares more than PRECHECK_RAW bytes is hash-checked while it streams,
    before it is ever held whole (a 33 KB pack can otherwise decompress to a gigabyte)."""
    try:
        size = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError as e:
        raise IntegrityError(what, where, f"bad zstd frame: {e}") from None
    if size < 0 or size > MAX_INMEMORY:
        raise IntegrityError(what, where, f"zstd frame declares an impossible size ({size})")
    if expect is not None and size != expect:
        raise IntegrityError(what, where, f"zstd frame declares {size} bytes, its container {expect}")
    if size > PRECHECK_RAW:
        if not members:
            raise IntegrityError(what, where, f"zstd frame declares {size} bytes and holds no object to check them by")
        try:
            problem = codec.check_stream(_stream(data, size), size, members)
        except zstandard.ZstdError as e:
            problem = f"zstd data corrupt: {e}"
        if problem is not None:
            raise IntegrityError(what, where, problem)
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = d.decompress(data)
    except zstandard.ZstdError as e:
        raise IntegrityError(what, where, f"zstd data corrupt: {e}") from None
    if not d.eof:
        raise IntegrityError(what, where, "truncated zstd frame")
    if d.unused_data:
        raise IntegrityError(what, where, f"garbage after object ({len(d.unused_data)} extra bytes)")
    if len(out) != size:
        raise IntegrityError(what, where, "zstd frame size mismatch")
    return out


def _stream(data: bytes, limit: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The decompressed bytes of one frame in chunks, stopping at ``limit`` bytes (then one more
    byte, if the frame holds more: check_stream names that)."""
    return codec.zstd_chunks(data, limit + 1, chunk)


def loose_canonical(oid: bytes, raw: bytes, path: str) -> bytes:
    """The canonical bytes stored in one loose object file (not yet hash-checked)."""
    if len(raw) < 5 or raw[:4] != LOOSE_MAGIC:
        raise IntegrityError(oid.hex(), path, "bad stored header (magic/format version)")
    if raw[4] == COMP_NONE:
        return raw[5:]
    if raw[4] == COMP_ZSTD:
        try:
            size = zstandard.get_frame_parameters(raw[5:]).content_size
        except zstandard.ZstdError:
            size = -1  # _decompress names it
        return _decompress(raw[5:], oid.hex(), path, [(0, size, oid)] if size > 0 else None)
    raise IntegrityError(oid.hex(), path, f"unknown compression id {raw[4]}")


class Pack:
    """One pack file: its index (id -> block, offset, length) and block reads. The whole
    file's checksum is checked when it is opened."""

    _members: dict[int, list]  # block number -> its members, once ``members`` computed them

    def __init__(self, path: str):
        try:
            self._open(path)
        except OSError as e:
            raise StorageOSError(f"read {path}", e) from None

    def _open(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            self.size = size = os.fstat(f.fileno()).st_size
            if size < len(PACK_MAGIC) + _TRAILER.size:
                raise CorruptPack(path, "truncated (too short for header and trailer)")
            if f.read(len(PACK_MAGIC)) != PACK_MAGIC:
                raise CorruptPack(path, "bad pack header")
            f.seek(size - _TRAILER.size)
            idx_off, checksum, magic = _TRAILER.unpack(f.read(_TRAILER.size))
            if magic != PACK_TRAILER_MAGIC or not len(PACK_MAGIC) <= idx_off <= size - _TRAILER.size:
                raise CorruptPack(path, "bad or missing trailer (truncated or garbage appended)")
            f.seek(0)
            h = blake3.blake3()
            left = size - _TRAILER.size
            while left:
                chunk = f.read(min(left, 1 << 22))
                if not chunk:
                    raise CorruptPack(path, "truncated while reading")
                h.update(chunk)
                left -= len(chunk)
            if h.digest() != checksum:
                raise CorruptPack(path, "checksum mismatch (pack bytes damaged)")
            f.seek(idx_off)
            index = f.read(size - _TRAILER.size - idx_off)
        try:
            (nblocks,) = struct.unpack_from("<I", index, 0)
            p = 4 + 8 * nblocks
            self.block_pos = list(struct.unpack_from(f"<{nblocks}Q", index, 4))
            (count,) = struct.unpack_from("<I", index, p)
            p += 4
            if len(index) != p + count * _ENTRY.size:
                raise struct.error("index length mismatch")
            self.entries = {e[0]: (e[1], e[2], e[3]) for e in _ENTRY.iter_unpack(index[p:])}
        except struct.error as e:
            raise CorruptPack(path, f"corrupt index: {e}") from None
        if len(self.entries) != count:
            raise CorruptPack(path, "corrupt index: duplicate ids")

    def block(self, n: int) -> bytes:
        try:
            return self._block(n)
        except OSError as e:
            raise StorageOSError(f"read {self.path}", e) from None

    def _block(self, n: int) -> bytes:
        if n >= len(self.block_pos):
            raise CorruptPack(self.path, f"index names block {n}, pack has {len(self.block_pos)}")
        with open(self.path, "rb") as f:
            f.seek(self.block_pos[n])
            head = f.read(_BLOCK.size)
            if len(head) != _BLOCK.size:
                raise CorruptPack(self.path, f"block {n} truncated")
            comp, raw_len, stored = _BLOCK.unpack(head)
            # the declared sizes are checked before anything is read or allocated for them
            if self.block_pos[n] + _BLOCK.size + stored > self.size:
                raise CorruptPack(self.path, f"block {n} declares {stored} stored bytes, past the end of the pack")
            if raw_len > MAX_INMEMORY or (comp == COMP_NONE and raw_len != stored):
                raise CorruptPack(self.path, f"block {n} declares an impossible size ({raw_len} bytes)")
            members = self.members().get(n, [])
            if any(off + ln > raw_len for off, ln, _ in members):
                raise CorruptPack(self.path, f"the index places an object past the end of block {n}")
            data = f.read(stored)
        if len(data) != stored:
            raise CorruptPack(self.path, f"block {n} truncated")
        if comp == COMP_ZSTD:
            data = _decompress(data, f"block {n}", f"{self.path} block {n}", members, raw_len)
        elif comp != COMP_NONE:
            raise CorruptPack(self.path, f"block {n} has unknown compression {comp}")
        if len(data) != raw_len:
            raise CorruptPack(self.path, f"block {n} length mismatch")
        return data

    def members(self) -> dict[int, list]:
        """block number -> [(offset, length, id)] in block order (computed once: a pack never changes)."""
        by: dict[int, list] | None = getattr(self, "_members", None)
        if by is not None:
            return by
        by = self._members = {}
        for oid, (blk, off, ln) in self.entries.items():
            by.setdefault(blk, []).append((off, ln, oid))
        for v in by.values():
            v.sort()
        return by


def parse_value(text: str, name: str, where: str) -> bytes | str:
    """A stored ref value: 64 hex -> bytes, 'ref: x' as is; anything else is damage."""
    text = text.rstrip("\n")
    if text.startswith(SYMREF):
        return text
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    raise IntegrityError(name, where, f"corrupt ref value: {text[:80]!r}")


def _walk_names(base: str) -> list[tuple[str, str]]:
    """(name, path) of every file under ``base``, names '/'-separated, sorted by name."""
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            out.append((os.path.relpath(full, base).replace(os.sep, "/"), full))
    return sorted(out)


class Format1Reader:
    """A format-1 store at ``path``, read only."""

    def __init__(self, path: str):
        self.root = os.path.abspath(path)
        marker = os.path.join(self.root, "OBJSTORE")
        try:
            with open(marker, "rb") as f:
                meta = json.loads(f.read())
        except FileNotFoundError:
            raise StoreNotFound(self.root) from None
        except ValueError:
            raise StoreFormatError(self.root, "unreadable OBJSTORE marker") from None
        except OSError as e:
            raise StorageOSError(f"read {marker}", e) from None
        if not isinstance(meta, dict) or meta.get("format") != "objstore" or meta.get("version") != 1:
            raise StoreFormatError(self.root, "not a format-1 store")
        self._index: dict | None = None
        self._packs: list[Pack] = []
        self._blocks: OrderedDict = OrderedDict()

    # -- objects -------------------------------------------------------------------------
    def _loose_files(self) -> list[tuple[bytes, str]]:
        out = []
        objdir = os.path.join(self.root, "objects")
        for name, path in _walk_names(objdir):
            fan, _, rest = name.partition("/")
            if len(fan) == 2 and len(rest) == codec.HEX_LEN - 2:
                try:
                    out.append((bytes.fromhex(fan + rest), path))
                except ValueError:
                    pass
        return out

    def index(self) -> dict:
        """id -> where it is stored: a loose file's path, or (pack, block, offset, length).
        An id stored twice (loose and packed) is listed once: the bytes are identical by hash."""
        if self._index is None:
            idx: dict = {}
            packdir = os.path.join(self.root, "packs")
            names = sorted(os.listdir(packdir)) if os.path.isdir(packdir) else []
            self._packs = [Pack(os.path.join(packdir, n)) for n in names if n.endswith(".pack")]
            for pack in self._packs:
                for oid, (blk, off, ln) in pack.entries.items():
                    idx.setdefault(oid, (pack, blk, off, ln))
            for oid, path in self._loose_files():
                idx.setdefault(oid, path)
            self._index = idx
        return self._index

    def _block(self, pack: Pack, n: int) -> bytes:
        key = (pack.path, n)
        data = self._blocks.get(key)
        if data is None:
            data = self._blocks[key] = pack.block(n)
            if len(self._blocks) > 16:
                self._blocks.popitem(last=False)
        return data

    def read(self, oid: bytes) -> bytes:
        """The canonical bytes of ``oid``, hash-checked."""
        loc = self.index().get(oid)
        if loc is None:
            raise ObjectNotFound(oid.hex())
        if isinstance(loc, str):
            try:
                with open(loc, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise StorageOSError(f"read {loc}", e) from None
            return check_hash(oid, loose_canonical(oid, raw, loc), loc)
        pack, blk, off, ln = loc
        where = f"{pack.path} block {blk}"
        data = self._block(pack, blk)[off : off + ln]
        if len(data) != ln:
            raise IntegrityError(oid.hex(), where, "truncated object in pack block")
        return check_hash(oid, data, where)

    def iter_objects(self) -> Iterator[tuple[bytes, bytes]]:
        """Every object once, as (id, canonical bytes), hash-checked, in storage order."""
        idx = self.index()
        for pack in self._packs:
            for blk, members in sorted(pack.members().items()):
                for off, ln, oid in members:
                    if idx[oid] == (pack, blk, off, ln):  # else stored twice: served from its first place
                        yield oid, self.read(oid)
        for oid, path in self._loose_files():
            if idx[oid] == path:
                yield oid, self.read(oid)

    # -- refs ----------------------------------------------------------------------------
    def refs(self) -> dict:
        """{name: value} of every ref file (lock files skipped)."""
        out = {}
        for name, path in _walk_names(os.path.join(self.root, "refs")):
            if name.endswith(".lock"):
                continue
            try:
                with open(path, encoding="ascii", errors="replace") as f:
                    text = f.read()
            except OSError as e:
                raise StorageOSError(f"read {path}", e) from None
            out[name] = parse_value(text, name, path)
        return out

    def ref_log(self, name: str, path: str | None = None) -> list[Move]:
        """The moves in ``logs/<name>``, in file order."""
        path = path or os.path.join(self.root, "logs", *name.split("/"))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as err:
            raise StorageOSError(f"read {path}", err) from None
        lines = data.split(b"\n")
        last = len(lines) - 1  # the text after the final newline ('' when the file ends with one)
        out = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                move = Move(name, self._log_value(e["old"], name, path), self._log_value(e["new"], name, path),
                            float(e["time"]), e.get("reason") or "")
            except (ValueError, KeyError, TypeError, IntegrityError):
                if i == last:
                    continue  # a torn last line (crash mid-append) is not a move
                raise IntegrityError(name, path, f"corrupt ref log line {i + 1}") from None
            out.append(move)
        return out

    @staticmethod
    def _log_value(v: object, name: str, path: str) -> bytes | str | None:
        if v is None:
            return None
        if not isinstance(v, str):
            raise TypeError(v)
        return parse_value(v, name, path)

    def ref_logs(self) -> dict[str, list[Move]]:
        """{name: its ref log lines in file order} of every ref log file."""
        return {name: self.ref_log(name, path) for name, path in _walk_names(os.path.join(self.root, "logs"))}

    def ref_log_moves(self) -> list[Move]:
        """Every ref log line of every ref, merged in time order (see ``merge``)."""
        return merge(self.ref_logs())


def merge(logs: dict[str, list[Move]]) -> list[Move]:
    """Per-ref move lists merged in time order. Each list keeps its own order (even where its
    clock went backwards); equal times go in ref name order."""
    return list(heapq.merge(*(logs[n] for n in sorted(logs)), key=lambda m: cast(float, m.time)))  # a logged line has a time
