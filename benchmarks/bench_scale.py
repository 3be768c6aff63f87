"""Scaling: 'log -n 10' on a big store vs a small one, and peak memory of verify / rebuild / log as the store grows.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_scale.py                        # defaults below (~20 min on 2 cores)
    .venv/bin/python benchmarks/bench_scale.py --scale 0.1 --reps 3   # quick check (10x smaller)
    .venv/bin/python benchmarks/bench_scale.py --parts log            # only one part (log, memory)
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_scale.py

Options (each also read from the environment): --reps / BENCH_REPS (5); --scale / BENCH_SCALE (1.0) multiplies the
number of runs / records of every store below (not the records per run of the many-run stores); --runs (1000) runs
x --per-run (1000) records in store A; --commit-a (100) records per commit in A; --records-b (1000) records of store B;
--big (1000000) / --small (100000) records of the one-run stores a and a'; --steps-one (500) steps of the one-run
stores; --steps-many (50) steps per run of the many-run stores; --small-runs (100) runs of b'; --timeout (1800)
seconds and --rss-cap (6144) MiB per child process (the child is killed past either, and the figure reported as
such); --parts (log,memory); --seed (1). All stores are built through the public API with fsync="off" (building is
not what is measured). Scratch directories come from tempfile.mkdtemp(dir=$BENCH_DIR) and are removed at the end.

What it measures
----------------
Records are ~300 B canonical attempt records (usage and context maps, a prompt ref to one of 50 shared prompt blobs),
every fifth one failed.

1. log -n 10 scaling. Store A: 1 000 runs x 1 000 records = 1 000 000 records over 10 000 commits, each commit 100
   records of one run, the runs visited round-robin (so every run's records are spread over the whole log), at most
   50 steps per run. Store B: one run of 1 000 records (10 commits of 100). Timed: process wall time of
   ``python -m objstore --store X log RUN -n 10`` (RUN: the middle run of A; B's run), after one warm-up run each,
   5 repetitions interleaved with the interpreter baseline ``python -c 'import objstore_cli.main'`` (order rotated).
   Net time = median(log) - median(baseline); ratio = net A / net B (also per repetition, min/median/max). For
   context, the same command timed inside a child after its imports (click's ``main`` called in-process).
2. memory. Peak RSS of fresh processes ``verify --no-state`` (before any state cache exists), ``rebuild``,
   ``log RUN -n 10`` and ``verify`` (with its state check, after rebuild), each measured by /usr/bin/time (%M:
   the command's own peak RSS; objstore starts no worker processes, which the watchdog also checks, so this is the
   sum over the process and its workers), on (a) one run of 1 000 000 records over 500 steps, (b) 1 000 runs x 1 000
   records over <= 50 steps (store A), and the same shapes at 100 000 records: (a') one run of 100 000 records,
   (b') 100 runs x 1 000 records. Growth = peak(1 000 000) / peak(100 000) - 1 per command and shape. Also bytes on
   disk of each store (log/ and the whole directory, before the state cache; state.db after rebuild) divided by the
   canonical bytes of all its objects.

Targets (from the issue):

* log -n 10 on A (1 000 000 records, 1 000 runs) <= 1.5x the time on B (1 000 records): median net times
* peak RSS of verify, rebuild and log -n 10 <= 256 MiB on each store shape, and <= 20 % growth from 100 000 to
  1 000 000 records
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_verify  # noqa: E402
from bench_verify import (  # noqa: E402
    BASELINE,
    PY,
    TIME,
    build_store,
    canonical_bytes,
    check_ok,
    child_env,
    code_fingerprint,
    env,
    finish,
    mib,
    mkscratch,
    mmm,
    objstore_cmd,
    profile_child,
    progress,
    run_child,
    say,
    verdict,
)
from common import dir_bytes  # noqa: E402

IN_PROCESS = r"""
import contextlib, io, sys, time
import objstore_cli.main as m
buf = io.StringIO()
t0 = time.perf_counter()
with contextlib.redirect_stdout(buf):
    try:
        m.cli.main(args=sys.argv[1:], prog_name="objstore", standalone_mode=False)
    except SystemExit:
        pass
