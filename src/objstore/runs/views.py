"""The JSON shapes of objstore's public entities: one function per entity.

This module owns what a run, a branch, a fork, a record (one ``log`` entry),
an attempt, a verify problem and an error look like as JSON, so every command
that prints one (``objstore ... --json``) and every Python caller gets the same
shape. Each function returns plain JSON values (ids as lowercase hex, never
bytes); ``codec.canonical_json`` of the result is what the CLI prints. The JSON
Schema of each shape is in docs/CLI.md and tests/cli/test_cli_json.py validates the
CLI's real output against it, so a change here must change the docs too.

Vocabulary: an **LSN** is a record's position on its branch (0, 1, 2, ...);
the **live branch** of a run is the one queries, appends and export use by
default; a **fork** object is the root of a forked branch and records where it
left its parent (parent branch, parent LSN, parent record); its
**compensation** list names committed non-idempotent intents (side effects
such as a refund) that the fork rewound past: they may need undoing by hand.

The shapes (field: JSON type):

- ``run(view)``: ``run`` str, ``live_branch`` int, ``branch_count`` int.
- ``branch(row)``: ``branch`` int, ``head`` id, ``live`` bool, ``fork`` a
  fork object (below) or null for a root branch.
- ``fork(fk)``: ``kind`` "fork", ``id``, ``run``, ``branch``,
  ``parent_branch``, ``parent_lsn``, ``parent_record``, ``parent_head``,
  ``reason``, ``time``, ``compensation_required`` bool, ``compensation``
  (list of ``{intent, step, effect, committed_lsn, committed_record}``).
- ``record(r)``: ``kind``, ``id``, ``run``, ``branch``, ``lsn``, ``parent``
  (id or null), ``time`` (number or null), ``body`` (object; ids as hex).
- ``log_entry(...)``: a record, or a fork (told apart by ``kind == "fork"``).
- ``export_entry``: ``schema`` (export format version) plus a record or fork
  (``objstore.runs.export`` builds them with these functions).
- ``attempt(rec, wv)``: the seed's AttemptView (``step``, ``attempt``,
  ``state``, ``workflow_version``, ``context``, ``prompt``, ``output``,
  ``tools``, ``usage``; blob refs as hex ids, never bodies).
- ``problem(p)``: ``code``, ``subject``, ``where``, ``detail``.
- ``error(e)``: ``error`` (kebab-case code), ``message``, ``exit`` int.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..storage import codec
from . import records as R

if TYPE_CHECKING:
    from ..errors import ObjstoreError
    from ..storage.store import Store
    from .api import ForkResult
    from .chain import ChainReader, View
    from .verify_report import Problem

FORK_KIND = "fork"


def _hex(v: Any) -> Any:
    return v.hex() if isinstance(v, bytes) else v


def run(view: View, started: R.Record, short_id: str) -> dict:
    """A run: its id and the short id that names it among the store's runs, its subject, workflow
    version and start time (from its ``run_started`` record), its live branch and branch count."""
    body = started.body
    return {"run": view.run, "short_id": short_id, "subject": body.get("subject"), "workflow_version": body.get("workflow_version"),
            "started": started.time, "live_branch": view.live, "branch_count": len(view.heads)}


def runs(log: ChainReader) -> list[dict]:
    """Every run of the store in ``run`` shape, in ``log.runs()`` order (what ``objstore runs`` lists)."""
    from .resolve import short_ids

    ids = list(log.runs())
    short = short_ids(ids)
    return [run(log.view(r), log.run_started(r), short[r]) for r in ids]


def fork(fk: dict) -> dict:
    """A fork object (as stored, with its ``id``) in its one JSON shape."""
    comp = fk.get("compensation") or []
    return {
        "kind": FORK_KIND,
        "id": _hex(fk["id"]),
        "run": fk["run"],
        "branch": fk["branch"],
        "parent_branch": fk["parent_branch"],
        "parent_lsn": fk["parent_lsn"],
        "parent_record": _hex(fk["parent_record"]),
        "parent_head": _hex(fk["parent_head"]),
        "reason": fk.get("reason", ""),
        "time": fk.get("time"),
        "compensation_required": bool(comp),
        "compensation": codec.to_jsonable(list(comp)),
        **({"parent_run": fk["parent_run"]} if fk.get("parent_run") else {}),  # a copy's source run (fork_run)
    }


def fork_by_id(store: Store, fork_id: bytes) -> dict:
    """The fork view of the fork object ``fork_id`` (read from the store)."""
    return fork(dict(store.get_typed(fork_id, codec.FORK), id=fork_id))


def fork_result(log: ChainReader, fr: ForkResult) -> dict:
    """The fork view of what ``RunLog.fork``/``rewind`` returned (the fork object is re-read)."""
    return fork_by_id(log.store, fr.fork_id)


def branch(row: dict) -> dict:
    """A branch as ``RunLog.branches`` lists it: number, head, live flag, its fork (or null)."""
    fk = row.get("fork")
    return {"branch": row["branch"], "head": _hex(row["head"]), "live": bool(row["live"]), "fork": fork(fk) if fk else None}


def record(r: R.Record, body: dict | None = None) -> dict:
    """One record (a ``log`` entry); ``body`` replaces the record's body (export hides derived material)."""
    return {
        "kind": r.kind,
        "id": r.id.hex(),
        "run": r.run,
        "branch": r.branch,
        "lsn": r.lsn,
        "parent": _hex(r.parent),
        "time": r.time,
        "body": codec.to_jsonable(r.body if body is None else body),
    }


