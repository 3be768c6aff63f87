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

import json as _stdjson
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn

import blake3
import msgspec
import zstandard

from ..errors import IntegrityError, InvalidId, InvalidInput, UnknownObjectType

HEX_LEN = 64

BLOB = "blob"
RECORD = "record"
FORK = "fork"
JOURNAL = "journal"
COMPACTION_SEGMENT = "segment"
GRANT = "grant"
DELETION = "deletion"  # a recorded deletion or redaction (issue 17; docs/FORMAT.md "Deletion")
SCHEMA = "schema"  # the declaration of a record kind the core does not know (format 5; runs.kinds)
TYPES = (BLOB, RECORD, FORK, JOURNAL, COMPACTION_SEGMENT, GRANT, DELETION, SCHEMA)
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
        raise InvalidInput(f"unknown object type {otype!r}")
    if otype == BLOB:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidInput(f"a blob's payload is bytes, not {type(value).__name__}")
        payload = bytes(value)
    elif type(value) is dict:
        try:
            payload = _enc.encode(value)
        except TypeError:  # an Id (a bytes subclass the encoder does not take) is encoded as the plain bytes it is
            payload = _enc.encode(plain_ids(value))
    else:
        raise InvalidInput(f"a {otype}'s payload is a map, not {type(value).__name__}")
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


class Id(bytes):
    """An object id as the API hands it out (``RunLog.put_blob``, ``Record.id``): the 32 bytes themselves
    — it is ``bytes``, equal to, hashing and slicing as the plain bytes, so nothing that takes bytes
    breaks — whose ``str``, ``format`` and ``repr`` are the 64 hex digits every command takes
    (``objstore cat <id>``). Where an id enters the store it is stored as the plain bytes it is
    (``plain_ids``): the store's own checks (``type(v) is bytes``) and the encoder see plain bytes."""

    __slots__ = ()

    def __str__(self) -> str:
        return self.hex()

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return format(self.hex(), spec)

    def __reduce__(self) -> tuple[type[Id], tuple[bytes]]:
        return (Id, (bytes(self),))


def id_hook(obj: Any) -> bytes:
    """``enc_hook`` of the encoders that build entries: an ``Id`` handed back to a low-level call (a ref
    move's value, an entry's row) is encoded as the plain bytes it is. msgspec calls it only for a
    type it does not take, so plain values never reach it."""
    if isinstance(obj, bytes):
        return bytes(obj)
    raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")


def plain_ids(value: Any) -> Any:
    """``value`` with every bytes subclass (an ``Id``) inside maps and lists replaced by its plain bytes:
    what the store keeps and the encoder takes. Called only on the rare path where an encode refused
    a value (``Store.put``), never per commit."""
    t = type(value)
    if t is dict:
        return {k: plain_ids(v) for k, v in value.items()}
    if t is list or t is tuple:
        return t(plain_ids(v) for v in value)
    if t is not bytes and isinstance(value, bytes):
        return bytes(value)
    return value


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
    """Sorted-key compact JSON: the same value always gives the same bytes. A string that cannot
    be UTF-8 (a lone surrogate, as a non-UTF-8 command-line argument decodes to) is InvalidInput."""
    try:
        return _json.encode(to_jsonable(value))
    except UnicodeEncodeError as e:
        raise InvalidInput(f"text that is not valid Unicode (a lone surrogate {e.object[e.start:e.end]!r}): "
                           "objstore stores UTF-8 only") from None


def canonical_json_plain(value: Any) -> bytes:
    """``canonical_json`` of a value that holds no bytes (folded states, attempt views, whose
    ids are hex already): the same bytes, without the conversion pass."""
    return _json.encode(value)


# -- input JSON: the one parser and value check every input path uses ---------------------------
#
# What a JSON value from outside (an ingest line, a journal body, a library caller's map) may be:
# objects with string keys (each key once), arrays, strings of Unicode scalar values (no lone
# surrogates: they cannot be UTF-8), finite numbers, integers that MessagePack can hold
# (int64 / uint64), true, false, null, nested at most MAX_JSON_DEPTH levels. Anything else is
# InvalidInput (exit 5), found before anything is written.

