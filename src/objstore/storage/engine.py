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

import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import blake3
import msgspec
import zstandard

from ..errors import (
    Conflict,
    CorruptLog,
    IntegrityError,
    LockTimeout,
    ObjectNotFound,
    ObjstoreError,
    Refused,
)
from . import authority, codec, runrefs
from . import labels as labels_mod
from .log import segindex
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
