"""``objstore push`` / ``objstore clone``: copy runs from one store to another, fast-forward only.

``transfer(source, target, runs)`` is both directions (local -> S3, S3 -> local, local -> local): the
target's log entries are its own (re-chained: its entry numbers, checksums and anchors differ from
the source's), its objects are the source's, byte for byte (content-addressed: the same ids) — except
between two stores with a log per run on disk, where a run's log is copied entry for entry
(``transfer_logs``: the same entries, so the run's head and anchor are the same at both ends; the
catalog entry as it is) whenever the target's log of the run is empty or a prefix of the source's.
On a store of logs a run's objects are read from, and written to, that run's own log (a commit
writes one log: one commit per run there).

Units. First the store-level refs (every ref that is not ``run/<R>/…``: ``keys/owner``, ``schema/*``,
``subjects/*/grant/*``, ``redacted/*``), then each run. A unit's commits touch only its own refs, so
an S3 target (one log per commit, ``MultiLogBatch`` otherwise) takes them as they are.

What a ref reaches is what verify checks a store holds: from each ref's value, every object that
``records.object_refs`` names (a record's parent and blob fields, a fork's parent record and head,
every id in a journal, segment, grant, deletion or schema object), plus every id a record body names
(``runs.facts.body_refs``, what gc's index rows hold), walked until an object the target has already.
An object the target holds is never read again, so a second push of the same store reads refs only
and writes nothing.

Fast-forward, decided before anything of the unit is written. For each source ref: absent in the
target -> set; equal -> nothing; a branch ref whose target value the walk from the source's value
reaches (an ancestor on its chain) -> moved; a chain ref (journal, segments, deletions, grants,
schemas) whose target value is an earlier element of the source's chain -> moved, one element at a
time; the live ref follows the source; anything else -> a conflict naming the run and the ref, and
nothing of that run is written (other runs go on). A target ref the source does not have is left.

Commits. One commit per run, plus one per further element of a chain ref: the forward-only rules
(``storage.refs.check_move``) move a chain ref by exactly one element per entry, and a journal
version, a segment or a deletion is dated by its entry against the grants then in force, so the
chain steps are committed in the source's log order, a grant step never sharing a commit after a
step it could re-date. A run without journal, grant or deletion chains is one commit — unless it is
large (over ``CHUNK_OBJECTS`` objects or ``CHUNK_BYTES`` bytes to send): its records then go in several
commits, each a prefix of them moving each branch to its newest record so far, so the target holds
an earlier consistent state of the run between them and a push killed midway is finished by the next.

A copy (``fork_run``) names its source run's record: the source run is pushed first, whether asked
for or not. Recorded deletion travels: partial deletions (``run/<R>/deletions``) as chain steps, the
covered records with their bodies as long as the source has them (the target withholds them at once,
``Deleted``; the target — local or S3 — is gc'd at the end of a transfer that moved a deletion or a
redaction, which removes them from its files or keys; a store in memory has no gc: the report says so). A
deleted run (``run/<R>/deleted``) is not sent to a target that lacks it (its bodies are not spread
further); a target that has it receives the deletion. What cannot be sent is said, not faked: a run
one of whose missing objects the source no longer has (its body removed by gc) or withholds (a
redacted blob) is reported ``erased`` and nothing of it is written — the engines have no way to
store an object "as removed", and a target holding records whose parents or blobs it lacks would
fail verify. A redaction is sent only to a target holding the blob.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ..errors import BodyRemoved, Conflict, InvalidInput, LockTimeout, ObjectNotFound, ObjstoreError, Refused, RunNotFound
from ..runs import records
from ..runs.facts import body_refs
from ..storage import codec, runrefs
from ..storage.log.engine import Engine
from ..storage.refs import forward_only, write_once_deletion
from ..storage.runlogs.logs import RunLogs
from ..storage.store import Store
from ..storage.storedir import LABELS_VERSION
from . import delete

Progress = Callable[[str], None]
CHUNK_OBJECTS = 50_000  # objects in one commit of a run's records at most (a larger run takes several)
CHUNK_BYTES = 64 << 20  # canonical bytes in one such commit at most
GC_UNAVAILABLE = "unavailable: a store in memory has no gc"


@dataclass
class TransferReport:
    """What a transfer did. ``store_refs``: landed | already | conflict. Runs by outcome: ``landed``
    (written now), ``already`` (the target had everything), ``conflicts`` (run, ref, detail),
    ``deleted`` (deleted in the source and absent from the target: not sent), ``erased`` (run, detail:
    an object it needs is gone from the source). ``entries``: the target's log entries written."""

    source: str
    target: str
    store_refs: str = "already"
    landed: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    erased: list[tuple[str, str]] = field(default_factory=list)
    entries: int = 0
    objects: int = 0
    bytes: int = 0
    gc: str | None = None  # None: no deletion moved; "ran": the target was gc'd; GC_UNAVAILABLE

    def to_json(self) -> dict:
        return {"source": self.source, "target": self.target, "store_refs": self.store_refs,
                "landed": self.landed, "already": self.already,
                "conflicts": [{"run": r, "ref": n, "detail": d} for r, n, d in self.conflicts],
                "deleted": self.deleted, "erased": [{"run": r, "detail": d} for r, d in self.erased],
                "entries": self.entries, "objects": self.objects, "bytes": self.bytes, "gc": self.gc}


