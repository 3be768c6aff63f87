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
cache) from the compact results, in log order. Damage never stops the report: a break in the log
ends the cross-entry checks there (they would only echo it), the later segments are still checked
each on its own, and a note says where the checks that span entries stopped. The snapshot is the
log position at the start: a segment sealed while verify reads is judged only if every entry of it
is inside the snapshot.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack
from typing import TYPE_CHECKING, NamedTuple

import blake3
import msgspec

from ..errors import BodyRemoved, CorruptLog, IntegrityError, InvalidInput, ObjstoreError, StorageOSError, UnknownObjectType
from ..storage import authority, codec, runrefs
from ..storage import engine as E
from ..storage.engine import SEG_HEADER, SEG_MAGIC, ZERO, Entry, ScanEntry, ScanProblem
from ..storage.fileutil import no_gc
from ..storage.gclock import gc_lock
from ..storage.log import packed, segindex
from ..storage.log.checkpoint import adoption
from ..storage.log.local import LogEngine
from ..storage.log.scan import HashedLarge, SegmentEnd, SegmentHead, chain_break, scan_segment
from ..storage.log.segfile import _read_segment_header
from ..storage.log.segrows import _segment_rows
from ..storage.log.witness import witness_disagreement
from . import kinds as K
from . import labels as RL
from . import records as R
from .fold import apply, empty_state, fold
from .state import attempt_view, refold_branch

if TYPE_CHECKING:
    from ..storage.store import Store
    from .chain import View
    from .runlog import RunLog

ANCHOR_PREFIX = "objstore-anchor:1:"


_MOD = 1 << 64


def _digest(step: int, attempt: int, lsn: int, view: bytes) -> int:
    """One attempt view's share of a branch's order-free digest (a sum of hashes). Both sides
    are hashed in this process, so Python's keyed SipHash is enough to tell them apart."""
    return hash((step, attempt, lsn, bytes(view)))


class Problem(NamedTuple):
    code: str
    subject: str  # object id (hex), ref name, run, or segment path
    where: str  # file path, or "" if none
    detail: str

    def line(self) -> str:
        tail = f" [{self.where}]" if self.where else ""
        return f"{self.code} {self.subject}: {self.detail}{tail}"

    def as_dict(self) -> dict:
        return self._asdict()


class Report(NamedTuple):
    problems: list
    notes: list  # Problem-shaped notes (torn tail, past cuts): not failures
    entries: int  # entries verified (the snapshot)
    objects: int
    checksum: bytes


_EXPECT = {"parent": (codec.RECORD, codec.FORK), "prompt": (codec.BLOB,), "output": (codec.BLOB,), "content": (codec.BLOB,),
           "parent_record": (codec.RECORD,), "parent_head": (codec.RECORD, codec.FORK)}
_hash = blake3.blake3

PARALLEL_MIN_BYTES = 8 << 20  # below this much log, checking in worker processes costs more than it saves
JOBS_ENV = "OBJSTORE_VERIFY_JOBS"


# -- one segment on its own (what a worker process does) ------------------------------------


# One object after the per-segment checks, as a plain tuple (it crosses a process boundary 10^5
# times: a tuple pickles and unpickles several times faster than a NamedTuple or a dict):
#   (oid, otype: the type its entry names, readable: its block was read, problems: ((code, detail[,
#    subject]), ...) in the order found, damaged, t: the type its header names or None, value)
# value: a record's slim row (_slim_record) or, when the state is folded, its payload; a fork's
# payload; a journal/segment/grant object's object_refs; None for a blob or a damaged object.
Checked = tuple


class SegEntry(NamedTuple):
    entry: Entry
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


def _slim_record(p: dict) -> tuple:
    """What the chain checks read of a record (run, branch, LSN, parent, kind, its blob refs, the
    body of an intent), as a tuple: the rest stays in the worker."""
    body = p["body"]
    if K.is_ext(p["kind"]):
        body = dict(body, **{_SCHEMA: p.get("schema")})  # checked against its schema after the scan reads it
    elif p["kind"] == R.RUN_STARTED and "labels" in p:
        body = {_LABELS: p["labels"]}  # a labelled run's generation is checked after the scan
    elif p["kind"] not in (R.INTENT, R.INTENT_COMMITTED):
        body = {f: body[f] for f in R.BLOB_FIELDS if f in body}
    return (p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], body)


_BODY_REMOVED = "body-removed"  # not a problem by itself: a deletion must cover it (_Verifier._deletions)
_REMOVED = b"\x00" * 32  # the stand-in deletion id of a removed record's header-only body, until verify knows it
_REFS = "_refs"  # a removed record's blob refs, from its entry's row
_SCHEMA = "\x00schema"
_LABELS = "\x00labels"  # a labelled run_started's labels, in its slim row  # an x. record's schema id, beside its body in the slim row (no body field has a NUL)


def _record_dict(v: tuple) -> dict:
    return {"run": v[0], "branch": v[1], "lsn": v[2], "parent": v[3], "kind": v[4], "body": v[5]}


def check_object(oid: bytes, otype: str, data: bytes | HashedLarge | IntegrityError | BodyRemoved, full: bool,
                 rows: dict | None = None, n: int = 0) -> Checked:
    """Re-hash one object, decode it strictly and check its schema, and check its entry's index row
    for it (``rows``: the entry's rows by object id; entry ``n``); nothing outside its entry."""
    if isinstance(data, IntegrityError):
        return (oid, otype, False, (("corrupt-object", data.args[2]),), True, None, None)
    if isinstance(data, BodyRemoved):
        # gc removed the body (verify decides after the scan whether a deletion covers it); a
        # record's header stays in its entry's row: the chain checks go on from it, header-only
        row = rows.get(oid) if rows is not None else None
        if otype == codec.RECORD and row is not None and len(row) >= 7:
            body = dict(row[6]) if isinstance(row[6], dict) else {}  # an intent's facts: compensation is checked from them
            body.update({R.DELETED_FIELD: _REMOVED, _REFS: list(row[5] or ())})
            v = (row[0], row[1], row[2], row[3], row[4], body)
            return (oid, otype, False, ((_BODY_REMOVED, ""),), False, codec.RECORD, _record_dict(v) if full else v)
        return (oid, otype, False, ((_BODY_REMOVED, ""),), False, codec.BLOB if otype == codec.BLOB else None, None)
    if isinstance(data, HashedLarge):  # a large blob, hashed while streamed (never held whole)
        if data.digest != oid:
            return (oid, otype, True, (("corrupt-object", "hash mismatch (content does not match id)"),), True, None, None)
        return (oid, otype, True, (), False, codec.BLOB, None)
    if _hash(data).digest() != oid:
        return (oid, otype, True, (("corrupt-object", "hash mismatch (content does not match id)"),), True, None, None)
    try:
        t, value = codec.decode(data, oid, strict=True)
    except UnknownObjectType as e:
        return (oid, otype, True, (("unknown-type", f"unknown object type {e.args[2]!r}"),), True, None, None)
    except IntegrityError as e:
        return (oid, otype, True, (("corrupt-object", e.args[2]),), True, None, None)
    problems: tuple = (("corrupt-entry", f"entry says {otype}, object is a {t}"),) if t != otype else ()
    if t == codec.BLOB:
        return (oid, otype, True, problems, False, t, None)
    bad = R.schema_problem(t, value)
    if bad is not None:
        return (oid, otype, True, (*problems, ("malformed-object", bad)), True, t, None)
    if rows is not None:
        row = _meta_row(oid, t, data, value, rows, n)
        if row is not None:
            problems = (*problems, row)
    if t == codec.RECORD:
        value = value if full else _slim_record(value)
    elif t != codec.FORK:
        value = R.object_refs(t, value)
    return (oid, otype, True, problems, False, t, value)


