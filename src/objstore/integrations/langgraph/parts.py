"""Channel values as content-addressed parts: what the LangGraph savers store a checkpoint's state as.

A checkpoint's ``channel_values`` is split into *parts*, each one blob: a list channel (the
``messages`` channel of a chat graph holds the whole conversation) gives one part per element,
serialized one by one through LangGraph's own serde; any other value is one part. A part's blob is
``<serde type> LF <serde bytes>``, so it reads back alone. Because blob ids are the hash of their
bytes, an element that did not change since the previous checkpoint is the same blob: a chat of N
turns stores each message once, not N times, yet every checkpoint names all its parts and reads back
whole, with no delta to replay.

The record body carries the flat list of part ids (a ref field, so verify follows them and gc keeps
them) and a ``layout``: ``[[channel, n], …]`` in channel order, ``n`` = -1 for a single value, else
the element count of a list; the parts follow that order. This module is pure (no store): the savers
put and get the blobs. ``strict_serde`` is the serializer they read and write parts with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from langgraph.checkpoint.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ...errors import InvalidInput, InvalidRecord

SINGLE = -1  # layout count of a channel stored as one part


def encode(serde: Any, value: Any) -> bytes:
    """One part's blob: the serde type, a line feed, the serde bytes."""
    t, data = serde.dumps_typed(value)
    return t.encode() + b"\n" + bytes(data)


def loads(serde: Any, t: str, data: bytes) -> Any:
    """``serde.loads_typed`` of a stored value; a type the serializer does not read (``pickle``
    under the savers' default, which never unpickles) is an InvalidRecord naming it, not
    LangGraph's NotImplementedError."""
    try:
        return serde.loads_typed((t, data))
    except NotImplementedError:
        raise InvalidRecord(f"a LangGraph value of serde type {t!r} is refused: the saver's serializer does not read it "
                            "(pickle is never read by default; docs/LANGGRAPH.md, 'What a reader constructs')") from None


def decode(serde: Any, blob: bytes) -> Any:
    t, sep, data = blob.partition(b"\n")
    if not sep:
        raise InvalidRecord("a LangGraph part blob has no type line")
    return loads(serde, t.decode(errors="replace"), data)


def split(serde: Any, values: Mapping[str, Any], channels: Iterable[str] | None = None) -> tuple[list[bytes], list[list[Any]]]:
    """(part blobs in order, layout) of ``values`` (only ``channels`` of them when given, in that order).

    Only an exact ``list`` is split by element (a tuple or a list subclass would come back as a
    plain list, so it is one part like any other value)."""
    blobs: list[bytes] = []
    layout: list[list[Any]] = []
    for name in sorted(values) if channels is None else channels:
        if name not in values:
            continue
        v = values[name]
        if type(v) is list:
            blobs.extend(encode(serde, e) for e in v)
            layout.append([name, len(v)])
        else:
            blobs.append(encode(serde, v))
            layout.append([name, SINGLE])
    return blobs, layout


def join(serde: Any, layout: Sequence[Sequence[Any]], ids: Sequence[bytes], get: Callable[[bytes], bytes]) -> dict[str, Any]:
    """The channel values a layout and its part ids describe (each part read with ``get``)."""
    out: dict[str, Any] = {}
    i = 0
    for name, n in layout:
        if n == SINGLE:
            out[name] = decode(serde, get(ids[i]))
            i += 1
        else:
            out[name] = [decode(serde, get(oid)) for oid in ids[i:i + n]]
            i += n
    if i != len(ids):
        raise InvalidRecord(f"a LangGraph layout names {i} parts, the record lists {len(ids)}")
    return out


def strict_serde(serde: SerializerProtocol | None, allowed_types: Iterable[type | tuple[str, ...]] = ()) -> SerializerProtocol:
    """The savers' serializer. By default LangGraph's JsonPlusSerializer in its strict msgpack mode:
    a stored value names the type to rebuild it as, and anyone who can commit can name any
    callable (``('os', 'system', CMD)``), so a reader constructs only LangGraph's built-in safe
    types (``SAFE_MSGPACK_TYPES``: LangChain messages, Send, Interrupt, Command, datetime, uuid,
    sets, ...) plus ``allowed_types`` (classes, or ``(module, name)`` tuples); any other type comes
    back as its serialized fields, and pickle is never read. A ``serde`` given is the caller's
    own trust decision, used as it is (``allowed_types`` extend its allow-list when it has one)."""
    allowed = tuple(allowed_types)
    if serde is None:
        return JsonPlusSerializer(allowed_msgpack_modules=allowed or None)
    if allowed:
        extend = getattr(serde, "with_msgpack_allowlist", None)
        if extend is None:
            raise InvalidInput(f"allowed_types needs a serializer with an allow-list (JsonPlusSerializer), got {type(serde).__name__}")
        return cast(SerializerProtocol, extend(allowed))
    return serde
