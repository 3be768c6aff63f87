"""The storage engine: one append-only log of commit entries per store (format 3).

A *commit entry* carries everything one commit does: its objects and its ref
moves ``(name, old, new, reason)``, its time, and a trailer holding its length
and a BLAKE3 checksum over the entry's logical content (object ids, types,
uncompressed lengths, ref moves, time, cut) plus the previous entry's checksum.
The log is therefore a hash chain, and an entry is one ``write`` and one
``fdatasync``: the only commit point. Nothing else is ever written on the
commit path.

Entries live in segment files ``log/<10 digits>.seg``; the highest-numbered one
is active, the others are sealed and never change. Writers serialize on an
exclusive ``flock`` of ``lock`` (across processes) plus an in-process lock
(across threads); under it a writer catches up on entries others appended,
cuts a torn tail (recording the cut in its own entry), checks expectations
against the current refs, appends, syncs and releases.

Readers never take the writer lock. A reader's view of the log is a position:
every complete, checksummed entry up to it and nothing after. A last entry
that is incomplete or fails its checksum is torn and invisible.

The engine keeps, derived from the entries and nothing else: the ref table,
the location of every object, and the chain index (per branch: LSN -> record
id, and the intent records with their LSNs), which makes fork and rewind O(1).

Two engines share one interface (``Engine``): ``LogEngine`` (files) and
``MemoryEngine`` (tests, throwaway stores). docs/FORMAT.md is the reference.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, NamedTuple

import blake3
import msgspec
import zstandard

from ..errors import (
    BodyRemoved,
    Conflict,
    CorruptLog,
    IntegrityError,
    InvalidInput,
    LockTimeout,
    ObjectNotFound,
    ObjstoreError,
    Refused,
    SnapshotGone,
    StorageOSError,
)
from . import authority, codec, packed, runrefs, segindex
from . import labels as labels_mod
from .fileutil import FsyncPolicy, write_derived
from .refs import _NOT_A_CHAIN, check_move, forward_only
from .runrefs import RUN_PREFIX as _RUN_PREFIX
from .runrefs import run_of as _run_of

SEG_MAGIC = b"OSSG\x03\x00\x00\x00"
SEG_HEADER = struct.Struct("<8sQQ32s")  # magic, segment number, first entry number, previous checksum
ENTRY_MAGIC = b"OSE3"
ENTRY_HEAD = struct.Struct("<4sIQ")  # magic, meta length, data length
ENTRY_TRAILER = struct.Struct("<Q32s")  # whole entry length, chain checksum
MAX_META = 256 << 20
MAX_ENTRY_DATA = 1 << 40
ZERO = b"\x00" * 32
SEAL_BYTES = 8 << 20  # a segment is sealed once it passes this size
CHECKPOINT_ENTRIES = 1000  # a writer checkpoints the tables after this many entries...
CHECKPOINT_BYTES = 4 << 20  # ...or this many bytes of log since the last checkpoint (readers add their own)
OPEN_CHECKPOINT = 200  # a reader that replayed this many entries at open leaves a checkpoint behind...
OPEN_CHECKPOINT_BYTES = 128 << 10  # ...or this many bytes of log
BLOCK_BYTES = 128 << 10  # objects are laid into blocks of about this many raw bytes
TAIL_WINDOW = 4 << 20  # readers take in the log's tail this many bytes at a time
LARGE_BLOB = 8 << 20  # blobs above this stream in and out, each in a block of its own
PRECHECK_RAW = 16 << 20  # a block declaring more raw bytes is hash-checked while streaming before it is held
CHECK_SIZE_ABOVE = 1 << 20  # a stored length above this is checked against the segment file's size before reading
ZSTD_LEVEL = 1
COMP_RAW, COMP_ZSTD = 0, 1
COMP_GONE = 2  # an index row whose object's body gc removed (a recorded deletion or redaction named it)
REMOVED = -1  # a packed segment's object row whose body gc removed: no block
WITNESS_MAGIC = b"OSW3"
WITNESS = struct.Struct("<4sQ32s")  # magic, entry number, chain checksum: log/witness
REPAIRS_REF = "log/repairs"  # the ref naming the newest repair's note (lifecycle.repair writes it)

_enc = msgspec.msgpack.Encoder(order="sorted", enc_hook=codec.id_hook)  # an Id in a low-level call: its plain bytes
_dec = msgspec.msgpack.Decoder()
STATS = {"entries_decoded": 0, "blocks_read": 0}  # what 'counted, not timed' tests count
_zc = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_zc, "c", None)
    if c is None:
        c = _zc.c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        _zc.d = zstandard.ZstdDecompressor()
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    _compressor()
    return _zc.d


class Position(NamedTuple):
    """A log position: the number of entries it includes and the chain checksum after the last."""

    entry: int
    checksum: bytes


class Loc(NamedTuple):
    """Where an object is: entry number, segment, offset of its block's bytes, block kind, sizes, offset in block."""

    entry: int
    seg: int
    block_off: int  # file offset of the stored block
    comp: int
    stored_len: int
    block_raw: int
    off: int  # offset of the object's canonical bytes inside the decompressed block
    length: int  # canonical length
    otype: str


class Entry(NamedTuple):
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


def logical_checksum(prev: bytes, n: int, t: float, objs: list, moves: list, cut: list | None, recs: list = (),  # type: ignore[assignment]
                     prevs: list = (), root: bytes = ZERO, seal: bool = False, idx: list | None = None,  # type: ignore[assignment]
                     rw: list | None = None) -> bytes:
    """The chain checksum: over logical content (ids, types, lengths, index rows, moves, the tables'
    root), never over compressed bytes or block layout, so recompression or a repack keeps it. A
    rewrite entry's ``rw`` is appended (only when present, so every other entry hashes as before)."""
    fields = [n, t, [[o[0], o[1], o[2]] for o in objs], moves, cut, recs, prevs, root, seal, idx]
    if rw is not None:
        fields.append(rw)
    logical = _enc.encode(fields)
    return blake3.blake3(prev + logical).digest()


# -- the root of the derived tables ------------------------------------------------------
#
# The tables a reader derives from the log (refs, branch tips, intent facts, run starts, the
# digests of sealed segments' indexes) are a set of elements. Their root is an LtHash-style
# homomorphic set hash: each element is expanded by BLAKE3's XOF to 2048 bytes, read as an
# integer, and the elements are summed modulo 2**16384; the root is BLAKE3 of the sum. Adding or
# removing an element is one XOF and one addition, so a commit updates the root in time that does
# not depend on the store's size, and a checkpoint's tables can be checked against the root the
# log commits to. (A sum of 256-bit hashes would not do: Wagner's generalized birthday attack finds
# collisions; at 16384 bits the sum is as hard to collide as LtHash16's 1024 lanes.)

ROOT_BYTES = 2048
_ROOT_MOD = (1 << (8 * ROOT_BYTES)) - 1


def _elt(key: list) -> int:
    return int.from_bytes(blake3.blake3(_enc.encode(key)).digest(ROOT_BYTES), "little")


def root_digest(acc: int) -> bytes:
    return blake3.blake3((acc & _ROOT_MOD).to_bytes(ROOT_BYTES, "little")).digest()


def run_digest(refs: dict, tips: dict, start: int | None) -> bytes | None:
    """One run's share of the tables, as one element: its refs, its chains' newest records and its
    run_started entry (None: the run has none of them)."""
    if not refs and not tips and start is None:
        return None
    return blake3.blake3(_enc.encode([sorted(refs.items()), sorted([b, lsn, oid] for b, (lsn, oid) in tips.items()), start])).digest()


def table_elements(refs: dict, tips: dict, intents: dict, starts: dict, idx: dict, run_refs: dict | None = None,
                   packs: dict | None = None) -> Iterator[list]:
    """Every element of the tables' set, as the root hashes it: one per run (``run_digest``), one
    per ref outside the runs, one per intent fact, one per index digest. ``run_refs``: ``refs``
    grouped by run already (``Tables.run_refs``), if the caller has it."""
    if run_refs is None:
        run_refs = {}
        for name, value in refs.items():
            run = _run_of(name)
            if run is not None:
                run_refs.setdefault(run, {})[name] = value
    for name, value in refs.items():
        if not name.startswith(_RUN_PREFIX) or _run_of(name) is None:
            yield ["r", name, value]
    run_tips: dict = {}
    for (run, branch), tip in tips.items():
        run_tips.setdefault(run, {})[branch] = tip
    for run in sorted(set(run_refs) | set(run_tips) | set(starts)):
        d = run_digest(run_refs.get(run, {}), run_tips.get(run, {}), starts.get(run))
        if d is not None:
            yield ["R", run, d]
    for run, facts in intents.items():
        for branch, lsn, kind, body, oid in facts:
            yield ["i", run, branch, lsn, kind, body, oid]
    for seg, digest in idx.items():
        yield ["x", seg, digest]
    for seg, digest in (packs or {}).items():
        yield ["w", seg, digest]


def tables_root(refs: dict, tips: dict, intents: dict, starts: dict, idx: dict, packs: dict | None = None) -> int:
    acc = 0
    for key in table_elements(refs, tips, intents, starts, idx, packs=packs):
        acc += _elt(key)
    return acc & _ROOT_MOD


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


def encode_entry(prev: bytes, n: int, t: float, objects: list, moves: list, cut: list | None,
                 compress: bool = True, tables: Tables | None = None) -> tuple[bytes | list, bytes]:
    """(entry bytes, checksum) for ``objects`` = [(id, type, canonical bytes)], with the index rows
    taken from the objects themselves and the root of ``tables`` (default: empty) after the entry.

    What a crafted entry looks like when its author computes everything a writer computes: tests
    use it to forge checksum-valid entries."""
    t0 = tables if tables is not None else Tables()
    facts = _facts_of(objects)
    got = t0.plan(n, [(o[0], o[1]) for o in objects], facts, moves, None)
    root = got.root if isinstance(got, Plan) else ZERO
    data, entry = build_entry(prev, n, t, objects, moves, cut, compress, facts=facts, root=root)
    return data, entry.checksum


def encode_next(tables: Tables, t: float, objects: list, moves: list, compress: bool = True, seg: int = 1,
                off: int = 0, idx: list | None = None) -> tuple[bytes | list, Entry]:
    """The next entry after ``tables``' position, built as a writer builds it (index rows, rules,
    root), and ``tables`` advanced past it; raises Refused if it breaks a rule. For the golden
    fixtures and for tests that must craft checksum-valid entries byte by byte."""
    facts = _facts_of(objects)
    n = tables.pos.entry + 1
    plan = tables.plan(n, [(o[0], o[1]) for o in objects], facts, moves, idx)
    if isinstance(plan, str):
        raise Refused(plan)
    data, e = build_entry(tables.pos.checksum, n, t, objects, moves, None, compress, facts=facts, root=plan.root, idx=idx)
    e = e._replace(seg=seg, offset=off, data_off=off + e.data_off)
    tables.commit(plan, n, e.checksum, t)
    return data, e


def _facts_of(objects: list) -> dict:
    """id -> object_facts of those of ``objects`` [(id, type, canonical bytes or LargeBlob)] that have them."""
    return {oid: f for oid, otype, canon in objects if otype == codec.RECORD or otype in CHAIN_TYPES
            if (f := object_facts(otype, canon if isinstance(canon, bytes) else canon.read_all(), None, oid)) is not None}


def object_facts(otype: str, canonical: bytes, value: Any, oid: bytes | None = None) -> list | None:
    """The index facts an entry's meta carries for one object: for a record ``[run, branch, lsn,
    parent, kind, refs, intent facts]``, for a journal, segment or grant object ``[previous]``;
    None for other objects. ``value``: the decoded payload if the caller has it."""
    if otype == codec.RECORD:
        if value is None:
            try:
                value = codec.decode(canonical, oid, False)[1]
            except Exception:
                return None
        try:
            run, branch, lsn, parent, kind, body = value["run"], value["branch"], value["lsn"], value["parent"], value["kind"], value["body"]
        except (KeyError, TypeError):
            return None
        if type(run) is not str or type(branch) is not int or type(lsn) is not int or type(kind) is not str or not (
                parent is None or (type(parent) is bytes and len(parent) == 32)) or not isinstance(body, dict):
            return None
        row = [run, branch, lsn, parent, kind, body_refs(body), intent_facts(kind, body)]
        if "labels" in value:  # format 5: a labelled record's row carries its labels (storage.labels)
            rows = labels_mod.canonical(value["labels"])
            if rows is None:
                return None
            row.append(rows)
        return row
    if otype in CHAIN_TYPES:
        if value is None:
            try:
                value = codec.decode(canonical, oid, False)[1]
            except Exception:
                return None
        if not isinstance(value, dict) or "previous" not in value:
            return None
        prev = value["previous"]
        row = [prev if prev is None or (type(prev) is bytes and len(prev) == 32) else False]
        if otype == codec.SCHEMA:  # format 5: the kind it declares, so the schema/<kind> rule needs no read
            kind = value.get("kind")
            row.append(kind if type(kind) is str else False)
        return row
    return None


CHAIN_TYPES = ("journal", "segment", "grant", "deletion", "schema")
INTENT_KINDS = ("intent", "intent_committed")
_INTENT_FIELDS = ("intent", "step", "effect", "idempotent")


def body_refs(body: dict) -> list:
    """Every object id a record body names: 32-byte values at its top level, or one level down, in
    the canonical order of the body (keys sorted), whatever order the writer's dict has."""
    found: list = []
    for k, v in body.items():
        tv = type(v)
        if tv is bytes:
            if len(v) == 32:
                found.append((k, "", v))
        elif tv is dict:
            for k2, x in v.items():
                if type(x) is bytes and len(x) == 32:
                    found.append((k, k2, x))
        elif tv is list:
            for i, x in enumerate(v):
                if type(x) is bytes and len(x) == 32:
                    found.append((k, f"{i:020d}", x))
    if not found:
        return found
    if len(found) > 1:
        found.sort()  # the canonical order: keys sorted (str order is UTF-8 byte order), list order kept
    return [f[2] for f in found]


def intent_facts(kind: str, body: dict) -> dict | None:
    """What compensation needs of an intent or intent_committed record: its key, step, effect and
    idempotent flag (those the body has)."""
    if kind not in INTENT_KINDS:
        return None
    return {k: body[k] for k in _INTENT_FIELDS if k in body}


