"""The stored objects' schemas: what verify checks each decoded structured object against.

``schema_problem(otype, value)`` is the one place each stored type's shape is declared — records
and forks (``RecordV1``, ``ForkV1``, the body through its kind's Struct from ``runs.records``),
journal versions, grants and journal segments (a schema version in ``v``: 2 now, none is schema
1, legacy, still read), deletions, and x. kinds' schema objects (``runs.kinds``) — and it answers
what is wrong, in the documented words, or None. Records and forks go through their Structs in C;
only an object that fails them is walked in Python, to name the problem. The vocabulary these
objects use (outcomes, roles, rights, schema versions, deletion scopes) is the record model's
(``runs.records``); the signature and the authority of a deletion are verify's (they need the store).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..errors import InvalidRecord
from ..storage import codec
from ..storage import labels as slabels
from . import kinds
from . import labels as labels_mod
from .records import (
    BODIES,
    COMPACTION_SEGMENT_SCHEMA,
    DELETION_FIELDS,
    DELETION_SCHEMA,
    DELETION_TYPE,
    GRANT_SCHEMA,
    JOURNAL_SCHEMA,
    KINDS,
    ORIGIN_DERIVED,
    OUTCOMES,
    RIGHTS,
    ROLES,
    RUN_STARTED,
    SCOPE_BLOB,
    SCOPE_RECORDS,
    SCOPE_RUN,
    SCOPES,
    TIME_MAX,
    TIME_MIN,
    _Count,
    _Id,
    _show,
    check_body,
    time_problem,
)

_ID = (bytes,)


def _field(value: dict, name: str, types: tuple, what: str) -> str | None:
    if name not in value:
        return f"missing field {name!r}"
    v = value[name]
    if type(v) not in types or (types == _ID and len(v) != 32):
        return f"field {name!r} must be {what}, is {type(v).__name__}"
    return None


_Fields = tuple[tuple[str, tuple[type, ...], str], ...]  # (field name, the types it may have, what it must be)
_RECORD_FIELDS: _Fields = (("run", (str,), "a string"), ("branch", (int,), "an integer"), ("lsn", (int,), "an integer"),
                  ("parent", (bytes, type(None)), "an id or nil"), ("kind", (str,), "a string"),
                  ("time", (float, int, type(None)), "a number or nil"), ("body", (dict,), "a map"))
_FORK_FIELDS: _Fields = (("run", (str,), "a string"), ("branch", (int,), "an integer"), ("parent_branch", (int,), "an integer"),
                ("parent_lsn", (int,), "an integer"), ("parent_record", _ID, "a 32-byte id"), ("parent_head", _ID, "a 32-byte id"),
                ("reason", (str,), "a string"), ("compensation", (list,), "a list"), ("time", (float, int), "a number"))


class RecordV1(msgspec.Struct, forbid_unknown_fields=True):
    """A stored record (schema 1: no ``v`` field). Its body is checked by its kind's Struct."""

    run: str
    branch: _Count
    lsn: _Count
    parent: _Id | None
    kind: str
    time: float | int | None
    body: dict[str, Any]
    labels: dict[str, str] | msgspec.UnsetType = msgspec.UNSET  # format 5: outside names (runs.labels)
    schema: _Id | msgspec.UnsetType = msgspec.UNSET  # format 5: an x. record's schema object (runs.kinds)


class CompensationV1(msgspec.Struct, forbid_unknown_fields=True):
    intent: str
    committed_record: bytes
    step: Any = None
    effect: Any = None
    committed_lsn: Any = None


class ForkV1(msgspec.Struct, forbid_unknown_fields=True):
    """A stored fork object (schema 1: no ``v`` field)."""

    run: str
    branch: int
    parent_branch: int
    parent_lsn: int
    parent_record: _Id
    parent_head: _Id
    reason: str
    compensation: list[CompensationV1]
    time: float | int
    parent_run: str | msgspec.UnsetType = msgspec.UNSET  # a copy's cross-run fork (fork_run; format 5)


