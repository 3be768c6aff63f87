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

All or nothing: every line is parsed and checked first; the events are then
applied inside one group commit, so if line N is bad, none of the lines before
it land either, and the error names line N.
"""

from __future__ import annotations

import json
from typing import IO

from . import codec
from . import records as R
from .errors import IngestError, ObjstoreError

SCHEMA_VERSION = 1
EVENT_TYPES = (R.RUN_STARTED, R.ATTEMPT, R.INTENT, R.INTENT_COMMITTED, R.RUN_FINISHED, R.TURN, "rewind", "fork")
_COMMON = {"v", "type", "run", "time", "branch"}


def _blob_field(value, lineno, field):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"blob"}:
        try:
            return codec.parse_id(value["blob"])
        except ObjstoreError as e:
            raise IngestError(lineno, f"{field}: {e}") from None
    raise IngestError(lineno, f"{field} must be a string or {{\"blob\": \"<hex id>\"}}")


def parse(lines, *, start: int = 1) -> list[tuple[int, dict, dict]]:
    """Parse and check every line into (line number, event, normalised body, blob refs as ids);
    raises IngestError naming the first bad line."""
    events = []
    for lineno, raw in enumerate(lines, start):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise IngestError(lineno, "not UTF-8") from None
        if not raw.strip():
            continue
        try:
            ev = json.loads(raw)
        except ValueError as e:
            raise IngestError(lineno, f"not JSON: {e}") from None
        if not isinstance(ev, dict):
            raise IngestError(lineno, "an event must be a JSON object")
        if ev.get("v") != SCHEMA_VERSION:
            raise IngestError(lineno, f"schema version must be {SCHEMA_VERSION}, got {ev.get('v')!r}")
        t = ev.get("type")
        if t not in EVENT_TYPES:
            raise IngestError(lineno, f"unknown event type {t!r} (known: {', '.join(EVENT_TYPES)})")
        try:
            R.check_run_id(ev.get("run"))
            if ev.get("time") is not None and not isinstance(ev["time"], (int, float)):
                raise IngestError(lineno, "time must be a number")
            if ev.get("branch") is not None and (not isinstance(ev["branch"], int) or ev["branch"] < 0):
                raise IngestError(lineno, "branch must be a non-negative integer")
            body = {k: v for k, v in ev.items() if k not in _COMMON}
            if t in (R.ATTEMPT, R.TURN):
                for f in R.BLOB_FIELDS:
                    if f in body:
                        body[f] = _blob_field(body[f], lineno, f)
                probe = {f: (b"\0" * 32 if f in R.BLOB_FIELDS and isinstance(v, str) else v) for f, v in body.items()}
                R.check_body(t, probe)
            elif t == "rewind":
                if not isinstance(body.get("to_lsn"), int) or body["to_lsn"] < 0:
                    raise IngestError(lineno, "rewind needs to_lsn, a non-negative integer")
            elif t == "fork":
                for f in ("from_branch", "at_lsn"):
                    if not isinstance(body.get(f), int) or body[f] < 0:
                        raise IngestError(lineno, f"fork needs {f}, a non-negative integer")
            else:
                R.check_body(t, body)
            unknown = set(body) - _allowed(t)
            if unknown:
                raise IngestError(lineno, f"unknown field(s) for {t}: {', '.join(sorted(unknown))}")
        except IngestError:
            raise
        except ObjstoreError as e:
            raise IngestError(lineno, str(e).removeprefix("invalid record: ")) from None
        events.append((lineno, ev, body))
    return events


def _allowed(t: str) -> set:
    return {
        R.RUN_STARTED: {"subject", "workflow_version", "meta"},
        R.ATTEMPT: {"step", "attempt", "state", "workflow_version", "context", "prompt", "output", "tools", "usage", "error"},
        R.INTENT: {"intent", "step", "effect", "idempotent"},
        R.INTENT_COMMITTED: {"intent"},
        R.RUN_FINISHED: {"status", "error"},
        R.TURN: {"role", "content", "generation"},
        "rewind": {"to_lsn", "reason"},
        "fork": {"from_branch", "at_lsn", "reason", "live"},
    }[t]


def ingest(log, stream: IO) -> dict:
    """Apply a JSON Lines stream all-or-nothing; returns a summary."""
    events = parse(stream)
    summary = {"events": len(events), "records": 0, "runs": [], "forks": []}
    store = log.store
    with store.batch():
        for lineno, ev, body in events:
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
            except IngestError:
                raise
            except ObjstoreError as e:
                raise IngestError(lineno, str(e)) from None
            summary["records"] += 1
    return summary
