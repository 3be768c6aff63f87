"""Durable commits at the granularity agents write: objstore's public API against SQLite, same run, interleaved.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_commit.py                      # defaults below, 5 repetitions
    .venv/bin/python benchmarks/bench_commit.py --reps 3 --scale 0.1 # quick check
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_commit.py

Options (each also read from the environment): --reps / BENCH_REPS (5), --n1 / BENCH_N1 (2000), --n10 / BENCH_N10
(5000), --n100 / BENCH_N100 (20000), --n1000 / BENCH_N1000 (20000): records per repetition for each group size;
--scale / BENCH_SCALE (1.0) multiplies all four; --groups / BENCH_GROUPS (1,10,100,1000); --fsync-k / BENCH_FSYNC_K
(60) appends counted for the fsync figure; --seed / BENCH_SEED (1). Scratch directories are made with
tempfile.mkdtemp(dir=$BENCH_DIR) and removed afterwards.

What it measures
----------------
Workload: attempt records of ~300 B canonical (prompt blob ref, usage map, small context map); on one record in three
a fresh 2 KB text blob (seeded word generator over a fixed vocabulary, so it compresses like text) is the record's
``output`` and is committed together with it. "Group" g = records per durable commit:

* objstore, public API only: ``RunLog(Store.init(path, fsync="full"))``; per commit ``with log.store.batch():``
  around g x (``put_blob`` if any, ``record_attempt``). For g = 1 every record (+ its blob) is one batch too.
* SQLite peer: WAL, synchronous=FULL, rowid tables ``blob`` and ``rec`` with a unique hash column and a ``head`` row;
  per commit BEGIN IMMEDIATE, insert the blob rows and record rows (bodies = msgpack payload encoded in the loop with
  msgspec, sorted keys, the same payload objstore builds; hash = BLAKE3 of ``<type> SP <len> NUL <payload>`` computed
  in the loop as objstore does), update the head row, COMMIT.
* For context (when /work/shared/bench/commitpath.py exists): its bare log commit path ``log_engine`` (flock, one framed
  entry, one write, one fdatasync) and the raw append+fdatasync floor ``raw_floor`` with the same n and g.

All systems run in the same process, interleaved (order reversed on alternate repetitions), each repetition in a fresh
directory; the ratios are formed per repetition and min/median/max are printed.

Also: fsync+fdatasync calls per single durable append at g = 1 (a child process under ``strace -f -c``, K appends
minus 0 appends, so store creation and run start are excluded; falls back to counting via monkeypatched
os.fsync/os.fdatasync in the child); bytes on disk (sum of file sizes under the store directory) after the first
repetition of each group, divided by the canonical bytes of all objects written; peak RSS of this process.

Targets (from the issue); a target is "met" when the MEDIAN per-repetition ratio meets it:

* 1 record per commit:      objstore >= 1.0x SQLite  and  >= 0.85x the bare log path
* 10 records per commit:    objstore >= 1.2x SQLite
* 100 and 1000 per commit:  objstore >= 3x SQLite
* fsync calls per single durable append (g = 1) <= 1.2
* bytes on disk after the 1000-per-commit run <= 0.5x canonical bytes
"""

import argparse
import importlib.util
import os
import random
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
def objstore_setup(d):
    log = RunLog(Store.init(os.path.join(d, "store"), fsync="full"))
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


def run_objstore(d, work, g, measure=False):
    log, run, prompt = objstore_setup(d)
    t = time.perf_counter()
    objstore_commits(log, run, prompt, work, g)
    dt = time.perf_counter() - t
    extra = None
    if measure:
        extra = objstore_bytes(log, run, work)
    return len(work) / dt, extra


def canonical_len(otype, payload_len):
    return len(b"%s %d\x00" % (otype.encode(), payload_len)) + payload_len


def objstore_bytes(log, run, work):
    """(bytes on disk: sum of file sizes, allocated bytes, canonical bytes of all objects written, record count)."""
    from objstore import codec  # canonical encoding, only to size what was written

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


def run_sqlite(d, work, g, measure=False):
    db = sqlite_peer(os.path.join(d, "peer.sqlite"), "CREATE TABLE blob(id INTEGER PRIMARY KEY, h BLOB UNIQUE, body BLOB)")
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
    t = time.perf_counter()
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
    dt = time.perf_counter() - t
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


