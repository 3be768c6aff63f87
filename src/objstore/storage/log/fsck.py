"""Log-level fsck: the log's own files read again byte by byte, apart from the tables readers use.

What it owns: everything verify checks that needs the local log's files and the local engine's
internals — each segment file on its own (``check_segment``: its entries' checksum chain from its
header, its index file compared with what its entries say, the packed file a gc left), the files
as verify found them at its start (inodes and index digests, to tell a gc that rewrote them during
the pass), the bytes a reader stopped at, every entry's rules and root replayed from the first
(``replayed_breach``: in a process forked beside the segment workers when there are any, ``Replay``;
each sealed segment's index digest taken from the worker that built it from the same entries, never
from a file), the torn tail, the head witness and the checkpoint file. It knows nothing of
records: each object of an entry is handed to the ``check`` function its caller gives (the run
model's object checks, objstore.runs.verify_objects), in this process or in worker processes.

An engine reaches it through ``log_check(engine)``: ``Engine.log_files`` declares whether the
engine's log is segment files on this machine (``LocalLogCheck``) or not (``LogCheck``: the memory
engine, object storage, whose log comes whole from ``Engine.scan`` as one pseudo-segment with
nothing on disk to judge). Findings come back as ``(code, subject, where, detail)`` tuples, the
fields of a verify problem.

Invariants kept: a segment is judged only within the snapshot (its index only when the snapshot
holds the whole segment); the report is the same whether segments are checked here or in workers;
damage never stops the scan (a segment that cannot be read is one finding).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from typing import NamedTuple, cast

import blake3
import msgspec

from ...errors import CorruptLog, ObjstoreError
from . import packed, segindex
from .checkpoint import adoption
from .engine import Engine, ScanEntry, ScanProblem
from .entry import LogEntry
from .format import SEG_HEADER, SEG_MAGIC
from .local import LogEngine
from .scan import SegmentEnd, SegmentHead, scan_segment
from .segfile import _read_segment_header
from .segrows import _segment_rows
from .tables import LogState
from .witness import witness_disagreement

Finding = tuple[str, str, str, str]  # (code, subject, where, detail): the fields of a verify problem
# check(oid, otype, data, full, rows, n) -> the checked object (a plain tuple, see runs.verify_objects)
ObjectCheck = Callable[..., tuple]

_hash = blake3.blake3

PARALLEL_MIN_BYTES = 8 << 20  # below this much log, checking in worker processes costs more than it saves


class SegEntry(NamedTuple):
    entry: LogEntry
    where: str
    objects: list  # [Checked]


class SegResult(NamedTuple):
    """Everything verify needs of one segment file, compact enough to come back from a worker."""

    seg: int  # 0: an engine without segment files
    path: str
    head: SegmentHead | None
    items: list  # SegEntry and ScanProblem, in file order
    end: SegmentEnd | None
    verdict: str | None  # of its index file: "ok", "differs", "missing", or None (not judged: damage, or not sealed in the snapshot)
    built: bytes | None = None  # BLAKE3 of the index its entries give (when judged)
    rechained: bool = False  # read again, chained to the log's checksum rather than its header's
    packed: tuple | None = None  # a segment gc packed: (the index digest it says it had before, BLAKE3 of the file)


# -- one segment on its own (what a worker process does) ------------------------------------


def entry_rows(e: LogEntry) -> dict:
    """An entry's index rows (recs, prevs) by object id."""
    rows = {e.objs[r[0]][0]: r[1:] for r in e.recs}
    rows.update((e.objs[r[0]][0], r[1:]) for r in e.prevs)
    return rows


def _index_rows(e: LogEntry, objects: dict, chain: list) -> None:
    """The rows a sealed segment's index holds for entry ``e``, from its meta (as the engine builds
    them: the index must be exactly what the entries say)."""
    _segment_rows(e, objects, chain)


