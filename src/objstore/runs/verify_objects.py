"""Verify's object layer: one object on its own, as read from its entry.

``check_object`` re-hashes an object against its id, decodes it strictly (canonical re-encoding),
checks it against its schema (``malformed-object``) and its entry's index row for it
(``bad-meta-row``): nothing outside its entry, so it runs in the worker process that checks the
object's segment (objstore.storage.log.fsck hands it each object). What it returns is a plain tuple
(``Checked``) carrying only what the run-model checks after the scan need (objstore.runs.verify_runmodel).
"""

from __future__ import annotations

import blake3

from ..errors import BodyRemoved, IntegrityError, UnknownObjectType
from ..storage import codec
from ..storage.log.facts import object_facts
from ..storage.log.format import CHAIN_TYPES
from ..storage.log.scan import HashedLarge
from . import kinds as K
from . import records as R
from . import schemas as S

# One object after the per-segment checks, as a plain tuple (it crosses a process boundary 10^5
# times: a tuple pickles and unpickles several times faster than a NamedTuple or a dict):
#   (oid, otype: the type its entry names, readable: its block was read, problems: ((code, detail[,
#    subject]), ...) in the order found, damaged, t: the type its header names or None, value)
# value: a record's slim row (_slim_record) or, when the state is folded, its payload; a fork's
# payload; a journal/segment/grant object's object_refs; None for a blob or a damaged object.
Checked = tuple

EXPECT = {"parent": (codec.RECORD, codec.FORK), "prompt": (codec.BLOB,), "output": (codec.BLOB,), "content": (codec.BLOB,),
          "parent_record": (codec.RECORD,), "parent_head": (codec.RECORD, codec.FORK)}  # the types an object's ref fields name
_hash = blake3.blake3


def _slim_record(p: dict) -> tuple:
    """What the chain checks read of a record (run, branch, LSN, parent, kind, its blob refs, the
    body of an intent), as a tuple: the rest stays in the worker."""
    body = p["body"]
    if K.is_ext(p["kind"]):
        body = dict(body, **{SCHEMA: p.get("schema")})  # checked against its schema after the scan reads it
    elif p["kind"] == R.RUN_STARTED and "labels" in p:
        body = {LABELS: p["labels"]}  # a labelled run's generation is checked after the scan
    elif p["kind"] not in (R.INTENT, R.INTENT_COMMITTED):
        body = {f: body[f] for f in R.BLOB_FIELDS if f in body}
    return (p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], body)


BODY_REMOVED = "body-removed"  # not a problem by itself: a deletion must cover it (RunModelChecks._deletions)
_REMOVED = b"\x00" * 32  # the stand-in deletion id of a removed record's header-only body, until verify knows it
REFS = "_refs"  # a removed record's blob refs, from its entry's row
SCHEMA = "\x00schema"  # an x. record's schema id, beside its body in the slim row (no body field has a NUL)
LABELS = "\x00labels"  # a labelled run_started's labels, in its slim row


def record_dict(v: tuple) -> dict:
    return {"run": v[0], "branch": v[1], "lsn": v[2], "parent": v[3], "kind": v[4], "body": v[5]}


def check_object(oid: bytes, otype: str, data: bytes | HashedLarge | IntegrityError | BodyRemoved, full: bool,
                 rows: dict | None = None, n: int = 0) -> Checked:
    """Re-hash one object, decode it strictly and check its schema, and check its entry's index row
    for it (``rows``: the entry's rows by object id; entry ``n``); nothing outside its entry."""
    if isinstance(data, IntegrityError):
        return (oid, otype, False, (("corrupt-object", data.args[2]),), True, None, None)
    if isinstance(data, BodyRemoved):
        # gc removed the body (verify decides after the scan whether a deletion covers it); a
        # record's header stays in its entry's row: the chain checks go on from it, header-only
        row = rows.get(oid) if rows is not None else None
        if otype == codec.RECORD and row is not None and len(row) >= 7:
            body = dict(row[6]) if isinstance(row[6], dict) else {}  # an intent's facts: compensation is checked from them
            body.update({R.DELETED_FIELD: _REMOVED, REFS: list(row[5] or ())})
            v = (row[0], row[1], row[2], row[3], row[4], body)
            return (oid, otype, False, ((BODY_REMOVED, ""),), False, codec.RECORD, record_dict(v) if full else v)
        return (oid, otype, False, ((BODY_REMOVED, ""),), False, codec.BLOB if otype == codec.BLOB else None, None)
    if isinstance(data, HashedLarge):  # a large blob, hashed while streamed (never held whole)
        if data.digest != oid:
            return (oid, otype, True, (("corrupt-object", "hash mismatch (content does not match id)"),), True, None, None)
        return (oid, otype, True, (), False, codec.BLOB, None)
    if _hash(data).digest() != oid:
        return (oid, otype, True, (("corrupt-object", "hash mismatch (content does not match id)"),), True, None, None)
    try:
        t, value = codec.decode(data, oid, strict=True)
    except UnknownObjectType as e:
        return (oid, otype, True, (("unknown-type", f"unknown object type {e.args[2]!r}"),), True, None, None)
    except IntegrityError as e:
        return (oid, otype, True, (("corrupt-object", e.args[2]),), True, None, None)
    problems: tuple = (("corrupt-entry", f"entry says {otype}, object is a {t}"),) if t != otype else ()
    if t == codec.BLOB:
        return (oid, otype, True, problems, False, t, None)
    bad = S.schema_problem(t, value)
    if bad is not None:
        return (oid, otype, True, (*problems, ("malformed-object", bad)), True, t, None)
    if rows is not None:
        row = _meta_row(oid, t, data, value, rows, n)
        if row is not None:
            problems = (*problems, row)
    if t == codec.RECORD:
        value = value if full else _slim_record(value)
    elif t != codec.FORK:
        value = R.object_refs(t, value)
    return (oid, otype, True, problems, False, t, value)


def _meta_row(oid: bytes, otype: str, data: bytes, value: dict, rows: dict, n: int) -> tuple | None:
    """The entry's index row for an object (what readers build every table from) must say what
    the object itself says: ``bad-meta-row entry <n> <id>`` otherwise."""
    if otype != codec.RECORD and otype not in CHAIN_TYPES:
        return None
    want = object_facts(otype, data, value, oid)
    got = rows.get(oid)
    if got != want:
        return ("bad-meta-row", f"the entry's index row says {_row(got)}, the {otype} itself gives {_row(want)}", f"entry {n} {oid.hex()}")
    return None


def _row(row: list | None) -> str:
    if row is None:
        return "nothing (no row)"
    return repr([v.hex() if isinstance(v, bytes) else [x.hex() for x in v] if isinstance(v, list) and v and isinstance(v[0], bytes) else v
                 for v in row])