_convert = msgspec.convert


def schema_problem(otype: str, value: dict) -> str | None:
    """What is wrong with a decoded structured object against its type's schema, or None.

    The one place each stored type's shape is declared; verify checks every object with it.
    Records and forks go through their Structs in C (``RecordV1`` and the body's, ``ForkV1``);
    only an object that fails them is walked in Python, to name the problem in the words below."""
    if otype == "record":
        try:
            _convert(value, RecordV1)
            ok = type(value["body"]) is dict
        except msgspec.ValidationError:
            ok = False
        t = value.get("time")
        if ok and ("labels" in value or (value["kind"] == RUN_STARTED and value["run"].startswith(labels_mod.PREFIX))):
            bad = _labels_problem(value)
            if bad is not None:
                return bad
        body_struct = BODIES.get(value["kind"]) if ok else None
        if body_struct is not None and (t is None or TIME_MIN <= t <= TIME_MAX):
            try:  # a stored value came from MessagePack: no sets, tuples or out-of-range integers to compare away
                _convert(value["body"], body_struct)
                return None
            except msgspec.ValidationError:
                pass  # named below (or, nested past TYPED_LEVELS, cleared by the walk)
        return _record_problem(value) or _struct_problem("record", value, RecordV1)
    if otype == "fork":
        try:
            _convert(value, ForkV1)
            if TIME_MIN <= value["time"] <= TIME_MAX:
                return None
        except msgspec.ValidationError:
            pass
        return _fork_problem(value) or _struct_problem("fork", value, ForkV1)
    return _other_problem(otype, value)


def _struct_problem(otype: str, value: dict, struct: type[msgspec.Struct]) -> str | None:
    """What the Struct (and the calendar) refuse that the field loops accept: a newer schema's
    ``v``, an unknown field, a time outside the calendar."""
    if "v" in value:
        return f"{otype} schema version {_show(value['v'])} is newer than this objstore reads (1, written without 'v')"
    unknown = sorted(k if type(k) is str else repr(k) for k in value if k not in struct.__struct_fields__)
    if unknown:
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
    if value.get("time") is not None:
        bad = time_problem(value["time"])
        if bad is not None:
            return f"field 'time': {bad}"
    try:
        _convert(value, struct)
    except msgspec.ValidationError as e:
        return f"{e}".replace("`", "'")
    return None


def _record_problem(value: dict) -> str | None:
    """The Python rule set of a record (the messages of ``schema_problem``)."""
    g = value.get
    run, branch, lsn, parent, kind, t, body = g("run"), g("branch"), g("lsn"), g("parent"), g("kind"), g("time"), g("body")
    # the common case in one line; anything off is named by the field loop below
    if not (type(run) is str and type(branch) is int and type(lsn) is int and type(kind) is str and type(body) is dict
            and (parent is None or type(parent) is bytes) and (t is None or type(t) is float or type(t) is int)
            and "parent" in value and "time" in value):
        for name, types, what in _RECORD_FIELDS:
            bad = _field(value, name, types, what)
            if bad:
                return bad
    if parent is not None and len(parent) != 32:
        return "field 'parent' must be a 32-byte id"
    assert branch is not None and lsn is not None  # ints: the field loop above returned otherwise
    if branch < 0 or lsn < 0:
        return "branch and lsn must not be negative"
    bad = _labels_problem(value)
    if bad is not None:
        return bad
    if kinds.is_ext(kind):
        # a kind the core does not know: its schema object decides the body (verify reads it)
        if not kinds.KIND.match(kind):  # type: ignore[arg-type]
            return f"kind {kind!r:.60} is not x.<integration>.<name>"
        sid = value.get("schema")
        if type(sid) is not bytes or len(sid) != 32:
            return f"a record of kind {kind} names its schema object (field 'schema', an id)"
        return None
    if "schema" in value:
        return "field 'schema' belongs to records of x. kinds only"
    try:
        check_body(value["kind"], value["body"])
    except InvalidRecord as e:
        return f"body: {e.args[0]}"
    return None


