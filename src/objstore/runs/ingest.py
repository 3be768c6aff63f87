"""Ingest: JSON Lines events from any agent framework into the run log.

Schema version 1 (docs/INGEST.md): one JSON object per line, each with
``"v": 1`` and a ``"type"``:

* ``run_started``      run, subject?, workflow_version?, meta?
* ``attempt``          run, step, attempt, state, prompt?, output?, context?, tools?, usage?, error?, workflow_version?
* ``intent``           run, intent, step, effect, idempotent
* ``intent_committed`` run, intent
* ``run_finished``     run, status, error?
* ``turn``             run, role, content?
* ``rewind``           run, to_lsn, reason?
* ``fork``             run, from_branch, at_lsn, reason?, live? (default true)

Common optional fields: ``time`` (seconds since the epoch), ``branch`` (append to
a retained branch explicitly). ``prompt``/``output``/``content`` are either a
string (stored as a UTF-8 blob) or ``{"blob": "<64 hex id>"}`` naming a stored blob.

All or nothing per run: every line is parsed and checked first (a bad line: nothing
lands, the error names it); the events are then committed run by run, each run's
events one commit (``apply_events_per_run``), so a run whose line N is refused when
applied lands not at all while the other runs land, and the summary names the runs
that landed. A run the store has already with the same events (a file ingested again)
is skipped; one it has with other events is refused (``IngestRunExists``, exit 7,
naming it). On a store with a log per run a commit writes one log: a single commit
of several runs' events (``apply_events``) is ``MultiLogBatch`` (exit 15).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from typing import IO, TYPE_CHECKING, Annotated, Any

import msgspec

from ..errors import (
    Conflict,
    IngestError,
    IngestMultiLog,
    IntegrityError,
    LimitExceeded,
    MultiLogBatch,
    ObjstoreError,
    Refused,
    StorageOSError,
)
from ..storage import codec, runrefs
from . import records as R

if TYPE_CHECKING:
    from .api import RunLog

SCHEMA_VERSION = 1
EVENT_TYPES = (R.RUN_STARTED, R.ATTEMPT, R.INTENT, R.INTENT_COMMITTED, R.RUN_FINISHED, R.TURN, "rewind", "fork")
_COMMON = {"v", "type", "run", "time", "branch"}
MAX_LINE = 64 << 20  # bytes of one event line (its blobs included)

# -- the schema of an event, declared once --------------------------------------------------------
# msgspec checks types strictly: a bool is not an integer (``to_lsn: true``), a string is not a bool
# (``live: "no"``), integers stay within the store's range, unknown fields are errors. The values
# were already parsed by codec.parse_json (no duplicate keys, NaN, lone surrogates, deep nesting).

Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # msgspec bounds are int64
# seconds since the epoch, within the calendar every reader can show (years 1 to 9999; records.check_time)
Time = Annotated[float, msgspec.Meta(ge=R.TIME_MIN, le=R.TIME_MAX)]


class BlobRef(msgspec.Struct, forbid_unknown_fields=True):
    blob: str


Text = str | BlobRef | None
JsonMap = dict[str, Any] | None


class _Event(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    v: int
    type: str
    run: str
    time: Time | None = None
    branch: Count | None = None


class RunStartedEvent(_Event):
    subject: str = "default"
    workflow_version: str | int | float = "1"
    meta: JsonMap = None


class AttemptEvent(_Event):
    step: Count
    attempt: Count
    state: str
    prompt: Text = None
    output: Text = None
    context: JsonMap = None
    tools: JsonMap = None
    usage: JsonMap = None
    error: str | None = None
    workflow_version: str | int | float | None = None


class IntentEvent(_Event):
    intent: str
    step: Count
    effect: str
    idempotent: bool


class IntentCommittedEvent(_Event):
    intent: str


class RunFinishedEvent(_Event):
    status: str
    error: str | None = None


class TurnEvent(_Event):
    role: str
    content: Text = None
    generation: Any = None


class RewindEvent(_Event):
    to_lsn: Count
    reason: str = "rewind"


class ForkEvent(_Event):
    from_branch: Count
    at_lsn: Count
    reason: str = ""
    live: bool = True


SCHEMAS: dict[str, type[_Event]] = {
    R.RUN_STARTED: RunStartedEvent, R.ATTEMPT: AttemptEvent, R.INTENT: IntentEvent,
    R.INTENT_COMMITTED: IntentCommittedEvent, R.RUN_FINISHED: RunFinishedEvent, R.TURN: TurnEvent,
    "rewind": RewindEvent, "fork": ForkEvent,
}


def _schema_error(t: str, e: msgspec.ValidationError) -> str:
    """msgspec's message, in the words of the rest of this module: ``<field>: expected …``."""
    msg, _, where = str(e).partition(" - at `$.")
    field = where.rstrip("`")
    msg = msg.replace("`", "")
    if msg.startswith("Object contains unknown field "):
        unknown = msg.removeprefix("Object contains unknown field ")
        return f"{field}: unknown field(s): {unknown}" if field else f"unknown field(s) for {t}: {unknown}"
    if msg.startswith("Object missing required field "):
        return f"{t} needs {(field + '.') if field else ''}{msg.removeprefix('Object missing required field ')}"
    msg = msg[:1].lower() + msg[1:]
    return f"{field}: {msg}" if field else msg


