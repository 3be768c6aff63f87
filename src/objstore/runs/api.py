"""Writing runs: start, append, record attempts and intents, fork, rewind, set the live branch.

``RunLog`` is the library API for recording and reading runs: it is a ``ChainReader``
(``chain.py``, every read) that also writes, each write one commit under the store's writer
lock. The ref names come from ``runrefs``; the record shapes from ``records``.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from ..errors import BranchNotFound, Conflict, InvalidInput, InvalidRecord, MalformedObject, RetainedBranch, RunNotFound
from ..storage import codec
from ..storage.log.txn import Txn
from ..storage.runrefs import branch_of, branch_ref, live_ref, parse_symref_value, symref
from ..storage.store import Store
from ..storage.storedir import LABELS_VERSION
from . import kinds as K
from . import labels as L
from . import records as R
from .chain import ChainReader, Record, View, _new_record
from .listing import iter_records
from .resolve import check_new_run_id
from .state import StateCache

__all__ = ["RunLog", "ForkResult", "View", "Record", "new_run_id", "branch_ref", "live_ref"]

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


class RunLog(ChainReader):
    """The library API for recording and reading runs."""

    def __init__(self, store: Store, state: StateCache | None = None) -> None:
        super().__init__(store)
        self.state = state if state is not None else StateCache.for_store(store)
        self._live_of: dict[str, int] = {}  # live ref value -> branch number

    def start_run(self, run: str | None = None, *, subject: str = "default", workflow_version: str = "1", meta: dict | None = None,
                  when: float | None = None, labels: dict[str, str] | None = None) -> str:
        """Create a run (branch 0, live) with its ``run_started`` record; returns the run id.

        One commit: the record, the branch ref and the live ref land together or not at all.
        ``labels``: the run's outside names (runs.labels), which determine its id (``run`` must
        then be None); if that run exists, ``Conflict`` and nothing is written."""
        run, labels = _asked_run(run, labels)
        body = R.check_body(R.RUN_STARTED, {"subject": subject, "workflow_version": workflow_version, "meta": meta})
        t = _now(when)
        def commit() -> tuple[str, bytes]:
            new = self._claim_run(run, labels, new_format=labels is not None)
            return new, self._put_start(new, labels, None, body, t, "start run", "start run: branch 0 live")

        run, oid = self.store.atomically(commit)
        return self._started(run, oid, body)

    def _claim_run(self, run: str | None, labels: dict[str, str] | None, new_format: bool) -> str:
        """Under the writer lock: the new run's id (a labelled run's: the first generation of its
        labels that is not a deleted run), ``Conflict`` if a labelled run exists, InvalidInput if
        another does; the store's marker raised to 5 when the run needs it, after every check."""
        store = self.store
        if labels is not None:
            run, exists = L.generations(store, labels)
            if exists:
                raise Conflict(branch_ref(run, 0), "absent (a new run for these labels)", "the run exists")
        assert run is not None
        if store.read_ref(branch_ref(run, 0)) is not None or store.read_ref(live_ref(run)) is not None:
            if labels is not None:  # created since the look-up above (a log per run: a run with no log yet is read
                # lock-free, and another writer may create it before this batch binds its log): as if seen there
                raise Conflict(branch_ref(run, 0), "absent (a new run for these labels)", "the run exists")
            raise InvalidInput(f"run {run} already exists")
        if new_format:
            store.require_version(LABELS_VERSION)
        return run

    def _put_start(self, run: str, labels: dict[str, str] | None, parent: bytes | None, body: dict, t: float, why: str,
                   live_why: str) -> bytes:
        """The run's ``run_started`` record (``parent``: a copy's cross-run fork object) and its branch
        0 and live refs, into the open batch; the record's id."""
        store = self.store
        payload = {"run": run, "branch": 0, "lsn": 0, "parent": parent, "kind": R.RUN_STARTED, "time": t, "body": body}
        if labels is not None:
            payload["labels"] = labels
        oid = store.put(codec.RECORD, payload)
        store.set_ref(branch_ref(run, 0), None, oid, why)
        store.set_ref(live_ref(run), None, symref(branch_ref(run, 0)), live_why)
        return oid

    def _started(self, run: str, oid: bytes, body: dict) -> str:
        """Remember a run its commit made (only once it is committed)."""
        self._next[oid] = (1, False)
        self._subjects[run] = body["subject"]
        return run

    def live_branch(self, run: str) -> int:
        return self.view(run).live

    def append(self, run: str, kind: str, body: dict, *, branch: int | None = None, allow_retained: bool = False, when: float | None = None,
               expect_head: bytes | None = None, expect_branch: int | None = None, labels: dict[str, str] | None = None) -> R.Record:
        """Append one record, built on the branch's head under the writer lock.

        Plain (no expectations): it goes to the branch live when the lock is taken and never
        conflicts. ``expect_branch``: the live branch must be that one; ``expect_head``: the
        branch's head must be that id; otherwise ``Conflict`` and nothing is written. ``labels``:
        the record's outside names (a checkpoint id), found again by ``find_records``."""
        if kind == R.RUN_STARTED:
            raise InvalidRecord("run_started is written by start_run only")
        extra: dict | None = None
        if K.is_ext(kind):
            fields, extra = self._ext_fields(kind)
            _check_ext(kind, fields, body)
        else:
            body = R.check_body(kind, body)
        expect_head, expect_branch = _expectations(expect_head, expect_branch)
        t = _now(when)
        if labels is not None:
            extra = dict(extra or (), labels=L.check_labels(labels))
        got = self._commit_appends(run, kind, [body], t, branch, allow_retained, expect_head, expect_branch, extra)
        return got[0]

    def append_many(self, run: str, kind: str, bodies: list[dict], *, branch: int | None = None, allow_retained: bool = False,
                    when: float | None = None, expect_head: bytes | None = None, expect_branch: int | None = None) -> list[R.Record]:
        """Append records of one kind, one after another on one branch, as one commit (or into the open batch):
        what ``append`` of each in turn inside a batch writes, the same records with one time, for less CPU per
        record (the bodies checked by one msgspec call, the branch ref moved once). ``expect_head`` /
        ``expect_branch`` are checked against the branch as the first record finds it. Nothing is written if any
        body is refused. Returns the records, oldest first ([] for no bodies: nothing is written)."""
        if kind == R.RUN_STARTED:
            raise InvalidRecord("run_started is written by start_run only")
        if not isinstance(bodies, list):
            bodies = list(bodies)
        if kind == R.RUN_FINISHED and len(bodies) > 1:
            raise InvalidRecord("run_finished ends its branch: one per branch")
        extra: dict | None = None
        if K.is_ext(kind):
            fields, extra = self._ext_fields(kind)
            for b in bodies:
                _check_ext(kind, fields, b)
        else:
            bodies = R.check_bodies(kind, bodies)
        expect_head, expect_branch = _expectations(expect_head, expect_branch)
        t = _now(when)
        if not bodies:
            return []
        return self._commit_appends(run, kind, bodies, t, branch, allow_retained, expect_head, expect_branch, extra)

    def _ext_fields(self, kind: str) -> tuple[list, dict]:
        sid, fields = self.schema_of(kind)
        return fields, {"schema": sid}

    def _commit_appends(self, run: str, kind: str, bodies: list[dict], t: float, branch: int | None, allow_retained: bool,
                        expect_head: bytes | None, expect_branch: int | None, extra: dict | None) -> list[R.Record]:
        """Append checked ``bodies`` as one commit (joining the open batch), remember the new head, return the records."""
        store = self.store
        txn = store.current_batch()
        if txn is None:
            def commit() -> tuple[list, int, bytes]:
                cur = store.current_batch()
                assert cur is not None
                return self._append_in(cur, run, kind, bodies, t, branch, allow_retained, expect_head, expect_branch, extra)

            made, branch, head = store.atomically(commit)
        else:
            made, branch, head = self._append_in(txn, run, kind, bodies, t, branch, allow_retained, expect_head, expect_branch, extra)
        nxt = self._next
        nxt.pop(head, None)  # only current heads are worth remembering
        oid, lsn = made[-1][0], made[-1][1]
        nxt[oid] = (lsn + 1, kind == R.RUN_FINISHED)
        return [_new_record(R.Record, (o, run, branch, l, p, kind, t, b)) for (o, l, p), b in zip(made, bodies, strict=True)]

    def _append_in(self, txn: Txn, run: str, kind: str, bodies: list[dict[str, Any]], t: float, branch: int | None, allow_retained: bool,
                   expect_head: bytes | None, expect_branch: int | None, extra: dict | None = None) -> tuple[list, int, bytes]:
        """The body of ``append`` and ``append_many``, under the writer lock (the names it builds are valid ref
        names: an existing run's id passed check_run_id when it started): ([(id, lsn, parent)] of the records,
        their branch, the branch's head before them)."""
        live_name = txn.read_ref(live_ref(run))
        if live_name is None:
            R.check_run_id(run)
            if txn.read_ref(branch_ref(run, 0)) is None:
                raise RunNotFound(run)
            live_name = symref(branch_ref(run, 0))
        if not isinstance(live_name, str):  # an id where a symbolic ref belongs: what view() calls malformed
            raise InvalidInput(f"live ref of run {run} is malformed: {live_name!r}")
        live = self._live_of.get(live_name)
        if live is None:
            target = parse_symref_value(live_name)
            live = branch_of(run, target) if target is not None else None
            if live is None:
                raise InvalidInput(f"live ref of run {run} is malformed: {live_name!r}")
            self._live_of[live_name] = live
        if expect_branch is not None and expect_branch != live:
            raise Conflict(live_ref(run), symref(branch_ref(run, expect_branch)), live_name)
        if branch is None:
            branch = live
        elif branch != live and not allow_retained:
            raise RetainedBranch(branch, run, live)
        ref = branch_ref(run, branch)
        head = txn.read_ref(ref)
        if not isinstance(head, bytes):  # absent, or not an id (view() ignores such a branch ref too)
            raise BranchNotFound(branch, run)
        if expect_head is not None and expect_head != head:
            raise Conflict(ref, expect_head.hex(), head.hex() if isinstance(head, bytes) else str(head))
        lsn, finished = self._next.get(head) or self.next_of(head)
        if finished:
            raise InvalidRecord(f"branch {branch} of run {run} has finished; rewind or fork to continue")
        if extra:
            self.store.require_version(LABELS_VERSION)  # under the writer lock, after every check: nothing refused moves it
        put_in = self.store.put_in
        made = []
        parent = head
        row = _attempt_row() if kind == R.ATTEMPT and not extra else None  # the index row, from what we hold
        for body in bodies:
            payload = {"run": run, "branch": branch, "lsn": lsn, "parent": parent, "kind": kind, "time": t, "body": body}
            if extra:
                payload.update(extra)
            oid = put_in(txn, codec.RECORD, payload, row(run, branch, lsn, parent, body) if row is not None else None)
            made.append((oid, lsn, parent))
            parent, lsn = oid, lsn + 1
        txn.set_ref(ref, head, parent, "append")
        return made, branch, head

    def record_attempt(self, run: str, step: int, attempt: int, state: str, *, prompt: bytes | None = None, output: bytes | None = None,
                       context: dict | None = None, tools: dict | None = None, usage: dict | None = None, error: str | None = None,
                       workflow_version: str | None = None, branch: int | None = None, allow_retained: bool = False, when: float | None = None,
                       expect_head: bytes | None = None, expect_branch: int | None = None) -> R.Record:
        """Record one attempt of one step (failed ones too); prompt/output are blob ids from ``put_blob``."""
        body = {"step": step, "attempt": attempt, "state": state, "workflow_version": workflow_version, "context": context,
                "prompt": prompt, "output": output, "tools": tools, "usage": usage, "error": error}
        return self.append(run, R.ATTEMPT, body, branch=branch, allow_retained=allow_retained, when=when,
                           expect_head=expect_head, expect_branch=expect_branch)

    def record_attempts(self, run: str, attempts: list[dict], **opts: Any) -> list[R.Record]:
        """Record many attempts as one commit (``append_many``): each a dict of ``record_attempt``'s body fields
        (``step``, ``attempt``, ``state``, and any of ``prompt``, ``output``, ``context``, ``tools``, ``usage``,
        ``error``, ``workflow_version``); ``opts`` as for ``append_many``."""
        bodies = [{**_ATTEMPT_BLANK, **a} if type(a) is dict else a for a in attempts]
        return self.append_many(run, R.ATTEMPT, bodies, **opts)

    def record_intent(self, run: str, intent: str, step: int, effect: str, idempotent: bool, **opts: Any) -> R.Record:
        return self.append(run, R.INTENT, {"intent": intent, "step": step, "effect": effect, "idempotent": idempotent}, **opts)

    def commit_intent(self, run: str, intent: str, **opts: Any) -> R.Record:
        return self.append(run, R.INTENT_COMMITTED, {"intent": intent}, **opts)

    def finish_run(self, run: str, status: str = "succeeded", error: str | None = None, **opts: Any) -> R.Record:
        return self.append(run, R.RUN_FINISHED, {"status": status, "error": error}, **opts)

    # -- record kinds the core does not know (runs.kinds) ------------------------------------
    def register_kind(self, kind: str, fields: list, *, when: float | None = None) -> bytes:
        """Declare (or re-declare) the record kind ``x.<integration>.<name>``: one commit of a
        ``schema`` object behind ``schema/<kind>`` (inside a batch, joined to it on a store of one log, a commit of
        the store log of its own on a store of a log per run: ``Store.store_log_commit``). The same field list again writes nothing and
        returns the current schema's id; a different one is a new version naming its predecessor."""
        K.check_kind(kind)
        fields = K.check_fields(fields)
        t = _now(when)
        store = self.store
        def commit() -> bytes:
            name = K.schema_ref(kind)
            cur = store.read_ref(name)
            if isinstance(cur, bytes) and self._schema(cur)[1] == fields:
                return cur
            store.require_version(LABELS_VERSION)
            sid = store.put(codec.SCHEMA, {"kind": kind, "fields": fields, "previous": cur, "time": t})
            store.set_ref(name, cur, sid, f"declare {kind}")
            return sid

        return store.store_log_commit(commit)

    def schema_of(self, kind: str) -> tuple[bytes, list]:
        """(id, fields) of the current schema of an x. kind; InvalidRecord if it was never declared."""
        sid = self.store.read_ref(K.schema_ref(kind)) if K.KIND.match(kind) else None
        if not isinstance(sid, bytes):
            raise InvalidRecord(f"kind {kind!r} is not declared in this store (register_kind first)")
        got = self._schema(sid)
        if got[0] != kind:
            raise InvalidRecord(f"schema/{kind} names a schema of {got[0]}; run 'objstore verify'")
        return sid, got[1]

    def _schema(self, sid: bytes) -> tuple[str, list]:
        got = self.schema_fields(sid)
        if isinstance(got, str):
            raise MalformedObject(sid.hex(), got)
        return got

    def batch(self, timeout: float | None = None) -> AbstractContextManager[Txn]:
        """One commit for everything written inside (``with log.batch(): ...``): one entry, one
        fdatasync, all or nothing; holds the store's writer lock throughout (other writers wait up
        to their own timeout). Nested batches join the outer one."""
        return self.store.batch(timeout)

    def put_blob(self, data: bytes) -> codec.Id:
        """Store a blob once (deduplicated by content); its id, which prints as its hex (``codec.Id``)."""
        return codec.Id(self.store.put_blob(data))

    def get_blob(self, oid: bytes) -> bytes:
        return self.store.get_blob(oid)

    def fork(self, run: str, from_branch: int | None, at_lsn: int | None = None, *, reason: str = "", make_live: bool = True,
             when: float | None = None, expect_live: int | None = None, at_record: bytes | None = None) -> ForkResult:
        """Start a new branch whose history is ``from_branch`` up to ``at_lsn`` (inclusive), or up to
        the record ``at_record`` (then ``from_branch`` is None or that record's own branch).

        One commit under the writer lock: the fork object, the new branch ref and (with
        ``make_live``) the live move land together. Nothing is copied or deleted. If records of
        ``from_branch`` after ``at_lsn`` commit an intent whose effect is not idempotent, the fork
        object carries a compensation flag for each, and the fork still happens.
        ``expect_live``: ``Conflict`` and nothing created unless that branch is live."""
        if at_record is not None:
            if at_lsn is not None:
                raise InvalidInput("fork at an LSN or at a record, not both")
            rec = self._record_of(run, at_record)
            if from_branch is not None and from_branch != rec.branch:
                raise InvalidInput(f"record {at_record.hex()} is on branch {rec.branch} of run {run}, not branch {from_branch}")
            from_branch, at_lsn = rec.branch, rec.lsn
        if type(at_lsn) is not int or at_lsn < 0:
            raise InvalidInput(f"fork LSN must be a non-negative integer, got {at_lsn!r}")
        if type(from_branch) is not int or from_branch < 0:
            raise InvalidInput(f"branch must be a non-negative integer, got {from_branch!r}")
        if not isinstance(reason, str):
            raise InvalidInput(f"a fork reason is text, got {type(reason).__name__}")
        codec.check_text(reason, "fork reason")
        t = _now(when)  # checked before the lock is taken: a bad time writes nothing
        store = self.store

        def commit() -> tuple:
            view = self.view(run)
            if expect_live is not None and view.live != expect_live:
                raise Conflict(live_ref(run), symref(branch_ref(run, expect_live)), symref(branch_ref(run, view.live)))
            parent_head = view.head(from_branch)
            head_lsn = self.next_of(parent_head)[0] - 1
            if at_lsn > head_lsn:
                if head_lsn < 0:
                    raise InvalidInput(f"branch {from_branch} of run {run} has no records yet; there is nothing to fork at LSN {at_lsn}")
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
                "time": t,
            }
            fork_id = store.put(codec.FORK, payload)
            store.set_ref(branch_ref(run, new_branch), None, fork_id, f"fork from {from_branch}@{at_lsn}: {reason}")
            if make_live:
                store.set_ref(live_ref(run), store.read_ref(live_ref(run)), symref(branch_ref(run, new_branch)), f"fork {new_branch} live")
            return new_branch, fork_id, parent_record, parent_head, compensation

        new_branch, fork_id, parent_record, parent_head, compensation = store.atomically(commit)
        self._next[fork_id] = (0, False)
        return ForkResult(new_branch, fork_id, from_branch, at_lsn, parent_record, parent_head, compensation)

    def iter_records(self, run: str, **options: Any) -> Iterator[R.Record]:
        """A run's records newest first, lazily (``runs.listing.iter_records``: ``branch``,
        ``all_branches``, ``kinds``, ``before``, ``limit``, ``labels``, ``deleted``)."""
        return iter_records(self, run, **options)

    def _record_of(self, run: str, oid: object) -> R.Record:
        if type(oid) is not bytes or len(oid) != 32:
            if not (isinstance(oid, bytes) and len(oid) == 32):
                raise InvalidInput("a record id is 32 bytes")
            oid = bytes(oid)  # an Id: the plain bytes it is
        rec = self.record(oid)
        if rec.run != run:
            raise InvalidInput(f"record {oid.hex()} is of run {rec.run}, not {run}")
        if self.store.indexed_record(run, rec.branch, rec.lsn) != oid:
            raise InvalidInput(f"record {oid.hex()} is not on the chain of run {run} branch {rec.branch}")
        return rec

    def fork_run(self, source: str, *, record: bytes | None = None, labels: dict[str, str] | None = None, run: str | None = None,
                 reason: str = "copy", subject: str | None = None, meta: dict | None = None, when: float | None = None) -> str:
        """A new run whose history is ``source`` up to ``record`` (default: the source's live head):
        one commit of a cross-run fork object (``parent_run``, branch, LSN, record, head) and the new
        run's ``run_started`` naming it as parent. Nothing is copied: walks, folds and the state
        of the new run go on into the source at the fork point. ``labels`` / ``run`` as for
        ``start_run`` (the new run must not exist: ``Conflict`` for labels). Returns the new run's id."""
        if not isinstance(reason, str):
            raise InvalidInput(f"a fork reason is text, got {type(reason).__name__}")
        codec.check_text(reason, "fork reason")
        run, labels = _asked_run(run, labels)
        t = _now(when)
        store = self.store

        def commit(record: bytes | None = record) -> tuple[str, bytes, dict]:
            view = self.view(source)
            if record is None:
                branch = view.live
                head = view.head(branch)
                lsn = self.next_of(head)[0] - 1
                if lsn < 0:
                    raise InvalidInput(f"branch {branch} of run {source} has no records yet; there is nothing to copy")
                record = self.record_at(view, branch, lsn)
            else:
                rec = self._record_of(source, record)
                branch, lsn = rec.branch, rec.lsn
                head = view.head(branch)
            started = self.run_started(source).body
            new = self._claim_run(run, labels, new_format=True)
            body = R.check_body(R.RUN_STARTED, {"subject": subject if subject is not None else started["subject"],
                                                "workflow_version": started["workflow_version"],
                                                "meta": meta if meta is not None else started.get("meta")})
            fork_id = store.put(codec.FORK, {"run": new, "branch": 0, "parent_run": source, "parent_branch": branch, "parent_lsn": lsn,
                                             "parent_record": record, "parent_head": head, "reason": reason, "compensation": [], "time": t})
            oid = self._put_start(new, labels, fork_id, body, t, f"copy of {source} branch {branch}@{lsn}: {reason}", "copy: branch 0 live")
            return new, oid, body

        run, oid, body = store.atomically(commit)
        return self._started(run, oid, body)

    def rewind(self, run: str, to_lsn: int, *, reason: str = "rewind", when: float | None = None, expect_live: int | None = None) -> ForkResult:
        """Rewind the live branch to ``to_lsn``: a fork of the branch live under the writer lock,
        which becomes live (``expect_live``: only if that branch is the live one)."""
        def commit() -> ForkResult:
            live = self.view(run).live
            return self.fork(run, live, to_lsn, reason=reason, make_live=True, when=when, expect_live=expect_live)

        return self.store.atomically(commit)

    def set_live(self, run: str, branch: int, reason: str = "set live") -> None:
        def commit() -> None:
            self.view(run).head(branch)
            name = live_ref(run)
            self.store.set_ref(name, self.store.read_ref(name), symref(branch_ref(run, branch)), reason)

        self.store.atomically(commit)