def _index_verdict(idx_path: str, next_path: str, seg: int, head: SegmentHead, end: SegmentEnd, objects: dict, chain: list,
                   seen: bytes | None, sealed: bool) -> tuple[str | None, bytes | None]:
    """Compare a sealed segment's index file with its entries: (verdict, BLAKE3 of the index the
    entries give). Judged only when the snapshot holds the whole segment: its seal entry was read
    (``sealed``; a format-2 segment: every entry of the file was read and the next segment's
    header starts right after it). A segment still active at the snapshot (sealed while verify
    reads, or not at all) is not judged. ``seen``: the BLAKE3 of the file when verify started,
    since a reader that notices a damaged index rewrites it, and verify's own look-ups are
    readers; None: read the file now."""
    if end.next_entry <= head.first:
        return None, None
    if not sealed and not _next_starts_at(next_path, seg, end):
        return None, None
    want = _hash(segindex.build(seg, head.first, end.next_entry - 1, end.prev, objects.values(), chain)).digest()
    if seen is None:
        seen = file_digest(idx_path)
    if not seen:
        return "missing", want
    return ("ok" if want == seen else "differs"), want


def _next_starts_at(next_path: str, seg: int, end: SegmentEnd) -> bool:
    """The next segment's header exists and starts right after ``end`` (a format-2 seal)."""
    if not end.complete:
        return False
    try:
        with open(next_path, "rb") as f:
            raw = f.read(SEG_HEADER.size)
    except FileNotFoundError:
        return False
    return len(raw) == SEG_HEADER.size and raw[:8] == SEG_MAGIC and SEG_HEADER.unpack(raw)[1:3] == (seg + 1, end.next_entry)


def file_digest(path: str) -> bytes:
    """BLAKE3 of a file's bytes; b"" if it does not exist."""
    try:
        with open(path, "rb") as f:
            return _hash(f.read()).digest()
    except FileNotFoundError:
        return b""


def check_segment(check: ObjectCheck, path: str, next_path: str, idx_path: str, seg: int, upto: int | None, full: bool,
                  idx_seen: bytes | None = None, prev: bytes | None = None) -> SegResult:
    """Check one segment file on its own (see scan_segment; ``prev``: chain its first entry to
    this checksum instead of its header's; ``check``: each object's own checks); picklable in and out."""
    head: SegmentHead | None = None
    end: SegmentEnd | None = None
    items: list = []
    objects: dict = {}
    chain: list = []
    clean = True
    sealed = False
    try:
        for item in scan_segment(path, next_path, seg, upto, prev):
            if isinstance(item, SegmentHead):
                head = item
            elif isinstance(item, SegmentEnd):
                end = item
            elif isinstance(item, ScanProblem):
                items.append(item)
                clean = False
            else:
                e = item.entry
                erows = entry_rows(e)
                checked = [check(oid, otype, data, full, erows, e.n) for oid, otype, data in item.objects]
                _index_rows(e, objects, chain)
                sealed = e.seal
                clean = clean and not any(c[3] for c in checked)
                # the parent needs the entry's number, checksum, moves, cut, length, named index: not
                # its per-object rows (checked here), which would double what crosses to it
                items.append(SegEntry(e._replace(objs=[], blocks=[], recs=[], prevs=[]), item.where, checked))
    except OSError as err:
        items.append(ScanProblem("unreadable-segment", path, f"segment {seg} cannot be read: {err.strerror or err}"))
        clean, end = False, None
    verdict, built = _index_verdict(idx_path, next_path, seg, head, end, objects, chain, idx_seen, sealed) if clean and head and end else (None, None)
    return SegResult(seg, path, head, items, end, verdict, built, packed=_packed_facts(path))


