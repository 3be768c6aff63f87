"""Durable commits at the granularity agents write: objstore's public API against SQLite, same run, interleaved.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_commit.py                       # every mode, 5 repetitions (issue 15's table)
    .venv/bin/python benchmarks/bench_commit.py --scale 0.05 --reps 2 # smoke
    .venv/bin/python benchmarks/bench_commit.py --procs 8             # only the 8-writer-process mode
    .venv/bin/python benchmarks/bench_commit.py --threads 8           # only the 8-thread (group commit) mode
    .venv/bin/python benchmarks/bench_commit.py --modes groups,syscalls
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_commit.py

To measure a library other than the working tree's (e.g. HEAD while others edit): extract it with
``git archive HEAD objstore cli`` into DIR (cli renamed objstore_cli) and run from outside the repository with
``PYTHONPATH=DIR`` (children inherit it).

Modes: --modes / BENCH_MODES (default "groups,syscalls,procs,threads,cpu"; giving --procs P or --threads T on the command
line without --modes runs only those modes, e.g. ``bench_commit.py --procs 8`` or ``bench_commit.py --threads 8``).

Options (each also read from the environment): --reps / BENCH_REPS (5), --n1 / BENCH_N1 (2000), --n10 / BENCH_N10
(5000), --n100 / BENCH_N100 (20000), --n1000 / BENCH_N1000 (20000): records per repetition for each group size;
--scale / BENCH_SCALE (1.0) multiplies all of them and --procs-n / --threads-n; --groups / BENCH_GROUPS (1,10,100,1000);
--fsync-k / BENCH_FSYNC_K (200) commits counted for the fsync and syscall figures; --procs (8) writer processes and
--procs-n (500) records per writer; --threads (8) threads and --threads-n (500) records per thread; --seed / BENCH_SEED
(1). Scratch directories are made with tempfile.mkdtemp(dir=$BENCH_DIR) and removed afterwards.

What it measures
----------------
Workload: attempt records of ~300 B canonical (prompt blob ref, usage map, small context map); on one record in three
a fresh 2 KB text blob (seeded word generator over a fixed vocabulary, so it compresses like text) is the record's
``output`` and is committed together with it. "Group" g = records per durable commit. Public API only (RunLog,
Store.init/open, Store.batch, put_blob, record_attempt), so the harness keeps working while the engine changes.

groups: for every g, interleaved in one process (order reversed on alternate repetitions), each repetition in a fresh
directory; per-repetition ratios, min/median/max:

* objstore: ``RunLog(Store.init(path, fsync="full"))``; per commit ``with log.store.batch():`` around g x
  (``put_blob`` if any, ``record_attempt``).
* SQLite peer: WAL, synchronous=FULL, rowid tables ``blob`` and ``rec`` with a unique hash column and a ``head`` row;
  per commit BEGIN IMMEDIATE, insert the blob rows and record rows (bodies = msgpack payload encoded in the loop with
  msgspec, sorted keys, the same payload objstore builds; hash = BLAKE3 of ``<type> SP <len> NUL <payload>`` computed
  in the loop as objstore does), update the head row, COMMIT.
* the bare commit path ``commitpath.log_engine`` from /work/shared/bench/commitpath.py (flock, one framed entry, one
  write, one fdatasync), called with the same n and g at every grouping;
* the raw floor: ``os.write`` + ``fdatasync`` per commit of objstore's OWN entry bytes, captured once per g from an
  objstore run of the same work with fsync="off" (os.write/os.pwrite/os.writev wrapped; only writes to files in a
  log/ directory of the store, the store log's or a run's, are kept, index/checkpoint/witness files excluded; what
  was kept is printed);
* fsync latency of the repetition: the median of 32 ``os.write(512 B)`` + ``fdatasync`` in the repetition's scratch
  directory, printed on each repetition's line beside its ratios.

syscalls: a child doing K durable g=1 commits minus a child doing 0 (store creation and run start excluded), under
``strace -f -c``; every syscall whose count per commit is non-zero is listed, fsync+fdatasync per commit is the
figure for the 1.00 target, the total per commit the figure for the <= 6 target (falls back to monkeypatched
os.fsync/os.fdatasync counting if strace is missing or fails).

procs: P writer processes (each its own ``Store.open`` + RunLog), 1 record per commit, in two shapes: all on one run
("shared run") and each on its own run ("own runs"); SQLite: P processes, each its own connection, WAL, synchronous
FULL, busy_timeout=30000, BEGIN IMMEDIATE, the head row read and updated in the transaction (one head row shared, or
one per process); and one objstore writer alone. Children start, open, then wait for one "go" line; the total rate is
all records / (last child's end - first child's start), clock CLOCK_MONOTONIC shared across processes.

threads: T threads of one process (a child), one RunLog shared, each thread committing 1 record per commit on its own
run; SQLite: one connection per thread (WAL FULL, busy_timeout=30000, BEGIN IMMEDIATE). fdatasync (and fsync) calls
during the timed window are counted in that child by wrapping os.fdatasync/os.fsync, divided by the commits.

cpu (issue 17's CPU gates): for every g, a fresh child per measurement warms up on 10 % more records, then times n
records (3 000 at g=1, 10 000 at g=10, 20 000 at 100 and 1 000; x --scale) with time.process_time (user + sys, every
thread): objstore ``fsync="off"`` against the SQLite peer above with ``synchronous=OFF``, the same records; CPU
µs per record, per-repetition ratios objstore / SQLite. At g > 1 objstore is measured twice: "objstore" appends each
record by ``record_attempt`` inside the batch (as the groups mode), "objstore-many" appends the commit's records by one
``record_attempts`` call (``RunLog.append_many``), its blobs put first. Targets: g=1 <= 1.0x and <= 60 µs; g=10, 100, 1000 <= 0.75x.

Targets (from issue 15); a target is "met" when the MEDIAN per-repetition ratio meets it:

* 1 record per commit:      objstore >= 1.0x SQLite  and  >= 0.7x the bare commit path
* 10 records per commit:    objstore >= 1.2x SQLite
* 100 and 1000 per commit:  objstore >= 2x SQLite
* P processes:              total >= 1.0x SQLite's and >= 0.9x one objstore writer's (shared run and own runs)
* T threads:                total >= 3x SQLite's; fdatasync calls per commit < 0.5
* per single durable commit: fsync+fdatasync = 1.00; syscalls <= 6

Also printed, as context: bytes on disk after the first repetition of each group (objstore and SQLite) against the
canonical bytes written; peak RSS of this process.
"""