class _Needs(Exception):
    """The unit's walk reached a record of another run the target lacks (a copy's source)."""

    def __init__(self, run: str) -> None:
        super().__init__(run)
        self.run = run


class _Unsendable(Exception):
    """An object the unit needs is not readable in the source (gc removed it, or it is redacted)."""


class _Diverged(Exception):
    def __init__(self, ref: str, detail: str) -> None:
        super().__init__(ref, detail)
        self.ref = ref
        self.detail = detail


def label(store: Store) -> str:
    """How a report names a store: its URL or its directory."""
    return store.url or store.root or "(memory)"


def transfer(source: Store, target: Store, runs: Iterable[str] | None = None, progress: Progress | None = None,
             step: Callable[[int, int, int], None] | None = None, fresh: bool = False) -> TransferReport:
    """Copy the store-level refs and ``runs`` (default: every run, deleted ones included) from
    ``source`` to ``target`` (see the module docstring). Raises only before anything is written
    (``InvalidInput``: the same store twice; ``RunNotFound``: a named run the source does not have);
    conflicts and unsendable runs are in the report. ``step(runs done, runs in all, bytes written)``:
    called as the runs go (a progress bar's). ``fresh``: the target was made by this process for this copy
    (``clone``), so no other process has its store log open: its files may be replaced by the source's."""
    say = progress or (lambda _m: None)
    if source.engine is target.engine or (source.url or os.path.realpath(source.root or "\0")) == (target.url or os.path.realpath(target.root or "\1")):
        raise InvalidInput(f"push source and target are the same store ({label(source)})")
    source.engine.refresh()
    # a deletion decides what is not sent and is carried to the target: one no authorised key made
    # (past which a forged checkpoint lets this reader read) is refused, as gc refuses it
    delete.check_authority(source)
    every = _all_runs(source)
    if runs is None:
        wanted = sorted(every)
    else:
        wanted = list(dict.fromkeys(runs))
        for r in wanted:
            if r not in every:
                raise RunNotFound(r)
    rep = TransferReport(label(source), label(target))
    t = _Transfer(source, target, rep, say)
    t.fresh = fresh
    if source._version >= LABELS_VERSION:
        target.require_version(LABELS_VERSION)  # labelled records, schemas, cross-run forks: format 5
    if step is not None:
        step(0, len(wanted), 0)
    t.store_level()
    for i, r in enumerate(wanted, 1):
        t.run(r)
        if step is not None:
            step(i, len(wanted), rep.bytes)
    if t.deletion_moved:
        if target.url is not None or (target.engine.log_files and target.root is not None):
            from .gc import gc

            say("gc of the target (a deletion was carried)")
            gc(target)
            rep.gc = "ran"
        else:
            rep.gc = GC_UNAVAILABLE
    return rep