def _packed_facts(path: str) -> tuple | None:
    """(original index digest, BLAKE3 of the file) of a packed segment file, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(packed.PK_HEADER.size)
        if head[:8] != packed.PK_MAGIC or len(head) != packed.PK_HEADER.size:
            return None
        return packed.PK_HEADER.unpack(head)[5], packed.file_digest(path)
    except OSError:
        return None


def _memory_result(items: Iterator[ScanEntry | ScanProblem], full: bool, check: ObjectCheck) -> SegResult:
    """An engine without segment files (MemoryEngine): its whole log as one pseudo-segment."""
    out: list = []
    for item in items:
        if isinstance(item, ScanProblem):
            out.append(item)
        else:
            e = item.entry
            erows = entry_rows(e)
            out.append(SegEntry(e, item.where, [check(oid, t, d, full, erows, e.n) for oid, t, d in item.objects]))
    return SegResult(0, "", None, out, None, None)


def _check_segment_task(args: tuple) -> SegResult:
    return check_segment(*args)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# -- the replay of every entry's rules and root, beside the segment workers ------------------


class _FedReplay(LogEngine):
    """The engine verify replays the log with: as any reader without a checkpoint, except that a sealed segment's
    index digest (what the next segment's first entry must name) is the one a segment worker built from the same
    segment's entries, when it built one (``check_segment``: the index its entries give, byte for byte the
    rows these tables hold; the file verify judges is the same, a gc that replaced it is caught by inode):
    the index is not built a second time. ``fed(seg)`` blocks until the worker's result for ``seg`` is in."""

    def __init__(self, *a, fed: Callable[[int], bytes | None] | None = None, **k) -> None:  # type: ignore[no-untyped-def]
        self._fed = fed  # before the engine's own __init__: it replays the log
        super().__init__(*a, **k)

    def _retire_active(self) -> None:
        seg = self._seg
        if self._fed is not None and self.tables.frozen is None and seg not in self._built:
            digest = self._fed(seg)
            if digest is not None:
                self._built[seg] = digest
        super()._retire_active()


def _digests_from(conn: Connection) -> Callable[[int], bytes | None]:
    """``fed`` for _FedReplay over the parent's messages (segment, digest or None), in log order; None: no more."""
    got: dict[int, bytes | None] = {}
    ended = [False]

    def fed(seg: int) -> bytes | None:
        while seg not in got and not ended[0]:
            try:
                m = conn.recv()
            except (EOFError, OSError):
                m = None
            if m is None:
                ended[0] = True
            else:
                got[m[0]] = m[1]
        return got.pop(seg, None)
    return fed


def _replay_child(lc: LogCheck, conn: Connection, feed: Connection | None = None, parents: tuple = ()) -> None:
    """In a process forked for it: ``lc.replayed_breach()`` sent back (a tuple of int, int, str, or None).
    ``parents``: the parent's ends of the pipes, closed here (so a parent that dies is an end of ``feed``)."""
    for c in parents:
        c.close()
    try:
        got: tuple = ("ok", lc.replayed_breach(_digests_from(feed)) if feed is not None else lc.replayed_breach())
    except BaseException:  # noqa: BLE001 - any failure: the parent replays itself and raises what it raises
        got = ("failed", None)
    try:
        conn.send(got)
    finally:
        conn.close()


