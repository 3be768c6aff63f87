"""Reading entries back: parsing one entry's bytes and checking its meta's checksum and shape.

Invariants kept here:

* an entry is taken only whole: magic, sizes, a trailer length that agrees and a chain checksum
  over its meta that matches; anything else is the reason it is not an entry (a string);
* a checksummed meta is still checked for shape: the checksum proves the entry is what its writer
  wrote, not that the writer was objstore, and a crafted field must not fail a reader later.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import codec
from .. import labels as labels_mod
from .entry import LogEntry
from .format import (
    CHAIN_TYPES,
    COMP_RAW,
    COMP_ZSTD,
    ENTRY_HEAD,
    ENTRY_MAGIC,
    ENTRY_TRAILER,
    MAX_ENTRY_DATA,
    MAX_META,
    REMOVED,
    STATS,
    _dec,
    logical_checksum,
)


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


def _check_meta(meta: bytes, checksum: bytes, prev: bytes, expect_n: int | None, dlen: int) -> tuple | str:
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
    bad = (_meta_shape_problem(n, t, moves, objs, blocks) or _rows_shape_problem(objs, recs, prevs, root, seal, idx)
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


def _meta_shape_problem(n: Any, t: Any, moves: Any, objs: Any, blocks: Any) -> str | None:
    """What is wrong with the shape of a checksummed entry's meta, or None. The checksum proves the
    entry is what its writer wrote, not that the writer was objstore: a crafted entry must not make
    a reader fail on a field of the wrong type or size later. An object row may have block ``REMOVED``
    (offset 0): its body is not in the log (gc removed it, or an upgrade replayed it after the old store's gc
    had); whether a deletion or redaction covers it is verify's question, not the shape's."""
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
                or not ((0 <= o[3] < nb and o[4] + o[2] <= blocks[o[3]][1]) or (o[3] == REMOVED and o[4] == 0))):
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


def parse_entry(buf: bytes, pos: int, end: int, prev: bytes, seg: int, expect_n: int | None) -> LogEntry | str:
    """The entry at ``buf[pos:]`` or the reason it is not a complete, checksummed entry."""
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
    got = _check_meta(bytes(buf[pos + ENTRY_HEAD.size : pos + ENTRY_HEAD.size + mlen]), checksum, prev, expect_n, dlen)
    if isinstance(got, str):
        return got
    n, t, moves, objs, blocks, cut, recs, prevs, root, seal, idx, rw = got
    return LogEntry(n, t, moves, objs, blocks, cut, seg, pos, pos + ENTRY_HEAD.size + mlen, length, checksum, recs, prevs, root, seal, idx, rw)
