"""Canonical encoding of objects and their ids.

An object is ``(type, payload)``. Its canonical bytes are

    <type> SP <decimal payload length> NUL <payload>

exactly like git's loose-object header. ``blob`` payloads are raw bytes; every
other type's payload is a MessagePack map produced by msgspec with keys sorted,
integers in their shortest form and floats as float64, so one logical object has
exactly one encoding. Decoding re-encodes and rejects anything that is not the
canonical form (duplicate keys, long integer forms, unsorted keys).

The id is BLAKE3-256 of the canonical bytes, computed before any compression,
so the stored representation can change without changing ids. See
docs/FORMAT.md; fixtures/golden.json pins it.
"""

from __future__ import annotations

from typing import Any

import blake3
import msgspec

from .errors import IntegrityError, InvalidId, UnknownObjectType

ID_LEN = 32
HEX_LEN = 64

BLOB = "blob"
RECORD = "record"
FORK = "fork"
JOURNAL = "journal"
SEGMENT = "segment"
GRANT = "grant"
TYPES = (BLOB, RECORD, FORK, JOURNAL, SEGMENT, GRANT)
_TYPES_B = {t.encode(): t for t in TYPES}

# Header is at most "segment 18446744073709551615\0"; 40 bytes bounds the scan.
_MAX_HEADER = 40

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()
STATS = {"objects_decoded": 0}  # what 'counted, not timed' tests count
_HCACHE: dict[bytes, tuple[str, int]] = {}  # header text -> (type, payload length), once parsed


def hash_bytes(data: bytes) -> bytes:
    return blake3.blake3(data).digest()


def header(otype: str, length: int) -> bytes:
    return b"%s %d\x00" % (otype.encode(), length)


_HEAD = {t: t.encode() + b" %d\x00" for t in TYPES}


def encode(otype: str, value: Any) -> bytes:
    """Canonical bytes of an object; ``value`` is bytes for a blob, a dict otherwise."""
    head = _HEAD.get(otype)
    if head is None:
        raise ValueError(f"unknown object type {otype!r}")
    if otype == BLOB:
        payload = bytes(value)
    elif type(value) is dict:
        payload = _enc.encode(value)
    else:
        raise TypeError("structured payloads are maps")
    return head % len(payload) + payload


def object_id(canonical: bytes) -> bytes:
    return hash_bytes(canonical)


def split_header(canonical: bytes, oid: bytes | None = None, where: str | None = None) -> tuple[str, int]:
    """Parse and check the header; returns (type, payload offset)."""
    name = oid.hex() if oid else "?"
    nul = canonical.find(b"\x00", 0, _MAX_HEADER)
    if nul < 0:
        raise IntegrityError(name, where or "header", "bad header: no terminator")
    head = canonical[:nul]
    sp = head.find(b" ")
    if sp <= 0:
        raise IntegrityError(name, where or "header", "bad header")
    tname, length = head[:sp], head[sp + 1 :]
    if not length.isdigit() or (len(length) > 1 and length[:1] == b"0"):
        raise IntegrityError(name, where or "header", "bad header length")
    otype = _TYPES_B.get(tname)
    if otype is None:
        raise UnknownObjectType(name, where or "header", tname.decode("ascii", "replace"))
    n = int(length)
    actual = len(canonical) - nul - 1
    if actual > n:
        raise IntegrityError(name, where or "payload", f"garbage after object ({actual - n} extra bytes)")
    if actual < n:
        raise IntegrityError(name, where or "payload", f"truncated object ({actual} of {n} payload bytes)")
    return otype, nul + 1


def parse_header(canonical: bytes, oid: bytes | None = None, where: str | None = None) -> tuple[str, int]:
    """``split_header`` with a cache of header texts already parsed (the hot path of every read)."""
    nul = canonical.find(b"\x00", 0, _MAX_HEADER)
    known = _HCACHE.get(canonical[:nul]) if nul > 0 else None
    if known is not None and known[1] == len(canonical) - nul - 1:
        return known[0], nul + 1
    otype, off = split_header(canonical, oid, where)
    # Structured objects repeat a few lengths; blob lengths are arbitrary and would crowd them out.
    if otype != BLOB and len(_HCACHE) < 4096:
        _HCACHE[canonical[: off - 1]] = (otype, len(canonical) - off)
    return otype, off


