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
7. with ``anchor``: the log still holds the anchored history as a prefix.

Torn tails and past cuts are *notes*: a crash verifies clean.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import blake3
import msgspec

from . import codec, runrefs, segindex
from . import engine as E
from . import records as R
from .engine import ZERO, Entry, HashedLarge, LogEngine, ScanProblem
from .errors import CorruptLog, IntegrityError, InvalidInput, ObjstoreError, UnknownObjectType
from .fileutil import no_gc
from .fold import apply, empty_state, fold
from .state import attempt_view, refold_branch

if TYPE_CHECKING:
    from .chain import View
    from .runlog import RunLog
    from .store import Store

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


def verify(log: RunLog, *, check_state: bool = True, anchor: str | None = None,
           progress: Callable[[int, int], None] | None = None) -> list[Problem]:
    """The problems found (empty: the store is sound)."""
    return verify_report(log, check_state=check_state, anchor=anchor, progress=progress).problems


def verify_report(log: RunLog, *, check_state: bool = True, anchor: str | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Report:
    want = parse_anchor(anchor) if anchor is not None else None
    with no_gc():
        return _Verifier(log, progress).run(check_state, want)


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
    def __init__(self, log: RunLog, progress: Callable[[int, int], None] | None) -> None:
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
        self.seg_rows: tuple = (0, 0, [], [])  # (segment, first entry, object rows, chain rows) of the segment being read
        self.seg_end = (0, ZERO)  # (entry, checksum) of the last entry read
        self.seg_problems = 0  # problems found before the segment being read
        self.states: dict[tuple, list] = {}  # (run, branch) -> [folded state, attempt view digest]
        self.folding = False
        self.log_broken = False
        self.entry_ids: set[bytes] = set()  # good objects of the entry being read
        self.entry_types: dict[bytes, str] = {}
        self.entry_n = 0
        self.entry_rows: dict[bytes, list] = {}  # this entry's index rows (recs, prevs) by object id
        self.known_blobs: set[bytes] = set()  # blobs already found stored and good
        self.chain_keys: dict[tuple, bytes] = {}  # (run, branch) -> its chain key in index files

    def add(self, code: str, subject: str, where: str, detail: str) -> None:
        self.problems.append(Problem(code, subject, where, detail))

    def run(self, check_state: bool, want: tuple[int, bytes] | None) -> Report:
        self.folding = check_state and self.log.state.exists()
        engine = self.engine
        # verify lists what it finds: it reads the readable prefix of a damaged log (the damage
        # itself is reported below), where every other reader stops with CorruptLog.
        was, engine.prefix_ok = engine.prefix_ok, True
        try:
            return self._run(check_state, want)
        finally:
            engine.prefix_ok = was

    def _run(self, check_state: bool, want: tuple[int, bytes] | None) -> Report:
        engine = self.engine
        # The witness first, then the log: a witness never leads the log it was written after, so
        # one read before the snapshot can only lag it (a writer may commit in between).
        wit = engine.witness() if isinstance(engine, LogEngine) else None
        try:
            pos, broken = engine.refresh(), None
        except CorruptLog as err:  # damage before the log's end (readers stop there): scan one entry on to name it
            pos, broken = engine.position(), err
        upto = self.upto = pos.entry + (broken is not None)
        upto = pos.entry
        checksum = ZERO
        n_objects = 0
        n_bytes = 0  # of the entries read (what progress_totals' bytes counts)
        count = 0
        wit_sum = None
        for item in engine.scan(upto + (broken is not None)):
            if isinstance(item, ScanProblem):
                self.log_broken = True
                self.add(item.code, item.where, "", item.detail)
                self.seg_rows = (0, 0, [], [])  # the segment was not read to its end: its index is not judged
                break
            e = item.entry
            if e.seg != self.seg_rows[0]:
                self._check_index()
                self.engine.release_indexes()
                self.seg_rows = (e.seg, e.n, [], [])
                self.seg_problems = len(self.problems)
            self._index_rows(e)
            count = e.n
            checksum = e.checksum
            if want is not None and e.n == want[0]:
                self.entry_sums[e.n] = e.checksum
            if e.cut:
                seg, off, length, digest = e.cut
                self.notes.append(Problem("past-cut", f"entry {e.n}", item.where,
                                          f"its writer cut a torn tail of {length} bytes at segment {seg} offset {off} (blake3 {digest})"))
            self.entry_n = e.n
            self.entry_rows = {e.objs[r[0]][0]: r[1:] for r in e.recs}
            self.entry_rows.update((e.objs[r[0]][0], [r[1]]) for r in e.prevs)
            if wit is not None and e.n == wit[0]:
                wit_sum = e.checksum
            self.entry_ids = {oid for oid, _t, data in item.objects if not isinstance(data, Exception)}
            self.entry_types = {oid: t for oid, t, _d in item.objects}
            for oid, otype, data in item.objects:
                n_objects += 1
                self._object(oid, otype, data, item.where)
            self._moves(e, item.where)
            n_bytes += e.length
            if self.progress:
                self.progress(n_objects, n_bytes)
        self._check_index(last=True)
        if broken is not None and not self.problems:
            self.add("corrupt-log", broken.args[0], "", broken.args[1])
        if count < upto and not self.problems:
            self.add("truncated-log", "log", "", f"the log ends at entry {count}, the snapshot holds {upto}")
        torn = getattr(engine, "torn", None) if broken is None else None
        if torn is not None and isinstance(engine, LogEngine):  # only a log on disk has a torn tail
            seg, off, length, why = torn
            self.notes.append(Problem("torn-tail", engine.seg_path(seg), "", f"{length} bytes after the last complete entry at offset {off} "
                                      f"({why}); invisible to readers, cut by the next commit"))
        damaged = getattr(engine, "damaged", None) if broken is None else None
        if damaged is not None and isinstance(engine, LogEngine):
            seg, off, why = damaged
            self.add("corrupt-entry", engine.seg_path(seg), "", f"entry {count + 1} at offset {off}: {why}")
        if wit is not None and isinstance(engine, LogEngine):
            path = engine._wit_path
            if wit[0] > count and not self.log_broken and damaged is None:
                self.add("log-truncated", "log", path, f"the log ends at entry {count}, but the head witness says entry {wit[0]} was made durable")
            elif wit_sum is not None and wit_sum != wit[1]:
                self.add("witness-mismatch", "log", path, f"the head witness names entry {wit[0]} with checksum {wit[1].hex()}, "
                         f"the log has {wit_sum.hex()}")
        if isinstance(engine, LogEngine):
            self._checkpoint_file(engine)
        if not self.log_broken:  # otherwise refs and chains would only echo the break
            self._references()
            self._refs()
            self._chains_end()
        if want is not None:
            self._anchor(want, count)
        if self.folding and not self.problems:
            self._check_state()
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
        try:
            if len(data) < 32 or _hash(data[:-32]).digest() != data[-32:]:
                why = "its checksum does not match its bytes"
            else:
                # A writer may have checkpointed past verify's snapshot: the entry it names is in
                # the file all the same (a checkpoint is written after its entry is durable).
                t, seg, off = E.Tables.load(data[:-32])
                if t.pos.entry > 0:
                    e = engine._entry_ending_at(seg, off, t.pos.entry)
                    if e.checksum != t.pos.checksum:
                        why = f"entry {t.pos.entry} is not at segment {seg} offset {off}"
                    elif E.root_digest(t.acc) != e.root:
                        why = f"its tables do not hash to the root of entry {t.pos.entry}"
                    else:
                        why = self._checkpoint_rows(engine, t, seg)
        except (ValueError, KeyError, TypeError, IndexError, OSError, msgspec.DecodeError, ObjstoreError, segindex.IndexError_) as err:
            why = f"unreadable ({err})"
        if why is not None:
            self.add("damaged-checkpoint", path, "", f"{why}; readers do not adopt it (delete it, or let the next writer replace it)")

    def _checkpoint_rows(self, engine: LogEngine, t: E.Tables, seg: int) -> str | None:
        """The checkpoint's rows of the active segment against the segment's own entries."""
        hdr = E._read_segment_header(engine._fd(seg), engine.seg_path(seg))
        objects: dict = {}
        chain: list = []
        for e in engine._segment_entries(seg, hdr[3], hdr[2]):
            if e.n > t.pos.entry:
                break
            E._segment_rows(e, objects, chain)
        want = segindex.build(seg, hdr[2], t.pos.entry, t.pos.checksum, objects.values(), chain)
        if t.frozen is None or bytes(t.frozen.data) != want:
            return "its rows of the active segment are not the ones the segment's entries give"
        return None

    # -- objects ----------------------------------------------------------------------
    def _object(self, oid: bytes, otype: str, data: bytes | HashedLarge | IntegrityError, where: str) -> None:
        h = oid.hex()
        if isinstance(data, IntegrityError):
            self.add("corrupt-object", h, where, data.args[2])
            self.damaged.add(oid)
            return
        if isinstance(data, HashedLarge):  # a large blob, hashed while streamed (never held whole)
            if data.digest != oid:
                self.add("corrupt-object", h, where, "hash mismatch (content does not match id)")
                self.damaged.add(oid)
            return
        if _hash(data).digest() != oid:
            self.add("corrupt-object", h, where, "hash mismatch (content does not match id)")
            self.damaged.add(oid)
            return
        try:
            t, value = codec.decode(data, oid, strict=True)
        except UnknownObjectType as e:
            self.add("unknown-type", h, where, f"unknown object type {e.args[2]!r}")
            self.damaged.add(oid)
            return
        except IntegrityError as e:
            self.add("corrupt-object", h, where, e.args[2])
            self.damaged.add(oid)
            return
        if t != otype:
            self.add("corrupt-entry", h, where, f"entry says {otype}, object is a {t}")
        if t == codec.BLOB:
            return  # blobs and records are found again through the log's index (_type), not kept here
        if t != codec.RECORD:
            self.types[oid] = t
            self.where[oid] = where
        bad = R.schema_problem(t, value)
        if bad is not None:
            self.add("malformed-object", h, where, bad)
            self.damaged.add(oid)
            return
        self._meta_row(oid, t, data, value, where)
        if t == codec.RECORD:
            self._record(oid, value, where)
        elif t == codec.FORK:
            key = (value["run"], value["branch"])
            if key in self.forks or key in self.last:
                self.add("broken-chain", h, where, f"a second root for run {key[0]} branch {key[1]}")
            else:
                self.forks[key] = (oid, value, where)
            for f in ("parent_record", "parent_head"):
                self.later_refs.append((t, oid, f, value[f]))
        else:
            for f, ref in R.object_refs(t, value):
                self.later_refs.append((t, oid, f, ref))

    def _meta_row(self, oid: bytes, otype: str, data: bytes, value: dict, where: str) -> None:
        """The entry's index row for an object (what readers build every table from) must say what
        the object itself says: ``bad-meta-row entry <n> <id>`` otherwise."""
        if otype != codec.RECORD and otype not in E.CHAIN_TYPES:
            return
        want = E.object_facts(otype, data, value, oid)
        got = self.entry_rows.get(oid)
        if got != want:
            self.add("bad-meta-row", f"entry {self.entry_n} {oid.hex()}", where,
                     f"the entry's index row says {_row(got)}, the {otype} itself gives {_row(want)}")

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

    def _record(self, oid: bytes, p: dict, where: str) -> None:
        run, branch, lsn, parent = p["run"], p["branch"], p["lsn"], p["parent"]
        key = (run, branch)
        h = oid.hex()
        body = p["body"]
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
                if parent is not None or p["kind"] != R.RUN_STARTED:
                    self.add("broken-chain", h, where, "branch 0 must start with a run_started record with no parent")
                    self.rejected.add(oid)
                    return
            else:
                fk = self.forks.get(key)
                if fk is None or parent != fk[0]:
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
        if self.folding:
            self._fold(key, oid, p)
        ck = self.chain_keys.get(key)
        if ck is None:
            ck = self.chain_keys[key] = segindex.chain_key(run, branch)
        self.seg_rows[3].append(segindex.chain_row(ck, lsn, oid))
        if p["kind"] in (R.INTENT, R.INTENT_COMMITTED):
            self.facts.setdefault(run, []).append((branch, lsn, p["kind"], body, oid))

    # -- the state cache, checked against the fold verify makes as it reads -------------------
    def _fold(self, key: tuple[str, int], oid: bytes, p: dict) -> None:
        """Fold each record into its branch's state in log order (a branch's records arrive in
        LSN order), and add its attempt view to an order-free digest of the branch's views."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = [self._initial_state(key), 0]
        rec = R.Record(oid, p["run"], p["branch"], p["lsn"], p["parent"], p["kind"], p.get("time"), p["body"])
        apply(st[0], rec)
        if rec.kind == R.ATTEMPT:
            view = codec.canonical_json_plain(attempt_view(rec, st[0]["workflow_version"]))
            st[1] = (st[1] + _digest(rec.body["step"], rec.body["attempt"], rec.lsn, view)) % _MOD

    def _initial_state(self, key: tuple[str, int]) -> dict:
        """Empty for branch 0; for a fork, the fold of its parent up to the fork point (those
        records are all earlier in the log than the fork object, so they can be read now)."""
        fk = self.forks.get(key)
        if key[1] == 0 or fk is None:
            return empty_state()
        p = fk[1]
        view = self.log.view(key[0])
        return fold(self.log.iter_lineage(view, p["parent_branch"], upto=p["parent_lsn"]))

    def _check_state(self) -> None:
        """A cache row that claims the head verify saw must be what the cache would serve
        (``StateCache.diverged``: rows confirmed against the log's chain index and fork object)
        and equal verify's own fold, state and attempt views alike; rows behind (a cache miss)
        or beyond this snapshot are skipped."""
        from .chain import View

        cache = self.log.state
        runs = sorted({k[0] for k in self.last} | {k[0] for k in self.forks})
        for run in runs:
            try:
                cached = cache.cached(run)
            except ObjstoreError:
                continue
            for b, (head, _tip, state) in cached.items():
                key = (run, b)
                last = self.last.get(key)
                mine = last[0] if last else (self.forks[key][0] if key in self.forks else None)
                if head != mine or mine is None:
                    continue
                if state is None:
                    self.add("state-diverged", f"{run}/{b}", cache.path, "cached folded state is damaged (not a folded state)")
                    continue
                try:
                    why = cache.diverged(self.log, View(run, b, {b: mine}), b)
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

    def _index_rows(self, e: Entry) -> None:
        starts, off = [], e.data_off
        for _comp, _raw, stored in e.blocks:
            starts.append(off)
            off += stored
        rows = self.seg_rows[2]
        pack = segindex.obj_row
        for oid, otype, length, bi, boff in e.objs:
            comp, raw, stored = e.blocks[bi]
            if otype in segindex.TYPE_CODE:
                rows.append(pack(oid, e.n, starts[bi], stored, raw, boff, length, comp, otype))
        self.seg_end = (e.n, e.checksum)

    def _check_index(self, last: bool = False) -> None:
        """A sealed segment's index file must be exactly what its entries say (a missing one is
        only a note: it is rebuilt when needed)."""
        seg, first, rows, chain = self.seg_rows
        path_of = getattr(self.engine, "idx_path", None)
        if len(self.problems) != self.seg_problems:
            return  # damage in the segment is reported already; its index would differ for that reason
        if not seg or path_of is None or not isinstance(self.engine, LogEngine) or (
                last and not os.path.exists(self.engine.seg_path(seg + 1))):
            return  # nothing read yet, a memory engine, or the active segment (its tables are checkpointed)
        path = path_of(seg)
        try:
            with open(path, "rb") as f:
                have = f.read()
        except FileNotFoundError:
            self.notes.append(Problem("index-missing", path, "", f"segment {seg} has no index file; it is rebuilt when needed"))
            return
        want = segindex.build_packed(seg, first, self.seg_end[0], self.seg_end[1], rows, chain)
        if have != want:
            self.add("damaged-index", path, "", f"index of segment {seg} does not match its entries (rebuild: delete the file)")

    def _moves(self, e: Entry, where: str) -> None:
        for name, old, new, _reason in e.moves:
            cur = self.refs.get(name)
            if cur != old:
                self.add("ref-log-mismatch", name, where, f"entry {e.n} moves it from {_show(old)}, but it held {_show(cur)}")
            if new is None:
                self.refs.pop(name, None)
            else:
                self.refs[name] = new
            if isinstance(new, bytes) and new not in self.damaged and self._type(new) is None:
                self.add("dangling-ref", name, where, f"entry {e.n} points it at {new.hex()}, not stored in or before that entry")

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
            want = {runrefs.JOURNAL: codec.JOURNAL, runrefs.SEGMENTS: codec.SEGMENT}.get(rest)
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
                if value != expect and value not in self.rejected:
                    self.add("broken-chain", name, "", f"head {value.hex()} is not the newest record of run {run} branch {b}")

    def _chains_end(self) -> None:
        for (run, b), (fid, fk, _where) in sorted(self.forks.items()):
            subject = fid.hex()
            ref = runrefs.branch_ref(run, b)
            pb, pl = fk["parent_branch"], fk["parent_lsn"]
            if b == 0:
                self.add("bad-fork", subject, ref, "branch 0 cannot start at a fork object")
                continue
            last = self.last.get((run, pb))
            if last is None:
                self.add("bad-fork", subject, ref, f"parent branch {pb} does not exist")
                continue
            # LSN -> id from the log's chain index (its files are compared with the entries above)
            at = self.engine.record_at(run, pb, pl) if 0 <= pl <= last[1] else None
            if at != fk["parent_record"]:
                self.add("bad-fork", subject, ref, f"fork says parent branch {pb} LSN {pl}, but its parent record is {self._describe(fk['parent_record'])}")
                continue
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

    def _lsn_on(self, run: str, branch: int, oid: bytes) -> int | None:
        """The LSN of ``oid`` if it is a record on (run, branch)'s chain, else None."""
        if self._type(oid) != codec.RECORD:
            return None
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
        except ObjstoreError:
            continue
        for b, (head, _tip, state) in cached.items():
            if view.heads.get(b) != head:
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


def assert_refold_identical(log: RunLog, run: str, branches: list[int] | None = None) -> None:
    """Raise AssertionError unless the cached state of each branch equals a cold re-fold."""
    view = log.view(run)
    log.state.refresh(log, view, branches)
    bad = check_state_cache(log, [run])
    if bad:
        raise AssertionError("; ".join(p.line() for p in bad))