def _meta_row(oid: bytes, otype: str, data: bytes, value: dict, rows: dict, n: int) -> tuple | None:
    """The entry's index row for an object (what readers build every table from) must say what
    the object itself says: ``bad-meta-row entry <n> <id>`` otherwise."""
    if otype != codec.RECORD and otype not in E.CHAIN_TYPES:
        return None
    want = E.object_facts(otype, data, value, oid)
    got = rows.get(oid)
    if got != want:
        return ("bad-meta-row", f"the entry's index row says {_row(got)}, the {otype} itself gives {_row(want)}", f"entry {n} {oid.hex()}")
    return None


def entry_rows(e: Entry) -> dict:
    """An entry's index rows (recs, prevs) by object id."""
    rows = {e.objs[r[0]][0]: r[1:] for r in e.recs}
    rows.update((e.objs[r[0]][0], r[1:]) for r in e.prevs)
    return rows


def _index_rows(e: Entry, objects: dict, chain: list) -> None:
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
        seen = _file_digest(idx_path)
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


def _file_digest(path: str) -> bytes:
    """BLAKE3 of a file's bytes; b"" if it does not exist."""
    try:
        with open(path, "rb") as f:
            return _hash(f.read()).digest()
    except FileNotFoundError:
        return b""


def check_segment(path: str, next_path: str, idx_path: str, seg: int, upto: int | None, full: bool,
                  idx_seen: bytes | None = None, prev: bytes | None = None) -> SegResult:
    """Check one segment file on its own (see scan_segment; ``prev``: chain its first entry to
    this checksum instead of its header's); picklable in and out."""
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
                checked = [check_object(oid, otype, data, full, erows, e.n) for oid, otype, data in item.objects]
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


def _pending_gc_indexes(engine: object) -> set:
    """The index digests a gc recorded in tmp/gc/pending before replacing files (it was killed)."""
    # a hint anyone who can write the files can craft: a digest that is not bytes is none
    return {r[2] for r in packed.read_pending(engine.root) if type(r[2]) is bytes} if isinstance(engine, LogEngine) else set()


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


def _memory_result(items: Iterator[ScanEntry | ScanProblem], full: bool) -> SegResult:
    """An engine without segment files (MemoryEngine): its whole log as one pseudo-segment."""
    out: list = []
    for item in items:
        if isinstance(item, ScanProblem):
            out.append(item)
        else:
            e = item.entry
            erows = entry_rows(e)
            out.append(SegEntry(e, item.where, [check_object(oid, t, d, full, erows, e.n) for oid, t, d in item.objects]))
    return SegResult(0, "", None, out, None, None)


def _check_segment_task(args: tuple) -> SegResult:
    return check_segment(*args)


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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def verify(log: RunLog, *, check_state: bool = True, anchor: str | None = None, anchors: Iterable[str] = (),
           progress: Callable[[int, int], None] | None = None, jobs: int | None = None) -> list[Problem]:
    """The problems found (empty: the store is sound)."""
    return verify_report(log, check_state=check_state, anchor=anchor, anchors=anchors, progress=progress, jobs=jobs).problems


def verify_report(log: RunLog, *, check_state: bool = True, anchor: str | None = None, anchors: Iterable[str] = (),
                  progress: Callable[[int, int], None] | None = None, jobs: int | None = None) -> Report:
    """The full report. ``anchor``/``anchors``: tokens whose history the log must still hold (each
    one checked; all parsed before anything is read). ``jobs``: worker processes that check segments
    (1: none, all in this process; None: $OBJSTORE_VERIFY_JOBS, else one per core once the log passes
    PARALLEL_MIN_BYTES). The report is the same whatever ``jobs`` is."""
    want = [parse_anchor(t) for t in ([anchor] if anchor is not None else []) + list(anchors)]
    n_jobs = resolve_jobs(jobs)
    with no_gc():
        first = _Verifier(log, progress, n_jobs)
        try:
            return first.run(check_state, want)
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
            report = _Verifier(log, progress, n_jobs, earlier=first).run(check_state, want)
        report.notes.append(Problem("verified-again", "log", "", f"gc rewrote segment{'s' if len(segs) > 1 else ''} {_span(segs)} "
                                    f"during the pass; verified again, gc held off, up to entry {report.entries}"))
        return report


class _Rewritten(Exception):
    """A segment file verify found at its start was replaced during the pass (by a gc's rewrite)."""

    def __init__(self, segs: list[int]) -> None:
        super().__init__(segs)
        self.segs = segs


def _replayed_breach(engine: LogEngine) -> tuple | None:
    """(segment, offset, reason) of the first entry that breaks a rule of the log or names a wrong
    root, found by replaying every entry's meta from the first, whatever checkpoint readers adopt
    (one forged with its tables matching a forged entry's root included); None if there is none."""
    fresh = LogEngine(engine.root, engine.policy, checkpoint=False)
    try:
        fresh.prefix_ok = True
        try:
            fresh.refresh()
        except CorruptLog:
            pass  # damage to the bytes of a segment: the scan names it
        return fresh.damaged if fresh.breach else None
    finally:
        fresh.close()


def progress_totals(store: Store) -> tuple[int | None, int | None]:
    """(objects, bytes) a full ``verify`` will read, for a progress bar; None where unknown (an
    in-memory store). ``verify_report(progress=f)`` calls ``f(objects_done, bytes_done)`` after
    each entry, bytes being the entries' lengths in the segment files."""
    engine = store.engine
    engine.refresh()
    seg_path = getattr(engine, "seg_path", None)
    top, off = getattr(engine, "_seg", None), getattr(engine, "_off", None)
    if seg_path is None or top is None or off is None:
        return None, None
    total = off
    for n in range(1, top):
        try:
            total += os.path.getsize(seg_path(n))
        except OSError:
            pass
    return sum(1 for _ in engine.iter_ids()), total


def parse_anchor(token: str) -> tuple[int, bytes]:
    """(entry number, checksum) of an anchor token; raises InvalidInput."""
    if not isinstance(token, str) or not token.startswith(ANCHOR_PREFIX):
        raise InvalidInput(f"not an anchor token (expected {ANCHOR_PREFIX}<entry>:<64 hex>): {token!r:.80}")
    rest = token[len(ANCHOR_PREFIX):].strip().split(":")
    if len(rest) != 2 or not rest[0].isdigit() or len(rest[1]) != 64:
        raise InvalidInput(f"malformed anchor token: {token!r:.120}")
    try:
        return int(rest[0]), bytes.fromhex(rest[1])
    except ValueError:
        raise InvalidInput(f"malformed anchor token: {token!r:.120}") from None


def read_anchors(path: str) -> list[str]:
    """The tokens of a file of anchors (``objstore anchor --append FILE``): one a line; blank lines
    and ``#`` comments skipped. A line that is not a token is InvalidInput naming the file and line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise StorageOSError(f"read the anchors file {path!r}", e) from None
    tokens = []
    for i, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            token = line.decode("ascii")
            parse_anchor(token)
        except (UnicodeDecodeError, InvalidInput) as e:
            detail = str(e) if isinstance(e, InvalidInput) else "not ASCII text"
            raise InvalidInput(f"{path} line {i}: {detail.removeprefix('invalid input: ')}") from None
        tokens.append(token)
    return tokens


def append_anchor(path: str, token: str) -> None:
    """Append ``token`` as one line to the file of anchors at ``path`` (created if absent), durably:
    a published anchor that a crash could lose would prove nothing later."""
    parse_anchor(token)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size:  # a last line without its newline must not swallow this token
                with open(path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        os.write(fd, b"\n")
            os.write(fd, token.encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageOSError(f"append to the anchors file {path!r}", e) from None


def anchor_token(entry: int, checksum: bytes) -> str:
    return f"{ANCHOR_PREFIX}{entry}:{checksum.hex()}"


def anchor_info(store: Store) -> dict:
    """The anchor of the log's current head (an empty store has the genesis anchor, entry 0)."""
    engine = store.engine
    pos = engine.refresh()
    seg = getattr(engine, "_seg", None)
    off = getattr(engine, "_off", None)
    return {"token": anchor_token(pos.entry, pos.checksum), "version": 1, "entry": pos.entry, "segment": seg, "offset": off,
            "checksum": pos.checksum.hex(), "time": engine.entry_time()}