def _all_runs(store: Store) -> set[str]:
    """Every run the store has a branch 0 of, deleted ones included (run_names leaves those out); on a
    store with a log per run, every catalogued run with a log (a log without branch 0 is skipped by ``_run``)."""
    if store.logs.per_run:
        return set(store.logs.run_ids())
    with store.engine._mu:
        return {r for r, d in store.engine.tables.run_refs.items() if runrefs.branch_ref(r, 0) in d}


class _Transfer:
    def __init__(self, source: Store, target: Store, rep: TransferReport, say: Progress) -> None:
        self.src = source
        self.dst = target
        self.rep = rep
        self.say = say
        self.done: dict[str, str] = {}  # run -> its outcome (landed, already, conflict, deleted, erased)
        self.active: set[str] = set()
        self.deletion_moved = False
        self.reason = f"transfer from {rep.source}"
        self.redacted = {name[len(runrefs.REDACTED_PREFIX):] for name, v in source.list_refs(runrefs.REDACTED_PREFIX) if isinstance(v, bytes)}
        # two stores of logs on disk: a run's log is copied entry for entry (transfer_logs), its anchor the same at both ends
        self.logcopy = (source.logs.per_run and target.logs.per_run and source.engine.log_files and target.engine.log_files
                        and target.root is not None)  # (logs of segment files at both ends, not object storage)
        self.fresh = False  # the target is this process's new clone: nobody else has its logs open

    def _dst_log(self, run: str | None) -> Engine:
        """The target's log that holds the unit's refs and objects (a store of one log: that log)."""
        return self.dst.logs.store_log if run is None else self.dst.logs.run_log(run)

    def _src_read(self, oid: bytes, run: str | None) -> bytes:
        """An object's canonical bytes from the source: the unit's own log first, then wherever it is."""
        logs = self.src.logs
        if run is not None:
            log = logs.run_log(run)
            if log.has(oid):
                return log.read(oid)
        return logs.locate(oid).read(oid)

    # -- the walk ------------------------------------------------------------------------------
    def _reach(self, start: Any, run: str | None, have: dict) -> list:
        """(id, type, canonical bytes, value) of every object reachable from ``start`` that the
        target lacks and ``have`` does not hold yet, dependencies first (a record after its parent),
        added to ``have``. Raises ``_Needs`` at another run's record, ``_Unsendable`` at a body the
        source does not give."""
        if not isinstance(start, bytes):
            return []
        out: list = []
        stack: list = [(start, None)]
        seen: set = set()
        eng = self._dst_log(run)
        while stack:
            oid, got = stack.pop()
            if got is not None:  # every reference of it is out already: it goes next
                out.append(got)
                have[oid] = got
                continue
            # known to the target, with its body or without (its gc removed it): never sent again
            if oid in have or oid in seen or eng.has(oid):
                continue
            if run is None and oid.hex() in self.redacted and self.dst.logs.per_run and self.dst.logs.locate(oid).has(oid):
                continue  # a redaction's blob, held by the target in a run's log (a store log holds no run's blob)
            seen.add(oid)
            got = self._read(oid, run)
            if got is None:
                continue  # another run's record the target holds in that run's log
            stack.append((oid, got))
            otype, value = got[1], got[3]
            if otype == codec.BLOB or not isinstance(value, dict):
                continue
            refs = [ref for _f, ref in records.object_refs(otype, value)]
            if otype == codec.RECORD and isinstance(value.get("body"), dict):
                refs += body_refs(value["body"])
            for ref in reversed(refs):
                if type(ref) is bytes and len(ref) == 32 and ref not in have and ref not in seen:
                    stack.append((ref, None))
        return out

    def _read(self, oid: bytes, run: str | None) -> tuple | None:
        if oid.hex() in self.redacted:
            raise _Unsendable(f"blob {oid.hex()} is redacted in the source")
        try:
            data = self._src_read(oid, run)  # below the erasure checks: a covered record travels as it is
        except BodyRemoved:
            raise _Unsendable(f"the body of object {oid.hex()} was removed by gc in the source") from None
        except ObjectNotFound:
            raise _Unsendable(f"object {oid.hex()} is not in the source") from None
        otype, value = codec.decode(data, oid, False)
        if otype == codec.RECORD and isinstance(value, dict) and value.get("run") != run:
            other = str(value.get("run"))
            if self.dst.logs.per_run and self.dst.logs.run_log(other).has(oid):
                return None
            raise _Needs(other)
        return (oid, otype, data, value if isinstance(value, dict) else None)

    def _chain(self, name: str, sv: bytes, tv: Any) -> list[bytes]:
        """The elements of a chain ref's chain after ``tv`` up to ``sv``, oldest first; _Diverged if
        ``tv`` is set and is not one of them."""
        out: list[bytes] = []
        cur: Any = sv
        while isinstance(cur, bytes) and cur != tv:
            out.append(cur)
            try:
                value = codec.decode(self._src_read(cur, runrefs.run_of(name)), cur, False)[1]
            except BodyRemoved:
                raise _Unsendable(f"chain object {cur.hex()} of {name} was removed by gc in the source") from None
            cur = value.get("previous") if isinstance(value, dict) else None
        if cur != tv:
            raise _Diverged(name, f"the target's {_show(tv)} is not on the source's chain")
        return out[::-1]

    # -- planning a unit -----------------------------------------------------------------------
    def _plan(self, run: str | None, src: dict, tgt: dict) -> list:
        """The unit's commits: [(objects, moves)], the first holding the records and branch moves.
        Raises _Diverged / _Needs / _Unsendable before anything is written."""
        have: dict = {}
        first_objs: list = []
        first_moves: list = []
        steps: list = []  # (source entry, chain ref, old, new, is grant)
        for name, sv in sorted(src.items()):
            tv = tgt.get(name)
            if tv == sv or (runrefs.is_cite_ref(name) and self.dst.logs.per_run):
                continue  # (a cite names a position of the source's store log: a store of logs' commits cite its own)
            if run is not None and runrefs.branch_of(run, name) is not None:
                if not isinstance(sv, bytes):
                    raise _Diverged(name, f"the source's value {sv!r} is not an id")
                got = self._reach(sv, run, have)
                if tv is not None and not self._reached(tv, have):
                    raise _Diverged(name, f"the target's head {_show(tv)} is not an ancestor of the source's {_show(sv)}")
                first_objs += got
                first_moves.append((name, tv, sv))
            elif run is not None and name == runrefs.live_ref(run):
                first_moves.append((name, tv, sv))
            elif write_once_deletion(name) or name.startswith(runrefs.KEYS_PREFIX):
                if tv is not None:
                    raise _Diverged(name, f"written once: the target holds {_show(tv)}, the source {_show(sv)}")
                if name.startswith(runrefs.REDACTED_PREFIX):
                    try:
                        blob = codec.parse_id(name[len(runrefs.REDACTED_PREFIX):])
                    except InvalidInput:
                        continue
                    if not self.dst.logs.has(blob):
                        continue  # the target never held the blob: nothing there to withhold
                first_objs += self._reach(sv, run, have)
                first_moves.append((name, None, sv))
                self.deletion_moved = self.deletion_moved or write_once_deletion(name)
            elif forward_only(name) and isinstance(sv, bytes):
                for i, new in enumerate(chain := self._chain(name, sv, tv)):
                    old = tv if i == 0 else chain[i - 1]
                    steps.append((self.src.logs.for_ref(name).loc_entry(new) or 0, name, old, new, runrefs.is_grant_ref(name)))
            else:
                if tv is not None:
                    raise _Diverged(name, f"the target holds {_show(tv)}, the source {_show(sv)}")
                first_objs += self._reach(sv, run, have)
                first_moves.append((name, None, sv))
        commits = self._split(run, first_objs, first_moves)
        names: set = set()
        dated = False  # the current commit holds a step dated by grants (journal, segment, deletion, schema)
        for _e, name, old, new, grant in sorted(steps, key=lambda s: (s[0], not s[4])):  # a grant before what it dates
            if name in names or (grant and dated):
                commits.append(([], []))
                names, dated = set(), False
            objs, moves = commits[-1]
            objs += self._reach(new, run, have)
            moves.append((name, old, new))
            names.add(name)
            dated = dated or not grant
            if runrefs.is_deletions_ref(name):
                self.deletion_moved = True
        return [c for c in commits if c[0] or c[1]]

    @staticmethod
    def _split(run: str | None, objs: list, moves: list) -> list:
        """The records commit of a large run as several, each at most CHUNK_OBJECTS objects or
        CHUNK_BYTES canonical bytes (an entry's meta holds a row per object; the local engine caps it
        at 256 MiB, and an S3 entry is one PUT): each commit a prefix of the objects, which come
        dependencies first, moving each branch to its newest record (or its fork object) so far, so
        the target holds a consistent earlier state of the run after each; the other moves (live,
        write-once and plain refs) go with the last."""
        if run is None or (len(objs) <= CHUNK_OBJECTS and sum(len(o[2]) for o in objs) <= CHUNK_BYTES):
            return [(objs, moves)]
        branch = {name: [old, new] for name, old, new in moves if runrefs.branch_of(run, name) is not None}
        head_of = {new: name for name, (_old, new) in branch.items()}
        out: list = []
        cur: list = []
        size = 0
        for i, o in enumerate(objs):
            cur.append(o)
            size += len(o[2])
            if len(cur) < CHUNK_OBJECTS and size < CHUNK_BYTES and i < len(objs) - 1:
                continue
            tips: dict = {}
            for oid, otype, _data, value in cur:
                if otype in (codec.RECORD, codec.FORK) and value is not None and value.get("run") == run and type(value.get("branch")) is int:
                    # a branch's records in order; its fork object first (a later commit's LSN-0 record names it as the head)
                    tips[runrefs.branch_ref(run, value["branch"])] = oid
                if oid in head_of:
                    tips[head_of[oid]] = oid
            ms = []
            for name, oid in tips.items():
                got = branch.get(name)
                if got is not None and got[0] != oid:
                    ms.append((name, got[0], oid))
                    got[0] = oid
            out.append((cur, ms))
            cur, size = [], 0
        out[-1][1].extend(m for m in moves if m[0] not in branch)
        return out

    @staticmethod
    def _reached(tv: Any, have: dict) -> bool:
        """Whether the branch walk stopped at ``tv`` (the target's head): a record or fork it read
        names ``tv`` as its lineage (parent, parent record). A record names its run and branch, so
        a source object continuing from ``tv`` continues the target's branch: a fast-forward."""
        for _oid, otype, _data, value in have.values():
            if value is None:
                continue
            if (otype == codec.RECORD and value.get("parent") == tv) or (otype == codec.FORK and value.get("parent_record") == tv):
                return True
        return False

    def _commit(self, commits: list, run: str | None) -> int:
        """Each planned commit as one target commit (of the unit's log); the number of entries written."""
        before = self._dst_log(run).refresh().entry
        for objs, moves in commits:
            eng = self._dst_log(run)  # a run's first commit makes its log on a store of logs
            with self.dst.batch() as txn:
                for oid, otype, data, value in objs:
                    if oid not in txn.objects and not eng.has_body(oid):
                        self.rep.objects += 1
                        self.rep.bytes += len(data)
                    txn.put(oid, otype, data, value)
                for name, old, new in moves:
                    txn.set_ref(name, old, new, self.reason)
        n = self._dst_log(run).refresh().entry - before
        self.rep.entries += n
        return n

    # -- units ---------------------------------------------------------------------------------
    def store_level(self) -> None:
        """Each store-level ref on its own (its own commits): one that conflicts, or that the
        target refuses (a subject grant on S3), leaves the others to land."""
        wrote = self._copy_store_log()
        self.dst.engine.refresh()
        src, tgt = _store_refs(self.src), _store_refs(self.dst)
        for name in sorted(src):
            try:
                wrote = self._commit(self._plan(None, {name: src[name]}, {name: tgt.get(name)}), None) > 0 or wrote
            except _Diverged as e:
                self.rep.conflicts.append(("", e.ref, e.detail))
            except (Conflict, Refused) as e:
                self.rep.conflicts.append(("", name, str(e)))
            except (_Needs, _Unsendable) as e:
                self.rep.conflicts.append(("", name, f"it reaches what cannot be sent: {e}" if isinstance(e, _Unsendable) else f"it names a record of run {e.run}"))
        self.rep.store_refs = "conflict" if self.rep.conflicts else "landed" if wrote else "already"

    def _copy_store_log(self) -> bool:
        """Two stores of logs: the store log copied entry for entry when the target's is a prefix of it
        (``transfer_logs.copy_store_log``), so the runs' entries, which cite its positions, copy as they are too.
        Not when it holds an object the source redacts (a plain copy would hand its body over). Whether it wrote."""
        if not self.logcopy:
            return False
        from .transfer_logs import copy_store_log

        slog = self.src.logs.store_log
        if any(slog.has(bytes.fromhex(h)) for h in self.redacted if len(h) == 64):
            return False
        before = _store_refs(self.dst)
        try:
            got = copy_store_log(self.src, self.dst, replace_ok=self.fresh)
        except LockTimeout:
            return False  # a writer of the target's store log holds it: the refs go one by one instead
        if got is None or not got.entries:
            return False
        self.rep.entries += got.entries
        self.rep.objects += got.objects
        self.rep.bytes += got.bytes
        after = _store_refs(self.dst)
        self.deletion_moved = self.deletion_moved or any(write_once_deletion(n) for n in after if after[n] != before.get(n))
        return True

    def run(self, run: str) -> str:
        """Push one run (its copy sources first); its outcome."""
        got = self.done.get(run)
        if got is not None:
            return got
        if run in self.active:  # two copies' sources naming each other cannot be: content addressing
            return "erased"
        self.active.add(run)
        try:
            out = self._run(run)
        finally:
            self.active.discard(run)
        self.done[run] = out
        self.say(f"run {run}: {out}")
        return out

    def _run(self, run: str) -> str:
        rep = self.rep
        if self.logcopy:
            got = self._copy_log(run)
            if got is not None:
                return got
        for _ in range(64):  # each pass pushes one more copy source first
            self._dst_log(run).refresh()
            src = self.src.run_refs(run)
            tgt = self.dst.run_refs(run)
            gone = runrefs.deleted_ref(run)
            try:
                if gone in src or gone in tgt:
                    commits = self._plan_deleted(run, src, tgt)
                    if commits is None:
                        rep.deleted.append(run)
                        return "deleted"
                else:
                    commits = self._plan(run, src, tgt)
            except _Needs as e:
                if e.run not in _all_runs(self.src):
                    rep.erased.append((run, f"its copy source {e.run} is not in the source"))
                    return "erased"
                dep = self.run(e.run)
                if dep not in ("landed", "already"):
                    rep.erased.append((run, f"its copy source {e.run} was not pushed ({dep})"))
                    return "erased"
                continue
            except _Diverged as e:
                rep.conflicts.append((run, e.ref, e.detail))
                return "conflict"
            except _Unsendable as e:
                rep.erased.append((run, str(e)))
                return "erased"
            if runrefs.branch_ref(run, 0) not in src and not tgt:
                return "already"  # a log with no run in it (a start killed before its first entry): nothing to send
            try:
                n = self._commit(commits, run)
            except (Conflict, Refused) as e:  # a writer of the target moved a ref of this run meanwhile; a rule of the target
                rep.conflicts.append((run, "?", str(e)))
                return "conflict"
            (rep.landed if n else rep.already).append(run)
            return "landed" if n else "already"
        rep.erased.append((run, "its copies' sources nest too deep"))
        return "erased"

    def _copy_log(self, run: str) -> str | None:
        """Two stores of logs: the run's log copied entry for entry (``transfer_logs``), its copy source first;
        None when refs and objects must go instead (the target's log is not a prefix of the source's, a
        deletion to compare, or a blob the source redacts that a plain copy would hand over)."""
        from .transfer_logs import copy_run_log

        src, tgt = self.src.run_refs(run), self.dst.run_refs(run)
        gone = runrefs.deleted_ref(run)
        if runrefs.branch_ref(run, 0) not in src or (gone in tgt and src.get(gone) != tgt.get(gone)):
            return None
        if gone in src and runrefs.branch_ref(run, 0) not in tgt:
            self.rep.deleted.append(run)
            return "deleted"
        slog = self.src.logs.run_log(run)
        if any(slog.has(bytes.fromhex(h)) for h in self.redacted if len(h) == 64):
            return None
        entry = cast(RunLogs, self.src.logs).catalog.entry(run)
        if entry is not None and entry.copy_of not in (None, run):
            dep = self.run(entry.copy_of)
            if dep not in ("landed", "already"):
                self.rep.erased.append((run, f"its copy source {entry.copy_of} was not pushed ({dep})"))
                return "erased"
        try:
            got = copy_run_log(self.src, self.dst, run, replace_ok=self.fresh)
        except LockTimeout as e:
            self.rep.conflicts.append((run, "?", str(e)))
            return "conflict"
        if got is None:
            return None
        if got.entries:
            self.rep.entries += got.entries
            self.rep.objects += got.objects
            self.rep.bytes += got.bytes
            moved = {n for n in set(src) | set(tgt) if src.get(n) != tgt.get(n)}
            self.deletion_moved = self.deletion_moved or any(runrefs.is_deletions_ref(n) or write_once_deletion(n) for n in moved)
            self.rep.landed.append(run)
            return "landed"
        self.rep.already.append(run)
        return "already"

    def _plan_deleted(self, run: str, src: dict, tgt: dict) -> list | None:
        """A run deleted in the source: None when the target lacks it (not sent); its deletion when
        the target has it live; nothing when the target holds the same deletion."""
        gone = runrefs.deleted_ref(run)
        sv, tv = src.get(gone), tgt.get(gone)
        if sv == tv:
            return []
        if tv is not None:
            raise _Diverged(gone, f"the target's run is deleted ({_show(tv)}), the source's {'is not' if sv is None else 'by ' + _show(sv)}")
        if runrefs.branch_ref(run, 0) not in tgt:
            return None
        assert isinstance(sv, bytes)
        have: dict = {}
        self.deletion_moved = True
        return [(self._reach(sv, run, have), [(gone, None, sv)])]


def _store_refs(store: Store) -> dict:
    """The store-level refs (not ``run/<R>/…``): on a store of logs, the store log's alone (no run log opened)."""
    if store.logs.per_run:
        log = store.logs.store_log
        log.refresh()
        return {n: v for n, v in log.refs_at("").items() if runrefs.run_of(n) is None}
    return {n: v for n, v in store.list_refs() if runrefs.run_of(n) is None}


def _show(v: Any) -> str:
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else str(v)


__all__ = ["transfer", "TransferReport", "GC_UNAVAILABLE", "label", "ObjstoreError"]
