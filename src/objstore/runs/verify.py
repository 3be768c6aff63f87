"""Verify (fsck): prove the store by re-reading the log, and name what is wrong and where.

Verify reads one snapshot — the log position at its start — and nothing after
it, so it is consistent while others write. It reads every segment once,
sequentially, independently of the engine's in-memory tables, and checks:

1. the log: segment headers continue the chain, every entry parses and its
   checksum chains to the previous one (flipped bytes, truncation, garbage,
   missing or replaced segments);
2. every object: re-hashed against its id, header parsed, structured payloads
   decoded strictly (canonical re-encoding) and checked against their schema
   (``malformed-object``);
3. every ref move: its old value is what the ref held;
4. every run's chains, in log order: a branch's records arrive with
   contiguous LSNs, each naming the previous as parent; branch 0 starts with
   ``run_started``, every other branch at its fork object; each fork object
   agrees with its parent branch (parent record at the parent LSN, parent head
   on that branch) and its compensation flags equal
   ``records.compensation_for`` over the records;
5. the final refs name existing objects of the right type; each run's live
   ref names one of its branches; branch heads are the chains' last records;
6. the state cache: a branch row that claims the head verify sees must
   equal a cold re-fold (rows behind are cache misses; rows beyond the
   snapshot are ignored);
7. with ``anchor``: the log still holds the anchored history as a prefix;
8. recorded deletions (issue 17): each deletion object's schema, signature, signer's authority and
   covered rows (``bad-deletion``), bodies gc removed that no deletion covers (``missing-body``);
   a redacted blob is a note;
9. format 5 (issue 18): records of ``x.`` kinds against their schema objects (``malformed-object``), their
   ref fields (``missing-object``), copies' cross-run forks (``bad-fork``), and a labelled run of generation
   g ≥ 1 only beside deleted runs of the generations before it (``bad-labels``).

Torn tails and past cuts are *notes*: a crash verifies clean.

How it reads: each segment file is checked on its own (``check_segment``: its entries' checksum
chain from its header, every object re-hashed, decoded and schema-checked, its index file compared
with what its entries say), in worker processes when there are several cores (``jobs``; env
``OBJSTORE_VERIFY_JOBS``; 1: all in this process, with the same report); this process then chains
the segments together and makes every check that spans entries (refs, chains, forks, the state
cache) from the compact results, in log order. Every entry's rules and root are replayed from the first
entry by a fresh engine (objstore.storage.log.fsck ``replayed_breach``): with workers, in a process forked
for it beside them, fed each sealed segment's index digest as the scan takes in that segment's result;
with one process, here after the scan; either way no sealed index is built twice. Damage never stops the report: a break in the log
ends the cross-entry checks there (they would only echo it), the later segments are still checked
each on its own, and a note says where the checks that span entries stopped. The snapshot is the
log position at the start: a segment sealed while verify reads is judged only if every entry of it
is inside the snapshot.

Three layers, one module each: the log's bytes and files (objstore.storage.log.fsck: segment files,
checksums, index files, the witness, torn tails, the checkpoint file, every entry's rules replayed),
each object on its own (objstore.runs.verify_objects), and the run model over them
(objstore.runs.verify_runmodel: chains, forks, refs, deletions, labels, the state cache). This module
drives one pass: it chains the segments together in log order, hands each checked object to the run
model, and checks anchors (objstore.runs.anchors); and it holds the one-run proof (``verify_run``:
every branch of a run re-folded cold against its state cache). Problems and the report:
objstore.runs.verify_report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from ..errors import CorruptLog, InvalidInput, ObjstoreError, StorageOSError
from ..storage import authority, codec
from ..storage.fileutil import no_gc
from ..storage.gclock import gc_lock
from ..storage.log.engine import ScanProblem
from ..storage.log.entry import LogEntry
from ..storage.log.format import ZERO
from ..storage.log.fsck import LogCheck, Replay, SegEntry, SegResult, log_check
from ..storage.log.scan import chain_break
from .anchors import anchor_problem, parse_anchor
from .refold import refold_branch
from .verify_logs import verify_logs
from .verify_objects import check_object
from .verify_report import Problem, Report
from .verify_runmodel import RunModelChecks

if TYPE_CHECKING:
    from ..storage.log.engine import Engine
    from ..storage.store import Store
    from .api import RunLog
    from .chain import View

JOBS_ENV = "OBJSTORE_VERIFY_JOBS"


def resolve_jobs(jobs: int | None) -> int | None:
    """Worker processes asked for: ``jobs``, else $OBJSTORE_VERIFY_JOBS, else None (automatic:
    one per core for a log above PARALLEL_MIN_BYTES)."""
    if jobs is None:
        text = os.environ.get(JOBS_ENV, "").strip()
        if not text:
            return None
        if not text.isdigit() or int(text) < 1:
            raise InvalidInput(f"{JOBS_ENV} must be a whole number of processes, 1 or more: {text!r:.40}")
        jobs = int(text)
    if type(jobs) is not int or jobs < 1:
        raise InvalidInput(f"verify jobs must be 1 or more: {jobs!r:.40}")
    return jobs


def verify(log: RunLog, *, check_state: bool = True, anchor: str | None = None, anchors: Iterable[str] = (),
           progress: Callable[[int, int], None] | None = None, jobs: int | None = None) -> list[Problem]:
    """The problems found (empty: the store is sound)."""
    return verify_report(log, check_state=check_state, anchor=anchor, anchors=anchors, progress=progress, jobs=jobs).problems


def verify_report(log: RunLog, *, check_state: bool = True, anchor: str | None = None, anchors: Iterable[str] = (),
                  progress: Callable[[int, int], None] | None = None, jobs: int | None = None, runs: Iterable[str] | None = None) -> Report:
    """The full report. ``anchor``/``anchors``: tokens whose history the log must still hold (each
    one checked; all parsed before anything is read). ``jobs``: worker processes that check segments
    (1: none, all in this process; None: $OBJSTORE_VERIFY_JOBS, else one per core once the log passes
    PARALLEL_MIN_BYTES). The report is the same whatever ``jobs`` is. ``runs``: on a store with a log per run,
    prove the store log and these runs' logs only (``verify RUN``); one log holds every run, so it is read whole."""
    tokens = ([anchor] if anchor is not None else []) + list(anchors)
    n_jobs = resolve_jobs(jobs)
    if log.store.logs.per_run:
        return verify_logs(log, verify_log, check_state=check_state, tokens=tokens, progress=progress, jobs=n_jobs,
                           runs=set(runs) if runs is not None else None)
    want = [parse_anchor(t) for t in tokens]
    return verify_log(log, log.store.engine, None, check_state, want, progress, n_jobs)