class _Verifier:
    def __init__(self, log: RunLog, progress: Callable[[int, int], None] | None, jobs: int | None = 1,
                 earlier: _Verifier | None = None) -> None:
        self.jobs = jobs
        self.earlier = earlier  # a pass a gc raced: the index files it found are the ones judged
        self.files: dict[int, tuple[int, int]] = {}  # segment -> (device, inode) of its file at the start
        self.idx_seen: dict[int, bytes] = {}
        self.log = log
        self.store = log.store
        self.engine = log.store.engine
        self.progress = progress
        self.problems: list[Problem] = []
        self.notes: list[Problem] = []
        self.types: dict[bytes, str] = {}  # every good object's type
        self.where: dict[bytes, str] = {}
        self.damaged: set[bytes] = set()
        self.refs: dict = {}
        self.last: dict[tuple, tuple] = {}  # (run, branch) -> (id, lsn) of the chain's newest record
        self.forks: dict[tuple, tuple[bytes, dict, str]] = {}  # (run, branch) -> (fork id, payload, where)
        self.facts: dict[str, list] = {}  # run -> intent facts
        self.later_refs: list = []  # (referrer type, referrer id, field, id) checked once every object is known
        self.entry_sums: dict[int, bytes] = {}
        self.rejected: set[bytes] = set()  # records already reported as off their chain
        self.seg_problems = 0  # problems found before the segment being read
        self.unfoldable: set[tuple] = set()  # branches whose fold could not start
        self.fold_failures: list[Problem] = []  # why: reported only if no damage explains it
        self.built: dict[int, bytes] = {}  # segment -> BLAKE3 of the index its entries give
        self.packed: dict[int, tuple] = {}  # segment gc packed -> (its original index digest, BLAKE3 of its file)
        self.rewrites: dict[int, tuple[bytes, bytes, int]] = {}  # segment -> (file digest, index digest, entry) the last rewrite names
        self.states: dict[tuple, list] = {}  # (run, branch) -> [folded state, attempt view digest]
        self.folding = False
        self.log_broken = False
        self.entry_ids: set[bytes] = set()  # good objects of the entry being read
        self.entry_types: dict[bytes, str] = {}
        self.known_blobs: set[bytes] = set()  # blobs already found stored and good
        self.schemas: dict[bytes, tuple[str, list]] = {}  # schema object id -> (kind, fields), for x. records (runs.kinds)
        self.labelled: dict[str, tuple] = {}  # labelled run -> (labels, run_started id hex, where)
        self.erased: dict[bytes, bytes] = {}  # record id -> the deletion covering it (header-only in the fold)
        self.deleted_runs: set[str] = set()  # runs whose run/<R>/deleted is set at the snapshot
        self.removed: dict[bytes, tuple] = {}  # id -> (type, where, slim record or None) of bodies gc removed
        self.dead_refs: set[bytes] = set()  # blobs named by deleted records (their bodies may go at gc)
        self.dead_objs: set[bytes] = set()  # objects a deleted run's refs moved to (its forks, journal and segment objects)
        self.live_removed: dict[bytes, bytes] = {}  # removed blob -> a live record naming it

    def add(self, code: str, subject: str, where: str, detail: str) -> None:
        self.problems.append(Problem(code, subject, where, detail))

    def run(self, check_state: bool, want: list[tuple[int, bytes]]) -> Report:
        self.folding = check_state and self.log.state.exists()
        engine = self.engine
        # verify lists what it finds: it reads the readable prefix of a damaged log (the damage
        # itself is reported below), where every other reader stops with CorruptLog.
        was, engine.prefix_ok = engine.prefix_ok, True
        try:
            return self._run(check_state, want)
        finally:
            engine.prefix_ok = was

    def _run(self, check_state: bool, want: list[tuple[int, bytes]]) -> Report:
        wanted = {n for n, _ in want}  # the entries whose checksums the anchors name
        engine = self.engine
        if isinstance(engine, LogEngine):
            self.files = self._segment_files()  # before the index files: a gc replaces an index, then its segment
            self.idx_seen = self._index_files()
        # The witness first, then the log: a witness never leads the log it was written after, so
        # one read before the snapshot can only lag it (a writer may commit in between).
        wit = engine.witness() if isinstance(engine, LogEngine) else None
        try:
            pos, broken = engine.refresh(), None
        except CorruptLog as err:  # damage before the log's end (readers stop there): scan on to name it
            pos, broken = engine.position(), err
        damaged = getattr(engine, "damaged", None)
        if broken is None and damaged is not None and isinstance(engine, LogEngine) and not engine.breach:
            # bad bytes, where a reader without the readable prefix would have raised: scan on to
            # name them (an entry that breaks a rule is named by the replay below)
            broken = CorruptLog(engine.seg_path(damaged[0]), f"damaged entry at offset {damaged[1]} ({damaged[2]})")
        if broken is None and isinstance(damaged, CorruptLog):  # an engine that keeps the error itself (S3)
            broken = damaged
        # verify proves the log from its first entry: readers open through a checkpoint, and someone
        # who forged an entry can forge a checkpoint to match its root. So every entry's rules and
        # root are replayed here from the first, apart from the engine readers use.
        breach = _replayed_breach(engine) if isinstance(engine, LogEngine) else None
        upto = self.upto = pos.entry
        self._erasures()
        # The snapshot bounds the scan; once readers stop at damage there is no snapshot to keep,
        # so the segments after it are read to their ends (each on its own).
        bound = self.bound = upto if broken is None else None
        checksum = ZERO
        n_objects = 0
        n_bytes = 0  # of the entries read (what progress_totals' bytes counts)
        count = 0
        expect: tuple[int, bytes] | None = (1, ZERO)  # (entry, checksum) the next segment must continue from
        last: SegResult | None = None
        apart: list[int] = []  # segments after a break, checked each on its own
        wit_sum = None
        segments = self._segments(bound)
        for res in segments:
            if self.earlier is None and self._replaced([res.seg]):
                segments.close()  # a pass abandoned midway stops its workers
                raise _Rewritten(self._replaced(self.files))
            head = res.head
            if head is not None and bound is not None and head.first > bound and head.seg == res.seg:
                break  # a segment begun after the snapshot (a seal during this scan): not this verify's
            self.seg_problems = len(self.problems)
            placed = True  # the file's header puts it here (else nothing after it is chained to it)
            if head is not None and expect is not None and (head.seg, head.first) == (res.seg, expect[0]) and head.prev != expect[1]:
                res = self._rechain(res, expect[1])
            if head is not None:
                if expect is not None and (head.seg, head.first, head.prev) != (res.seg, *expect):
                    self.add("broken-log-chain", res.path, "", chain_break(res.seg, expect[0], expect[1], head))
                    if not res.rechained:  # else only the header's copy of the checksum is damaged: its entries chain on
                        self.log_broken, placed = True, head.seg == res.seg and head.first == expect[0]
                elif expect is None and head.seg != res.seg:
                    self.add("broken-log-chain", res.path, "", f"segment {res.seg} is out of place (its header says segment {head.seg}, first entry {head.first})")
                    placed = False
            expect = None
            if self.log_broken and res.seg:
                apart.append(res.seg)
            for item in res.items:
                if isinstance(item, ScanProblem):
                    detail = item.detail
                    if item.code == "missing-segment" and not self.log_broken:
                        detail = f"{detail}; the log ends at entry {count}"
                    self.add(item.code, item.where, "", detail)
                    # garbage after a sealed segment's last entry breaks nothing: the entries before it
                    # are whole and the next segment is chained to them (checked above)
                    self.log_broken = self.log_broken or item.code != "garbage-after-entry"
                    continue
                e = item.entry
                linked = not self.log_broken  # entries after a break are checked on their own only
                if linked:
                    count = e.n
                    checksum = e.checksum
                    if e.n in wanted:
                        self.entry_sums[e.n] = e.checksum
                    if wit is not None and e.n == wit[0]:
                        wit_sum = e.checksum
                if e.cut:
                    seg, off, length, digest = e.cut
                    self.notes.append(Problem("past-cut", f"entry {e.n}", item.where,
                                              f"its writer cut a torn tail of {length} bytes at segment {seg} offset {off} (blake3 {digest})"))
                self.entry_ids = {c[0] for c in item.objects if c[2]}
                self.entry_types = {c[0]: c[1] for c in item.objects}
                # blobs first: a removed blob is known as removed before a live record of the same
                # entry (records come first in an entry) is checked for naming it
                for c in sorted(item.objects, key=lambda c: c[1] != codec.BLOB):
                    n_objects += 1
                    self._object(c, item.where, linked)
                if linked:
                    self._moves(e, item.where)
                    if e.idx:  # the first entry of a segment names the index of the one sealed before it
                        self._named_index(e, item.where)
                    for seg_rw, file_digest, idx_digest in e.rw or ():
                        self.rewrites[seg_rw] = (file_digest, idx_digest, e.n)
                n_bytes += e.length
                if self.progress:
                    self.progress(n_objects, n_bytes)
            self._check_index(res)
            if res.built is not None:
                self.built[res.seg] = res.built
            if res.packed is not None:
                self.packed[res.seg] = res.packed
            if res.seg:
                self.engine.release_indexes()
            if placed and res.end is not None and res.end.complete and not any(isinstance(i, ScanProblem) and i.code != "garbage-after-entry" for i in res.items):
                expect = (res.end.next_entry, res.end.prev)
            last = res
        if isinstance(engine, LogEngine) and last is not None and last.seg and not self.log_broken and last.end is not None and (bound is None or last.end.next_entry <= bound):
            nxt = last.end.next_entry
            self.add("missing-segment", engine.seg_path(last.seg + 1), "", f"segment {last.seg + 1} is missing; the log ends at entry {nxt - 1}")
            self.log_broken = True
        if apart:
            self.notes.append(Problem("checked-apart", "log", "", f"refs, chains and forks are checked up to entry {count} only; "
                                      f"segment{'s' if len(apart) > 1 else ''} {_span(apart)} after the break checked each on its own"))
        if breach is not None and isinstance(engine, LogEngine):
            # an entry every byte of which is sound, that breaks a rule of the log (or its root); one
            # that moves a deletion ref its signer had no authority for is named as the deletion it is
            code = "bad-deletion" if breach[2].partition(": ")[2].startswith(authority.BREACH) else "corrupt-entry"
            self.add(code, engine.seg_path(breach[0]), "", f"{breach[2].split(': ', 1)[0]} at offset {breach[1]}: {breach[2]}")
        if broken is not None and not self.problems:
            self.add("corrupt-log", broken.args[0], "", broken.args[1])
        if count < upto and not self.problems:
            self.add("truncated-log", "log", "", f"the log ends at entry {count}, the snapshot holds {upto}")
        torn = getattr(engine, "torn", None) if broken is None else None
        if torn is not None and isinstance(engine, LogEngine):  # only a log on disk has a torn tail
            seg, off, length, why = torn
            self.notes.append(Problem("torn-tail", engine.seg_path(seg), "", f"{length} bytes after the last complete entry at offset {off} "
                                      f"({why}); invisible to readers, cut by the next commit"))
        seen = witness_disagreement(wit, count, wit_sum) if wit is not None and isinstance(engine, LogEngine) else None
        if seen is not None and wit is not None and isinstance(engine, LogEngine) and engine.repair_explains(wit):
            seen = None  # a repair killed before its new witness: its note records this one
        # a log that stops at damage named above is short of the witness because of that damage
        if seen is not None and isinstance(engine, LogEngine) and (
                seen[0] != "log-truncated" or (not self.log_broken and broken is None and breach is None)):
            self.add(seen[0], "log", engine._wit_path, seen[1])
        if isinstance(engine, LogEngine):
            self._checkpoint_file(engine)
        if not self.log_broken:  # otherwise refs and chains would only echo the break
            self._phase("references", self._references)
            self._phase("refs", self._refs)
            self._phase("chains", self._chains_end)
            self._phase("labels", self._generations)
            self._phase("deletions", self._deletions)
            self._phase("rewrites", self._rewritten)
        for w in want:
            self._anchor(w, count)
        if self.folding and not self.problems:
            self.problems.extend(self.fold_failures)
        if self.folding and not self.problems:
            self._phase("state", self._check_state)
        # the checks after the scan read through the engine too; and a gc whose files were in place
        # before the start may have committed their rewrite entry after the snapshot. (A second pass
        # holds gc off: it reports what it read.)
        raced = (self._replaced(self.files) or self._recorded_since()) if self.earlier is None else None
        if raced:
            raise _Rewritten(raced)
        return Report(self.problems, self.notes, count, n_objects, checksum)

    def _checkpoint_file(self, engine: LogEngine) -> None:
        """A checkpoint readers would not adopt (edited, forged, or naming what the log does not
        say) changes no answer; verify still names it: ``damaged-checkpoint``."""
        path = os.path.join(engine.dir, "checkpoint")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return
        why = None

        def entry_at(seg: int, off: int, n: int) -> E.Entry:
            # A writer may have checkpointed past verify's snapshot: the entry it names is in
            # the file all the same (a checkpoint is written after its entry is durable).
            if off == E.SEG_HEADER.size and seg > 1:
                # written at a seal, between the next segment's header and its first entry:
                # its entry is the last of the segment before (readers replay: not damage)
                return engine._entry_ending_at(seg - 1, os.path.getsize(engine.seg_path(seg - 1)), n)
            return engine._entry_ending_at(seg, off, n)

        try:
            got = adoption(data, entry_at)
            if isinstance(got, str):
                why = got
            elif got[3] is not None:
                why = self._checkpoint_rows(engine, got[0], got[1])
        except (ValueError, KeyError, TypeError, IndexError, OSError, msgspec.DecodeError, ObjstoreError, segindex.IndexError_) as err:
            why = f"unreadable ({err})"
        if why is not None:
            self.add("damaged-checkpoint", path, "", f"{why}; readers do not adopt it (delete it, or let the next writer replace it)")

    def _checkpoint_rows(self, engine: LogEngine, t: E.Tables, seg: int) -> str | None:
        """The checkpoint's rows of the active segment against the segment's own entries."""
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
        if t.frozen is None or bytes(t.frozen.data) != want:
            return "its rows of the active segment are not the ones the segment's entries give"
        return None

    def _rechain(self, res: SegResult, prev: bytes) -> SegResult:
        """A segment whose header names another previous checksum than the log's: if its entries
        chain to the log's own, only the header is damaged (one line, and the log goes on);
        otherwise it holds other entries, checked among themselves."""
        if not isinstance(self.engine, LogEngine):
            return res
        again = check_segment(res.path, self.engine.seg_path(res.seg + 1), self.engine.idx_path(res.seg), res.seg,
                              self.bound, self.folding, self.idx_seen.get(res.seg), prev)
        if any(isinstance(i, ScanProblem) and i.code != "garbage-after-entry" for i in again.items):
            return res
        return again._replace(rechained=True)

    def _phase(self, name: str, fn: Callable[[], None]) -> None:
        """Run one after-scan phase; a read that fails in it is one more problem, never an abort."""
        try:
            fn()
        except ObjstoreError as err:
            self.add("verify-incomplete", name, "", f"this check stopped: {str(err).splitlines()[0] if str(err) else type(err).__name__}")

    def _index_files(self) -> dict[int, bytes]:
        """{segment: BLAKE3 of its index file} as verify starts, before any look-up of its own can
        make the engine rewrite a damaged one (what verify judges is the file it found)."""
        out = {}
        for seg, path in self._numbered(".idx").items():
            digest = _file_digest(path)
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
        segment whose inode changed during the pass is one a gc rewrote (``_replaced``)."""
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
        assert isinstance(engine, LogEngine)
        try:
            names = os.listdir(engine.dir)
        except OSError:
            return {}
        n = len(ext)
        return {int(f[:-n]): os.path.join(engine.dir, f) for f in names if f.endswith(ext) and f[:-n].isdigit()}

    def _recorded_since(self) -> list[int]:
        """The packed files read that no rewrite entry of the snapshot names and the log names now: a
        gc in its last step when verify began, its rewrite entry committed after the snapshot (not
        a gc that was killed, whose files no entry names: ``gc-unfinished``)."""
        unnamed = [seg for seg, (_orig, digest) in self.packed.items() if self.rewrites.get(seg, (None,))[0] != digest]
        if not unnamed or self.log_broken or not isinstance(self.engine, LogEngine):  # a break: the rewrites were not read
            return []
        try:
            self.engine.refresh()
        except CorruptLog:
            return []
        packs = self.engine.tables.packs
        return [seg for seg in unnamed if packs.get(seg) == self.packed[seg][1]]

    def _replaced(self, segs: Iterable[int]) -> list[int]:
        """Those of ``segs`` whose file is no longer the one verify found at its start."""
        if not isinstance(self.engine, LogEngine):
            return []
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

    def _segments(self, bound: int | None) -> Generator[SegResult, None, None]:
        """Each segment's SegResult in log order: checked here, or in worker processes (a few at a
        time ahead of this process, which consumes them in order)."""
        engine = self.engine
        full = self.folding
        if not isinstance(engine, LogEngine):
            yield _memory_result(engine.scan(self.upto if bound is None else bound), full)
            return
        try:
            names = os.listdir(engine.dir)
        except OSError:
            names = []
        nums = [int(f[:-4]) for f in names if f.endswith(".seg") and f[:-4].isdigit()]
        top = max(nums, default=1)
        tasks = [(engine.seg_path(s), engine.seg_path(s + 1), engine.idx_path(s), s, bound, full, self.idx_seen.get(s))
                 for s in range(1, top + 1)]
        jobs = self.jobs
        if jobs is None:  # automatic: workers only where they pay for their start
            jobs = _cores() if engine.segment_bytes(nums) >= PARALLEL_MIN_BYTES else 1
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

    # -- objects ----------------------------------------------------------------------
    def _object(self, c: Checked, where: str, linked: bool = True) -> None:
        """Take in one checked object: its own problems, then (``linked``: the entry is part of the
        unbroken log) what the checks that span entries need of it."""
        oid, _otype, _readable, problems, damaged, t, value = c
        h = oid.hex()
        if oid in self.removed and not any(p[0] == _BODY_REMOVED for p in problems):
            del self.removed[oid]  # committed again after gc removed its body: this copy is the one read
        for code, detail, *subject in problems:
            if code == _BODY_REMOVED:
                self.removed[oid] = (_otype, where, value)
                continue
            self.add(code, subject[0] if subject else h, where, detail)
        if damaged:
            self.damaged.add(oid)
        if t is None or t == codec.BLOB:
            return  # blobs and records are found again through the log's index (_type), not kept here
        if t != codec.RECORD:
            self.types[oid] = t
            self.where[oid] = where
        if damaged or not linked:
            return
        if t == codec.RECORD:
            self._record(oid, value if type(value) is dict else _record_dict(value), where)
        elif t == codec.FORK:
            key = (value["run"], value["branch"])
            if key in self.forks or key in self.last:
                self.add("broken-chain", h, where, f"a second root for run {key[0]} branch {key[1]}")
            else:
                self.forks[key] = (oid, value, where)
            for f in ("parent_record", "parent_head"):
                self.later_refs.append((t, oid, f, value[f]))
        else:
            for f, ref in value:
                self.later_refs.append((t, oid, f, ref))

    def _type(self, oid: bytes) -> str | None:
        """The type of a good object stored at or before the snapshot, else None."""
        t = self.types.get(oid)
        if t is not None:
            return t
        if oid in self.damaged:
            return None
        try:
            loc = self.engine.loc(oid)
        except ObjstoreError:
            loc = None
        if loc is None and oid in self.entry_ids:
            return self.engine_type_fallback(oid)
        if loc is None or (self.engine.loc_entry(oid) or 0) > self.upto:  # loc found: so is its entry
            return None
        return loc.otype if hasattr(loc, "otype") else loc[1]

    def engine_type_fallback(self, oid: bytes) -> str | None:
        """Type of an object of the entry being read that the engine's tables do not know (a log
        the engine stopped short of): read it from the entry itself."""
        return self.entry_types.get(oid)

    def _where(self, oid: bytes) -> str:
        return self.where.get(oid) or getattr(self.engine, "where", lambda _o: "")(oid)

    def _ext_record(self, oid: bytes, kind: str, body: dict, schema: object, where: str) -> None:
        """A record of an x. kind: its schema object is stored (before it, in the snapshot), is a
        schema of its kind, and its body fits it; its ref fields are followed like blob refs."""
        sid = body.get(_SCHEMA, schema)  # the slim row carries it in the body; a full payload beside it
        body = {k: v for k, v in body.items() if k != _SCHEMA}
        bad = K.ext_record_problem(kind, body, sid, self._schema_object)
        if bad is not None:
            self.add("malformed-object", oid.hex(), where, bad)
        got = self._schema_object(sid) if type(sid) is bytes else None
        if not isinstance(got, tuple) or got[0] != kind:
            return
        fields = got[1]
        for field, ref in K.ref_ids(fields, body):
            if ref not in self.known_blobs:
                self.later_refs.append((codec.RECORD, oid, field, ref))

    def _schema_object(self, sid: bytes) -> tuple[str, list] | str:
        """(kind, fields) of a stored schema object, or why it is not one (``kinds.schema_fields``),
        read once per pass."""
        known = self.schemas.get(sid)
        if known is not None:
            return known
        t = self._type(sid)
        value = None
        if t == codec.SCHEMA:
            try:
                t, value = codec.decode(self.engine.read(sid), sid, False)
            except ObjstoreError as e:
                return f"its schema {sid.hex()} does not read: {e}"
        got = K.schema_fields(sid, t, value)
        if isinstance(got, tuple):  # only a schema is remembered: an id not stored yet may be by a later entry
            self.schemas[sid] = got
        return got

    def _record(self, oid: bytes, p: dict, where: str) -> None:
        run, branch, lsn, parent = p["run"], p["branch"], p["lsn"], p["parent"]
        key = (run, branch)
        h = oid.hex()
        body = p["body"]
        ext = K.is_ext(p["kind"])
        if oid in self.erased or run in self.deleted_runs or oid in self.removed:
            refs = body.get(_REFS) if oid in self.removed else [body.get(f) for f in R.BLOB_FIELDS]
            if ext and oid not in self.removed:
                refs = E.body_refs({k: v for k, v in body.items() if k != _SCHEMA})
            self.dead_refs.update(r for r in refs or () if type(r) is bytes)
        elif ext:
            self._ext_record(oid, p["kind"], body, p.get("schema"), where)
        elif self.removed:
            for f in R.BLOB_FIELDS:
                ref = body.get(f)
                if type(ref) is bytes and ref in self.removed:
                    self.live_removed.setdefault(ref, oid)
        for f in R.BLOB_FIELDS:
            ref = body.get(f)
            if type(ref) is bytes and ref not in self.known_blobs:
                if self.entry_types.get(ref) == codec.BLOB and ref not in self.damaged or self._type(ref) == codec.BLOB:
                    if len(self.known_blobs) > 65536:
                        self.known_blobs.clear()  # a bounded memo: prompts shared by many records stay cheap
                    self.known_blobs.add(ref)
                else:
                    self.later_refs.append((codec.RECORD, oid, f, ref))  # missing or mistyped: named at the end
        last = self.last.get(key)
        if parent in self.damaged and lsn > (last[1] + 1 if last else 0):
            # Its parent is damaged (reported already): let it stand in for LSN lsn - 1, so one damaged
            # record or block is one report, not one more for every record after it.
            last = self.last[key] = (parent, lsn - 1)
        if last is None:
            if lsn != 0:
                self.add("lsn-gap", h, where, f"run {run} branch {branch} starts at LSN {lsn}, not 0")
                self.rejected.add(oid)
                return
            if branch == 0:
                fk = self.forks.get(key)
                copied = fk is not None and "parent_run" in fk[1] and parent == fk[0]  # a cross-run fork (fork_run)
                if (parent is not None and not copied) or p["kind"] != R.RUN_STARTED:
                    self.add("broken-chain", h, where, "branch 0 must start with a run_started record with no parent "
                             "(or, in a copy, its cross-run fork object)")
                    self.rejected.add(oid)
                    return
            else:
                fk = self.forks.get(key)
                if fk is None and run in self.deleted_runs and parent in self.removed and (
                        parent in self.dead_objs or self.removed[parent][0] == codec.FORK):
                    # The fork object of a deleted run's branch: gc removed its body, its row stays. gc
                    # finds it as this record's parent, so verify covers it so too: no ref of the run need
                    # ever have named it (a copy, or a fork made in one batch with its first records,
                    # moves the branch's ref straight to a record).
                    self.dead_objs.add(parent)
                elif fk is None or parent != fk[0]:
                    self.add("broken-chain", h, where, f"LSN 0 of branch {branch} does not name its fork object as parent")
                    self.rejected.add(oid)
                    return
        else:
            if parent != last[0]:
                if lsn == last[1] + 1:
                    self.add("broken-chain", h, where, f"parent is not the previous record of run {run} branch {branch} (LSN {last[1]})")
                else:
                    self.add("lsn-gap", h, where, f"LSN {lsn} where {last[1] + 1} was expected (run {run} branch {branch})")
                self.rejected.add(oid)
                return
            if lsn != last[1] + 1:
                self.add("lsn-gap", h, where, f"LSN {lsn} where {last[1] + 1} was expected (run {run} branch {branch})")
                self.rejected.add(oid)
                return
        self.last[key] = (oid, lsn)
        labels = p.get("labels", body.get(_LABELS)) if lsn == 0 and branch == 0 else None
        if labels is not None:
            self.labelled[run] = (labels, h, where)
        if self.folding:
            self._fold(key, oid, p)
        # (the chain rows of the segment's index are made where the segment is checked: check_segment)
        if p["kind"] in (R.INTENT, R.INTENT_COMMITTED):
            self.facts.setdefault(run, []).append((branch, lsn, p["kind"], body, oid))

    # -- the state cache, checked against the fold verify makes as it reads -------------------
    def _fold(self, key: tuple[str, int], oid: bytes, p: dict) -> None:
        """Fold each record into its branch's state in log order (a branch's records arrive in
        LSN order), and add its attempt view to an order-free digest of the branch's views."""
        if key in self.unfoldable or key[0] in self.deleted_runs:
            return
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = [self._initial_state(key), 0]
            if key in self.unfoldable:
                return
        gone = self.erased.get(oid)
        if gone is None and oid in self.removed:
            self.unfoldable.add(key)  # its body is gone and no deletion covers it: named as missing-body
            return
        if gone is not None:  # a covered record folds header-only, as the cache and a re-fold fold it
            apply(st[0], R.header_only(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], gone))
            return
        rec = R.Record(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], p.get("time"), p["body"])
        apply(st[0], rec)
        if rec.kind == R.ATTEMPT:
            view = codec.canonical_json_plain(attempt_view(rec, st[0]["workflow_version"]))
            st[1] = (st[1] + _digest(rec.body["step"], rec.body["attempt"], rec.lsn, view)) % _MOD

    def _initial_state(self, key: tuple[str, int]) -> dict:
        """Empty for branch 0; for a fork, the fold of its parent up to the fork point (those
        records are all earlier in the log than the fork object, so they can be read now)."""
        fk = self.forks.get(key)
        if fk is None or (key[1] == 0 and "parent_run" not in fk[1]):
            return empty_state()
        p = fk[1]
        try:
            view = self.log.view(key[0])
            return fold(self.log.fork_base(view, p))
        except ObjstoreError as err:  # a parent record it needs is damaged or missing: named, never an abort
            self.unfoldable.add(key)
            self.fold_failures.append(Problem("verify-incomplete", f"{key[0]}/{key[1]}", "", f"the parent branch {p['parent_branch']} up to "
                                              f"LSN {p['parent_lsn']} cannot be folded: {str(err).splitlines()[0] if str(err) else type(err).__name__}"))
            return empty_state()

    def _check_state(self) -> None:
        """A cache row that claims the head verify saw must be what the cache would serve
        (``StateCache.diverged``: rows confirmed against the log's chain index and fork object)
        and equal verify's own fold, state and attempt views alike; rows behind (a cache miss)
        or beyond this snapshot are skipped."""
        from .chain import View

        cache = self.log.state
        runs = sorted({k[0] for k in self.last} | {k[0] for k in self.forks})
        for run in runs:
            if run in self.deleted_runs:
                continue  # never served (every read stops at its deleted ref); gc drops the rows
            try:
                cached = cache.cached(run)
                reflects = cache.cached_deletions(run)
            except ObjstoreError:
                continue
            dels = self.refs.get(runrefs.deletions_ref(run))
            dels = dels if isinstance(dels, bytes) else None
            for b, (head, _tip, state) in cached.items():
                if reflects.get(b) != dels:
                    continue  # rows from before a deletion (or after this snapshot's): behind, a cache miss
                key = (run, b)
                last = self.last.get(key)
                mine = last[0] if last else (self.forks[key][0] if key in self.forks else None)
                if head != mine or mine is None:
                    continue
                if state is None:
                    self.add("state-diverged", f"{run}/{b}", cache.path, "cached folded state is damaged (not a folded state)")
                    continue
                try:
                    why = cache.diverged(self.log, View(run, b, {b: mine}, dels), b)
                except ObjstoreError:
                    continue
                if why is not None:
                    self.add("state-diverged", f"{run}/{b}", cache.path, f"cached rows disagree with the log: {why}")
                    continue
                st = self.states.get(key) or [self._initial_state(key), 0]
                if codec.canonical_json_plain(st[0]) != codec.canonical_json_plain(state):
                    self.add("state-diverged", f"{run}/{b}", cache.path, "cached folded state differs from the cold re-fold")
                    continue
                digest = 0
                for step, attempt, lsn, view in cache.attempt_rows(run, b):
                    digest = (digest + _digest(step, attempt, lsn, view)) % _MOD
                if digest != st[1]:
                    self.add("state-diverged", f"{run}/{b}", cache.path, "cached attempt views differ from the cold re-fold")

    # -- recorded deletions (issue 17) ------------------------------------------------------
    def _erasures(self) -> None:
        """What the snapshot's deletions cover, read before the scan so the fold is header-only
        where the cache's is (a deletion's entry comes after the records it covers)."""
        for name, value in list(self.engine.tables.refs.items()):
            run = runrefs.run_of(name) if isinstance(value, bytes) else None
            if run is None:
                continue
            if runrefs.is_deleted_ref(name):
                self.deleted_runs.add(run)
                try:  # the blobs its journal and segment objects named, listed by the deletion (gc removes them)
                    listed = self.store.deletion_object(value).get("blobs") or ()
                    self.dead_refs.update(b for b in listed if type(b) is bytes)
                except ObjstoreError:
                    pass  # a damaged deletion object: named where its entry is checked
            elif runrefs.is_deletions_ref(name):
                try:
                    self.erased.update((oid, hit[0]) for oid, hit in self.store.covered_records(run, value).items())
                except ObjstoreError:
                    pass  # a damaged deletion object: named where its entry is checked

    def _deletions(self) -> None:
        """Each deletion object: ``deletion_problems`` (schema, signature, authority, covered rows),
        and the refs that name one name a deletion of their own run and scope; each redacted blob
        is a note, with the reason."""
        redacted = {name[len(runrefs.REDACTED_PREFIX):] for name in self.refs if name.startswith(runrefs.REDACTED_PREFIX)}
        for oid, (otype, where, value) in self.removed.items():
            if otype == codec.RECORD and value is not None:
                run = value["run"] if isinstance(value, dict) else value[0]
                ok = oid in self.erased or run in self.deleted_runs
            elif otype == codec.BLOB:
                ok = oid.hex() in redacted or (oid in self.dead_refs and oid not in self.live_removed)
            else:
                ok = otype in (codec.FORK, "journal", "segment") and oid in self.dead_objs
            if not ok:
                why = (f"a live record ({self.live_removed[oid].hex()}) names it" if oid in self.live_removed
                       else "no recorded deletion or redaction covers it")
                self.add("missing-body", oid.hex(), where, f"gc removed the body of this {otype}, but {why}")
        for oid, t in sorted(self.types.items()):
            if t != codec.DELETION or oid in self.damaged or self.engine.loc_entry(oid) is None:
                continue  # (not in the tables: past an entry readers refuse, named as that entry)
            try:
                value = self.store.deletion_object(oid)
                found = deletion_problems(self.store, oid, value, self.engine.loc_entry(oid))
            except ObjstoreError as e:
                found = [f"cannot be read: {e}"]
            for what in found:
                self.add("bad-deletion", oid.hex(), self._where(oid), what)
        for name, value in sorted(self.refs.items()):
            if not isinstance(value, bytes) or value in self.damaged or self._type(value) != codec.DELETION:
                continue
            run = runrefs.run_of(name)
            want: tuple[str, str | None] | None = None
            if name.startswith(runrefs.REDACTED_PREFIX):
                want = (R.SCOPE_BLOB, None)
            elif runrefs.is_deleted_ref(name) and run is not None:
                want = (R.SCOPE_RUN, run)
            elif runrefs.is_deletions_ref(name) and run is not None:
                want = (R.SCOPE_RECORDS, run)
            if want is None:
                continue
            did: bytes | None = value
            while isinstance(did, bytes):
                v = self.store.deletion_object(did)
                if (v.get("scope"), v.get("run")) != want:
                    self.add("bad-deletion", did.hex(), name, f"{name} names a {v.get('scope')} deletion of run {v.get('run')}")
                    break
                if want[0] == R.SCOPE_BLOB and runrefs.redacted_ref(v.get("blob") or b"") != name:
                    self.add("bad-deletion", did.hex(), name, f"{name} names the redaction of another blob")
                    break
                if want[0] == R.SCOPE_BLOB:
                    self.notes.append(Problem("redacted", name[len(runrefs.REDACTED_PREFIX):], "", str(v.get("reason"))))
                did = v.get("previous") if want[0] == R.SCOPE_RECORDS else None

    def _check_index(self, res: SegResult) -> None:
        """A sealed segment's index file must be exactly what its entries say (check_segment
        compares them; a missing one is only a note: it is rebuilt when needed)."""
        if len(self.problems) != self.seg_problems:
            return  # damage in the segment is reported already; its index would differ for that reason
        path = self.engine.idx_path(res.seg) if res.seg and isinstance(self.engine, LogEngine) else ""
        if res.verdict == "missing":
            self.notes.append(Problem("index-missing", path, "", f"segment {res.seg} has no index file; it is rebuilt when needed"))
        elif res.verdict == "differs":
            if path and _file_digest(path) in _pending_gc_indexes(self.engine):
                # A gc killed between putting a segment's new index and its new file in place: the
                # log does not name that index, so no reader trusts it; gc run again finishes.
                self.notes.append(Problem("gc-unfinished", path, "", f"segment {res.seg} has the index of its packed file beside the "
                                          "old file; run 'objstore gc' again"))
                return
            self.add("damaged-index", path, "", f"index of segment {res.seg} does not match its entries (rebuild: delete the file)")

    def _named_index(self, e: Entry, where: str) -> None:
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

    def _moves(self, e: Entry, where: str) -> None:
        for name, old, new, _reason in e.moves:
            if isinstance(new, bytes) and self.deleted_runs and runrefs.run_of(name) in self.deleted_runs:
                self.dead_objs.add(new)
            cur = self.refs.get(name)
            if cur != old:
                self.add("ref-log-mismatch", name, where, f"entry {e.n} moves it from {_show(old)}, but it held {_show(cur)}")
            if new is None:
                self.refs.pop(name, None)
            else:
                self.refs[name] = new
            if isinstance(new, bytes) and new not in self.damaged and self._type(new) is None:
                self.add("dangling-ref", name, where, f"entry {e.n} points it at {new.hex()}, not stored in or before that entry")

    def _rewritten(self) -> None:
        """Each segment a rewrite entry names is that file, and its index the one its entries give; a
        packed file no rewrite names (a gc killed before its rewrite entry) is a note: gc finishes it."""
        for seg in sorted(set(self.rewrites) | set(self.packed)):
            path = self.engine.seg_path(seg) if isinstance(self.engine, LogEngine) else ""
            named = self.rewrites.get(seg)
            have = self.packed.get(seg)
            if named is None or have is None or have[1] != named[0]:
                if have is not None:
                    self.notes.append(Problem("gc-unfinished", path, "", f"segment {seg} was packed by a gc that did not record it; run 'objstore gc' again"))
                else:
                    self.add("bad-rewrite", path, "", f"entry {named[2] if named else '?'} names a packed file for segment {seg}, "
                             "but the file is not one")
                continue
            built = self.built.get(seg)
            if built is not None and built != named[1]:
                self.add("bad-rewrite", path, "", f"entry {named[2]} names index digest {named[1].hex()} for segment {seg}, its entries give {built.hex()}")

    # -- after the scan -------------------------------------------------------------------
    def _references(self) -> None:
        for otype, oid, field, ref in self.later_refs:
            t = self._type(ref)
            if t is None:
                if ref in self.damaged:
                    continue
                self.add("missing-object", ref.hex(), "", f"referenced by {otype} {oid.hex()} ({field}) but not stored")
            elif field in _EXPECT and t not in _EXPECT[field]:
                self.add("wrong-type", ref.hex(), self._where(ref), f"{field} of {otype} {oid.hex()} should be a {' or '.join(_EXPECT[field])}, is a {t}")

    def _refs(self) -> None:
        refs = self.refs
        runs: dict[str, dict] = {}
        for name, value in refs.items():
            if isinstance(value, str):
                target = runrefs.parse_symref_value(value)
                if target is None or target not in refs:
                    self.add("dangling-ref", name, "", f"symbolic ref to missing ref {target if target is not None else value!r}")
            elif value in self.damaged:
                self.add("damaged-ref", name, self._where(value), f"points to damaged object {value.hex()}")
            elif self._type(value) is None:
                self.add("dangling-ref", name, "", f"points to missing object {value.hex()}")
            run = runrefs.run_of(name)
            if run is not None:
                runs.setdefault(run, {})[name] = value
        for run, rr in sorted(runs.items()):
            self._run_refs(run, rr)

    def _run_refs(self, run: str, rr: dict) -> None:
        prefix = runrefs.run_prefix(run)
        if runrefs.branch_ref(run, 0) not in rr:
            self.add("broken-run", run, "", "run has refs but no branch 0")
        live = rr.get(runrefs.live_ref(run))
        target = runrefs.parse_symref_value(live)
        if live is not None and not (target is not None and runrefs.branch_of(run, target) is not None and target in rr):
            self.add("broken-run", run, "", f"live ref does not name a branch of the run: {live!r}")
        for name, value in rr.items():
            rest = name[len(prefix):]
            want = {runrefs.JOURNAL: codec.JOURNAL, runrefs.SEGMENTS: codec.SEGMENT, runrefs.DELETIONS: codec.DELETION,
                    runrefs.DELETED: codec.DELETION}.get(rest)
            if rest.startswith("grant/"):
                want = codec.GRANT
            vt = self._type(value) if isinstance(value, bytes) else None
            if want is not None and vt is not None and vt != want:
                self.add("wrong-type", value.hex(), name, f"{name} should name a {want} of run {run}, names a {vt}")
            b = runrefs.branch_of(run, name)
            if b is not None and vt is not None:
                key = (run, b)
                last = self.last.get(key)
                fk = self.forks.get(key)
                expect = last[0] if last else (fk[0] if fk else None)
                if expect is None and run in self.deleted_runs and value in self.dead_objs and value in self.removed:
                    continue  # a deleted run's branch with no record: its fork object's body went at gc
                if value != expect and value not in self.rejected:
                    self.add("broken-chain", name, "", f"head {value.hex()} is not the newest record of run {run} branch {b}")

    def _chains_end(self) -> None:
        for (run, b), (fid, fk, _where) in sorted(self.forks.items()):
            subject = fid.hex()
            ref = runrefs.branch_ref(run, b)
            pb, pl = fk["parent_branch"], fk["parent_lsn"]
            if b == 0 or "parent_run" in fk:
                self._cross_fork(run, b, fid, fk, ref)
                continue
            last = self.last.get((run, pb))
            if last is None:
                self.add("bad-fork", subject, ref, f"parent branch {pb} does not exist")
                continue
            # LSN -> id from the log's chain index (its files are compared with the entries above)
            at = self.engine.record_at(run, pb, pl) if 0 <= pl <= last[1] else None
            bad = R.fork_place_problem(fk, at, self._describe)
            if bad is not None:
                self.add("bad-fork", subject, ref, bad)
                continue
            if run in self.deleted_runs:
                continue  # a deleted run's records are withheld (and gc drops their bodies): its chain rows were checked above
            head = fk["parent_head"]
            hl = self._lsn_on(run, pb, head)
            if hl is None or hl < pl:
                self.add("bad-fork", subject, ref, f"parent record (branch {pb} LSN {pl}) is not an ancestor of the recorded parent head")
                continue
            forks = {bb: (f[1]["parent_branch"], f[1]["parent_lsn"]) for (r, bb), f in self.forks.items() if r == run}
            want = R.compensation_for(self.facts.get(run, []), forks, pb, pl, hl)
            if codec.canonical_json(want) != codec.canonical_json(fk["compensation"]):
                self.add("bad-fork", subject, ref, f"compensation flags disagree with the committed non-idempotent intents of branch {pb} "
                         f"after LSN {pl} (records say {[c['intent'] for c in want]}, fork says {[c.get('intent') for c in fk['compensation']]})")

    def _generations(self) -> None:
        """A labelled run of generation g ≥ 1 stands only beside deleted runs of generations 0 … g−1:
        otherwise one label set would name two live runs (runs.labels)."""
        for run, (labels, h, where) in sorted(self.labelled.items()):
            k = RL.live_earlier_generation(run, labels, self.deleted_runs.__contains__) if isinstance(labels, dict) else None
            if k is not None:
                self.add("bad-labels", h, where, f"run {run} is generation {RL.generation_of(run, labels)} of its labels, but generation {k} "
                         f"({RL.run_id(labels, k)}) is not a deleted run")

    def _cross_fork(self, run: str, b: int, fid: bytes, fk: dict, ref: str) -> None:
        """A cross-run fork (``fork_run``): the root of branch 0 of a copy, naming a record of
        another run; nothing of the source is copied, so the source record must be where it says."""
        subject = fid.hex()
        src, pb, pl = fk.get("parent_run"), fk["parent_branch"], fk["parent_lsn"]
        if b != 0 or not isinstance(src, str) or src == run:
            self.add("bad-fork", subject, ref, "branch 0 starts at a fork object only in a copy of another run (parent_run)"
                     if b == 0 else "a fork object of branch > 0 names a parent branch of its own run, not parent_run")
            return
        if fk["compensation"]:
            self.add("bad-fork", subject, ref, "a copy's fork object carries no compensation flags")
            return
        last = self.last.get((src, pb))
        at = self.engine.record_at(src, pb, pl) if last is not None and 0 <= pl <= last[1] else None
        bad = R.fork_place_problem(fk, at, lambda oid: "a record of a deleted run" if src in self.deleted_runs else self._describe(oid))
        if bad is not None:
            self.add("bad-fork", subject, ref, bad)
            return
        if src in self.deleted_runs:
            return  # the source was deleted since: its bodies are withheld from reads (gc keeps what the copy reaches)
        hl = self._lsn_on(src, pb, fk["parent_head"])
        if hl is None or hl < pl:
            self.add("bad-fork", subject, ref, f"parent record (run {src} branch {pb} LSN {pl}) is not an ancestor of the recorded parent head")

    def _lsn_on(self, run: str, branch: int, oid: bytes) -> int | None:
        """The LSN of ``oid`` if it is a record on (run, branch)'s chain, else None."""
        if self._type(oid) != codec.RECORD:
            return None
        hit = self.store.erased_records.get(oid)
        if hit is not None:  # a covered record: its place is its deletion's row (its body is withheld)
            return hit[3] if hit[1:3] == (run, branch) and self.engine.record_at(run, branch, hit[3]) == oid else None
        try:
            p = self.store.get(oid)[1]
        except ObjstoreError:
            return None
        if p.get("run") != run or p.get("branch") != branch or type(p.get("lsn")) is not int:
            return None
        return p["lsn"] if self.engine.record_at(run, branch, p["lsn"]) == oid else None

    def _describe(self, oid: bytes) -> str:
        t = self._type(oid)
        if t != codec.RECORD:
            return t or "missing"
        hit = self.store.erased_records.get(oid)
        if hit is not None:
            return f"{hit[1]} branch {hit[2]} LSN {hit[3]} (deleted)"
        try:
            p = self.store.get(oid)[1]
        except ObjstoreError:
            return "unreadable"
        return f"{p.get('run')} branch {p.get('branch')} LSN {p.get('lsn')}"

    def _anchor(self, want: tuple[int, bytes], count: int) -> None:
        n, checksum = want
        token = anchor_token(n, checksum)
        if n == 0:
            if checksum != ZERO:
                self.add("anchor-mismatch", token, "", "the genesis anchor has an all-zero checksum")
            return
        if n > count:
            self.add("anchor-missing", token, "", f"log ends at entry {count}")
        elif self.entry_sums.get(n) != checksum:
            self.add("anchor-mismatch", token, "", f"entry {n} has checksum {self.entry_sums.get(n, b'').hex()}: the history before it was rewritten or rolled back")