def _labels_problem(value: dict) -> str | None:
    """A record's labels: a canonical label map (storage.labels); a run_started record's labels
    give its run's id, and an ``l-`` run id is a labelled run's (runs.labels)."""
    labels = value.get("labels")
    if "labels" in value and slabels.canonical(labels) is None:
        return "field 'labels' must be a non-empty map of at most 16 names to string values"
    if value.get("kind") == RUN_STARTED and value.get("branch") == 0 and value.get("lsn") == 0:
        return labels_mod.check_run_labels(value["run"], labels)
    return None


def _fork_problem(value: dict) -> str | None:
    """The Python rule set of a fork object."""
    for name, types, what in _FORK_FIELDS:
        bad = _field(value, name, types, what)
        if bad:
            return bad
    for c in value["compensation"]:
        if type(c) is not dict or type(c.get("intent")) is not str or type(c.get("committed_record")) is not bytes:
            return "compensation entries must be maps with intent and committed_record"
    return None


def _other_problem(otype: str, value: dict) -> str | None:
    if otype == "journal":
        return _journal_problem(value)
    elif otype == "grant":
        return _grant_problem(value)
    elif otype == "segment":
        return _compaction_segment_problem(value)
    elif otype == DELETION_TYPE:
        return deletion_problem(value)
    elif otype == codec.SCHEMA:
        return kinds.schema_object_problem(value)
    elif type(value.get("run", "")) is not str:
        return "field 'run' must be a string"
    return None



# -- journal, grant and segment objects (docs/FORMAT.md) -----------------------------------------------
#
# Each has a schema version in its ``v`` field: 2 now; an object without ``v`` is schema 1 (legacy,
# still read). Field specs are (name, predicate, what it must be); extra fields are allowed.

_HEXDIGITS = frozenset("0123456789abcdef")
_ANYHEX = frozenset("0123456789abcdefABCDEF")


def _is_id(v: object) -> bool:
    return type(v) is bytes and len(v) == 32


def _is_opt_id(v: object) -> bool:
    return v is None or (type(v) is bytes and len(v) == 32)


def _is_hex(n: int, digits: frozenset[str] = _HEXDIGITS) -> Callable[[Any], bool]:
    return lambda v: type(v) is str and len(v) == n and digits.issuperset(v)


_HEX64 = _is_hex(64)  # sha256 digests, public keys: lowercase, as written
_SIG = _is_hex(128, _ANYHEX)  # an ed25519 signature (a request's as its signer sent it: either case)


def _opt(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or pred(v)


def _is_int(lo: int) -> Callable[[Any], bool]:
    return lambda v: type(v) is int and v >= lo


def _is_str(v: object) -> bool:
    return type(v) is str


def _is_name(v: object) -> bool:
    return type(v) is str and v != ""


def _is_num(v: object) -> bool:
    return type(v) is float or type(v) is int


def _is_bool(v: object) -> bool:
    return type(v) is bool


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: type(v) is str and v in choices


def _ids(v: object) -> bool:
    return type(v) is list and all(type(x) is bytes and len(x) == 32 for x in v)


_Spec = tuple[tuple[str, Callable[[Any], bool], str], ...]  # (field name, predicate, what it must be)


def _spec_problem(value: dict, spec: _Spec, prefix: str = "") -> str | None:
    for name, ok, what in spec:
        if name not in value:
            return f"missing field '{prefix}{name}'"
        v = value[name]
        if not ok(v):
            return f"field '{prefix}{name}' must be {what}, is {_show(v)}"
    return None


def _schema_version(otype: str, value: dict, current: int) -> int | str:
    """1 (no ``v``: legacy), ``current``, or the problem with ``v``."""
    if "v" not in value:
        return 1
    v = value["v"]
    if type(v) is int and v == current:
        return v
    return f"unknown {otype} schema version {_show(v)} (known: 1, written without 'v', and {current})"




def _t745() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], int, int, int]:
    """(OUTCOMES, ROLES, RIGHTS, journal, grant, segment schema versions)."""
    return OUTCOMES, ROLES, RIGHTS, JOURNAL_SCHEMA, GRANT_SCHEMA, COMPACTION_SEGMENT_SCHEMA