def build_entry(prev: bytes, n: int, t: float, objects: list, moves: list, cut: list | None,
                compress: bool = True, facts: dict | None = None, root: bytes = ZERO, seal: bool = False,
                idx: list | None = None, rw: list | None = None) -> tuple[bytes | list, Entry]:
    """The bytes of one commit entry and its decoded form (offsets relative to the entry's start).

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
    e = Entry(n, t, moves, objs, blocks, cut, 0, 0, ENTRY_HEAD.size + len(meta), length, checksum, recs, prevs, root, seal, idx, rw)
    if any(isinstance(d, LargeBlob) for d in data):
        return [head, *data, trailer], e  # parts: written one after another (LargeBlob from its file)
    return b"".join((head, *data, trailer)), e


MIN_COMPRESS = 512  # smaller blocks are stored raw: zstd saves little there and costs a commit's worth of CPU


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


def has_entry_after(buf: bytes | bytearray | memoryview, start: int, min_n: int = 0) -> bool:
    """Whether a complete entry starts at or after ``start``: magic, sizes, a trailer length that
    agrees, and a meta that decodes with an entry number of at least ``min_n``."""
    i = start
    buf = bytes(buf)
    while True:
        i = buf.find(ENTRY_MAGIC, i)
        if i < 0 or len(buf) - i < ENTRY_HEAD.size:
            return False
        _, mlen, dlen = ENTRY_HEAD.unpack_from(buf, i)
        length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
        if mlen <= MAX_META and length <= len(buf) - i:
            if ENTRY_TRAILER.unpack_from(buf, i + length - ENTRY_TRAILER.size)[0] == length:
                try:
                    n = _dec.decode(buf[i + ENTRY_HEAD.size : i + ENTRY_HEAD.size + mlen])["n"]
                    if type(n) is int and n >= min_n:
                        return True
                except (msgspec.DecodeError, KeyError, TypeError):
                    pass
        i += 1


def _check_meta(meta: bytes, checksum: bytes, prev: bytes, expect_n: int | None, dlen: int, removed_ok: bool = False) -> tuple | str:
    """(n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx) of an entry's meta, checked
    against its trailer's chain checksum, the expected entry number and the data length; or the
    reason it is not valid."""
    STATS["entries_decoded"] += 1
    try:
        m = _dec.decode(meta)
        n, t, moves, objs, blocks, cut = m["n"], m["t"], m["moves"], m["objs"], m["blocks"], m["cut"]
        recs, prevs, root, seal, idx = m["recs"], m["prevs"], m["root"], m["seal"], m["idx"]
        rw = m.get("rw")
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError) as e:
        return f"undecodable entry meta: {'no field ' if isinstance(e, KeyError) else ''}{e}"
    try:
        if logical_checksum(prev, n, t, objs, moves, cut, recs, prevs, root, seal, idx, rw) != checksum:
            return "checksum mismatch"
        if sum(b[2] for b in blocks) != dlen:
            return "block sizes disagree with the entry length"
    except (TypeError, IndexError, msgspec.EncodeError) as e:
        return f"malformed entry meta: {e}"
    if expect_n is not None and n != expect_n:
        return f"entry number {n} where {expect_n} was expected"
    bad = (_meta_shape_problem(n, t, moves, objs, blocks, removed_ok) or _rows_shape_problem(objs, recs, prevs, root, seal, idx)
           or _rw_shape_problem(rw))
    if bad is not None:
        return f"malformed entry meta: {bad}"
    return n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx, rw


def _rw_shape_problem(rw: Any) -> str | None:
    if rw is None:
        return None
    if type(rw) is not list or not rw or not all(
            type(r) is list and len(r) == 3 and type(r[0]) is int and r[0] > 0 and all(type(d) is bytes and len(d) == 32 for d in r[1:])
            for r in rw):
        return "rw is not [[segment, 32-byte file digest, 32-byte index digest], …]"
    return None


def _meta_shape_problem(n: Any, t: Any, moves: Any, objs: Any, blocks: Any, removed_ok: bool = False) -> str | None:
    """What is wrong with the shape of a checksummed entry's meta, or None. The checksum proves the
    entry is what its writer wrote, not that the writer was objstore: a crafted entry must not make
    a reader fail on a field of the wrong type or size later."""
    if type(n) is not int or type(t) not in (float, int) or type(moves) is not list or type(objs) is not list or type(blocks) is not list:
        return "n, t, moves, objs and blocks have the wrong types"
    for b in blocks:
        if type(b) is not list or len(b) < 3 or b[0] not in (COMP_RAW, COMP_ZSTD) or type(b[1]) is not int or type(b[2]) is not int or b[1] < 0 or b[2] < 0:
            return f"block {b!r:.60} is not [compression 0|1, raw length, stored length]"
        if b[0] == COMP_RAW and b[1] != b[2]:
            return "a raw block's stored and raw lengths differ"
    nb = len(blocks)
    for o in objs:
        if (type(o) is not list or len(o) != 5 or type(o[0]) is not bytes or len(o[0]) != 32 or type(o[1]) is not str
                or type(o[2]) is not int or type(o[3]) is not int or type(o[4]) is not int or o[4] < 0 or o[2] < 0
                or not ((0 <= o[3] < nb and o[4] + o[2] <= blocks[o[3]][1]) or (removed_ok and o[3] == REMOVED and o[4] == 0))):
            return f"object row {o!r:.80} is not [id, type, length, block, offset] inside its block"
    for m in moves:
        if type(m) is not list or len(m) != 4 or type(m[0]) is not str or type(m[3]) is not str or not all(
                v is None or type(v) is str or (type(v) is bytes and len(v) == 32) for v in (m[1], m[2])):
            return f"ref move {m!r:.80} is not [name, old, new, reason]"
    return None


def _rows_shape_problem(objs: list, recs: Any, prevs: Any, root: Any, seal: Any, idx: Any) -> str | None:
    """What is wrong with the shape of an entry's index rows, or None (see _meta_shape_problem)."""
    if type(recs) is not list or type(prevs) is not list or type(root) is not bytes or len(root) != 32 or type(seal) is not bool:
        return "recs, prevs, root and seal have the wrong types"
    if idx is not None and (type(idx) is not list or len(idx) != 2 or type(idx[0]) is not int or type(idx[1]) is not bytes or len(idx[1]) != 32):
        return "idx is not [segment, 32-byte digest]"
    no = len(objs)
    last = -1
    for r in recs:
        if (type(r) is not list or not (len(r) == 8 or len(r) == 9 and labels_mod.rows_ok(r[8])) or type(r[0]) is not int or not last < r[0] < no or objs[r[0]][1] != codec.RECORD
                or type(r[1]) is not str or type(r[2]) is not int or type(r[3]) is not int or r[2] < 0 or r[3] < 0
                or not (r[4] is None or (type(r[4]) is bytes and len(r[4]) == 32)) or type(r[5]) is not str
                or type(r[6]) is not list or not all(type(x) is bytes and len(x) == 32 for x in r[6])
                or not (r[7] is None or type(r[7]) is dict)):
            return f"record row {r!r:.80} is not [object, run, branch, lsn, parent, kind, refs, intent(, labels)]"
        last = r[0]
    last = -1
    for r in prevs:
        if (type(r) is not list or type(r[0]) is not int or not last < r[0] < no or objs[r[0]][1] not in CHAIN_TYPES
                or len(r) != (3 if objs[r[0]][1] == codec.SCHEMA else 2) or (len(r) == 3 and not (r[2] is False or type(r[2]) is str))
                or not (r[1] is None or r[1] is False or (type(r[1]) is bytes and len(r[1]) == 32))):
            return f"chain row {r!r:.80} is not [object, previous] (a schema's: [object, previous, kind])"
        last = r[0]
    return None


def parse_entry(buf: bytes, pos: int, end: int, prev: bytes, seg: int, expect_n: int | None, removed_ok: bool = False) -> Entry | str:
    """The entry at ``buf[pos:]`` or the reason it is not a complete, checksummed entry.
    ``removed_ok``: object rows whose body gc removed (block REMOVED) are allowed (an S3 log's entries)."""
    if end - pos < ENTRY_HEAD.size:
        return "incomplete entry header"
    magic, mlen, dlen = ENTRY_HEAD.unpack_from(buf, pos)
    if magic != ENTRY_MAGIC:
        return "bad entry magic"
    if mlen > MAX_META or dlen > MAX_ENTRY_DATA:
        return "impossible entry size"
    length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
    if end - pos < length:
        return f"incomplete entry ({end - pos} of {length} bytes)"
    tlen, checksum = ENTRY_TRAILER.unpack_from(buf, pos + length - ENTRY_TRAILER.size)
    if tlen != length:
        return "trailer length disagrees"
    got = _check_meta(bytes(buf[pos + ENTRY_HEAD.size : pos + ENTRY_HEAD.size + mlen]), checksum, prev, expect_n, dlen, removed_ok)
    if isinstance(got, str):
        return got
    n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx, rw = got
    return Entry(n, t, moves, objs, blocks, cut, seg, pos, pos + ENTRY_HEAD.size + mlen, length, checksum, recs, prevs, root, seal, idx, rw)


# -- the derived tables ---------------------------------------------------------------


def plan_taken(t: Tables, e: Entry) -> Plan | str:
    """The plan of an entry a reader takes in, from its meta alone (its index rows are the facts),
    checked against the rules and against the root the entry names; or what is wrong with it."""
    facts: dict = {}
    objs = e.objs
    for r in e.recs:
        facts[objs[r[0]][0]] = r[1:]
    for r in e.prevs:
        facts[objs[r[0]][0]] = r[1:]
    got = t.plan(e.n, [(o[0], o[1]) for o in objs], facts, e.moves, e.idx, e.rw)
    if isinstance(got, str):
        return got
    if got.root != e.root:
        return f"the root of the tables after it is {got.root.hex()}, the entry names {e.root.hex()}"
    return got


def deletion_rule(engine: Engine, n: int, objs: list, moves: list, bodies: Any, plan: Plan) -> str | None:
    """The deletion authority rule (objstore.storage.authority) for entry ``n`` (``objs``: rows
    (id, type, …) of its objects; ``plan``: its plan, whose chain rows place its own records),
    wherever it is applied: None unless it moves a deletion ref (a name check: every other commit
    pays nothing), else what breaks the rule. ``bodies()`` gives the function from an object of the
    entry to its canonical bytes."""
    if not authority.moves_deletion(moves):
        return None
    view = authority.EntryView(engine, n, moves, {o[0]: o[1] for o in objs}, bodies(), plan.chain)
    return authority.entry_problem(view, n, moves)


def entry_bodies(e: Entry, seg: int, read_loc: Any) -> Any:
    """``bodies`` for ``deletion_rule`` over an entry being taken in: each object read (hash-checked)
    where the entry holds it, through ``read_loc(oid, loc)``; None if it cannot be read."""
    def body(oid: bytes) -> bytes | None:
        starts = block_starts(e)
        for o in e.objs:
            if o[0] == oid and o[3] != REMOVED:
                comp, raw, stored = e.blocks[o[3]][:3]
                try:
                    data = read_loc(oid, Loc(e.n, seg, starts[o[3]], comp, stored, raw, o[4], o[2], o[1]))
                except (ObjstoreError, OSError, IndexError, zstandard.ZstdError):
                    return None
                return bytes(data) if blake3.blake3(data).digest() == oid else None
        return None
    return body


def txn_bodies(objects: dict) -> Any:
    """``bodies`` for ``deletion_rule`` over a writer's transaction ({id: (type, canonical)})."""
    def body(oid: bytes) -> bytes | None:
        got = objects.get(oid)
        if got is None:
            return None
        c = got[1]
        return bytes(c.read_all() if hasattr(c, "read_all") else c)
    return body


class Plan(NamedTuple):
    """What applying one entry changes in the tables, worked out (and checked against the rules)
    before anything changes: writers plan the entry they are about to write, readers each entry
    they take in, with the same function (``Tables.plan``)."""

    tips: dict  # (run, branch) -> (lsn, id): the final tip of each chain the entry extends
    chain: list  # (run, branch, lsn, id)
    intents: list  # (run, (branch, lsn, kind, facts, id))
    starts: list  # (run, entry)
    refs: dict  # name -> new value (None: deleted)
    idx: tuple | None  # (segment, digest) the entry names
    acc: int
    root: bytes
    runs: dict = {}  # run -> its run_digest after the entry
    rw: list | None = None  # [(segment, file digest, index digest)] a rewrite entry names
    labels: list = []  # (label key, record id) of the entry's labelled records
    lrows: bytes = b""  # the entry's label rows, packed (LABEL_ROW), in order
    lhash: Any = None  # the hash of the active segment's label rows after the entry (None: unchanged)