def _row(row: list | None) -> str:
    if row is None:
        return "nothing (no row)"
    return repr([v.hex() if isinstance(v, bytes) else [x.hex() for x in v] if isinstance(v, list) and v and isinstance(v[0], bytes) else v
                 for v in row])


def _span(nums: list[int]) -> str:
    return f"{nums[0]}..{nums[-1]}" if len(nums) > 1 else str(nums[0])


def _show(v: bytes | str | None) -> str:
    if v is None:
        return "(absent)"
    return v.hex() if isinstance(v, bytes) else str(v)


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
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, "cached folded state is damaged (not a folded state)"))
                continue
            why = log.state.diverged(log, view, b)
            if why is not None:
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, f"cached rows disagree with the log: {why}"))
                continue
            cold = _cold(log, view, b)
            if codec.canonical_json(cold[0]) != codec.canonical_json(state):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, "cached folded state differs from the cold re-fold"))
            elif cold[1] != log.state.attempt_fragments(run, b):
                out.append(Problem("state-diverged", f"{run}/{b}", log.state.path, "cached attempt views differ from the cold re-fold"))
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


# -- recorded deletions (issue 17) ------------------------------------------------------------
#
def deletion_problems(store: Store, did: bytes, value: dict, at_entry: int | None) -> list[str]:
    """What is wrong with a deletion object (each one ``bad-deletion <id>: <what>``): its schema, then
    the authority rule every reader applies to its entry (objstore.storage.authority: the signature,
    the owner or a live delete grant at its entry, a redaction by the owner only, covered rows that
    are the run's records there), as of the deletion's entry."""
    bad = R.schema_problem(R.DELETION_TYPE, value)
    if bad is not None:
        return [bad]
    return authority.deletion_problems(authority.StoreView(store), value, at_entry)
