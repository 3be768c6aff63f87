"""The format-2 log reader: what ``objstore upgrade`` needs to carry a format-2 store to format 3.

Format 2 (docs/FORMAT.md, "Upgrading from format 2") is the format-3 log without the index rows,
the tables' root, the seal flag and the index digests: segment files ``log/<10 digits>.seg``
with the header ``"OSSG" 0x02 …``, entries ``"OSE2" · u32 meta length · u64 data length · meta
{n, t, moves, objs, blocks, cut} · blocks · u64 entry length · 32-byte chain checksum`` where the
checksum is BLAKE3(previous ‖ msgpack([n, t, [[id, type, length]…], moves, cut])). A segment is
sealed exactly when the next one exists.

``Format2Reader.entries()`` yields each entry with its objects' canonical bytes, every checksum,
block and object hash checked; any damage is ``IntegrityError`` naming the file: an upgrade
copies only a store that reads whole (run the format-2 objstore's ``verify`` first).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

import blake3
import msgspec
import zstandard

from ..errors import IntegrityError

SEG_MAGIC = b"OSSG\x02\x00\x00\x00"
SEG_HEADER = struct.Struct("<8sQQ32s")
ENTRY_MAGIC = b"OSE2"
ENTRY_HEAD = struct.Struct("<4sIQ")
ENTRY_TRAILER = struct.Struct("<Q32s")
MAX_BLOCK = 1 << 30  # a block is decompressed whole: format-2 blobs above this are refused by upgrade
ZERO = b"\x00" * 32

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()


class Entry2(NamedTuple):
    n: int
    time: float
    moves: list  # [name, old, new, reason]
    objects: list  # [(id, type, canonical bytes)] in the entry's order


class Format2Reader:
    def __init__(self, root: str) -> None:
        self.root = root
        self.dir = os.path.join(root, "log")

    def seg_path(self, n: int) -> str:
        return os.path.join(self.dir, f"{n:010d}.seg")

    def entries(self) -> Iterator[Entry2]:
        prev, n, seg = ZERO, 1, 1
        dec = zstandard.ZstdDecompressor()
        while os.path.exists(self.seg_path(seg)):
            path = self.seg_path(seg)
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < SEG_HEADER.size:
                raise IntegrityError("segment", path, "bad segment header")
            magic, hseg, first, hprev = SEG_HEADER.unpack_from(data, 0)
            if magic != SEG_MAGIC or hseg != seg or first != n or hprev != prev:
                raise IntegrityError("segment", path, "segment header does not continue the log")
            sealed = os.path.exists(self.seg_path(seg + 1))
            off = SEG_HEADER.size
            while off < len(data):
                e, length, checksum = self._entry(data, off, prev, n, path, dec)
                if e is None or isinstance(length, str):
                    if sealed:
                        raise IntegrityError("entry", path, f"entry {n} at offset {off} does not read: {length}")
                    return  # a torn tail: invisible to format-2 readers too
                yield e
                prev, n = checksum, n + 1
                off += length
            seg += 1

    def _entry(self, data: bytes, off: int, prev: bytes, n: int, path: str,
               dec: zstandard.ZstdDecompressor) -> tuple[Entry2 | None, int | str, bytes]:
        if len(data) - off < ENTRY_HEAD.size:
            return None, "incomplete entry header", ZERO
        magic, mlen, dlen = ENTRY_HEAD.unpack_from(data, off)
        length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
        if magic != ENTRY_MAGIC or off + length > len(data):
            return None, "incomplete or not an entry", ZERO
        tlen, checksum = ENTRY_TRAILER.unpack_from(data, off + length - ENTRY_TRAILER.size)
        try:
            m = _dec.decode(data[off + ENTRY_HEAD.size : off + ENTRY_HEAD.size + mlen])
            en, t, moves, objs, blocks, cut = m["n"], m["t"], m["moves"], m["objs"], m["blocks"], m["cut"]
            logical = _enc.encode([en, t, [[o[0], o[1], o[2]] for o in objs], moves, cut])
        except (msgspec.DecodeError, msgspec.EncodeError, KeyError, TypeError, IndexError):
            return None, "undecodable entry meta", ZERO
        if tlen != length or en != n or blake3.blake3(prev + logical).digest() != checksum:
            return None, "checksum mismatch", ZERO
        raws = []
        pos = off + ENTRY_HEAD.size + mlen
        for comp, raw_len, stored_len in blocks:
            stored = data[pos : pos + stored_len]
            pos += stored_len
            if raw_len > MAX_BLOCK:
                raise IntegrityError("block", path, f"entry {n}: a block of {raw_len} bytes is larger than upgrade copies")
            try:
                raw = dec.decompress(stored, max_output_size=raw_len) if comp == 1 else stored
            except zstandard.ZstdError as err:
                raise IntegrityError("block", path, f"entry {n}: zstd data corrupt: {err}") from None
            raws.append(raw)
        objects = []
        for oid, otype, olen, bi, boff in objs:
            canon = raws[bi][boff : boff + olen]
            if blake3.blake3(canon).digest() != oid:
                raise IntegrityError(oid.hex(), path, f"entry {n}: hash mismatch (content does not match id)")
            objects.append((oid, otype, canon))
        return Entry2(en, float(t), moves, objects), length, checksum
