"""The record model: what one log entry of a run says, and how it is checked.

A ``record`` object's payload is::

    {run, branch, lsn, parent, kind, time, body}

``parent`` is the id of the previous record on the same branch, or, for LSN 0 of
a forked branch, the branch's ``fork`` object, or nil for LSN 0 of branch 0.
So a head id commits to the whole history behind it (a Merkle chain).

Kinds and their bodies are listed in ``KINDS``; docs/RECORDS.md describes them.
User-supplied maps (context, tools, usage, meta, error) must be JSON-like
(str keys; str, int, float, bool, None, lists and maps), so that every byte
string in a payload is an object id and ``object_refs`` can name them all.

The schemas are msgspec Structs, one per record kind (``BODIES``) and one per record and fork
object (``RecordV1``, ``ForkV1``), declared here and nowhere else: ``check_body`` validates a
body in C (one JSON encode, one typed decode, one comparison) and only walks it in Python to
name what is wrong; ``schema_problem`` (verify) converts stored values through the same Structs.
Unknown fields are refused by name; a field a newer schema version brings (``v``) is
``NewerFormat``. Times are finite and within the calendar (``check_time``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import msgspec

from ..errors import InvalidInput, InvalidRecord, NewerFormat
from ..storage import codec
from ..storage import labels as slabels
from . import kinds
from . import labels as labels_mod

RUN_STARTED = "run_started"
ATTEMPT = "attempt"
INTENT = "intent"
INTENT_COMMITTED = "intent_committed"
RUN_FINISHED = "run_finished"
TURN = "turn"
TASK_OPENED = "task_opened"  # the TaskStore (docs/JOURNAL.md, condition 6): a session's open tasks are the fold of its lineage
TASK_CLOSED = "task_closed"
KINDS = (RUN_STARTED, ATTEMPT, INTENT, INTENT_COMMITTED, RUN_FINISHED, TURN, TASK_OPENED, TASK_CLOSED)

ATTEMPT_STATES = ("running", "succeeded", "failed")
# A record label a writer puts on (one of) its records when it cannot see every failed attempt of the
# run it writes (LangGraph's RetryPolicy retries a node unseen unless the saver's callback handler is
# in the config): ``objstore episode`` then says its attempts may be incomplete.
UNRECORDED_ATTEMPTS = ("attempts", "unrecorded")
_ATTEMPT_STATES = frozenset(ATTEMPT_STATES)
RUN_STATUSES = ("succeeded", "failed")

# Material origins (docs/JOURNAL.md): source material is what happened; derived is made from it.
ORIGIN_SOURCE = "source"
ORIGIN_DERIVED = "derived"
# The typed startup event in a session's run_started meta (docs/JOURNAL.md): derived material, known by its type.
STARTUP_EVENT = "journal_startup"


def startup_of(body: dict) -> dict | None:
    """A run_started body's typed startup event, recognised by its ``type`` only (never by text)."""
    meta = body.get("meta") if isinstance(body, dict) else None
    ev = meta.get("startup") if isinstance(meta, dict) else None
    return ev if isinstance(ev, dict) and ev.get("type") == STARTUP_EVENT else None

_RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# Fields of record bodies that hold blob ids (never bodies).
BLOB_FIELDS = ("prompt", "output", "content")


class _RecordRow(NamedTuple):
    id: bytes
    run: str
    branch: int
    lsn: int
    parent: bytes | None
    kind: str
    time: float | None
    body: dict


class Record(_RecordRow):
    """One record: its id, run, branch, LSN, parent, kind, time and body. ``id`` and ``parent`` are
    ``codec.Id``: bytes that print as their hex (the tuple itself holds the plain bytes)."""

    __slots__ = ()

    @property
    def id(self) -> codec.Id:
        return codec.Id(self[0])

    @property
    def parent(self) -> codec.Id | None:
        p = self[4]
        return None if p is None else codec.Id(p)

    def __repr__(self) -> str:  # the ids as the hex a command takes, not b'\x..'
        return (f"Record(id={self.id}, run={self.run!r}, branch={self.branch}, lsn={self.lsn}, parent={self.parent}, "
                f"kind={self.kind!r}, time={self.time!r}, body={self.body!r})")

    @classmethod
    def from_payload(cls, oid: bytes, p: dict) -> Record:
        if "v" in p:  # records have no version field today: one that has it was written by a newer objstore
            check_version("record", p, oid)
        return cls(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], p.get("time"), p["body"])