MAX_JSON_DEPTH = 64
INT_MIN = -(1 << 63)
INT_MAX = (1 << 64) - 1


def _no_constant(name: str) -> NoReturn:
    raise _Refused(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _Refused(f"number {text[:40]} is out of the float64 range")
    return v


def _bounded_int(text: str) -> int:
    if len(text) > 21:  # longer than any int64/uint64 in decimal: refuse before converting
        raise _Refused(f"integer {text[:24]}... is outside the int64/uint64 range")
    v = int(text)
    if not INT_MIN <= v <= INT_MAX:
        raise _Refused(f"integer {text} is outside the int64/uint64 range")
    return v


def _pairs(items: list) -> dict:
    out = dict(items)
    if len(out) != len(items):
        seen: set = set()
        for k, _ in items:
            if k in seen:
                raise _Refused(f"key {k[:60]!r} appears twice in one object")
            seen.add(k)
    return out


class _Refused(ValueError):
    """Raised inside the stdlib parser's hooks; becomes InvalidInput."""


_strict_json = _stdjson.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant,
                                    parse_float=_finite_float, parse_int=_bounded_int)


def parse_json(data: bytes | str, what: str = "input", error: Callable[[str], Exception] = InvalidInput,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """One JSON value from outside: UTF-8 text, nothing after it, no duplicate keys, no NaN or
    Infinity (nor a number that overflows float64), integers within int64/uint64, no lone
    surrogate escapes, at most ``max_depth`` levels deep. Raises ``error(message)`` (InvalidInput,
    exit 5, by default), the message starting with ``what`` when it is given."""
    def fail(phrase: str, sep: str = " ") -> Exception:
        return error(f"{what}{sep}{phrase}" if what else phrase)

    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail(f"is not UTF-8: {e.reason} at byte {e.start}" if what else f"not UTF-8: {e.reason} at byte {e.start}") from None
    elif isinstance(data, str):
        text = data
    else:
        raise fail("must be JSON text" if what else "not JSON text")
    try:
        value = _strict_json.decode(text)
    except _Refused as e:
        raise fail(str(e), ": ") from None
    except RecursionError:  # the stdlib parser recurses once per level: far past max_depth
        raise fail(f"nests deeper than {max_depth} levels") from None
    except ValueError as e:
        raise fail(f"is not JSON: {e}" if what else f"not JSON: {e}") from None
    # fewer brackets than levels allowed cannot nest too deep: the common case costs two counts
    if text.count("{") + text.count("[") > max_depth and _deeper_than(value, max_depth):
        raise fail(f"nests deeper than {max_depth} levels")
    if isinstance(data, str) or _SURROGATE_ESCAPE.search(text):
        # text decoded from UTF-8 holds no surrogate; a backslash-u escape (or a str handed over) can
        check_json_value(value, what, error, max_depth)
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _deeper_than(value: Any, max_depth: int) -> bool:
    """Whether a parsed JSON value nests containers more than ``max_depth`` levels (iterative)."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        if depth > max_depth:
            return True
        children = v.values() if type(v) is dict else v
        for x in children:
            if type(x) is dict or type(x) is list:
                push((x, depth + 1))
    return False


# The C path of the value rules: msgspec writes the value as JSON and reads it back; if what comes
# back equals what went in, the value holds only what JSON holds exactly. JSON cannot hold what the
# rules refuse, so each comes back different or fails: NaN and Infinity come back null, bytes as a
# base64 string, a non-str key as a string (or fails), a set or any other type as something else,
# a lone surrogate fails to encode. Two rules JSON does not enforce are checked on the text: an
# integer beyond int64/uint64 needs 20 or more digits in a row, or a minus and 19 (such a run in a
# string, or an integer near the limits, only sends the value to the walk), and a value with fewer brackets than the depth limit cannot nest
# past it. Anything that does not pass goes to the Python walk, which decides and names the problem
# (a tuple comes back a list and passes there: tuples count as arrays).
_fast_json_enc = msgspec.json.Encoder()
_fast_json_dec = msgspec.json.Decoder()
_DIGITS_AS_0 = bytes.maketrans(b"123456789", b"000000000")  # translate + find: far cheaper than a regex here
_RUN20, _NEG19 = b"0" * 20, b"-" + b"0" * 19


def _long_digits(text: bytes) -> bool:
    """Whether JSON text holds 20 digits in a row, or a minus and 19: all an out-of-range integer can be."""
    t = text.translate(_DIGITS_AS_0)
    return _RUN20 in t or _NEG19 in t


_JSON_FAILS = (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError, msgspec.DecodeError)


def json_text_ok(text: bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text msgspec wrote holds no integer outside int64/uint64 and has at most
    ``max_depth`` brackets (so it cannot nest deeper): the two rules a round trip does not check."""
    return text.count(b"{") + text.count(b"[") <= max_depth and not _long_digits(text)


def json_value_ok(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True if ``value`` certainly passes ``check_json_value`` (decided in C); False means "ask
    the walk", not "refused"."""
    try:
        text = _fast_json_enc.encode(value)
        back = _fast_json_dec.decode(text)
    except _JSON_FAILS:
        return False
    if not back == value:
        return False
    if json_text_ok(text, max_depth):
        return True
    # many brackets (or digits) in an otherwise exact value: the walk over containers only decides
    return not _long_digits(text) and not _deeper_than(back, max_depth)


def check_json_value(value: Any, what: str = "value", error: Callable[[str], Exception] = InvalidInput,
                     max_depth: int = MAX_JSON_DEPTH) -> None:
    """The rules of ``parse_json`` for a value built in Python (a library caller's map): str keys,
    JSON-like types only (tuples count as arrays), finite floats, int64/uint64 integers, strings
    without lone surrogates, containers at most ``max_depth`` levels deep. Decided in C
    (``json_value_ok``) when the value passes; the walk below runs only to name a problem (and for
    tuples and the rare value the C path cannot clear). Iterative: a value nested a million deep is
    refused, not a RecursionError. (A subclass of str, int, float, list or dict that compares equal
    to its plain value passes the C path; it is stored as that plain value's bytes.)"""
    if json_value_ok(value, max_depth):
        return
    _walk_json_value(value, what, error, max_depth)


def _walk_json_value(value: Any, what: str, error: Callable[[str], Exception], max_depth: int) -> None:
    pre = f"{what}: " if what else ""
    deeper = f"{what + ' ' if what else ''}nests deeper than {max_depth} levels"
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        t = type(v)
        if t is str:
            if not v.isascii():
                _check_text(v, what, error)
        elif t is dict:
            if depth > max_depth:
                raise error(deeper)
            for k, x in v.items():
                if type(k) is not str:
                    raise error(f"{pre}map keys must be strings, got {type(k).__name__}")
                if not k.isascii():
                    _check_text(k, what, error)
                push((x, depth + 1))
        elif t is list or t is tuple:
            if depth > max_depth:
                raise error(deeper)
            for x in v:
                push((x, depth + 1))
        elif t is int:
            if not INT_MIN <= v <= INT_MAX:
                shown = v if v.bit_length() <= 100 else f"of {v.bit_length()} bits"
                raise error(f"{pre}integer {shown} is outside the int64/uint64 range")
        elif t is float:
            if not math.isfinite(v):
                raise error(f"{pre}{v!r} is not a JSON number (NaN and Infinity are refused)")
        elif t is not bool and v is not None:
            raise error(f"{pre}{t.__name__} is not JSON-like")


def _check_text(v: str, what: str, error: Callable[[str], Exception]) -> None:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{what + ': ' if what else ''}a string holds a lone surrogate (U+{ord(v[e.start]):04X}), which is not Unicode text") from None


def check_text(v: str, what: str, error: Callable[[str], Exception] = InvalidInput) -> str:
    """A string that can be stored: UTF-8-encodable (no lone surrogates)."""
    if not v.isascii():
        _check_text(v, what, error)
    return v


def zstd_chunks(source: Any, limit: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The decompressed bytes of one zstd frame read from ``source`` (bytes, or any object with
    ``read``), in chunks of at most ``chunk``, stopping after ``limit`` bytes whatever the frame
    claims: a large or crafted frame is never held in memory. Raises ``zstandard.ZstdError``."""
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_across_frames=False)
    left = limit
    while left > 0:
        got = reader.read(min(chunk, left))
        if not got:
            return
        left -= len(got)
        yield got


def check_stream(chunks: Iterable[bytes], raw_len: int, members: Iterable[tuple[int, int, bytes]]) -> str | None:
    """Hash-check objects in a block while it streams, never holding it: ``chunks`` yield the
    block's decompressed bytes in order, ``members`` are (offset, length, id) of the objects to
    check. None if every member hashes to its id and the block is exactly ``raw_len`` bytes, else
    the problem. (How a reader refuses a block that declares a huge size before allocating it.)"""
    members = sorted(members)
    for (o1, l1, _), (o2, _, _) in zip(members, members[1:], strict=False):
        if o1 + l1 > o2:
            return "objects overlap in their block"
    if members and members[-1][0] + members[-1][1] > raw_len:
        return f"an object lies past the end of its block ({raw_len} bytes)"
    i, h, pos = 0, None, 0
    for chunk in chunks:
        end = pos + len(chunk)
        if end > raw_len:
            return f"block decompresses to more than its declared {raw_len} bytes"
        view = memoryview(chunk)
        while i < len(members):
            off, ln, oid = members[i]
            if off >= end:
                break
            if h is None:
                h = blake3.blake3()
            h.update(view[max(off, pos) - pos : min(off + ln, end) - pos])
            if off + ln > end:
                break
            if h.digest() != oid:
                return f"hash mismatch (content does not match id {oid.hex()})"
            h, i = None, i + 1
        pos = end
    if pos != raw_len:
        return f"block decompresses to {pos} of its declared {raw_len} bytes"
    return None


def iter_objects(raw: bytes) -> Iterator[bytes]:
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
        for oid, otype, p in zip(ids, types, payloads, strict=False):
            try:
                v = _dec.decode(p)
            except msgspec.DecodeError:
                continue
            if isinstance(v, dict):
                out[oid] = (otype, v)
        return out
    for oid, otype, v in zip(ids, types, values, strict=False):
        if type(v) is dict:
            out[oid] = (otype, v)
    return out


def checked_payload(value: dict) -> tuple[dict, bytes]:
    """(the value as stored, its canonical payload) for a value the encoder refused: an ``Id`` (a bytes
    subclass msgspec does not take) becomes the plain bytes it is — in the value too, which the entry's
    index facts (``runs.facts.object_facts``: ``type(v) is bytes``) and the decoded cache read; anything
    else is ``encode_input``'s InvalidInput."""
    try:
        value = plain_ids(value)
    except RecursionError:
        pass  # nested past the encoder's limit too: encode_input names that
    return value, encode_input(value)


def encode_input(value: dict) -> bytes:
    """The canonical payload of a structured object, or InvalidInput for a value MessagePack cannot
    hold (an integer outside int64/uint64, a lone surrogate, nesting past the encoder's limit). The
    input checks (records.check_body, codec.check_json_value) refuse these first; this is the net
    under every other path, so that none of them is a traceback, and nothing is written."""
    try:
        return _enc.encode(value)
    except (OverflowError, UnicodeEncodeError, RecursionError, TypeError, msgspec.EncodeError) as e:
        raise InvalidInput(f"cannot store this value: {type(e).__name__}: {str(e)[:200]}") from None