import argparse
import importlib.util
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blake3  # noqa: E402
import msgspec  # noqa: E402
from common import dir_bytes, sqlite_peer  # noqa: E402

from objstore import RunLog, Store  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITPATH = os.path.join(REPO, "..", "shared", "bench", "commitpath.py")
RUN = "bench"
BLOB_SIZE = 2048

VOCAB = (
    "the a of to and in is for on with that this as by from at be are was it or an not which have has were will "
    "agent model tool call result error retry step order customer ticket refund shipping invoice account email search "
    "query answer summary context prompt output token request response status pending failed succeeded timeout "
    "database table row column value update insert select delete check verify approve reject escalate user assistant "
    "system message reply draft send fetch parse json field missing invalid expected returned found total amount date "
    "address product item quantity price discount policy rule note because however therefore then next first last "
    "please thanks sorry confirm cancel resolve issue problem solution plan action observation thought final"
).split()


def text_blob(seed, j):
    """A deterministic 2 KB text blob for record j (distinct for every j: fresh content, no dedup)."""
    rnd = random.Random(seed * 1_000_003 + j)
    words = [f"#{j}"]
    n = len(words[0])
    while n < BLOB_SIZE:
        w = rnd.choice(VOCAB)
        words.append(w)
        n += len(w) + 1
    return " ".join(words).encode()[:BLOB_SIZE]