class Tables:
    """What the log says at a position: refs, object locations, the chain index.

    Everything here is derived from entries' metas (``plan`` / ``commit``) and nothing else.
    Object locations and chain rows are held here for the active segment only; sealed segments
    have their persistent index files, each named by digest in the log (``idx``)."""

    def __init__(self) -> None:
        self.pos = Position(0, ZERO)
        self.last_time: float | None = None
        self.refs: dict[str, Any] = {}
        self.run_refs: dict[str, dict[str, Any]] = {}  # run -> {name: value}: one run's refs without the others'
        self.locs: dict[bytes, Any] = {}  # active segment: id -> Loc
        self.chain: dict[tuple, bytes] = {}  # active segment: (run, branch, lsn) -> record id
        # The active segment's label rows (storage.labels), packed LABEL_ROW after LABEL_ROW in commit
        # order, and searched in place (memmem): a checkpoint's are taken whole, never unpacked. They are in
        # the root (a sealed segment's are in its index, named by digest): ``lhash`` hashes the bytes, and
        # the root holds ["L", its digest] while there are any.
        self.lrows = bytearray()
        self.lhash: Any = blake3.blake3()
        self._lindex: dict[bytes, list] | None = None  # key -> [(entry, id)], built once lookups are many
        self._lscans = 0
        self.frozen: segindex.SegmentIndex | None = None  # the active segment's rows as of the checkpoint (over bytes)
        self.tips: dict[tuple, tuple[int, bytes]] = {}  # (run, branch) -> (LSN, id) of the chain's newest record
        self.intents: dict[str, list] = {}  # run -> [(branch, lsn, kind, facts, id)] of intent / intent_committed records
        self.starts: dict[str, int] = {}  # run -> entry number of its run_started record (for 'latest')
        self.idx: dict[int, bytes] = {}  # sealed segment -> BLAKE3 of its index file, as the log names it
        self.packs: dict[int, bytes] = {}  # segment gc rewrote -> BLAKE3 of its packed file, as the last rewrite entry names it
        self.acc = 0  # the tables' root accumulator (see the root above)
        self.run_tips: dict[str, dict[int, tuple[int, bytes]]] = {}  # run -> branch -> tips' (LSN, id)
        self.run_dig: dict[str, bytes] = {}  # run -> run_digest of its tables
        self.dgen = 0  # bumped by each entry that moves a deletion ref (storage.erased keys its cache by it)
        # Tables adopted from a checkpoint took in the deletions of entries up to ``adopted`` without
        # applying those entries (so without the authority rule): each is checked where a read first
        # obeys it (``obey``), by ``confirm`` (the engine's), and its id joins ``checked``.
        self.adopted = 0
        self.checked: set[bytes] = set()
        self.confirm: Any = None

    def obey(self, name: str, value: Any) -> None:
        """Called by every read about to obey deletion ref ``name`` at ``value`` (hide a run or a
        record, withhold a body, refuse a write to a deleted run): CorruptLog, the line a replaying
        reader stops with, if it is a deletion these tables took in from a checkpoint and it breaks
        the authority rule. Checked once per process; otherwise a set-membership test."""
        if self.adopted and type(value) is bytes and value not in self.checked and self.confirm is not None:
            self.confirm(name, value)

    def set_ref(self, name: str, value: bytes | str | None) -> None:
        run = _run_of(name)
        if value is None:
            self.refs.pop(name, None)
            if run is not None:
                d = self.run_refs.get(run)
                if d is not None:
                    d.pop(name, None)
                    if not d:
                        del self.run_refs[run]
        else:
            self.refs[name] = value
            if run is not None:
                self.run_refs.setdefault(run, {})[name] = value

    def plan(self, n: int, objs: list, facts: dict, moves: list, idx: list | tuple | None, rw: list | None = None) -> Plan | str:
        """The changes entry ``n`` makes, or the rule it breaks (a string). ``objs``: [(id, type),
        …] of the entry's objects in order; ``facts``: id -> object_facts(...)."""
        types = {o[0]: o[1] for o in objs}
        acc = self.acc
        tips: dict = {}
        chain: list = []
        intents: list = []
        starts: list = []
        heads: dict = {}  # (run, branch) -> the value a record appended now must name as parent
        labelled: list = []  # (label key, record id): the entry's label rows (storage.labels)
        for oid, otype in objs:
            if otype != codec.RECORD:
                continue
            f = facts.get(oid)
            if f is None:
                return f"record {oid.hex()} has no index row"
            run, branch, lsn, parent, kind, _refs, ifacts = f[:7]
            key = (run, branch)
            tip = tips.get(key) or self.tips.get(key)
            want = tip[0] + 1 if tip is not None else 0
            if lsn != want:
                return f"record {oid.hex()} has LSN {lsn} on branch {branch} of run {run}, whose next LSN is {want}"
            cur = heads[key] if key in heads else self.refs.get(_branch_ref(run, branch))
            if lsn == 0 and (branch > 0 or kind == "run_started") and cur is None and types.get(parent) == codec.FORK:
                cur = parent  # forked (or, branch 0, copied) by this very entry: its first record follows the fork object
            if parent != cur:
                return (f"record {oid.hex()} (run {run} branch {branch} LSN {lsn}) names parent {_show(parent)}, "
                        f"but the branch's head is {_show(cur)}")
            heads[key] = oid
            tips[key] = (lsn, oid)
            chain.append((run, branch, lsn, oid))
            if len(f) > 7:
                labelled.extend((k, oid) for k in labels_mod.index_keys(run, branch, lsn, kind, f[7]))
            if kind == "run_started" and lsn == 0 and branch == 0 and run not in self.starts:
                starts.append((run, n))
            elif kind in INTENT_KINDS:
                fact = (branch, lsn, kind, ifacts, oid)
                intents.append((run, fact))
                acc += _elt(["i", run, *fact])
        refs: dict = {}
        ref_run: dict = {}  # name -> its run (None: a store-level ref), worked out once
        for m in moves:
            name, old, new = m[0], m[1], m[2]
            cur = refs[name] if name in refs else self.refs.get(name)
            if old != cur:
                return f"move of {name} from {_show(old)}, but the ref holds {_show(cur)}"
            run = ref_run[name] = _run_of(name) if name.startswith(_RUN_PREFIX) else None
            # only the namespaces that have rules pay for them: runs' chain refs and keys/
            if run is None or name.endswith(_CHAIN_SUFFIXES) or "/grant/" in name:
                bad = self._rule(name, old, new, types, facts)
                if bad is not None:
                    return bad
            refs[name] = new
            if run is None:
                if cur is not None:
                    acc -= _elt(["r", name, cur])
                if new is not None:
                    acc += _elt(["r", name, new])
        for (run, branch), (_lsn, oid) in tips.items():
            name = _branch_ref(run, branch)
            if (refs[name] if name in refs else self.refs.get(name)) != oid:
                return f"record {oid.hex()} is appended to branch {branch} of run {run}, but {name} does not move to it"
        for name, new in refs.items():
            run = ref_run[name]
            if run is None:
                continue
            b = _branch_num(run, name)
            if b is not None:
                tip = tips.get((run, b))
                if tip is None and types.get(new) != codec.FORK and not (type(new) is bytes and self.tips.get((run, b), (0, None))[1] == new):
                    return f"{name} moves to {_show(new)}, which is neither its chain's newest record nor a fork object of this entry"
            elif name == _live_ref(run):
                target = new[len(SYMREF):] if type(new) is str and new.startswith(SYMREF) else None
                b = _branch_num(run, target) if target is not None else None
                if new is not None and (target is None or b is None or (refs[target] if target in refs else self.refs.get(target)) is None):
                    return f"{name} moves to {_show(new)}, which is not an existing branch of run {run}"
        touched = {key[0] for key in tips}
        touched.update(r for r in ref_run.values() if r is not None)
        for run in touched:
            # A deleted run is gone for good: nothing is appended to it, forked from it or moved in it.
            gone = runrefs.deleted_ref(run)
            if gone in self.refs or gone in refs:
                if gone in self.refs:
                    self.obey(gone, self.refs[gone])
                if any(r == run for r, _b in tips):
                    return f"run {run} is deleted: no record is appended to it"
                moved = [name for name, r in ref_run.items() if r == run and not name.endswith(_DELETION_REFS)]
                if moved:
                    return f"run {run} is deleted: its ref {moved[0]} does not move"
        runs: dict = {}
        for run in touched:
            rr = dict(self.run_refs.get(run, ()))
            for name, value in refs.items():
                if ref_run[name] == run:
                    if value is None:
                        rr.pop(name, None)
                    else:
                        rr[name] = value
            rt = dict(self.run_tips.get(run, ()))
            for (r, b), tip in tips.items():
                if r == run:
                    rt[b] = tip
            start = self.starts.get(run)
            if start is None and starts:
                start = next((e for r, e in starts if r == run), None)
            new_d = run_digest(rr, rt, start)
            old_d = self.run_dig.get(run)
            if old_d != new_d:
                if old_d is not None:
                    acc -= _elt(["R", run, old_d])
                if new_d is not None:
                    acc += _elt(["R", run, new_d])
            runs[run] = new_d
        if starts:  # only an entry creating a run pays: its run_started row must give the run id
            bad = self._birth_rule(starts, chain, facts, refs)
            if bad is not None:
                return bad
        got_idx = None
        if idx is not None:
            seg, digest = idx[0], idx[1]
            if seg in self.idx:
                return f"the index of segment {seg} is named twice"
            got_idx = (seg, digest)
            acc += _elt(["x", seg, digest])
        got_rw: list | None = None
        if rw is not None:
            # A rewrite entry (gc): a sealed segment's file and index are replaced by ones with the
            # same logical entries; the tables name the new digests instead of the old.
            bad = _rw_shape_problem(rw)  # readers refuse such a meta: a writer must not write one
            if bad is not None:
                return bad
            got_rw = []
            for seg, file_digest, idx_digest in rw:
                old = self.idx.get(seg)
                if old is None or (got_idx is not None and got_idx[0] == seg):
                    return f"a rewrite of segment {seg}, which is not a sealed segment with a named index"
                if any(r[0] == seg for r in got_rw):
                    return f"segment {seg} is rewritten twice in one entry"
                acc += _elt(["x", seg, idx_digest]) - _elt(["x", seg, old])
                prior = self.packs.get(seg)
                if prior is not None:
                    acc -= _elt(["w", seg, prior])
                acc += _elt(["w", seg, file_digest])
                got_rw.append((seg, file_digest, idx_digest))
        lrows = b""
        lhash = None
        had = bool(self.lrows)
        if got_idx is not None and had:
            # the segment before is sealed: its label rows are in its index now, which the log names by digest
            acc -= _elt(["L", self.lhash.digest()])
            lhash, had = blake3.blake3(), False
        if labelled:
            lrows = b"".join(LABEL_ROW.pack(k, n, oid) for k, oid in labelled)
            if had:
                acc -= _elt(["L", self.lhash.digest()])
            lhash = (lhash or self.lhash).copy()
            lhash.update(lrows)
            acc += _elt(["L", lhash.digest()])
        acc &= _ROOT_MOD
        return Plan(tips, chain, intents, starts, refs, got_idx, acc, root_digest(acc), runs, got_rw, labelled, lrows, lhash)

    def _rule(self, name: str, old: Any, new: Any, types: dict, facts: dict) -> str | None:
        """The one check of a ref move's rules (write-once keys, forward-only chains), wherever an
        entry is applied: by its writer, by every reader that takes it in, by verify."""
        if not forward_only(name):
            return None
        try:
            check_move(name, old, new, lambda oid, want: _previous(oid, want, types, facts), lambda oid: oid in types)
        except ObjstoreError as e:
            return str(e.args[0]) if e.args else str(e)
        if isinstance(new, bytes) and new not in types and not name.startswith(KEYS_PREFIX):
            return f"ref {name} moves only to an object stored in the same commit"
        if name.startswith(runrefs.SCHEMA_PREFIX):
            f = facts.get(new)
            declared = f[1] if f is not None and len(f) > 1 else None
            if declared != name[len(runrefs.SCHEMA_PREFIX):]:
                return f"ref {name} moves only to a schema of its own kind, not one declaring {declared!r}"
        return None

    def _birth_rule(self, starts: list, chain: list, facts: dict, refs: dict) -> str | None:
        """The rule of creating a run, judged from the ``run_started`` record's index row (its labels)
        wherever an entry is applied (``storage.labels.birth_problem``): a labelled run's id is the one
        its labels give, an ``l-`` id is a labelled run's, and generation g ≥ 1 of a label set is
        created only once generations 0 … g−1 are deleted runs (in the tables, or by this entry)."""
        def deleted(run: str) -> bool:
            name = runrefs.deleted_ref(run)
            if name in refs:
                return refs[name] is not None
            gone = self.refs.get(name)
            if gone is not None:
                self.obey(name, gone)  # a generation born past a deletion: only one that holds
            return gone is not None

        for run, _n in starts:
            oid = next(o for r, b, lsn, o in chain if r == run and b == 0 and lsn == 0)
            f = facts[oid]
            bad = labels_mod.birth_problem(run, f[7] if len(f) > 7 else None, deleted)
            if bad is not None:
                return f"run_started record {oid.hex()} of run {run}: {bad}"
        return None

    def commit(self, p: Plan, n: int, checksum: bytes, t: float) -> None:
        """Apply a plan (its rules already checked). Once per entry: a writer's own entry may have been
        taken in from the file already, by a reader thread of the same process between the write and
        the writer's apply — the tables are then as the entry leaves them (a label row added twice
        would be a row its segment's index does not hold)."""
        if n <= self.pos.entry:
            return
        self.tips.update(p.tips)
        for (run, branch), tip in p.tips.items():
            self.run_tips.setdefault(run, {})[branch] = tip
        for run, d in p.runs.items():
            if d is None:
                self.run_dig.pop(run, None)
            else:
                self.run_dig[run] = d
        for run, branch, lsn, oid in p.chain:
            self.chain[(run, branch, lsn)] = oid
        if p.idx is not None:
            self.lrows = bytearray()  # the sealed segment's label rows are its index's now
            self._lindex = None
        self.lrows += p.lrows
        if self._lindex is not None and p.lrows:
            for k, n_, oid in LABEL_ROW.iter_unpack(p.lrows):
                self._lindex.setdefault(k, []).append((n_, oid))
        if p.lhash is not None:
            self.lhash = p.lhash
        for run, fact in p.intents:
            self.intents.setdefault(run, []).append(fact)
        for run, entry in p.starts:
            self.starts[run] = entry
        for name, value in p.refs.items():
            self.set_ref(name, value)
        if p.refs and authority.moves_deletion(p.refs):  # a name check per moved ref: true only for rare entries
            self.dgen += 1
        if p.idx is not None:
            self.idx[p.idx[0]] = p.idx[1]
        if p.rw is not None:
            for seg, file_digest, idx_digest in p.rw:
                self.idx[seg] = idx_digest
                self.packs[seg] = file_digest
        self.acc = p.acc
        self.pos = Position(n, checksum)
        self.last_time = t

    def recompute_root(self) -> int:
        """The accumulator of the tables as they stand (a checkpoint's, to check it against the log);
        also remakes the per-run digests it is built from."""
        self.run_tips = {}
        for (run, branch), tip in self.tips.items():
            self.run_tips.setdefault(run, {})[branch] = tip
        acc = 0
        self.run_dig = {}
        for key in table_elements(self.refs, self.tips, self.intents, self.starts, self.idx, self.run_refs, self.packs):
            if key[0] == "R":
                self.run_dig[key[1]] = key[2]
            acc += _elt(key)
        self.lhash = blake3.blake3(bytes(self.lrows))  # one pass in C, whatever the number of rows
        if self.lrows:
            acc += _elt(["L", self.lhash.digest()])
        return acc & _ROOT_MOD

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """(entry, record id) of the active segment's label rows with this key: a search in C over the
        packed rows for the first few look-ups of a process (a fresh reader's get_tuple unpacks nothing),
        then a dict built once and kept up to date (a listing looks up one label per checkpoint)."""
        if self._lindex is None:
            self._lscans += 1
            if self._lscans > 8:
                index: dict[bytes, list] = {}
                for k, n, oid in LABEL_ROW.iter_unpack(self.lrows):
                    index.setdefault(k, []).append((n, oid))
                self._lindex = index
        if self._lindex is not None:
            return list(self._lindex.get(key, ()))
        rows, buf, size = [], self.lrows, LABEL_ROW.size
        at = buf.find(key)
        while at >= 0:
            if at % size == 0:
                _k, n, oid = LABEL_ROW.unpack_from(buf, at)
                rows.append((n, oid))
                at = buf.find(key, at + size)
            else:
                at = buf.find(key, at + 1)
        return rows

    # -- checkpoints ------------------------------------------------------------------
    def active_rows(self, labels: bool = True) -> tuple[list, list]:
        """(object rows, chain rows) of the active segment, in segindex.build's form (``labels``:
        with its label rows, as its sealed index holds them; a checkpoint keeps them apart)."""
        objects = [(oid, l.entry, l.block_off, l.stored_len, l.block_raw, l.off, l.length, l.comp, l.otype) for oid, l in self.locs.items()]
        chain: list[tuple] = [(r, b, lsn, oid) for (r, b, lsn), oid in self.chain.items()]
        if labels:
            chain.extend(LABEL_ROW.iter_unpack(self.lrows))
        if self.frozen is not None:
            objects.extend(self.frozen.object_rows())
            chain.extend(self.frozen.chain_rows())
        return objects, chain

    def dump(self, seg: int, off: int, first: int) -> bytes:
        objects, chain = self.active_rows(labels=False)
        return _enc.encode({
            "v": 3, "seg": seg, "off": off, "entry": self.pos.entry, "checksum": self.pos.checksum, "time": self.last_time,
            "refs": [[k, v] for k, v in self.refs.items()],
            "tips": [[r, b, lsn, oid] for (r, b), (lsn, oid) in self.tips.items()],
            "intents": self.intents, "starts": self.starts, "idx": [[k, v] for k, v in self.idx.items()],
            "packs": [[k, v] for k, v in self.packs.items()],
            # the active segment's rows in the index layout: looked up in place, never unpacked
            "active": segindex.build(seg, first, self.pos.entry, self.pos.checksum, objects, chain),
            # the active segment's label rows: in the root (["L", digest of their set hash]), so adopted only as the log says
            **({"labels": bytes(self.lrows)} if self.lrows else {}),
        })

    @classmethod
    def load(cls, data: bytes) -> tuple[Tables, int, int]:
        m = _dec.decode(data)
        if m.get("v") != 3:
            raise ValueError("checkpoint version")
        t = cls()
        t.pos = Position(m["entry"], m["checksum"])
        t.last_time = m["time"]
        t.refs = refs = dict(m["refs"])
        if len(refs) != len(m["refs"]):
            raise ValueError("a ref twice")
        run_refs = t.run_refs
        for k, v in refs.items():
            if k.startswith(_RUN_PREFIX):
                run = _run_of(k)
                if run is not None:
                    d = run_refs.get(run)
                    if d is None:
                        run_refs[run] = {k: v}
                    else:
                        d[k] = v
        t.tips = {(r, b): (lsn, oid) for r, b, lsn, oid in m["tips"]}
        t.intents = {r: [tuple(x) for x in v] for r, v in m["intents"].items()}
        t.starts = m["starts"]
        t.idx = {k: v for k, v in m["idx"]}
        t.packs = {k: v for k, v in m.get("packs", ())}
        rows = m.get("labels", b"")
        if type(rows) is not bytes or len(rows) % LABEL_ROW.size:
            raise ValueError("label rows")
        t.lrows = bytearray(rows)
        t.acc = t.recompute_root()
        t.frozen = segindex.SegmentIndex(m["active"], m["seg"])
        return t, m["seg"], m["off"]


SYMREF = runrefs.SYMREF_PREFIX
_CHAIN_SUFFIXES = ("/" + runrefs.JOURNAL, "/" + runrefs.SEGMENTS, "/" + runrefs.DELETIONS, "/" + runrefs.DELETED)
_DELETION_REFS = ("/" + runrefs.DELETIONS, "/" + runrefs.DELETED)
KEYS_PREFIX = runrefs.KEYS_PREFIX
_branch_ref = runrefs.branch_ref
_live_ref = runrefs.live_ref


def _branch_num(run: str, name: str) -> int | None:
    """N if ``name`` is ``run/<run>/branch/<N>`` spelled canonically (no leading zeros), else None."""
    b = runrefs.branch_of(run, name)
    return b if b is not None and runrefs.branch_ref(run, b) == name else None


def _previous(oid: bytes, want: str, types: dict, facts: dict) -> object:
    """The ``previous`` of an object of this entry of type ``want``, from its index row."""
    if types.get(oid) != want:
        return _NOT_A_CHAIN
    f = facts.get(oid)
    if f is None or f[0] is False:
        return _NOT_A_CHAIN
    return f[0]


