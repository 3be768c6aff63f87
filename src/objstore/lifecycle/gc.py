"""``objstore gc``: remove the bodies recorded deletions name, and repack sealed segments.

Explicit, never automatic (git ``gc``, borg ``compact``, restic ``prune``). Under the gc lock
(``storage.gclock``: one gc at a time, never during a backup; writers and readers never wait):

1. **Seal** the active segment (unless it holds only its first entry), so a small store is cleaned
   like a big one: every entry so far is then in a sealed segment.
2. **What goes**, from the log alone: the records of deleted runs (``run/<R>/deleted``) and the
   records partial deletions list (``run/<R>/deletions``), the fork objects of deleted runs, the
   blobs those records name that no live record of any run (and no live journal or segment object)
   still names, and every redacted blob (``redacted/<id>``), whoever names it. Reachability comes
   from the entries' index rows (their ``refs``), so no live record body is decoded; a committed
   blob that no record names is kept (``stats`` counts it).
3. **Rewrite**: every sealed segment not packed yet, or holding a body that goes, is written again
   as a packed segment (``storage.log.packed``): the same entries, hence the same chain checksums and
   anchors, the objects merged into large zstd blocks (records with records, blobs with blobs), the
   removed bodies left out. Each new file and its index are written in ``tmp/``, fsynced, renamed
   over the old ones (the segment file first), and then one **rewrite entry** names every new file's
   and index's digest. A crash anywhere leaves the old or the new file in place, both readable and
   both the log's entries; ``gc`` run again finishes the job.
4. The state cache drops deleted runs and is vacuumed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import blake3
import msgspec
import zstandard

from ..errors import IntegrityError, InvalidInput, ObjstoreError, RunNotFound, StorageOSError, UntrustedGcPending
from ..runs import records, state
from ..runs import records as R
from ..runs.facts import body_refs
from ..storage import codec, fileutil, runrefs
from ..storage.gclock import gc_lock
from ..storage.log import packed, segindex
from ..storage.log.entry import LogEntry, block_starts
from ..storage.log.format import COMP_GONE, COMP_RAW, COMP_ZSTD, LARGE_BLOB, MIN_COMPRESS, REMOVED, Loc
from ..storage.log.local import LogEngine
from ..storage.log.parse import _rw_shape_problem
from ..storage.log.segfile import _read_segment_header, packed_entries, seg_name
from ..storage.log.segrows import _segment_rows
from ..storage.storedir import mark_packed
from . import delete
from .gc_copies import _kept_by_copies, _parent_of
from .retention import parse_age as parse_age  # the retention options of gc: re-exported (objstore_cli, callers of gc)
from .retention import runs_inactive_for as runs_inactive_for
from .retention import runs_older_than as runs_older_than

if TYPE_CHECKING:
    from ..storage.store import Store

STRUCT_BLOCK = 256 << 10  # records (and other structured objects) are merged into blocks of about this many raw bytes
BLOB_BLOCK = 1 << 20  # small blobs, into blocks of about this many
LEVEL = 3  # zstd level of merged blocks: written once, read many times
TMP = "gc"
_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()


class GcResult(NamedTuple):
    """What one gc did: segments rewritten, bodies removed (records, blobs), bytes before and after."""

    sealed: int
    rewritten: list
    removed_records: int
    removed_blobs: int
    removed_other: int
    bytes_before: int
    bytes_after: int
    entry: int  # the rewrite entry's number (0: nothing to rewrite)

    def to_json(self) -> dict:
        return {"sealed_segment": self.sealed, "rewritten": self.rewritten, "removed_records": self.removed_records,
                "removed_blobs": self.removed_blobs, "removed_other": self.removed_other,
                "segment_bytes_before": self.bytes_before, "segment_bytes_after": self.bytes_after, "rewrite_entry": self.entry}


class Doomed(NamedTuple):
    """The bodies a gc removes, by kind (ids)."""

    records: set
    blobs: set
    other: set  # fork, journal and segment objects of deleted runs

    def all(self) -> set:
        return self.records | self.blobs | self.other


def _eng(store: Store, log: Any = None) -> LogEngine:
    eng = store.engine if log is None else log
    if not eng.log_files or store.root is None:
        raise InvalidInput("gc works on a store on disk (this one lives in memory)")
    return cast(LogEngine, eng)


def _reader(store: Store, log: Any = None) -> Any:
    """The engine gc reads what goes from: ``log`` (one log of a store of a log per run), else the store's
    log on disk or on object storage."""
    if store.url is not None:
        return store.engine if log is None else log
    return _eng(store, log)


def _deleted_in(eng: Any) -> dict[str, bytes]:
    """{run: id of its deletion} of the deleted runs whose ``deleted`` ref is in this log (on a store of a
    log per run: the log's own run, if deleted; on a store of one log: every deleted run)."""
    out = {}
    for name, value in list(eng.tables.refs.items()):
        if runrefs.is_deleted_ref(name) and isinstance(value, bytes):
            run = runrefs.run_of(name)
            if run is not None:
                out[run] = value
    return out


def unreferenced(store: Store, age: float, now: float | None = None) -> set:
    """Blobs committed more than ``age`` seconds ago that nothing names: no record (its index row's
    refs), no ref, no journal, segment, grant, fork or deletion object — in any log of the store (a
    redaction is store-wide: a blob one log holds unnamed may be another log's named copy). What ``gc
    --prune-unreferenced-older-than`` removes, explicitly: by default gc keeps them (``stats`` counts them)."""
    candidates: set = set()
    named: set = set()
    logs = store.logs.all_logs()  # one log open at a time
    for _run, log in logs:
        c, n = _unreferenced_in(_reader(store, log), age, now)
        candidates |= c
        named |= n
    return candidates - named


def _unreferenced_in(eng: Any, age: float, now: float | None) -> tuple[set, set]:
    """(blobs of this log committed more than ``age`` seconds ago, every id this log names)."""
    eng.refresh()
    cutoff = (time.time() if now is None else now) - age
    candidates: set = set()
    named: set = {v for v in eng.tables.refs.values() if isinstance(v, bytes)}
    for e in eng.entries():
        for r in e.recs:
            named.update(r[6])
        for o in e.objs:
            if o[1] == codec.BLOB:
                if e.time < cutoff and o[3] != REMOVED:
                    candidates.add(o[0])
            elif o[1] not in (codec.RECORD, codec.BLOB) and o[3] != REMOVED:
                try:
                    otype, value = codec.decode(eng.read(o[0]), o[0], False)
                except ObjstoreError:
                    continue
                if isinstance(value, dict):
                    named.update(ref for _f, ref in records.object_refs(otype, value))
                    named.update(b for b in value.get("blobs") or () if isinstance(b, bytes))
    return candidates, named


def _redact_unreferenced(store: Store, age: float) -> int:
    """Record the removal of every unreferenced blob older than ``age`` as a redaction (signed like
    'objstore redact', reason 'unreferenced'), so verify finds each removed body covered."""
    from ..runs.api import RunLog

    blobs = sorted(unreferenced(store, age))
    if blobs:
        log = RunLog(store)
        for oid in blobs:
            delete.redact(log, oid, reason=f"unreferenced for more than {age:g} s: pruned by gc")
    return len(blobs)


def doomed(store: Store, log: Any = None) -> Doomed:
    """The bodies that go from one log (``log``; None: the store's one log) (see the module docstring):
    from the log's refs, the deletion objects (``lifecycle.delete``'s readers), the index rows of its
    entries, and the bodies of the records that go (each read once). Redactions are the store log's and
    reach every log that holds the blob. ``log`` None on a store of a log per run: what goes from every log."""
    if log is None and store.logs.per_run:
        parts = [doomed(store, e) for _r, e in store.logs.all_logs()]
        return Doomed(*(set().union(*(getattr(d, f) for d in parts)) for f in Doomed._fields))
    eng = _reader(store, log)
    eng.refresh()
    delete.check_authority(store, eng)  # nothing is removed for a deletion no authorised key made
    t = eng.tables
    gone_runs = _deleted_in(eng)
    deleted_runs = set(gone_runs)
    covered = delete.covered_in(store, eng)  # every record partial deletions list or deleted runs hold
    redacted = set(delete.redacted_blobs(store))
    named: set = set()  # blob ids a deleted run's journal and segment objects named (its deletion lists them)
    for did in gone_runs.values():
        named.update(b for b in store.deletion_object(did).get("blobs") or () if isinstance(b, bytes))
    recs: set = set(covered)
    other: set = set()
    for run in deleted_runs:
        prefix = runrefs.run_prefix(run)
        for name, value in list(t.refs.items()):
            if not (name.startswith(prefix) and isinstance(value, bytes)):
                continue
            b = runrefs.branch_of(run, name)
            if b is not None and b > 0:
                # A forked branch starts at its fork object: the branch ref names it while the branch
                # has no record, the LSN-0 record's parent afterwards.
                first = eng.record_at(run, b, 0)
                for fk in (value, _parent_of(eng, first) if first is not None else None):
                    if fk is not None and (loc := eng.loc(fk)) is not None and loc.otype == codec.FORK:
                        other.add(fk)
            elif name in (runrefs.journal_ref(run), runrefs.segments_ref(run)):
                _chain_objects(eng, value, other)
    if recs or other:
        # A live copy (fork_run) goes on into its source at its cross-run fork: what its lineage reaches
        # is its history too, kept though the source run was deleted (or those records covered).
        # A record a partial deletion names goes all the same: the user deleted that very record.
        named_records: set = set()
        for partly in {runrefs.run_of(n) for n in t.refs if runrefs.is_deletions_ref(n)}:
            if partly is not None:
                named_records.update(store.covered_records(partly))
        kept = _kept_by_copies(store, eng, deleted_runs) - named_records
        recs -= kept
        other -= kept
    # The blobs the doomed records name (their bodies are in segments being rewritten anyway).
    candidates: set = set(named)
    for oid in recs:
        loc = eng.loc(oid)
        if loc is None or loc.comp == COMP_GONE:
            continue
        try:
            value = codec.decode(eng.read(oid), oid, False)[1]
        except ObjstoreError:
            continue
        body = value.get("body") if isinstance(value, dict) else None
        if isinstance(body, dict):
            candidates.update(body_refs(body))
    # A ref that names a blob itself (keys/owner names the owner's public key as a blob) keeps it.
    refs = dict(t.refs)
    if store.logs.per_run and store.logs.store_log is not eng:
        refs.update(store.logs.store_log.tables.refs)  # the store-wide refs name blobs a run's log may hold too
    for name, value in refs.items():
        if isinstance(value, bytes) and value in candidates and runrefs.run_of(name) not in deleted_runs:
            candidates.discard(value)
    candidates -= recs
    # A body may name a record (a LangGraph checkpoint names its parts nodes, x.langgraph.parts): such a record goes only
    # when a deletion covers it (recs); as a candidate it would lose its body while its chain still holds it.
    candidates = {c for c in candidates if (loc := eng.loc(c)) is None or loc.otype == codec.BLOB}
    if candidates:
        _keep_live_named(eng, recs, candidates, deleted_runs)
    return Doomed(recs, candidates | redacted, other)


def _keep_live_named(eng: LogEngine, recs: set, candidates: set, deleted_runs: set) -> None:
    """``doomed``'s last pass: the ``candidates`` (blob ids) that something live still names leave the set."""
    # Kept if anything live still names them: another record (its index rows' refs), or a
    # journal or segment object of a run that is not deleted (their ids, from their bodies).
    for e in eng.entries():
        for r in e.recs:
            oid = e.objs[r[0]][0]
            if oid in recs:  # doomed (every record of a deleted run is, but those a live copy reaches)
                continue
            for ref in r[6]:
                candidates.discard(ref)
        for o in e.objs:
            if o[1] in ("journal", "segment") and candidates and o[3] != REMOVED:
                try:
                    value = codec.decode(eng.read(o[0]), o[0], False)[1]
                except ObjstoreError:
                    continue
                if isinstance(value, dict) and value.get("run") not in deleted_runs:
                    for _f, ref in records.object_refs(o[1], value):
                        candidates.discard(ref)
        if not candidates:
            break


def _chain_objects(eng: LogEngine, head: bytes, out: set) -> None:
    """Every object of a deleted run's journal or segment chain from ``head`` back (into ``out``).
    The blobs they name go only as the run's deletion lists them (``blobs``), which verify can check."""
    cur: Any = head
    seen: set = set()
    while isinstance(cur, bytes) and cur not in seen:
        seen.add(cur)
        loc = eng.loc(cur)
        if loc is None or loc.otype not in ("journal", "segment"):
            return
        out.add(cur)
        if loc.comp == COMP_GONE:
            return  # removed by an earlier gc, with everything behind it
        try:
            value = codec.decode(eng.read(cur), cur, False)[1]
        except ObjstoreError:
            return
        if not isinstance(value, dict):
            return
        cur = value.get("previous")


def _segments_to_rewrite(eng: LogEngine, last: int, gone: set) -> list[int]:
    need = set()
    for oid in gone:
        loc = eng.loc(oid)
        if loc is not None and loc.comp != COMP_GONE and loc.seg <= last:
            need.add(loc.seg)
    for seg in range(1, last + 1):
        if eng._packed(seg) is None:
            need.add(seg)
    return sorted(need)


class _Block:
    """Objects waiting to be merged into one block: their bytes and the rows that will name it."""

    def __init__(self) -> None:
        self.parts: list = []
        self.size = 0
        self.rows: list = []

    def add(self, row: list, data: bytes) -> None:
        row[4] = self.size
        self.parts.append(data)
        self.size += len(data)
        self.rows.append(row)

    def flush(self, w: packed.Writer, z: zstandard.ZstdCompressor) -> None:
        if not self.parts:
            return
        raw = b"".join(self.parts)
        comp, stored = COMP_RAW, raw
        if len(raw) >= MIN_COMPRESS:
            c = z.compress(raw)
            if len(c) < len(raw) - 16:
                comp, stored = COMP_ZSTD, c
        bi = w.block(comp, len(raw), stored)
        for row in self.rows:
            row[3] = bi
        self.parts, self.size, self.rows = [], 0, []


def _source_bytes(eng: LogEngine, e: LogEntry, o: list, starts: list, cache: dict) -> bytes:
    """One object's canonical bytes from the segment being rewritten, hash-checked: gc never carries
    damaged bytes into a new file (it stops and names them; verify tells the rest). Each source
    block is decompressed once (``cache``: file offset -> raw block)."""
    oid, otype, length, bi, off = o
    comp, raw_len, stored = e.blocks[bi][:3]
    loc = Loc(e.n, e.seg, starts[bi], comp, stored, raw_len, off, length, otype)
    raw = cache.get(loc.block_off)
    if raw is None:
        eng._check_loc(oid, loc)
        raw = eng._read_block(loc, hold=False)  # a one-pass copy: the readers' blocks stay held
        if len(cache) >= 8:
            cache.clear()
        cache[loc.block_off] = raw
    data = bytes(raw[off : off + length])
    if len(data) != length or blake3.blake3(data).digest() != oid:
        raise IntegrityError(oid.hex(), eng.seg_path(e.seg), "hash mismatch (content does not match id); gc stops before rewriting it (run 'objstore verify')")
    return data


def pack_segment(eng: LogEngine, seg: int, gone: set, path: str, sync: bool) -> tuple[bytes, bytes, dict]:
    """Write segment ``seg`` packed into ``path`` without the bodies in ``gone``: (BLAKE3 of the
    file, the bytes of its index, {id: type} of the bodies this rewrite removes)."""
    hdr = _read_segment_header(eng._fd(seg), eng.seg_path(seg))
    entries = list(eng._segment_entries(seg, hdr[3], hdr[2]))
    if not entries or not entries[-1].seal:
        raise IntegrityError("?", eng.seg_path(seg), "sealed segment does not read to its seal entry (run 'objstore verify')")
    nxt = list(_first(eng, seg + 1, entries[-1]))
    if not nxt or nxt[0].idx is None:
        raise IntegrityError("?", eng.seg_path(seg + 1), "the next segment does not name this segment's index")
    w = packed.Writer(path, seg, hdr[2], len(entries), hdr[3], nxt[0].idx[1])
    z = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True)
    removed: dict = {}
    try:
        structs, blobs = _Block(), _Block()
        metas: list = []
        cache: dict = {}
        for e in entries:
            starts = block_starts(e)
            objs: list = []
            for o in e.objs:
                oid, otype, length, bi, _off = o
                if bi == REMOVED or oid in gone:
                    if bi != REMOVED:
                        removed[oid] = otype
                    objs.append([oid, otype, length, REMOVED, 0])
                    continue
                comp, raw_len, stored_len = e.blocks[bi][:3]
                if _check_large(eng, e, o, starts):
                    # A large blob keeps its own block, its stored bytes copied as they are (hash-checked first).
                    try:
                        nbi = w.copy_block(eng._fd(seg), starts[bi], comp, raw_len, stored_len)
                    except packed.PackError as err:
                        raise IntegrityError(oid.hex(), eng.seg_path(seg), str(err)) from None
                    objs.append([oid, otype, length, nbi, 0])
                    continue
                data = _source_bytes(eng, e, o, starts, cache)
                row = [oid, otype, length, -2, 0]
                target = blobs if otype == codec.BLOB else structs
                target.add(row, data)
                objs.append(row)
                if target.size >= (BLOB_BLOCK if target is blobs else STRUCT_BLOCK):
                    target.flush(w, z)
            metas.append([e.time, e.moves, objs, e.cut, e.recs, e.prevs, e.root, e.seal, e.idx, e.rw])
        structs.flush(w, z)
        blobs.flush(w, z)
        w.finish(metas, entries[-1].checksum, sync)
    except BaseException:
        w.abort()
        raise
    # Read the new file back as a reader will: its chain must end where the old one did.
    idx = _index_of_packed(path, seg, entries[-1].checksum)
    if isinstance(idx, str):
        raise IntegrityError("?", path, f"the packed segment does not read back ({idx})")
    return packed.file_digest(path), idx, removed