def _blob_field(value: Any, lineno: int, field: str) -> str | bytes | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"blob"}:
        try:
            return codec.parse_id(value["blob"])
        except ObjstoreError as e:
            raise IngestError(lineno, f"{field}: {e}") from None
    raise IngestError(lineno, f"{field} must be a string or {{\"blob\": \"<hex id>\"}}")


def parse(lines: Iterable[str | bytes], *, start: int = 1) -> list[tuple[int, dict, dict]]:
    """Parse and check every line into (line number, event, normalised body with blob refs as ids);
    raises IngestError naming the first bad line. Nothing is written."""
    events = []
    for lineno, raw in enumerate(lines, start):
        if len(raw) > MAX_LINE:
            raise IngestError(lineno, f"line is longer than {MAX_LINE} bytes")
        if not raw.strip():
            continue
        ev = codec.parse_json(raw, "", partial(IngestError, lineno))
        if not isinstance(ev, dict):
            raise IngestError(lineno, "an event must be a JSON object")
        v = ev.get("v")
        if type(v) is not int or v != SCHEMA_VERSION:
            raise IngestError(lineno, f"schema version must be {SCHEMA_VERSION}, got {v!r}")
        t = ev.get("type")
        if t not in EVENT_TYPES:
            raise IngestError(lineno, f"unknown event type {t!r} (known: {', '.join(EVENT_TYPES)})")
        try:
            R.check_run_id(ev.get("run"))
            try:
                msgspec.convert(ev, SCHEMAS[t])
            except msgspec.ValidationError as e:
                raise IngestError(lineno, _schema_error(t, e)) from None
            body = {k: v for k, v in ev.items() if k not in _COMMON}
            if t in (R.ATTEMPT, R.TURN):
                for f in R.BLOB_FIELDS:
                    if f in body:
                        body[f] = _blob_field(body[f], lineno, f)
                probe = {f: (b"\0" * 32 if f in R.BLOB_FIELDS and isinstance(v, str) else v) for f, v in body.items()}
                R.check_body(t, probe)
            elif t not in ("rewind", "fork"):
                R.check_body(t, body)
        except IngestError:
            raise
        except ObjstoreError as e:
            raise IngestError(lineno, str(e).removeprefix("invalid record: ")) from None
        events.append((lineno, ev, body))
    return events


# Errors met while applying a line keep their class (their exit code) and name the line.
class IngestConflict(Conflict):
    msg = "ingest: line {}: {}"


class IngestRefused(Refused):
    msg = "ingest: line {}: {}"


class IngestLimit(LimitExceeded):
    msg = "ingest: line {}: {}"


class IngestIntegrity(IntegrityError):
    msg = "ingest: line {}: {}"


