"""Sessions, turns and the TaskStore (docs/JOURNAL.md, conditions 3 and 9).

A *session* is a run whose records are conversation ``turn``s. ``start_session`` does the
startup read: the Host selects the startup journal (the predecessor's, else the newest of
another session of the same subject, else none) and its frozen answer becomes a typed
``journal_startup`` event in the ``run_started`` body (LSN 0), so every branch inherits it and
a restore never reads it again.

Tasks are records ``task_opened {task, title}`` and ``task_closed {task, outcome}``; a
branch's open tasks are the fold of its lineage.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import HostUnavailable, InvalidInput
from ..runs import records as R
from ..storage import identity
from .snapshot import freeze, unavailable

if TYPE_CHECKING:
    from ..runs.api import RunLog
    from ..runs.chain import ChainReader, View
    from .host import JournalHost

STARTUP_EVENT = R.STARTUP_EVENT


def start_session(log: RunLog, subject: str | None = None, predecessor: str | None = None, *, run: str | None = None,
                  host: JournalHost | None = None, key: identity.Key | None = None, budget_bytes: int = 64 * 1024, **kw: Any) -> str:
    """Start a session of ``subject``. The Host selects the startup journal (the predecessor's, else
    the newest of another session of the subject, else none) and its frozen answer becomes a typed
    ``journal_startup`` event in the ``run_started`` body. Without a Host the event records
    ``unavailable (no_host)``."""
    if not subject:
        raise InvalidInput("a session has a subject")
    if predecessor is not None and predecessor not in log.runs():
        raise InvalidInput(f"predecessor session {predecessor} does not exist")
    answer: dict | bytes
    if host is None:
        answer = unavailable("no_host: no journal host configured", "startup", None)
    else:
        if key is None:
            raise InvalidInput("a startup read is a signed request: pass key=")
        req = identity.sign_request(key, "read", None, subject=subject,
                                    params={"purpose": "startup", "budget": budget_bytes, "predecessor": predecessor})
        try:
            answer = host.read(req)
        except HostUnavailable as e:
            answer = unavailable(f"read_failed: {e.reason}", "startup", None)
    snap = freeze(answer)
    event = {"type": STARTUP_EVENT, "answer": snap.answer_json.decode("utf-8"), "answer_sha256": snap.sha256,
             "rendered": snap.rendered}
    meta = {"session": True, "predecessor": predecessor, "startup": event}
    return log.start_run(run, subject=subject, meta=meta, **kw)


def startup_event(log: ChainReader, run: str) -> dict | None:
    """The session's typed startup event, recognised by its type only (never by body text)."""
    return R.startup_of(log.run_started(run).body)


def is_session(log: ChainReader, run: str) -> bool:
    """A session is a run its ``run_started`` marks as one (``meta.session``: ``start_session``
    and ingested session events set it); nothing else is compacted or has a journal context."""
    meta = log.run_started(run).body.get("meta")
    return isinstance(meta, dict) and meta.get("session") is True


def record_turn(log: RunLog, run: str, role: str, text: str, *, generation: dict | None = None) -> R.Record:
    """A conversation turn: source material, content stored as a blob."""
    return log.append(run, R.TURN, {"role": role, "content": log.put_blob(text.encode("utf-8")), "origin": R.ORIGIN_SOURCE, "generation": generation})


def source_material(log: ChainReader, run: str, view: View | None = None) -> list[R.Record]:
    """Source material of the live timeline: turn records only, classified by record type."""
    view = view or log.view(run)
    return [r for r in log.lineage(view, view.live) if r.kind == R.TURN]


def fold_tasks(recs: Iterable[R.Record], tasks: list | None = None) -> list[dict]:
    """Open tasks after folding task records (oldest first) onto ``tasks``: opened order kept."""
    out = {t["task"]: dict(t) for t in (tasks or [])}
    for r in recs:
        if R.DELETED_FIELD in r.body:
            continue  # a deleted task record is header-only: it opens or closes nothing
        if r.kind == R.TASK_OPENED:
            out.setdefault(r.body["task"], {"task": r.body["task"], "title": r.body["title"]})
        elif r.kind == R.TASK_CLOSED:
            out.pop(r.body["task"], None)
    return list(out.values())


def open_tasks(log: ChainReader, run: str, view: View | None = None) -> list[dict]:
    """The live branch's open tasks: the fold of its lineage."""
    view = view or log.view(run)
    return fold_tasks(log.iter_lineage(view, view.live))


def open_task(log: RunLog, run: str, task: str, title: str = "") -> R.Record:
    # decided and appended as one self-contained commit: on object storage (no writer lock) a commit another
    # process's append made stale is run again on the new head (Store.atomically), not raised as a Conflict
    def commit() -> R.Record:
        if any(t["task"] == task for t in open_tasks(log, run)):
            raise InvalidInput(f"task {task!r} is already open in run {run}")
        return log.append(run, R.TASK_OPENED, {"task": task, "title": title})

    return log.store.atomically(commit)


def close_task(log: RunLog, run: str, task: str, outcome: str = "done") -> R.Record:
    def commit() -> R.Record:  # as open_task
        if not any(t["task"] == task for t in open_tasks(log, run)):
            raise InvalidInput(f"task {task!r} is not open in run {run}")
        return log.append(run, R.TASK_CLOSED, {"task": task, "outcome": outcome})

    return log.store.atomically(commit)


