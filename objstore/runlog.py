"""Runs as chains: append, walk, fork/rewind, live branch, pinned views.

Refs of a run ``R``:

* ``run/R/branch/N`` → the head of branch N: its newest record, or its fork
  object while it has no record yet;
* ``run/R/live``     → ``ref: run/R/branch/N``, the live branch (like HEAD);
  absent means branch 0, so a crash between a start's two ref writes leaves a
  valid run.

Branch 0 starts with a ``run_started`` record whose parent is nil. A fork writes
a ``fork`` object — the root of the new branch's chain — naming the parent
branch, the parent LSN, the parent record at that LSN, the parent's head at fork
time, the reason and any compensation flags; the new branch's LSN 0 record names
the fork object as its parent. Nothing is copied or deleted: the parent's
records stay where they were, and the child's state before the fork is the fold
of the parent's chain walked back from ``parent_record``.

Every read goes through a ``View``: the ref values of one run at one instant.
``RunLog.view(run)`` takes a fresh one; ``RunLog.pin(run)`` is the same thing
under the name readers use for "hold this while writers go on" — since objects
are immutable, a view never changes under its reader, whatever writers do.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Iterator, NamedTuple

from . import codec
from . import records as R
from .errors import BranchNotFound, Conflict, InvalidInput, InvalidRecord, RetainedBranch, RunNotFound
from .fileutil import no_gc
from .fold import empty_state, fold
from .store import Store

_SYM = "ref: "
_new_record = tuple.__new__  # NamedTuple construction without the keyword machinery
Record = R.Record


def branch_ref(run: str, branch: int) -> str:
    return f"run/{run}/branch/{branch}"


def live_ref(run: str) -> str:
    return f"run/{run}/live"


class View(NamedTuple):
    """Ref values of one run at one instant."""

    run: str
    live: int
    heads: dict  # branch -> head id

    def head(self, branch: int) -> bytes:
        try:
            return self.heads[branch]
        except KeyError:
            raise BranchNotFound(branch, self.run) from None


class ForkResult(NamedTuple):
    branch: int
    fork_id: bytes
    parent_branch: int
    parent_lsn: int
    parent_record: bytes
    parent_head: bytes
    compensation: list  # [{intent, step, effect, committed_record}]

    @property
    def compensation_required(self) -> bool:
        return bool(self.compensation)

    def as_dict(self) -> dict:
        return {
            "branch": self.branch,
            "fork_id": self.fork_id.hex(),
            "parent_branch": self.parent_branch,
            "parent_lsn": self.parent_lsn,
            "parent_record": self.parent_record.hex(),
            "parent_head": self.parent_head.hex(),
            "compensation_required": self.compensation_required,
            "compensation": codec.to_jsonable(self.compensation),
        }


class RunLog:
    """The library API for recording and reading runs."""

    def __init__(self, store: Store, state=None):
        from .state import StateCache

        self.store = store
        self.state = state if state is not None else StateCache.for_store(store)
        self._next: dict[bytes, tuple[int, bool]] = {}  # head id -> (next lsn, finished)
        self._live_of: dict[str, int] = {}  # live ref value -> branch number
        self._subjects: dict[str, str] = {}  # run -> subject (never changes)

    # -- objects -------------------------------------------------------------
    def record(self, oid: bytes) -> R.Record:
        otype, value = self.store.get(oid)
        if otype != codec.RECORD:
            raise InvalidInput(f"object {oid.hex()} is a {otype}, not a record")
        return R.Record.from_payload(oid, value)

    def fork_object(self, view: View, branch: int) -> dict | None:
        """The fork object at the root of ``branch`` (None for branch 0), with its id."""
        return self.chain(view.head(branch), stop_at=None)[1]

    def walk(self, head: bytes, stop_at: bytes | None = None) -> Iterator[R.Record | dict]:
        """A branch's own records newest first, then its fork object (a dict) if it has one.

        Stops before ``stop_at`` (a cached head) when it is met.
        """
        get = self.store.get_decoded
        oid = head
        branch = None
        while oid is not None and oid != stop_at:
            otype, p = get(oid)
            if otype == codec.FORK:
                yield dict(p, id=oid)
                return
            if otype != codec.RECORD:
                raise InvalidInput(f"chain reaches {otype} object {oid.hex()}")
            if branch is None:
                branch = p["branch"]
            elif p["branch"] != branch:
                raise InvalidInput(f"chain of branch {branch} reaches record {oid.hex()} of branch {p['branch']}")
            parent = p["parent"]
            yield _new_record(Record, (oid, p["run"], branch, p["lsn"], parent, p["kind"], p.get("time"), p["body"]))
            oid = parent

    def chain(self, head: bytes, stop_at: bytes | None = None) -> tuple[list[R.Record], dict | None]:
        """(own records oldest first, fork object or None) of the branch whose head is ``head``."""
        recs = []
        fk = None
        try:
            with no_gc():
                for item in self.walk(head, stop_at):
                    if isinstance(item, dict):
                        fk = item
                    else:
                        recs.append(item)
        finally:
            self.store.forget_decoded()
        recs.reverse()
        return recs, fk

    def own_records(self, view: View, branch: int) -> list[R.Record]:
        """Records written on ``branch`` itself, oldest first (never the parent's)."""
        return self.chain(view.head(branch))[0]

    def groups_from(self, head: bytes, branch: int | None = None) -> list[tuple[int | None, list, dict | None]]:
        """The chain behind ``head`` cut at fork points, newest first: ``(branch, own records
        oldest first, fork object or None)``; each ancestor is walked back from the fork's parent record."""
        groups = []
        while head is not None:
            own, fk = self.chain(head)
            groups.append((branch, own, fk))
            if fk is None:
                break
            branch, head = fk["parent_branch"], fk["parent_record"]
        return groups

    def lineage_from(self, head: bytes) -> list[R.Record]:
        """Every record a chain head folds over, oldest first: ancestors up to each fork point, then its own."""
        out = []
        for _, own, _ in reversed(self.groups_from(head)):
            out.extend(own)
        return out

    def lineage(self, view: View, branch: int) -> list[R.Record]:
        return self.lineage_from(view.head(branch))

    def refold(self, view: View, branch: int) -> dict:
        """Cold re-fold of a branch from raw objects, ignoring the state cache."""
        with no_gc():
            return fold(self.lineage(view, branch))

    # -- refs and views ----------------------------------------------------------
    def runs(self) -> list[str]:
        out = []
        for name, _ in self.store.list_refs("run/"):
            parts = name.split("/")
            if len(parts) == 4 and parts[2:] == ["branch", "0"]:
                out.append(parts[1])
        return sorted(out)

    def view(self, run: str) -> View:
        R.check_run_id(run)
        prefix = f"run/{run}/"
        snap = None
        for _ in range(50):
            refs = dict(self.store.list_refs(prefix))
            again = dict(self.store.list_refs(prefix))
            if refs == again:
                snap = refs
                break
        if snap is None:
            raise Conflict(prefix + "*", "a stable snapshot", "refs still moving after 50 tries")
        if not isinstance(snap.get(prefix + "branch/0"), bytes):
            raise RunNotFound(run)
        # No live ref yet (a start interrupted between its two ref writes) means branch 0 is live.
        live = snap.get(prefix + "live", _SYM + branch_ref(run, 0))
        heads = {}
        for name, value in snap.items():
            rest = name[len(prefix):].split("/")
            if len(rest) == 2 and rest[0] == "branch" and rest[1].isdigit() and isinstance(value, bytes):
                heads[int(rest[1])] = value
        live_name = live[len(_SYM):] if isinstance(live, str) else ""
        try:
            live_branch = int(live_name.rsplit("/", 1)[1])
        except (IndexError, ValueError):
            raise InvalidInput(f"live ref of run {run} is malformed: {live!r}") from None
        return View(run, live_branch, heads)

    pin = view

    def branches(self, view: View) -> list[dict]:
        """Branch list with fork points read from the fork objects."""
        out = []
        for b in sorted(view.heads):
            fk = self.fork_object(view, b)
            out.append(
                {
                    "branch": b,
                    "head": view.heads[b],
                    "live": b == view.live,
                    "fork": fk,
                }
            )
        return out

    # -- writing ---------------------------------------------------------------
    def _next_of(self, head: bytes) -> tuple[int, bool]:
        hit = self._next.get(head)
        if hit is None:
            otype, p = self.store.get(head)
            if otype == codec.FORK:
                hit = (0, False)
            else:
                hit = (p["lsn"] + 1, p["kind"] == R.RUN_FINISHED)
            self._next[head] = hit
        return hit

    def start_run(self, run: str | None = None, *, subject: str = "default", workflow_version: str = "1", meta: dict | None = None, when: float | None = None) -> str:
        """Create a run (branch 0, live) with its ``run_started`` record; returns the run id."""
        if run is None:
            run = time.strftime("r%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        R.check_run_id(run)
        body = R.check_body(R.RUN_STARTED, {"subject": subject, "workflow_version": workflow_version, "meta": meta})
        payload = {"run": run, "branch": 0, "lsn": 0, "parent": None, "kind": R.RUN_STARTED, "time": _now(when), "body": body}
        oid = self.store.put(codec.RECORD, payload)
        try:
            self.store.set_ref(branch_ref(run, 0), None, oid, "start run")
        except Conflict:
            raise InvalidInput(f"run {run} already exists") from None
        self.store.set_ref(live_ref(run), None, _SYM + branch_ref(run, 0), "start run: branch 0 live")
        self._next[oid] = (1, False)
        return run

    def subject(self, run: str) -> str:
        """A run's subject (owner), from its ``run_started`` record; immutable, so remembered."""
        s = self._subjects.get(run)
        if s is None:
            s = self._subjects[run] = self.state.summary(self, self.view(run), 0)["subject"]
        return s

    def live_branch(self, run: str) -> int:
        return self.view(run).live

    def append(self, run: str, kind: str, body: dict, *, branch: int | None = None, allow_retained: bool = False, when: float | None = None) -> R.Record:
        """Append one record to the live branch (or ``branch``, if allowed); CAS on the branch ref."""
        if kind == R.RUN_STARTED:
            raise InvalidRecord("run_started is written by start_run only")
        body = R.check_body(kind, body)
        store = self.store
        live_name = store.read_ref(f"run/{run}/live")
        if live_name is None:
            R.check_run_id(run)
            if store.read_ref(f"run/{run}/branch/0") is None:
                raise RunNotFound(run)
            live_name = _SYM + branch_ref(run, 0)
        live = self._live_of.get(live_name)
        if live is None:
            live = self._live_of[live_name] = int(live_name.rsplit("/", 1)[1])
        if branch is None:
            branch = live
        elif branch != live and not allow_retained:
            raise RetainedBranch(branch, run, live)
        ref = f"run/{run}/branch/{branch}"
        head = store.read_ref(ref)
        if head is None:
            raise BranchNotFound(branch, run)
        lsn, finished = self._next.get(head) or self._next_of(head)
        if finished:
            raise InvalidRecord(f"branch {branch} of run {run} has finished; rewind or fork to continue")
        t = time.time() if when is None else float(when)
        oid = store.put(codec.RECORD, {"run": run, "branch": branch, "lsn": lsn, "parent": head, "kind": kind, "time": t, "body": body})
        store.set_ref(ref, head, oid, "append")
        nxt = self._next
        nxt.pop(head, None)  # only current heads are worth remembering
        nxt[oid] = (lsn + 1, kind == R.RUN_FINISHED)
        return _new_record(R.Record, (oid, run, branch, lsn, head, kind, t, body))

    def record_attempt(self, run: str, step: int, attempt: int, state: str, *, prompt: bytes | None = None, output: bytes | None = None,
                       context: dict | None = None, tools: dict | None = None, usage: dict | None = None, error: str | None = None,
                       workflow_version: str | None = None, branch: int | None = None, allow_retained: bool = False, when: float | None = None) -> R.Record:
        """Record one attempt of one step (failed ones too); prompt/output are blob ids from ``put_blob``."""
        body = {"step": step, "attempt": attempt, "state": state, "workflow_version": workflow_version, "context": context,
                "prompt": prompt, "output": output, "tools": tools, "usage": usage, "error": error}
        return self.append(run, R.ATTEMPT, body, branch=branch, allow_retained=allow_retained, when=when)

    def record_intent(self, run: str, intent: str, step: int, effect: str, idempotent: bool, **opts) -> R.Record:
        return self.append(run, R.INTENT, {"intent": intent, "step": step, "effect": effect, "idempotent": idempotent}, **opts)

    def commit_intent(self, run: str, intent: str, **opts) -> R.Record:
        return self.append(run, R.INTENT_COMMITTED, {"intent": intent}, **opts)

    def finish_run(self, run: str, status: str = "succeeded", error: str | None = None, **opts) -> R.Record:
        return self.append(run, R.RUN_FINISHED, {"status": status, "error": error}, **opts)

    def put_blob(self, data: bytes) -> bytes:
        return self.store.put_blob(data)

    def get_blob(self, oid: bytes) -> bytes:
        return self.store.get_blob(oid)

    # -- fork / rewind -------------------------------------------------------------
    def fork(self, run: str, from_branch: int, at_lsn: int, *, reason: str = "", make_live: bool = True, when: float | None = None) -> ForkResult:
        """Start a new branch whose history is ``from_branch`` up to ``at_lsn`` (inclusive).

        Nothing is copied or deleted. If records of ``from_branch`` after ``at_lsn``
        commit an intent whose effect is not idempotent, the fork object carries a
        compensation flag for each, and the fork still happens.
        """
        if not isinstance(at_lsn, int) or at_lsn < 0:
            raise InvalidInput(f"fork LSN must be a non-negative integer, got {at_lsn!r}")
        view = self.view(run)
        parent_head = view.head(from_branch)
        # The view's head bounds the fork, even if the shared cache is already further on.
        head_lsn = self._next_of(parent_head)[0] - 1
        if at_lsn > head_lsn:
            raise InvalidInput(f"branch {from_branch} of run {run} has LSNs 0..{head_lsn}; cannot fork at {at_lsn}")
        info = self.state.branch_index(self, view, from_branch)
        parent_record = info.record_at(at_lsn)
        compensation = info.compensation_after(at_lsn, head_lsn)
        new_branch = max(view.heads) + 1
        while True:
            payload = {
                "run": run,
                "branch": new_branch,
                "parent_branch": from_branch,
                "parent_lsn": at_lsn,
                "parent_record": parent_record,
                "parent_head": parent_head,
                "reason": reason,
                "compensation": compensation,
                "time": _now(when),
            }
            fork_id = self.store.put(codec.FORK, payload)
            try:
                self.store.set_ref(branch_ref(run, new_branch), None, fork_id, f"fork from {from_branch}@{at_lsn}: {reason}")
                break
            except Conflict:
                new_branch += 1  # a concurrent fork took this number
        self._next[fork_id] = (0, False)
        if make_live:
            self.set_live(run, new_branch, reason=f"fork {new_branch} live")
        return ForkResult(new_branch, fork_id, from_branch, at_lsn, parent_record, parent_head, compensation)

    def rewind(self, run: str, to_lsn: int, *, reason: str = "rewind", when: float | None = None) -> ForkResult:
        """Rewind the live branch to ``to_lsn``: a fork of the live branch that becomes live."""
        return self.fork(run, self.view(run).live, to_lsn, reason=reason, make_live=True, when=when)

    def set_live(self, run: str, branch: int, reason: str = "set live") -> None:
        view = self.view(run)
        view.head(branch)
        name = live_ref(run)
        old = self.store.read_ref(name)
        self.store.set_ref(name, old, _SYM + branch_ref(run, branch), reason)

    # -- queries (raw log; live by default) ----------------------------------------
    def history(self, view: View, branch: int | None = None, *, all_branches: bool = False) -> list[tuple[int, list, dict | None]]:
        """What ``objstore log`` shows, newest group first: ``(branch, own records oldest first, fork object)``.

        By default the live branch, then each ancestor up to its fork point (git log
        through merges, in one line); ``all_branches`` gives every branch's own records.
        """
        if all_branches:
            return [(b, *self.chain(view.head(b))) for b in sorted(view.heads, reverse=True)]
        b = view.live if branch is None else branch
        return self.groups_from(view.head(b), b)

    def records(self, run: str, branch: int | None = None, *, all_branches: bool = False, view: View | None = None) -> list[R.Record]:
        """Own records of the live branch (default), one branch, or all branches (by branch, LSN)."""
        view = view or self.view(run)
        if all_branches:
            out = []
            for b in sorted(view.heads):
                out.extend(self.own_records(view, b))
            return out
        return self.own_records(view, view.live if branch is None else branch)


def _now(when: float | None) -> float:
    return time.time() if when is None else float(when)