t1 = time.perf_counter()
lines = buf.getvalue().count("\n")
print(f"{t1 - t0:.6f} {lines}")
"""

MEM_LIMIT = 256 * 2**20
GROWTH_LIMIT = 0.20


def build(label, path, **kw):
    progress(f"building {label} ...")
    b = build_store(path, label=label, **kw)
    progress(f"built {label}: {b['records']:,} records in {len(b['runs']):,} run(s), {b['commits']:,} commits, "
             f"{b['seconds']:.1f} s ({b['rate']:,.0f} rec/s, fsync=off)")
    return b


def store_sizes(path):
    nobj, canon = canonical_bytes(path)
    logb = dir_bytes(os.path.join(path, "log"))
    total = dir_bytes(path)
    return {"objects": nobj, "canonical": canon, "log": logb, "total": total}


# -- part 1: log -n 10 ----------------------------------------------------------------------------------------
def part_log(a, scratch, stores, targets):
    say(f"\n[1] log -n 10: store A ({stores['A']['records']:,} records, {len(stores['A']['runs']):,} runs, "
        f"{stores['A']['commits']:,} commits) vs store B ({stores['B']['records']:,} records, one run)")
    ra = stores["A"]["runs"][len(stores["A"]["runs"]) // 2]
    rb = stores["B"]["runs"][0]
    systems = [("baseline import", BASELINE),
               ("log -n 10 on A", objstore_cmd(stores["A"]["path"], "log", ra, "-n", "10")),
               ("log -n 10 on B", objstore_cmd(stores["B"]["path"], "log", rb, "-n", "10"))]
    inproc = [("A", [PY, "-c", IN_PROCESS, "--store", stores["A"]["path"], "log", ra, "-n", "10"]),
              ("B", [PY, "-c", IN_PROCESS, "--store", stores["B"]["path"], "log", rb, "-n", "10"])]
    for name, cmd in systems + inproc:  # warm-up: page cache, bytecode cache
        res = run_child(cmd, timeout=a.timeout, rss_cap=a.rss_cap)
        if not check_ok(res, name):
            return
        if name.startswith("log"):
            lines = res.out.strip().splitlines()
            progress(f"{name}: {len(lines)} lines of output, first: {lines[0] if lines else ''!r}; {res.wall:.3f} s")
    walls = {nm: [] for nm, _ in systems}
    ins = {nm: [] for nm, _ in inproc}
    for r in range(a.reps):
        k = r % len(systems)
        for name, cmd in systems[k:] + systems[:k]:
            res = run_child(cmd, timeout=a.timeout, rss_cap=a.rss_cap)
            if not check_ok(res, name):
                return
            walls[name].append(res.wall)
        for name, cmd in inproc[:: 1 if r % 2 == 0 else -1]:
            res = run_child(cmd, timeout=a.timeout, rss_cap=a.rss_cap)
            if not check_ok(res, "in-process " + name):
                return
            ins[name].append(float(res.out.split()[0]))
        progress(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{nm} {walls[nm][-1]:.3f} s" for nm, _ in systems)
                 + ", in-process " + ", ".join(f"{nm} {ins[nm][-1] * 1000:.1f} ms" for nm, _ in inproc))
    say(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for name, _ in systems:
        lo, md, hi = mmm(walls[name])
        say(f"  {name + ' wall s':<44} {lo:>12.3f} {md:>12.3f} {hi:>12.3f}")
    base = walls["baseline import"]
    net_a = [x - y for x, y in zip(walls["log -n 10 on A"], base, strict=True)]
    net_b = [x - y for x, y in zip(walls["log -n 10 on B"], base, strict=True)]
    for label, xs in (("net A (minus baseline, same rep) s", net_a), ("net B (minus baseline, same rep) s", net_b)):
        lo, md, hi = mmm(xs)
        say(f"  {label:<44} {lo:>12.3f} {md:>12.3f} {hi:>12.3f}")
    mb = statistics.median(base)
    na = statistics.median(walls["log -n 10 on A"]) - mb
    nb = statistics.median(walls["log -n 10 on B"]) - mb
    ratio = na / nb if nb > 0 else float("nan")
    per_rep = [x / y for x, y in zip(net_a, net_b, strict=True) if y > 0]
    lo, md, hi = mmm(per_rep) if per_rep else (float("nan"),) * 3
    skipped = f" ({len(net_a) - len(per_rep)} rep(s) with net B <= 0 left out)" if len(per_rep) < len(net_a) else ""
    say(f"  {'ratio A / B per repetition':<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x{skipped}")
    mins = (min(walls["log -n 10 on A"]) - min(base)) / max(1e-9, min(walls["log -n 10 on B"]) - min(base))
    say(f"  (for context: ratio of the minima, net of the baseline's minimum: {mins:.2f}x)")
    say(f"  ratio of medians: (median A - median baseline) / (median B - median baseline) = "
        f"{na * 1000:.1f} ms / {nb * 1000:.1f} ms = " + (f"{ratio:.2f}x" if nb > 0 else "undefined (net B <= 0: B is "
                                                         "within the baseline's noise)"))
    for name, _ in inproc:
        lo2, md2, hi2 = mmm(ins[name])
        say(f"  {'in-process log -n 10 on ' + name + ' ms':<44} {lo2 * 1000:>12.1f} {md2 * 1000:>12.1f} {hi2 * 1000:>12.1f}")
    ir = [x / y for x, y in zip(ins["A"], ins["B"], strict=True)]
    lo3, md3, hi3 = mmm(ir)
    say(f"  {'in-process ratio A / B':<44} {lo3:>11.2f}x {md3:>11.2f}x {hi3:>11.2f}x")
    how = "ratio of median net times"
    if not nb > 0:  # the process-wall figure is undefined: fall back to the in-process medians
        ratio, how = md3, "in-process median ratio (process-wall net B <= 0)"
    targets.append((f"log -n 10: A <= 1.5x B ({how})", f"{lo:.2f}x / {ratio:.2f}x / {hi:.2f}x", ratio <= 1.5))
    say(f"  target A/B <= 1.5x ({how}): {verdict(ratio <= 1.5)}")
    if not ratio <= 1.5:
        say("  profile of one 'log -n 10' on A:")
        profile_child(["-m", "objstore", "--store", stores["A"]["path"], "log", ra, "-n", "10"], scratch,
                      "objstore log -n 10 on A ", a.timeout)


# -- part 2: memory -------------------------------------------------------------------------------------------
def part_memory(a, scratch, stores, targets):
    shapes = [("a'", "one run"), ("b'", "many runs"), ("a", "one run"), ("b", "many runs")]
    say("\n[2] memory: peak RSS (/usr/bin/time %M) of fresh processes; stores:")
    for key, _ in shapes:
        s = stores[key]
        sz = s["sizes"]
        say(f"  ({key}) {s['records']:,} records, {len(s['runs']):,} run(s), {s['commits']:,} commits: {sz['objects']:,} "
            f"objects, canonical {sz['canonical']:,} B; on disk log/ {sz['log']:,} B = {sz['log'] / sz['canonical']:.3f}x "
            f"canonical, whole store {sz['total']:,} B = {sz['total'] / sz['canonical']:.3f}x")
    cmds = [("verify --no-state", ("verify", "--no-state")), ("rebuild", ("rebuild",)), ("log -n 10", None),
            ("verify (state check)", ("verify",))]
    results: dict = {}
    for key, _ in shapes:
        s = stores[key]
        run = s["runs"][len(s["runs"]) // 2]
        for name, args in cmds:
            args = ("log", run, "-n", "10") if args is None else args
            res = run_child(objstore_cmd(s["path"], *args), timeout=a.timeout, rss_cap=a.rss_cap)
            ok = res.killed is None and res.rc == 0
            results[(key, name)] = res
            extra = ""
            if name == "rebuild" and ok:
                db = os.path.join(s["path"], "state.db")
                st = sum(os.path.getsize(db + x) for x in ("", "-wal", "-shm") if os.path.exists(db + x))
                extra = f"; state.db {st:,} B = {st / s['sizes']['canonical']:.3f}x canonical"
                s["state_db"] = st
            progress(f"({key}) {name}: peak RSS {mib(res.maxrss):.1f} MiB, wall {res.wall:.2f} s, cpu {res.cpu:.2f} s"
                     + ("" if ok else f"  FAILED: {res.killed or f'exit {res.rc}'}") + extra
                     + (f"  ({res.procs} processes seen)" if res.procs > 2 else ""))
            if not ok:
                say("    " + (res.err.strip() or res.out.strip())[-1500:].replace("\n", "\n    "))
                if res.killed:
                    say(f"  profile of '{' '.join(args)}' on the 100 000-record store of the same shape instead:")
                    small = "a'" if key == "a" else "b'"
                    profile_child(["-m", "objstore", "--store", stores[small]["path"], *args], scratch,
                                  f"objstore {' '.join(args)} on ({small}) ", a.timeout)
    say(f"\n  peak RSS, MiB (target <= {MEM_LIMIT / 2**20:.0f} MiB each; growth 100 000 -> 1 000 000 <= "
        f"{GROWTH_LIMIT:.0%}):")
    heads = ("command", "(a)", "(a')", "growth a", "(b)", "(b')", "growth b")
    say(f"  {heads[0]:<24} " + " ".join(f"{h:>9}" for h in heads[1:]))
    for name, _ in cmds:
        row = []
        for big, small in (("a", "a'"), ("b", "b'")):
            rb, rs = results[(big, name)], results[(small, name)]
            fb = mib(rb.maxrss) if rb.killed is None and rb.rc == 0 else float("nan")
            fs = mib(rs.maxrss) if rs.killed is None and rs.rc == 0 else float("nan")
            g = fb / fs - 1 if fs == fs and fb == fb else float("nan")
            row += [fb, fs, g]
            okm = fb <= MEM_LIMIT / 2**20 and fs <= MEM_LIMIT / 2**20  # False for nan (a failed run)
            shown = f"{fb:.0f} / {fs:.0f} MiB" if rb.killed is None else f"killed ({rb.killed}) / {fs:.0f} MiB"
            targets.append((f"{name} ({big}) / ({small}) <= 256 MiB", shown, okm))
            targets.append((f"{name} growth ({small}) -> ({big}) <= 20 %", f"{g:+.0%}" if g == g else "n/a",
                            g == g and g <= GROWTH_LIMIT))
        say(f"  {name:<24} {row[0]:>9.1f} {row[1]:>9.1f} {row[2]:>+9.0%} {row[3]:>9.1f} {row[4]:>9.1f} {row[5]:>+9.0%}")
    say("  (wall seconds of the same runs)")
    for name, _ in cmds:
        ws = [results[(k, name)].wall for k in ("a", "a'", "b", "b'")]
        say(f"  {name:<24} (a) {ws[0]:7.2f} s  (a') {ws[1]:7.2f} s  (b) {ws[2]:7.2f} s  (b') {ws[3]:7.2f} s")
    say("  bytes on disk / canonical bytes:")
    for key, _ in shapes:
        s = stores[key]
        sz = s["sizes"]
        st = s.get("state_db", 0)
        say(f"    ({key:<2}) log/ {sz['log'] / sz['canonical']:.3f}x   store before rebuild {sz['total'] / sz['canonical']:.3f}x   "
            f"state.db after rebuild {st / sz['canonical']:.3f}x   all {(sz['total'] + st) / sz['canonical']:.3f}x")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--scale", type=float, default=env("BENCH_SCALE", 1.0, float))
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--per-run", type=int, default=1000)
    p.add_argument("--commit-a", type=int, default=100)
    p.add_argument("--records-b", type=int, default=1000)
    p.add_argument("--big", type=int, default=1_000_000)
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--small-runs", type=int, default=100)
    p.add_argument("--steps-one", type=int, default=500)
    p.add_argument("--steps-many", type=int, default=50)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--rss-cap", type=float, default=6144, help="MiB")
    p.add_argument("--parts", default="log,memory")
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    a = p.parse_args(argv)
    a.rss_cap = int(a.rss_cap * 2**20)
    return a


def main(argv):
    a = parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    t_all = time.perf_counter()
    say(f"bench_scale: {a.reps} interleaved repetitions, scale {a.scale}; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs; scratch in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    code0 = code_fingerprint()
    say(f"  code: {code0}")
    scratch = mkscratch("bench-scale-")
    child_env(scratch)
    say(f"  children run under {TIME or 'a Python rusage wrapper'}; bytecode cached under "
        f"{bench_verify._CHILD_ENV['PYTHONPYCACHEPREFIX']}")
    targets: list = []
    stores: dict = {}
    common = dict(blob_every=0, shared_prompts=50, seed=a.seed)
    runs_a = max(2, round(a.runs * a.scale))
    try:
        # A doubles as memory shape (b): runs_a runs x per_run records, <= steps_many steps per run
        specs = [
            ("A", dict(runs=runs_a, per_run=a.per_run, per_commit=a.commit_a, steps=a.steps_many, round_robin=True)),
            ("B", dict(runs=1, per_run=a.records_b, per_commit=a.commit_a, steps=a.steps_many)),
        ]
        if "memory" in parts:
            specs += [
                ("a", dict(runs=1, per_run=max(1000, round(a.big * a.scale)), per_commit=1000, steps=a.steps_one)),
                ("a'", dict(runs=1, per_run=max(1000, round(a.small * a.scale)), per_commit=1000, steps=a.steps_one)),
                ("b'", dict(runs=max(1, round(a.small_runs * a.scale)), per_run=a.per_run, per_commit=a.commit_a,
                            steps=a.steps_many, round_robin=True)),
            ]
        for key, kw in specs:
            path = os.path.join(scratch, f"store-{key.replace(chr(39), 'p')}")
            b = build(f"store {key}", path, **common, **kw)
            b["path"] = path
            stores[key] = b
        stores["b"] = stores["A"]
        if "memory" in parts:
            for key in ("a", "a'", "b'", "A"):
                stores[key]["sizes"] = store_sizes(stores[key]["path"])
                progress(f"sized store {key}: {stores[key]['sizes']['objects']:,} objects")
        if "log" in parts:
            try:
                part_log(a, scratch, stores, targets)
            except Exception as e:
                import traceback

                say(f"  !! part log failed: {e!r}")
                traceback.print_exc()
        if "memory" in parts:
            try:
                part_memory(a, scratch, stores, targets)
            except Exception as e:
                import traceback

                say(f"  !! part memory failed: {e!r}")
                traceback.print_exc()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    finish(targets, code0, t_all, "Targets (verdict on the figure shown; log: min / ratio of medians / max):", 34)


if __name__ == "__main__":
    main(sys.argv[1:])