# -- times -----------------------------------------------------------------------------------------
# A time is seconds since the epoch, finite and within the calendar datetime can represent (years 1
# to 9999), so every reader can show it: 1e300 was stored and then `log` died in OverflowError. A
# day's margin at each end keeps the local time of every zone (UTC-12 to UTC+14) inside it too.
TIME_MIN = -62135596800.0 + 86400  # 0001-01-02T00:00:00Z
TIME_MAX = 253402300799.0 - 86400  # 9999-12-30T23:59:59Z


def time_problem(t: object) -> str | None:
    """What is wrong with ``t`` as a stored time, or None (numbers only, bool is not one)."""
    if type(t) is not float and type(t) is not int and not (isinstance(t, (int, float)) and not isinstance(t, bool)):
        return f"a time is a number of seconds since the epoch, not {type(t).__name__}"
    if not (TIME_MIN <= t <= TIME_MAX):  # NaN fails both comparisons
        shown = repr(float(t)) if type(t) is not int or t.bit_length() < 100 else "a huge integer"
        if type(t) is float and not math.isfinite(t):
            return f"time {shown} is not a finite number"
        return f"time {shown} is outside the calendar ({TIME_MIN:.0f} to {TIME_MAX:.0f} s since the epoch: 0001-01-02 to 9999-12-30 UTC)"
    return None


def check_time(when: object, what: str = "when") -> float:
    """A caller's time as the float that is stored; InvalidInput (exit 5) if it is not a finite
    number within years 1 to 9999. Every path a time enters by checks it here (RunLog, ingest)."""
    bad = time_problem(when)
    if bad is not None:
        raise InvalidInput(f"{what}: {bad}")
    return float(when)  # type: ignore[arg-type]  # time_problem returned None: a real number


def check_version(otype: str, value: dict, oid: bytes | None = None) -> None:
    """NewerFormat if ``value`` carries a schema version newer than this objstore reads for its
    type (records and forks: none yet, so any ``v`` is newer; journal, grant, segment: 2)."""
    known = _KNOWN_VERSION.get(otype, 1)
    v = value.get("v", 1)
    if type(v) is int and v > known or otype in (RECORD_TYPE, FORK_TYPE) and "v" in value:
        raise NewerFormat(otype, oid.hex() if oid else "(no id)", _show(v), known)


def check_run_id(run: object) -> str:
    if not isinstance(run, str) or not _RUN_ID.match(run) or ".." in run or run.endswith(".lock"):
        raise InvalidRecord(f"run id {run!r} must be 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'")
    return run


def _jsonlike(value: Any, where: str) -> None:
    """A user-supplied map or value is JSON-like: the one rule set of ``codec.check_json_value``
    (str keys, finite numbers, int64/uint64 integers, Unicode text, at most 64 levels)."""
    codec.check_json_value(value, where, InvalidRecord)


def _text(value: Any, where: str) -> Any:
    """A string field's value can be stored (UTF-8: no lone surrogate)."""
    if type(value) is str and not value.isascii():
        codec.check_text(value, where, InvalidRecord)
    return value


def _jsonmap(value: Any, where: str) -> None:
    if type(value) is not dict:
        raise InvalidRecord(f"{where} must be a map or None")
    _jsonlike(value, where)


def _opt_id(value: object, where: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes) and len(value) == 32:
        return value if type(value) is bytes else bytes(value)  # an Id (codec.Id): the plain bytes it is
    raise InvalidRecord(f"{where} must be a 32-byte blob id or None")


def _int(value: Any, where: str, lo: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise InvalidRecord(f"{where} must be an integer >= {lo}, got {value if type(value) is not int or value.bit_length() < 100 else 'a huge integer'!r}")
    if value > codec.INT_MAX:
        raise InvalidRecord(f"{where} must be within the uint64 range")
    return value


def _str(value: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidRecord(f"{where} must be a non-empty string, got {value!r}")
    if choices and value not in choices:
        raise InvalidRecord(f"{where} must be one of {', '.join(choices)}, got {value!r}")
    return _text(value, where)


# -- the record schemas (msgspec Structs) ----------------------------------------------------------
# One Struct per record kind: the field names, types and bounds of its body. ``check_body`` reads a
# body through them in C; ``_check_body_py`` below is the same rule set in Python, run only to name
# what is wrong (its messages are the documented ones) and for the rare value the C path cannot
# clear (a tuple in a map). The field sets are exactly what bodies have always held, so the stored
# bytes (sorted-key MessagePack of the Struct's fields) are the bytes written before the Structs.

_Id = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]  # the uint64 ceiling: MessagePack cannot hold more (the encoder refuses)
_Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]  # NaN fails both
TYPED_LEVELS = 6  # container levels of a user value the Structs type; deeper ones go to the walk (limit 64)