class IngestOSError(StorageOSError):
    msg = "ingest: line {}: {}"


_KEEP = ((Conflict, IngestConflict), (Refused, IngestRefused), (LimitExceeded, IngestLimit),
         (IntegrityError, IngestIntegrity), (StorageOSError, IngestOSError))


def _at_line(lineno: int, e: ObjstoreError) -> ObjstoreError:
    """An error met applying line ``lineno``: invalid input and not-found (an unknown run, a rewind
    past the end) are the line's fault, IngestError (exit 5); a conflict, refusal, limit, damage or
    OS error keeps its own exit code."""
    if isinstance(e, (IngestError, MultiLogBatch)):
        return e  # a batch of several runs' logs: the whole batch's fault, not the line's (apply_events says so)
    for base, cls in _KEEP:
        if isinstance(e, base):
            return cls(lineno, str(e))
    return IngestError(lineno, str(e))


def _lines(stream: IO | Iterable[str | bytes]) -> Iterator[str | bytes]:
    """The lines of a stream, each read with a bound (a newline-free gigabyte is refused at
    MAX_LINE bytes, not held); any other iterable of lines as it is."""
    readline = getattr(stream, "readline", None)
    if readline is None:
        yield from stream
        return
    while True:
        try:
            line = readline(MAX_LINE + 1)
        except OSError as e:
            raise StorageOSError("read the ingest input", e) from None
        if not line:
            return
        yield line


def read_events(stream: IO) -> list[tuple[int, dict, dict]]:
    """Every event of a JSON Lines stream, parsed and checked; nothing is written (IngestError
    names the first bad line). The CLI reads them before it opens, or creates, the store."""
    return parse(_lines(stream))


class IngestRunExists(Conflict):
    msg = "ingest: line {1}: run {0} is in the store already, with other events than this file's (skipped: a run is ingested once)"


def ingest(log: RunLog, stream: IO) -> dict:
    """Apply a JSON Lines stream, all or nothing per run (``apply_events_per_run``); returns the summary, or
    raises the first failed run's error once the other runs have landed (its ``summary`` attribute says which)."""
    errors: list[ObjstoreError] = []
    summary = apply_events_per_run(log, read_events(stream), errors)
    if errors:
        err = errors[0]
        err.summary = summary  # type: ignore[attr-defined]
        raise err
    return summary


def apply_events(log: RunLog, events: list[tuple[int, dict, dict]]) -> dict:
    """Apply events from ``read_events`` in one group commit; returns a summary. On object storage,
    where a commit touches one run's log, events of several runs are ``IngestMultiLog`` (a ``MultiLogBatch``, exit 15):
    ``apply_events_per_run`` commits them run by run."""
    summary: dict[str, Any] = {"events": len(events), "records": 0, "runs": [], "forks": []}
    try:
        with log.store.batch():
            _apply(log, events, summary)
    except MultiLogBatch as e:  # the one line names the way out (``IngestMultiLog``, still a MultiLogBatch)
        raise IngestMultiLog(*e.args) from None
    return summary


def apply_events_per_run(log: RunLog, events: list[tuple[int, dict, dict]], errors: list[ObjstoreError] | None = None) -> dict:
    """Apply events run by run, in the order of each run's first line: each run's events are one
    commit (all or nothing for that run), re-run on a newer head if another writer moved it. A run
    that fails is named with its error and the others go on. The summary adds ``landed`` (runs
    committed), ``skipped`` (runs the file starts that the store holds already with the same events:
    ``same_run``) and ``failed`` ([{run, error}], the error's JSON; the errors themselves appended to
    ``errors``). Running it again lands only the runs that did not land (a run started by the file and
    present with other events is ``IngestRunExists``, exit 7)."""
    by_run: dict[str, list] = {}
    for item in events:
        by_run.setdefault(item[1]["run"], []).append(item)
    summary: dict[str, Any] = {"events": len(events), "records": 0, "runs": [], "forks": [], "landed": [], "skipped": [], "failed": []}
    for run, evs in by_run.items():
        def one(evs: list = evs) -> dict:
            sub: dict[str, Any] = {"records": 0, "runs": [], "forks": []}
            _apply(log, evs, sub)
            return sub
        try:
            start = next((lineno for lineno, ev, _ in evs if ev["type"] == R.RUN_STARTED), None)
            if start is not None and runrefs.branch_ref(run, 0) in log.store.run_refs(run):
                if not same_run(log, run, evs):
                    raise IngestRunExists(run, start)
                summary["skipped"].append(run)
                continue
            sub = log.store.atomically(one)
        except ObjstoreError as e:
            summary["failed"].append({"run": run, "error": e.to_json()})
            if errors is not None:
                errors.append(e)
            continue
        summary["records"] += sub["records"]
        summary["runs"] += sub["runs"]
        summary["forks"] += sub["forks"]
        summary["landed"].append(run)
    return summary