class Txn:
    """A commit in the making: objects and ref moves, applied together or not at all."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.objects: dict[bytes, tuple[str, bytes | LargeBlob]] = {}  # id -> (type, canonical bytes or a LargeBlob)
        self.decoded: dict[bytes, dict] = {}  # structured objects' values, to index without decoding again
        self.facts: dict[bytes, list] = {}  # id -> the index facts its entry's meta carries (object_facts)
        self.moves: dict[str, list] = {}  # name -> [old at first touch, new, reason]
        self.when: float | None = None  # the entry's time (None: now); upgrade keeps format-1 times
        self.spills: list = []  # LargeBlob spill files to remove when the commit ends, whatever happens
        self.replay = False  # upgrade replays format-1 ref moves as they were (forward-only rules off)

    def put(self, oid: bytes, otype: str, canonical: bytes | LargeBlob, value: dict | None = None) -> None:
        if oid in self.objects:
            return
        # A record names its parent and LSN, so a new one is new: only the active segment is
        # checked for it, while other objects are looked up everywhere (which may search every
        # sealed segment's index). Were a record ever stored twice, both copies are the same bytes
        # and the chain index keeps the first.
        # A body gc removed (a deletion named it) does not count: committed again, it is stored again,
        # and the newer location is the one every reader finds (sealed segments are searched newest first).
        if self.engine.has_body(oid) if otype != codec.RECORD else oid in self.engine.tables.locs:
            return
        self.objects[oid] = (otype, canonical)
        if value is not None:
            self.decoded[oid] = value
        if otype == codec.RECORD or otype in CHAIN_TYPES:
            f = object_facts(otype, canonical if isinstance(canonical, bytes) else b"", value, oid)
            if f is not None:
                self.facts[oid] = f

    def has(self, oid: bytes) -> bool:
        return oid in self.objects or self.engine.has(oid)

    def read_ref(self, name: str) -> bytes | str | None:
        m = self.moves.get(name)
        if m is not None:
            return m[1]
        return self.engine.tables.refs.get(name)

    def set_ref(self, name: str, old: bytes | str | None, new: bytes | str | None, reason: str) -> None:
        cur = self.read_ref(name)
        if cur != old:
            raise Conflict(name, _show(old), _show(cur))
        if not self.replay and forward_only(name):
            check_move(name, old, new, self._previous_of, lambda oid: oid in self.objects)
        m = self.moves.get(name)
        if m is None:
            self.moves[name] = [cur, new, reason]
        else:
            m[1], m[2] = new, reason

    def _previous_of(self, oid: bytes, otype: str | None = None) -> object:
        """The ``previous`` field of an object of type ``otype`` (any type if None), else _NOT_A_CHAIN."""
        ent = self.objects.get(oid)
        try:
            if ent is not None:
                t, v = ent[0], self.decoded.get(oid)
                if v is None:
                    if isinstance(ent[1], LargeBlob):
                        return _NOT_A_CHAIN
                    v = codec.decode(bytes(ent[1]), oid)[1]
            elif self.engine.has(oid):
                t, v = codec.decode(self.engine.read(oid), oid)
            else:
                return _NOT_A_CHAIN
        except Exception:
            return _NOT_A_CHAIN
        if (otype is not None and t != otype) or not isinstance(v, dict) or "previous" not in v:
            return _NOT_A_CHAIN
        return v["previous"]

    def expect(self, name: str, value: bytes | str | None) -> None:
        """Raise Conflict unless ``name`` currently holds ``value``; writes nothing."""
        cur = self.read_ref(name)
        if cur != value:
            raise Conflict(name, _show(value), _show(cur))

    def ref_moves(self) -> list:
        return [[n, o, v, r] for n, (o, v, r) in self.moves.items() if o != v]


def _show(v: object) -> str:
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else str(v)


class Engine:
    """The interface both engines implement; ``Store`` is written against it."""

    tables: Tables
    _mu: threading.RLock  # guards the tables (and a log's tail position) within this process
    prefix_ok = False  # read the readable prefix of a damaged log instead of raising CorruptLog
    witness_problem: tuple[str, str] | None = None  # (code, detail) when the head witness disagrees with the log
    log_files = False  # the log is segment files on this machine, checked byte by byte by objstore.storage.log.fsck

    def refresh(self) -> Position:  # catch up on entries others appended (readers: no lock)
        raise NotImplementedError

    def position(self) -> Position:
        return self.tables.pos

    def loc(self, oid: bytes) -> Loc | tuple | None:  # a Loc; MemoryEngine: (entry, type, length)
        return self.tables.locs.get(oid)

    def has(self, oid: bytes) -> bool:
        return self.loc(oid) is not None

    def has_body(self, oid: bytes) -> bool:
        """Stored with its body: known, and not an object whose body gc removed."""
        loc = self.loc(oid)
        return loc is not None and not (isinstance(loc, Loc) and loc.comp == COMP_GONE)

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        """The chain index: the id of (run, branch)'s record at ``lsn`` (committed records only)."""
        return self.tables.chain.get((run, branch, lsn))

    def iter_ids(self) -> Iterator[bytes]:
        return iter(list(self.tables.locs))

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """(entry number, record id) of every label row with this key (storage.labels), newest
        entry first. Rows are claims: the caller checks each record carries the label."""
        return sorted(set(self.tables.label_rows(key)), reverse=True)

    def release_indexes(self) -> None:
        """Let the mapped index pages touched so far leave this process's resident set (a long
        scan calls this as it goes, so its memory does not grow with the number of segments)."""
        for idx in list(getattr(self, "_idx", {}).values()):
            idx.release()

    def iter_chain(self, run: str, branch: int, lsn: int = 0) -> Iterator[tuple[int, bytes]]:
        """(lsn, id) of a branch's committed records from ``lsn`` on, in LSN order (chain index)."""
        chain = self.tables.chain
        while True:
            oid = chain.get((run, branch, lsn))
            if oid is None:
                return
            yield lsn, oid
            lsn += 1

    def entry_time(self) -> float | None:
        """Time of the newest entry (None for an empty log)."""
        return self.tables.last_time

    def read(self, oid: bytes) -> bytes:  # canonical bytes, hash-checked
        raise NotImplementedError

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:  # (raw block, loc) of the block holding oid, or None
        return None

    def loc_entry(self, oid: bytes) -> int | None:
        loc = self.loc(oid)
        if loc is None:
            return None
        return loc.entry if isinstance(loc, Loc) else loc[0]

    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Txn]:
        raise NotImplementedError

    def entries(self) -> Iterator[Entry]:
        raise NotImplementedError

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:  # what verify reads: entries 1..upto with their objects
        raise NotImplementedError

    # -- the contract every engine keeps (tests/test_engine_contract.py) ----------------------
    def commit(self, objects: Iterable[tuple[bytes, str, bytes]] = (), ref_moves: Iterable[tuple] = (), expectations: Iterable[tuple] = (),
               when: float | None = None) -> Position:
        """One commit: ``objects`` [(id, type, canonical bytes)], ``ref_moves`` [(name, old, new,
        reason)] as compare-and-swaps, ``expectations`` [(name, value)]; all or nothing. Returns
        the log position after it (unchanged if there was nothing to write)."""
        with self.transaction() as txn:
            txn.when = when
            for name, value in expectations:
                txn.expect(name, value)
            for oid, otype, canonical in objects:
                if blake3.blake3(canonical).digest() != oid:
                    raise IntegrityError(oid.hex(), "commit", "hash mismatch (content does not match id)")
                txn.put(oid, otype, canonical)
            for name, old, new, reason in ref_moves:
                txn.set_ref(name, old, new, reason)
        return self.position()

    def snapshot(self) -> Position:
        """The newest complete position (a reader's snapshot; taking it locks nothing)."""
        return self.refresh()

    def read_at(self, oid: bytes, snapshot: Position) -> bytes:
        """An object's canonical bytes as of ``snapshot``: not found if committed after it."""
        entry = self.loc_entry(oid)
        if entry is None or entry > snapshot.entry:
            raise ObjectNotFound(oid.hex())
        return self.read(oid)

    def refs_at(self, prefix: str = "", snapshot: Position | None = None) -> dict:
        """The ref table (names starting with ``prefix``) as of ``snapshot`` (default: now). An
        older snapshot is rebuilt from the entries' ref moves up to it."""
        if snapshot is None or snapshot == self.position():
            return {k: v for k, v in list(self.tables.refs.items()) if k.startswith(prefix)}
        refs: dict = {}
        for e in self.entries():
            if e.n > snapshot.entry:
                break
            for name, _old, new, _reason in e.moves:
                if new is None:
                    refs.pop(name, None)
                else:
                    refs[name] = new
            if e.n == snapshot.entry and e.checksum != snapshot.checksum:
                raise CorruptLog("log", f"entry {e.n} is not the one the snapshot names")
        return {k: v for k, v in refs.items() if k.startswith(prefix)}

    def anchor(self) -> Position:
        """The head of the log's hash chain (what 'objstore anchor' prints)."""
        return self.refresh()


class MemoryEngine(Engine):
    """The same tables over dicts: commits are atomic and in order, nothing is on disk."""

    def __init__(self) -> None:
        self.tables = Tables()
        self._lock = self._mu = threading.RLock()  # _mu: the tables' lock, as in LogEngine
        self._entries: list[Entry] = []
        self._objects: dict[bytes, bytes] = {}
        self.root = None

    def refresh(self) -> Position:
        return self.tables.pos

    def read(self, oid: bytes) -> bytes:
        data = self._objects.get(oid)
        if data is None:
            raise ObjectNotFound(oid.hex())
        return data

    @contextmanager
    def transaction(self, timeout: float | None = None) -> Iterator[Txn]:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeout("the store's writer lock", timeout)
        try:
            txn = Txn(self)
            yield txn
            moves = txn.ref_moves()
            if txn.objects or moves:
                t = self.tables
                n = t.pos.entry + 1
                plan = t.plan(n, [(oid, ot) for oid, (ot, _) in txn.objects.items()], txn.facts, moves, None)
                if isinstance(plan, str):
                    raise Refused(plan)
                bad = deletion_rule(self, n, [(oid, ot) for oid, (ot, _) in txn.objects.items()], moves, lambda: txn_bodies(txn.objects), plan)
                if bad is not None:
                    raise Refused(bad)
                objs = []
                for oid, (otype, canon) in txn.objects.items():
                    data = canon.read_all() if hasattr(canon, "read_all") else canon
                    self._objects[oid] = data
                    objs.append([oid, otype, len(data), 0, 0])
                    t.locs[oid] = (n, otype, len(data))
                recs = [[i, *txn.facts[o[0]]] for i, o in enumerate(objs) if o[1] == codec.RECORD and o[0] in txn.facts]
                prevs = [[i, *txn.facts[o[0]]] for i, o in enumerate(objs) if o[1] in CHAIN_TYPES and o[0] in txn.facts]
                now = time.time() if txn.when is None else float(txn.when)
                checksum = logical_checksum(t.pos.checksum, n, now, objs, moves, None, recs, prevs, plan.root)
                t.commit(plan, n, checksum, now)
                self._entries.append(Entry(n, now, moves, objs, [], None, 0, 0, 0, 0, checksum, recs, prevs, plan.root))
        finally:
            self._lock.release()

    def entries(self) -> Iterator[Entry]:
        return iter(list(self._entries))

    def scan(self, upto: int) -> Iterator[ScanEntry]:
        for e in self._entries[:upto]:
            yield ScanEntry(e, [(o[0], o[1], self._objects[o[0]]) for o in e.objs], "")


# -- the log on disk ----------------------------------------------------------------------


def seg_name(n: int) -> str:
    return f"{n:010d}.seg"


