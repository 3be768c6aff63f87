"""The facts of a record the log keeps in its entries' index rows: the run model's own reading of its records.

The storage layer decodes no record: it asks this module (through its hook,
``objstore.storage.log.facts``) what index row an object's entry carries — for a record
``[run, branch, lsn, parent, kind, refs, intent facts(, labels)]``, for a journal, segment,
grant, deletion or schema object ``[previous(, kind)]`` — and which ids a record body names.
The record schema is spelled here, once; the log applies the rules over these rows.

Imports nothing of ``objstore.runs``: it stands lowest in the package, so loading it (the first
commit or take-in of a process) loads none of the run model above it.
"""

from __future__ import annotations

from typing import Any

from ..storage import codec
from ..storage import labels as labels_mod
from ..storage.log.format import CHAIN_TYPES, INTENT_KINDS

_INTENT_FIELDS = ("intent", "step", "effect", "idempotent")


def facts_of(objects: list) -> dict:
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


def checked_attempt_row(run: str, branch: int, lsn: int, parent: bytes | None, body: dict) -> list:
    """``object_facts`` of an attempt record whose body passed ``records.check_body`` (so ``run`` and ``branch``
    are the writer's, ``parent`` a record id or None), built from what the writer holds instead of a walk of the
    body: such a body names ids only as ``prompt`` and ``output`` (its maps hold JSON values: no bytes), and
    ``output`` sorts first. No intent facts (an attempt is no intent), no labels."""
    return [run, branch, lsn, parent, "attempt", [x for x in (body["output"], body["prompt"]) if x is not None], None]


def intent_facts(kind: str, body: dict) -> dict | None:
    """What compensation needs of an intent or intent_committed record: its key, step, effect and
    idempotent flag (those the body has)."""
    if kind not in INTENT_KINDS:
        return None
    return {k: body[k] for k in _INTENT_FIELDS if k in body}