# -- fsync calls per append ----------------------------------------------------------------------------------
def fsync_child(k, mode, seed, count_in_process):
    """Child-process body: set up a store and run, then k durable g=1 appends.

    mode "mix": the workload (a blob on every third append); "record": record only. With count_in_process, os.fsync
    and os.fdatasync are wrapped (before objstore is used) and the calls made during the k appends are printed."""
    counts = {"n": 0}
    if count_in_process:
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def wrapped(fd, _real=real):
                counts["n"] += 1
                return _real(fd)
            setattr(os, name, wrapped)
            # objstore is already imported: also replace names bound by "from os import fsync" in its modules
            for mname, mod in list(sys.modules.items()):
                if mname.startswith("objstore") and mod is not None:
                    for attr, v in list(vars(mod).items()):
                        if v is real:
                            setattr(mod, attr, wrapped)
    d = tempfile.mkdtemp(prefix="bench-fsync-", dir=os.environ.get("BENCH_DIR"))
    try:
        log, run, prompt = objstore_setup(d)
        work = workload(k, seed)
        if mode == "record":
            work = [(None, c, u) for _, c, u in work]
        counts["n"] = 0
        objstore_commits(log, run, prompt, work, 1)
        print(counts["n"])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _strace_counts(path):
    calls = 0
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                calls += int(parts[3])
    return calls


def fsync_per_append(k, seed):
    """Returns (method, calls per append for the workload mix, calls per append for record-only appends)."""
    me = os.path.abspath(__file__)
    strace = shutil.which("strace")
    if strace:
        try:
            res = {}
            for label, kk, mode in (("zero", 0, "mix"), ("mix", k, "mix"), ("record", k, "record")):
                fd, out = tempfile.mkstemp(prefix="bench-strace-", dir=os.environ.get("BENCH_DIR"))
                os.close(fd)
                try:
                    subprocess.run([strace, "-f", "-c", "-o", out, "-e", "trace=fsync,fdatasync", sys.executable, me,
                                    "--fsync-child", str(kk), "--fsync-mode", mode, "--seed", str(seed)],
                                   check=True, capture_output=True, text=True)
                    res[label] = _strace_counts(out)
                finally:
                    os.unlink(out)
            return "strace -f -c", (res["mix"] - res["zero"]) / k, (res["record"] - res["zero"]) / k
        except (subprocess.CalledProcessError, OSError, ValueError, IndexError) as e:
            print(f"  (strace failed: {e!r}; counting in-process instead)")
    res = {}
    for mode in ("mix", "record"):
        p = subprocess.run([sys.executable, me, "--fsync-child", str(k), "--fsync-mode", mode, "--seed", str(seed),
                            "--count-in-process"], check=True, capture_output=True, text=True)
        res[mode] = int(p.stdout.split()[-1])
    return "monkeypatched os.fsync/os.fdatasync", res["mix"] / k, res["record"] / k


# -- driver ---------------------------------------------------------------------------------------------------
def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def verdict(ok):
    return "met" if ok else "NOT MET"