class LogEngine(Engine):
    log_files = True

    def __init__(self, root: str, policy: FsyncPolicy, checkpoint: bool = True) -> None:
        """``checkpoint=False``: neither adopt nor write a checkpoint; every entry from the first is
        replayed (its rules and root checked): what verify reads the log with."""
        self.root = root
        self.dir = os.path.join(root, "log")
        self.policy = policy
        self.tables = Tables()
        self._mu = threading.RLock()  # guards the tables and the tail position within this process
        self._wlock = threading.Lock()  # writers of this process, one at a time
        self._seg = 1  # segment the tail is in
        self._off = SEG_HEADER.size  # end of the last complete entry in it
        self._fds: dict[int, int] = {}
        self._packs: dict[int, Packed | None] = {}  # segment -> its packed entries (None: an ordinary segment)
        self._replaced_fds: list[int] = []  # descriptors of segment files gc replaced (other threads may still read them)
        self._lfd: int | None = None  # the writer lock's descriptor, opened on first write
        self._wfd: tuple[int, int] | None = None  # (segment, descriptor) we append to
        self._paths: dict[int, str] = {}
        self._idx: dict[int, Any] = {}  # sealed segment -> SegmentIndex
        self._built: dict[int, bytes] = {}  # sealed segment -> digest of the index this process built from the log
        self._bad_idx: dict[int, bytes] = {}  # sealed segment -> the index bytes its wrong file should hold
        self._hint = 0  # segment of the last object found through an index
        self._ckpt_at = (0, 0)  # (entry, offset) of the last checkpoint this process wrote or loaded
        self._block_cache: tuple | None = None
        self.torn: tuple | None = None  # (segment, offset, length, reason) of a torn tail seen by the last refresh
        self.damaged: tuple | None = None  # (segment, offset, reason) of a bad entry that is not a torn tail
        self.prefix_ok = False  # answer from the readable prefix of a damaged log instead of raising (verify)
        self.breach = False  # the damage is a sound entry that breaks a rule of the log (or its root), not bad bytes
        self._sealed = False  # the last entry taken in is its segment's seal entry
        self._wit_path = os.path.join(self.dir, "witness")
        self._wit_fd: int | None = None
        self._sync_cv = threading.Condition(threading.Lock())  # group commit: who syncs, who waits
        self._syncing = False
        self._written: tuple[Position, int] = (Position(0, ZERO), -1)  # newest entry this process wrote, and its file
        self._durable = 0  # entries of this process up to this number are durable
        self._old_wfds: list[int] = []
        self._ckpt_busy = False
        self._use_checkpoint = True
        self._wit = self.witness()  # the head witness as this process found it at open
        self.witness_problem: tuple[str, str] | None = None  # (code, detail): log-truncated / witness-mismatch
        try:  # the highest segment present: a gap below it is a missing segment, not the log's end
            self._top = max([int(f[:-4]) for f in os.listdir(self.dir) if f.endswith(".seg") and f[:-4].isdigit()] or [1])
        except OSError:
            self._top = 1
        self._use_checkpoint = checkpoint
        if checkpoint:
            self._load_checkpoint()
        ckpt_seg = self._seg
        try:
            self.refresh()
        except CorruptLog:
            pass  # damage before the log's end: the store opens (verify names it), every later refresh raises it again
        else:
            self._check_witness()
            entries = self.tables.pos.entry - self._ckpt_at[0]
            if entries >= OPEN_CHECKPOINT or (entries and (self._seg, self._off) > (ckpt_seg, self._ckpt_at[1] + OPEN_CHECKPOINT_BYTES)):
                self._checkpoint()  # best effort (a read-only store just replays again next time)

    def tail(self) -> tuple[Position, int, int]:
        """(position, segment, end offset) of the newest complete entry, taken together: what a
        backup copies is exactly the log up to there (sealed segments whole, the active one to ``end``)."""
        with self._mu:
            self.refresh()
            return self.tables.pos, self._seg, self._off

    # -- the head witness -----------------------------------------------------------------
    def witness(self) -> tuple[int, bytes] | None:
        """(entry, checksum) the newest writer made durable, from ``log/witness``; None if the file
        is absent, short or unreadable (no witness, not damage)."""
        return read_witness(self._wit_path)

    def _check_witness(self) -> None:
        """Compare the log with the witness read at open: shorter is ``log-truncated``; a checksum
        the log does not have at that entry is ``witness-mismatch`` (writers refuse; readers warn)."""
        w = self._wit
        if w is None:
            return
        if self.witness_problem is None:
            pos = self.tables.pos
            self.witness_problem = witness_disagreement(w, pos.entry, pos.checksum if w[0] == pos.entry else None)
        if self.witness_problem is not None and self.repair_explains(w):
            self.witness_problem = None

    def repair_explains(self, w: tuple[int, bytes]) -> bool:
        """Whether the newest repair's note (the blob ``log/repairs`` names) records head witness
        ``w`` as the one it found: a repair killed after its entry and before it wrote the witness
        leaves that witness behind, which its own recorded cut explains (the store stays writable;
        the next commit writes a witness of the repaired log). Read only when the witness disagrees."""
        oid = self.tables.refs.get(REPAIRS_REF)
        if not isinstance(oid, bytes):
            return False
        try:
            otype, body = codec.decode(self.read(oid))
            note = msgspec.json.decode(body) if otype == codec.BLOB and isinstance(body, bytes) else None
        except (ObjstoreError, msgspec.DecodeError, ValueError):
            return False
        return isinstance(note, dict) and note.get("witness") == [w[0], w[1].hex()]

    def _write_witness(self, entry: int, checksum: bytes) -> None:
        """After the entry's fdatasync, before the commit returns; never synced itself: it may lag
        the log (a crash before it) but never lead it."""
        try:
            if self._wit_fd is None:
                self._wit_fd = os.open(self._wit_path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._wit_fd, WITNESS.pack(WITNESS_MAGIC, entry, checksum), 0)
        except OSError:
            pass  # no witness is only less protection, never a failed commit
        self._wit = (entry, checksum)

    # -- files --------------------------------------------------------------------------
    def segment_bytes(self, segs: Iterable[int]) -> int:
        """The size on disk of these segment files (a missing one counts 0)."""
        total = 0
        for s in segs:
            try:
                total += os.path.getsize(self.seg_path(s))
            except OSError:
                pass
        return total

    def seg_path(self, n: int) -> str:
        p = self._paths.get(n)
        if p is None:
            p = self._paths[n] = os.path.join(self.dir, seg_name(n))
        return p

    def _fd(self, n: int) -> int:
        fd = self._fds.get(n)
        if fd is None:
            try:
                fd = os.open(self.seg_path(n), os.O_RDONLY)
            except FileNotFoundError:
                raise CorruptLog(self.seg_path(n), "segment missing") from None
            self._fds[n] = fd
        return fd

    def close(self) -> None:
        for fd in [*self._fds.values(), *self._replaced_fds]:
            os.close(fd)
        self._fds.clear()
        self._replaced_fds = []
        for extra in (self._lfd, self._wfd[1] if self._wfd else None, self._wit_fd, *self._old_wfds):
            if extra is not None:
                os.close(extra)
        self._lfd = self._wfd = self._wit_fd = None
        self._old_wfds = []

    def __del__(self) -> None:
        # An engine nobody holds gives its descriptors back (a long test run, a service that
        # opens stores per request), not only one whose close() was called.
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, a half-made engine: nothing to do
            pass

    @staticmethod
    def create(root: str, policy: FsyncPolicy) -> None:
        d = os.path.join(root, "log")
        os.makedirs(d, exist_ok=True)
        _write_segment_header(os.path.join(d, seg_name(1)), 1, 1, ZERO, policy)
        open(os.path.join(root, "lock"), "ab").close()
        policy.dir(d)

    # -- reading the log ----------------------------------------------------------------
    def refresh(self) -> Position:
        """Take in every complete entry appended since our position (no lock: readers never lock).

        Raises CorruptLog where the log is damaged before its end (a bad entry followed by good
        ones, an entry that breaks a rule, a missing segment) unless the engine was opened to read
        the readable prefix (``prefix_ok``): the tables then stop before the damage."""
        with self._mu:
            while True:
                self._read_tail()
                if self.damaged is not None:
                    if self.prefix_ok:
                        return self.tables.pos
                    seg, off, why = self.damaged
                    raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} ({why}); the log is readable "
                                     "only up to it (run 'objstore verify')")
                if not self._sealed:
                    if self._seg < self._top or (self.torn is not None and os.path.exists(self.seg_path(self._seg + 1))):
                        # A later segment exists, so this one was sealed: its end is not a torn tail.
                        why = self.torn[-1] if self.torn is not None else "no seal entry"
                        self.torn, self.damaged = None, (self._seg, self._off, f"segment {self._seg} ends at offset {self._off} ({why}) "
                                                         "but a later segment exists")
                        continue
                    return self.tables.pos
                nxt = self._seg + 1
                try:
                    fd = self._fd(nxt)
                except CorruptLog:
                    if self._seg < self._top:
                        self.damaged = (self._seg, self._off, f"segment {nxt} is missing (segment {self._top} exists)")
                        if self.prefix_ok:
                            return self.tables.pos
                        raise CorruptLog(self.seg_path(nxt), f"segment missing (segment {self._top} exists)") from None
                    return self.tables.pos  # sealed, the next segment not created yet (its sealer died): the next writer makes it
                hdr = _read_segment_header(fd, self.seg_path(nxt))
                if hdr[2] != self.tables.pos.entry + 1 or hdr[3] != self.tables.pos.checksum:
                    self.damaged = (nxt, 0, "segment header does not continue the previous segment's chain")
                    if self.prefix_ok:
                        return self.tables.pos
                    raise CorruptLog(self.seg_path(nxt), "segment header does not continue the previous segment's chain")
                self._retire_active()
                self._seg, self._off, self._sealed = nxt, SEG_HEADER.size, False

    def _packed(self, seg: int) -> Packed | None:
        """The packed entries of segment ``seg`` if gc packed it (cached per file), else None."""
        if seg in self._packs:
            return self._packs[seg]
        fd = self._fd(seg)
        pk = packed_entries(fd, seg) if packed.is_packed(fd) else None
        self._packs[seg] = pk
        return pk

    def _take_packed(self, pk: Packed) -> None:
        """Take in the entries of a packed (sealed) segment after our position."""
        seg = self._seg
        if self._sealed:
            return
        if pk.problem is not None:
            self.torn, self.damaged = None, (seg, SEG_HEADER.size, f"packed segment {seg}: {pk.problem}")
            return
        first = pk.entries[0].n
        if self.tables.pos.entry + 1 == first and self.tables.pos.checksum != pk.prev:
            self.torn, self.damaged = None, (seg, SEG_HEADER.size, "packed segment does not continue the previous segment's chain")
            return
        for e in pk.entries[self.tables.pos.entry + 1 - first:]:
            bad = self._apply(e)
            if bad is not None:
                self.torn, self.damaged, self.breach = None, (seg, e.offset, f"entry {e.n}: {bad}"), True
                return
            self._off = e.offset + 1
        # The next segment's first entry names the index this segment had when it was sealed;
        # the packed file carries that digest (the log's own value is what it is checked against).
        self._built.setdefault(seg, pk.orig_idx)
        self.torn = None

    def _read_tail(self) -> None:
        if self.damaged is not None:
            return  # readers stop before damage, every time
        pk = self._packed(self._seg)
        if pk is not None:
            self._take_packed(pk)
            return
        fd = self._fd(self._seg)
        size = os.fstat(fd).st_size
        if self._off == SEG_HEADER.size and self._seg == 1 and self.tables.pos.entry == 0:
            _read_segment_header(fd, self.seg_path(1))
        if size <= self._off or self._sealed:
            self.torn = None
            return
        t = self.tables
        while self._off < size:
            off = self._off
            # Read in windows of up to 4 MiB; an entry larger than that (a large blob) is read as
            # its meta and trailer only: the tables need no block.
            head = os.pread(fd, ENTRY_HEAD.size, off)
            e = None
            window = TAIL_WINDOW
            if len(head) == ENTRY_HEAD.size and head[:4] == ENTRY_MAGIC:
                _, mlen, dlen = ENTRY_HEAD.unpack(head)
                length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
                if mlen <= MAX_META and length <= 2 * TAIL_WINDOW:
                    window = max(window, length)  # the first entry always fits its window
                if (dlen > TAIL_WINDOW or length > 2 * TAIL_WINDOW) and mlen <= MAX_META and off + length <= size:
                    e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                                     dlen, off, t.pos.checksum, self._seg, t.pos.entry + 1)
            if e is None:
                buf = os.pread(fd, min(size - off, window), off)
                pos = 0
                while pos < len(buf):
                    e = parse_entry(buf, pos, len(buf), t.pos.checksum, self._seg, t.pos.entry + 1)
                    if isinstance(e, str):
                        break
                    bad = self._apply(e._replace(offset=off + pos, data_off=off + e.data_off))
                    if bad is not None:
                        self.torn, self.damaged, self.breach = None, (self._seg, off + pos, f"entry {e.n}: {bad}"), True
                        self._off = off + pos
                        return
                    pos += e.length
                    if e.seal:
                        break
                self._off = off + pos
                if self._sealed:
                    self.torn = None
                    return
                if pos == len(buf) or (pos > 0 and self._off < size):
                    continue  # the window ended inside an entry: read on from there
            if isinstance(e, str):
                rest = os.pread(fd, size - self._off, self._off)
                # Look for a complete entry only past what the bad entry's own header claims: a
                # torn write can hold anything inside its range, an entry-shaped blob included.
                start = 1
                if len(rest) >= ENTRY_HEAD.size and rest[:4] == ENTRY_MAGIC:
                    _, bad_mlen, bad_dlen = ENTRY_HEAD.unpack_from(rest, 0)
                    if bad_mlen <= MAX_META:
                        start = ENTRY_HEAD.size + bad_mlen + bad_dlen + ENTRY_TRAILER.size
                w = None
                if start < len(rest) and has_entry_after(rest, start, t.pos.entry + 2):
                    # Not a torn write: a complete entry follows the bad one. Bit rot in the middle of
                    # the log must never be cut away; readers stop here and writers refuse.
                    self.torn = None
                    self.damaged = (self._seg, self._off, f"{e}; complete entries follow it")
                elif (w := self.witness()) is not None and w[0] > t.pos.entry:
                    # Acknowledged means kept: the witness says this entry was made durable, so
                    # whatever is wrong with it is damage, never a torn write to cut. A reader (no
                    # lock) may have read it while its writer was still writing it: read it again.
                    if self._entry_now_complete(fd, t.pos.checksum, t.pos.entry + 1):
                        self.torn = None
                        return  # completed meanwhile: the next refresh takes it in
                    self.torn = None
                    self.damaged = (self._seg, self._off, f"{e}; entry {t.pos.entry + 1} was made durable "
                                    f"(the head witness names entry {w[0]})")
                else:
                    self.torn = (self._seg, self._off, len(rest), e)
                return
            assert e is not None  # a split entry: a window's entries were applied above, and its end continued or returned
            bad = self._apply(e)
            if bad is not None:
                self.torn, self.damaged, self.breach = None, (self._seg, off, f"entry {e.n}: {bad}"), True
                return
            self._off = off + e.length
            if self._sealed:
                break
        self.torn = None

    def _entry_now_complete(self, fd: int, prev: bytes, n: int) -> bool:
        """Whether the entry at the tail position reads whole and checksummed now."""
        head = os.pread(fd, ENTRY_HEAD.size, self._off)
        if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
            return False
        _, mlen, dlen = ENTRY_HEAD.unpack(head)
        if mlen > MAX_META:
            return False
        length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
        got = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, self._off), os.pread(fd, ENTRY_TRAILER.size, self._off + length - ENTRY_TRAILER.size),
                           dlen, self._off, prev, self._seg, n)
        return not isinstance(got, str)

    def _apply(self, e: Entry, plan: Plan | None = None) -> str | None:
        """Fold one entry into the tables from its meta alone (no block is read), after checking
        it against the rules and its root; returns what is wrong with it instead (nothing changes)."""
        t = self.tables
        first = e.offset == SEG_HEADER.size
        if plan is None:
            if first and e.seg > 1:
                if e.idx is None or e.idx[0] != e.seg - 1:
                    return f"the first entry of segment {e.seg} does not name the index of segment {e.seg - 1}"
            elif e.idx is not None:
                return "only the first entry of a segment names an index"
            got = plan_taken(t, e)
            if isinstance(got, str):
                return got
            bad = deletion_rule(self, e.n, e.objs, e.moves, lambda: entry_bodies(e, e.seg, self._read_loc), got)
            if bad is not None:
                return bad
            plan = got
        bstarts = block_starts(e)
        for oid, otype, length, bi, boff in e.objs:
            if bi == REMOVED:
                t.locs[oid] = Loc(e.n, e.seg, 0, COMP_GONE, 0, 0, 0, length, otype)
                continue
            comp, raw, stored = e.blocks[bi][:3]
            t.locs[oid] = Loc(e.n, e.seg, bstarts[bi], comp, stored, raw, boff, length, otype)
        if e.idx is not None and self._built.get(e.idx[0], e.idx[1]) != e.idx[1]:
            return f"it names an index of segment {e.idx[0]} that is not the one its entries give"
        t.commit(plan, e.n, e.checksum, e.time)
        for seg, _f, _i in e.rw or ():
            # Every process that takes in a rewrite entry (not only gc's) lets go of the old file's
            # index and packed entries: its lookups must see the removed rows, or a writer would
            # deduplicate a new put against a body that is gone.
            self._drop_segment(seg)
        w = self._wit
        if w is not None and w[0] == e.n and w[1] != e.checksum:
            self.witness_problem = witness_disagreement(w, e.n, e.checksum)
        if e.seal:
            self._sealed = True
        return None

    def entries(self) -> Iterator[Entry]:
        """Every complete entry in log order (verify, ref log). Stops at a torn tail."""
        prev, n, seg = ZERO, 1, 1
        while os.path.exists(self.seg_path(seg)):
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            if hdr[2] != n or hdr[3] != prev:
                raise CorruptLog(self.seg_path(seg), "segment header does not continue the previous segment's chain")
            sealed = False
            for e in self._segment_entries(seg, prev, n):
                yield e
                prev, n, sealed = e.checksum, e.n + 1, e.seal
            if not sealed:
                return
            seg += 1

    def _segment_entries(self, seg: int, prev: bytes, n: int) -> Iterator[Entry]:
        """The complete entries of one segment, up to its seal entry or its first bad entry (meta
        and trailer only: no block is read)."""
        pk = self._packed(seg)
        if pk is not None:
            if pk.problem is None and pk.entries[0].n == n and pk.prev == prev:
                yield from pk.entries
            return
        fd = self._fd(seg)
        size = os.fstat(fd).st_size
        off = SEG_HEADER.size
        while off < size:
            head = os.pread(fd, ENTRY_HEAD.size, off)
            if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                return
            _, mlen, dlen = ENTRY_HEAD.unpack(head)
            if mlen > MAX_META or off + ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size > size:
                return  # declares more bytes than the file holds: a torn tail (nothing is read for it)
            meta = os.pread(fd, ENTRY_HEAD.size + mlen, off)
            trailer = os.pread(fd, ENTRY_TRAILER.size, off + ENTRY_HEAD.size + mlen + dlen)
            e = _parse_split(meta, trailer, dlen, off, prev, seg, n)
            if isinstance(e, str):
                return
            yield e
            if e.seal:
                return
            prev, n = e.checksum, n + 1
            off += e.length

    # -- reading objects ----------------------------------------------------------------
    def _read_block(self, loc: Loc) -> bytes:
        c = self._block_cache
        if c is not None and c[0] == (loc.seg, loc.block_off):
            return c[1]
        STATS["blocks_read"] += 1
        try:
            stored = os.pread(self._fd(loc.seg), loc.stored_len, loc.block_off)
        except OSError as e:
            raise StorageOSError(f"read {self.seg_path(loc.seg)}", e) from None
        if len(stored) != loc.stored_len:
            raise IntegrityError("?", self.seg_path(loc.seg), f"block at offset {loc.block_off} truncated")
        if loc.comp == COMP_ZSTD:
            try:
                raw = _decompressor().decompress(stored, max_output_size=loc.block_raw)
            except zstandard.ZstdError as e:
                raise IntegrityError("?", self.seg_path(loc.seg), f"zstd data corrupt: {e}") from None
            if len(raw) != loc.block_raw:
                raise IntegrityError("?", self.seg_path(loc.seg), "block decompresses to the wrong size")
        else:
            raw = stored
        if loc.otype != codec.BLOB:
            self._block_cache = ((loc.seg, loc.block_off), raw)
        return raw

    def _check_loc(self, oid: bytes, loc: Loc, prehash_above: int = PRECHECK_RAW) -> None:
        """Refuse a location whose declared sizes cannot be true before reading or allocating for it
        (a crafted entry or index row may declare gigabytes for a few stored bytes): the object must
        lie inside its block, the stored bytes inside the segment file, and a block that would
        decompress to more than PRECHECK_RAW bytes is hash-checked while it streams, before it is
        ever held whole."""
        if loc.comp == COMP_GONE:
            raise BodyRemoved(oid.hex())
        path = self.seg_path(loc.seg)
        if loc.off < 0 or loc.length < 0 or loc.off + loc.length > loc.block_raw or (loc.comp == COMP_RAW and loc.stored_len != loc.block_raw):
            raise IntegrityError(oid.hex(), path, f"its location is impossible (object {loc.off}+{loc.length} in a block of {loc.block_raw} bytes, {loc.stored_len} stored)")
        if loc.comp not in (COMP_RAW, COMP_ZSTD):
            raise IntegrityError(oid.hex(), path, f"unknown block compression {loc.comp}")
        if loc.stored_len > CHECK_SIZE_ABOVE and loc.block_off + loc.stored_len > os.fstat(self._fd(loc.seg)).st_size:
            raise IntegrityError(oid.hex(), path, f"block at offset {loc.block_off} ({loc.stored_len} bytes) lies past the end of the segment file")
        if loc.comp == COMP_ZSTD and loc.block_raw > prehash_above:
            try:
                problem = codec.check_stream(stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw),
                                             loc.block_raw, [(loc.off, loc.length, oid)])
            except IntegrityError as e:
                problem = e.args[2]
            if problem is not None:
                raise IntegrityError(oid.hex(), path, problem)

    def _read_loc(self, oid: bytes, loc: Loc) -> bytes:
        self._check_loc(oid, loc)
        try:
            raw = self._read_block(loc)
        except CorruptLog:
            raise  # a missing or unreadable segment: named as it is
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), e.args[1], e.args[2]) from None
        data = raw[loc.off : loc.off + loc.length]
        if len(data) != loc.length or blake3.blake3(data).digest() != oid:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id)")
        return data

    def read(self, oid: bytes) -> bytes:
        loc = self.loc(oid)
        if loc is None:
            self.refresh()
            loc = self.loc(oid)
            if loc is None and self._drop_frozen():
                loc = self.loc(oid)
            if loc is None:
                raise ObjectNotFound(oid.hex())
        try:
            return self._read_loc(oid, loc)
        except IntegrityError:
            # A checkpoint's row of the active segment points at the wrong bytes: take the rows
            # from the segment's entries instead, then try once more.
            if loc.seg == self._seg and self._drop_frozen():
                return self._read_loc(oid, self.loc(oid) or loc)
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                return self._read_loc(oid, self._relocated(oid))
            raise

    def _relocated(self, oid: bytes) -> Loc:
        """Where ``oid`` is after gc replaced the segment this process had it in: a body removed
        meanwhile is a snapshot gone (this reader knew it as live), never bytes of another object."""
        loc = self.loc(oid)
        if loc is None:
            raise ObjectNotFound(oid.hex())
        if loc.comp == COMP_GONE:
            raise SnapshotGone(f"object {oid.hex()} was removed by gc after a recorded deletion")
        return loc

    def _confirmed(self, run: str, branch: int, lsn: int, oid: bytes, parent: bytes | None | bool = False) -> bool:
        """Whether the record ``oid`` is what a checkpoint's chain row says: (run, branch, lsn), and
        the parent when given. Rows the log names (its entries, indexes it names) need no check."""
        try:
            v = codec.decode(self._read_loc(oid, self.loc(oid) or _NO_LOC), oid, False)[1]
            return (isinstance(v, dict) and v.get("run") == run and v.get("branch") == branch and v.get("lsn") == lsn
                    and (parent is False or v.get("parent") == parent))
        except (IntegrityError, ObjstoreError, ValueError, TypeError):
            return False

    def where(self, oid: bytes) -> str:
        loc = self.loc(oid)
        return self.seg_path(loc.seg) if loc else ""

    # -- sealed segments' indexes and the checkpoint -------------------------------------
    def loc(self, oid: bytes) -> Loc | None:
        t = self.tables
        loc = t.locs.get(oid)
        if loc is not None:
            return loc
        if t.frozen is not None:
            row = t.frozen.find(oid)
            if row is not None:
                return _loc_of(row, self._seg)
        hint = self._hint  # walks and folds read neighbours: try the segment of the last hit first
        if 0 < hint < self._seg and hint in self._idx:
            row = self._idx[hint].find(oid)
            if row is not None:
                if row[7] != COMP_GONE:
                    return _loc_of(row, hint)
                hint = 0  # a removed body may be stored again later: search every segment, newest first
        for seg in range(self._seg - 1, 0, -1):
            if seg != hint:
                try:
                    idx = self._index(seg)
                except CorruptLog:
                    continue  # a missing or damaged sealed segment: its objects are not found (verify names it)
                row = idx.find(oid)
                if row is not None:
                    self._hint = seg
                    return _loc_of(row, seg)
        return None

    def iter_chain(self, run: str, branch: int, lsn: int = 0) -> Iterator[tuple[int, bytes]]:
        tip = self.tables.tips.get((run, branch))
        if tip is None or lsn > tip[0]:
            return
        key = segindex.chain_key(run, branch)
        prev: bytes | None | bool = False
        for seg in range(1, self._seg):
            idx = self._index(seg)
            for l, oid in idx.chain_from(key, lsn):
                if l != lsn:
                    return  # a gap: the index is damaged (verify names it); stop rather than guess
                self._hint = seg
                yield l, oid
                prev = oid
                lsn += 1
            idx.release()  # done with this segment's rows: its pages leave our resident set
        frozen = self.tables.frozen
        if frozen is not None:
            rows = list(frozen.chain_from(key, lsn))
            ok = all(l == lsn + i for i, (l, _) in enumerate(rows))
            check_prev = prev
            for l, oid in rows:
                if not ok or not self._confirmed(run, branch, l, oid, check_prev if l > 0 else False):
                    ok = False
                    break
                check_prev = oid
            if not ok and self._drop_frozen():
                yield from Engine.iter_chain(self, run, branch, lsn)
                return
            for l, oid in rows:
                yield l, oid
                lsn += 1
        yield from Engine.iter_chain(self, run, branch, lsn)

    def record_at(self, run: str, branch: int, lsn: int) -> bytes | None:
        t = self.tables
        oid = t.chain.get((run, branch, lsn))
        if oid is not None:
            return oid
        tip = t.tips.get((run, branch))
        if tip is None or lsn > tip[0]:
            return None
        if lsn == tip[0]:
            return tip[1]  # the tables' root covers the tips
        key = segindex.chain_key(run, branch)
        if t.frozen is not None:
            oid = t.frozen.record_at(key, lsn)
            if oid is not None:
                if self._confirmed(run, branch, lsn, oid):
                    return oid
                self._drop_frozen()
                return self.record_at(run, branch, lsn)
        for seg in range(self._seg - 1, 0, -1):
            oid = self._index(seg).record_at(key, lsn)
            if oid is not None:
                return oid
        return None

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """The active segment's rows (the tail's, and the checkpoint's, which the caller checks
        against the record as it does every row), then each sealed segment's index, newest first:
        a binary search per segment, reading only the rows with this key."""
        rows = self.tables.label_rows(key)  # the active segment's: in the root, whoever wrote the checkpoint
        for seg in range(self._seg - 1, 0, -1):
            try:
                idx = self._index(seg)
            except CorruptLog:
                continue  # a missing or damaged sealed segment: its rows are not found (verify names it)
            rows.extend(idx.chain_from(key, 0))
        return sorted(set(rows), reverse=True)

    def iter_ids(self) -> Iterator[bytes]:
        for seg in range(1, self._seg):
            for row in self._index(seg).objects():
                yield row[0]
        if self.tables.frozen is not None:
            for row in self.tables.frozen.objects():
                yield row[0]
        yield from list(self.tables.locs)

    def idx_path(self, seg: int) -> str:
        return os.path.join(self.dir, f"{seg:010d}.idx")

    def _index(self, seg: int) -> segindex.SegmentIndex:
        """A sealed segment's index: the file if its BLAKE3 is the digest the log names for it,
        else built again from the segment's entries (and checked against that digest)."""
        idx = self._idx.get(seg)
        if idx is not None:
            return idx
        _read_segment_header(self._fd(seg + 1), self.seg_path(seg + 1))
        named = self.tables.idx.get(seg) or self._built.get(seg)
        idx = segindex.load_named(self.idx_path(seg), seg, named) if named is not None else None
        if idx is None:
            idx = self._rebuild_index(seg, named)
        idx.checked = True
        self._idx[seg] = idx
        return idx

    def _rebuild_index(self, seg: int, named: bytes | None) -> segindex.SegmentIndex:
        """Index a sealed segment from its entries' metas (the file is missing or is not the one
        the log names)."""
        data = self._scan_index_bytes(seg)
        if named is not None and blake3.blake3(data).digest() != named and not self._rewritten_and_linked(seg, data):
            raise CorruptLog(self.seg_path(seg), f"its entries do not give the index the log names for it ({named.hex()[:16]}…)")
        if os.path.exists(self.idx_path(seg)):
            self._bad_idx[seg] = data  # readers leave a wrong index file for verify to name; the next writer replaces it
        else:
            _write_index(self.idx_path(seg), data)
        return segindex.SegmentIndex(data, seg)

    def _rewritten_and_linked(self, seg: int, data: bytes) -> bool:
        """Whether an index built from segment ``seg``'s file may stand for the one the log names
        although its digest differs: gc rewrote the segment (the file is packed, or the log names a
        rewrite of it whose file is not in place yet), and the file's entries end with the checksum
        the next segment's header chains from, so they are exactly the log's entries; only the
        layout of their blocks differs, and every read re-hashes what it reads."""
        if self._packed(seg) is None and seg not in self.tables.packs:
            return False
        try:
            nxt = _read_segment_header(self._fd(seg + 1), self.seg_path(seg + 1))
        except CorruptLog:
            return False
        return segindex.SegmentIndex(data, seg).checksum == nxt[3]

    def _drop_segment(self, seg: int) -> bool:
        """Let go of sealed segment ``seg``'s index, packed entries and (if its file was replaced)
        descriptor; True if the file was replaced or an index was held."""
        fd = self._fds.get(seg)
        try:
            st = os.stat(self.seg_path(seg))
        except OSError:
            return False
        with self._mu:
            changed = fd is None or os.fstat(fd).st_ino != st.st_ino
            if fd is not None and changed:
                self._replaced_fds.append(self._fds.pop(seg))  # another thread may be reading it: closed with the engine
            had = self._idx.pop(seg, None) is not None
            self._packs.pop(seg, None)
            self._block_cache = None
            self._hint = 0  # loc() tries the hint's segment only through a loaded index
        return changed or had

    def forget_segment(self, seg: int) -> bool:
        """Drop what this process holds of sealed segment ``seg`` (its descriptor, index, packed
        entries) if its file was replaced by gc, and catch up on the log: the next read opens the
        file in place now. True if anything was dropped."""
        dropped = self._drop_segment(seg)
        try:
            self.refresh()
        except CorruptLog:
            pass
        return dropped

    def _scan_index_bytes(self, seg: int) -> bytes:
        hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
        objects: dict = {}
        chain: list = []
        last = None
        for e in self._segment_entries(seg, hdr[3], hdr[2]):
            _segment_rows(e, objects, chain)
            last = e
        if last is None or not last.seal:
            raise CorruptLog(self.seg_path(seg), "sealed segment does not read to its seal entry; cannot index it")
        return segindex.build(seg, hdr[2], last.n, last.checksum, objects.values(), chain)

    def _sealed_index_bytes(self, seg: int) -> bytes:
        """The index of a segment being sealed (or sealed): from our own tables if every row of
        them came from the log's entries, else from the segment itself (a checkpoint's rows are
        never named by the log)."""
        if seg == self._seg and self.tables.frozen is None:
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            return self._index_bytes(seg, hdr[2], self.tables)
        return self._scan_index_bytes(seg)

    def _index_bytes(self, seg: int, first: int, t: Tables) -> bytes:
        objects, chain = t.active_rows()
        return segindex.build(seg, first, t.pos.entry, t.pos.checksum, objects, chain)

    def _retire_active(self) -> None:
        """The active segment was sealed: its objects and chain rows move to its index."""
        seg = self._seg
        t = self.tables
        if t.frozen is None and seg not in self._built:
            # The digest of the index our own rows give (checked against the one the log names
            # next); the index itself is mapped from its file on first use, not held in memory.
            hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
            self._built[seg] = blake3.blake3(self._index_bytes(seg, hdr[2], t)).digest()
        t.locs = {}
        t.chain = {}
        t.frozen = None  # (the label rows stay until the next segment's first entry names this one's index: they are in the root)

    def _drop_frozen(self) -> bool:
        """The checkpoint's rows of the active segment failed a check against the content they
        point at: replace them by rows taken from the segment's own entries. True if dropped."""
        t = self.tables
        if t.frozen is None:
            return False
        hdr = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))
        objects: dict = {}
        chain: list = []
        for e in self._segment_entries(self._seg, hdr[3], hdr[2]):
            if e.n > t.pos.entry:
                break
            _segment_rows(e, objects, chain, labels=False)  # label rows are in the root: never from the checkpoint
        t.frozen = None
        for row in objects.values():
            oid, entry, bo, st, raw, off, ln, comp, otype = row
            t.locs.setdefault(oid, Loc(entry, self._seg, bo, comp, st, raw, off, ln, otype))
        for run, branch, lsn, oid in chain:
            t.chain.setdefault((run, branch, lsn), oid)
        return True

    def _load_checkpoint(self) -> None:
        """Start from the checkpoint if the log commits to it: the entry it claims to follow is
        where it says, with its checksum, and the checkpoint's tables hash to the root that entry
        names. Otherwise replay from the first segment. Either way ``refresh`` takes in the rest.

        Whoever wrote the checkpoint (its BLAKE3 is recomputable), an edited ref, tip, intent or
        start changes the root; its rows of the active segment are checked against the records
        they point at when used (``_confirmed``, ``_drop_frozen``)."""
        path = os.path.join(self.dir, "checkpoint")
        try:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < 32 or blake3.blake3(data[:-32]).digest() != data[-32:]:
                raise ValueError("checkpoint checksum")
            t, seg, off = Tables.load(data[:-32])
            if t.pos.entry > 0:
                e = self._entry_ending_at(seg, off, t.pos.entry)
                if e.checksum != t.pos.checksum:
                    raise ValueError("checkpoint does not match the log")
                if root_digest(t.acc) != e.root:
                    raise ValueError("checkpoint tables do not hash to the root the log names")
                sealed = e.seal
            else:
                sealed = False
        except (OSError, ValueError, KeyError, TypeError, IndexError, msgspec.DecodeError, CorruptLog, segindex.IndexError_, struct.error):
            return  # derived data that does not match (or was crafted): replay the log instead
        self.tables, self._seg, self._off, self._sealed = t, seg, off, sealed
        self._ckpt_at = (t.pos.entry, off)
        t.adopted, t.confirm = t.pos.entry, self._confirm_adopted

    def _confirm_adopted(self, name: str, value: bytes) -> None:
        """The authority rule over the deletions behind ``name`` (at ``value``) that the adopted
        checkpoint took in, as of their own entries (``Tables.obey``): each one that keeps it is
        remembered; one that breaks it is damage at its entry, as a replaying reader finds it."""
        with self._mu:
            t = self.tables
            view = authority.EntryView(self, 0, [], {}, lambda oid: None)
            got = authority.ref_problem(view, name, value, t.adopted, t.checked)
            if got is None:
                return
            did, n, bad = got
            loc = self.loc(did)
            seg, off = (loc.seg, 0) if loc is not None else (1, 0)
            if os.path.exists(self.seg_path(seg)):
                hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
                off = next((e.offset for e in self._segment_entries(seg, hdr[3], hdr[2]) if e.n == n), 0)
            self.torn, self.damaged, self.breach = None, (seg, off, f"entry {n}: {bad}"), True
            raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} (entry {n}: {bad}); the log is readable "
                             "only up to it (run 'objstore verify')")

    def _entry_ending_at(self, seg: int, off: int, n: int) -> Entry:
        """The entry whose trailer ends at ``off`` in segment ``seg`` (its checksum chain is not
        checked here: the caller compares the checksum with what it expects)."""
        fd = self._fd(seg)
        trailer = os.pread(fd, ENTRY_TRAILER.size, off - ENTRY_TRAILER.size)
        if len(trailer) != ENTRY_TRAILER.size:
            raise ValueError("no entry there")
        length, checksum = ENTRY_TRAILER.unpack(trailer)
        start = off - length
        if start < SEG_HEADER.size:
            raise ValueError("no entry there")
        head = os.pread(fd, ENTRY_HEAD.size, start)
        if len(head) != ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
            raise ValueError("no entry there")
        _, mlen, dlen = ENTRY_HEAD.unpack(head)
        if ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size != length:
            raise ValueError("no entry there")
        m = _dec.decode(os.pread(fd, mlen, start + ENTRY_HEAD.size))
        got = Entry(m["n"], m["t"], m["moves"], m["objs"], m["blocks"], m["cut"], seg, start, start + ENTRY_HEAD.size + mlen, length,
                    checksum, m["recs"], m["prevs"], m["root"], m["seal"], m["idx"], m.get("rw"))
        if got.n != n or type(got.root) is not bytes or type(got.seal) is not bool:
            raise ValueError("not the entry the checkpoint names")
        # The checksum in the trailer must be the one the meta gives, chained to the entry before
        # (else an edited meta could sit behind a real trailer).
        if start == SEG_HEADER.size:
            prev = _read_segment_header(fd, self.seg_path(seg))[3]
        else:
            pt = os.pread(fd, ENTRY_TRAILER.size, start - ENTRY_TRAILER.size)
            if len(pt) != ENTRY_TRAILER.size:
                raise ValueError("no entry there")
            prev = ENTRY_TRAILER.unpack(pt)[1]
        if logical_checksum(prev, got.n, got.time, got.objs, got.moves, got.cut, got.recs, got.prevs, got.root, got.seal, got.idx, got.rw) != checksum:
            raise ValueError("the entry's meta does not give its checksum")
        return got

    def _checkpoint(self) -> None:
        """Write the tables at the current position (no fsync: a lost checkpoint means a longer replay)."""
        path = os.path.join(self.dir, "checkpoint")
        if self._ckpt_busy or not self._use_checkpoint:
            return  # another thread of this process is writing one
        if self._packed(self._seg) is not None:
            return  # the log ends in a packed segment (a copy caught between two files): no offset there to name
        self._ckpt_busy = True
        try:
            with self._mu:
                first = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))[2]
                data = self.tables.dump(self._seg, self._off, first)
                at = (self.tables.pos.entry, self._off)
            write_derived(path, data + blake3.blake3(data).digest())
        except OSError:
            return
        finally:
            self._ckpt_busy = False
        self._ckpt_at = at

    def copy_blob(self, oid: bytes, out: IO[bytes]) -> int | None:
        """Stream a large blob's body to ``out``, hash-checked before the first byte is written (and
        again as it is written: the file could change in between); None if not large."""
        loc = self.loc(oid)
        if loc is None or loc.otype != codec.BLOB or loc.block_raw <= LARGE_BLOB or loc.comp != COMP_ZSTD:
            return None
        if loc.off != 0 or loc.length != loc.block_raw:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "a large blob's block holds other bytes than the blob")
        # Two passes: the body is hash-checked while it streams (nothing held, nothing written), then
        # written. A damaged or crafted blob (64 KiB that claims gigabytes) fails before one byte goes out.
        try:
            self._check_loc(oid, loc, prehash_above=0)
        except IntegrityError:
            if not (loc.seg < self._seg and self.forget_segment(loc.seg)):
                raise
            loc = self._relocated(oid)  # gc replaced the file this process had open: check it where it is now
            self._check_loc(oid, loc, prehash_above=0)
        h = blake3.blake3()
        skip = None
        n = 0
        try:
            for chunk in stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw):
                h.update(chunk)
                if skip is None:  # the canonical header "blob <n>\0" is not the body
                    nul = chunk.find(b"\x00")
                    skip, chunk = nul + 1, chunk[nul + 1 :]
                out.write(chunk)
                n += len(chunk)
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), e.args[2]) from None
        if h.digest() != oid:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id); the bytes already written are not that blob")
        return n

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:
        loc = self.loc(oid)
        if loc is None or loc.otype == codec.BLOB:
            return None
        self._check_loc(oid, loc)
        try:
            raw = self._read_block(loc)  # wrong bytes (gc replaced the file) fail the caller's hash: it reads again by read()
        except IntegrityError:
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                loc = self._relocated(oid)
                self._check_loc(oid, loc)
                return self._read_block(loc), loc
            raise
        return raw, loc

    # -- writing ------------------------------------------------------------------------
    @contextmanager
    def transaction(self, timeout: float | None = None, repair_after: int | None = None) -> Iterator[Txn]:
        """A commit under the writer lock. ``repair_after`` (``objstore repair``): the log is
        damaged after entry N, which must be the end of its readable prefix in the last segment;
        this commit's entry cuts everything after N off the segment and records what it removed
        (its ``cut``), and the head witness names it afterwards."""
        deadline = None if timeout is None else time.monotonic() + timeout
        written = None
        if not self._wlock.acquire(timeout=-1 if timeout is None else timeout):
            raise LockTimeout("the store's writer lock", timeout)
        try:
            self._os_lock(deadline, timeout)
            try:
                try:
                    self.refresh()
                except CorruptLog:
                    pass
                if repair_after is not None:
                    self._prepare_repair(repair_after)
                if self.damaged is not None:
                    seg, off, why = self.damaged
                    raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} ({why}); "
                                     "refusing to write (run 'objstore verify')")
                if self.witness_problem is not None and self._wit is not None and self.repair_explains(self._wit):
                    self.witness_problem = None  # met while catching up: the witness predates a repair's cut
                if self.witness_problem is not None:
                    raise CorruptLog(self._wit_path, f"{self.witness_problem[0]}: {self.witness_problem[1]}; refusing to write "
                                     "(run 'objstore verify'; 'objstore repair' only after restoring from a backup failed)")
                if self._sealed:
                    self._seal()  # its sealer died between the seal entry and the next segment
                for seg, data in list(self._bad_idx.items()):
                    _write_index(self.idx_path(seg), data)  # a wrong index file, replaced by a writer
                    del self._bad_idx[seg]
                txn = Txn(self)
                try:
                    yield txn
                    moves = txn.ref_moves()
                    if txn.objects or moves:
                        written = self._commit(txn, moves)
                finally:
                    for spill in txn.spills:
                        spill.discard()
            finally:
                assert self._lfd is not None  # _os_lock opened it
                fcntl.flock(self._lfd, fcntl.LOCK_UN)
        finally:
            self._wlock.release()
        # Group commit: the entry is written; it is made durable outside the locks, so the threads
        # of this process that write meanwhile share one fdatasync. The commit returns (is
        # acknowledged) only once its own entry is durable.
        if written is not None:
            self._sync_upto(written)
            # Off the commit path's locks: other writers go on while this thread writes the checkpoint.
            if self.tables.pos.entry - self._ckpt_at[0] >= CHECKPOINT_ENTRIES or self._off - self._ckpt_at[1] >= CHECKPOINT_BYTES:
                self._checkpoint()

    def _prepare_repair(self, n: int) -> None:
        """Make the next entry cut everything after entry ``n`` (see ``transaction``)."""
        pos = self.tables.pos
        last = max([int(f[:-4]) for f in os.listdir(self.dir) if f.endswith(".seg") and f[:-4].isdigit()] or [1])
        if n != pos.entry:
            raise InvalidInput(f"the log reads through entry {pos.entry}; repair cuts only after the last readable entry "
                               f"(--cut-after {pos.entry}), or restore from a backup")
        if self._seg != last or self._sealed:
            raise InvalidInput(f"entry {n} is not in the last segment ({last}); cutting whole segments is not repair: restore from a backup")
        size = os.fstat(self._fd(self._seg)).st_size
        if size > self._off:
            self.torn = (self._seg, self._off, size - self._off, "repair")
        self.damaged = None
        self.breach = False
        self.witness_problem = None

    def _sync_upto(self, n: int) -> None:
        """Return once entry ``n`` (written by this process) is durable: one thread syncs for every
        entry written before it started, the others wait for it. The head witness follows each
        sync."""
        with self._sync_cv:
            while self._durable < n:
                if self._syncing:
                    self._sync_cv.wait()
                    continue
                self._syncing = True
                target, fd = self._written
                err = None
                self._sync_cv.release()
                try:
                    if self.policy.enabled:
                        os.fdatasync(fd)
                except OSError as e:
                    err = e
                finally:
                    self._sync_cv.acquire()
                    self._syncing = False
                    self._sync_cv.notify_all()
                if err is not None:
                    raise StorageOSError("make a commit entry durable (fdatasync)", err)
                if target.entry > self._durable:
                    self._durable = target.entry
                    self._write_witness(target.entry, target.checksum)

    def _os_lock(self, deadline: float | None, timeout: float | None) -> None:
        # One lock file descriptor per engine, kept open: flock excludes other open file
        # descriptions (other processes, other Store objects); threads wait on _wlock first.
        if self._lfd is None:
            try:
                self._lfd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise StorageOSError("open the writer lock", e) from None
        lfd = self._lfd
        if deadline is None:
            fcntl.flock(lfd, fcntl.LOCK_EX)
            return
        while True:
            try:
                fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout("the store's writer lock", timeout) from None
                time.sleep(0.002)

    def _writer(self, seg: int) -> int:
        w = self._wfd
        if w is None or w[0] != seg:
            if w is not None:
                self._old_wfds.append(w[1])  # closed with the engine: another thread may still be syncing it
                self._wfd = None
            try:
                self._wfd = w = (seg, os.open(self.seg_path(seg), os.O_WRONLY))
            except OSError as e:
                raise StorageOSError("open the active segment", e) from None
        return w[1]

    def _commit(self, txn: Txn, moves: list) -> int | None:
        """Write one entry (not yet synced: returns its number for _sync_upto; None if synced)."""
        t = self.tables
        cut = None
        seg, off = self._seg, self._off
        objects = [(oid, otype, c) for oid, (otype, c) in txn.objects.items()]
        idx = self._first_entry_idx(seg, off)
        plan = t.plan(t.pos.entry + 1, [(o[0], o[1]) for o in objects], txn.facts, moves, idx)
        if isinstance(plan, str):
            raise Refused(plan)
        bad = deletion_rule(self, t.pos.entry + 1, objects, moves, lambda: txn_bodies(txn.objects), plan)
        if bad is not None:
            raise Refused(bad)
        wfd = self._writer(seg)
        try:
            if self.torn is not None:
                removed = os.pread(self._fd(seg), self.torn[2], self.torn[1])
                cut = [seg, self.torn[1], len(removed), blake3.blake3(removed).hexdigest()]
                os.ftruncate(wfd, off)
                self.torn = None
        except OSError as err:
            raise StorageOSError("cut a torn tail", err) from None
        when = time.time() if txn.when is None else float(txn.when)
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, idx=idx)
        if off + e.length >= SEAL_BYTES:  # the last entry of this segment says so
            raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, when, objects, moves, cut, facts=txn.facts, root=plan.root, seal=True, idx=idx)
        self._write_entry(wfd, raw, off, sync=False)
        with self._mu:
            # Our own entry: applied from what we hold, never read back.
            self._apply(e._replace(seg=seg, offset=off, data_off=off + e.data_off), plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd)
        if e.seal:
            self._sync_upto(e.n)  # a segment is sealed only once everything in it is durable
            try:
                self._seal()
            except (ObjstoreError, OSError, segindex.IndexError_):
                pass  # the commit is durable already; the next writer finishes the seal
            return None
        return e.n

    def _write_entry(self, wfd: int, raw: bytes | list, off: int, sync: bool = True) -> None:
        try:
            if isinstance(raw, list):
                _write_parts(wfd, raw, off)
            else:
                written = os.pwrite(wfd, raw, off)
                if written != len(raw):
                    raise OSError(28, f"short write ({written} of {len(raw)} bytes)")
            if sync and self.policy.enabled:
                os.fdatasync(wfd)
        except OSError as err:
            try:
                os.ftruncate(wfd, off)  # leave no torn bytes behind if we can
            except OSError:
                pass
            raise StorageOSError("append a commit entry", err) from None

    def _first_entry_idx(self, seg: int, off: int) -> list | None:
        """[segment, digest] the first entry of segment ``seg`` names: the previous segment's index."""
        if seg == 1 or off != SEG_HEADER.size:
            return None
        digest = self._built.get(seg - 1)  # built from the log's entries when this process retired it
        if digest is None:
            digest = blake3.blake3(self._sealed_index_bytes(seg - 1)).digest()
        return [seg - 1, digest]

    def scan(self, upto: int) -> Iterator[ScanEntry | ScanProblem]:
        return scan_log(self, upto)

    def finish_seal(self, timeout: float | None = None) -> None:
        """Write the active segment's first entry if its sealer died before it (what the next writer
        would do anyway), so every sealed segment is followed by the entry naming its index."""
        self.refresh()
        if self._off == SEG_HEADER.size and self._seg > 1:
            with self.transaction(timeout) as _txn:
                if self._off == SEG_HEADER.size and self._seg > 1:
                    self._write_bare()

    def seal_now(self, timeout: float | None = None) -> int:
        """Seal the active segment now (gc: so a small store is cleaned like a big one), unless it
        holds nothing but its first entry; the number of the last sealed segment (0: none)."""
        with self.transaction(timeout) as _txn:
            if self._off == SEG_HEADER.size and self._seg > 1:
                self._write_bare()  # a sealer died before the new segment's first entry: write it
            if not (self._off == SEG_HEADER.size or self._bare_only()):
                self._write_bare(seal=True)
                self._seal()
        return self._seg - 1

    def _bare_only(self) -> bool:
        """Whether every entry of the active segment carries no object and no move (its first entry,
        rewrite entries): sealing it would only make gc pack gc's own entries, time after time."""
        hdr = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))
        for e in self._segment_entries(self._seg, hdr[3], hdr[2]):
            if e.objs or e.moves or e.cut:
                return False
        return True

    def _cut_torn(self) -> list | None:
        if self.torn is None:
            return None
        seg = self._seg
        try:
            removed = os.pread(self._fd(seg), self.torn[2], self.torn[1])
            os.ftruncate(self._writer(seg), self._off)
        except OSError as err:
            raise StorageOSError("cut a torn tail", err) from None
        self.torn = None
        return [seg, self._off, len(removed), blake3.blake3(removed).hexdigest()]

    def _write_bare(self, seal: bool = False, rw: list | None = None) -> Entry:
        """Write (and sync) an entry with no object and no move, under the writer lock: a seal entry,
        the first entry of a segment, or a rewrite entry (``rw``)."""
        t = self.tables
        idx = self._first_entry_idx(self._seg, self._off)
        plan = t.plan(t.pos.entry + 1, [], {}, [], idx, rw)
        if isinstance(plan, str):
            raise Refused(plan)
        cut = self._cut_torn()
        raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, time.time(), [], [], cut, root=plan.root, seal=seal, idx=idx, rw=rw)
        off = self._off
        wfd = self._writer(self._seg)
        self._write_entry(wfd, raw, off)  # synced: an entry gc relies on is durable before it goes on
        with self._mu:
            self._apply(e._replace(seg=self._seg, offset=off, data_off=off + e.data_off), plan)
            self._off = off + e.length
        with self._sync_cv:
            self._written = (Position(e.n, e.checksum), wfd)
            self._durable = max(self._durable, e.n)  # the fdatasync covered every earlier write to this file
            self._write_witness(e.n, e.checksum)
        return e

    def commit_rewrite(self, rows: list, timeout: float | None = None) -> Position:
        """Commit a rewrite entry (gc): ``rows`` = [[segment, BLAKE3 of its new file, BLAKE3 of its new
        index], …] for sealed segments whose files were replaced by ones with the same entries."""
        with self.transaction(timeout) as _txn:
            self._write_bare(rw=rows)
            for seg, _f, _i in rows:
                self.forget_segment(seg)
        return self.tables.pos

    def _seal(self) -> None:
        """Start the next segment; the current one (its last entry has the seal flag) is never
        appended to again. The sealer then writes the new segment's first entry at once, naming the
        sealed segment's index by digest, so readers adopt only the index the log commits to."""
        seg = self._seg
        try:
            if not os.path.exists(self.seg_path(seg + 1)):
                _write_segment_header(self.seg_path(seg + 1), seg + 1, self.tables.pos.entry + 1, self.tables.pos.checksum, self.policy)
                self.policy.dir(self.dir)
        except OSError as e:
            raise StorageOSError("seal a segment", e) from None
        data = self._sealed_index_bytes(seg)
        _write_index(self.idx_path(seg), data)
        with self._mu:
            self._built[seg] = blake3.blake3(data).digest()
            self._retire_active()
            self._seg, self._off, self._sealed = seg + 1, SEG_HEADER.size, False
        self._write_bare()  # the new segment's first entry: it names the index just built
        self._checkpoint()