_AN_ID, _OPT_ID = "a 32-byte id", "a 32-byte id or nil"
_NUM = "a number"
_REQUEST_FIELDS = (
    ("op", _one_of("update"), "'update'"), ("run", _is_name, "a non-empty string"),
    ("subject", _opt(_is_str), "a string or nil"), ("body_sha256", _HEX64, "64 lowercase hex digits"),
    ("expect_head", _opt(_HEX64), "64 lowercase hex digits or nil"), ("time", _is_num, _NUM),
    ("nonce", _is_name, "a non-empty string"), ("key", _HEX64, "64 lowercase hex digits (an ed25519 public key)"),
    ("sig", _SIG, "128 hex digits (an ed25519 signature)"), ("params", lambda v: type(v) is dict, "a map"))
_UPDATE_PARAMS = (("reflects_through", _opt(_HEX64), "64 lowercase hex digits or nil"),
                  ("checkpoint", _opt(_HEX64), "64 lowercase hex digits or nil"),
                  ("enabled", _opt(_is_bool), "true, false or nil"))


def _journal_problem(value: dict) -> str | None:
    _o, _r, _ri, current, _g, _s = _t745()
    v = _schema_version("journal", value, current)
    if type(v) is str:
        return v
    common = (("run", _is_name, "a non-empty string"), ("version", _is_int(1), "an integer >= 1"),
              ("body", _is_id, _AN_ID))
    if v == 1:  # legacy: LSNs, a writer's name, no signature
        spec: _Spec = common + (("source_end", _is_int(-1), "an integer >= -1"), ("checkpoint", _is_int(-1), "an integer >= -1"),
                         ("enabled", _is_bool, "true or false"), ("previous", _is_opt_id, _OPT_ID),
                         ("writer", _is_str, "a string"), ("time", _is_num, _NUM))
        return _spec_problem(value, spec)
    spec = common + (("body_sha256", _HEX64, "64 lowercase hex digits"), ("reflects_through", _is_opt_id, _OPT_ID),
                     ("checkpoint", _is_opt_id, _OPT_ID), ("enabled", _is_bool, "true or false"),
                     ("previous", _is_opt_id, _OPT_ID), ("writer", _HEX64, "64 lowercase hex digits (an ed25519 public key)"),
                     ("request", lambda x: type(x) is dict, "a map (the signed request)"), ("time", _is_num, _NUM))
    bad = _spec_problem(value, spec)
    if bad is None and (value["previous"] is None) != (value["version"] == 1):
        bad = "version 1 and only version 1 has no previous version"
    if bad is None:
        bad = _spec_problem(value["request"], _REQUEST_FIELDS, "request.")
    if bad is None:
        params = value["request"]["params"]
        bad = _spec_problem(params, _UPDATE_PARAMS, "request.params.")
        if bad is None and len(params) != len(_UPDATE_PARAMS):
            bad = "field 'request.params' must hold reflects_through, checkpoint and enabled only"
    return bad