def env(name, default, cast=int):
    v = os.environ.get(name)
    return cast(v) if v not in (None, "") else default


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--n1", type=int, default=env("BENCH_N1", 2000))
    p.add_argument("--n10", type=int, default=env("BENCH_N10", 5000))
    p.add_argument("--n100", type=int, default=env("BENCH_N100", 20000))
    p.add_argument("--n1000", type=int, default=env("BENCH_N1000", 20000))
    p.add_argument("--scale", type=float, default=env("BENCH_SCALE", 1.0, float))
    p.add_argument("--groups", default=env("BENCH_GROUPS", "1,10,100,1000", str))
    p.add_argument("--fsync-k", type=int, default=env("BENCH_FSYNC_K", 60))
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    # internal: the child process of the fsync count
    p.add_argument("--fsync-child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--fsync-mode", default="mix", help=argparse.SUPPRESS)
    p.add_argument("--count-in-process", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    if a.fsync_child is not None:
        fsync_child(a.fsync_child, a.fsync_mode, a.seed, a.count_in_process)
        return
    groups = [int(x) for x in str(a.groups).split(",") if x.strip()]
    base_n = {1: a.n1, 10: a.n10, 100: a.n100, 1000: a.n1000}
    cp = load_commitpath()
    print(f"bench_commit: durable commits, objstore public API (fsync=full) vs SQLite WAL synchronous=FULL; "
          f"{a.reps} interleaved repetitions; scratch in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    if cp is None:
        print(f"  note: {os.path.normpath(COMMITPATH)} not found: bare log path and raw floor skipped")

    results = {}
    targets = []
    t_all = time.perf_counter()
    for g in groups:
        n = max(g, int(base_n.get(g, 20000) * a.scale))
        n = -(-n // g) * g  # a whole number of commits (commitpath's loops assume it)
        work = workload(n, a.seed)
        systems = [("objstore", run_objstore), ("sqlite", run_sqlite)]
        if cp is not None:
            systems += [("bare log", lambda d, w, g, measure=False: (cp.log_engine(d, len(w), g), None)),
                        ("raw floor", lambda d, w, g, measure=False: (cp.raw_floor(d, len(w), g), None))]
        rates = {name: [] for name, _ in systems}
        extra = {}
        for r in range(a.reps):
            for name, fn in systems[:: (1 if r % 2 == 0 else -1)]:
                d = tempfile.mkdtemp(prefix=f"bench-commit-g{g}-", dir=os.environ.get("BENCH_DIR"))
                try:
                    rate, ex = fn(d, work, g, measure=(r == 0))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                rates[name].append(rate)
                if ex is not None:
                    extra[name] = ex
        results[g] = (n, rates, extra)
        os_sq = [x / y for x, y in zip(rates["objstore"], rates["sqlite"], strict=True)]
        print(f"\ng = {g} record(s) per durable commit: {n:,} records/rep, {n // g:,} commits/rep, {a.reps} reps")
        print(f"  {'':<40} {'min':>12} {'median':>12} {'max':>12}")
        labels = {"objstore": "objstore (public API) rec/s", "sqlite": "SQLite WAL FULL rec/s",
                  "bare log": "bare log path (commitpath) rec/s", "raw floor": "raw append+fdatasync floor rec/s"}
        for name, _ in systems:
            lo, md, hi = mmm(rates[name])
            print(f"  {labels[name]:<40} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
        lo, md, hi = mmm(os_sq)
        print(f"  {'ratio objstore / SQLite':<40} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
        need = {1: 1.0, 10: 1.2, 100: 3.0, 1000: 3.0}.get(g)
        if need is not None:
            targets.append((f"g={g}: objstore >= {need}x SQLite", md, need))
            print(f"  target objstore/SQLite >= {need}x (median): {verdict(md >= need)}")
        if cp is not None:
            os_log = [x / y for x, y in zip(rates["objstore"], rates["bare log"], strict=True)]
            lo, md, hi = mmm(os_log)
            print(f"  {'ratio objstore / bare log':<40} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
            if g == 1:
                targets.append(("g=1: objstore >= 0.85x bare log path", md, 0.85))
                print(f"  target objstore/bare log >= 0.85x (median): {verdict(md >= 0.85)}")
        if "objstore" in extra:
            size, alloc, canon, nrec, rec_canon = extra["objstore"]
            sq = extra.get("sqlite", (0,))[0]
            nblob = sum(1 for b, _, _ in work if b is not None) + 1
            print(f"  bytes on disk after rep 1: objstore {size:,} B (allocated {alloc:,} B) for {canon:,} canonical B "
                  f"({nrec:,} records, avg {rec_canon / nrec:.0f} B canonical; {nblob:,} blobs) = {size / canon:.3f}x "
                  f"canonical (allocated {alloc / canon:.3f}x); SQLite db+wal+shm {sq:,} B = {sq / canon:.3f}x")
            if g == 1000:
                targets.append(("g=1000: bytes on disk <= 0.5x canonical", size / canon, 0.5, "le"))
                print(f"  target bytes on disk <= 0.5x canonical: {verdict(size / canon <= 0.5)}")
        sys.stdout.flush()

    print(f"\nfsync/fdatasync calls per single durable append (g = 1, {a.fsync_k} appends after the run is started):")
    method, per_mix, per_rec = fsync_per_append(a.fsync_k, a.seed)
    print(f"  via {method}: {per_mix:.2f} per append (workload: blob on every third), {per_rec:.2f} per record-only append")
    targets.append(("fsync calls per single durable append <= 1.2", per_mix, 1.2, "le"))
    print(f"  target <= 1.2: {verdict(per_mix <= 1.2)}")

    print("\nTargets (ratios: median over repetitions):")
    for t in targets:
        label, val, need = t[:3]
        ok = val <= need if len(t) > 3 else val >= need
        print(f"  {label:<48} {val:>8.2f}   {verdict(ok)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\npeak RSS of this process: {rss / 1024:.1f} MiB (ru_maxrss)   total wall time {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