def read_witness(path: str) -> tuple[int, bytes] | None:
    """(entry, checksum) a head witness file names; None if it is absent, short or unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(WITNESS.size + 1)
    except OSError:
        return None
    if len(raw) != WITNESS.size or raw[:4] != WITNESS_MAGIC:
        return None
    _, entry, checksum = WITNESS.unpack(raw)
    return entry, checksum


def _write_parts(fd: int, parts: list, off: int) -> None:
    """Write an entry given as parts (bytes, or LargeBlob spill files copied in chunks)."""
    for part in parts:
        if isinstance(part, LargeBlob):
            with open(part.path, "rb") as f:
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    written = os.pwrite(fd, chunk, off)
                    if written != len(chunk):
                        raise OSError(28, f"short write ({written} of {len(chunk)} bytes)")
                    off += written
        else:
            written = os.pwrite(fd, part, off)
            if written != len(part):
                raise OSError(28, f"short write ({written} of {len(part)} bytes)")
            off += written


def stream_block(fd: int, block_off: int, stored_len: int, raw_len: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The decompressed bytes of one zstd block, in chunks, never all in memory (large blobs);
    stops at ``raw_len`` bytes whatever the frame claims."""
    class _Region:
        def __init__(self) -> None:
            self.pos, self.end = block_off, block_off + stored_len

        def read(self, n: int = -1) -> bytes:
            n = self.end - self.pos if n < 0 else min(n, self.end - self.pos)
            try:
                data = os.pread(fd, n, self.pos) if n > 0 else b""
            except OSError as e:
                raise StorageOSError("read a segment file", e) from None
            self.pos += len(data)
            return data

    left = raw_len
    try:
        for data in codec.zstd_chunks(_Region(), raw_len, chunk):
            left -= len(data)
            yield data
    except zstandard.ZstdError as e:
        raise IntegrityError("?", "", f"zstd data corrupt: {e}") from None
    if left:
        raise IntegrityError("?", "", f"block decompresses to {raw_len - left} of {raw_len} bytes")


