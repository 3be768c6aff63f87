"""Commit entries as bytes: the decoded ``LogEntry``, large blobs, and how a writer lays an entry out.

Invariants kept here:

* records and blob bodies never share a block, so walking chains decompresses no body;
* an entry's index rows (``recs``, ``prevs``) come from the facts of its objects, in object order;
* a block smaller than ``MIN_COMPRESS``, or one zstd does not shrink, is stored raw;
* an object whose body is not in the log (``RemovedBody``: an upgrade replaying a store whose gc removed it)
  has its row, with block ``REMOVED``, and no bytes.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .. import codec
from .format import (
    BLOCK_BYTES,
    CHAIN_TYPES,
    COMP_RAW,
    COMP_ZSTD,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    ENTRY_TRAILER,
    MIN_COMPRESS,
    REMOVED,
    ZERO,
    _compressor,
    _decompressor,
    _enc,
    logical_checksum,
)


class LogEntry(NamedTuple):
    """One decoded commit entry (meta only; blocks are read on demand)."""

    n: int
    time: float
    moves: list  # [name, old, new, reason]
    objs: list  # [id, type, raw length, block, offset]
    blocks: list  # [comp, raw length, stored length]
    cut: list | None  # [segment, offset, length, blake3 hex] of a torn tail this entry's writer removed
    seg: int
    offset: int  # file offset of the entry
    data_off: int  # file offset of its first block
    length: int
    checksum: bytes
    recs: list = []  # [obj index, run, branch, lsn, parent, kind, refs, intent facts]: a record's index row
    prevs: list = []  # [obj index, previous]: a journal/segment/grant object's chain link
    root: bytes = ZERO  # root of the derived tables after this entry (TableRoot)
    seal: bool = False  # the last entry of its segment: the next one follows in the next segment
    idx: list | None = None  # [segment, BLAKE3 of its index file]: the sealed segment's index, named by the log
    rw: list | None = None  # [[segment, BLAKE3 of its file, BLAKE3 of its index]]: segments gc rewrote (a rewrite entry)
    bofs: list | None = None  # file offset of each block (a packed segment's blocks are shared; else back to back from data_off)


class LargeBlob:
    """A blob too large to hold in memory: its canonical bytes already zstd-compressed, as one
    frame, into a spill file (``Store.put_blob_stream``). It becomes a block of its own."""

    def __init__(self, path: str, raw_len: int, stored_len: int) -> None:
        self.path, self.raw_len, self.stored_len = path, raw_len, stored_len

    def __len__(self) -> int:
        return self.raw_len

    def read_all(self) -> bytes:
        with open(self.path, "rb") as f:
            return _decompressor().decompress(f.read(), max_output_size=self.raw_len)

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


class RemovedBody:
    """An object whose body gc removed before ``objstore upgrade`` replayed its entry into a log of format 6:
    its id, type and length are known (the old entry's row, which the chain checksum covers), its bytes are not.
    Its row in the new entry has block ``REMOVED`` and offset 0, as in a packed segment."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


def build_entry(prev: bytes, n: int, t: float, objects: list, moves: list, cut: list | None,
                compress: bool = True, facts: dict | None = None, root: bytes = ZERO, seal: bool = False,
                idx: list | None = None, rw: list | None = None, seg: int = 0, at: int = 0) -> tuple[bytes | list, LogEntry]:
    """The bytes of one commit entry and its decoded form (offsets relative to the entry's start, or to the
    file if the writer says where it goes: segment ``seg``, offset ``at``).

    Records and blob bodies never share a block, so walking chains decompresses no body.
    ``facts``: id -> object_facts(...) of the objects that have them."""
    objs: list = []
    blocks: list = []
    data: list = []
    for blobs in (False, True):
        cur: list = []
        cur_len = 0
        for oid, otype, canon in objects:
            if (otype == codec.BLOB) != blobs:
                continue
            if isinstance(canon, RemovedBody):  # a row without a body: no block
                objs.append([oid, otype, canon.length, REMOVED, 0])
                continue
            if isinstance(canon, LargeBlob):  # a block of its own, streamed from its spill file
                objs.append([oid, otype, canon.raw_len, len(blocks), 0])
                blocks.append([COMP_ZSTD, canon.raw_len, canon.stored_len])
                data.append(canon)
                continue
            cur.append((oid, otype, canon))
            cur_len += len(canon)
            if cur_len >= BLOCK_BYTES:
                _block(cur, objs, blocks, data, compress)
                cur, cur_len = [], 0
        if cur:
            _block(cur, objs, blocks, data, compress)
    recs: list = []
    prevs: list = []
    if facts:
        for i, o in enumerate(objs):
            f = facts.get(o[0])
            if f is None:
                continue
            if o[1] == codec.RECORD:
                recs.append([i, *f])
            elif o[1] in CHAIN_TYPES:
                prevs.append([i, *f])
    checksum = logical_checksum(prev, n, t, objs, moves, cut, recs, prevs, root, seal, idx, rw)
    fields = {"n": n, "t": t, "moves": moves, "objs": objs, "blocks": blocks, "cut": cut,
              "recs": recs, "prevs": prevs, "root": root, "seal": seal, "idx": idx}
    if rw is not None:
        fields["rw"] = rw
    meta = _enc.encode(fields)
    dlen = sum(b[2] for b in blocks)
    length = ENTRY_HEAD.size + len(meta) + dlen + ENTRY_TRAILER.size
    head = ENTRY_HEAD.pack(ENTRY_MAGIC, len(meta), dlen) + meta
    trailer = ENTRY_TRAILER.pack(length, checksum)
    e = LogEntry(n, t, moves, objs, blocks, cut, seg, at, at + ENTRY_HEAD.size + len(meta), length, checksum, recs, prevs, root, seal, idx, rw)
    if any(isinstance(d, LargeBlob) for d in data):
        return [head, *data, trailer], e  # parts: written one after another (LargeBlob from its file)
    return b"".join((head, *data, trailer)), e


def _block(members: list, objs: list, blocks: list, data: list, compress: bool) -> None:
    raw = b"".join(c for _, _, c in members) if len(members) > 1 else members[0][2]
    comp, stored = COMP_RAW, raw
    if compress and len(raw) >= MIN_COMPRESS:
        z = _compressor().compress(raw)
        if len(z) < len(raw) - 16:
            comp, stored = COMP_ZSTD, z
    bi = len(blocks)
    off = 0
    for oid, otype, c in members:
        objs.append([oid, otype, len(c), bi, off])
        off += len(c)
    blocks.append([comp, len(raw), len(stored)])
    data.append(stored)


def block_starts(e: LogEntry) -> list:
    """The file offset of each of an entry's blocks: back to back from its data, or (a packed
    segment) where the segment's block list puts them."""
    if e.bofs is not None:
        return e.bofs
    off = e.data_off
    starts = []
    for b in e.blocks:
        starts.append(off)
        off += b[2]
    return starts