def _json_type(levels: int) -> Any:
    """A JSON value nesting at most ``levels`` containers: str keys, finite floats, no bytes. (msgspec
    has no depth limit and builds a nested union in time exponential in its depth: a few levels are
    typed, and the rare deeper value is decided by the Python walk.)"""
    t: Any = str | int | _Finite | bool | None
    for _ in range(levels):
        t = dict[str, t] | list[t] | str | int | _Finite | bool | None
    return t


if TYPE_CHECKING:  # what the checker sees; msgspec reads the typed unions built below
    _Value = Any
    _Map = dict[str, Any]
else:
    _Value = _json_type(TYPED_LEVELS)  # meta, generation: any JSON value
    _Map = dict[str, _json_type(TYPED_LEVELS - 1)]  # context, tools, usage: a map


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    pass


class RunStartedBody(_Body):
    subject: _Name = "default"
    workflow_version: _Name = "1"
    meta: _Value = None


class AttemptBody(_Body):
    step: _Count
    attempt: _Count
    state: Literal["running", "succeeded", "failed"]
    workflow_version: _Name | None = None
    context: _Map | None = None
    prompt: _Id | None = None
    output: _Id | None = None
    tools: _Map | None = None
    usage: _Map | None = None
    error: str | None = None


class IntentBody(_Body):
    intent: _Name
    step: _Count
    effect: _Name
    idempotent: bool


class IntentCommittedBody(_Body):
    intent: _Name


class RunFinishedBody(_Body):
    status: Literal["succeeded", "failed"]
    error: str | None = None


class TurnBody(_Body):
    role: _Name
    content: _Id | None = None
    origin: Literal["source"] = "source"
    generation: _Value = None


class TaskOpenedBody(_Body):
    task: _Name
    title: str = ""


class TaskClosedBody(_Body):
    task: _Name
    outcome: _Name = "done"


