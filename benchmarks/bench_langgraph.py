"""Issue 18's benchmark table: ObjstoreSaver / AsyncObjstoreSaver against SqliteSaver / AsyncSqliteSaver.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_langgraph.py                          # every row, 5 reps
    .venv/bin/python benchmarks/bench_langgraph.py loop bytes               # rows 1 and 4 only
    .venv/bin/python benchmarks/bench_langgraph.py get list --reps 3        # rows 2 and 3
    .venv/bin/python benchmarks/bench_langgraph.py find --threads 2000      # row 6 with a smaller big store
    .venv/bin/python benchmarks/bench_langgraph.py --steps 200 --reps 2 --threads 200 --json -   # smoke
    BENCH_DIR=/mnt/disk .venv/bin/python benchmarks/bench_langgraph.py --json /tmp/lg.json

Subcommands (rows; default all): loop (row 1), get (2), list (3), bytes (4: needs loop, run with it), chat (5),
find (6). Options: --reps / BENCH_REPS (5); --steps (1000) super-steps of the loop; --thread-checkpoints (5000) of
rows 2, 3 and the big thread of row 6; --turns (200) of the chat; --threads (10000) of row 6's big store;
--no-strace; --profile/--no-profile (on: a py-spy profile of the objstore side of each missed time/CPU target, hot
functions printed, the speedscope file kept beside the JSON or in $BENCH_DIR); --json PATH ('-' = stdout) writes
every figure; --keep keeps the scratch directory. Scratch from tempfile.mkdtemp(dir=$BENCH_DIR).

Every measurement is a fresh child process (benchmarks/lg_work.py OP ARGS): the child imports LangGraph, both
savers and objstore first and measures only after that; CPU is the child's time.process_time() (user+sys, every
thread). OBJSTORE_FSYNC is removed from the children's environment, so objstore runs with its default (fsync
full); SqliteSaver's connection is WAL (SqliteSaver.setup sets it and nothing else) with synchronous=FULL set
explicitly (read back and printed); graphs run with durability="sync". Peers are interleaved, order reversed on
alternate reps; per-rep ratios, min/median/max; verdicts on the median.

Rows
----
1. loop: lg_work.loop_graph (a -> b -> a ..., one task per super-step, 1 KB fresh text payload per step),
   --steps super-steps (recursion_limit 2 x steps), a fresh directory per saver per rep; sync (invoke) and async
   (ainvoke; AsyncObjstoreSaver vs AsyncSqliteSaver). steps/s = steps / wall of the invoke; CPU per super-step =
   process CPU during the invoke / steps. fsync+fdatasync per super-step: ``strace -f -c -e trace=fsync,fdatasync``
   of a child running --steps minus one running 10 steps (store creation excluded), / (steps - 10).
4. bytes: the rep-0 stores of row 1. objstore: every file of the store before and after ``objstore --store S gc``
   (a fresh process: objstore.lifecycle.gc.gc, seal + repack). SQLite: ``PRAGMA wal_checkpoint(TRUNCATE)``, then
   the database + -wal + -shm files.
2. get: a thread of --thread-checkpoints checkpoints (the loop graph, built once per saver with fsync off /
   synchronous=OFF); a fresh process per measurement: open the saver + the first get_tuple (latest; by the id of
   the 11th-oldest checkpoint), CPU after imports (open included; open and get printed apart).
3. list: the same threads; a fresh process: open + ``list(saver.list(thread))`` (all) and ``limit=10``; wall.
5. chat: lg_work.chat_graph, --turns super-steps each appending one message (turn 1 with a 50 KB base64 image),
   durable; bytes as in row 4 (objstore before and after gc). Bound: 2 x (the distinct messages' serialized bytes,
   serde.dumps_typed, the image inside message 1) + 1 KB x checkpoints.
6. find: objstore stores of 10 and --threads threads of 10 checkpoints (the loop graph, 8 steps per thread), one
   thread of 10 checkpoints, and row 2's thread of --thread-checkpoints. A fresh process: objstore.open_store +
   find_run(thread_id, checkpoint_ns='') + find_record(run, checkpoint_id=<the thread's 2nd-oldest checkpoint>).
   Bytes read = /proc/self/io rchar delta (every read syscall; the reads of /proc itself subtracted exactly) plus
   the resident bytes of the process's mmaps of store files (/proc/self/smaps Rss: segment indexes are mmapped and
   their page touches are not read syscalls; Rss includes the kernel's fault-around, up to 64 KiB mapped per touched
   page, so it is an upper bound; the minor-fault count, a lower bound of touches, is printed beside it (it also
   counts the process's own heap faults)); read_bytes (from the device) printed too; objects decoded =
   codec.STATS['objects_decoded'] (engine entries decoded and blocks read printed too).

Targets (issue 18): 1: steps/s >= 1.0x (sync and async), fsync+fdatasync per step <= SQLite's, CPU per step <=
SQLite's. 2: CPU <= 3x SQLite's and <= 5 ms. 3: <= 1.0x. 4: after gc <= 1.0x SQLite's db. 5: <= 0.1x SQLite's and
<= the bound. 6: big / small <= 2x (bytes read and objects decoded).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_verify import PY, child_env, code_fingerprint, env, finish, mkscratch, mmm, objstore_cmd, progress, run_child, say  # noqa: E402
from common import dir_bytes  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(BENCH, "lg_work.py")
ROWS = ["loop", "bytes", "get", "list", "chat", "find"]
PEERS = {"sync": ("objstore", "sqlite"), "async": ("objstore", "sqlite")}
NAMES = {("sync", "objstore"): "ObjstoreSaver", ("sync", "sqlite"): "SqliteSaver",
         ("async", "objstore"): "AsyncObjstoreSaver", ("async", "sqlite"): "AsyncSqliteSaver"}
OUT: dict = {"rows": {}, "targets": []}


class ChildFailed(Exception):
    pass


def child(op, args, *, timeout=1800, wrap=(), env_=None):
    res = run_child([*wrap, PY, WORK, op, json.dumps(args)], timeout=timeout, env_=env_)
    if res.killed or res.rc != 0:
        raise ChildFailed(f"{op} {args}: {res.killed or res.rc}\n{(res.err or res.out)[-3000:]}")
    return json.loads(res.out.strip().splitlines()[-1]), res


def target(row, label, shown, ok, figures=None):
    OUT["targets"].append({"row": row, "target": label, "figure": shown, "met": bool(ok), **({"figures": figures} if figures else {})})


def fmt_mmm(xs, f="{:.3f}"):
    lo, md, hi = mmm(xs)
    return f"{f.format(lo)} / {f.format(md)} / {f.format(hi)}"


def sqlite_bytes(d):
    db = os.path.join(d, "checkpoints.sqlite")
    conn = sqlite3.connect(db)
    busy, log_frames, ckpt = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    conn.close()
    files = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.startswith("checkpoints.sqlite")}
    return sum(files.values()), files, (busy, log_frames, ckpt)


def objstore_gc(d, timeout):
    path = os.path.join(d, "store")
    before = dir_bytes(path)
    res = run_child(objstore_cmd(path, "gc"), timeout=timeout)
    if res.rc != 0 or res.killed:
        raise ChildFailed(f"gc: {res.killed or res.rc} {res.err[-2000:]}")
    return before, dir_bytes(path), res


# -- profiles -------------------------------------------------------------------------------------------------
def pyspy():
    p = os.path.join(os.path.dirname(PY), "py-spy")
    return p if os.path.exists(p) else shutil.which("py-spy")


def profile(a, scratch, title, op, args, gil=False):
    """One py-spy'd child (op, args): the speedscope file kept, the hottest functions (self and inclusive) printed
    from a raw (collapsed stacks) record of a second identical run; with ``gil``, a third run sampled only while
    a thread holds the GIL (py-spy --gil: where the Python CPU goes, fsync and lock waits left out)."""
    out = _profile(a, scratch, title, op, args, False)
    if gil and out is not None:
        out["gil"] = _profile(a, scratch, title + " GIL-only", op, args, True)
    return out


def _profile(a, scratch, title, op, args, gil):
    spy = pyspy()
    if not a.profile or spy is None:
        say(f"  (no profile: {'--no-profile' if not a.profile else 'py-spy not installed'})")
        return None
    keep = a.profile_dir or scratch
    os.makedirs(keep, exist_ok=True)
    tag = title.replace(" ", "_").replace("/", "-")
    speed = os.path.join(keep, f"prof-{tag}.speedscope.json")
    raw = os.path.join(scratch, f"prof-{tag}.raw")
    out = {}
    for fmt, path in (("raw", raw),) if gil else (("speedscope", speed), ("raw", raw)):
        d = os.path.join(scratch, f"prof-{tag}-{fmt}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        args2 = {**args, "dir": d} if "dir" in args and args.get("fresh_dir", True) else args
        cmd = [spy, "record", "-r", "250", "--nolineno", *(["--gil"] if gil else []), "-o", path, "--format", fmt, "--", PY, WORK, op, json.dumps(args2)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env_now(), timeout=3600)
        if p.returncode != 0:
            say(f"  (py-spy failed: {p.stderr.strip()[-500:]})")
            return None
    selfc: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = 0
    with open(raw) as f:
        for ln in f:
            stack, _, n = ln.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(n)
            frames = stack.split(";")
            # only the measured operation: the main thread's stacks under lg_work's op_* (the imports before it are
            # not measured), and every other thread's (LangGraph's sync loop puts checkpoints from an executor
            # thread; the async savers' calls run in asyncio.to_thread workers; aiosqlite has its own thread)
            at = next((i for i, fr in enumerate(frames) if fr.startswith(f"op_{op} ")), None)
            if at is not None:
                frames = frames[at:]
            elif not frames[0].split(" ")[0].endswith("_bootstrap") or any(fr.startswith("_find_and_load ") for fr in frames):
                continue
            total += n
            for fr in set(frames):
                incl[fr] += n
            selfc[frames[-1]] += n
    def short(fr):
        return fr.replace(os.path.dirname(BENCH) + "/", "").replace(os.path.dirname(os.path.dirname(PY)) + "/lib/python3.11/site-packages/", "")
    where = "raw only" if gil else f"speedscope file {speed}, whole process"
    say(f"  profile of {title} (py-spy{' --gil' if gil else ''}, {total} samples at 250 Hz under lg_work.op_{op} and in other threads, "
        f"imports excluded; {where}):")
    say("    self time:")
    for fr, n in selfc.most_common(12):
        say(f"      {100 * n / total:5.1f}%  {short(fr)}")
    say("    inclusive time (objstore and saver frames):")
    shown = 0
    for fr, n in incl.most_common():
        if ("objstore" in fr or "sqlite" in fr) and "lg_work" not in fr:
            say(f"      {100 * n / total:5.1f}%  {short(fr)}")
            shown += 1
            if shown >= 18:
                break
    out = {"speedscope": speed, "samples": total,
           "self": [[short(fr), round(100 * n / total, 1)] for fr, n in selfc.most_common(12)],
           "inclusive": [[short(fr), round(100 * n / total, 1)] for fr, n in incl.most_common() if "objstore" in fr][:18]}
    return out


_ENV: dict = {}


def child_env_now():
    return _ENV


# -- row 1 (and row 4's stores) ----------------------------------------------------------------------------------
def row_loop(a, scratch, kept):
    n = a.steps
    for mode in ("sync", "async"):
        say(f"\n[1] {mode} loop: {n:,} super-steps, 1 task per step, 1 KB state, durability='sync', {a.reps} interleaved reps"
            f" ({NAMES[(mode, 'objstore')]} vs {NAMES[(mode, 'sqlite')]})")
        say(f"  {'rep':<4} {'objstore steps/s':>17} {'sqlite steps/s':>15} {'ratio':>7}   {'obj CPU/step':>13} {'sql CPU/step':>13} {'ratio':>7}")
        rate_r, cpu_r, figs = [], [], []
        facts = {}
        for r in range(a.reps):
            got = {}
            for kind in PEERS[mode][:: (1 if r % 2 == 0 else -1)]:
                d = os.path.join(scratch, f"loop-{mode}-{kind}-{r}")
                os.makedirs(d)
                res, _ = child("loop", {"saver": kind, "dir": d, "steps": n, "aio": mode == "async"})
                got[kind] = res
                facts[kind] = {k: v for k, v in res.items() if k in ("fsync", "journal_mode", "synchronous")}
                if r == 0:
                    kept[(mode, kind)] = d
                else:
                    shutil.rmtree(d, ignore_errors=True)
            ro = n / got["objstore"]["wall"]
            rs = n / got["sqlite"]["wall"]
            co = got["objstore"]["cpu"] / n
            cs = got["sqlite"]["cpu"] / n
            rate_r.append(ro / rs)
            cpu_r.append(co / cs)
            figs.append({"objstore_steps_s": ro, "sqlite_steps_s": rs, "objstore_cpu_ms_step": co * 1e3, "sqlite_cpu_ms_step": cs * 1e3})
            say(f"  {r:<4} {ro:>17,.0f} {rs:>15,.0f} {ro / rs:>6.2f}x   {co * 1e3:>10.3f} ms {cs * 1e3:>10.3f} ms {co / cs:>6.2f}x")
        say(f"  settings as read back in the children: {facts}")
        say(f"  steps/s ratio min/median/max {fmt_mmm(rate_r, '{:.2f}x')}; CPU per step ratio {fmt_mmm(cpu_r, '{:.2f}x')}")
        md_rate, md_cpu = mmm(rate_r)[1], mmm(cpu_r)[1]
        row = {"reps": figs, "steps_s_ratio": mmm(rate_r), "cpu_ratio": mmm(cpu_r), "settings": facts}
        target("1", f"{mode} loop steps/s >= 1.0x {NAMES[(mode, 'sqlite')]}", fmt_mmm(rate_r, "{:.2f}x"), md_rate >= 1.0)
        target("1", f"{mode} loop CPU per super-step <= {NAMES[(mode, 'sqlite')]}'s", fmt_mmm(cpu_r, "{:.2f}x"), md_cpu <= 1.0)
        # fsync / fdatasync per super-step
        if a.strace and shutil.which("strace"):
            calls = {}
            for kind in PEERS[mode]:
                cnt = {}
                for steps in (n, 10):
                    d = os.path.join(scratch, f"strace-{mode}-{kind}-{steps}")
                    os.makedirs(d)
                    sfile = os.path.join(scratch, f"strace-{mode}-{kind}-{steps}.txt")
                    child("loop", {"saver": kind, "dir": d, "steps": steps, "aio": mode == "async"},
                          wrap=("strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", sfile))
                    c = {"fsync": 0, "fdatasync": 0}
                    with open(sfile) as f:
                        for ln in f:
                            parts = ln.split()
                            if parts and parts[-1] in c:
                                c[parts[-1]] = int(parts[3])
                    cnt[steps] = c
                    shutil.rmtree(d, ignore_errors=True)
                per = {k: (cnt[n][k] - cnt[10][k]) / (n - 10) for k in ("fsync", "fdatasync")}
                calls[kind] = {"per_step": per, "counts": cnt}
                say(f"  strace {NAMES[(mode, kind)]:<20}: {n} steps fsync {cnt[n]['fsync']} fdatasync {cnt[n]['fdatasync']}; 10 steps "
                    f"fsync {cnt[10]['fsync']} fdatasync {cnt[10]['fdatasync']}; per super-step fsync {per['fsync']:.3f} + "
                    f"fdatasync {per['fdatasync']:.3f} = {per['fsync'] + per['fdatasync']:.3f}")
            po = sum(calls["objstore"]["per_step"].values())
            ps = sum(calls["sqlite"]["per_step"].values())
            row["syncs_per_step"] = calls
            target("1", f"{mode} loop fsync+fdatasync per step <= {NAMES[(mode, 'sqlite')]}'s", f"{po:.3f} vs {ps:.3f}", po <= ps + 1e-9)
        else:
            say("  strace: skipped (" + ("--no-strace" if not a.strace else "strace not installed") + ")")
        if md_rate < 1.0 or md_cpu > 1.0:
            row["profile"] = profile(a, scratch, f"{mode} loop {NAMES[(mode, 'objstore')]}", "loop",
                                     {"saver": "objstore", "dir": "x", "steps": n, "aio": mode == "async"}, gil=True)
            row["profile_peer_gil"] = _profile(a, scratch, f"{mode} loop {NAMES[(mode, 'sqlite')]} GIL-only", "loop",
                                               {"saver": "sqlite", "dir": "x", "steps": n, "aio": mode == "async"}, True)
        OUT["rows"][f"1-{mode}"] = row


def row_bytes(a, scratch, kept):
    say(f"\n[4] bytes on disk after the row-1 runs ({a.steps:,} super-steps; rep 0's stores)")
    for mode in ("sync", "async"):
        if (mode, "objstore") not in kept:
            say("  (row 1 did not run: no stores)")
            return
        before, after, res = objstore_gc(kept[(mode, "objstore")], a.timeout)
        sq, files, ck = sqlite_bytes(kept[(mode, "sqlite")])
        say(f"  {mode}: objstore {before:,} B before gc, {after:,} B after `objstore gc` ({res.wall:.1f} s); SQLite {sq:,} B after "
            f"wal_checkpoint(TRUNCATE) {ck} {files}; after gc / SQLite = {after / sq:.3f}x (before gc {before / sq:.3f}x)")
        OUT["rows"][f"4-{mode}"] = {"objstore_before_gc": before, "objstore_after_gc": after, "sqlite": sq, "sqlite_files": files}
        target("4", f"bytes after gc ({mode} run) <= 1.0x SQLite's db", f"{after / sq:.3f}x ({after:,} / {sq:,} B)", after <= sq)


# -- rows 2 and 3 -------------------------------------------------------------------------------------------------
def build_threads(a, scratch, built):
    if "thread" in built:
        return built["thread"]
    out = {}
    steps = a.thread_checkpoints - 2  # a run of S steps writes S+2 checkpoints (the empty start and the input one too)
    for kind in ("objstore", "sqlite"):
        d = os.path.join(scratch, f"thread-{kind}")
        os.makedirs(d)
        t0 = time.perf_counter()
        res, _ = child("build_thread", {"saver": kind, "dir": d, "steps": steps})
        out[kind] = {"dir": d, **res}
        child("get", {"saver": kind, "dir": d})  # one open after the build, not measured (a first open may recover the tail)
        progress(f"built the {res['checkpoints']:,}-checkpoint thread on {kind} in {time.perf_counter() - t0:.0f} s "
                 f"({dir_bytes(d):,} B)")
    built["thread"] = out
    return out


def row_get(a, scratch, built):
    th = build_threads(a, scratch, built)
    say(f"\n[2] first get_tuple on a {th['objstore']['checkpoints']:,}-checkpoint thread, fresh process, CPU after imports "
        f"(open included), {a.reps} interleaved reps")
    for which in ("latest", "old"):
        figs = {"objstore": [], "sqlite": []}
        parts = {"objstore": [], "sqlite": []}
        ratios = []
        for r in range(a.reps):
            for kind in ("objstore", "sqlite")[:: (1 if r % 2 == 0 else -1)]:
                args = {"saver": kind, "dir": th[kind]["dir"]}
                if which == "old":
                    args["checkpoint_id"] = th[kind]["old"]
                res, _ = child("get", args)
                figs[kind].append(res["cpu"])
                parts[kind].append((res["open_cpu"], res["get_cpu"]))
            ratios.append(figs["objstore"][-1] / figs["sqlite"][-1])
        mo = mmm(figs["objstore"])[1]
        ms = mmm(figs["sqlite"])[1]
        say(f"  {which:<7} objstore CPU {fmt_mmm([x * 1e3 for x in figs['objstore']], '{:.2f} ms')} (open/get median "
            f"{mmm([p[0] for p in parts['objstore']])[1] * 1e3:.2f}/{mmm([p[1] for p in parts['objstore']])[1] * 1e3:.2f} ms); "
            f"SQLite {fmt_mmm([x * 1e3 for x in figs['sqlite']], '{:.2f} ms')}; ratio {fmt_mmm(ratios, '{:.2f}x')}")
        OUT["rows"][f"2-{which}"] = {"objstore_cpu_s": figs["objstore"], "sqlite_cpu_s": figs["sqlite"], "ratio": mmm(ratios),
                                     "objstore_open_get_s": parts["objstore"], "sqlite_open_get_s": parts["sqlite"]}
        md = mmm(ratios)[1]
        target("2", f"first get_tuple ({which}) CPU <= 3x SQLite's", fmt_mmm(ratios, "{:.2f}x"), md <= 3.0)
        target("2", f"first get_tuple ({which}) CPU <= 5 ms", f"{mo * 1e3:.2f} ms (SQLite {ms * 1e3:.2f} ms)", mo <= 0.005)
        if md > 3.0 or mo > 0.005:
            args = {"saver": "objstore", "dir": th["objstore"]["dir"], "fresh_dir": False}
            if which == "old":
                args["checkpoint_id"] = th["objstore"]["old"]
            OUT["rows"][f"2-{which}"]["profile"] = profile_repeat(a, scratch, f"get_tuple {which}", "get", args)


def profile_repeat(a, scratch, title, op, args):
    """A few-ms operation: py-spy would catch a handful of samples, so the child runs it 200 times, each on a
    freshly opened saver and store (the saver's caches cold; the process's imports warm)."""
    return profile(a, scratch, title, "repeat", {"op": op, "args": args, "times": 200, "fresh_dir": False})


def row_list(a, scratch, built):
    th = build_threads(a, scratch, built)
    say(f"\n[3] list on the {th['objstore']['checkpoints']:,}-checkpoint thread, fresh process, wall of open + list "
        f"(CPU printed too), {a.reps} interleaved reps")
    for limit in (None, 10):
        wall = {"objstore": [], "sqlite": []}
        cpu = {"objstore": [], "sqlite": []}
        ratios = []
        for r in range(a.reps):
            for kind in ("objstore", "sqlite")[:: (1 if r % 2 == 0 else -1)]:
                res, _ = child("list", {"saver": kind, "dir": th[kind]["dir"], "limit": limit})
                wall[kind].append(res["wall"])
                cpu[kind].append(res["cpu"])
            ratios.append(wall["objstore"][-1] / wall["sqlite"][-1])
        lab = "all" if limit is None else f"limit={limit}"
        say(f"  list({lab:<8}) objstore {fmt_mmm([x * 1e3 for x in wall['objstore']], '{:.1f} ms')} (CPU median "
            f"{mmm(cpu['objstore'])[1] * 1e3:.1f} ms); SQLite {fmt_mmm([x * 1e3 for x in wall['sqlite']], '{:.1f} ms')} "
            f"(CPU {mmm(cpu['sqlite'])[1] * 1e3:.1f} ms); ratio {fmt_mmm(ratios, '{:.2f}x')}")
        OUT["rows"][f"3-{lab}"] = {"objstore_wall_s": wall["objstore"], "sqlite_wall_s": wall["sqlite"], "ratio": mmm(ratios),
                                   "objstore_cpu_s": cpu["objstore"], "sqlite_cpu_s": cpu["sqlite"]}
        md = mmm(ratios)[1]
        target("3", f"list({lab}) <= 1.0x SqliteSaver", fmt_mmm(ratios, "{:.2f}x"), md <= 1.0)
        if md > 1.0:
            args = {"saver": "objstore", "dir": th["objstore"]["dir"], "limit": limit, "fresh_dir": False}
            OUT["rows"][f"3-{lab}"]["profile"] = (profile(a, scratch, f"list {lab}", "list", args) if limit is None
                                                  else profile_repeat(a, scratch, f"list {lab}", "list", args))


# -- row 5 ------------------------------------------------------------------------------------------------------
def row_chat(a, scratch):
    say(f"\n[5] the {a.turns}-turn chat fixture (one new message per turn into a messages channel holding the whole list, "
        f"a 50 KB base64 image in turn 1), durable; bytes on disk; {a.chat_reps} rep(s)")
    ratios, ratios_gc, figs = [], [], []
    bound_ok = []
    for r in range(a.chat_reps):
        got = {}
        for kind in ("objstore", "sqlite")[:: (1 if r % 2 == 0 else -1)]:
            d = os.path.join(scratch, f"chat-{kind}-{r}")
            os.makedirs(d)
            res, _ = child("chat", {"saver": kind, "dir": d, "turns": a.turns})
            got[kind] = (d, res)
        d, res = got["objstore"]
        before, after, _ = objstore_gc(d, a.timeout)
        sq, files, _ = sqlite_bytes(got["sqlite"][0])
        cps = res["checkpoints"]
        bound = 2 * res["distinct_message_bytes"] + 1024 * cps
        ratios.append(before / sq)
        ratios_gc.append(after / sq)
        bound_ok.append((before <= bound, after <= bound))
        figs.append({"objstore": before, "objstore_after_gc": after, "sqlite": sq, "checkpoints": cps, "bound": bound,
                     "distinct_message_bytes": res["distinct_message_bytes"], "text_bytes": res["text_bytes"],
                     "image_bytes": res["image_bytes"], "objstore_wall": res["wall"], "sqlite_wall": got["sqlite"][1]["wall"]})
        say(f"  rep {r}: {cps} checkpoints; distinct messages {res['distinct_message_bytes']:,} B serialized (text "
            f"{res['text_bytes']:,} B + image {res['image_bytes']:,} B); bound 2x that + 1 KB x {cps} = {bound:,} B")
        if r == 0 and "part_ids" in res:
            say(f"         objstore records name {res['part_ids']:,} part ids ({32 * res['part_ids']:,} B of ids in record bodies; "
                f"FORMAT.md: each entry's refs row lists them again), {res['checkpoint_field_bytes']:,} B of serialized "
                f"checkpoints (without channel values), {res['metadata_bytes']:,} B of metadata")
        say(f"         objstore {before:,} B as written, {after:,} B after gc; SQLite {sq:,} B {files}; "
            f"ratio {before / sq:.4f}x (after gc {after / sq:.4f}x); objstore / bound {before / bound:.2f} (after gc {after / bound:.2f})")
        for kind in ("objstore", "sqlite"):
            shutil.rmtree(got[kind][0], ignore_errors=True)
    OUT["rows"]["5"] = {"reps": figs, "ratio": mmm(ratios), "ratio_after_gc": mmm(ratios_gc)}
    target("5", "chat bytes <= 0.1x SqliteSaver's (as written)", fmt_mmm(ratios, "{:.4f}x"), mmm(ratios)[1] <= 0.1)
    target("5", "chat bytes <= 0.1x SqliteSaver's (after gc)", fmt_mmm(ratios_gc, "{:.4f}x"), mmm(ratios_gc)[1] <= 0.1)
    f0 = figs[0]
    target("5", "chat bytes <= 2x distinct + 1 KB/checkpoint (as written)", f"{f0['objstore']:,} <= {f0['bound']:,} B",
           all(b for b, _ in bound_ok))
    target("5", "chat bytes <= 2x distinct + 1 KB/checkpoint (after gc)", f"{f0['objstore_after_gc']:,} <= {f0['bound']:,} B",
           all(b for _, b in bound_ok))


# -- row 6 ------------------------------------------------------------------------------------------------------
def row_find(a, scratch, built):
    th = build_threads(a, scratch, built)
    stores = {}
    for name, threads in (("10 threads", 10), (f"{a.threads} threads", a.threads), ("1 thread of 10", 1)):
        d = os.path.join(scratch, f"find-{threads}")
        os.makedirs(d)
        t0 = time.perf_counter()
        res, _ = child("build_threads", {"saver": "objstore", "dir": d, "steps": 8, "threads": threads}, timeout=3 * 3600)
        stores[name] = {"dir": d, "thread": res["last"]["thread"], "checkpoint_id": res["last"]["old"],
                        "checkpoints": res["last"]["checkpoints"], "bytes": dir_bytes(d)}
        try:
            child("find", {"dir": d, "thread": stores[name]["thread"], "checkpoint_id": stores[name]["checkpoint_id"]})  # warm-up open
        except ChildFailed as ex:
            ver = run_child(objstore_cmd(os.path.join(d, "store"), "verify"), timeout=a.timeout)
            said = (ver.out + ver.err).strip().splitlines()
            say(f"  !! the {name} store cannot be read back: {str(ex).strip().splitlines()[-1][:300]}")
            joined = "\n       ".join(ln[:300] for ln in said[-6:])
            say(f"     objstore verify on it (exit {ver.rc}):\n       {joined}")
            stores[name]["damaged"] = said[-6:]
        progress(f"built {name} ({res['last']['checkpoints']} checkpoints each) in {time.perf_counter() - t0:.0f} s, "
                 f"{stores[name]['bytes']:,} B")
    big_thread = th["objstore"]
    # the thread's second-oldest checkpoint, like the small stores'
    stores[f"1 thread of {big_thread['checkpoints']}"] = {"dir": big_thread["dir"], "thread": "t1",
                                                          "checkpoint_id": big_thread["old2"],
                                                          "checkpoints": big_thread["checkpoints"], "bytes": dir_bytes(big_thread["dir"])}
    pairs = [("10 threads", f"{a.threads} threads"), ("1 thread of 10", f"1 thread of {big_thread['checkpoints']}")]
    say(f"\n[6] find_run + find_record from a fresh process (open included), {a.reps} interleaved reps; bytes = rchar "
        f"(read syscalls, /proc reads subtracted) + resident mmapped store bytes (smaps Rss)")
    for small, big in pairs:
        if stores[small].get("damaged") or stores[big].get("damaged"):
            bad = small if stores[small].get("damaged") else big
            target("6", f"find: {big} vs {small}", f"not measured: the {bad} store fails verify", False)
            OUT["rows"][f"6-{small} vs {big}"] = {"damaged": stores[bad]["damaged"]}
            continue
        res = {small: [], big: []}
        for r in range(a.reps):
            for name in (small, big)[:: (1 if r % 2 == 0 else -1)]:
                s = stores[name]
                got, _ = child("find", {"dir": s["dir"], "thread": s["thread"], "checkpoint_id": s["checkpoint_id"]})
                res[name].append(got)
        def tot(g):
            return g["total"]["rchar"] + g["total"]["mmap_rss"]
        br = [tot(b) / tot(s) for s, b in zip(res[small], res[big], strict=True)]
        dr = [max(1, b["total"]["objects_decoded"]) / max(1, s["total"]["objects_decoded"]) for s, b in zip(res[small], res[big], strict=True)]
        for name in (small, big):
            g = res[name][0]
            say(f"  {name:<24} ({stores[name]['bytes']:>13,} B store): " + "; ".join(
                f"{step} rchar {g[step]['rchar']:,} B, mmap rss {g['incremental_mmap'][step]:,} B ({g[step]['minflt']} minor faults), read_bytes "
                f"{g[step]['read_bytes']:,}, decoded {g[step]['objects_decoded']} obj / {g[step]['entries_decoded']} entries / "
                f"{g[step]['blocks_read']} blocks" for step in ("open", "find_run", "find_record")))
            say(f"  {'':<24} total bytes {fmt_mmm([tot(x) for x in res[name]], '{:,.0f}')} B; objects decoded "
                f"{fmt_mmm([x['total']['objects_decoded'] for x in res[name]], '{:.0f}')}")
        say(f"  {big} / {small}: bytes read {fmt_mmm(br, '{:.2f}x')}; objects decoded {fmt_mmm(dr, '{:.2f}x')}")
        OUT["rows"][f"6-{small} vs {big}"] = {"small": res[small], "big": res[big], "bytes_ratio": mmm(br), "decoded_ratio": mmm(dr)}
        target("6", f"find: {big} vs {small}, bytes read <= 2x", fmt_mmm(br, "{:.2f}x"), mmm(br)[1] <= 2.0)
        target("6", f"find: {big} vs {small}, objects decoded <= 2x", fmt_mmm(dr, "{:.2f}x"), mmm(dr)[1] <= 2.0)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("rows", nargs="*", default=[], help="rows to run: " + ", ".join(ROWS))
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--chat-reps", type=int, default=None)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--thread-checkpoints", type=int, default=5000)
    p.add_argument("--turns", type=int, default=200)
    p.add_argument("--threads", type=int, default=10000)
    p.add_argument("--strace", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--profile-dir", default=None)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", default=None)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args(argv)
    a.chat_reps = a.chat_reps or a.reps
    bad = [r for r in a.rows if r not in ROWS]
    if bad:
        p.error(f"unknown row(s) {bad}: choose from {ROWS}")
    return a


def main(argv):
    a = parse_args(argv)
    rows = a.rows or ROWS
    t_all = time.perf_counter()
    from importlib.metadata import version

    import langgraph.version as lgv  # noqa: F401  (the versions measured)
    vers = {p: version(p) for p in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "aiosqlite")}
    say(f"bench_langgraph: rows {rows}, {a.reps} reps; python {sys.version.split()[0]}; sqlite {sqlite3.sqlite_version}; {vers}; "
        f"{os.cpu_count()} CPUs; scratch in {os.environ.get('BENCH_DIR') or '/tmp'}")
    code0 = code_fingerprint()
    say(f"  code: {code0}")
    scratch = mkscratch("bench-lg-")
    e = child_env(scratch)
    e.pop("OBJSTORE_FSYNC", None)
    _ENV.update(e)
    OUT.update({"argv": argv, "versions": vers, "code": code0, "sqlite": sqlite3.sqlite_version})
    kept: dict = {}
    built: dict = {}
    try:
        for row, fn in (("loop", lambda: row_loop(a, scratch, kept)), ("bytes", lambda: row_bytes(a, scratch, kept)),
                        ("get", lambda: row_get(a, scratch, built)), ("list", lambda: row_list(a, scratch, built)),
                        ("chat", lambda: row_chat(a, scratch)), ("find", lambda: row_find(a, scratch, built))):
            if row in rows:
                try:
                    fn()
                except Exception as ex:  # one broken row must not hide the others' figures
                    import traceback

                    say(f"  !! row {row} failed: {ex!r}")
                    traceback.print_exc()
                    OUT["rows"][f"{row}-failed"] = repr(ex)
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            say(f"  scratch kept: {scratch}")
    finish([(t["target"], t["figure"], t["met"]) for t in OUT["targets"]], code0, t_all,
           "Targets (min / median / max over repetitions; verdict on the median):", 40)
    if a.json:
        doc = json.dumps(OUT, indent=1, default=str)
        if a.json == "-":
            print(doc)
        else:
            with open(a.json, "w") as f:
                f.write(doc)


if __name__ == "__main__":
    main(sys.argv[1:])