class Replay:
    """``LogCheck.replayed_breach`` begun: ``result()`` gives its finding; ``close()`` ends it unread."""

    def __init__(self, lc: LogCheck) -> None:
        self.lc = lc
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.feed: Connection | None = None  # to the process: each segment's index digest, as the scan takes it in
        self.digests: dict[int, bytes] = {}  # the same, for a replay here (after the scan, or if the process failed)
        self.found: tuple | None = None
        self.done = False

    @classmethod
    def now(cls, lc: LogCheck) -> Replay:
        r = cls(lc)
        r.found, r.done = lc.replayed_breach(), True
        return r

    @classmethod
    def forked(cls, lc: LogCheck) -> Replay:
        r = cls(lc)
        ends: list[Connection] = []
        try:
            ctx = multiprocessing.get_context("fork")  # the child has the engine as it is: nothing pickled in
            recv, send = ctx.Pipe(duplex=False)
            ends += (recv, send)
            fed, feed = ctx.Pipe(duplex=False)
            ends += (fed, feed)
            proc = ctx.Process(target=_replay_child, args=(lc, send, fed, (recv, feed)), daemon=True)
            proc.start()
        except (OSError, AssertionError):  # no process to be had (or this one is a daemon: no children): replayed here
            for c in ends:
                c.close()
            return r
        send.close()
        fed.close()
        r.proc, r.conn, r.feed = proc, recv, feed
        return r

    def index_digest(self, seg: int, digest: bytes | None) -> None:
        """The index digest a segment worker built for ``seg`` (None: none, or not one to take: a packed file's),
        passed to the replay; in log order, each once."""
        if digest is not None:
            self.digests[seg] = digest
        if self.feed is not None:
            try:
                self.feed.send((seg, digest))
            except OSError:  # the process is gone: its result (or the replay here instead) says so
                self.end_digests()

    def end_digests(self) -> None:
        """No more digests: the replay builds any index it still needs itself."""
        if self.feed is not None:
            try:
                self.feed.send(None)
            except OSError:
                pass
            self.feed.close()
            self.feed = None

    def result(self) -> tuple | None:
        if self.done:
            return self.found
        self.end_digests()
        if self.conn is None:
            return self.lc.replayed_breach(self.digests.get)  # here, after the scan (one process, or the fork failed)
        try:
            got = self.conn.recv()
        except (EOFError, OSError):
            got = None  # the process died (killed, out of memory)
        finally:
            self.close()
        if got is None or got[0] != "ok":
            return self.lc.replayed_breach(self.digests.get)  # replayed here: whatever failed there is raised as it always was
        return got[1]

    def close(self) -> None:
        self.end_digests()
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            if self.proc.is_alive() and self.proc.exitcode is None:
                self.proc.join(0.0)
                if self.proc.is_alive():
                    self.proc.terminate()
            self.proc.join()
            self.proc = None


# -- the log as a whole, through the engine ----------------------------------------------------


def log_check(engine: Engine, jobs: int | None = 1, earlier: LogCheck | None = None) -> LogCheck:
    """The log-level checks for ``engine``, as its ``log_files`` declares. ``jobs``: worker processes
    that check segments (None: automatic); ``earlier``: the checks of a pass a gc raced."""
    if engine.log_files:
        return LocalLogCheck(cast(LogEngine, engine), jobs, earlier)
    return LogCheck(engine, jobs, earlier)