def verify_log(log: RunLog, engine: Engine, run: str | None, check_state: bool, want: list[tuple[int, bytes]],
               progress: Callable[[int, int], None] | None, n_jobs: int | None, watch: Iterable[int] = (),
               seen: dict | None = None) -> Report:
    """One log proved on its own (``engine``: the store's one log, its store log, or run ``run``'s log).
    ``watch``: entries whose checksums go into ``seen["sums"]`` (with ``seen["count"]``, the last entry of
    the unbroken log read), for anchors judged by the caller."""
    with no_gc():
        first = _Verifier(log, progress, n_jobs, engine=engine, run=run)
        first.watch = set(watch)
        try:
            return first.run(check_state, want, seen)
        except _Rewritten as raced:
            segs = raced.segs
        # A gc put rewritten segment files in place during the pass: what was read may mix two
        # versions of a segment (its old index and its new file) or bodies removed for a deletion
        # after the snapshot. Pass again with gc held off (the gc lock, shared, as a backup holds
        # it): the new snapshot holds the rewrite entry. Rare (gc is explicit), so the first pass
        # takes no lock at all.
        with ExitStack() as held:
            root = log.store.root
            if root is not None:
                try:
                    held.enter_context(gc_lock(root, shared=True, what="verify"))
                except StorageOSError:
                    pass  # a store this process cannot lock (read-only): no gc can run on it from here either
            again = _Verifier(log, progress, n_jobs, earlier=first, engine=engine, run=run)
            again.watch = first.watch
            report = again.run(check_state, want, seen)
        report.notes.append(Problem("verified-again", "log", "", f"gc rewrote segment{'s' if len(segs) > 1 else ''} {_span(segs)} "
                                    f"during the pass; verified again, gc held off, up to entry {report.entries}"))
        return report


class _Rewritten(Exception):
    """A segment file verify found at its start was replaced during the pass (by a gc's rewrite)."""

    def __init__(self, segs: list[int]) -> None:
        super().__init__(segs)
        self.segs = segs