def _index_of_packed(path: str, seg: int, last: bytes) -> bytes | str:
    """The index a packed segment file's entries give, read as a reader reads the file (its chain
    recomputed from the metas); or what is wrong: it does not read, or its chain does not end at
    ``last`` (where the log's segment ``seg`` ends)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if not packed.is_packed(fd):
            return "it is not a packed segment"
        pk = packed_entries(fd, seg)
        if pk.problem is not None or not pk.entries or pk.entries[-1].checksum != last:
            return pk.problem or "its chain ends elsewhere"
        objects: dict = {}
        chain: list = []
        for e in pk.entries:
            _segment_rows(e, objects, chain)
        end = pk.entries[-1]
        return segindex.build(seg, pk.entries[0].n, end.n, end.checksum, objects.values(), chain)
    finally:
        os.close(fd)


def _first(eng: LogEngine, seg: int, last: LogEntry) -> Iterator[LogEntry]:
    for e in eng._segment_entries(seg, last.checksum, last.n + 1):
        yield e
        return


def _check_large(eng: LogEngine, e: LogEntry, o: list, starts: list) -> bool:
    """Whether object row ``o`` is a large blob (a block of its own), hash-checked as it streams if so."""
    oid, otype, length, bi, _off = o
    comp, raw_len, stored_len = e.blocks[bi][:3]
    if otype != codec.BLOB or raw_len <= LARGE_BLOB:
        return False
    eng._check_loc(oid, Loc(e.n, e.seg, starts[bi], comp, stored_len, raw_len, 0, length, otype), prehash_above=0)
    return True


def gc(store: Store, *, progress: Callable[[str], None] | None = None, timeout: float = 600.0,
       prune_unreferenced_older_than: float | None = None, step: Callable[[int], None] | None = None,
       run: str | None = None) -> GcResult:
    """Find what goes, pack every segment that needs it into ``tmp/gc/`` (the sealed ones, then the
    active one once sealed), then under the writer lock take in what writers committed meanwhile,
    put the packed files in place and commit one rewrite entry (see the module docstring). Nothing
    in the store changes before every segment is packed, so damage found while packing leaves the
    store as it was. Safe to run again at any point: it finishes what a killed gc left.
    ``prune_unreferenced_older_than`` (seconds): also remove the committed blobs that nothing names
    (``unreferenced``), and on object storage the keys no entry names, older than that.
    ``step(segments packed so far)``: called as each segment is packed (a progress bar's).
    A store of a log per run is collected one log at a time (the store log, then each run's in catalog
    order: memory holds one log's figures), each by the same mechanics; ``run``: only that run's log.
    A store on object storage is collected by ``_gc_remote``."""
    if prune_unreferenced_older_than is not None and (isinstance(prune_unreferenced_older_than, bool) or prune_unreferenced_older_than < 0):
        raise InvalidInput("--prune-unreferenced-older-than must be an age of 0 or more")
    if run is not None and not store.logs.per_run:
        raise InvalidInput("gc of one run works on a store of a log per run (format 6 or 7); this store has one log: run 'objstore gc'")
    if store.url is not None:
        return _gc_remote(store, progress or (lambda _m: None), prune_unreferenced_older_than, run)
    root = store.root
    if root is None or not store.engine.log_files:
        raise InvalidInput("gc works on a store on disk (this one lives in memory)")
    say = progress or (lambda _m: None)
    with gc_lock(root, shared=False, timeout=timeout, what="gc"):
        if not store.logs.per_run:
            res = _gc_log(store, _eng(store), say, step, timeout, prune_unreferenced_older_than)
        else:
            res = _gc_logs(store, say, step, timeout, prune_unreferenced_older_than, run)
    _vacuum_state(store)
    return res


def _gc_logs(store: Store, say: Callable[[str], None], step: Callable[[int], None] | None, timeout: float,
             prune: float | None, run: str | None) -> GcResult:
    """gc of a store of a log per run: each log in turn (``run``: that run's log alone), results summed;
    ``rewritten`` names each segment as ``<log>:<segment>`` (``store`` for the store log)."""
    if prune is not None:
        _redact_unreferenced(store, prune)  # redactions are store-wide: found over every log, then each log drops them
    if run is not None:
        R.check_run_id(run)
        if not isinstance(store.run_refs(run).get(runrefs.branch_ref(run, 0)), bytes):
            raise RunNotFound(run)
        logs: Iterator[tuple[str | None, Any]] = iter([(run, store.logs.run_log(run))])
    else:
        logs = store.logs.all_logs()
    rewritten: list[str] = []
    sums = [0, 0, 0, 0, 0, 0]  # sealed, removed records, blobs, other, bytes before, after
    entry = 0

    def stepped(n: int) -> None:
        if step is not None:
            step(len(rewritten) + n)

    for name, log in logs:
        label = "store" if name is None else name
        res = _gc_log(store, _eng(store, log), lambda m, label=label: say(f"{label}: {m}"), stepped, timeout, None)  # type: ignore[misc]
        rewritten += [f"{label}:{seg}" for seg in res.rewritten]
        for i, v in enumerate((res.sealed, res.removed_records, res.removed_blobs, res.removed_other, res.bytes_before, res.bytes_after)):
            sums[i] += v
        entry = max(entry, res.entry)
    return GcResult(sums[0], rewritten, sums[1], sums[2], sums[3], sums[4], sums[5], entry)


def _gc_log(store: Store, eng: LogEngine, say: Callable[[str], None], step: Callable[[int], None] | None, timeout: float,
            prune: float | None) -> GcResult:
    """gc of one log (``eng``), under the gc lock: today's mechanics, in the log's own ``tmp/gc/``."""
    tmpdir = os.path.join(eng.root, "tmp", TMP)
    sync = eng.policy.enabled
    unfinished = _unfinished(eng)
    if unfinished:
        # A gc killed after it put packed files in place and before its rewrite entry: name them now.
        eng.commit_rewrite(unfinished, timeout=timeout)
        say(f"finished an interrupted gc: segments {', '.join(str(r[0]) for r in unfinished)}")
    _clean_tmp(tmpdir)
    eng.finish_seal(timeout=timeout)
    active_then = eng._seg
    since = eng.tables.pos.entry
    if prune is not None:
        _redact_unreferenced(store, prune)
    gone = doomed(store, eng)
    every = gone.all()
    packs: dict[int, tuple] = {}  # segment -> (packed file in tmp, its index in tmp, row, removed {id: type})
    try:
        os.makedirs(tmpdir, exist_ok=True)
        for seg in _segments_to_rewrite(eng, active_then - 1, every):
            say(f"packing segment {seg}")
            packs[seg] = _pack_into_tmp(eng, seg, every, tmpdir, sync)
            if step is not None:
                step(len(packs))
        _check_active(eng)  # damage in the active segment is found before gc seals it
        last = eng.seal_now(timeout=timeout)
        for seg in range(active_then, last + 1):
            if seg not in packs and (eng._packed(seg) is None or _holds(eng, seg, every)):
                say(f"packing segment {seg}")
                packs[seg] = _pack_into_tmp(eng, seg, every, tmpdir, sync)
                if step is not None:
                    step(len(packs))
        before = eng.segment_bytes(packs)
        entry = 0
        if packs:
            entry = _put_in_place(store, eng, tmpdir, packs, gone, every, since, active_then, sync, timeout)
    except OSError as e:
        raise StorageOSError("rewrite a segment (gc)", e) from None
    finally:
        _clean_tmp(tmpdir, keep=PENDING)  # the pending rows stay until a rewrite entry names them
    _clean_tmp(tmpdir)
    eng._checkpoint()
    after = eng.segment_bytes(packs)
    removed: dict = {}
    for p in packs.values():
        removed.update(p[3])
    kinds = list(removed.values())
    return GcResult(last, sorted(packs), kinds.count(codec.RECORD), kinds.count(codec.BLOB),
                    len(kinds) - kinds.count(codec.RECORD) - kinds.count(codec.BLOB), before, after, entry)


def _gc_remote(store: Store, say: Callable[[str], None], prune: float | None, run: str | None = None) -> GcResult:
    """gc on object storage (storage.s3), one log at a time (a store of a log per run: the store log, then each run's
    in catalog order; ``run``: that run's log alone): the entries that store a body that goes are written again
    without it, in place (chunks and entry keys PUT again under their keys, HEAD's tail by compare-and-swap): the
    same entries and checksums, so anchors hold. A blob a writer named meanwhile — it found the body stored and did
    not store it again — is committed again. With ``prune``, the chunk and entry keys no entry names (a writer's PUT
    before a HEAD swap it lost) older than that are deleted."""
    store.engine.refuse_old_format()  # type: ignore[attr-defined]
    if prune is not None:
        _redact_unreferenced(store, prune)  # redactions are store-wide: found over every log, then each log drops them
    if not store.logs.per_run:
        logs: Any = [(None, store.engine)]
    elif run is not None:
        R.check_run_id(run)
        if not isinstance(store.run_refs(run).get(runrefs.branch_ref(run, 0)), bytes):
            raise RunNotFound(run)
        logs = [(run, store.logs.run_log(run))]
    else:
        logs = store.logs.all_logs()
    total = [0, 0, 0, 0, 0]
    for one, eng in logs:
        if eng.position().entry == 0:
            continue  # a run without a log (or with an empty one): nothing stored
        for i, v in enumerate(_gc_remote_log(store, eng, say, prune)):
            total[i] += v
        if one is not None:
            store.logs.release(one)  # one run's log open at a time
    _vacuum_state(store)
    recs, blobs, other, before, after = total
    return GcResult(0, [], recs, blobs, other, before, after, 0)


def _gc_remote_log(store: Store, eng: Any, say: Callable[[str], None], prune: float | None) -> tuple[int, int, int, int, int]:
    """One log's gc on object storage: (records, blobs, other bodies and keys removed, bytes before, bytes after)."""
    since = eng.refresh(force=True).entry
    gone = doomed(store, eng)
    every = gone.all()
    before = eng.stored_bytes()
    removed, blobs = eng.remove_bodies(every)
    if removed:
        say(f"removed {len(removed)} bodies")
    keep = set(blobs) - set(delete.redacted_blobs(store))
    late: set = set()
    if keep:
        deleted = set(delete.deleted_runs(store))
        for e in eng.entries():
            if e.n <= since:
                continue
            for r in e.recs:
                if r[1] not in deleted:
                    late.update(x for x in r[6] if x in keep)
    if late:
        eng.commit([(oid, codec.BLOB, blobs[oid]) for oid in sorted(late)])
        for oid in late:
            removed.pop(oid, None)
        say(f"kept {len(late)} blob(s) a writer named meanwhile (committed again)")
    pruned = 0
    if prune is not None:
        cutoff = time.time() - prune
        for x in eng.unnamed_keys():
            if x.modified < cutoff:
                eng.bucket.delete(x.key)
                pruned += 1
        if pruned:
            say(f"deleted {pruned} key(s) no entry names")
    kinds = list(removed.values())
    return (kinds.count(codec.RECORD), kinds.count(codec.BLOB),
            len(kinds) - kinds.count(codec.RECORD) - kinds.count(codec.BLOB) + pruned, before, eng.stored_bytes())


def _pack_into_tmp(eng: LogEngine, seg: int, every: set, tmpdir: str, sync: bool) -> tuple:
    seg_tmp = os.path.join(tmpdir, seg_name(seg))
    idx_tmp = seg_tmp[:-4] + ".idx"
    file_digest, idx_bytes, removed = pack_segment(eng, seg, every, seg_tmp, sync)
    segindex.write(idx_tmp, idx_bytes)
    return seg_tmp, idx_tmp, [seg, file_digest, blake3.blake3(idx_bytes).digest()], removed


def _holds(eng: LogEngine, seg: int, every: set) -> bool:
    """Whether sealed segment ``seg`` still stores the body of one of ``every``."""
    return any((loc := eng.loc(oid)) is not None and loc.seg == seg and loc.comp != COMP_GONE for oid in every)


def _check_active(eng: LogEngine) -> None:
    """Hash-check every object of the active segment (gc is about to seal it, a write it must not
    make on a damaged log)."""
    seg = eng._seg
    hdr = _read_segment_header(eng._fd(seg), eng.seg_path(seg))
    cache: dict = {}
    for e in eng._segment_entries(seg, hdr[3], hdr[2]):
        starts = block_starts(e)
        for o in e.objs:
            if o[3] != REMOVED and not _check_large(eng, e, o, starts):
                _source_bytes(eng, e, o, starts, cache)


def _late_refs(eng: LogEngine, since: int, active_then: int, candidates: set) -> set:
    """The ``candidates`` (doomed blobs) that a live record — or a live journal or segment object —
    committed after entry ``since`` names: a writer that found such a blob stored (its body still
    there) did not store it again, so it must stay. Reads only the segments written since."""
    deleted = set(_deleted_in(eng))
    late: set = set()
    for seg in range(active_then, eng._seg + 1):
        hdr = _read_segment_header(eng._fd(seg), eng.seg_path(seg))
        for e in eng._segment_entries(seg, hdr[3], hdr[2]):
            if e.n <= since:
                continue
            for r in e.recs:
                if r[1] not in deleted:
                    late.update(x for x in r[6] if x in candidates)
            for o in e.objs:
                if o[1] in ("journal", "segment") and o[3] != REMOVED:
                    try:
                        value = codec.decode(eng.read(o[0]), o[0], False)[1]
                    except ObjstoreError:
                        continue
                    if isinstance(value, dict) and value.get("run") not in deleted:
                        late.update(ref for _f, ref in records.object_refs(o[1], value) if ref in candidates)
    return late


def _put_in_place(store: Store, eng: LogEngine, tmpdir: str, packs: dict, gone: Doomed, every: set, since: int,
                  active_then: int, sync: bool, timeout: float) -> int:
    """Under the writer lock: keep what writers named meanwhile (re-packing a segment that left it
    out), then the index and the file of each packed segment over the old ones, and the rewrite entry."""
    with eng.transaction(timeout) as _txn:
        late = _late_refs(eng, since, active_then, gone.blobs - set(delete.redacted_blobs(store))) if gone.blobs else set()
        if late:
            every -= late
            for seg, p in list(packs.items()):
                if late & set(p[3]):
                    packs[seg] = _pack_into_tmp(eng, seg, every, tmpdir, sync)
        assert store.root is not None
        mark_packed(store.root, eng.policy)  # the store's marker (a no-op from format 4 on)
        rows = [packs[seg][2] for seg in sorted(packs)]
        _note_pending(eng, tmpdir, rows)
        for seg in sorted(packs):
            seg_tmp, idx_tmp, _row, _removed = packs[seg]
            # The index first: until the rewrite entry names it, its digest is not the one the log
            # names, so a reader builds the index from the segment file it has open, old or new.
            # Were the old index left beside the new file, a reader would trust it (its digest is
            # still the named one) and find the wrong bytes.
            os.replace(idx_tmp, eng.idx_path(seg))
            os.replace(seg_tmp, eng.seg_path(seg))
        eng.policy.dir(eng.dir)
        e = eng._write_bare(rw=rows)
        for seg in sorted(packs):
            eng.forget_segment(seg)
    return e.n


PENDING = os.path.basename(packed.PENDING)


def _note_pending(eng: LogEngine, tmpdir: str, rows: list) -> None:
    """Record, durably and before any file is replaced, the rewrite rows this gc is about to make true."""
    with fileutil.atomic_file(os.path.join(tmpdir, PENDING), tmpdir, eng.policy) as f:
        f.write(packed.encode_pending(rows))


def _unfinished(eng: LogEngine) -> list:
    """The rows of a killed gc whose packed files are in place but which the log does not name yet,
    each checked before it is committed (``_untrusted``)."""
    rows = packed.read_pending(eng.root)
    if not rows:
        return []
    eng.refresh()
    where = os.path.join(eng.root, packed.PENDING)
    named: set = set()
    for row in rows:  # the shape first: a row's segment is looked up below (1.0 == 1 in the tables)
        bad = _rw_shape_problem([row])
        if bad is not None:
            raise UntrustedGcPending(where, f"its row for segment {row[0]!r} is not [segment, 32-byte file digest, 32-byte index digest] ({bad})")
        if row[0] in named:
            raise UntrustedGcPending(where, f"it names segment {row[0]} twice")
        named.add(row[0])
    out = []
    for seg, file_digest, idx_digest in rows:
        if eng.tables.packs.get(seg) == file_digest or seg not in eng.tables.idx:
            continue
        try:
            if packed.file_digest(eng.seg_path(seg)) == file_digest:
                out.append([seg, file_digest, idx_digest])
        except OSError:
            continue
    for row in out:
        why = _untrusted(eng, row)
        if why is not None:
            raise UntrustedGcPending(where, f"its row for segment {row[0]} {why}")
    return out


def _untrusted(eng: LogEngine, row: list) -> str | None:
    """Why a pending row whose file is in place is not one this gc would commit, else None. Anyone who
    can write the store's files can write tmp/gc/pending (its checksum is BLAKE3 of its bytes), so
    a row is trusted only as far as it is checked: it has the shape readers require of a rewrite row,
    its file is a packed segment whose entries end where the log's segment does (the next segment's
    header chains from there, as readers check), and the index digest is the one those entries give."""
    seg, _file_digest, idx_digest = row
    bad = _rw_shape_problem([row])
    if bad is not None:
        return f"is not [segment, 32-byte file digest, 32-byte index digest] ({bad})"
    try:
        nxt = _read_segment_header(eng._fd(seg + 1), eng.seg_path(seg + 1))
        idx = _index_of_packed(eng.seg_path(seg), seg, nxt[3])
    except (OSError, ObjstoreError) as err:
        return f"names a file that cannot be read back ({err})"
    if isinstance(idx, str):
        return f"names a file that is not the log's segment packed ({idx})"
    if blake3.blake3(idx).digest() != idx_digest:
        return f"names index digest {bytes(idx_digest).hex()}, the packed file's entries give {blake3.blake3(idx).hexdigest()}"
    return None


def _clean_tmp(tmpdir: str, keep: str | None = None) -> None:
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return
    for name in names:
        if name == keep:
            continue
        try:
            os.unlink(os.path.join(tmpdir, name))
        except OSError:
            pass


def _vacuum_state(store: Store) -> None:
    """The state cache forgets deleted runs and gives back their pages (derived data: best effort)."""
    fn = getattr(state, "drop_deleted_and_vacuum", None)
    if fn is not None:
        fn(store)
