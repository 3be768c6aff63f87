"""gc + repack (issue 17): bytes on disk after ``objstore gc``, gc's rate against ``verify --no-state``, gc's memory.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_gc.py                          # 20 000 records, 5 reps, memory at 1 000 000
    .venv/bin/python benchmarks/bench_gc.py --records 2000 --reps 2 --mem-records 20000   # smoke (about 20 s)
    .venv/bin/python benchmarks/bench_gc.py --parts bytes,rate       # without the memory part
    .venv/bin/python benchmarks/bench_gc.py --mem-records 250000,500000,1000000   # how gc's memory scales
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_gc.py

Options (each also read from the environment): --records / BENCH_RECORDS (20000) records of the bench_commit
workload; --reps / BENCH_REPS (5); --mem-records / BENCH_MEM_RECORDS (1000000; a comma list measures each size)
records of the memory store; --mem-blob-size (256) bytes of its blobs; --parts / BENCH_PARTS (bytes,rate,mem);
--timeout (900) seconds per child process; --[no-]profile (on: where a time or memory target is missed, one profiled
gc: py-spy when it is installed in the venv, cProfile otherwise, and tracemalloc's top allocation sites for memory);
--seed / BENCH_SEED (1). Scratch directories come from tempfile.mkdtemp(dir=$BENCH_DIR) and are removed at the end.
Every store is BUILT with fsync="off" (building is not what is measured); the commands measured run as a user runs
them (``objstore --store S gc``: fsync on, the default; OBJSTORE_FSYNC is removed from the children's environment).

What it measures
----------------
The store: bench_commit's workload (``bench_commit.workload(n, seed)``: ~300 B attempt records, a fresh 2 KB text
blob on one in three) written through the public API ONE RECORD PER COMMIT (``objstore_setup`` +
``objstore_commits(..., g=1)``); canonical bytes (``bench_commit.objstore_bytes``: every object's
``<type> SP <len> NUL <payload>``) are the denominator of every "x canonical" figure.

1. bytes: the store's files before and after one ``objstore --store S gc`` (a fresh process): segment files
   (``log/*.seg``) / canonical, every file but ``state.db*`` / canonical, ``state.db*`` apart, each file class
   listed (segments, indexes ``log/*.idx``, checkpoint, witness, other). The packed segments broken down with
   ``objstore.storage.log.packed.read``: blocks of records, blocks of blobs, blocks of other objects (stored and raw
   bytes, count), meta frames (stored and raw), headers and trailers; the indexes broken down by their header
   counts (object rows x 66 B, chain rows x 56 B, fixed part). As context, the floor of merged compression: the same
   canonical bytes, records in 256 KiB and blobs in 1 MiB chunks, zstd level 3 (gc's block sizes and level), with
   no per-object or per-entry overhead.
2. rate: for each repetition, two fresh ``cp -r`` copies of the unpacked store (not timed; ``sync`` after), then,
   interleaved (order reversed on alternate repetitions), ``objstore --store COPY1 verify --no-state`` and
   ``objstore --store COPY2 gc``, each a fresh process timed as process wall time (records/s = records in the store
   / wall); per repetition the ratio gc rate / verify rate; min/median/max. The disk's fsync latency (median of 32
   ``write(512 B)`` + ``fdatasync``, bench_commit.fsync_latency) is printed on every repetition's line, since gc
   fsyncs what it writes and this machine's disk swings. Peak RSS and CPU seconds of each command are printed too.
3. memory: a store of --mem-records records (runs of 1000 records, one commit per 1000 records, a --mem-blob-size
   blob on one record in ten: it is the record count that matters), then ``verify --no-state`` and ``gc`` on it, each
   a fresh process under /usr/bin/time (peak RSS of the command itself). With several sizes, the MiB per 100 000
   records between the smallest and largest, and the 1 000 000-record figure that slope predicts.

Targets (issue 17; verdicts on the median where repeated):

* bytes after gc: segments <= 0.30x canonical; every file but state.db* <= 0.45x canonical; state.db* apart
* gc + repack rate >= 1.0x the rate of verify --no-state on the same store, same run
* gc's peak RSS <= 256 MB (256 x 10^6 B) at 1 000 000 records
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import msgspec  # noqa: E402
import zstandard  # noqa: E402
from bench_commit import PROMPT, canonical_len, fsync_latency, objstore_bytes, objstore_commits, objstore_setup, workload  # noqa: E402
from bench_verify import (  # noqa: E402
    PY,
    TIME,
    build_store,
    check_ok,
    child_env,
    code_fingerprint,
    env,
    finish,
    mib,
    mkscratch,
    mmm,
    objstore_cmd,
    progress,
    run_child,
    say,
    verdict,
)

from objstore.storage import codec
from objstore.storage.log import packed, segindex

TARGET_SEG = 0.30
TARGET_ALL = 0.45
TARGET_RATE = 1.0
TARGET_RSS = 256 * 10**6
STRUCT_CHUNK = 256 << 10  # gc.STRUCT_BLOCK, gc.BLOB_BLOCK, gc.LEVEL: the floor uses gc's own block sizes and level
BLOB_CHUNK = 1 << 20
LEVEL = 3


# -- what is on disk --------------------------------------------------------------------------------------------
def file_classes(root):
    """{class: [bytes, files]} of every file under the store root: segments, indexes, checkpoint, witness,
    state.db* (anywhere), other (named)."""
    out: dict = {}
    for dp, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, root)
            if f.startswith("state.db"):
                cls = "state.db*"
            elif rel.startswith("log" + os.sep) and f.endswith(".seg"):
                cls = "segments (log/*.seg)"
            elif rel.startswith("log" + os.sep) and f.endswith(".idx"):
                cls = "indexes (log/*.idx)"
            elif rel == os.path.join("log", "checkpoint"):
                cls = "checkpoint"
            elif rel == os.path.join("log", "witness"):
                cls = "witness"
            else:
                cls = "other: " + rel
            c = out.setdefault(cls, [0, 0])
            c[0] += os.path.getsize(p)
            c[1] += 1
    return out


def seg_bytes(classes):
    return classes.get("segments (log/*.seg)", [0, 0])[0]


def state_bytes(classes):
    return classes.get("state.db*", [0, 0])[0]


def total_bytes(classes):
    return sum(v[0] for v in classes.values())


def packed_breakdown(root):
    """What the packed segments hold, read with storage.log.packed (header, trailer, meta frame, block list)."""
    b = {"packed files": 0, "unpacked segment files": 0, "unpacked segment bytes": 0, "header+trailer": 0,
         "meta stored": 0, "meta raw": 0, "entries": 0}
    for kind in ("record", "blob", "other"):
        b[f"{kind} blocks"] = 0
        b[f"{kind} stored"] = 0
        b[f"{kind} raw"] = 0
        b[f"{kind} objects"] = 0
    b["removed objects"] = 0
    logdir = os.path.join(root, "log")
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".seg"):
            continue
        path = os.path.join(logdir, name)
        fd = os.open(path, os.O_RDONLY)
        try:
            if not packed.is_packed(fd):
                b["unpacked segment files"] += 1
                b["unpacked segment bytes"] += os.fstat(fd).st_size
                continue
            pf = packed.read(fd)
        finally:
            os.close(fd)
        b["packed files"] += 1
        b["entries"] += pf.entry_count
        b["header+trailer"] += packed.PK_HEADER.size + packed.PK_TRAILER.size
        end_blocks = pf.offsets[-1] + pf.blocks[-1][2] if pf.blocks else packed.PK_HEADER.size
        b["meta stored"] += pf.size - packed.PK_TRAILER.size - end_blocks
        kinds: dict = {}
        for row in pf.entries:
            for _oid, otype, _length, bi, _off in row[2]:
                if bi < 0:
                    b["removed objects"] += 1
                    continue
                kinds.setdefault(bi, []).append(otype)
        for bi, (_comp, raw, stored) in enumerate(pf.blocks):
            types = kinds.get(bi, [])
            kind = "blob" if codec.BLOB in types else "record" if codec.RECORD in types else "other"
            b[f"{kind} blocks"] += 1
            b[f"{kind} stored"] += stored
            b[f"{kind} raw"] += raw
            b[f"{kind} objects"] += len(types)
        # the meta frame's raw size, from the trailer
        with open(path, "rb") as f:
            f.seek(pf.size - packed.PK_TRAILER.size)
            _moff, _mstored, mraw, _flen, _last = packed.PK_TRAILER.unpack(f.read(packed.PK_TRAILER.size))
        b["meta raw"] += mraw
    return b


def index_breakdown(root):
    """Object rows, chain rows and the fixed part of every log/*.idx, from their headers."""
    out = {"files": 0, "bytes": 0, "object rows": 0, "chain rows": 0}
    logdir = os.path.join(root, "log")
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".idx"):
            continue
        with open(os.path.join(logdir, name), "rb") as f:
            head = f.read(segindex.HEAD.size)
        size = os.path.getsize(os.path.join(logdir, name))
        _magic, _seg, _first, _last, _ck, nobj, nchain = segindex.HEAD.unpack(head)
        out["files"] += 1
        out["bytes"] += size
        out["object rows"] += nobj
        out["chain rows"] += nchain
    out["object row bytes"] = out["object rows"] * segindex.OBJ.size
    out["chain row bytes"] = out["chain rows"] * segindex.CHAIN.size
    out["fixed bytes"] = out["bytes"] - out["object row bytes"] - out["chain row bytes"]
    return out


def compression_floor(log, run, work):
    """(records canonical, records zstd, blobs canonical, blobs zstd): the workload's canonical bytes merged into
    gc's block sizes and compressed at gc's level, nothing else (no rows, no metas, no index)."""
    z = zstandard.ZstdCompressor(level=LEVEL)

    def chunked(parts, limit):
        raw = comp = 0
        buf = io.BytesIO()
        for p in parts:
            buf.write(p)
            raw += len(p)
            if buf.tell() >= limit:
                comp += len(z.compress(buf.getvalue()))
                buf = io.BytesIO()
        if buf.tell():
            comp += len(z.compress(buf.getvalue()))
        return raw, comp

    recs = (codec.encode("record", {"run": r.run, "branch": r.branch, "lsn": r.lsn, "parent": r.parent, "kind": r.kind,
                                    "time": r.time, "body": r.body}) for r in log.records(run))
    blobs = [b"blob %d\x00" % len(PROMPT) + PROMPT] + [b"blob %d\x00" % len(b) + b for b, _, _ in work if b is not None]
    rr, rc = chunked(recs, STRUCT_CHUNK)
    br, bc = chunked(blobs, BLOB_CHUNK)
    return rr, rc, br, bc


def what_would_close(root, canon, nentries, nobjs, nchain):
    """Context for a miss: how many bytes each part of the packed metas and indexes costs, measured by
    re-encoding the metas of the packed segments without it (msgpack, zstd at packed.META_LEVEL), and the
    index rows' redundant fields counted; the blob blocks recompressed at higher zstd levels (with the time)."""
    enc = msgspec.msgpack.Encoder(order="sorted")
    variants = {
        "as written": lambda e: e,
        "without the per-entry root": lambda e: e[:6] + [None] + e[7:],
        "  and the moves' old/new ids": lambda e: [e[0], [[m[0], None, None, m[3]] for m in e[1]]] + e[2:6] + [None] + e[7:],
        "  and the rows' parent and refs": lambda e: [e[0], [[m[0], None, None, m[3]] for m in e[1]], e[2], e[3],
                                                      [r[:4] + [None] + r[5:6] + [None] + r[7:] for r in e[4]], e[5], None] + e[7:],
    }
    sizes = dict.fromkeys(variants, 0)
    blob_raw: list = []
    logdir = os.path.join(root, "log")
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".seg"):
            continue
        fd = os.open(os.path.join(logdir, name), os.O_RDONLY)
        try:
            if not packed.is_packed(fd):
                continue
            pf = packed.read(fd)
            z = zstandard.ZstdCompressor(level=packed.META_LEVEL)
            for label, fn in variants.items():
                sizes[label] += len(z.compress(enc.encode({"entries": [fn(e) for e in pf.entries], "blocks": pf.blocks})))
            kinds: dict = {}
            for row in pf.entries:
                for o in row[2]:
                    kinds.setdefault(o[3], set()).add(o[1])
            for bi, (comp, raw, stored) in enumerate(pf.blocks):
                if codec.BLOB in kinds.get(bi, ()):
                    data = os.pread(fd, stored, pf.offsets[bi])
                    blob_raw.append(zstandard.ZstdDecompressor().decompress(data, max_output_size=raw) if comp == 1 else data)
        finally:
            os.close(fd)
    say(f"  what would close it (context): the packed metas re-encoded without a part (zstd -{packed.META_LEVEL}):")
    for label, size in sizes.items():
        say(f"    {label:<40} {size:>14,} B  {size / max(1, nentries):6.1f} B per entry  {size / canon:.4f}x canonical")
    # index rows: a chain row's 32-byte record id names an object row of the same index (a u32 row number would
    # do); a packed segment's object rows repeat their block's offset, stored and raw lengths and compression
    # (17 B) that one block table row per block would hold.
    chain_save = nchain * (32 - 4)
    obj_save = nobjs * 17
    say(f"    index: chain rows naming their object row by number (u32, not the 32-byte id) save {chain_save:,} B "
        f"({chain_save / canon:.4f}x); object rows pointing into a block table save about {obj_save:,} B "
        f"({obj_save / canon:.4f}x)")
    total = sum(map(len, blob_raw))
    for level in (3, 9, 19):
        t = time.perf_counter()
        c = sum(len(zstandard.ZstdCompressor(level=level).compress(b)) for b in blob_raw)
        say(f"    blob blocks at zstd -{level}: {c:,} B ({c / max(1, total):.3f}x their raw bytes, {c / canon:.4f}x canonical); "
            f"{time.perf_counter() - t:.2f} s to compress in this process")


def build_commit_store(d, n, seed):
    """bench_commit's workload, one record per commit, fsync off; the facts about it."""
    work = workload(n, seed)
    t0 = time.perf_counter()
    log, run, prompt = objstore_setup(d, fsync="off")
    objstore_commits(log, run, prompt, work, 1)
    dt = time.perf_counter() - t0
    size, _alloc, canon, nrec, rec_canon = objstore_bytes(log, run, work)
    floor = compression_floor(log, run, work)
    log.store.engine.close()
    nblob = sum(1 for b, _, _ in work if b is not None) + 1
    assert canon == rec_canon + sum(canonical_len("blob", len(b)) for b, _, _ in work if b is not None) + canonical_len("blob", len(PROMPT))
    return {"path": os.path.join(d, "store"), "records": nrec, "blobs": nblob, "canon": canon, "rec_canon": rec_canon,
            "blob_canon": canon - rec_canon, "bytes": size, "seconds": dt, "floor": floor}


def copy_store(src, dst):
    subprocess.run(["cp", "-r", src, dst], check=True)


# -- part 1: bytes ----------------------------------------------------------------------------------------------
def print_classes(title, classes, canon):
    say(f"  {title}")
    for cls in sorted(classes, key=lambda c: -classes[c][0]):
        size, nfiles = classes[cls]
        say(f"    {cls:<40} {size:>14,} B  {size / canon:>7.3f}x canonical  ({nfiles} file(s))")
    tot = total_bytes(classes)
    st = state_bytes(classes)
    say(f"    {'all files':<40} {tot:>14,} B  {tot / canon:>7.3f}x canonical")
    say(f"    {'every file but state.db*':<40} {tot - st:>14,} B  {(tot - st) / canon:>7.3f}x canonical")
    say(f"    {'state.db* (apart)':<40} {st:>14,} B  {st / canon:>7.3f}x canonical"
        + ("   (no state.db in this store: nothing has read it through the state cache)" if st == 0 else ""))


def part_bytes(a, scratch, facts, targets):
    canon = facts["canon"]
    say(f"\n[1] bytes on disk before and after 'objstore gc': {facts['records']:,} records (run_started included), "
        f"{facts['blobs']:,} blobs, {canon:,} canonical B (records {facts['rec_canon']:,} B, blobs "
        f"{facts['blob_canon']:,} B); written 1 record per commit, built with fsync=off")
    before = file_classes(facts["path"])
    print_classes("before gc:", before, canon)
    d = os.path.join(scratch, "bytes")
    os.makedirs(d)
    copy_store(facts["path"], os.path.join(d, "store"))
    path = os.path.join(d, "store")
    res = run_child(objstore_cmd(path, "gc"), timeout=a.timeout)
    if not check_ok(res, "gc"):
        return
    say(f"  gc: {res.wall:.2f} s wall, peak RSS {mib(res.maxrss):.0f} MiB; it said: {res.out.strip().splitlines()[-1] if res.out.strip() else '-'}")
    after = file_classes(path)
    print_classes("after gc:", after, canon)
    pb = packed_breakdown(path)
    ib = index_breakdown(path)
    say(f"  packed segments ({pb['packed files']} file(s), {pb['entries']:,} entries; unpacked segment files left: "
        f"{pb['unpacked segment files']} of {pb['unpacked segment bytes']:,} B, the active segment gc's seal opened):")
    for kind, canon_of in (("record", facts["rec_canon"]), ("blob", facts["blob_canon"]), ("other", None)):
        st, raw, nb, no = pb[f"{kind} stored"], pb[f"{kind} raw"], pb[f"{kind} blocks"], pb[f"{kind} objects"]
        extra = f", {st / canon_of:.3f}x their canonical bytes" if canon_of else ""
        say(f"    {kind + ' blocks':<40} {st:>14,} B stored ({raw:,} B raw; {nb:,} block(s), {no:,} objects"
            f"{extra}; {st / canon:.3f}x all canonical)")
    say(f"    {'meta frames':<40} {pb['meta stored']:>14,} B stored ({pb['meta raw']:,} B raw msgpack; "
        f"{pb['meta stored'] / max(1, pb['entries']):.1f} B per entry; {pb['meta stored'] / canon:.3f}x canonical)")
    say(f"    {'headers + trailers':<40} {pb['header+trailer']:>14,} B")
    if pb["removed objects"]:
        say(f"    removed bodies: {pb['removed objects']:,}")
    say(f"  indexes ({ib['files']} file(s), {ib['bytes']:,} B = {ib['bytes'] / canon:.3f}x canonical): object rows "
        f"{ib['object rows']:,} x {segindex.OBJ.size} B = {ib['object row bytes']:,} B; chain rows {ib['chain rows']:,} x "
        f"{segindex.CHAIN.size} B = {ib['chain row bytes']:,} B; fixed (header, fan-out, digest) {ib['fixed bytes']:,} B")
    rr, rc, br, bc = facts["floor"]
    say(f"  context, the floor of merged compression (zstd -{LEVEL}, records in {STRUCT_CHUNK >> 10} KiB chunks, blobs in "
        f"{BLOB_CHUNK >> 20} MiB; nothing else): records {rr:,} -> {rc:,} B ({rc / rr:.3f}x), blobs {br:,} -> {bc:,} B "
        f"({bc / br:.3f}x), together {(rc + bc) / canon:.3f}x canonical")
    what_would_close(path, canon, pb["entries"], ib["object rows"], ib["chain rows"])
    res2 = run_child(objstore_cmd(path, "verify", "--no-state"), timeout=a.timeout)
    if check_ok(res2, "verify --no-state after gc"):
        said = (res2.out + res2.err).strip().splitlines()
        say(f"  verify --no-state after gc: {said[-1] if said else '-'} ({res2.wall:.2f} s)")
    seg = seg_bytes(after) / canon
    allx = (total_bytes(after) - state_bytes(after)) / canon
    say(f"  segments after gc {seg:.3f}x canonical (target <= {TARGET_SEG}x): {verdict(seg <= TARGET_SEG)}; every file "
        f"but state.db* {allx:.3f}x (target <= {TARGET_ALL}x, before gc {(total_bytes(before) - state_bytes(before)) / canon:.3f}x): "
        f"{verdict(allx <= TARGET_ALL)}; state.db* {state_bytes(after):,} B")
    targets.append((f"bytes after gc: segments <= {TARGET_SEG}x canonical", f"{seg:.3f}x", seg <= TARGET_SEG))
    targets.append((f"bytes after gc: all but state.db* <= {TARGET_ALL}x canonical", f"{allx:.3f}x", allx <= TARGET_ALL))
    shutil.rmtree(d, ignore_errors=True)


# -- part 2: rate -----------------------------------------------------------------------------------------------
def part_rate(a, scratch, facts, targets):
    n = facts["records"]
    say(f"\n[2] gc + repack rate vs verify --no-state on the same unpacked store ({n:,} records, "
        f"{facts['records'] + facts['blobs']:,} objects), fresh processes, {a.reps} interleaved reps (a fresh cp -r copy "
        f"each, not timed, then sync); gc runs with fsync on (the default)")
    systems = [("verify --no-state", ("verify", "--no-state")), ("gc", ("gc",))]
    rates: dict = {nm: [] for nm, _ in systems}
    rss: dict = {nm: [] for nm, _ in systems}
    cpu: dict = {nm: [] for nm, _ in systems}
    lat = []
    for r in range(a.reps):
        d = os.path.join(scratch, f"rate{r}")
        os.makedirs(d)
        try:
            paths = {}
            for nm, _ in systems:
                copy_store(facts["path"], os.path.join(d, nm.split()[0]))
                paths[nm] = os.path.join(d, nm.split()[0])
            os.sync()
            lat.append(fsync_latency(d))
            for nm, args in systems[:: (1 if r % 2 == 0 else -1)]:
                res = run_child(objstore_cmd(paths[nm], *args), timeout=a.timeout)
                if not check_ok(res, nm):
                    return
                rates[nm].append(n / res.wall)
                rss[nm].append(res.maxrss)
                cpu[nm].append(res.cpu)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        progress(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{nm} {rates[nm][-1]:,.0f} rec/s ({n / rates[nm][-1]:.2f} s)" for nm, _ in systems)
                 + f"; gc/verify {rates['gc'][-1] / rates['verify --no-state'][-1]:.2f}x; fsync latency {lat[-1] * 1e3:.2f} ms")
    say(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for nm, _ in systems:
        lo, md, hi = mmm(rates[nm])
        say(f"  {nm + ' rec/s':<44} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
    for nm, _ in systems:
        lo, md, hi = mmm(cpu[nm])
        say(f"  {nm + ' CPU s (user+sys)':<44} {lo:>12.2f} {md:>12.2f} {hi:>12.2f}")
    for nm, _ in systems:
        lo, md, hi = mmm(rss[nm])
        say(f"  {'peak RSS ' + nm + ' MiB':<44} {mib(lo):>12.1f} {mib(md):>12.1f} {mib(hi):>12.1f}")
    lo, md, hi = mmm(lat)
    say(f"  {'fsync latency ms':<44} {lo * 1e3:>12.2f} {md * 1e3:>12.2f} {hi * 1e3:>12.2f}")
    ratio = [g / v for g, v in zip(rates["gc"], rates["verify --no-state"], strict=True)]
    lo, md, hi = mmm(ratio)
    say(f"  {'ratio gc rate / verify --no-state rate':<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x   target >= "
        f"{TARGET_RATE}x (median): {verdict(md >= TARGET_RATE)}")
    targets.append((f"gc rate >= {TARGET_RATE}x verify --no-state", f"{lo:.2f}x / {md:.2f}x / {hi:.2f}x", md >= TARGET_RATE))
    if a.profile and md < TARGET_RATE:
        d = os.path.join(scratch, "rate-profile")
        os.makedirs(d)
        copy_store(facts["path"], os.path.join(d, "store"))
        profile_gc(os.path.join(d, "store"), d, a)
        shutil.rmtree(d, ignore_errors=True)


# -- part 3: memory ---------------------------------------------------------------------------------------------
def part_mem(a, scratch, targets):
    sizes = [int(x) for x in str(a.mem_records).split(",") if x.strip()]
    say(f"\n[3] peak RSS of gc and of verify --no-state (fresh processes under {TIME or 'a Python rusage wrapper'}) on "
        f"stores of {', '.join(f'{s:,}' for s in sizes)} records: runs of 1000, one commit per 1000 records, a "
        f"{a.mem_blob_size} B blob on one record in ten, built with fsync=off")
    rows = []
    for size in sizes:
        d = os.path.join(scratch, f"mem{size}")
        os.makedirs(d)
        path = os.path.join(d, "store")
        runs = max(1, size // 1000)
        b = build_store(path, runs=runs, per_run=size // runs, per_commit=1000, blob_every=10, blob_size=a.mem_blob_size,
                        seed=a.seed, label=f"{size:,}-record store")
        disk = sum(v[0] for v in file_classes(path).values())
        progress(f"built {b['records']:,} records, {b['blobs']:,} blobs, {b['commits']:,} commits in {b['seconds']:.0f} s; "
                 f"{disk:,} B on disk")
        want_profile = a.profile and size == max(sizes)
        if want_profile:  # gc rewrites the store: keep an unpacked copy in case its memory needs a profile
            copy_store(path, os.path.join(d, "unpacked"))
        got = {}
        for nm, args in (("verify --no-state", ("verify", "--no-state")), ("gc", ("gc",))):
            res = run_child(objstore_cmd(path, *args), timeout=a.timeout, rss_cap=4 << 30)
            if not check_ok(res, f"{nm} ({size:,} records)"):
                shutil.rmtree(d, ignore_errors=True)
                return
            got[nm] = res
        rows.append((size, got))
        say(f"  {size:>10,} records: gc peak RSS {mib(got['gc'].maxrss):7.1f} MiB ({got['gc'].maxrss / 1e6:.0f} MB), "
            f"{got['gc'].wall:.1f} s; verify --no-state peak RSS {mib(got['verify --no-state'].maxrss):7.1f} MiB "
            f"({got['verify --no-state'].maxrss / 1e6:.0f} MB), {got['verify --no-state'].wall:.1f} s")
        if want_profile and got["gc"].maxrss > TARGET_RSS * size / 1_000_000:
            memory_profile(os.path.join(d, "unpacked"), a)
        shutil.rmtree(d, ignore_errors=True)
    if len(rows) >= 2:
        (s0, g0), (s1, g1) = rows[0], rows[-1]
        for nm in ("gc", "verify --no-state"):
            slope = (g1[nm].maxrss - g0[nm].maxrss) / (s1 - s0)
            at_1m = g1[nm].maxrss + slope * (1_000_000 - s1)
            say(f"  {nm}: {slope * 100_000 / 2**20:.1f} MiB per 100 000 records between {s0:,} and {s1:,}; "
                f"at 1 000 000 records that slope gives {at_1m / 1e6:.0f} MB")
    big = [r for r in rows if r[0] >= 1_000_000]
    if big:
        v = big[-1][1]["gc"].maxrss
        targets.append(("gc peak RSS <= 256 MB at 1 000 000 records", f"{v / 1e6:.0f} MB", v <= TARGET_RSS))
    elif len(rows) >= 2:
        (s0, g0), (s1, g1) = rows[0], rows[-1]
        slope = (g1["gc"].maxrss - g0["gc"].maxrss) / (s1 - s0)
        est = g1["gc"].maxrss + slope * (1_000_000 - s1)
        targets.append(("gc peak RSS <= 256 MB at 1 M records (extrapolated)", f"~{est / 1e6:.0f} MB", est <= TARGET_RSS))


# -- profiles (only where a target is missed) -------------------------------------------------------------------
def have_pyspy():
    p = os.path.join(os.path.dirname(PY), "py-spy")
    return p if os.path.exists(p) else shutil.which("py-spy")


def profile_gc(path, d, a):
    """One gc under py-spy (its top frames by own samples), or cProfile when py-spy is missing."""
    spy = have_pyspy()
    if spy:
        out = os.path.join(d, "gc.speedscope.json")
        res = run_child([spy, "record", "-r", "200", "-o", out, "--format", "raw", "--", *objstore_cmd(path, "gc")],
                        timeout=a.timeout)
        if check_ok(res, "py-spy record gc"):
            own: dict = {}
            total = 0
            with open(out) as f:
                for ln in f:
                    stack, _, cnt = ln.rstrip("\n").rpartition(" ")
                    if not stack:
                        continue
                    c = int(cnt)
                    total += c
                    top = stack.split(";")[-1]
                    own[top] = own.get(top, 0) + c
            say(f"  py-spy profile of one gc ({total} samples at 200 Hz), top frames by own samples:")
            for fr, c in sorted(own.items(), key=lambda kv: -kv[1])[:15]:
                say(f"    {100 * c / total:5.1f}%  {fr}")
        return
    prof = os.path.join(d, "gc.prof")
    res = run_child([PY, "-m", "cProfile", "-o", prof, "-m", "objstore", "--store", path, "gc"], timeout=a.timeout)
    if check_ok(res, "cProfile gc"):
        import pstats

        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        say("  cProfile of one gc (py-spy not installed), top 15 by tottime:")
        for ln in s.getvalue().splitlines():
            if ln.strip():
                say("    " + ln)


_TRACEMALLOC = r"""
import atexit, sys, threading, tracemalloc
tracemalloc.start(1)
best = [0, None]
def watch():
    # a snapshot each time the traced memory passes 1.25x the last one's: the last is taken near the peak
    import time
    while True:
        time.sleep(0.05)
        cur, _peak = tracemalloc.get_traced_memory()
        if cur > best[0] * 1.25 + (8 << 20):
            best[0], best[1] = cur, tracemalloc.take_snapshot()
threading.Thread(target=watch, daemon=True).start()
def dump():
    cur, peak = tracemalloc.get_traced_memory()
    print(f"TRACEMALLOC traced peak {peak / 2**20:.1f} MiB; snapshot at {best[0] / 2**20:.1f} MiB traced, top sites:",
          file=sys.stderr)
    if best[1] is not None:
        for st in best[1].statistics("lineno")[:15]:
            print("TRACEMALLOC   ", st, file=sys.stderr)
atexit.register(dump)
sys.argv = ["objstore"] + sys.argv[1:]
import runpy
runpy.run_module("objstore", run_name="__main__")
"""


def memory_profile(path, a):
    """Where gc's memory is, by tracemalloc: its traced peak, and the allocation sites of a snapshot taken near
    that peak (Python allocations only: zstd's buffers and mmap'd index pages are in the RSS, not here)."""
    res = run_child([PY, "-c", _TRACEMALLOC, "--store", path, "gc"], timeout=a.timeout * 3)
    if not check_ok(res, "tracemalloc gc"):
        return
    say(f"  tracemalloc of one gc ({res.wall:.0f} s under tracemalloc; peak RSS {mib(res.maxrss):.0f} MiB):")
    for ln in res.err.splitlines():
        if ln.startswith("TRACEMALLOC"):
            say("    " + ln[len("TRACEMALLOC "):])


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=env("BENCH_RECORDS", 20_000))
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--mem-records", default=env("BENCH_MEM_RECORDS", "1000000", str))
    p.add_argument("--mem-blob-size", type=int, default=256)
    p.add_argument("--parts", default=env("BENCH_PARTS", "bytes,rate,mem", str))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    t_all = time.perf_counter()
    say(f"bench_gc: parts {','.join(parts)}; {a.records:,} records (bench_commit workload, 1 per commit), {a.reps} "
        f"reps; memory at {a.mem_records} records; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; scratch in "
        f"{os.environ.get('BENCH_DIR') or '/tmp'}")
    code0 = code_fingerprint()
    say(f"  code: {code0}")
    scratch = mkscratch("bench-gc-")
    e = child_env(scratch)
    e.pop("OBJSTORE_FSYNC", None)
    targets: list = []
    try:
        facts = None
        if "bytes" in parts or "rate" in parts:
            d = os.path.join(scratch, "master")
            os.makedirs(d)
            facts = build_commit_store(d, a.records, a.seed)
            progress(f"built the unpacked store: {facts['records']:,} records, {facts['blobs']:,} blobs in "
                     f"{facts['seconds']:.1f} s (1 record per commit, fsync=off); {facts['bytes']:,} B on disk = "
                     f"{facts['bytes'] / facts['canon']:.3f}x canonical")
            # one untimed gc and verify first: bytecode cached, the page cache holding the interpreter and library
            warm = os.path.join(scratch, "warm")
            copy_store(facts["path"], warm)
            for args in (("verify", "--no-state"), ("gc",)):
                check_ok(run_child(objstore_cmd(warm, *args), timeout=a.timeout), "warm-up " + args[0])
            shutil.rmtree(warm, ignore_errors=True)
        for part, fn in (("bytes", part_bytes), ("rate", part_rate)):
            if part in parts:
                try:
                    fn(a, scratch, facts, targets)
                except Exception as ex:  # one broken part must not hide the others' figures
                    import traceback

                    say(f"  !! part {part} failed: {ex!r}")
                    traceback.print_exc()
        if "mem" in parts:
            try:
                part_mem(a, scratch, targets)
            except Exception as ex:
                import traceback

                say(f"  !! part mem failed: {ex!r}")
                traceback.print_exc()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    finish(targets, code0, t_all, "Targets (min / median / max over repetitions; verdict on the median):", 24)


if __name__ == "__main__":
    main(sys.argv[1:])