def _grant_problem(value: dict) -> str | None:
    _o, roles, rights, _j, current, _s = _t745()
    v = _schema_version("grant", value, current)
    if type(v) is str:
        return v
    if v == 1:  # legacy: names, unsigned (grants nothing)
        spec: _Spec = (("run", _is_name, "a non-empty string"), ("writer", _is_str, "a string"),
                ("action", _one_of("grant", "revoke"), "'grant' or 'revoke'"), ("previous", _is_opt_id, _OPT_ID),
                ("by", _is_str, "a string"), ("reason", _is_str, "a string"), ("time", _is_num, _NUM))
        return _spec_problem(value, spec)

    def rights_ok(x: Any) -> bool:
        return type(x) is list and x != [] and all(type(r) is str and r in rights for r in x) and x == sorted(set(x))

    spec = (("run", _opt(_is_name), "a non-empty string or nil"), ("subject", _is_name, "a non-empty string"),
            ("grantee", _HEX64, "64 lowercase hex digits (an ed25519 public key)"), ("name", _is_str, "a string"),
            ("action", _one_of("grant", "revoke"), "'grant' or 'revoke'"),
            ("role", _one_of(*roles), "one of " + ", ".join(roles)),
            ("rights", rights_ok, "a sorted, non-empty list of distinct rights from " + ", ".join(rights)),
            ("supersedes", _opt(_HEX64), "64 lowercase hex digits or nil"), ("previous", _is_opt_id, _OPT_ID),
            ("seq", _is_int(1), "an integer >= 1"), ("reason", _is_str, "a string"), ("time", _is_num, _NUM),
            ("signer", _HEX64, "64 lowercase hex digits (an ed25519 public key)"),
            ("sig", _is_hex(128), "128 lowercase hex digits (an ed25519 signature)"))
    return _spec_problem(value, spec)


_SEGMENT_COMMON = (
    ("run", _is_name, "a non-empty string"), ("seq", _is_int(1), "an integer >= 1"), ("previous", _is_opt_id, _OPT_ID),
    ("branch", _is_int(0), "an integer >= 0"), ("covered_through", _is_opt_id, _OPT_ID), ("summary", _is_id, _AN_ID),
    ("summary_role", _opt(_is_str), "a string or nil"), ("origin", _one_of(ORIGIN_DERIVED), f"'{ORIGIN_DERIVED}'"),
    ("retained", _ids, "a list of 32-byte ids"), ("unreflected", _ids, "a list of 32-byte ids"), ("input", _is_id, _AN_ID),
    ("input_sha256", _HEX64, "64 lowercase hex digits"), ("compactor", _is_str, "a string"), ("time", _is_num, _NUM))


def _tasks_ok(v: object) -> bool:
    return type(v) is list and all(type(t) is dict and _is_name(t.get("task")) and _is_str(t.get("title")) for t in v)


def _compaction_segment_problem(value: dict) -> str | None:
    outcomes, _r, _ri, _j, _g, current = _t745()
    v = _schema_version("segment", value, current)
    if type(v) is str:
        return v
    outcome = ("outcome", _one_of(*outcomes), "one of " + ", ".join(outcomes))
    version = ("version", _opt(_is_int(1)), "an integer >= 1 or nil")
    session = ("session", _opt(_is_str), "a string or nil")
    if v == 1:  # legacy: the frozen read in a 'journal' map
        bad = _spec_problem(value, _SEGMENT_COMMON + (("journal", lambda x: type(x) is dict, "a map"),))
        if bad is None:
            bad = _spec_problem(value["journal"], (
                outcome, ("reason", _opt(_is_str), "a string or nil"), session, ("journal_id", _is_opt_id, _OPT_ID),
                version, ("body", _is_opt_id, _OPT_ID), ("sha256", _opt(_HEX64), "64 lowercase hex digits or nil"),
                ("source_end", _opt(_is_int(-1)), "an integer >= -1 or nil"),
                ("checkpoint", _opt(_is_int(-1)), "an integer >= -1 or nil"),
                ("provenance", lambda x: type(x) is dict, "a map"), ("rendered", _is_id, _AN_ID)), "journal.")
        return bad
    bad = _spec_problem(value, _SEGMENT_COMMON + (
        ("through", _is_id, _AN_ID), ("snapshot", lambda x: type(x) is dict, "a map"),
        ("tasks", _tasks_ok, "a list of maps {task: non-empty string, title: string}"),
        ("signer", _HEX64, "64 lowercase hex digits (the compacting key)"),
        ("sig", _is_hex(128), "128 lowercase hex digits (an ed25519 signature)")))
    if bad is None and (value["previous"] is None) != (value["seq"] == 1):
        bad = "seq 1 and only seq 1 has no previous segment"
    if bad is None:
        bad = _spec_problem(value["snapshot"], (
            ("answer", _is_id, _AN_ID), ("answer_sha256", _HEX64, "64 lowercase hex digits"), ("rendered", _is_id, _AN_ID),
            outcome, session, version, ("body_sha256", _opt(_HEX64), "64 lowercase hex digits or nil"),
            ("projection", _opt(_one_of("full", "bounded")), "'full', 'bounded' or nil"),
            ("identical_to", _is_opt_id, _OPT_ID)), "snapshot.")
    return bad



