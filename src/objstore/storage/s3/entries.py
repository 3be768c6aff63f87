"""An S3 log's entries as bytes: their objects read out of them, and rewritten without bodies gc removes.

An entry keeps its rows, ids, types, lengths and chain checksum when a body goes (its block becomes
``REMOVED``): the logical checksum covers those, not the blocks, so anchors hold. ``merge_chunks`` settles
two copies of one chunk (the same entries, other bodies removed) into the one with the most removed.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import zstandard

from ...errors import BodyRemoved, IntegrityError
from ..log.entry import LogEntry, block_starts
from ..log.format import COMP_RAW, COMP_ZSTD, ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, MIN_COMPRESS, REMOVED, Loc, _compressor, _decompressor
from .layout import Chunk, chunk_decoder, encoder

_meta_enc = msgspec.msgpack.Encoder(order="sorted")  # an entry's meta, as engine.build_entry encodes it
_meta_dec = msgspec.msgpack.Decoder()


def _removed_rows(raw: bytes) -> int:
    """How many of an entry's object rows name a body gc removed (-1 if its meta does not decode)."""
    try:
        _magic, mlen, _dlen = ENTRY_HEAD.unpack_from(raw, 0)
        objs = _meta_dec.decode(raw[ENTRY_HEAD.size : ENTRY_HEAD.size + mlen])["objs"]
        return sum(1 for o in objs if o[3] == REMOVED)
    except (struct.error, msgspec.DecodeError, KeyError, TypeError, IndexError):
        return -1


def merge_chunks(a: bytes, b: bytes) -> bytes | None:
    """Two copies of one chunk (the same entries, perhaps with other bodies removed), merged slot by
    slot into the one with the most rows removed; None if they are not copies of one chunk."""
    try:
        ca, cb = chunk_decoder.decode(a), chunk_decoder.decode(b)
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
    return encoder.encode(Chunk(ca.fmt, ca.prev, ca.first, slots))


def block_object(raw: bytes, loc: Loc) -> bytes:
    """One object of an entry from the entry's bytes (hash-checked by the caller)."""
    stored = raw[loc.block_off : loc.block_off + loc.stored_len]
    block = _decompressor().decompress(stored, max_output_size=loc.block_raw) if loc.comp == COMP_ZSTD else stored
    return block[loc.off : loc.off + loc.length]


def objects_of(raw: bytes, e: LogEntry, dec: Any = None) -> list:
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


def strip_entry(raw: bytes, e: LogEntry, gone: set) -> tuple[bytes, dict] | None:
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