def block_starts(e: Entry) -> list:
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


LABEL_ROW = struct.Struct("<16sQ32s")  # a label row: key · entry number · record id (the index's chain row layout)


def _segment_rows(e: Entry, objects: dict, chain: list, labels: bool = True) -> None:
    """Add one entry's index rows (object rows as segindex.build takes them, chain rows) from its meta."""
    starts = block_starts(e)
    for oid, otype, length, bi, boff in e.objs:
        if bi == REMOVED:
            objects[oid] = (oid, e.n, 0, 0, 0, 0, length, COMP_GONE, otype)
            continue
        comp, raw, stored = e.blocks[bi][:3]
        objects[oid] = (oid, e.n, starts[bi], stored, raw, boff, length, comp, otype)
    for r in e.recs:
        oid = e.objs[r[0]][0]
        chain.append((r[1], r[2], r[3], oid))
        if labels and len(r) > 8:  # a labelled record: its label rows, (key, entry number, id)
            chain.extend((k, e.n, oid) for k in labels_mod.index_keys(r[1], r[2], r[3], r[5], r[8]))


def witness_disagreement(w: tuple[int, bytes], end: int, checksum_at_w: bytes | None) -> tuple[str, str] | None:
    """(code, detail) where the head witness ``w`` (entry, checksum) disagrees with a log that ends
    at entry ``end`` and holds ``checksum_at_w`` at the witness's entry (None: not known); else None."""
    if w[0] > end:
        return "log-truncated", f"the log ends at entry {end}, but the head witness says entry {w[0]} was made durable"
    if checksum_at_w is not None and checksum_at_w != w[1]:
        return "witness-mismatch", f"the head witness names entry {w[0]} with checksum {w[1].hex()}, the log has {checksum_at_w.hex()}"
    return None