BODIES: dict[str, type[_Body]] = {
    RUN_STARTED: RunStartedBody, ATTEMPT: AttemptBody, INTENT: IntentBody, INTENT_COMMITTED: IntentCommittedBody,
    RUN_FINISHED: RunFinishedBody, TURN: TurnBody, TASK_OPENED: TaskOpenedBody, TASK_CLOSED: TaskClosedBody,
}
_BODY_FIELDS = {k: frozenset(S.__struct_fields__) for k, S in BODIES.items()}
_BODY_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {}
def _plain_id(value: Any) -> bytes:
    """The encoder's hook for a type it does not know: an Id (codec.Id, a bytes subclass) is encoded as
    the plain bytes it is, so a body naming ``put_blob``'s ids stays on the C path and decodes plain."""
    if isinstance(value, bytes):
        return bytes(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_body_enc = msgspec.msgpack.Encoder(enc_hook=_plain_id)
_asdict = msgspec.structs.asdict
# what encoding a value MessagePack cannot hold raises: an integer outside int64/uint64
# (OverflowError), a lone surrogate (UnicodeEncodeError, a ValueError), a type msgspec does not
# know (TypeError), nesting past its recursion limit
_ENCODE_FAILS = (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError)


def _body_decoder(kind: str) -> msgspec.msgpack.Decoder[Any] | None:
    """The typed decoder of a kind's body, built on first use (not at import: `--help` needs none)."""
    dec = _BODY_DECODERS.get(kind)
    if dec is None and kind in BODIES:
        dec = _BODY_DECODERS[kind] = msgspec.msgpack.Decoder(BODIES[kind])
    return dec


def check_body(kind: str, body: dict) -> dict:
    """Validate and normalise a record body; the normalised dict is what is stored.

    In C: msgspec encodes the body (an integer outside int64/uint64, a lone surrogate or an unknown
    type cannot be encoded) and decodes it into the kind's Struct (types, bounds, required and
    unknown fields, str keys, finite floats, no bytes in user values), and the result must equal
    what was given (a set or a tuple comes back a list, a UUID a string). An unknown field is
    refused by name. Anything else that does not pass is decided and named by the Python rules
    (``_check_body_py``): a tuple passes there (it counts as an array), as does a user value nested
    deeper than ``TYPED_LEVELS`` but within 64 levels."""
    dec = _body_decoder(kind)
    if dec is None or type(body) is not dict:
        return _check_body_py(kind, body)
    b = body
    if kind == ATTEMPT or kind == RUN_STARTED:
        wv = b.get("workflow_version", "1" if kind == RUN_STARTED else None)
        if type(wv) is not str and (wv is not None or kind == RUN_STARTED):
            b = dict(b, workflow_version=str(wv))  # any value names a version by its text, as always
    try:
        out = _asdict(dec.decode(_body_enc.encode(b)))
    except msgspec.ValidationError:
        return _slow_body(kind, b)
    except _ENCODE_FAILS:
        return _check_body_py(kind, b)
    if not (out == b if len(b) == len(out) else all(out[k] == v for k, v in b.items())):
        return _check_body_py(kind, b)
    return out


def _slow_body(kind: str, body: dict) -> dict:
    """The Struct refused ``body``: name an unknown field, else let the Python rules name the problem."""
    unknown = sorted(k if type(k) is str else repr(k) for k in body if k not in _BODY_FIELDS[kind])
    if unknown:
        raise InvalidRecord(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in a {kind} body"
                            f" (known: {', '.join(sorted(_BODY_FIELDS[kind]))})")
    return _check_body_py(kind, body)


def _check_body_py(kind: str, body: dict) -> dict:
    """The Python rule set of ``check_body``: names what is wrong (and accepts tuples in maps)."""
    if not isinstance(body, dict):
        raise InvalidRecord("body must be a map")
    if kind in _BODY_FIELDS:
        unknown = [k for k in body if k not in _BODY_FIELDS[kind]]
        if unknown:
            return _slow_body(kind, body)
    b = body  # every branch below builds a fresh dict: the caller's is never stored
    if kind == RUN_STARTED:
        out = {
            "subject": _str(b.get("subject", "default"), "subject"),
            "workflow_version": _str(str(b.get("workflow_version", "1")), "workflow_version"),
            "meta": b.get("meta"),
        }
        _jsonlike(out["meta"], "meta")
    elif kind == ATTEMPT:  # the hot path: checks inlined
        g = b.get
        step, attempt, state, wv = g("step"), g("attempt"), g("state"), g("workflow_version")
        prompt, output, err = g("prompt"), g("output"), g("error")
        context, tools, usage = g("context"), g("tools"), g("usage")
        if type(step) is not int or step < 0:
            _int(step, "step")
        if type(attempt) is not int or attempt < 0:
            _int(attempt, "attempt")
        if state not in _ATTEMPT_STATES:
            _str(state, "state", ATTEMPT_STATES)
        if wv is not None:
            wv = _str(str(wv), "workflow_version")
        if prompt is not None and (type(prompt) is not bytes or len(prompt) != 32):
            prompt = _opt_id(prompt, "prompt")
        if output is not None and (type(output) is not bytes or len(output) != 32):
            output = _opt_id(output, "output")
        if context is not None:
            _jsonmap(context, "context")
        if tools is not None:
            _jsonmap(tools, "tools")
        if usage is not None:
            _jsonmap(usage, "usage")
        if err is not None and type(err) is not str:
            raise InvalidRecord("error must be a string or None")
        if type(step) is int and step > codec.INT_MAX or type(attempt) is int and attempt > codec.INT_MAX:
            raise InvalidRecord("step and attempt must be within the uint64 range")
        if err is not None and not err.isascii():
            _text(err, "error")
        out = {"step": step, "attempt": attempt, "state": state, "workflow_version": wv, "context": context,
               "prompt": prompt, "output": output, "tools": tools, "usage": usage, "error": err}
    elif kind == INTENT:
        out = {
            "intent": _str(b.get("intent"), "intent"),
            "step": _int(b.get("step"), "step"),
            "effect": _str(b.get("effect"), "effect"),
            "idempotent": b.get("idempotent"),
        }
        if not isinstance(out["idempotent"], bool):
            raise InvalidRecord("idempotent must be true or false (the effect class)")
    elif kind == INTENT_COMMITTED:
        out = {"intent": _str(b.get("intent"), "intent")}
    elif kind == RUN_FINISHED:
        out = {"status": _str(b.get("status"), "status", RUN_STATUSES), "error": b.get("error")}
        if out["error"] is not None and not isinstance(out["error"], str):
            raise InvalidRecord("error must be a string or None")
        _text(out["error"], "error")
    elif kind == TURN:
        out = {
            "role": _str(b.get("role"), "role"),
            "content": _opt_id(b.get("content"), "content"),
            "origin": _str(b.get("origin", ORIGIN_SOURCE), "origin", (ORIGIN_SOURCE,)),
            "generation": b.get("generation"),
        }
        _jsonlike(out["generation"], "generation")
    elif kind == TASK_OPENED:
        out = {"task": _str(b.get("task"), "task"), "title": b.get("title", "")}
        if not isinstance(out["title"], str):
            raise InvalidRecord("title must be a string")
        _text(out["title"], "title")
    elif kind == TASK_CLOSED:
        out = {"task": _str(b.get("task"), "task"), "outcome": _str(b.get("outcome", "done"), "outcome")}
    else:
        raise InvalidRecord(f"unknown record kind {kind!r} (known: {', '.join(KINDS)})")
    return out


def object_refs(otype: str, value: dict) -> list[tuple[str, bytes]]:
    """(field, id) of every object a structured object names: verify's reachability input."""
    out = []
    if otype == "record":
        if value.get("parent") is not None:
            out.append(("parent", value["parent"]))
        body = value.get("body") or {}
        for f in BLOB_FIELDS:
            if isinstance(body.get(f), bytes):
                out.append((f, body[f]))
    elif otype == "fork":
        for f in ("parent_record", "parent_head"):
            if isinstance(value.get(f), bytes):
                out.append((f, value[f]))
    else:
        # journal / segment / grant objects: every bytes field at the top level or in
        # a list of maps is an id by construction (their builders put ids nowhere else).
        for k, v in value.items():
            if isinstance(v, bytes):
                out.append((k, v))
            elif isinstance(v, list):
                for i, item in enumerate(v):
                    if isinstance(item, bytes):
                        out.append((f"{k}[{i}]", item))
                    elif isinstance(item, dict):
                        for k2, v2 in item.items():
                            if isinstance(v2, bytes):
                                out.append((f"{k}[{i}].{k2}", v2))
            elif isinstance(v, dict):
                for k2, v2 in v.items():
                    if isinstance(v2, bytes):
                        out.append((f"{k}.{k2}", v2))
    return out


def fork_place_problem(fk: dict, at: bytes | None, describe: Callable[[bytes], str]) -> str | None:
    """What is wrong with where a fork object says its branch (or, with ``parent_run``, its copy)
    parts from its parent, or None: ``at`` is the id the parent's chain index holds at
    (parent run, ``parent_branch``, ``parent_lsn``), which must be its ``parent_record`` — the fork
    point is data (invariant 3), and a fork naming a record elsewhere would give a reader another
    run's or branch's history. The one rule: readers refuse such a fork, verify names it (``bad-fork``)."""
    if at == fk["parent_record"]:
        return None
    pb, pl, src = fk["parent_branch"], fk["parent_lsn"], fk.get("parent_run")
    said = f"copy says run {src} branch {pb} LSN {pl}" if isinstance(src, str) and src != fk.get("run") else f"fork says parent branch {pb} LSN {pl}"
    return f"{said}, but its parent record is {describe(fk['parent_record'])}"


def compensation_for(facts: Sequence[tuple], forks: dict, branch: int, after_lsn: int, upto_lsn: int) -> list[dict]:
    """The compensation flags of rewinding ``branch`` to ``after_lsn``: one per intent committed by
    the branch's own records in (after_lsn, upto_lsn] whose declared effect is not idempotent.

    ``facts``: (branch, lsn, kind, body, id) of the run's intent and intent_committed records;
    ``forks``: branch -> (parent branch, parent LSN), read from the fork objects. A pure function:
    fork and verify both call it, so a fork object's flags can be checked against the records."""
    decls: dict[int, list] = {}
    for b, lsn, kind, body, _ in facts:
        if kind == INTENT:
            decls.setdefault(b, []).append((lsn, body))
    out = []
    for b, lsn, kind, body, oid in sorted(facts, key=lambda f: (f[0], f[1])):
        if kind != INTENT_COMMITTED or b != branch or not after_lsn < lsn <= upto_lsn:
            continue
        decl = _declaration(decls, forks, branch, body.get("intent"), lsn)
        if decl is not None and decl.get("idempotent") is False:
            out.append({"intent": body["intent"], "step": decl["step"], "effect": decl["effect"],
                        "committed_record": oid, "committed_lsn": lsn})
    return out


def _declaration(decls: dict, forks: dict, branch: int | None, intent: object, before: int) -> dict | None:
    """The newest declaration of ``intent`` in ``branch``'s lineage before LSN ``before``."""
    seen = set()
    while branch is not None and branch not in seen:
        seen.add(branch)
        best = None
        for lsn, body in decls.get(branch, ()):
            if lsn < before and body.get("intent") == intent and (best is None or lsn > best[0]):
                best = (lsn, body)
        if best is not None:
            return best[1]
        parent = forks.get(branch)
        if parent is None:
            return None
        branch, before = parent[0], parent[1] + 1
    return None


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


RECORD_TYPE, FORK_TYPE = "record", "fork"


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
        return _segment_problem(value)
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


def _show(v: object) -> str:
    if v is None or type(v) in (bool, int, float):
        return repr(v)
    if type(v) is str:
        return repr(v) if len(v) <= 40 else repr(v[:37]) + "…"
    if type(v) is bytes:
        return f"{len(v)} bytes"
    return type(v).__name__


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


# The vocabulary of the journal objects, defined here (the record model) and imported by the modules
# that write them (host, grants, journal, segments), so the schema checks below need nothing above.
PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET = "present", "absent", "disabled", "unavailable", "over_budget"
OUTCOMES = (PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET)
ROLES = ("worker", "job")
DELETE_RIGHT = "delete"
RIGHTS = (DELETE_RIGHT, "read", "write")  # sorted: a grant's rights list is stored sorted
DEFAULT_RIGHTS = ("read", "write")  # what a grant gives unless told: a journal worker's (delete is asked for by name)
JOURNAL_SCHEMA = 2
GRANT_SCHEMA = 2
SEGMENT_SCHEMA = 2
_KNOWN_VERSION = {"journal": JOURNAL_SCHEMA, "grant": GRANT_SCHEMA, "segment": SEGMENT_SCHEMA}


def _t745() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], int, int, int]:
    """(OUTCOMES, ROLES, RIGHTS, journal, grant, segment schema versions)."""
    return OUTCOMES, ROLES, RIGHTS, JOURNAL_SCHEMA, GRANT_SCHEMA, SEGMENT_SCHEMA


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


