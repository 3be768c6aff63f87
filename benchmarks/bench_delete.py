"""Deleting runs (issue 17), counted, not timed: what ``runs``, ``log RUN`` and ``log latest`` read after a deletion.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_delete.py                         # 10 runs (1 deleted) vs 10 000 (100 deleted)
    .venv/bin/python benchmarks/bench_delete.py --big 1000 --big-deleted 10 --reps 1   # smoke
    .venv/bin/python benchmarks/bench_delete.py --no-after-gc           # without the after-gc context rows
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_delete.py

Options (each also read from the environment): --small / BENCH_SMALL (10) runs of the small store, --small-deleted
(1) of them deleted; --big / BENCH_BIG (10000) and --big-deleted (100); --per-run (5) attempt records per run (plus
its run_started); --runs-per-commit (100) runs written per commit while building; --reps / BENCH_REPS (3)
repetitions of each command (counts are deterministic; repetition 1 is the first process after the deletion, which
may pay for catching up a cache); --[no-]after-gc (on: the same commands again after ``objstore gc``, as context);
--timeout (300) seconds per child; --seed (1). Stores are built with fsync="off" through the public API (RunLog,
Store.batch); scratch directories come from tempfile.mkdtemp(dir=$BENCH_DIR) and are removed at the end.

What it measures
----------------
Two stores, each of R runs of --per-run attempt records: R = --small with --small-deleted deleted, and R = --big with
--big-deleted deleted (the deleted runs spread evenly over the store: run i * R / k for i < k). The deletion is one
fresh process, ``objstore --store S delete RUN... --reason x`` (unsigned: the stores have no owner key). Then, each a
fresh process, in this order: ``objstore runs``, ``objstore log RUN`` of a run that is not deleted (the middle one),
``objstore log latest`` (``latest`` is a run argument: there is no ``latest`` command).

The peer, in the same run: the same commands on the same store BEFORE the deletion (so the table shows, beside
the target's ratio big / small, what the deletion itself changed: after / before, and after - before per run
deleted, at each size), and, as context (--after-gc), after ``objstore gc``.

Every child runs under ``strace -f -y`` (read, pread64, readv, preadv, preadv2, mmap) through a wrapper that, at
exit, writes ``objstore.storage.codec.STATS`` and ``objstore.storage.log.format.STATS``. Counted per command:

* bytes read from files under the store (the return values of read/pread64/readv/preadv/preadv2 on file
  descriptors whose path is under the store root: segments, indexes, checkpoint, witness, state.db, ...), with the
  files that took them;
* bytes mapped with mmap from files under the store (the index files are mmap'd; pages touched are not counted,
  the mapped length is: an upper bound, reported apart);
* objects decoded (codec.STATS["objects_decoded"]) and log entries decoded and blocks read (storage.log.format.STATS).

The table: command, the small store's figures, the big store's figures, the ratio big / small (medians over the
repetitions; [min..max] is printed where repetitions differ), the same before the deletion. For ``runs``, which
lists every live run and so grows with the store by nature, also the ratio per run listed. The ``delete`` command
itself is printed too (its cost per run deleted). Wall time of each child is printed as context only (strace slows
it).

Target (issue 17): at 10 000 runs (100 deleted) vs 10 runs (1 deleted), each command's bytes read from store files and
objects decoded <= 2x.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_verify import TOOLS, child_env, code_fingerprint, env, finish, mmm, say  # noqa: E402

from objstore import RunLog, Store  # noqa: E402

PY = sys.executable
TARGET = 2.0

# The child: count objstore's own figures at exit, then run the CLI as `python -m objstore` does.
WRAPPER = r"""
import atexit, json, os, sys
out = os.environ["BENCH_DELETE_STATS"]
def dump():
    from objstore.storage import codec
    from objstore.storage.log.format import STATS
    with open(out, "w") as f:
        json.dump({"objects_decoded": codec.STATS["objects_decoded"], **STATS}, f)