def progress_totals(store: Store) -> tuple[int | None, int | None]:
    """(objects, bytes) a full ``verify`` will read, for a progress bar; None where unknown (an
    in-memory store). ``verify_report(progress=f)`` calls ``f(objects_done, bytes_done)`` after
    each entry, bytes being the entries' lengths in the segment files (over every log of a store with
    a log per run, one run's log open at a time)."""
    objects = size = 0
    for run, engine in store.logs.all_logs():
        try:
            engine.refresh()
            total = log_check(engine).log_bytes()
            if total is None:
                return None, None
            objects += sum(1 for _ in engine.iter_ids())
            size += total
        finally:
            if run is not None:
                store.logs.release(run)
    return objects, size


class _Verifier(RunModelChecks):
    """One pass: the log read segment by segment in log order (objstore.storage.log.fsck), each
    checked object handed to the run model (RunModelChecks), then the checks after the scan."""

    def __init__(self, log: RunLog, progress: Callable[[int, int], None] | None, jobs: int | None = 1,
                 earlier: _Verifier | None = None, engine: Engine | None = None, run: str | None = None) -> None:
        super().__init__(log, engine, run)
        self.earlier = earlier  # a pass a gc raced: the index files it found are the ones judged
        self.lc: LogCheck = log_check(self.engine, jobs, earlier.lc if earlier is not None else None)
        self.progress = progress
        self.entry_sums: dict[int, bytes] = {}
        self.seg_problems = 0  # problems found before the segment being read
        self.built: dict[int, bytes] = {}  # segment -> BLAKE3 of the index its entries give
        self.replay: Replay | None = None  # every entry's rules and root replayed (LogCheck.start_replay)
        self.packed: dict[int, tuple] = {}  # segment gc packed -> (its original index digest, BLAKE3 of its file)
        self.rewrites: dict[int, tuple[bytes, bytes, int]] = {}  # segment -> (file digest, index digest, entry) the last rewrite names
        self.log_broken = False
        self.bound: int | None = None
        self.count = 0  # the last entry of the unbroken log read
        self.checksum = ZERO  # its checksum
        self.n_objects = 0
        self.n_bytes = 0  # of the entries read (what progress_totals' bytes counts)
        self.wit_sum: bytes | None = None  # the checksum of the entry the head witness names
        self.watch: set[int] = set()  # more entries whose checksums are kept (anchors judged by the caller)

    def run(self, check_state: bool, want: list[tuple[int, bytes]], seen: dict | None = None) -> Report:
        # a run's log (format 6) is folded against that run's own state file, and the store log holds no run's records:
        # asking whether any run has a state file walks the whole catalog (verify RUN then listed every run)
        if self.own_run is not None:
            self.folding = check_state and self.log.state.exists(self.own_run)
        else:
            self.folding = check_state and not self.store.logs.per_run and self.log.state.exists()
        engine = self.engine
        # verify lists what it finds: it reads the readable prefix of a damaged log (the damage
        # itself is reported below), where every other reader stops with CorruptLog.
        was, engine.prefix_ok = engine.prefix_ok, True
        try:
            report = self._run(check_state, want)
        finally:
            engine.prefix_ok = was
        if seen is not None:
            seen.update(count=self.count, sums=dict(self.entry_sums), bytes=self.n_bytes)
        return report

    def _run(self, check_state: bool, want: list[tuple[int, bytes]]) -> Report:
        wanted = {n for n, _ in want} | self.watch  # the entries whose checksums the anchors name
        engine = self.engine
        self.lc.start()
        # The witness first, then the log: a witness never leads the log it was written after, so
        # one read before the snapshot can only lag it (a writer may commit in between).
        wit = self.lc.witness()
        try:
            pos, broken = engine.refresh(), None
        except CorruptLog as err:  # damage before the log's end (readers stop there): scan on to name it
            pos, broken = engine.position(), err
        broken = self.lc.damage(broken)
        # verify proves the log from its first entry: readers open through a checkpoint, and someone
        # who forged an entry can forge a checkpoint to match its root. So every entry's rules and
        # root are replayed from the first, apart from the engine readers use: begun now (beside the
        # segment workers, when there are any), its finding taken once the scan is done.
        replay = self.replay = self.lc.start_replay()
        try:
            upto = self.upto = pos.entry
            self._erasures()
            # The snapshot bounds the scan; once readers stop at damage there is no snapshot to keep,
            # so the segments after it are read to their ends (each on its own).
            self.bound = upto if broken is None else None
            apart = self._scan(self.bound, wanted, wit)
            breach = replay.result()
        finally:
            replay.close()
        self._log_end(apart, upto, broken, breach, wit)
        if not self.log_broken:  # otherwise refs and chains would only echo the break
            self._phase("references", self._references)
            self._phase("refs", self._refs)
            self._phase("chains", self._chains_end)
            self._phase("labels", self._generations)
            self._phase("deletions", self._deletions)
            self._phase("rewrites", self._rewritten)
        for w in want:
            bad = anchor_problem(w, self.count, self.entry_sums)
            if bad is not None:
                self.add(bad[0], bad[1], "", bad[2])
        if self.folding and not self.problems:
            self.problems.extend(self.fold_failures)
        if self.folding and not self.problems:
            self._phase("state", self._check_state)
        # the checks after the scan read through the engine too; and a gc whose files were in place
        # before the start may have committed their rewrite entry after the snapshot. (A second pass
        # holds gc off: it reports what it read.)
        raced = (self.lc.replaced(self.lc.files) or self.lc.recorded_since(self.packed, self.rewrites, self.log_broken)) if self.earlier is None else None
        if raced:
            raise _Rewritten(raced)
        return Report(self.problems, self.notes, self.count, self.n_objects, self.checksum)

    def _scan(self, bound: int | None, wanted: set[int], wit: tuple[int, bytes] | None) -> list[int]:
        """Read every segment in log order, chaining each to the one before; returns the segments
        after a break (checked each on its own)."""
        expect: tuple[int, bytes] | None = (1, ZERO)  # (entry, checksum) the next segment must continue from
        last: SegResult | None = None
        apart: list[int] = []  # segments after a break, checked each on its own
        segments = self.lc.segments(check_object, bound, self.upto, self.folding)
        for res in segments:
            if self.earlier is None and self.lc.replaced([res.seg]):
                segments.close()  # a pass abandoned midway stops its workers
                raise _Rewritten(self.lc.replaced(self.lc.files))
            head = res.head
            if head is not None and bound is not None and head.first > bound and head.seg == res.seg:
                break  # a segment begun after the snapshot (a seal during this scan): not this verify's
            self.seg_problems = len(self.problems)
            res, placed = self._place(res, expect)
            expect = None
            if self.log_broken and res.seg:
                apart.append(res.seg)
            for item in res.items:
                self._item(item, wanted, wit)
            self._check_index(res)
            if res.built is not None:
                self.built[res.seg] = res.built
            if res.seg and self.replay is not None:  # the replay beside the workers takes this digest rather than build the index again
                self.replay.index_digest(res.seg, res.built if res.packed is None and not res.rechained else None)
            if res.packed is not None:
                self.packed[res.seg] = res.packed
            if placed and res.end is not None and res.end.complete and not any(isinstance(i, ScanProblem) and i.code != "garbage-after-entry" for i in res.items):
                expect = (res.end.next_entry, res.end.prev)
            last = res
        if last is not None and last.seg and not self.log_broken and last.end is not None and (bound is None or last.end.next_entry <= bound):
            nxt = last.end.next_entry
            self.add("missing-segment", self.lc.seg_path(last.seg + 1), "", f"segment {last.seg + 1} is missing; the log ends at entry {nxt - 1}")
            self.log_broken = True
        return apart

    def _place(self, res: SegResult, expect: tuple[int, bytes] | None) -> tuple[SegResult, bool]:
        """A segment's header against the log before it: (the segment, read again chained to the
        log's checksum if only its header's copy differs; whether its header puts it here, else
        nothing after it is chained to it)."""
        head = res.head
        placed = True
        if head is not None and expect is not None and (head.seg, head.first) == (res.seg, expect[0]) and head.prev != expect[1]:
            res = self.lc.rechain(check_object, res, expect[1], self.bound, self.folding)
        if head is not None:
            if expect is not None and (head.seg, head.first, head.prev) != (res.seg, *expect):
                self.add("broken-log-chain", res.path, "", chain_break(res.seg, expect[0], expect[1], head))
                if not res.rechained:  # else only the header's copy of the checksum is damaged: its entries chain on
                    self.log_broken, placed = True, head.seg == res.seg and head.first == expect[0]
            elif expect is None and head.seg != res.seg:
                self.add("broken-log-chain", res.path, "", f"segment {res.seg} is out of place (its header says segment {head.seg}, first entry {head.first})")
                placed = False
        return res, placed

    def _item(self, item: SegEntry | ScanProblem, wanted: set[int], wit: tuple[int, bytes] | None) -> None:
        """One scan item: a problem the segment's scan found, or an entry with its checked objects."""
        if isinstance(item, ScanProblem):
            detail = item.detail
            if item.code == "missing-segment" and not self.log_broken:
                detail = f"{detail}; the log ends at entry {self.count}"
            self.add(item.code, item.where, "", detail)
            # garbage after a sealed segment's last entry breaks nothing: the entries before it
            # are whole and the next segment is chained to them (checked above)
            self.log_broken = self.log_broken or item.code != "garbage-after-entry"
            return
        e = item.entry
        linked = not self.log_broken  # entries after a break are checked on their own only
        if linked:
            self.count = e.n
            self.checksum = e.checksum
            if e.n in wanted:
                self.entry_sums[e.n] = e.checksum
            if wit is not None and e.n == wit[0]:
                self.wit_sum = e.checksum
        if e.cut:
            seg, off, length, digest = e.cut
            self.notes.append(Problem("past-cut", f"entry {e.n}", item.where,
                                      f"its writer cut a torn tail of {length} bytes at segment {seg} offset {off} (blake3 {digest})"))
        self.entry_ids = {c[0] for c in item.objects if c[2]}
        self.entry_types = {c[0]: c[1] for c in item.objects}
        # blobs first: a removed blob is known as removed before a live record of the same
        # entry (records come first in an entry) is checked for naming it (two comprehensions, each in
        # entry order: what a stable sort on "not a blob" gives, without a key function call per object)
        objs = item.objects
        blob = codec.BLOB
        self.n_objects += len(objs)
        for c in [c for c in objs if c[1] == blob] + [c for c in objs if c[1] != blob]:
            self._object(c, item.where, linked)
        if linked:
            self._moves(e, item.where)
            if e.idx:  # the first entry of a segment names the index of the one sealed before it
                self._named_index(e, item.where)
            for seg_rw, file_digest, idx_digest in e.rw or ():
                self.rewrites[seg_rw] = (file_digest, idx_digest, e.n)
        self.n_bytes += e.length
        if self.progress:
            self.progress(self.n_objects, self.n_bytes)

    def _log_end(self, apart: list[int], upto: int, broken: CorruptLog | None, breach: tuple | None,
                 wit: tuple[int, bytes] | None) -> None:
        """What the log as a whole shows once read: where the checks that span entries stopped, a
        breach, damage or truncation, a torn tail, the head witness, the checkpoint file."""
        count = self.count
        if apart:
            self.notes.append(Problem("checked-apart", "log", "", f"refs, chains and forks are checked up to entry {count} only; "
                                      f"segment{'s' if len(apart) > 1 else ''} {_span(apart)} after the break checked each on its own"))
        if breach is not None:
            # an entry every byte of which is sound, that breaks a rule of the log (or its root); one
            # that moves a deletion ref its signer had no authority for is named as the deletion it is
            code = "bad-deletion" if breach[2].partition(": ")[2].startswith(authority.BREACH) else "corrupt-entry"
            self.add(code, self.lc.seg_path(breach[0]), "", f"{breach[2].split(': ', 1)[0]} at offset {breach[1]}: {breach[2]}")
        if broken is not None and not self.problems:
            self.add("corrupt-log", broken.args[0], "", broken.args[1])
        if count < upto and not self.problems:
            self.add("truncated-log", "log", "", f"the log ends at entry {count}, the snapshot holds {upto}")
        torn = self.lc.torn_tail(broken)
        if torn is not None:
            self.notes.append(Problem(*torn))
        seen = self.lc.witness_problem(wit, count, self.wit_sum, self.log_broken or broken is not None or breach is not None)
        if seen is not None:
            self.add(*seen)
        damaged_checkpoint = self.lc.checkpoint_problem()
        if damaged_checkpoint is not None:
            self.add(*damaged_checkpoint)

    def _phase(self, name: str, fn: Callable[[], None]) -> None:
        """Run one after-scan phase; a read that fails in it is one more problem, never an abort."""
        try:
            fn()
        except ObjstoreError as err:
            self.add("verify-incomplete", name, "", f"this check stopped: {str(err).splitlines()[0] if str(err) else type(err).__name__}")

    def _check_index(self, res: SegResult) -> None:
        """A sealed segment's index file must be exactly what its entries say (the log check
        compares them; a missing one is only a note: it is rebuilt when needed)."""
        if len(self.problems) != self.seg_problems:
            return  # damage in the segment is reported already; its index would differ for that reason
        found = self.lc.index_finding(res)
        if found is not None:
            note, finding = found
            if note:
                self.notes.append(Problem(*finding))
            else:
                self.add(*finding)

    def _named_index(self, e: LogEntry, where: str) -> None:
        """The digest an entry names for a sealed segment's index must be the index that segment's
        entries give (readers adopt only the file with that digest)."""
        named = e.idx or [0, b""]
        seg, digest = named[0], named[1]
        # A segment gc packed no longer has the layout that index described: its file carries the
        # digest it had (its own entries' index is checked against the rewrite entry instead).
        built = self.packed[seg][0] if seg in self.packed else self.built.get(seg)
        if built is not None and built != digest:
            self.add("bad-index-digest", f"entry {e.n}", where, f"names index digest {bytes(digest).hex()} for segment {seg}, "
                     f"its entries give {built.hex()}")

    def _rewritten(self) -> None:
        """Each segment a rewrite entry names is that file, and its index the one its entries give; a
        packed file no rewrite names (a gc killed before its rewrite entry) is a note: gc finishes it."""
        notes, problems = self.lc.rewrite_findings(self.rewrites, self.packed, self.built)
        self.notes.extend(Problem(*n) for n in notes)
        for p in problems:
            self.add(*p)