_NO_TIME = float(R.TIME_MIN)  # the time an event without one gets when a run is rebuilt to compare (never compared)


def same_run(log: RunLog, run: str, events: list[tuple[int, dict, dict]]) -> bool:
    """Whether run ``run`` in the store is what ``events`` (every event of it in a file, its start
    included) make: the events are applied to a store in memory and every record of every branch
    compared — kind, branch, LSN, body (blob ids included: content-addressed) and the time an event
    gives — and the live branch. Costs the run's records read once; nothing is written."""
    from ..storage.store import Store
    from .api import RunLog as _RunLog

    mem = _RunLog(Store.memory())
    for _lineno, _ev, body in events:
        for f in R.BLOB_FIELDS:
            v = body.get(f)
            if isinstance(v, bytes):
                if not log.store.has(v):
                    return False
                mem.store.put_blob(log.get_blob(v))
    timed = [(lineno, ev if ev.get("time") is not None else dict(ev, time=_NO_TIME), body) for lineno, ev, body in events]
    try:
        with mem.store.batch():
            _apply(mem, timed, {"records": 0, "runs": [], "forks": []})
        theirs = log.records(run, all_branches=True)
        live = log.view(run).live
    except ObjstoreError:
        return False
    mine = mem.records(run, all_branches=True)
    if len(mine) != len(theirs) or mem.view(run).live != live:
        return False
    for a, b in zip(mine, theirs, strict=True):
        if (a.kind, a.branch, a.lsn, a.body) != (b.kind, b.branch, b.lsn, b.body):
            return False
        if a.time != _NO_TIME and a.time != b.time:
            return False
    return True


def _apply(log: RunLog, events: list[tuple[int, dict, dict]], summary: dict) -> None:
    """The events, into the batch open around the call."""
    store = log.store
    for lineno, ev, body in events:
        body = dict(body)  # blob fields become ids below: a body run again (Store.atomically, StaleBase) starts from the text
        t = ev["type"]
        run = ev["run"]
        when = ev.get("time")
        try:
            if t == R.RUN_STARTED:
                log.start_run(run, subject=body.get("subject", "default"), workflow_version=str(body.get("workflow_version", "1")), meta=body.get("meta"), when=when)
                summary["runs"].append(run)
            elif t in ("rewind", "fork"):
                if t == "rewind":
                    fr = log.rewind(run, body["to_lsn"], reason=body.get("reason", "rewind"), when=when)
                else:
                    fr = log.fork(run, body["from_branch"], body["at_lsn"], reason=body.get("reason", ""), make_live=body.get("live", True), when=when)
                summary["forks"].append(dict(fr.as_dict(), run=run, line=lineno))
                continue
            else:
                for f in R.BLOB_FIELDS:
                    v = body.get(f)
                    if isinstance(v, str):
                        body[f] = store.put_blob(v.encode("utf-8"))
                    elif isinstance(v, bytes) and not store.has(v):
                        raise IngestError(lineno, f"{f}: blob {v.hex()} is not in the store")
                log.append(run, t, body, branch=ev.get("branch"), allow_retained=ev.get("branch") is not None, when=when)
        except ObjstoreError as e:
            raise _at_line(lineno, e) from None
        summary["records"] += 1