# -- deletion objects: the shape rule (the vocabulary and the covered rows are the record model's) ---------

def _records_rows_ok(v: object) -> bool:
    if type(v) is not list or not v:
        return False
    for row in v:
        if not (type(row) is list and len(row) == 4 and _is_id(row[0]) and type(row[1]) is int and row[1] >= 0
                and type(row[2]) is int and row[2] >= 0 and type(row[3]) is str and (row[3] in KINDS or bool(kinds.KIND.match(row[3])))):
            return False
    keys = [(row[1], row[2]) for row in v]
    return keys == sorted(keys) and len(set(keys)) == len(keys) and len({row[0] for row in v}) == len(v)


def deletion_problem(value: dict) -> str | None:
    """What is wrong with a deletion object's shape, or None (the signature and the authority of
    its signer are verify's: they need the store)."""
    if value.get("v") != DELETION_SCHEMA:
        return f"unknown deletion schema version {_show(value.get('v'))} (known: {DELETION_SCHEMA})"
    unknown = sorted(k if type(k) is str else repr(k) for k in value if k not in DELETION_FIELDS)
    if unknown:
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
    bad = _spec_problem(value, (
        ("v", _is_int(1), "1"), ("scope", _one_of(*SCOPES), "one of " + ", ".join(SCOPES)),
        ("run", _opt(_is_name), "a non-empty string or nil"), ("records", lambda x: x is None or type(x) is list, "a list or nil"),
        ("blob", _is_opt_id, _OPT_ID), ("reason", _is_name, "a non-empty string"), ("time", _is_num, _NUM),
        ("by", _opt(_HEX64), "64 lowercase hex digits (an ed25519 public key) or nil"), ("grant", _is_opt_id, _OPT_ID),
        ("previous", _is_opt_id, _OPT_ID), ("sig", _opt(_is_hex(128)), "128 lowercase hex digits (an ed25519 signature) or nil")))
    if bad is not None:
        return bad
    if time_problem(value["time"]) is not None:
        return f"field 'time': {time_problem(value['time'])}"
    scope = value["scope"]
    if scope == SCOPE_BLOB:
        if value["blob"] is None or value["run"] is not None or value["records"] is not None:
            return "a blob deletion (redaction) names a blob, and no run or records"
    elif value["run"] is None or value["blob"] is not None:
        return f"a {scope} deletion names a run, and no blob"
    elif scope == SCOPE_RUN and value["records"] is not None:
        return "a run deletion covers the whole run: its records field is nil"
    elif scope == SCOPE_RECORDS and not _records_rows_ok(value["records"]):
        return ("field 'records' must be a non-empty list of [id, branch, lsn, kind] rows (a 32-byte id, integers >= 0, "
                "a record kind), sorted by (branch, lsn), without repeats")
    if "blobs" in value:  # optional: the blobs a deleted run's journal and segment objects named (gc removes them too)
        b = value["blobs"]
        if scope != SCOPE_RUN or type(b) is not list or not b or not all(_is_id(x) for x in b) or b != sorted(set(b)):
            return "field 'blobs' (a run deletion only) must be a non-empty sorted list of distinct 32-byte ids"
    if scope != SCOPE_RECORDS and value["previous"] is not None:
        return f"a {scope} deletion has no previous deletion (only the records chain of a run has one)"
    if (value["by"] is None) != (value["sig"] is None):
        return "a deletion is signed (by and sig) or unsigned (neither)"
    if value["by"] is None and value["grant"] is not None:
        return "an unsigned deletion names no grant"
    return None