_id_lock = threading.Lock()
_last_us = 0  # the time part of the newest id this process made (µs since the epoch)


def new_run_id() -> str:
    """Unique and time-sortable, like a ULID: ``r20261201-052011123456-9f3c2a7b1e04`` is the UTC time
    to the microsecond, then 48 random bits (the short id ``runs`` shows).

    The time part never repeats nor goes back within a process (a clock step or two ids in one µs
    take the last one plus 1 µs), so ids made here sort by creation and never collide; ids of other
    processes differ by their random suffix. Ids made before (``r…-HHMMSSmmm-…``, milliseconds) stay
    valid: any id ``records.check_run_id`` accepts is a run id."""
    global _last_us
    with _id_lock:
        us = _last_us = max(time.time_ns() // 1000, _last_us + 1)
    return time.strftime("r%Y%m%d-%H%M%S", time.gmtime(us // 1_000_000)) + f"{us % 1_000_000:06d}-" + secrets.token_hex(6)


def _asked_run(run: str | None, labels: dict[str, str] | None) -> tuple[str | None, dict[str, str] | None]:
    """A new run's id as asked, checked before the lock: a run id (given, or made), or labels (the
    id comes from them under the lock: ``run`` is then None); never both, and ``l-`` only for labels."""
    if labels is not None:
        labels = L.check_labels(labels)
        if run is not None:
            raise InvalidInput("a labelled run's id is the one its labels give: pass labels or a run id, not both")
        return None, labels
    if run is None:
        run = new_run_id()
    elif L.is_label_id(run):
        raise InvalidInput(f"run id {run!r}: ids starting with {L.PREFIX!r} belong to labelled runs (labels=...)")
    R.check_run_id(run)
    check_new_run_id(run)
    return run, None


_row_of_attempt: Any = None


def _attempt_row() -> Any:
    """``runs.facts.checked_attempt_row``, imported on the first append (a command that only reads loads no facts)."""
    global _row_of_attempt
    if _row_of_attempt is None:
        from .facts import checked_attempt_row

        _row_of_attempt = checked_attempt_row
    return _row_of_attempt


_ATTEMPT_BLANK = {"workflow_version": None, "context": None, "prompt": None, "output": None, "tools": None, "usage": None,
                  "error": None}


def _check_ext(kind: str, fields: list, body: dict) -> None:
    bad = K.body_problem(fields, body)
    if bad is not None:
        raise InvalidRecord(f"a {kind} body: {bad}")


def _expectations(expect_head: Any, expect_branch: Any) -> tuple[bytes | None, int | None]:
    """``expect_head`` as plain bytes (an Id is the bytes it is), ``expect_branch`` a branch number; InvalidInput if not."""
    if expect_head is not None and (type(expect_head) is not bytes or len(expect_head) != 32):
        if not (isinstance(expect_head, bytes) and len(expect_head) == 32):
            raise InvalidInput("expect_head must be a 32-byte record id")
        expect_head = bytes(expect_head)
    if expect_branch is not None and (type(expect_branch) is not int or expect_branch < 0):
        raise InvalidInput(f"expect_branch must be a branch number, got {expect_branch!r}")
    return expect_head, expect_branch


def _now(when: float | None) -> float:
    """The time a write records: now, or the caller's ``when`` if it is a finite number of seconds
    within years 1 to 9999 (InvalidInput otherwise: 1e300 was stored and then `log` could not show it)."""
    return time.time() if when is None else R.check_time(when)
