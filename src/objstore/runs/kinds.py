"""Record kinds the core does not know: ``x.<integration>.<name>``, each declared by a schema object.

An integration (``objstore.integrations.langgraph``) declares each of its kinds once per store by
committing a ``schema`` object behind the ref ``schema/<kind>``::

    {kind, fields: [[name, type, required, is_ref], …], previous: <id or nil>, time}

``type`` is one of ``str int float bool bytes id map list`` (``id``: a 32-byte object id; ``map``:
a map with string keys; ``list``: a list). An ``is_ref`` field is an ``id`` or a ``list`` of ids:
objects the record references, which verify follows and gc keeps (they are at the body's top
level or one level down, so the entry's index row lists them: ``runs.facts.body_refs``). Schemas are
append-only per kind: the ref is a forward-only chain (``storage.refs``), a new version names its
predecessor, and a record names the version it was written under (its payload's ``schema``).

The schemas compile to msgspec Structs (``compiled``), so a body is checked in C, by the writer
(``RunLog.append``) and by verify alike; a record of an ``x.`` kind whose schema is missing, not a
schema of its kind, or that its body does not fit is ``malformed-object``.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from ..errors import InvalidRecord
from ..storage.runrefs import SCHEMA_PREFIX

KIND = re.compile(r"\Ax\.[a-z0-9_]{1,64}\.[a-z0-9_]{1,64}\Z")
FIELD = re.compile(r"[a-z][a-z0-9_]{0,63}")  # matched whole (fullmatch): no dunder, no trailing newline
TYPES = ("str", "int", "float", "bool", "bytes", "id", "map", "list")
MAX_FIELDS = 64

_Id = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
_PY: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "bytes": bytes, "id": _Id,
                       "map": dict[str, Any], "list": list[Any]}


def is_ext(kind: object) -> bool:
    """Whether ``kind`` names a record kind an integration declares (``x.…``)."""
    return type(kind) is str and kind.startswith("x.")


def schema_ref(kind: str) -> str:
    return SCHEMA_PREFIX + kind


def fields_problem(fields: object) -> str | None:
    """What is wrong with a schema's field list, or None."""
    if type(fields) is not list or not fields or len(fields) > MAX_FIELDS:
        return f"fields must be a list of 1 to {MAX_FIELDS} [name, type, required, is_ref]"
    seen = set()
    for f in fields:
        if type(f) is not list or len(f) != 4:
            return f"field {f!r:.60} is not [name, type, required, is_ref]"
        name, ftype, required, is_ref = f
        if type(name) is not str or not FIELD.fullmatch(name) or keyword.iskeyword(name):
            return f"field name {name!r:.60} is not a lowercase identifier (a-z, 0-9, _; not a Python keyword)"
        if name in seen:
            return f"field {name!r} is declared twice"
        seen.add(name)
        if ftype not in TYPES:
            return f"field {name!r} has type {ftype!r:.40}; the types are {', '.join(TYPES)}"
        if type(required) is not bool or type(is_ref) is not bool:
            return f"field {name!r}: required and is_ref are true or false"
        if is_ref and ftype not in ("id", "list"):
            return f"field {name!r} is a ref, so its type is id or list (of ids), not {ftype}"
    return None


def schema_object_problem(value: dict) -> str | None:
    """What is wrong with a stored schema object, or None (verify: ``malformed-object``)."""
    kind, fields, prev, t = value.get("kind"), value.get("fields"), value.get("previous", False), value.get("time")
    if not is_ext(kind) or not KIND.match(kind):  # type: ignore[arg-type]
        return f"field 'kind' must be x.<integration>.<name> (lowercase letters, digits, _), not {kind!r:.60}"
    bad = fields_problem(fields)
    if bad is not None:
        return bad
    if not (prev is None or (type(prev) is bytes and len(prev) == 32)):
        return "field 'previous' must be an id or nil"
    if type(t) is not float and type(t) is not int:
        return "field 'time' must be a number"
    unknown = sorted(set(value) - {"kind", "fields", "previous", "time"})
    if unknown:
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
    return None