def _segment_problem(value: dict) -> str | None:
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


# -- deletion objects (issue 17; docs/FORMAT.md "Deletion and redaction objects") ----------------------
#
# A recorded deletion or redaction: what it covers (a whole run, some records of one run, one
# blob), why, when, by whom (the signer's public key and the grant that let it, if not the
# owner), signed. Schema 1 carries ``v`` = 1 (it is new: no legacy form without ``v``). A covered
# record is listed as ``[id, branch, lsn, kind]`` (sorted by branch, LSN), so that a record whose
# body is gone still has its place and kind: it folds as a header-only record.

DELETION_TYPE = "deletion"
DELETION_SCHEMA = 1
SCOPES = ("run", "records", "blob")
SCOPE_RUN, SCOPE_RECORDS, SCOPE_BLOB = SCOPES
_KNOWN_VERSION[DELETION_TYPE] = DELETION_SCHEMA
DELETION_FIELDS = ("v", "scope", "run", "records", "blob", "reason", "time", "by", "grant", "previous", "sig", "blobs")


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


def deletion_rows(value: dict) -> list[tuple[bytes, int, int, str]]:
    """The covered records of a ``records`` deletion as (id, branch, lsn, kind); none for others."""
    return [(r[0], r[1], r[2], r[3]) for r in value.get("records") or ()]


def header_only(oid: bytes, run: str, branch: int, lsn: int, parent: bytes | None, kind: str, deletion: bytes) -> Record:
    """A record whose body a recorded deletion covers: its place (run, branch, LSN, parent) and kind
    stay, its time and body are gone; the body says which deletion took it: ``{"deleted": id}``
    (no record kind has a ``deleted`` field, so no stored body looks like this)."""
    return Record(oid, run, branch, lsn, parent, kind, None, {DELETED_FIELD: deletion})


DELETED_FIELD = "deleted"


def deleted_by(rec: Record) -> bytes | None:
    """The id of the deletion that covers ``rec`` (a header-only record), else None."""
    d = rec.body.get(DELETED_FIELD) if DELETED_FIELD in rec.body else None
    return d if type(d) is bytes else None