def _write_index(path: str, data: bytes) -> None:
    """Best effort: an index is derived data, and the caller keeps the bytes it built (a read-only
    store, or a concurrent writer of the same file, only means it is built again next time)."""
    try:
        segindex.write(path, data)
    except OSError:
        pass


_NO_LOC = Loc(0, 0, 0, COMP_RAW, 0, 0, 0, 0, "record")


def _loc_of(row: tuple, seg: int) -> Loc:
    oid, entry, bo, st, raw, off, ln, comp, tc = row
    if tc >= len(segindex.TYPES):
        raise IntegrityError(oid.hex(), f"index of segment {seg}", f"index row names unknown type code {tc}")
    return Loc(entry, seg, bo, comp, st, raw, off, ln, segindex.TYPES[tc])


def _parse_split(meta: bytes, trailer: bytes, dlen: int, off: int, prev: bytes, seg: int, n: int) -> Entry | str:
    """parse_entry over an entry whose blocks were not read (header+meta, then trailer)."""
    if len(trailer) < ENTRY_TRAILER.size:
        return "incomplete entry"
    mlen = len(meta) - ENTRY_HEAD.size
    length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
    tlen, checksum = ENTRY_TRAILER.unpack(trailer)
    if tlen != length:
        return "trailer length disagrees"
    got = _check_meta(meta[ENTRY_HEAD.size :], checksum, prev, n, dlen)
    if isinstance(got, str):
        return got
    e_n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx, rw = got
    return Entry(e_n, t, moves, objs, blocks, cut, seg, off, off + len(meta), length, checksum, recs, prevs, root, seal, idx, rw)


def segment_header(seg: int, first: int, prev: bytes) -> bytes:
    return SEG_HEADER.pack(SEG_MAGIC, seg, first, prev)


def _write_segment_header(path: str, seg: int, first: int, prev: bytes, policy: FsyncPolicy) -> None:
    # Written aside and linked into place: a crash never leaves a segment with a partial header
    # (link, like O_EXCL, refuses a segment that exists already).
    tmp = f"{path}.new.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, SEG_HEADER.pack(SEG_MAGIC, seg, first, prev))
        policy.file(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _read_segment_header(fd: int, path: str) -> tuple:
    """(magic, segment, first entry, previous checksum) of a segment file, ordinary or packed."""
    raw = os.pread(fd, _HEADER_READ, 0)  # one read whichever kind of segment it is
    if raw[:8] == packed.PK_MAGIC:
        if len(raw) < packed.PK_HEADER.size:
            raise CorruptLog(path, "bad packed segment header")
        magic, seg, first, _count, prev, _orig = packed.PK_HEADER.unpack_from(raw)
        return magic, seg, first, prev
    raw = raw[: SEG_HEADER.size]
    if len(raw) != SEG_HEADER.size or raw[:8] != SEG_MAGIC:
        raise CorruptLog(path, "bad segment header")
    return SEG_HEADER.unpack(raw)


_HEADER_READ = max(SEG_HEADER.size, packed.PK_HEADER.size)


class Packed(NamedTuple):
    """A packed segment as the engine reads it: its entries (checksums recomputed and chained from
    its header), the digest of the index it had before gc packed it, and what is wrong with it."""

    entries: list
    orig_idx: bytes
    prev: bytes
    problem: str | None


def packed_entries(fd: int, seg: int) -> Packed:
    """Read a packed segment file's entries, each checksum recomputed from its meta and chained from
    the header's; the last must be the trailer's (a problem otherwise: the file is damage)."""
    try:
        pf = packed.read(fd)
    except (packed.PackError, OSError) as e:
        return Packed([], ZERO, ZERO, str(e))
    out: list = []
    prev, n = pf.prev, pf.first
    if pf.seg != seg:
        return Packed([], pf.orig_idx, pf.prev, f"packed file says segment {pf.seg}")
    STATS["entries_decoded"] += pf.entry_count
    for i, raw in enumerate(pf.entries):
        t, moves, objs, cut, recs, prevs, root, seal, idx, rw = raw
        bad = (_meta_shape_problem(n, t, moves, objs, pf.blocks, removed_ok=True) or _rows_shape_problem(objs, recs, prevs, root, seal, idx)
               or _rw_shape_problem(rw))
        if bad is None and seal != (i == pf.entry_count - 1):
            bad = "only its last entry is a seal entry"
        if bad is not None:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {bad}")
        try:
            checksum = logical_checksum(prev, n, t, objs, moves, cut, recs, prevs, root, seal, idx, rw)
        except (TypeError, msgspec.EncodeError) as e:
            return Packed([], pf.orig_idx, pf.prev, f"entry {n}: malformed packed meta: {e}")
        out.append(Entry(n, t, moves, objs, pf.blocks, cut, seg, SEG_HEADER.size + i, packed.PK_HEADER.size, 0, checksum,
                         recs, prevs, root, seal, idx, rw, pf.offsets))
        prev, n = checksum, n + 1
    if prev != pf.last:
        return Packed([], pf.orig_idx, pf.prev, "its entries do not chain to the checksum its trailer names")
    return Packed(out, pf.orig_idx, pf.prev, None)


class ScanEntry(NamedTuple):
    """One entry as verify sees it: the entry, its objects ``(id, type, canonical bytes or the
    IntegrityError that stopped them)``, and the file it is in."""

    entry: Entry
    objects: list
    where: str


class ScanProblem(NamedTuple):
    code: str
    where: str
    detail: str


class SegmentHead(NamedTuple):
    """What a segment file's header says: its number, its first entry, the checksum it chains to."""

    seg: int
    first: int
    prev: bytes


class SegmentEnd(NamedTuple):
    """Where a segment's scan ended: the next entry number and the checksum of the last entry read;
    ``complete`` when every entry of the file was read (not stopped by ``upto`` or by damage)."""

    next_entry: int
    prev: bytes
    complete: bool


def scan_log(engine: LogEngine, upto: int) -> Iterator[ScanEntry | ScanProblem]:
    """Read entries 1..upto from the segment files, sequentially, independently of the engine's
    tables: each entry's checksum chain, then each block decompressed and each object sliced out.

    Yields ScanProblem (and stops) where the log itself is damaged."""
    prev, n, seg = ZERO, 1, 1
    while n <= upto:
        end: SegmentEnd | None = None
        for item in scan_segment(engine.seg_path(seg), engine.seg_path(seg + 1), seg, upto):
            if isinstance(item, SegmentHead):
                if item.seg != seg or item.first != n or item.prev != prev:
                    yield ScanProblem("broken-log-chain", engine.seg_path(seg), chain_break(seg, n, prev, item))
                    return
            elif isinstance(item, SegmentEnd):
                end = item
            elif isinstance(item, ScanProblem):
                if item.code == "missing-segment":
                    item = item._replace(detail=f"{item.detail}; the log ends at entry {n - 1}")
                yield item
                return
            else:
                yield item
        if end is None or end.next_entry > upto:
            return
        if not end.complete or not os.path.exists(engine.seg_path(seg + 1)):
            yield ScanProblem("missing-segment", engine.seg_path(seg + 1), f"segment {seg + 1} is missing; the log ends at entry {end.next_entry - 1}")
            return
        prev, n, seg = end.prev, end.next_entry, seg + 1


def chain_break(seg: int, n: int, prev: bytes, head: SegmentHead) -> str:
    """Why segment ``seg``'s header does not continue the log at entry ``n`` (checksum ``prev``)."""
    why = (f"its header says segment {head.seg}, first entry {head.first}" if (head.seg, head.first) != (seg, n)
           else f"its header chains to checksum {head.prev.hex()}, entry {n - 1} has {prev.hex()}")
    return f"segment {seg} does not continue the log at entry {n} ({why})"


def scan_segment(path: str, next_path: str, seg: int, upto: int | None,
                 prev: bytes | None = None) -> Iterator[SegmentHead | ScanEntry | ScanProblem | SegmentEnd]:
    """Read one segment file on its own: its header (SegmentHead), then its entries up to entry
    ``upto`` (None: all), each checksum chained from the header's (or from ``prev``), then a
    SegmentEnd. Needs nothing from other segments (verify checks segments in parallel and chains
    them after).

    A ScanProblem ends the scan of this file (a damaged entry hides where the next one starts),
    except garbage after the last entry of a sealed segment, which is followed by a SegmentEnd."""
    dec = _decompressor()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield ScanProblem("missing-segment", path, f"segment {seg} is missing")
        return
    try:
        if packed.is_packed(fd):
            yield from _scan_packed(fd, path, seg, upto, prev, dec)
            return
        raw = os.pread(fd, SEG_HEADER.size, 0)
        if len(raw) != SEG_HEADER.size or raw[:8] != SEG_MAGIC:
            yield ScanProblem("corrupt-segment", path, "bad segment header")
            return
        _, hseg, first, hprev = SEG_HEADER.unpack(raw)
        yield SegmentHead(hseg, first, hprev)
        prev = hprev if prev is None else prev
        n = first
        size = os.fstat(fd).st_size
        off = SEG_HEADER.size
        while off < size and (upto is None or n <= upto):
            head = os.pread(fd, ENTRY_HEAD.size, off)
            if len(head) < ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                if os.path.exists(next_path):
                    break  # garbage after the last entry of a sealed segment: reported below
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: bad entry header")
                return
            _, mlen, dlen = ENTRY_HEAD.unpack(head)
            length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
            if mlen > MAX_META or off + length > size:
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: truncated ({size - off} of {length} bytes)")
                return
            if dlen > LARGE_BLOB:  # a large blob: read meta and trailer, stream the blocks
                e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                                 dlen, off, prev, seg, n)
                buf = None
            else:
                buf = os.pread(fd, length, off)
                e = parse_entry(buf, 0, len(buf), prev, seg, n)
            if isinstance(e, str):
                yield ScanProblem("corrupt-entry", path, f"entry {n} at offset {off}: {e}")
                return
            if buf is not None:
                e = e._replace(offset=off, data_off=off + e.data_off)
            yield ScanEntry(e, _entry_objects(buf, e, off, dec, fd), path)
            prev, n = e.checksum, n + 1
            off += length
        if upto is not None and n > upto and off < size:
            yield SegmentEnd(n, prev, False)  # the snapshot ends inside this file
            return
        if off != size:
            yield ScanProblem("garbage-after-entry", path, f"{size - off} bytes after the last entry of sealed segment {seg}")
        yield SegmentEnd(n, prev, True)
    finally:
        os.close(fd)


def _scan_packed(fd: int, path: str, seg: int, upto: int | None, prev: bytes | None,
                 dec: zstandard.ZstdDecompressor) -> Iterator[SegmentHead | ScanEntry | ScanProblem | SegmentEnd]:
    """scan_segment over a packed segment: its entries from the meta frame, chained from its header,
    each object sliced out of the merged block it lies in (each block decompressed once). An object
    whose body gc removed is given as a BodyRemoved error: verify decides whether a deletion names it."""
    hdr = _read_segment_header(fd, path)
    yield SegmentHead(hdr[1], hdr[2], hdr[3])
    pk = packed_entries(fd, seg)
    if pk.problem is not None:
        yield ScanProblem("corrupt-segment", path, f"packed segment {seg}: {pk.problem}")
        return
    n = hdr[2]
    last = hdr[3] if prev is None else prev
    if prev is not None and prev != hdr[3]:
        yield ScanProblem("broken-log-chain", path, f"packed segment {seg} does not chain from checksum {prev.hex()}")
        return
    cache: dict[int, Any] = {}
    for e in pk.entries:
        if upto is not None and e.n > upto:
            yield SegmentEnd(e.n, last, False)
            return
        out: list = []
        for oid, otype, length, bi, off in e.objs:
            if bi == REMOVED:
                out.append((oid, otype, BodyRemoved(oid.hex())))
                continue
            got = cache.get(bi)
            if got is None:
                comp, raw_len, stored_len = e.blocks[bi][:3]
                bo = e.bofs[bi] if e.bofs is not None else 0
                if comp == COMP_ZSTD and raw_len > LARGE_BLOB:
                    h = blake3.blake3()
                    try:
                        for chunk in stream_block(fd, bo, stored_len, raw_len):
                            h.update(chunk)
                        got = HashedLarge(h.digest(), raw_len)
                    except IntegrityError as err:
                        got = err.args[2]
                else:
                    stored = os.pread(fd, stored_len, bo)
                    try:
                        got = dec.decompress(stored, max_output_size=raw_len) if comp == COMP_ZSTD else stored
                        if len(got) != raw_len:
                            got = "block decompresses to the wrong size" if comp == COMP_ZSTD else "block truncated"
                    except zstandard.ZstdError as err:
                        got = f"zstd data corrupt: {err}"
                if len(cache) > 4:
                    cache.clear()  # blocks are laid in entry order: an entry reads the blocks of its neighbours
                cache[bi] = got
            if isinstance(got, str):
                out.append((oid, otype, IntegrityError(oid.hex(), "", got)))
            else:
                out.append((oid, otype, got if isinstance(got, HashedLarge) else got[off : off + length]))
        yield ScanEntry(e, out, path)
        last, n = e.checksum, e.n + 1
    yield SegmentEnd(n, last, True)


class HashedLarge(NamedTuple):
    """What verify gets for a large blob's block: its BLAKE3, computed while streaming it."""

    digest: bytes
    length: int


def _entry_objects(buf: bytes | None, e: Entry, base: int, dec: zstandard.ZstdDecompressor, fd: int) -> list:
    out: list[tuple] = []
    starts = []
    pos = e.data_off - base
    for _comp, _raw_len, stored_len in e.blocks:
        starts.append(pos)
        pos += stored_len
    raws: dict[int, Any] = {}
    for bi, (comp, raw_len, stored_len) in enumerate(e.blocks):
        if comp == COMP_ZSTD and raw_len > LARGE_BLOB:
            h = blake3.blake3()
            try:
                for chunk in stream_block(fd, base + starts[bi], stored_len, raw_len):
                    h.update(chunk)
                raws[bi] = HashedLarge(h.digest(), raw_len)
            except IntegrityError as err:
                raws[bi] = err.args[2]
            continue
        stored = buf[starts[bi] : starts[bi] + stored_len] if buf is not None else os.pread(fd, stored_len, base + starts[bi])
        if comp == COMP_ZSTD:
            try:
                raw = dec.decompress(stored, max_output_size=raw_len)
                if len(raw) != raw_len:
                    raise zstandard.ZstdError("block decompresses to the wrong size")
            except zstandard.ZstdError as err:
                raws[bi] = f"zstd data corrupt: {err}"
                continue
        elif comp == COMP_RAW:
            raw = stored
        else:
            raws[bi] = f"unknown block compression {comp}"
            continue
        raws[bi] = raw
    for oid, otype, length, bi, off in e.objs:
        got = raws.get(bi)
        if got is None or isinstance(got, str):
            out.append((oid, otype, IntegrityError(oid.hex(), "", got or "block missing")))
            continue
        data = got if isinstance(got, HashedLarge) else got[off : off + length]
        out.append((oid, otype, data))
    return out