def _span(nums: list[int]) -> str:
    return f"{nums[0]}..{nums[-1]}" if len(nums) > 1 else str(nums[0])


# -- one run: its branches re-folded cold against the state cache ----------------------------

def check_state_cache(log: RunLog, runs: list[str] | None = None) -> list[Problem]:
    """Cached branches that claim the head verify sees must confirm against the log and
    serialize like a cold re-fold."""
    out: list[Problem] = []
    if not log.state.exists():
        return out  # no cache: nothing can disagree with the log
    for run in runs if runs is not None else log.runs():
        try:
            view = log.view(run)
            cached = log.state.cached(run)
            reflects = log.state.cached_deletions(run)
        except ObjstoreError:
            continue
        for b, (head, _tip, state) in cached.items():
            if view.heads.get(b) != head or reflects.get(b) != log.state_deletions(view):
                continue  # behind (a cache miss) or beyond this snapshot: not this verify's business
            if state is None:
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path_of(run), "cached folded state is damaged (not a folded state)"))
                continue
            why = log.state.diverged(log, view, b)
            if why is not None:
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path_of(run), f"cached rows disagree with the log: {why}"))
                continue
            cold = _cold(log, view, b)
            if codec.canonical_json(cold[0]) != codec.canonical_json(state):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path_of(run), "cached folded state differs from the cold re-fold"))
            elif cold[1] != log.state.attempt_fragments(run, b):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path_of(run), "cached attempt views differ from the cold re-fold"))
    return out


def _cold(log: RunLog, view: View, b: int) -> tuple[dict, list[bytes]]:
    state, _, views = refold_branch(log, view, b)
    return state, [codec.canonical_json(v) for v in views]


def verify_run(log: RunLog, run: str) -> tuple[dict, list[Problem]]:
    """What ``verify RUN`` proves of one run beyond the store-wide proof: every branch re-folded from
    the raw objects and its state cache brought up to date and compared with that re-fold
    (``state-diverged`` otherwise). Returns ({run, branches, records, inherited}, problems)."""
    view = log.view(run)
    log.state.refresh(log, view, None)
    records = inherited = 0
    for b in sorted(view.heads):
        for r in log.iter_lineage(view, b):
            if r.run == run and r.branch == b:
                records += 1
            else:
                inherited += 1
    return {"run": run, "branches": len(view.heads), "records": records, "inherited": inherited}, check_state_cache(log, [run])


def assert_refold_identical(log: RunLog, run: str, branches: list[int] | None = None) -> None:
    """Raise AssertionError unless the cached state of each branch equals a cold re-fold."""
    view = log.view(run)
    log.state.refresh(log, view, branches)
    bad = check_state_cache(log, [run])
    if bad:
        raise AssertionError("; ".join(p.line() for p in bad))