def log_entry(r: R.Record | None, fk: dict | None) -> dict:
    """One entry of ``history.entries``: the record's view, or the fork's."""
    if r is not None:
        return record(r)
    assert fk is not None  # an entry is a record or a fork object
    return fork(fk)


def export_entry(schema: int, entry: dict) -> dict:
    """An outbox entry: the export format version plus a record or fork view."""
    return {"schema": schema, **entry}


def attempt(rec: R.Record, run_workflow_version: Any = None) -> dict:
    """The seed's AttemptView of an ``attempt`` record (what ``episode`` lists)."""
    from .refold import attempt_view

    return attempt_view(rec, run_workflow_version)


def problem(p: Problem) -> dict:
    """A verify finding (or note): code, what it is about, the file path (or ""), the detail."""
    return {"code": p.code, "subject": p.subject, "where": p.where, "detail": p.detail}


def error(e: ObjstoreError) -> dict:
    """An ``ObjstoreError`` as the CLI prints it under ``--json`` (on stderr)."""
    return e.to_json()


def usage_error(message: str) -> dict:
    """A command-line usage error (exit 2) under ``--json``."""
    return {"error": "usage-error", "message": message, "exit": 2}


def blob_summary(data: bytes) -> dict:
    """What ``show --json`` says of a blob: its size, and its text when it is text."""
    text = text_or_none(data)
    return {"size": len(data), "binary": text is None, "text": text}


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def text_or_none(data: bytes) -> str | None:
    """``data`` as str if it is UTF-8 text (no control characters but tab, newline, CR), else None."""
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _CONTROL.search(s):
        return None
    return s


def object_(oid: bytes, otype: str, value: Any) -> dict:
    """``show --json``: an object's id, type and decoded fields (a blob: ``blob_summary``;
    a record: its record view; a fork: its fork view; other types: their stored fields)."""
    if otype == codec.BLOB:
        v: Any = blob_summary(value)
    elif otype == codec.RECORD:
        v = record(R.Record.from_payload(oid, value))
    elif otype == codec.FORK:
        v = fork(dict(value, id=oid))
    else:
        v = codec.to_jsonable(value)
    return {"id": oid.hex(), "type": otype, "value": v}


def ingest_summary(log: ChainReader, summary: dict) -> dict:
    """What ``ingest`` did: events read, records written, new runs, and each fork it made
    (``{"line": n, "fork": <fork view>}``, the fork object re-read)."""
    return {
        "events": summary["events"],
        "records": summary["records"],
        "runs": list(summary["runs"]),
        "forks": [{"line": f["line"], "fork": fork_by_id(log.store, bytes.fromhex(f["fork_id"]))} for f in summary["forks"]],
        **({"landed": list(summary["landed"]), "failed": list(summary["failed"])} if "landed" in summary else {}),
        **({"skipped": list(summary["skipped"])} if "skipped" in summary else {}),
    }


def binary_line(otype: str, size: int) -> str:
    """The one line ``cat``/``show`` print on a terminal instead of binary bytes."""
    return f"{otype} {size} bytes, binary (use --raw or a pipe to get the bytes)"