class LogCheck:
    """An engine without log files of its own (memory, object storage): its log is one
    pseudo-segment from ``Engine.scan``; no file, witness, torn tail or checkpoint to judge."""

    def __init__(self, engine: Engine, jobs: int | None = 1, earlier: LogCheck | None = None) -> None:
        self.engine = engine
        self.jobs = jobs
        self.earlier = earlier  # a pass a gc raced: the index files it found are the ones judged
        self.files: dict[int, tuple[int, int]] = {}  # segment -> (device, inode) of its file at the start
        self.idx_seen: dict[int, bytes] = {}

    def start(self) -> None:
        """Note the files as verify starts (before the snapshot)."""

    def witness(self) -> tuple[int, bytes] | None:
        return None

    def damage(self, broken: CorruptLog | None) -> CorruptLog | None:
        """Where readers stopped at damage (``broken``: what refresh raised), if anywhere."""
        damaged = getattr(self.engine, "damaged", None)
        if broken is None and isinstance(damaged, CorruptLog):  # an engine that keeps the error itself (S3)
            broken = damaged
        return broken

    def replayed_breach(self, fed: Callable[[int], bytes | None] | None = None) -> tuple | None:
        return None

    def start_replay(self) -> Replay:
        """``replayed_breach`` begun (see LocalLogCheck.start_replay): here, now."""
        return Replay.now(self)

    def seg_path(self, seg: int) -> str:
        return ""

    def idx_path(self, seg: int) -> str:
        return ""

    def segments(self, check: ObjectCheck, bound: int | None, upto: int, full: bool) -> Generator[SegResult, None, None]:
        """Each segment's SegResult in log order: here, the whole log as one."""
        yield _memory_result(self.engine.scan(upto if bound is None else bound), full, check)

    def rechain(self, check: ObjectCheck, res: SegResult, prev: bytes, bound: int | None, full: bool) -> SegResult:
        return res

    def torn_tail(self, broken: CorruptLog | None) -> Finding | None:
        return None

    def witness_problem(self, wit: tuple[int, bytes] | None, count: int, wit_sum: bytes | None, damage_named: bool) -> Finding | None:
        return None

    def checkpoint_problem(self) -> Finding | None:
        return None

    def index_finding(self, res: SegResult) -> tuple[bool, Finding] | None:
        """(a note, not a problem; the finding) on a segment's index file, or None."""
        if res.verdict == "missing":
            return True, ("index-missing", "", "", f"segment {res.seg} has no index file; it is rebuilt when needed")
        if res.verdict == "differs":
            return False, ("damaged-index", "", "", f"index of segment {res.seg} does not match its entries (rebuild: delete the file)")
        return None

    def rewrite_findings(self, rewrites: dict, packed_files: dict, built: dict) -> tuple[list[Finding], list[Finding]]:
        """(notes, problems) of the segments gc packed (``_rewritten`` in verify)."""
        notes: list[Finding] = []
        problems: list[Finding] = []
        for seg in sorted(set(rewrites) | set(packed_files)):
            path = self.seg_path(seg)
            named = rewrites.get(seg)
            have = packed_files.get(seg)
            if named is None or have is None or have[1] != named[0]:
                if have is not None:
                    notes.append(("gc-unfinished", path, "", f"segment {seg} was packed by a gc that did not record it; run 'objstore gc' again"))
                else:
                    problems.append(("bad-rewrite", path, "", f"entry {named[2] if named else '?'} names a packed file for segment {seg}, "
                                     "but the file is not one"))
                continue
            b = built.get(seg)
            if b is not None and b != named[1]:
                problems.append(("bad-rewrite", path, "", f"entry {named[2]} names index digest {named[1].hex()} for segment {seg}, its entries give {b.hex()}"))
        return notes, problems

    def replaced(self, segs: Iterable[int]) -> list[int]:
        """Those of ``segs`` whose file is no longer the one verify found at its start."""
        return []

    def recorded_since(self, packed_files: dict, rewrites: dict, log_broken: bool) -> list[int]:
        return []

    def tail(self) -> tuple[int | None, int | None]:
        """(segment, offset) of the log's tail, where it has files."""
        return None, None

    def log_bytes(self) -> int | None:
        """Bytes of the log's segment files up to the tail (what verify's progress counts); None: no files."""
        return None