_compiled: dict[tuple, type[msgspec.Struct]] = {}


def compiled(fields: list) -> type[msgspec.Struct]:
    """The msgspec Struct a field list describes (made once per distinct list)."""
    key = tuple(tuple(f) for f in fields)
    got = _compiled.get(key)
    if got is None:
        spec: list[tuple] = []
        for name, ftype, required, is_ref in fields:
            t = list[_Id] if is_ref and ftype == "list" else _PY[ftype]
            spec.append((name, t) if required else (name, t | None, None))
        spec.sort(key=lambda s: len(s) == 3)  # msgspec: fields without defaults first
        got = _compiled[key] = msgspec.defstruct("XBody", spec, forbid_unknown_fields=True)
    return got


def body_problem(fields: list, body: object) -> str | None:
    """What is wrong with a record body under a schema's fields, or None (checked in C)."""
    if type(body) is not dict:
        return "the body must be a map"
    try:
        msgspec.convert(body, compiled(fields))
    except msgspec.ValidationError as e:
        return str(e).replace("`", "'")
    except (TypeError, ValueError) as e:  # a field list no Struct can hold (a forged schema): named, never a traceback
        return f"its schema cannot be applied ({e})"
    return None


def schema_fields(sid: bytes, otype: str | None, value: object) -> tuple[str, list] | str:
    """(kind, fields) of the object a record names as its schema (``otype`` None: not stored), or why
    it is none: the one reading of a schema object, shared by every reader and verify."""
    if otype is None:
        return f"its schema {sid.hex()} is not stored"
    if otype != "schema":
        return f"its schema {sid.hex()} is a {otype}, not a schema"
    bad = schema_object_problem(value) if isinstance(value, dict) else "not a map"
    if bad is not None:
        return f"its schema {sid.hex()} is malformed ({bad})"
    assert isinstance(value, dict)
    return value["kind"], value["fields"]


def ext_record_problem(kind: str, body: object, sid: object, schema_of: Callable[[bytes], tuple[str, list] | str]) -> str | None:
    """What is wrong with a record of an ``x.`` kind against the schema its payload names, or None:
    the schema is stored, is a well-formed schema of the record's kind, and the body fits it.
    ``schema_of(sid)`` gives ``schema_fields`` of that object. One rule for readers and verify."""
    if type(sid) is not bytes:
        return f"{kind} record names no schema"
    got = schema_of(sid)
    if isinstance(got, str):
        return f"{kind} record: {got}"
    if got[0] != kind:
        return f"{kind} record names schema {sid.hex()}, which declares {got[0]}"
    bad = body_problem(got[1], body)
    if bad is not None:
        return f"{kind} body does not fit its schema {sid.hex()}: {bad}"
    return None


def ref_ids(fields: list, body: dict) -> list[tuple[str, bytes]]:
    """(field, id) of every object a body's ref fields name."""
    out = []
    for name, _t, _req, is_ref in fields:
        if not is_ref:
            continue
        v = body.get(name)
        if type(v) is bytes:
            out.append((name, v))
        elif type(v) is list:
            out.extend((f"{name}[{i}]", x) for i, x in enumerate(v) if type(x) is bytes)
    return out


def check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not is_ext(kind) or not KIND.match(kind):
        raise InvalidRecord(f"a declared record kind is x.<integration>.<name> (lowercase letters, digits, _), not {kind!r:.60}")
    return kind


def check_fields(fields: object) -> list:
    """A caller's field list as stored (tuples become lists), or InvalidRecord."""
    if isinstance(fields, (list, tuple)):
        fields = [list(f) if isinstance(f, (list, tuple)) else f for f in fields]
    bad = fields_problem(fields)
    if bad is not None:
        raise InvalidRecord(f"schema: {bad}")
    return fields  # type: ignore[return-value]
