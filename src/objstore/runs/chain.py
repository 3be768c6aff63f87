"""Reading runs as chains: views, walks, lineages, fork objects, the chain index.

The layer below ``RunLog`` (which adds writing) and the one the state cache, the queries and
verify read through. Everything here is a function of the object store and the refs of one
run at one instant (a ``View``); nothing writes.

Refs of a run ``R`` (names in ``runrefs``):

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

Recorded deletion (issue 17): a run whose ``run/R/deleted`` ref is set has no view (``Deleted``,
exit 12); a record a partial deletion covers (``run/R/deletions``) is read as a header-only record
— its place from its deletion's row and the chain index, its body ``{"deleted": <deletion id>}`` —
in every walk, so the fold, the views and export never see its body, before gc or after.

Every read goes through a ``View``: the ref values of one run at one instant.
``view(run)`` takes a fresh one; ``pin(run)`` is the same thing under the name
readers use for "hold this while writers go on" — since objects are immutable,
a view never changes under its reader, whatever writers do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import blake3

from ..errors import Deleted, Erased, InvalidInput, MalformedObject, ObjectNotFound, ObjstoreError
from ..storage import codec, runrefs
from ..storage.fileutil import no_gc
from ..storage.store import Store
from . import kinds as K
from . import labels as L
from . import records as R
from .fold import apply, empty_state, fold

_new_record = tuple.__new__  # NamedTuple construction without the keyword machinery
Record = R.Record


class View(NamedTuple):
    """Ref values of one run at one instant."""

    run: str
    live: int
    heads: dict[int, bytes]  # branch -> head id
    deletions: bytes | None = None  # head of run/<R>/deletions: which records are header-only (issue 17)

    def head(self, branch: int) -> bytes:
        return runrefs.head_of(self.run, self.heads, branch)


class ChainReader:
    """Reads the runs of one store: views, chains and lineages, records by LSN."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._next: dict[bytes, tuple[int, bool]] = {}  # head id -> (next lsn, finished)
        self._subjects: dict[str, str] = {}  # run -> subject (never changes)
        self._forks: dict[tuple[str, int], bytes | None] = {}  # (run, branch) -> fork object, found from the ref log
        self._first_parent: dict[bytes, bytes | None] = {}  # a branch's LSN 0 record -> its parent (immutable)
        self._copies: dict[str, bool] = {}  # run -> whether it is a copy of another run (never changes)
        self._xschemas: dict[bytes, tuple[str, list] | str] = {}  # schema id -> K.schema_fields (objects never change)

    # -- labels (runs.labels) ------------------------------------------------------
    def find_run(self, /, **labels: str) -> str | None:
        """The live run with exactly these labels (its id is computed: no search), or None."""
        return L.find_run(self.store, labels)

    def find_runs(self, /, **labels: str) -> list[str]:
        """Every live run whose labels include all of these, newest first; reads only the index
        rows and the run_started records it returns."""
        return L.find_runs(self.store, labels)

    def find_records(self, run: str, /, **labels: str) -> list[R.Record]:
        """Every record of ``run`` (any branch) carrying all these labels, newest commit first."""
        return [self.served_record(oid, p) for oid, p in L.find_records(self.store, run, labels)]

    def find_record(self, run: str, /, **labels: str) -> R.Record | None:
        """The newest record of ``run`` carrying all these labels, or None."""
        got = L.find_records(self.store, run, labels)
        return self.served_record(*got[0]) if got else None

    def served_record(self, oid: bytes, p: dict) -> R.Record:
        if p["kind"].startswith("x."):
            self.check_ext(oid, p)
        return R.Record.from_payload(oid, p)

    def record_labels(self, oid: bytes) -> dict[str, str]:
        """A record's labels ({} if it has none)."""
        otype, value = self.store.get(oid)
        if otype != codec.RECORD:
            raise InvalidInput(f"object {oid.hex()} is a {otype}, not a record")
        return L.labels_of(value)

    def run_labels(self, run: str) -> dict[str, str]:
        """A run's labels ({} for an unlabelled run)."""
        return self.record_labels(self.run_started(run).id)

    # -- objects -------------------------------------------------------------
    def record(self, oid: bytes) -> R.Record:
        """A record by id (Deleted if a recorded deletion covers it: objstore.storage.store)."""
        otype, value = self.store.get(oid)
        if otype != codec.RECORD:
            raise InvalidInput(f"object {oid.hex()} is a {otype}, not a record")
        if value["kind"].startswith("x."):
            self.check_ext(oid, value)
        return R.Record.from_payload(oid, value)

    def check_ext(self, oid: bytes, p: dict) -> None:
        """Refuse (``MalformedObject``, exit 6) a record of an ``x.`` kind that its schema does not allow
        (``kinds.ext_record_problem``, the rule verify names ``malformed-object``): readers never serve
        what verify calls forged. Schemas are read once per reader."""
        bad = K.ext_record_problem(p["kind"], p["body"], p.get("schema"), self.schema_fields)
        if bad is not None:
            raise MalformedObject(oid.hex(), bad)

    def check_fork_place(self, fk: dict) -> None:
        """Refuse (``MalformedObject``, exit 6) a fork object whose ``parent_record`` is not the record
        at the place it names (``records.fork_place_problem``, verify's ``bad-fork``): a reader never
        walks on into another run's or branch's history. One chain-index look-up per fork crossed; a
        record of an open batch (not indexed yet) is placed by its own payload instead."""
        src = fk.get("parent_run")
        run = src if isinstance(src, str) else fk.get("run")
        pb, pl, want = fk["parent_branch"], fk["parent_lsn"], fk["parent_record"]
        if not isinstance(run, str):
            return  # not a fork object the walk can follow: its own checks name it
        at = self.store.indexed_record(run, pb, pl)
        if at is None:  # not indexed: the open batch's, or nowhere; the record says where it is
            hit = self.store.erased_records.get(want)
            place: tuple | None
            if hit is not None:
                place = hit[1:4]
            else:
                try:
                    p = self.store.get_decoded(want)[1]
                except ObjstoreError:
                    return  # unreadable (a body gc removed, a missing object): the walk names it as ever
                place = (p.get("run"), p.get("branch"), p.get("lsn")) if isinstance(p, dict) else None
            if place == (run, pb, pl):
                at = want
        bad = R.fork_place_problem(fk, at, bytes.hex)
        if bad is not None:
            raise MalformedObject(fk["id"].hex(), bad)

    def check_object(self, oid: bytes, otype: str, value: Any) -> None:
        """Refuse (``MalformedObject``) an object ``show`` would print that verify calls forged: a
        record of an ``x.`` kind its schema does not allow, a schema object that is none."""
        if otype == codec.RECORD and isinstance(value, dict) and str(value.get("kind")).startswith("x."):
            self.check_ext(oid, value)
        elif otype == codec.SCHEMA:
            got = self.schema_fields(oid)
            if isinstance(got, str):
                raise MalformedObject(oid.hex(), got)

    def schema_fields(self, sid: bytes) -> tuple[str, list] | str:
        """(kind, fields) of schema object ``sid``, or why it is none (``kinds.schema_fields``)."""
        got = self._xschemas.get(sid)
        if got is None:
            try:
                otype, value = self.store.get(sid)
            except ObjectNotFound:
                otype, value = None, None
            got = self._xschemas[sid] = K.schema_fields(sid, otype, value)
        return got

    def fork_object(self, view: View, branch: int) -> dict | None:
        """The fork object at the root of ``branch`` (None for branch 0), with its id: the parent
        of the branch's LSN 0 record (from the chain index), or the head while it has no record."""
        head = view.head(branch)
        get = self.store.get_decoded
        first = self.store.indexed_record(view.run, branch, 0)
        if first is not None and first in self._first_parent and self._is_ancestor(view.run, branch, 0, head):
            return self._fork_of_parent(self._first_parent[first])  # the head is a record: no block of it decoded
        if head not in self.store.erased_records:
            otype, p = get(head)
            if otype == codec.FORK:
                fk = dict(p, id=head)
                self.check_fork_place(fk)
                return fk
        if first is None or not self._is_ancestor(view.run, branch, 0, head):
            return self.chain(head)[1]  # not indexed (an open batch): walk
        erased = self.store.erased_records.get(first)
        parent = self._header_parent(first, erased) if erased is not None else get(first)[1]["parent"]
        self._first_parent[first] = parent
        return self._fork_of_parent(parent)

    def _fork_of_parent(self, parent: bytes | None) -> dict | None:
        """The fork object a branch's LSN 0 record names as parent (None: a root branch)."""
        if parent is None:
            return None
        otype, p = self.store.get_decoded(parent)
        if otype != codec.FORK:
            return None
        fk = dict(p, id=parent)
        self.check_fork_place(fk)
        return fk

    def walk(self, head: bytes, stop_at: bytes | None = None,
             get: Callable[[bytes], tuple[str, Any]] | None = None) -> Iterator[R.Record | dict]:
        """A branch's own records newest first, then its fork object (a dict) if it has one.

        Stops before ``stop_at`` (a cached head) when it is met. ``get`` reads one object as
        ``(type, value)``; by default the store's block decoding (``history`` reads the first few
        objects one at a time, so ``log -n 3`` decodes three objects, not a block)."""
        if get is None:
            get = self.store.get_decoded
        oid: bytes | None = head
        branch = None
        erased = self.store.erased_records  # records partial deletions cover: folded from their rows
        while oid is not None and oid != stop_at:
            hit = erased.get(oid) if erased else None
            if hit is not None:
                rec = self._header_only(oid, hit)
                if branch is None:
                    branch = rec.branch
                yield rec
                oid = rec.parent
                continue
            otype, p = get(oid)
            if otype == codec.FORK:
                src = p.get("parent_run")
                if isinstance(src, str) and src != p.get("run"):
                    # a copy's root: its caller may walk on into the source, whose partial deletions must
                    # then be known (its covered records read header-only, as in every other reader)
                    self.store.covered_records(src)
                fk = dict(p, id=oid)
                self.check_fork_place(fk)
                yield fk
                return
            if otype != codec.RECORD:
                raise InvalidInput(f"chain reaches {otype} object {oid.hex()}")
            if branch is None:
                branch = p["branch"]
            elif p["branch"] != branch:
                raise InvalidInput(f"chain of branch {branch} reaches record {oid.hex()} of branch {p['branch']}")
            if p["kind"].startswith("x."):
                self.check_ext(oid, p)
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
        if upto is not None and upto >= 0 and self.store.indexed_record(view.run, branch, upto) is not None:
            last = upto  # the chain index has it: the head need not be read (a deleted source's head may be gone)
        else:
            head_lsn = self.next_of(head)[0] - 1
            last = head_lsn if upto is None else min(upto, head_lsn)
        if last < 0:
            return
        get = self.store.get_decoded
        expect = start
        if start > last:
            return
        if self.store.indexed_record(view.run, branch, last) is not None:
            erased = self.store.erased_records
            for lsn, oid in self.store.logs.run_log(view.run).iter_chain(view.run, branch, start):
                if lsn > last:
                    break
                hit = erased.get(oid) if erased else None
                if hit is not None:
                    yield self._header_only(oid, hit)
                    expect = lsn + 1
                    continue
                otype, p = get(oid)
                if p["kind"].startswith("x."):
                    self.check_ext(oid, p)
                yield _new_record(Record, (oid, p["run"], branch, lsn, p["parent"], p["kind"], p.get("time"), p["body"]))
                expect = lsn + 1
            if expect > last:
                return
        # Not (all) indexed — records of an open batch: the chain walk has them.
        own = [r for r in self.chain(head)[0] if expect <= r.lsn <= last]
        yield from own

    def iter_lineage(self, view: View, branch: int, upto: int | None = None) -> Iterator[R.Record]:
        """Every record the branch folds over (up to its LSN ``upto``), oldest first, streamed:
        each ancestor up to its fork point (read from the fork objects), then its own records.
        A copy (``fork_run``) goes on into its source run at its cross-run fork object."""
        for v, b, upto_b in self.lineage_parts(view, branch, upto):
            yield from self.iter_own(v, b, upto_b)

    def lineage_parts(self, view: View, branch: int, upto: int | None = None) -> list[tuple[View, int, int | None]]:
        """(view, branch, last LSN or None for the head) of each part of ``iter_lineage``, root first."""
        parts = []  # (view, branch, upto) from the branch back to the root
        b = branch
        seen = set()
        while True:
            parts.append((view, b, upto))
            fk = self.fork_object(view, b) if b != 0 or self._copied(view) else None
            if fk is None:
                break
            if (view.run, b) in seen:
                raise InvalidInput(f"the forks of run {view.run} branch {b} go round in a circle")
            seen.add((view.run, b))
            view = self.parent_view(view, fk)
            b, upto = fk["parent_branch"], fk["parent_lsn"]
        parts.reverse()
        return parts

    def _copied(self, view: View) -> bool:
        """Whether the run is a copy: its run_started names a cross-run fork object (``fork_run``)."""
        got = self._copies.get(view.run)
        if got is None:
            first = self.store.indexed_record(view.run, 0, 0)
            if first is None:
                return False  # no run_started indexed yet (an open batch): not decided, not remembered
            # read below the erasure checks: a deleted middle copy is still the way its copies reach their source
            otype, p = self.store.get_decoded(first) if first not in self.store.erased_records else ("record", {"parent": None})
            got = self._copies[view.run] = otype == codec.RECORD and isinstance(p, dict) and p.get("parent") is not None
        return got

    def state_deletions(self, view: View) -> bytes | None:
        """What partial deletions a branch's folded state reflects (the state cache's key): the run's
        deletions head, and for a copy its sources' too — a deletion there changes what the copy folds."""
        if not self._copied(view):
            return view.deletions
        parts, v, seen = [view.deletions or bytes(32)], view, set()
        while self._copied(v) and v.run not in seen:
            seen.add(v.run)
            fk = self.fork_object(v, 0)
            if fk is None:
                break
            v = self.parent_view(v, fk)
            parts.append(v.deletions or bytes(32))
        if not any(any(p) for p in parts):
            return None
        return blake3.blake3(b"".join(parts)).digest()

    RUN_FIELDS = ("run", "subject", "workflow_version", "meta")

    def run_fields(self, view: View) -> dict:
        """``run``, ``subject``, ``workflow_version`` and ``meta`` as the fold of any branch of the run
        sets them (``fold.apply``: only run_started records at LSN 0 of branch 0 set them), read from
        the log: the run's run_started and, for a copy, its sources' (oldest first) — one record a run.
        What the state cache serves of them comes from here, never from its rows (invariant 15)."""
        views, v, seen = [view], view, {view.run}
        while self._copied(v):
            fk = self.fork_object(v, 0)
            if fk is None:
                break
            v = self.parent_view(v, fk)
            if v.run in seen:
                break
            seen.add(v.run)
            views.append(v)
        st = empty_state()
        for v in reversed(views):
            for rec in self.iter_own(v, 0, upto=0):
                apply(st, rec)
        return {k: st[k] for k in self.RUN_FIELDS}

    def parent_view(self, view: View, fk: dict) -> View:
        """The view a fork object's parent lives in: the run's own, or a copy's source run."""
        src = fk.get("parent_run")
        if src is None or src == view.run:
            return view
        # deleted or not: a source deleted since is gone as a run, but what a live copy reaches stays its history (gc keeps it)
        R.check_run_id(src)
        return self.view_of_any(src, self.store.run_refs(src))

    def fork_base(self, view: View, fk: dict) -> Iterator[R.Record]:
        """The records a forked branch (or a copy) folds over before its own: its parent's lineage up to the fork point."""
        return self.iter_lineage(self.parent_view(view, fk), fk["parent_branch"], upto=fk["parent_lsn"])

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
        """The run's refs now; RunNotFound for no such run, Deleted (exit 12) for a deleted one."""
        R.check_run_id(run)
        return self._view_of(run, self.store.run_refs(run))

    def _view_of(self, run: str, snap: dict) -> View:
        gone = snap.get(runrefs.deleted_ref(run))
        if isinstance(gone, bytes):
            self.store.obey_deletion(runrefs.deleted_ref(run), gone)
            raise Deleted(f"run {run}", gone.hex(), self.store.deletion_object(gone).get("reason", ""))
        return self.view_of_any(run, snap)

    def view_of_any(self, run: str, snap: dict) -> View:
        """A view of a run's refs, deleted or not (verify and deletion read deleted runs' refs)."""
        live, heads = runrefs.parse_run_refs(run, snap)
        dels = snap.get(runrefs.deletions_ref(run))
        if isinstance(dels, bytes):
            self.store.covered_records(run, dels)  # its covered records join store.erased_records
            return View(run, live, heads, dels)
        return View(run, live, heads)

    # -- header-only records (issue 17) ------------------------------------------------------
    def _header_only(self, oid: bytes, hit: tuple) -> R.Record:
        """The header-only record of a covered record: place and kind from its deletion's row, its
        parent from the chain index (LSN 0 of a fork: the fork object, from the record's header)."""
        did, run, branch, lsn, kind = hit
        return R.header_only(oid, run, branch, lsn, self._header_parent(oid, hit), kind, did)

    def _header_parent(self, oid: bytes, hit: tuple) -> bytes | None:
        _did, run, branch, lsn, _kind = hit
        if lsn > 0:
            parent = self.store.indexed_record(run, branch, lsn - 1)
            if parent is not None:
                return parent
        elif branch == 0:
            return None
        row = getattr(self.store.logs.run_log(run), "record_row", None)  # the header in the entry's meta, if the engine serves it
        if row is not None:
            got = row(oid)
            if got is not None:
                return cast("bytes | None", got[3])
        try:
            return cast("bytes | None", codec.decode(self.store.logs.run_log(run).read(oid), oid, False)[1]["parent"])
        except Erased:
            return self._fork_of(run, branch)  # gc removed it: the fork object is the branch's root

    def _fork_of(self, run: str, branch: int) -> bytes | None:
        """The fork object at the root of ``branch``, found from the log alone: the first move of
        the branch's ref names it, or names the first record of an entry that holds it. (Only for
        a forked branch whose LSN 0 record gc removed: the fork object is read nowhere else then.)"""
        key = (run, branch)
        if key in self._forks:
            return self._forks[key]
        ref = runrefs.branch_ref(run, branch)
        engine = self.store.logs.run_log(run)
        found = None
        for e in engine.entries():
            moved = next((m for m in e.moves if m[0] == ref), None)
            if moved is None:
                continue
            cands = [moved[2]] + [o[0] for o in e.objs if o[1] == codec.FORK]
            for oid in cands:
                if isinstance(oid, bytes) and engine.loc_entry(oid) is not None:
                    try:
                        otype, p = self.store.get_decoded(oid)
                    except Erased:
                        continue
                    if otype == codec.FORK and p.get("run") == run and p.get("branch") == branch:
                        found = oid
                        break
            break
        self.store.forget_decoded()
        self._forks[key] = found
        return found

    pin = view

    def view_from(self, run: str, refs: dict) -> View:
        """A view from a run's refs captured elsewhere — with a Host request's position
        (``host.At.run_refs``), so the branches and the run's other refs read one position."""
        R.check_run_id(run)
        return self._view_of(run, refs)

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

    def next_of(self, head: bytes) -> tuple[int, bool]:
        hit = self._next.get(head)
        if hit is None:
            erased = self.store.erased_records.get(head)
            if erased is not None:  # a header-only head: its place and kind are its deletion's row
                hit = self._next[head] = (erased[3] + 1, erased[4] == R.RUN_FINISHED)
                return hit
            try:
                otype, p = self.store.get(head)
            except Deleted:
                # Deleted by another process since this store last looked: the check that refused
                # the read has just taken in that deletion's rows.
                erased = self.store.erased_records.get(head)
                if erased is None:
                    raise
                hit = self._next[head] = (erased[3] + 1, erased[4] == R.RUN_FINISHED)
                return hit
            if otype == codec.FORK:
                hit = (0, False)
            else:
                hit = (p["lsn"] + 1, p["kind"] == R.RUN_FINISHED)
            self._next[head] = hit
        return hit

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
        head_lsn = self.next_of(head)[0] - 1
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

    # -- queries (raw log; live by default) ----------------------------------------
    def history(self, view: View, branch: int | None = None, *, all_branches: bool = False) -> list[tuple[int, list, dict | None]]:
        """What ``objstore log`` shows, newest group first: ``(branch, own records oldest first, fork object)``.

        By default the live branch, then each ancestor up to its fork point (git log
        through merges, in one line); ``all_branches`` gives every branch's own records.
        """
        if all_branches:
            return [(b, *self.chain(view.head(b))) for b in sorted(view.heads, reverse=True)]
        b = view.live if branch is None else branch
        return cast("list[tuple[int, list, dict | None]]", self.groups_from(view.head(b), b))  # b given: every branch is an int

    def records(self, run: str, branch: int | None = None, *, all_branches: bool = False, view: View | None = None) -> list[R.Record]:
        """Own records of the live branch (default), one branch, or all branches (by branch, LSN)."""
        view = view or self.view(run)
        if all_branches:
            out = []
            for b in sorted(view.heads):
                out.extend(self.own_records(view, b))
            return out
        return self.own_records(view, view.live if branch is None else branch)