def decode(canonical: bytes, oid: bytes | None = None, strict: bool = True) -> tuple[str, Any]:
    """(type, value) from canonical bytes.

    ``strict`` (verify, tests) re-encodes and rejects any non-canonical form. Reads
    of hash-checked bytes may skip that: bytes that hash to their id are exactly
    the bytes that were written, so only a foreign writer could make them non-canonical.
    """
    otype, off = parse_header(canonical, oid)
    STATS["objects_decoded"] += 1
    payload = canonical[off:]
    if otype == BLOB:
        return otype, bytes(payload)
    name = oid.hex() if oid else "?"
    try:
        value = _dec.decode(payload)
    except msgspec.DecodeError as e:
        raise IntegrityError(name, "payload", f"undecodable payload: {e}") from None
    if not isinstance(value, dict):
        raise IntegrityError(name, "payload", "payload is not a map")
    if not strict:
        return otype, value
    try:
        again = _enc.encode(value)
    except (TypeError, msgspec.EncodeError) as e:
        raise IntegrityError(name, "payload", f"non-canonical payload: {e}") from None
    if again != payload:
        raise IntegrityError(name, "payload", "non-canonical payload encoding")
    return otype, value


def parse_id(text: str) -> bytes:
    """A full 64-hex id as bytes; raises InvalidId."""
    if not isinstance(text, str) or len(text) != HEX_LEN:
        raise InvalidId(text, f"expected {HEX_LEN} hex digits")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidId(text, "not hexadecimal") from None


def to_jsonable(value: Any) -> Any:
    """Replace bytes (ids) with hex strings, recursively, for JSON output."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


_json = msgspec.json.Encoder(order="sorted")


def canonical_json(value: Any) -> bytes:
    """Sorted-key compact JSON: the same value always gives the same bytes."""
    return _json.encode(to_jsonable(value))


def canonical_json_plain(value: Any) -> bytes:
    """``canonical_json`` of a value that holds no bytes (folded states, attempt views, whose
    ids are hex already): the same bytes, without the conversion pass."""
    return _json.encode(value)


def iter_objects(raw: bytes):
    """The canonical objects laid end to end in ``raw`` (a decompressed block), in order.

    Stops quietly at anything that does not parse: callers hash-check what they get."""
    pos, end = 0, len(raw)
    mv = memoryview(raw)
    while pos < end:
        nul = raw.find(b"\x00", pos, pos + _MAX_HEADER)
        if nul < 0:
            return
        sp = raw.find(b" ", pos, nul)
        if sp < 0 or not raw[sp + 1 : nul].isdigit():
            return
        stop = nul + 1 + int(raw[sp + 1 : nul])
        if stop > end:
            return
        yield bytes(mv[pos:stop])
        pos = stop


_ARRAY = b"\xdd"  # msgpack array32: the payloads of a block, framed as one array, decode in one call


def decode_block(raw: bytes) -> dict:
    """{id: (type, value)} of the structured objects of a decompressed block, each hash-checked;
    one msgspec call decodes them all (not strict: bytes that hash to their id are what was
    written). A damaged object is left out, to be reported if and when it is asked for."""
    ids, types, payloads = [], [], []
    for data in iter_objects(raw):
        nul = data.find(b"\x00", 0, _MAX_HEADER)
        otype = _TYPES_B.get(data[: data.find(b" ", 0, nul)])
        if otype is None or otype == BLOB:
            continue
        ids.append(hash_bytes(data))
        types.append(otype)
        payloads.append(data[nul + 1 :])
    out = {}
    try:
        values = _dec.decode(_ARRAY + len(payloads).to_bytes(4, "big") + b"".join(payloads))
    except msgspec.DecodeError:
        values = None
    if values is None or len(values) != len(ids):
        for oid, otype, p in zip(ids, types, payloads):
            try:
                v = _dec.decode(p)
            except msgspec.DecodeError:
                continue
            if isinstance(v, dict):
                out[oid] = (otype, v)
        return out
    for oid, otype, v in zip(ids, types, values):
        if type(v) is dict:
            out[oid] = (otype, v)
    return out