class LocalLogCheck(LogCheck):
    """A log of segment files on this machine (``LogEngine``): each file checked on its own."""

    engine: LogEngine

    def __init__(self, engine: LogEngine, jobs: int | None = 1, earlier: LogCheck | None = None) -> None:
        super().__init__(engine, jobs, earlier)

    def start(self) -> None:
        self.files = self._segment_files()  # before the index files: a gc replaces an index, then its segment
        self.idx_seen = self._index_files()

    def witness(self) -> tuple[int, bytes] | None:
        return self.engine.witness()

    def damage(self, broken: CorruptLog | None) -> CorruptLog | None:
        engine = self.engine
        damaged = engine.damaged
        if broken is None and damaged is not None and not engine.breach:
            # bad bytes, where a reader without the readable prefix would have raised: scan on to
            # name them (an entry that breaks a rule is named by the replay below)
            broken = CorruptLog(engine.seg_path(damaged[0]), f"damaged entry at offset {damaged[1]} ({damaged[2]})")
        return broken

    def replayed_breach(self, fed: Callable[[int], bytes | None] | None = None) -> tuple | None:
        """(segment, offset, reason) of the first entry that breaks a rule of the log or names a wrong
        root, found by replaying every entry's meta from the first, whatever checkpoint readers adopt
        (one forged with its tables matching a forged entry's root included); None if there is none.
        ``fed``: segment -> the digest of the index its entries give, as a segment worker built it (None:
        not judged there), taken instead of building that index again (``_FedReplay``)."""
        engine = self.engine
        # a run's log (format 6) is replayed by the rules it was written under: the store log at the cited position
        fresh = _FedReplay(engine.root, engine.policy, checkpoint=False, entry_view=engine.entry_view, run=engine.run, fed=fed)
        try:
            fresh.prefix_ok = True
            try:
                fresh.refresh()
            except CorruptLog:
                pass  # damage to the bytes of a segment: the scan names it
            return fresh.damaged if fresh.breach else None
        finally:
            fresh.close()

    def start_replay(self) -> Replay:
        """``replayed_breach`` begun: in a process of its own, forked now, when the segments are checked in
        worker processes (it is the longest piece of this process's own work, and this process then has
        the run-model checks of every object to make as the workers' results come in); else here, once the
        scan is done. The same function on the same files either way: the same finding. Either way it takes
        each sealed segment's index digest from the scan's check of that segment (``Replay.index_digest``)
        rather than build that index a second time."""
        nums = self._seg_numbers()
        if self._jobs(nums) <= 1 or max(nums, default=1) <= 1:
            return Replay(self)
        return Replay.forked(self)

    def _seg_numbers(self) -> list[int]:
        try:
            names = os.listdir(self.engine.dir)
        except OSError:
            names = []
        return [int(f[:-4]) for f in names if f.endswith(".seg") and f[:-4].isdigit()]

    def _jobs(self, nums: list[int]) -> int:
        """Worker processes the segments are checked in (1: none)."""
        jobs = self.jobs
        if jobs is None:  # automatic: workers only where they pay for their start
            jobs = _cores() if self.engine.segment_bytes(nums) >= PARALLEL_MIN_BYTES else 1
        return jobs

    def seg_path(self, seg: int) -> str:
        return self.engine.seg_path(seg)

    def idx_path(self, seg: int) -> str:
        return self.engine.idx_path(seg)

    def segments(self, check: ObjectCheck, bound: int | None, upto: int, full: bool) -> Generator[SegResult, None, None]:
        """Each segment's SegResult in log order: checked here, or in worker processes (a few at a
        time ahead of this process, which consumes them in order)."""
        engine = self.engine
        nums = self._seg_numbers()
        top = max(nums, default=1)
        tasks = [(check, engine.seg_path(s), engine.seg_path(s + 1), engine.idx_path(s), s, bound, full, self.idx_seen.get(s))
                 for s in range(1, top + 1)]
        jobs = self._jobs(nums)
        if jobs <= 1 or len(tasks) <= 1:
            for t in tasks:
                yield check_segment(*t)
            return
        done = 0  # segments yielded so far
        try:
            ctx = multiprocessing.get_context("fork")  # workers inherit the imported modules: no start-up cost
            with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
                window: deque[Future[SegResult]] = deque()
                it = iter(tasks)
                for t in it:  # a bounded window of segments in flight: results wait in memory only this long
                    window.append(pool.submit(_check_segment_task, t))
                    if len(window) >= 2 * jobs:
                        break
                while window:
                    res = window.popleft().result()
                    more = next(it, None)
                    if more is not None:
                        window.append(pool.submit(_check_segment_task, more))
                    done += 1
                    yield res
        except (OSError, BrokenProcessPool):  # no worker processes to be had (or one died): the rest here
            for t in tasks[done:]:
                yield check_segment(*t)

    def rechain(self, check: ObjectCheck, res: SegResult, prev: bytes, bound: int | None, full: bool) -> SegResult:
        """A segment whose header names another previous checksum than the log's: if its entries
        chain to the log's own, only the header is damaged (one line, and the log goes on);
        otherwise it holds other entries, checked among themselves."""
        again = check_segment(check, res.path, self.engine.seg_path(res.seg + 1), self.engine.idx_path(res.seg), res.seg,
                              bound, full, self.idx_seen.get(res.seg), prev)
        if any(isinstance(i, ScanProblem) and i.code != "garbage-after-entry" for i in again.items):
            return res
        return again._replace(rechained=True)

    def torn_tail(self, broken: CorruptLog | None) -> Finding | None:
        """The note on a torn tail (only a log on disk has one; none once readers stopped at damage)."""
        torn = self.engine.torn if broken is None else None
        if torn is None:
            return None
        seg, off, length, why = torn
        return ("torn-tail", self.engine.seg_path(seg), "", f"{length} bytes after the last complete entry at offset {off} "
                f"({why}); invisible to readers, cut by the next commit")

    def witness_problem(self, wit: tuple[int, bytes] | None, count: int, wit_sum: bytes | None, damage_named: bool) -> Finding | None:
        """The head witness against the log read (``wit``: as read before the snapshot; ``wit_sum``:
        the checksum of the entry it names; ``damage_named``: a break, damage or breach is named
        already, which explains a log short of the witness)."""
        engine = self.engine
        seen = witness_disagreement(wit, count, wit_sum) if wit is not None else None
        if seen is not None and wit is not None and engine.repair_explains(wit):
            seen = None  # a repair killed before its new witness: its note records this one
        # a log that stops at damage named above is short of the witness because of that damage
        if seen is not None and (seen[0] != "log-truncated" or not damage_named):
            return (seen[0], "log", engine._wit_path, seen[1])
        return None

    def checkpoint_problem(self) -> Finding | None:
        """A checkpoint readers would not adopt (edited, forged, or naming what the log does not
        say) changes no answer; verify still names it: ``damaged-checkpoint``."""
        engine = self.engine
        path = os.path.join(engine.dir, "checkpoint")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        why = None

        def entry_at(seg: int, off: int, n: int) -> LogEntry:
            # A writer may have checkpointed past verify's snapshot: the entry it names is in
            # the file all the same (a checkpoint is written after its entry is durable).
            if off == SEG_HEADER.size and seg > 1:
                # written at a seal, between the next segment's header and its first entry:
                # its entry is the last of the segment before (readers replay: not damage)
                return engine._entry_ending_at(seg - 1, os.path.getsize(engine.seg_path(seg - 1)), n)
            return engine._entry_ending_at(seg, off, n)

        try:
            got = adoption(data, entry_at)
            if isinstance(got, str):
                why = got
            elif got[3] is not None:
                why = self._checkpoint_rows(got[0], got[1])
        except (ValueError, KeyError, TypeError, IndexError, OSError, msgspec.DecodeError, ObjstoreError, segindex.IndexError_) as err:
            why = f"unreadable ({err})"
        if why is not None:
            return ("damaged-checkpoint", path, "", f"{why}; readers do not adopt it (delete it, or let the next writer replace it)")
        return None

    def _checkpoint_rows(self, t: LogState, seg: int) -> str | None:
        """The checkpoint's rows of the active segment against the segment's own entries."""
        engine = self.engine
        hdr = _read_segment_header(engine._fd(seg), engine.seg_path(seg))
        objects: dict = {}
        chain: list = []
        last = hdr[2] - 1
        for e in engine._segment_entries(seg, hdr[3], hdr[2]):
            if e.n > t.pos.entry:
                break
            _segment_rows(e, objects, chain, labels=False)  # a checkpoint keeps label rows apart, in the root
            last = e.n
        if last < t.pos.entry:
            return None  # the segment does not read that far (its damage is named on its own): the rows are not judged
        want = segindex.build(seg, hdr[2], t.pos.entry, t.pos.checksum, objects.values(), chain)
        if t.frozen is None or t.frozen.data[:] != want:
            return "its rows of the active segment are not the ones the segment's entries give"
        return None

    def index_finding(self, res: SegResult) -> tuple[bool, Finding] | None:
        """A sealed segment's index file must be exactly what its entries say (check_segment
        compares them; a missing one is only a note: it is rebuilt when needed)."""
        path = self.engine.idx_path(res.seg) if res.seg else ""
        if res.verdict == "missing":
            return True, ("index-missing", path, "", f"segment {res.seg} has no index file; it is rebuilt when needed")
        if res.verdict == "differs":
            if path and file_digest(path) in self._pending_gc_indexes():
                # A gc killed between putting a segment's new index and its new file in place: the
                # log does not name that index, so no reader trusts it; gc run again finishes.
                return True, ("gc-unfinished", path, "", f"segment {res.seg} has the index of its packed file beside the "
                              "old file; run 'objstore gc' again")
            return False, ("damaged-index", path, "", f"index of segment {res.seg} does not match its entries (rebuild: delete the file)")
        return None

    def _pending_gc_indexes(self) -> set:
        """The index digests a gc recorded in tmp/gc/pending before replacing files (it was killed)."""
        # a hint anyone who can write the files can craft: a digest that is not bytes is none
        return {r[2] for r in packed.read_pending(self.engine.root) if type(r[2]) is bytes}

    def _index_files(self) -> dict[int, bytes]:
        """{segment: BLAKE3 of its index file} as verify starts, before any look-up of its own can
        make the engine rewrite a damaged one (what verify judges is the file it found)."""
        out = {}
        for seg, path in self._numbered(".idx").items():
            digest = file_digest(path)
            if digest:
                out[seg] = digest
        if self.earlier is not None:
            # A pass again after a gc raced the first: a segment whose file is the same one is judged by
            # the index file the first pass found (a writer may have replaced a wrong one since).
            for seg, seen in self.earlier.idx_seen.items():
                if seg in self.files and self.earlier.files.get(seg) == self.files[seg]:
                    out[seg] = seen
        return out

    def _segment_files(self) -> dict[int, tuple[int, int]]:
        """{segment: (device, inode) of its file} as verify starts. gc puts a rewritten segment in
        place by renaming over it a file it wrote in tmp/ while the old one was still there, so a
        segment whose inode changed during the pass is one a gc rewrote (``replaced``)."""
        out = {}
        for seg, path in self._numbered(".seg").items():
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[seg] = (st.st_dev, st.st_ino)
        return out

    def _numbered(self, ext: str) -> dict[int, str]:
        """{segment: path} of the log directory's files named <number><ext> (none if it cannot be listed)."""
        engine = self.engine
        try:
            names = os.listdir(engine.dir)
        except OSError:
            return {}
        n = len(ext)
        return {int(f[:-n]): os.path.join(engine.dir, f) for f in names if f.endswith(ext) and f[:-n].isdigit()}

    def recorded_since(self, packed_files: dict, rewrites: dict, log_broken: bool) -> list[int]:
        """The packed files read that no rewrite entry of the snapshot names and the log names now: a
        gc in its last step when verify began, its rewrite entry committed after the snapshot (not
        a gc that was killed, whose files no entry names: ``gc-unfinished``)."""
        unnamed = [seg for seg, (_orig, digest) in packed_files.items() if rewrites.get(seg, (None,))[0] != digest]
        if not unnamed or log_broken:  # a break: the rewrites were not read
            return []
        try:
            self.engine.refresh()
        except CorruptLog:
            return []
        packs = self.engine.tables.packs
        return [seg for seg in unnamed if packs.get(seg) == packed_files[seg][1]]

    def replaced(self, segs: Iterable[int]) -> list[int]:
        out = []
        for seg in segs:
            was = self.files.get(seg)
            if was is None:
                continue  # begun after the start (a seal): not a rewrite
            try:
                st = os.stat(self.engine.seg_path(seg))
            except OSError:
                continue  # gone: the scan names a missing segment
            if (st.st_dev, st.st_ino) != was:
                out.append(seg)
        return out

    def tail(self) -> tuple[int | None, int | None]:
        return self.engine._seg, self.engine._off

    def log_bytes(self) -> int | None:
        engine = self.engine
        total = engine._off
        for n in range(1, engine._seg):
            try:
                total += os.path.getsize(engine.seg_path(n))
            except OSError:
                pass
        return total
