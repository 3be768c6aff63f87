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

import secrets
import time
from typing import Iterator, NamedTuple

from . import codec
from . import records as R
from .errors import BranchNotFound, Conflict, InvalidInput, InvalidRecord, RetainedBranch, RunNotFound
from .fileutil import no_gc
from .fold import fold
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
        """The fork object at the root of ``branch`` (None for branch 0), with its id: the parent
        of the branch's LSN 0 record (from the chain index), or the head while it has no record."""
        head = view.head(branch)
        get = self.store.get_decoded
        otype, p = get(head)
        if otype == codec.FORK:
            return dict(p, id=head)
        first = self.store.indexed_record(view.run, branch, 0)
        if first is None or not self._is_ancestor(view.run, branch, 0, head):
            return self.chain(head)[1]  # not indexed (an open batch): walk
        parent = get(first)[1]["parent"]
        if parent is None:
            return None
        otype, p = get(parent)
        return dict(p, id=parent) if otype == codec.FORK else None

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

    def iter_own(self, view: View, branch: int, upto: int | None = None, *, start: int = 0) -> Iterator[R.Record]:
        """A branch's own records oldest first, LSNs ``start``..``upto`` (default: its head),
        streamed through the log's chain index: memory does not grow with the branch's length."""
        head = view.head(branch)
        head_lsn = self._next_of(head)[0] - 1
        last = head_lsn if upto is None else min(upto, head_lsn)
        if last < 0:
            return
        get = self.store.get_decoded
        expect = start
        if start > last:
            return
        if self.store.indexed_record(view.run, branch, last) is not None:
            for lsn, oid in self.store.engine.iter_chain(view.run, branch, start):
                if lsn > last:
                    break
                otype, p = get(oid)
                yield _new_record(Record, (oid, p["run"], branch, lsn, p["parent"], p["kind"], p.get("time"), p["body"]))
                expect = lsn + 1
            if expect > last:
                return
        # Not (all) indexed — records of an open batch: the chain walk has them.
        own = [r for r in self.chain(head)[0] if expect <= r.lsn <= last]
        yield from own

    def iter_lineage(self, view: View, branch: int, upto: int | None = None) -> Iterator[R.Record]:
        """Every record the branch folds over (up to its LSN ``upto``), oldest first, streamed:
        each ancestor up to its fork point (read from the fork objects), then its own records."""
        segs = []  # (branch, upto) from the branch back to the root
        b = branch
        while True:
            segs.append((b, upto))
            fk = self.fork_object(view, b) if b != 0 else None
            if fk is None:
                break
            b, upto = fk["parent_branch"], fk["parent_lsn"]
        for b, upto in reversed(segs):
            yield from self.iter_own(view, b, upto)

    def lineage(self, view: View, branch: int) -> list[R.Record]:
        return self.lineage_from(view.head(branch))

    def refold(self, view: View, branch: int) -> dict:
        """Cold re-fold of a branch from raw objects, ignoring the state cache."""
        with no_gc():
            try:
                return fold(self.iter_lineage(view, branch))
            finally:
                self.store.forget_decoded()

    # -- refs and views ----------------------------------------------------------
    def runs(self) -> list[str]:
        return self.store.run_names()

    def view(self, run: str) -> View:
        R.check_run_id(run)
        return self._view_of(run, self.store.run_refs(run))

    @staticmethod
    def _view_of(run: str, snap: dict) -> View:
        prefix = f"run/{run}/"
        if not isinstance(snap.get(prefix + "branch/0"), bytes):
            raise RunNotFound(run)
        # No live ref (format-1 stores could lose it in a crash) means branch 0 is live.
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
        if live_branch not in heads:
            raise InvalidInput(f"live ref of run {run} names branch {live_branch}, which does not exist")
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
        """Create a run (branch 0, live) with its ``run_started`` record; returns the run id.

        One commit: the record, the branch ref and the live ref land together or not at all."""
        if run is None:
            run = new_run_id()
        R.check_run_id(run)
        body = R.check_body(R.RUN_STARTED, {"subject": subject, "workflow_version": workflow_version, "meta": meta})
        payload = {"run": run, "branch": 0, "lsn": 0, "parent": None, "kind": R.RUN_STARTED, "time": _now(when), "body": body}
        store = self.store
        with store.batch():
            if store.read_ref(branch_ref(run, 0)) is not None or store.read_ref(live_ref(run)) is not None:
                raise InvalidInput(f"run {run} already exists")
            oid = store.put(codec.RECORD, payload)
            store.set_ref(branch_ref(run, 0), None, oid, "start run")
            store.set_ref(live_ref(run), None, _SYM + branch_ref(run, 0), "start run: branch 0 live")
        self._next[oid] = (1, False)
        self._subjects[run] = body["subject"]
        return run

    def run_started(self, run: str) -> R.Record:
        """A run's ``run_started`` record (branch 0, LSN 0), from the log's chain index."""
        rec = self.record(self.record_at(self.view(run), 0, 0))
        if rec.kind != R.RUN_STARTED:
            raise InvalidInput(f"run {run} does not start with run_started")
        return rec

    def subject(self, run: str) -> str:
        """A run's subject (owner), from its ``run_started`` record; immutable, so remembered."""
        s = self._subjects.get(run)
        if s is None:
            s = self._subjects[run] = self.run_started(run).body["subject"]
        return s

    def live_branch(self, run: str) -> int:
        return self.view(run).live

    def append(self, run: str, kind: str, body: dict, *, branch: int | None = None, allow_retained: bool = False, when: float | None = None,
               expect_head: bytes | None = None, expect_branch: int | None = None) -> R.Record:
        """Append one record, built on the branch's head under the writer lock.

        Plain (no expectations): it goes to the branch live when the lock is taken and never
        conflicts. ``expect_branch``: the live branch must be that one; ``expect_head``: the
        branch's head must be that id; otherwise ``Conflict`` and nothing is written."""
        if kind == R.RUN_STARTED:
            raise InvalidRecord("run_started is written by start_run only")
        body = R.check_body(kind, body)
        if expect_head is not None and (type(expect_head) is not bytes or len(expect_head) != 32):
            raise InvalidInput("expect_head must be a 32-byte record id")
        if expect_branch is not None and (type(expect_branch) is not int or expect_branch < 0):
            raise InvalidInput(f"expect_branch must be a branch number, got {expect_branch!r}")
        store = self.store
        t = time.time() if when is None else float(when)
        txn = store.current_batch()
        if txn is None:
            with store.batch() as txn:
                oid, branch, lsn, head = self._append_in(txn, run, kind, body, t, branch, allow_retained, expect_head, expect_branch)
        else:
            oid, branch, lsn, head = self._append_in(txn, run, kind, body, t, branch, allow_retained, expect_head, expect_branch)
        nxt = self._next
        nxt.pop(head, None)  # only current heads are worth remembering
        nxt[oid] = (lsn + 1, kind == R.RUN_FINISHED)
        return _new_record(R.Record, (oid, run, branch, lsn, head, kind, t, body))

    def _append_in(self, txn, run, kind, body, t, branch, allow_retained, expect_head, expect_branch):
        """The body of ``append``, under the writer lock (the names it builds are valid ref names:
        an existing run's id passed check_run_id when it started)."""
        live_name = txn.read_ref(f"run/{run}/live")
        if live_name is None:
            R.check_run_id(run)
            if txn.read_ref(f"run/{run}/branch/0") is None:
                raise RunNotFound(run)
            live_name = _SYM + branch_ref(run, 0)
        live = self._live_of.get(live_name)
        if live is None:
            live = self._live_of[live_name] = int(live_name.rsplit("/", 1)[1])
        if expect_branch is not None and expect_branch != live:
            raise Conflict(live_ref(run), _SYM + branch_ref(run, expect_branch), live_name)
        if branch is None:
            branch = live
        elif branch != live and not allow_retained:
            raise RetainedBranch(branch, run, live)
        ref = f"run/{run}/branch/{branch}"
        head = txn.read_ref(ref)
        if head is None:
            raise BranchNotFound(branch, run)
        if expect_head is not None and expect_head != head:
            raise Conflict(ref, expect_head.hex(), head.hex() if isinstance(head, bytes) else str(head))
        lsn, finished = self._next.get(head) or self._next_of(head)
        if finished:
            raise InvalidRecord(f"branch {branch} of run {run} has finished; rewind or fork to continue")
        oid = self.store.put_in(txn, codec.RECORD, {"run": run, "branch": branch, "lsn": lsn, "parent": head, "kind": kind, "time": t, "body": body})
        txn.set_ref(ref, head, oid, "append")
        return oid, branch, lsn, head

    def record_attempt(self, run: str, step: int, attempt: int, state: str, *, prompt: bytes | None = None, output: bytes | None = None,
                       context: dict | None = None, tools: dict | None = None, usage: dict | None = None, error: str | None = None,
                       workflow_version: str | None = None, branch: int | None = None, allow_retained: bool = False, when: float | None = None,
                       expect_head: bytes | None = None, expect_branch: int | None = None) -> R.Record:
        """Record one attempt of one step (failed ones too); prompt/output are blob ids from ``put_blob``."""
        body = {"step": step, "attempt": attempt, "state": state, "workflow_version": workflow_version, "context": context,
                "prompt": prompt, "output": output, "tools": tools, "usage": usage, "error": error}
        return self.append(run, R.ATTEMPT, body, branch=branch, allow_retained=allow_retained, when=when,
                           expect_head=expect_head, expect_branch=expect_branch)

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
    def record_at(self, view: View, branch: int, lsn: int) -> bytes:
        """The id of ``branch``'s own record at ``lsn``, from the log's chain index (O(1)).

        Records of the open batch are not indexed yet: those few are found by walking back."""
        head = view.head(branch)
        oid = self.store.indexed_record(view.run, branch, lsn)
        if oid is not None and self._is_ancestor(view.run, branch, lsn, head):
            return oid
        for item in self.walk(head):
            if isinstance(item, dict) or item.lsn < lsn:
                break
            if item.lsn == lsn:
                self.store.forget_decoded()
                return item.id
        self.store.forget_decoded()
        raise InvalidInput(f"branch {branch} of run {view.run} has no record at LSN {lsn}")

    def _is_ancestor(self, run: str, branch: int, lsn: int, head: bytes) -> bool:
        """Whether the index's record at ``lsn`` is on the chain behind ``head``: true when the
        index also holds ``head`` at the head's LSN (it keeps a branch's chain in LSN order)."""
        head_lsn = self._next_of(head)[0] - 1
        return head_lsn >= lsn and self.store.indexed_record(run, branch, head_lsn) == head

    def compensation(self, view: View, branch: int, after_lsn: int, upto_lsn: int) -> list[dict]:
        """Non-idempotent intents committed by ``branch``'s own records in (after_lsn, upto_lsn]:
        a pure function of the records (``records.compensation_for``), never of a cache."""
        facts = self.store.intent_records(view.run) + self.store.pending_intent_records(view.run)
        forks = {}
        for b in view.heads:
            fk = self.fork_object(view, b) if b != 0 else None
            if fk is not None:
                forks[b] = (fk["parent_branch"], fk["parent_lsn"])
        return R.compensation_for(facts, forks, branch, after_lsn, upto_lsn)

    def fork(self, run: str, from_branch: int, at_lsn: int, *, reason: str = "", make_live: bool = True, when: float | None = None,
             expect_live: int | None = None) -> ForkResult:
        """Start a new branch whose history is ``from_branch`` up to ``at_lsn`` (inclusive).

        One commit under the writer lock: the fork object, the new branch ref and (with
        ``make_live``) the live move land together. Nothing is copied or deleted. If records of
        ``from_branch`` after ``at_lsn`` commit an intent whose effect is not idempotent, the fork
        object carries a compensation flag for each, and the fork still happens.
        ``expect_live``: ``Conflict`` and nothing created unless that branch is live."""
        if type(at_lsn) is not int or at_lsn < 0:
            raise InvalidInput(f"fork LSN must be a non-negative integer, got {at_lsn!r}")
        if type(from_branch) is not int or from_branch < 0:
            raise InvalidInput(f"branch must be a non-negative integer, got {from_branch!r}")
        store = self.store
        with store.batch():
            view = self.view(run)
            if expect_live is not None and view.live != expect_live:
                raise Conflict(live_ref(run), _SYM + branch_ref(run, expect_live), _SYM + branch_ref(run, view.live))
            parent_head = view.head(from_branch)
            head_lsn = self._next_of(parent_head)[0] - 1
            if at_lsn > head_lsn:
                raise InvalidInput(f"branch {from_branch} of run {run} has LSNs 0..{head_lsn}; cannot fork at {at_lsn}")
            parent_record = self.record_at(view, from_branch, at_lsn)
            compensation = self.compensation(view, from_branch, at_lsn, head_lsn)
            new_branch = max(view.heads) + 1
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
            fork_id = store.put(codec.FORK, payload)
            store.set_ref(branch_ref(run, new_branch), None, fork_id, f"fork from {from_branch}@{at_lsn}: {reason}")
            if make_live:
                store.set_ref(live_ref(run), store.read_ref(live_ref(run)), _SYM + branch_ref(run, new_branch), f"fork {new_branch} live")
        self._next[fork_id] = (0, False)
        return ForkResult(new_branch, fork_id, from_branch, at_lsn, parent_record, parent_head, compensation)

    def rewind(self, run: str, to_lsn: int, *, reason: str = "rewind", when: float | None = None, expect_live: int | None = None) -> ForkResult:
        """Rewind the live branch to ``to_lsn``: a fork of the branch live under the writer lock,
        which becomes live (``expect_live``: only if that branch is the live one)."""
        with self.store.batch():
            live = self.view(run).live
            return self.fork(run, live, to_lsn, reason=reason, make_live=True, when=when, expect_live=expect_live)

    def set_live(self, run: str, branch: int, reason: str = "set live") -> None:
        with self.store.batch():
            view = self.view(run)
            view.head(branch)
            name = live_ref(run)
            self.store.set_ref(name, self.store.read_ref(name), _SYM + branch_ref(run, branch), reason)

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

    def log_entries(self, view: View, branch: int | None = None, *, all_branches: bool = False) -> Iterator[tuple[int, R.Record | None, dict | None]]:
        """``objstore log``'s entries, newest first, lazily: ``(branch, record, None)`` or
        ``(branch, None, fork object)``. Reads only as far back as the caller consumes, so
        ``log -n 10`` costs the same in a store of any size."""
        if all_branches:
            for b in sorted(view.heads, reverse=True):
                for item in self.walk(view.head(b)):
                    yield (b, None, item) if isinstance(item, dict) else (b, item, None)
            return
        b = view.live if branch is None else branch
        head = view.head(b)
        while head is not None:
            fk = None
            for item in self.walk(head):
                if isinstance(item, dict):
                    fk = item
                    yield b, None, item
                else:
                    yield b, item, None
            if fk is None:
                return
            b, head = fk["parent_branch"], fk["parent_record"]

    def records(self, run: str, branch: int | None = None, *, all_branches: bool = False, view: View | None = None) -> list[R.Record]:
        """Own records of the live branch (default), one branch, or all branches (by branch, LSN)."""
        view = view or self.view(run)
        if all_branches:
            out = []
            for b in sorted(view.heads):
                out.extend(self.own_records(view, b))
            return out
        return self.own_records(view, view.live if branch is None else branch)


def new_run_id() -> str:
    """Unique and time-sortable: UTC time to the millisecond, then 48 random bits."""
    ms = int(time.time() * 1000)
    return time.strftime("r%Y%m%d-%H%M%S", time.gmtime(ms / 1000)) + f"{ms % 1000:03d}-" + secrets.token_hex(6)


def _now(when: float | None) -> float:
    return time.time() if when is None else float(when)
