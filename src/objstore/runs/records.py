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

The schemas are msgspec Structs, one per record kind (``BODIES``), declared here and nowhere
else (the stored record and fork objects' ``RecordV1``, ``ForkV1`` in ``runs.schemas``): ``check_body`` validates a
body in C (one JSON encode, one typed decode, one comparison) and only walks it in Python to
name what is wrong; ``runs.schemas.schema_problem`` (verify) converts stored values through the same
Structs, and checks every other stored object type (this module holds their vocabulary).
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
    if not _unchanged(out, b):
        return _check_body_py(kind, b)
    return out


def _unchanged(out: dict, given: dict) -> bool:
    """Whether the Struct's reading of a body (``out``, every field) holds the values it was given (a tuple comes
    back a list, a UUID a string: such a body is the Python rules' to decide)."""
    return out == given if len(given) == len(out) else all(out[k] == v for k, v in given.items())


def check_bodies(kind: str, bodies: list) -> list[dict]:
    """``check_body`` of many bodies of one kind, with one msgspec encode and one typed decode of the whole list
    (an append of many records): a body the list's pass does not settle goes through ``check_body`` alone, which
    decides and names what is wrong with it exactly as for one record."""
    dec = _bodies_decoder(kind)
    if dec is None or not all(type(b) is dict for b in bodies):
        return [check_body(kind, b) for b in bodies]
    try:
        outs = dec.decode(_body_enc.encode(bodies))
    except (msgspec.ValidationError, *_ENCODE_FAILS):
        return [check_body(kind, b) for b in bodies]
    got = []
    for b, s in zip(bodies, outs, strict=True):
        out = _asdict(s)
        got.append(out if _unchanged(out, b) else check_body(kind, b))  # a version given as a number: the one-body rules
    return got


_BODIES_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {}


def _bodies_decoder(kind: str) -> msgspec.msgpack.Decoder[Any] | None:
    dec = _BODIES_DECODERS.get(kind)
    if dec is None and kind in BODIES:
        dec = _BODIES_DECODERS[kind] = msgspec.msgpack.Decoder(list[BODIES[kind]])  # type: ignore[valid-type]
    return dec


def _slow_body(kind: str, body: dict) -> dict:
    """The Struct refused ``body``: name an unknown field, else let the Python rules name the problem."""
    unknown = sorted(k if type(k) is str else repr(k) for k in body if k not in _BODY_FIELDS[kind])
    if unknown:
        raise InvalidRecord(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in a {kind} body"
                            f" (known: {', '.join(sorted(_BODY_FIELDS[kind]))})")
    return _check_body_py(kind, body)


def _check_attempt_py(b: dict) -> dict:
    """``_check_body_py`` of an attempt body, the hot path: its checks inlined."""
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
    return {"step": step, "attempt": attempt, "state": state, "workflow_version": wv, "context": context,
            "prompt": prompt, "output": output, "tools": tools, "usage": usage, "error": err}


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
        out = _check_attempt_py(b)
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


RECORD_TYPE, FORK_TYPE = "record", "fork"


def _show(v: object) -> str:
    if v is None or type(v) in (bool, int, float):
        return repr(v)
    if type(v) is str:
        return repr(v) if len(v) <= 40 else repr(v[:37]) + "…"
    if type(v) is bytes:
        return f"{len(v)} bytes"
    return type(v).__name__


# The vocabulary of the journal objects, defined here (the record model) and imported by the modules
# that write them (host, grants, journal, segments), so their schema checks (runs.schemas) need nothing above.
PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET = "present", "absent", "disabled", "unavailable", "over_budget"
OUTCOMES = (PRESENT, ABSENT, DISABLED, UNAVAILABLE, OVER_BUDGET)
ROLES = ("worker", "job")
DELETE_RIGHT = "delete"
RIGHTS = (DELETE_RIGHT, "read", "write")  # sorted: a grant's rights list is stored sorted
DEFAULT_RIGHTS = ("read", "write")  # what a grant gives unless told: a journal worker's (delete is asked for by name)
JOURNAL_SCHEMA = 2
GRANT_SCHEMA = 2
COMPACTION_SEGMENT_SCHEMA = 2
_KNOWN_VERSION = {"journal": JOURNAL_SCHEMA, "grant": GRANT_SCHEMA, "segment": COMPACTION_SEGMENT_SCHEMA}


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