atexit.register(dump)
sys.argv = ["objstore"] + sys.argv[1:]
import runpy
runpy.run_module("objstore", run_name="__main__")
"""

SYSCALLS = "read,pread64,readv,preadv,preadv2,mmap"
_CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(read|pread64|readv|preadv|preadv2|mmap)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+)")
_FD = re.compile(r"(\d+)<([^>]*)>")


def build(path, runs, per_run, runs_per_commit, seed):
    """``runs`` runs of ``per_run`` attempt records, ``runs_per_commit`` whole runs per commit, fsync off."""
    import random

    rnd = random.Random(seed)
    log = RunLog(Store.init(path, fsync="off"))
    names = [f"r{i:05d}" for i in range(runs)]
    t0 = time.perf_counter()
    for c in range(0, runs, runs_per_commit):
        with log.store.batch():
            for name in names[c : c + runs_per_commit]:
                run = log.start_run(name)
                for j in range(per_run):
                    log.record_attempt(run, step=j, attempt=0, state="succeeded" if j % 5 != 4 else "failed",
                                       usage={"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)},
                                       context={"ticket": f"T-{rnd.randint(10000, 99999)}", "tool": rnd.choice(TOOLS)})
    log.store.engine.close()
    return names, time.perf_counter() - t0


def counted(store, args, scratch, timeout):
    """Run ``objstore --store STORE ARGS`` in a fresh process under strace; what it read (see the docstring)."""
    root = os.path.realpath(store)
    trace = os.path.join(scratch, "strace.out")
    stats = os.path.join(scratch, "stats.json")
    for p in (trace, stats):
        if os.path.exists(p):
            os.unlink(p)
    e = dict(child_env(scratch))
    e["BENCH_DELETE_STATS"] = stats
    cmd = ["strace", "-f", "-y", "-qq", "-s", "0", "-e", f"trace={SYSCALLS}", "-e", "signal=none", "-o", trace,
           PY, "-c", WRAPPER, "--store", store, *args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"objstore {' '.join(args)} failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()[-800:]}")
    with open(stats) as f:
        st = json.load(f)
    read_by: dict = {}
    mapped_by: dict = {}
    with open(trace) as f:
        for ln in f:
            m = _CALL.match(ln)
            if not m:
                continue
            call, argstr, ret = m.groups()
            if call == "mmap":
                fdm = _FD.search(argstr)
                if not fdm or not fdm.group(2).startswith(root + os.sep) or ret.startswith("-"):
                    continue
                length = int(argstr.split(",")[1].strip())
                rel = os.path.relpath(fdm.group(2), root)
                mapped_by[rel] = mapped_by.get(rel, 0) + length
                continue
            fdm = _FD.match(argstr)
            if not fdm or not fdm.group(2).startswith(root + os.sep):
                continue
            n = int(ret, 0)
            if n <= 0:
                continue
            rel = os.path.relpath(fdm.group(2), root)
            read_by[rel] = read_by.get(rel, 0) + n
    return {"read": sum(read_by.values()), "read_by": read_by, "mapped": sum(mapped_by.values()), "mapped_by": mapped_by,
            "objects": st["objects_decoded"], "entries": st.get("entries_decoded", 0), "blocks": st.get("blocks_read", 0),
            "wall": wall, "out_lines": len(p.stdout.splitlines())}


FIELDS = (("read", "bytes read from store files"), ("objects", "objects decoded"), ("entries", "log entries decoded"),
          ("blocks", "blocks read"), ("mapped", "bytes mmap'd (index files)"))


def by_file(fig):
    items = sorted(fig["read_by"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:,}" for k, v in items) or "nothing"


CMDS = ("runs", "log other", "log latest")


def measure(label, store, names, deleted, a, scratch, phase, do_delete=False):
    """Every command ``--reps`` times (after the deletion, one process, when ``do_delete``);
    {command: [figures per rep]}."""
    keep = [n for n in names if n not in set(deleted)]
    other = keep[len(keep) // 2]
    out: dict = {"_listed": len(keep) if phase != "before" else len(names), "_other": other}
    if do_delete:
        out["delete"] = [counted(store, ["delete", *deleted, "--reason", "x"], scratch, a.timeout)]
    args = {"runs": ["runs"], "log other": ["log", other], "log latest": ["log", "latest"]}
    for name in CMDS:
        out[name] = []
    for r in range(a.reps):
        for name in CMDS:
            out[name].append(counted(store, args[name], scratch, a.timeout))
        say(f"  .. {label}, {phase}, rep {r + 1}: " + "; ".join(
            f"{nm}: {out[nm][-1]['read']:,} B read, {out[nm][-1]['objects']:,} objects" for nm in CMDS))
    return out


def med(figs, k):
    return mmm([f[k] for f in figs])[1]


def spread(figs, k):
    lo, _, hi = mmm([f[k] for f in figs])
    return "" if lo == hi else f" [{lo:,}..{hi:,}]"


def rat(x, y):
    return x / y if y else (float("inf") if x else 1.0)


def table(res, phases, a, targets):
    s, b = res["small"], res["big"]
    sl, bl = f"{a.small}", f"{a.big:,}"
    for title, ph, record in phases:
        say(f"\n  {title}")
        say(f"  {'command':<18} {'figure':<28} {sl + ' runs':>14} {bl + ' runs':>14} {'ratio':>8}   "
            f"{'before the deletion (' + sl + ' / ' + bl + ')':<30} {'after/before':<15} "
            f"{'after - before (per run deleted)':<36}")
        for c in CMDS:
            name = {"log other": "log <another run>"}.get(c, c)
            for k, lab in FIELDS:
                sm, bm = med(s[ph][c], k), med(b[ph][c], k)
                before = "before"
                sb, bb = med(s[before][c], k), med(b[before][c], k)
                r = rat(bm, sm)
                ds, db = sm - sb, bm - bb
                delta = f"{ds:+,} ({ds / a.small_deleted:+,.1f}) / {db:+,} ({db / a.big_deleted:+,.1f})"
                say(f"  {name:<18} {lab:<28} {sm:>14,} {bm:>14,} {r:>7.2f}x   {f'{sb:,}{spread(s[before][c], k)} / {bb:,}{spread(b[before][c], k)}':<30} "
                    f"{f'{rat(sm, sb):.2f}x / {rat(bm, bb):.2f}x':<15} {delta:<36}"
                    f"{spread(s[ph][c], k)}{spread(b[ph][c], k)}")
                if record and k in ("read", "objects"):
                    targets.append((f"{name}: {lab} <= {TARGET}x", f"{r:.2f}x", r <= TARGET))
            if c == "runs":
                for k, lab in FIELDS[:2]:
                    ps, pb = med(s[ph][c], k) / s[ph]["_listed"], med(b[ph][c], k) / b[ph]["_listed"]
                    say(f"  {'runs, per listed':<18} {lab:<28} {ps:>14,.1f} {pb:>14,.1f} {rat(pb, ps):>7.2f}x   "
                        f"({s[ph]['_listed']} vs {b[ph]['_listed']:,} runs listed)")
            say(f"  {'':<18} {'wall s (under strace)':<28} {med(s[ph][c], 'wall'):>14.2f} {med(b[ph][c], 'wall'):>14.2f}")
        if ph == "after":
            c = "delete"
            for k, lab in FIELDS[:4]:
                sm, bm = s[ph][c][0][k], b[ph][c][0][k]
                say(f"  {'delete':<18} {lab:<28} {sm:>14,} {bm:>14,} {rat(bm, sm):>7.2f}x   per run deleted: "
                    f"{sm / a.small_deleted:,.1f} / {bm / a.big_deleted:,.1f}")
        say(f"  where the bytes came from (repetition 1{', the first process after the deletion' if ph == 'after' else ''}):")
        for c in CMDS + (("delete",) if ph == "after" else ()):
            say(f"    {c:<14} {sl + ' runs:':<12} {by_file(s[ph][c][0])}")
            say(f"    {'':<14} {bl + ' runs:':<12} {by_file(b[ph][c][0])}")
            if len(b[ph][c]) > 1 and b[ph][c][1]["read_by"] != b[ph][c][0]["read_by"]:
                say(f"    {'':<14} {bl + ' rep 2:':<12} {by_file(b[ph][c][1])}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", type=int, default=env("BENCH_SMALL", 10))
    p.add_argument("--small-deleted", type=int, default=1)
    p.add_argument("--big", type=int, default=env("BENCH_BIG", 10_000))
    p.add_argument("--big-deleted", type=int, default=100)
    p.add_argument("--per-run", type=int, default=5)
    p.add_argument("--runs-per-commit", type=int, default=100)
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 3))
    p.add_argument("--after-gc", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    if shutil.which("strace") is None:
        sys.exit("bench_delete needs strace (it counts the bytes each command reads from the store's files)")
    t_all = time.perf_counter()
    say(f"bench_delete: {a.small} runs ({a.small_deleted} deleted) vs {a.big:,} runs ({a.big_deleted} deleted), "
        f"{a.per_run} attempt records per run, {a.reps} reps; python {sys.version.split()[0]}; scratch in "
        f"{os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    code0 = code_fingerprint()
    say(f"  code: {code0}")
    scratch = tempfile.mkdtemp(prefix="bench-delete-", dir=os.environ.get("BENCH_DIR"))
    child_env(scratch)
    targets: list = []
    try:
        res: dict = {}
        for label, runs, k in (("small", a.small, a.small_deleted), ("big", a.big, a.big_deleted)):
            store = os.path.join(scratch, label)
            names, dt = build(store, runs, a.per_run, a.runs_per_commit, a.seed)
            deleted = [names[i * runs // k] for i in range(k)]
            say(f"  {label}: built {runs:,} runs x {a.per_run + 1} records in {dt:.1f} s (fsync=off, "
                f"{a.runs_per_commit} runs per commit); deleting {k}: {', '.join(deleted[:3])}{' ...' if k > 3 else ''}")
            res[label] = {"before": measure(label, store, names, deleted, a, scratch, "before")}
            res[label]["after"] = measure(label, store, names, deleted, a, scratch, "after", do_delete=True)
            say(f"  {label}: 'log' of another run is 'log {res[label]['after']['_other']}'")
            if a.after_gc:
                p = subprocess.run([PY, "-m", "objstore", "--store", store, "gc"], capture_output=True, text=True,
                                   timeout=a.timeout, env=child_env(scratch))
                if p.returncode != 0:
                    raise RuntimeError(f"gc failed: {p.stderr.strip()[-800:]}")
                res[label]["after gc"] = measure(label, store, names, deleted, a, scratch, "after gc")
            shutil.rmtree(store, ignore_errors=True)
        phases = [("after 'objstore delete' (no gc): the target's figures", "after", True)]
        if a.after_gc:
            phases.append(("context: the same commands after 'objstore gc' (the deleted bodies gone, segments packed)",
                           "after gc", False))
        table(res, phases, a, targets)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    finish(targets, code0, t_all, "Targets (counts; ratio of medians over repetitions):", 12)


if __name__ == "__main__":
    main(sys.argv[1:])