def workload(n, seed):
    """n prebuilt (blob or None, context, usage) tuples; a blob on every third record."""
    rnd = random.Random(seed)
    tools = ["search", "fetch_order", "send_email", "sql", "python"]
    out = []
    for j in range(n):
        ctx = {"ticket": f"T-{rnd.randint(10000, 99999)}", "path": rnd.choice("ABC"), "tool": rnd.choice(tools)}
        usage = {"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)}
        out.append((text_blob(seed, j) if j % 3 == 0 else None, ctx, usage))
    return out


PROMPT = b"You are a support agent. Read the ticket, look up the order, and draft a reply.\n" * 8


# -- the systems ---------------------------------------------------------------------------------------------
def objstore_setup(d, fsync="full"):
    log = RunLog(Store.init(os.path.join(d, "store"), fsync=fsync))
    run = log.start_run(RUN)
    prompt = log.put_blob(PROMPT)
    return log, run, prompt


def objstore_commits(log, run, prompt, work, g):
    put_blob, record_attempt, batch = log.put_blob, log.record_attempt, log.store.batch
    n = len(work)
    for i in range(0, n, g):
        with batch():
            for j in range(i, min(i + g, n)):
                blob, ctx, usage = work[j]
                out = put_blob(blob) if blob is not None else None
                record_attempt(run, step=j, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage, context=ctx)


def objstore_commits_many(log, run, prompt, work, g):
    """As ``objstore_commits``, the g records of a commit appended by one ``record_attempts`` call (append_many)."""
    put_blob, record_attempts, batch = log.put_blob, log.record_attempts, log.store.batch
    n = len(work)
    for i in range(0, n, g):
        with batch():
            attempts = []
            for j in range(i, min(i + g, n)):
                blob, ctx, usage = work[j]
                out = put_blob(blob) if blob is not None else None
                attempts.append({"step": j, "attempt": 0, "state": "succeeded", "prompt": prompt, "output": out, "usage": usage,
                                 "context": ctx})
            record_attempts(run, attempts)


def run_objstore(d, work, g, measure=False, fsync="full", clock=time.perf_counter):
    log, run, prompt = objstore_setup(d, fsync)
    t = clock()
    objstore_commits(log, run, prompt, work, g)
    dt = clock() - t
    extra = None
    if measure:
        extra = objstore_bytes(log, run, work)
    return len(work) / dt, extra


def canonical_len(otype, payload_len):
    return len(b"%s %d\x00" % (otype.encode(), payload_len)) + payload_len


def objstore_bytes(log, run, work):
    """(bytes on disk: sum of file sizes, allocated bytes, canonical bytes of all objects written, record count)."""
    from objstore.storage import codec  # canonical encoding, only to size what was written

    canon = canonical_len("blob", len(PROMPT))
    canon += sum(canonical_len("blob", len(b)) for b, _, _ in work if b is not None)
    recs = log.records(run)  # includes the run_started record (LSN 0)
    rec_canon = 0
    for r in recs:
        rec_canon += len(codec.encode("record", {"run": r.run, "branch": r.branch, "lsn": r.lsn, "parent": r.parent,
                                             "kind": r.kind, "time": r.time, "body": r.body}))
    canon += rec_canon
    root = log.store.root
    alloc = 0
    for dp, _, fs in os.walk(root):
        for f in fs:
            alloc += os.stat(os.path.join(dp, f)).st_blocks * 512
    return dir_bytes(root), alloc, canon, len(recs), rec_canon


_enc = msgspec.msgpack.Encoder(order="sorted")


def run_sqlite(d, work, g, measure=False, sync="FULL", clock=time.perf_counter):
    db = sqlite_peer(os.path.join(d, "peer.sqlite"), "CREATE TABLE blob(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
    db.execute(f"PRAGMA synchronous={sync}")
    db.isolation_level = None  # explicit BEGIN IMMEDIATE / COMMIT below
    db.execute("CREATE TABLE rec(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
    db.execute("CREATE TABLE head(name TEXT PRIMARY KEY, v BLOB)")
    head_name = f"run/{RUN}/branch/0"
    # setup, as objstore's start_run + prompt put (not timed)
    pid = blake3.blake3(b"blob %d\x00" % len(PROMPT) + PROMPT).digest()
    start = _enc.encode({"run": RUN, "branch": 0, "lsn": 0, "parent": None, "kind": "run_started", "time": time.time(),
                         "body": {"subject": "default", "workflow_version": "1", "meta": None}})
    head = blake3.blake3(b"record %d\x00" % len(start) + start).digest()
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO blob(h, body) VALUES(?,?)", (pid, PROMPT))
    db.execute("INSERT INTO rec(h, body) VALUES(?,?)", (head, start))
    db.execute("INSERT INTO head VALUES(?,?)", (head_name, head))
    db.execute("COMMIT")

    ex, encode, hasher, now = db.execute, _enc.encode, blake3.blake3, time.time
    n = len(work)
    lsn = 1
    t = clock()
    for i in range(0, n, g):
        ex("BEGIN IMMEDIATE")
        for j in range(i, min(i + g, n)):
            blob, ctx, usage = work[j]
            out = None
            if blob is not None:
                out = hasher(b"blob %d\x00" % len(blob) + blob).digest()
                ex("INSERT OR IGNORE INTO blob(h, body) VALUES(?,?)", (out, blob))
            body = {"step": j, "attempt": 0, "state": "succeeded", "workflow_version": None, "context": ctx,
                    "prompt": pid, "output": out, "tools": None, "usage": usage, "error": None}
            raw = encode({"run": RUN, "branch": 0, "lsn": lsn, "parent": head, "kind": "attempt", "time": now(), "body": body})
            h = hasher(b"record %d\x00" % len(raw) + raw).digest()
            ex("INSERT OR IGNORE INTO rec(h, body) VALUES(?,?)", (h, raw))
            head = h
            lsn += 1
        ex("UPDATE head SET v=? WHERE name=?", (head, head_name))
        ex("COMMIT")
    dt = clock() - t
    db.close()
    return n / dt, (dir_bytes(d),) if measure else None


def load_commitpath():
    path = os.path.normpath(COMMITPATH)
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("commitpath", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- patching os in a process (counting and capturing) --------------------------------------------------------
def patch_os(name, make_wrapper):
    """Replace os.<name> by make_wrapper(real), also where an objstore module bound the function by name.
    Returns a function that puts everything back."""
    real = getattr(os, name, None)
    if real is None:
        return lambda: None
    wrapped = make_wrapper(real)
    setattr(os, name, wrapped)
    bound = []
    for mname, mod in list(sys.modules.items()):
        if mname.startswith("objstore") and mod is not None:
            for attr, v in list(vars(mod).items()):
                if v is real:
                    setattr(mod, attr, wrapped)
                    bound.append((mod, attr))

    def restore():
        setattr(os, name, real)
        for mod, attr in bound:
            setattr(mod, attr, real)
    return restore


# -- the raw floor: objstore's own entry bytes, os.write + fdatasync ------------------------------------------
_NOT_ENTRIES = ("idx", "checkpoint", "witness", "head", "lock", "tmp", "state")


def capture_entries(work, g):
    """Run the work through objstore with fsync="off" and return (one bytes object per commit: what the commit wrote
    to the segment files of the store's logs (any log/ directory), {file kind: bytes kept}, {file kind: bytes left out})."""
    d = tempfile.mkdtemp(prefix="bench-capture-", dir=os.environ.get("BENCH_DIR"))
    restores = []
    try:
        log, run, prompt = objstore_setup(d, fsync="off")
        root = os.path.realpath(log.store.root) + os.sep
        # a file of some log's log/ directory: <root>/log/ (one log), <root>/store/log/ or <root>/runs/../<run>/log/
        in_a_log = (lambda path: path.startswith(root) and (os.sep + "log" + os.sep) in (os.sep + path[len(root):]))
        cur: list = []
        kept: dict = {}
        left: dict = {}

        def note(fd, data):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return
            base = os.path.basename(path)
            kind = re.sub(r"[0-9a-f]{6,}|\d+", "N", base)
            if in_a_log(path) and not any(x in base.lower() for x in _NOT_ENTRIES) and ".new." not in base:
                cur.append(bytes(data))
                kept[kind] = kept.get(kind, 0) + len(data)
            elif path.startswith(os.path.realpath(log.store.root)):
                left[kind] = left.get(kind, 0) + len(data)

        restores.append(patch_os("write", lambda real: lambda fd, data: (note(fd, data), real(fd, data))[1]))
        restores.append(patch_os("pwrite", lambda real: lambda fd, data, off: (note(fd, data), real(fd, data, off))[1]))
        restores.append(patch_os("writev", lambda real: lambda fd, bufs: (note(fd, b"".join(bufs)), real(fd, bufs))[1]))
        restores.append(patch_os("pwritev", lambda real: lambda fd, bufs, off, *fl: (note(fd, b"".join(bufs)),
                                                                                      real(fd, bufs, off, *fl))[1]))
        put_blob, record_attempt, batch = log.put_blob, log.record_attempt, log.store.batch
        entries = []
        n = len(work)
        for i in range(0, n, g):
            cur.clear()
            with batch():
                for j in range(i, min(i + g, n)):
                    blob, ctx, usage = work[j]
                    out = put_blob(blob) if blob is not None else None
                    record_attempt(run, step=j, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage,
                                   context=ctx)
            entries.append(b"".join(cur))
        return entries, kept, left
    finally:
        for r in reversed(restores):
            r()
        shutil.rmtree(d, ignore_errors=True)


def raw_entries(d, entries, n):
    """os.write + fdatasync of each captured entry, appended to one file."""
    fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    write, sync = os.write, os.fdatasync
    t = time.perf_counter()
    for e in entries:
        write(fd, e)
        sync(fd)
    dt = time.perf_counter() - t
    os.close(fd)
    return n / dt


def fsync_latency(d, k=32):
    """Median seconds of one os.write(512 B) + fdatasync in directory d (this repetition's disk state)."""
    path = os.path.join(d, "latency")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    buf = b"x" * 512
    ts = []
    try:
        for _ in range(k):
            t = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            ts.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(ts)


# -- syscalls (and fsync calls) per single durable commit -----------------------------------------------------
WARMUP = 10


def fsync_child(k, mode, seed, count_in_process):
    """Child-process body: set up a store and run, WARMUP durable g=1 commits (first-use costs: lazy imports, first
    segment growth), then k more. mode "mix": the workload (a blob on every third commit); "record": record only.
    With count_in_process, os.fsync and os.fdatasync are wrapped and the calls made during the k commits printed."""
    counts = {"n": 0}
    if count_in_process:
        def counting(real):
            def wrapped(fd):
                counts["n"] += 1
                return real(fd)
            return wrapped
        patch_os("fsync", counting)
        patch_os("fdatasync", counting)
    d = tempfile.mkdtemp(prefix="bench-fsync-", dir=os.environ.get("BENCH_DIR"))
    try:
        log, run, prompt = objstore_setup(d)
        work = workload(WARMUP + k, seed)
        if mode == "record":
            work = [(None, c, u) for _, c, u in work]
        objstore_commits(log, run, prompt, work[:WARMUP], 1)
        counts["n"] = 0
        objstore_commits(log, run, prompt, work[WARMUP:], 1)
        print(counts["n"])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def strace_table(path):
    """{syscall name: calls} from an ``strace -c`` summary."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[-1] != "total" and parts[0].replace(".", "", 1).isdigit():
                try:
                    out[parts[-1]] = out.get(parts[-1], 0) + int(parts[3])
                except ValueError:
                    pass
    return out


def syscalls_per_commit(k, seed):
    """Returns (method, {mode: {syscall: calls per commit}}) or (method, {mode: {"fsync+fdatasync": x}}) without strace."""
    me = os.path.abspath(__file__)
    strace = shutil.which("strace")
    if strace:
        try:
            tables = {}
            for label, kk, mode in (("zero", 0, "mix"), ("mix", k, "mix"), ("zero-record", 0, "record"), ("record", k, "record")):
                fd, out = tempfile.mkstemp(prefix="bench-strace-", dir=os.environ.get("BENCH_DIR"))
                os.close(fd)
                try:
                    subprocess.run([strace, "-f", "-c", "-o", out, sys.executable, me, "--fsync-child", str(kk),
                                    "--fsync-mode", mode, "--seed", str(seed)], check=True, capture_output=True, text=True)
                    tables[label] = strace_table(out)
                finally:
                    os.unlink(out)
            res = {}
            for mode, zero in (("mix", "zero"), ("record", "zero-record")):
                names = set(tables[mode]) | set(tables[zero])
                per = {nm: (tables[mode].get(nm, 0) - tables[zero].get(nm, 0)) / k for nm in names}
                res[mode] = {nm: v for nm, v in per.items() if abs(v) >= 0.005}
            return f"strace -f -c ({k} commits minus 0, after {WARMUP} warm-up commits in both)", res
        except (subprocess.CalledProcessError, OSError, ValueError, IndexError) as e:
            print(f"  (strace failed: {e!r}; counting fsync calls in-process instead)")
    res = {}
    for mode in ("mix", "record"):
        p = subprocess.run([sys.executable, me, "--fsync-child", str(k), "--fsync-mode", mode, "--seed", str(seed),
                            "--count-in-process"], check=True, capture_output=True, text=True)
        res[mode] = {"fsync+fdatasync": int(p.stdout.split()[-1]) / k}
    return "monkeypatched os.fsync/os.fdatasync (no strace: other syscalls not counted)", res


def mode_syscalls(a, targets):
    print("\nsyscalls per single durable commit (g = 1), the witness write included:")
    method, res = syscalls_per_commit(a.fsync_k, a.seed)
    print(f"  via {method}")
    for mode, label in (("mix", "workload (a 2 KB blob on every third commit)"), ("record", "record-only commits")):
        per = res[mode]
        fs = per.get("fsync+fdatasync", per.get("fsync", 0.0) + per.get("fdatasync", 0.0))
        total = sum(v for nm, v in per.items() if nm != "fsync+fdatasync")
        listing = ", ".join(f"{nm} {v:.2f}" for nm, v in sorted(per.items(), key=lambda kv: (-kv[1], kv[0])))
        print(f"  {label}: fsync+fdatasync {fs:.2f} per commit; all syscalls {total:.2f} per commit")
        print(f"    {listing}")
        if mode == "mix":
            targets.append(("fsync+fdatasync per single durable commit == 1.00", fs, 1.0, "eq"))
            if "fsync+fdatasync" not in per:
                targets.append(("syscalls per single durable commit <= 6", total, 6.0, "le"))


# -- P writer processes ---------------------------------------------------------------------------------------
def writer_child(system, path, run, n, idx, seed):
    """Child-process body of the procs mode: open, say "ready", wait for "go" on stdin, commit n records one per
    commit, print {"t0", "t1", "n"} (CLOCK_MONOTONIC, comparable across processes)."""
    work = workload(n, seed + 7919 * (idx + 1))
    step0 = idx * n
    if system == "objstore":
        log = RunLog(Store.open(path, fsync="full"))
        prompt = log.put_blob(PROMPT)
        put_blob, record_attempt, batch = log.put_blob, log.record_attempt, log.store.batch
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        for j, (blob, ctx, usage) in enumerate(work):
            with batch():
                out = put_blob(blob) if blob is not None else None
                record_attempt(run, step=step0 + j, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage,
                               context=ctx)
        t1 = time.monotonic()
    else:
        import sqlite3

        db = sqlite3.connect(path, isolation_level=None, timeout=30)
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA synchronous=FULL")
        ex, encode, hasher, now = db.execute, _enc.encode, blake3.blake3, time.time
        pid = blake3.blake3(b"blob %d\x00" % len(PROMPT) + PROMPT).digest()
        print("ready", flush=True)
        sys.stdin.readline()
        t0 = time.monotonic()
        for j, (blob, ctx, usage) in enumerate(work):
            ex("BEGIN IMMEDIATE")
            head, lsn = ex("SELECT v, lsn FROM head WHERE name=?", (run,)).fetchone()
            out = None
            if blob is not None:
                out = hasher(b"blob %d\x00" % len(blob) + blob).digest()
                ex("INSERT OR IGNORE INTO blob(h, body) VALUES(?,?)", (out, blob))
            body = {"step": step0 + j, "attempt": 0, "state": "succeeded", "workflow_version": None, "context": ctx,
                    "prompt": pid, "output": out, "tools": None, "usage": usage, "error": None}
            raw = encode({"run": run, "branch": 0, "lsn": lsn + 1, "parent": head, "kind": "attempt", "time": now(),
                          "body": body})
            h = hasher(b"record %d\x00" % len(raw) + raw).digest()
            ex("INSERT OR IGNORE INTO rec(h, body) VALUES(?,?)", (h, raw))
            ex("UPDATE head SET v=?, lsn=? WHERE name=?", (h, lsn + 1, run))
            ex("COMMIT")
        t1 = time.monotonic()
        db.close()
    print(json.dumps({"t0": t0, "t1": t1, "n": n}), flush=True)


def run_writers(system, d, procs, n, shared, seed):
    """Total records/s of `procs` writer processes (shared: one run; else one run each)."""
    me = os.path.abspath(__file__)
    runs = ["shared"] * procs if shared else [f"w{i}" for i in range(procs)]
    if system == "objstore":
        path = os.path.join(d, "store")
        log = RunLog(Store.init(path, fsync="full"))
        for r in sorted(set(runs)):
            log.start_run(r)
        log.put_blob(PROMPT)
        log.store.engine.close()
        names = runs
    else:
        path = os.path.join(d, "peer.sqlite")
        db = sqlite_peer(path, "CREATE TABLE blob(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
        db.execute("CREATE TABLE rec(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
        db.execute("CREATE TABLE head(name TEXT PRIMARY KEY, v BLOB, lsn INTEGER)")
        names = [f"run/{r}/branch/0" for r in runs]
        with db:
            db.executemany("INSERT OR IGNORE INTO head VALUES(?, ?, 0)", ((nm, b"\0" * 32) for nm in sorted(set(names))))
        db.close()
    children = [subprocess.Popen([sys.executable, me, "--writer-child", system, path, names[i], str(n), str(i),
                                  "--seed", str(seed)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for i in range(procs)]
    try:
        for c in children:
            if c.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{system} writer did not start (exit {c.wait()})")
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        outs = []
        for c in children:
            text = c.stdout.read()
            if c.wait() != 0:
                raise RuntimeError(f"{system} writer failed (exit {c.returncode})")
            outs.append(json.loads(text.strip().splitlines()[-1]))
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    return sum(o["n"] for o in outs) / span


def mode_procs(a, targets):
    P = a.procs
    n = max(10, int(a.procs_n * a.scale))
    print(f"\n{P} writer processes, 1 record per durable commit, {n:,} records per writer, {a.reps} reps "
          f"(shared run / own runs); SQLite: {P} processes, own connection each, WAL FULL, busy_timeout=30000, "
          f"BEGIN IMMEDIATE; and 1 objstore writer alone")
    systems = [("objstore P shared", "objstore", P, True), ("SQLite P shared", "sqlite", P, True),
               ("objstore P own", "objstore", P, False), ("SQLite P own", "sqlite", P, False),
               ("objstore 1 writer", "objstore", 1, False)]
    rates = {s[0]: [] for s in systems}
    lat = []
    for r in range(a.reps):
        k = r % len(systems)
        for name, system, procs, shared in systems[k:] + systems[:k]:
            d = tempfile.mkdtemp(prefix="bench-procs-", dir=os.environ.get("BENCH_DIR"))
            try:
                if name == systems[k][0]:
                    lat.append(fsync_latency(d))
                rates[name].append(run_writers(system, d, procs, n, shared, a.seed))
            finally:
                shutil.rmtree(d, ignore_errors=True)
        print(f"  rep {r + 1}: " + ", ".join(f"{nm} {rates[nm][-1]:,.0f}" for nm, *_ in systems)
              + f" rec/s; shared {rates['objstore P shared'][-1] / rates['SQLite P shared'][-1]:.2f}x SQLite, "
              f"own {rates['objstore P own'][-1] / rates['SQLite P own'][-1]:.2f}x SQLite; fsync latency "
              f"{lat[-1] * 1e3:.2f} ms", flush=True)
    labels = {"objstore P shared": f"objstore {P} procs, shared run rec/s", "SQLite P shared": f"SQLite {P} procs, one head rec/s",
              "objstore P own": f"objstore {P} procs, own runs rec/s", "SQLite P own": f"SQLite {P} procs, own heads rec/s",
              "objstore 1 writer": "objstore 1 writer rec/s"}
    print(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for name, *_ in systems:
        lo, md, hi = mmm(rates[name])
        print(f"  {labels[name]:<44} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
    one = rates["objstore 1 writer"]
    for shape in ("shared", "own"):
        vs_sq = [x / y for x, y in zip(rates[f"objstore P {shape}"], rates[f"SQLite P {shape}"], strict=True)]
        vs_one = [x / y for x, y in zip(rates[f"objstore P {shape}"], one, strict=True)]
        for label, xs, need in ((f"{P} procs {shape}: objstore / SQLite", vs_sq, 1.0),
                                (f"{P} procs {shape}: objstore / 1 writer", vs_one, 0.9)):
            lo, md, hi = mmm(xs)
            print(f"  {'ratio ' + label:<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x   target >= {need}x: {verdict(md >= need)}")
            targets.append((f"{label} >= {need}x", md, need))
    lo, md, hi = mmm(lat)
    print("  fsync latency per rep (ms): " + ", ".join(f"{x * 1e3:.2f}" for x in lat) + f"  (min {lo * 1e3:.2f}, median "
          f"{md * 1e3:.2f}, max {hi * 1e3:.2f})")


# -- T threads of one process ---------------------------------------------------------------------------------
def threads_child(system, threads, n, seed):
    """Child-process body of the threads mode: prints {"rate", "commits", "fdatasync", "fsync", "errors"}."""
    import threading

    counts = {"fdatasync": 0, "fsync": 0}
    mu = threading.Lock()
    if system == "objstore":
        def counting(name):
            def make(real):
                def wrapped(fd):
                    with mu:
                        counts[name] += 1
                    return real(fd)
                return wrapped
            return make
        patch_os("fsync", counting("fsync"))
        patch_os("fdatasync", counting("fdatasync"))
    d = tempfile.mkdtemp(prefix="bench-threads-", dir=os.environ.get("BENCH_DIR"))
    errors: list = []
    barrier = threading.Barrier(threads + 1)
    works = [workload(n, seed + 7919 * (i + 1)) for i in range(threads)]
    try:
        if system == "objstore":
            log = RunLog(Store.init(os.path.join(d, "store"), fsync="full"))
            runs = [log.start_run(f"t{i}") for i in range(threads)]
            prompt = log.put_blob(PROMPT)
            put_blob, record_attempt, batch = log.put_blob, log.record_attempt, log.store.batch

            def worker(i):
                run = runs[i]
                try:
                    barrier.wait()
                    for j, (blob, ctx, usage) in enumerate(works[i]):
                        with batch():
                            out = put_blob(blob) if blob is not None else None
                            record_attempt(run, step=j, attempt=0, state="succeeded", prompt=prompt, output=out,
                                           usage=usage, context=ctx)
                except Exception as e:  # reported, not raised: one thread's failure is a figure
                    errors.append(repr(e))
        else:
            import sqlite3

            path = os.path.join(d, "peer.sqlite")
            db = sqlite_peer(path, "CREATE TABLE blob(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
            db.execute("CREATE TABLE rec(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
            db.execute("CREATE TABLE head(name TEXT PRIMARY KEY, v BLOB, lsn INTEGER)")
            with db:
                db.executemany("INSERT INTO head VALUES(?, ?, 0)", ((f"run/t{i}/branch/0", b"\0" * 32) for i in range(threads)))
            db.close()
            pid = blake3.blake3(b"blob %d\x00" % len(PROMPT) + PROMPT).digest()

            def worker(i):
                name = f"run/t{i}/branch/0"
                try:
                    c = sqlite3.connect(path, isolation_level=None, timeout=30)
                    c.execute("PRAGMA busy_timeout=30000")
                    c.execute("PRAGMA synchronous=FULL")
                    ex, encode, hasher, now = c.execute, _enc.encode, blake3.blake3, time.time
                    barrier.wait()
                    for j, (blob, ctx, usage) in enumerate(works[i]):
                        ex("BEGIN IMMEDIATE")
                        head, lsn = ex("SELECT v, lsn FROM head WHERE name=?", (name,)).fetchone()
                        out = None
                        if blob is not None:
                            out = hasher(b"blob %d\x00" % len(blob) + blob).digest()
                            ex("INSERT OR IGNORE INTO blob(h, body) VALUES(?,?)", (out, blob))
                        body = {"step": j, "attempt": 0, "state": "succeeded", "workflow_version": None, "context": ctx,
                                "prompt": pid, "output": out, "tools": None, "usage": usage, "error": None}
                        raw = encode({"run": f"t{i}", "branch": 0, "lsn": lsn + 1, "parent": head, "kind": "attempt",
                                      "time": now(), "body": body})
                        h = hasher(b"record %d\x00" % len(raw) + raw).digest()
                        ex("INSERT OR IGNORE INTO rec(h, body) VALUES(?,?)", (h, raw))
                        ex("UPDATE head SET v=?, lsn=? WHERE name=?", (h, lsn + 1, name))
                        ex("COMMIT")
                    c.close()
                except Exception as e:
                    errors.append(repr(e))
        import threading as _t

        ts = [_t.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        counts["fdatasync"] = counts["fsync"] = 0
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        commits = threads * n
        print(json.dumps({"rate": commits / dt, "commits": commits, "fdatasync": counts["fdatasync"],
                          "fsync": counts["fsync"], "errors": errors[:3], "nerrors": len(errors)}), flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def mode_threads(a, targets):
    T = a.threads
    n = max(10, int(a.threads_n * a.scale))
    me = os.path.abspath(__file__)
    print(f"\n{T} threads of one process, 1 record per durable commit, each on its own run, {n:,} records per thread, "
          f"{a.reps} reps; SQLite: one connection per thread, WAL FULL, busy_timeout=30000, BEGIN IMMEDIATE")
    systems = ["objstore", "sqlite"]
    rates = {s: [] for s in systems}
    per_commit = []
    lat = []
    for r in range(a.reps):
        d = tempfile.mkdtemp(prefix="bench-lat-", dir=os.environ.get("BENCH_DIR"))
        try:
            lat.append(fsync_latency(d))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        for system in systems[:: (1 if r % 2 == 0 else -1)]:
            p = subprocess.run([sys.executable, me, "--threads-child", system, str(T), str(n), "--seed", str(a.seed)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{system} threads child failed (exit {p.returncode}): {p.stderr.strip()[-800:]}")
            out = json.loads(p.stdout.strip().splitlines()[-1])
            if out["nerrors"]:
                print(f"  !! {system}: {out['nerrors']} thread(s) failed: {out['errors']}")
            rates[system].append(out["rate"])
            if system == "objstore":
                per_commit.append((out["fdatasync"] + out["fsync"]) / out["commits"])
        print(f"  rep {r + 1}: objstore {rates['objstore'][-1]:,.0f} rec/s, SQLite {rates['sqlite'][-1]:,.0f} rec/s, "
              f"{rates['objstore'][-1] / rates['sqlite'][-1]:.2f}x; objstore fsync+fdatasync per commit "
              f"{per_commit[-1]:.3f}; fsync latency {lat[-1] * 1e3:.2f} ms", flush=True)
    print(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for s, label in (("objstore", f"objstore {T} threads rec/s"), ("sqlite", f"SQLite {T} connections rec/s")):
        lo, md, hi = mmm(rates[s])
        print(f"  {label:<44} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
    ratio = [x / y for x, y in zip(rates["objstore"], rates["sqlite"], strict=True)]
    lo, md, hi = mmm(ratio)
    print(f"  {'ratio objstore / SQLite':<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x   target >= 3x: {verdict(md >= 3)}")
    targets.append((f"{T} threads: objstore >= 3x SQLite", md, 3.0))
    lo, md, hi = mmm(per_commit)
    print(f"  {'objstore fsync+fdatasync per commit':<44} {lo:>12.3f} {md:>12.3f} {hi:>12.3f}   target < 0.5: "
          f"{verdict(md < 0.5)}  (counted in the child: os.fdatasync/os.fsync wrapped)")
    targets.append((f"{T} threads: fdatasync calls per commit < 0.5", md, 0.5, "lt"))


# -- groups ---------------------------------------------------------------------------------------------------
def mode_groups(a, targets):
    groups = [int(x) for x in str(a.groups).split(",") if x.strip()]
    base_n = {1: a.n1, 10: a.n10, 100: a.n100, 1000: a.n1000}
    cp = load_commitpath()
    if cp is None:
        print(f"  note: {os.path.normpath(COMMITPATH)} not found: bare commit path skipped")
    labels = {"objstore": "objstore (public API) rec/s", "sqlite": "SQLite WAL FULL rec/s",
              "bare log": "bare commit path (commitpath) rec/s", "raw floor": "raw floor (objstore's entries) rec/s"}
    for g in groups:
        n = max(g, int(base_n.get(g, 20000) * a.scale))
        n = -(-n // g) * g  # a whole number of commits (commitpath's loops assume it)
        work = workload(n, a.seed)
        entries, kept, left = capture_entries(work, g)
        systems = [("objstore", run_objstore), ("sqlite", run_sqlite)]
        if cp is not None:
            systems.append(("bare log", lambda d, w, g, measure=False: (cp.log_engine(d, len(w), g), None)))
        systems.append(("raw floor", lambda d, w, g, measure=False, _e=entries: (raw_entries(d, _e, len(w)), None)))
        rates = {name: [] for name, _ in systems}
        lat = []
        extra = {}
        print(f"\ng = {g} record(s) per durable commit: {n:,} records/rep, {n // g:,} commits/rep, {a.reps} reps")
        print(f"  raw floor: {len(entries):,} captured entries, {sum(map(len, entries)) / len(entries):,.0f} B each on "
              f"average; kept writes to {kept or 'nothing'}; left out {left or 'nothing'}")
        for r in range(a.reps):
            order = systems[:: (1 if r % 2 == 0 else -1)]
            for name, fn in order:
                d = tempfile.mkdtemp(prefix=f"bench-commit-g{g}-", dir=os.environ.get("BENCH_DIR"))
                try:
                    if name == order[0][0]:
                        lat.append(fsync_latency(d))
                    rate, ex = fn(d, work, g, measure=(r == 0))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                rates[name].append(rate)
                if ex is not None:
                    extra[name] = ex
            line = ", ".join(f"{nm} {rates[nm][-1]:,.0f}" for nm, _ in systems)
            line += f" rec/s; objstore/SQLite {rates['objstore'][-1] / rates['sqlite'][-1]:.2f}x"
            if cp is not None:
                line += f", objstore/bare {rates['objstore'][-1] / rates['bare log'][-1]:.2f}x"
            line += f", objstore/raw {rates['objstore'][-1] / rates['raw floor'][-1]:.2f}x; fsync latency {lat[-1] * 1e3:.2f} ms"
            print(f"  rep {r + 1}: {line}", flush=True)
        os_sq = [x / y for x, y in zip(rates["objstore"], rates["sqlite"], strict=True)]
        print(f"  {'':<40} {'min':>12} {'median':>12} {'max':>12}")
        for name, _ in systems:
            lo, md, hi = mmm(rates[name])
            print(f"  {labels[name]:<40} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
        lo, md, hi = mmm(os_sq)
        print(f"  {'ratio objstore / SQLite':<40} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
        need = {1: 1.0, 10: 1.2, 100: 2.0, 1000: 2.0}.get(g)
        if need is not None:
            targets.append((f"g={g}: objstore >= {need}x SQLite", md, need))
            print(f"  target objstore/SQLite >= {need}x (median): {verdict(md >= need)}")
        for other, short in (("bare log", "bare"), ("raw floor", "raw floor")):
            if other not in rates:
                continue
            xs = [x / y for x, y in zip(rates["objstore"], rates[other], strict=True)]
            lo, md, hi = mmm(xs)
            print(f"  {'ratio objstore / ' + short:<40} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
            if g == 1 and other == "bare log":
                targets.append(("g=1: objstore >= 0.7x bare commit path", md, 0.7))
                print(f"  target objstore/bare >= 0.7x (median): {verdict(md >= 0.7)}")
        lo, md, hi = mmm(lat)
        print(f"  {'fsync latency (write 512 B + fdatasync) ms':<40} {lo * 1e3:>12.3f} {md * 1e3:>12.3f} {hi * 1e3:>12.3f}")
        if "objstore" in extra:
            size, alloc, canon, nrec, rec_canon = extra["objstore"]
            sq = extra.get("sqlite", (0,))[0]
            nblob = sum(1 for b, _, _ in work if b is not None) + 1
            print(f"  bytes on disk after rep 1: objstore {size:,} B (allocated {alloc:,} B) for {canon:,} canonical B "
                  f"({nrec:,} records, avg {rec_canon / nrec:.0f} B canonical; {nblob:,} blobs) = {size / canon:.3f}x "
                  f"canonical (allocated {alloc / canon:.3f}x); SQLite db+wal+shm {sq:,} B = {sq / canon:.3f}x")
        sys.stdout.flush()


# -- cpu: issue 17's CPU gates --------------------------------------------------------------------------------
CPU_N = {1: 3000, 10: 10000, 100: 20000, 1000: 20000}


def cpu_child(system, g, n, seed):
    """In a fresh process: warm up on 10 % of the work, then print the CPU seconds (process_time: user + sys, every
    thread) of n records at g per commit, fsync off (objstore) / synchronous=OFF (SQLite)."""
    work = workload(n + max(g, n // 10), seed)
    warm, work = work[n:], work[:n]
    d = tempfile.mkdtemp(prefix=f"bench-cpu-{system}-", dir=os.environ.get("BENCH_DIR"))
    try:
        if system in ("objstore", "objstore-many"):
            commits = objstore_commits if system == "objstore" else objstore_commits_many
            log, run, prompt = objstore_setup(d, "off")
            commits(log, run, prompt, warm, g)
            t = time.process_time()
            commits(log, run, prompt, work, g)
            dt = time.process_time() - t
        else:  # the warm-up in a database of its own: the measured one starts as fresh as objstore's store
            os.makedirs(os.path.join(d, "warm"))
            run_sqlite(os.path.join(d, "warm"), warm, g, sync="OFF")
            dt = n / run_sqlite(d, work, g, sync="OFF", clock=time.process_time)[0]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps({"cpu": dt, "n": n}))


def mode_cpu(a, targets):
    """CPU per record (fresh child per measurement, process_time) at every g: objstore fsync off against SQLite WAL
    synchronous=OFF, the same records; interleaved, order reversed on alternate reps."""
    groups = [int(x) for x in str(a.groups).split(",") if x.strip()]
    print("\ncpu: CPU per record, fresh child each, objstore fsync=off vs SQLite WAL synchronous=OFF (process_time)")
    for g in groups:
        n = max(g, int(CPU_N.get(g, 20000) * a.scale))
        n = -(-n // g) * g
        systems = ("objstore", "sqlite") if g == 1 else ("objstore", "objstore-many", "sqlite")
        us: dict = {name: [] for name in systems}
        for r in range(a.reps):
            for system in (systems if r % 2 == 0 else systems[::-1]):
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cpu-child", system, str(g), str(n),
                                      "--seed", str(a.seed)], capture_output=True, text=True, check=True).stdout
                got = json.loads(out.strip().splitlines()[-1])
                us[system].append(got["cpu"] / got["n"] * 1e6)
            print(f"  g={g} rep {r + 1}: " + ", ".join(f"{name} {us[name][-1]:.1f} µs" for name in systems) + " CPU per record; ratio "
                  + ", ".join(f"{name} {us[name][-1] / us['sqlite'][-1]:.2f}" for name in systems if name != "sqlite"), flush=True)
        for name in systems:
            if name == "sqlite":
                continue
            ratios = [x / y for x, y in zip(us[name], us["sqlite"], strict=True)]
            lo, md, hi = mmm(ratios)
            mine = statistics.median(us[name])
            print(f"  g={g}: {name} {mine:.1f} µs (min {min(us[name]):.1f}, max {max(us[name]):.1f}), SQLite "
                  f"{statistics.median(us['sqlite']):.1f} µs per record; ratio {name}/SQLite min/median/max {lo:.2f} / {md:.2f} / {hi:.2f}")
            if g == 1:
                targets.append(("cpu g=1: objstore/SQLite-OFF CPU <= 1.0x", md, 1.0, "le"))
                targets.append(("cpu g=1: objstore CPU per commit <= 60 µs", mine, 60.0, "le"))
            else:
                targets.append((f"cpu g={g}: {name}/SQLite-OFF CPU per record <= 0.75x", md, 0.75, "le"))


# -- driver ---------------------------------------------------------------------------------------------------
def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def verdict(ok):
    return "met" if ok else "NOT MET"


def env(name, default, cast=int):
    v = os.environ.get(name)
    return cast(v) if v not in (None, "") else default


MODES = ("groups", "syscalls", "procs", "threads", "cpu")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modes", default=env("BENCH_MODES", None, str), help="comma list of " + ",".join(MODES))
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--n1", type=int, default=env("BENCH_N1", 2000))
    p.add_argument("--n10", type=int, default=env("BENCH_N10", 5000))
    p.add_argument("--n100", type=int, default=env("BENCH_N100", 20000))
    p.add_argument("--n1000", type=int, default=env("BENCH_N1000", 20000))
    p.add_argument("--scale", type=float, default=env("BENCH_SCALE", 1.0, float))
    p.add_argument("--groups", default=env("BENCH_GROUPS", "1,10,100,1000", str))
    p.add_argument("--fsync-k", type=int, default=env("BENCH_FSYNC_K", 200))
    p.add_argument("--procs", type=int, default=None)
    p.add_argument("--procs-n", type=int, default=500)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--threads-n", type=int, default=500)
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    # internal: the child processes
    p.add_argument("--fsync-child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fsync-mode", default="mix", help=argparse.SUPPRESS)
    p.add_argument("--count-in-process", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--writer-child", nargs=5, default=None, help=argparse.SUPPRESS)
    p.add_argument("--threads-child", nargs=3, default=None, help=argparse.SUPPRESS)
    p.add_argument("--cpu-child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.modes is None:
        chosen = [m for m, v in (("procs", a.procs), ("threads", a.threads)) if v is not None]
        a.modes = ",".join(chosen) if chosen else ",".join(MODES)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad:
        p.error(f"unknown mode(s) {bad}; choose from {','.join(MODES)}")
    a.procs = 8 if a.procs is None else a.procs
    a.threads = 8 if a.threads is None else a.threads
    return a


def main(argv):
    a = parse_args(argv)
    if a.fsync_child is not None:
        fsync_child(a.fsync_child, a.fsync_mode, a.seed, a.count_in_process)
        return
    if a.writer_child is not None:
        system, path, run, n, idx = a.writer_child
        writer_child(system, path, run, int(n), int(idx), a.seed)
        return
    if a.cpu_child is not None:
        system, g, n = a.cpu_child
        cpu_child(system, int(g), int(n), a.seed)
        return
    if a.threads_child is not None:
        system, t, n = a.threads_child
        threads_child(system, int(t), int(n), a.seed)
        return
    print(f"bench_commit: durable commits, objstore public API (fsync=full) vs SQLite WAL synchronous=FULL; modes "
          f"{','.join(a.modes)}; {a.reps} interleaved repetitions, scale {a.scale}; {os.cpu_count()} CPUs; scratch in "
          f"{os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    targets: list = []
    t_all = time.perf_counter()
    for mode, fn in (("groups", mode_groups), ("syscalls", mode_syscalls), ("procs", mode_procs), ("threads", mode_threads),
                     ("cpu", mode_cpu)):
        if mode in a.modes:
            try:
                fn(a, targets)
            except Exception as e:  # one broken mode must not hide the others' figures
                import traceback

                print(f"  !! mode {mode} failed: {e!r}")
                traceback.print_exc()
    print("\nTargets (ratios: median over repetitions):")
    for t in targets:
        label, val, need = t[:3]
        how = t[3] if len(t) > 3 else "ge"
        ok = {"ge": val >= need, "le": val <= need, "lt": val < need, "eq": abs(val - need) < 0.005}[how]
        print(f"  {label:<56} {val:>8.2f}   {verdict(ok)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\npeak RSS of this process: {rss / 1024:.1f} MiB (ru_maxrss)   total wall time {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
