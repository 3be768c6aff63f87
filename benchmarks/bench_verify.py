"""Verify and cold re-fold throughput (issues 15 and 17): objstore against git fsck and a fixed SQLite peer, same run, interleaved.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_verify.py                         # defaults below, 5 repetitions
    .venv/bin/python benchmarks/bench_verify.py --scale 0.05 --reps 2   # smoke (5 000 records)
    .venv/bin/python benchmarks/bench_verify.py --parts fsck            # only some parts (fsck, refold, state)
    BENCH_DIR=/mnt/slowdisk .venv/bin/python benchmarks/bench_verify.py

To measure a library other than the working tree's (e.g. HEAD while others edit): extract it with
``git archive HEAD objstore cli`` into DIR (cli renamed objstore_cli), then run from outside the repository with
``PYTHONPATH=DIR``; the "code:" line says which objstore was measured.

Options (each also read from the environment): --reps / BENCH_REPS (5); --scale / BENCH_SCALE (1.0) multiplies every
size below; --records / BENCH_RECORDS (100000) records of the fsck part; --per-run / BENCH_PER_RUN (0) records per run
of the fsck part (0: ONE run holding every record, the shape issue 17's gate names: "one run of 100 000 records";
1000 gives issue 15's runs of 1000); --rss-records / BENCH_RSS_RECORDS (1000000) records of the one run the "rss"
part builds (built once under --rss-dir / BENCH_RSS_DIR and reused when that directory already holds it: building
1 M records takes minutes); --blob-every (3) a fresh text blob on every
k-th record (0: none); --blob-size (2048) its bytes; --fresh-as (output) whether that blob is the record's output
(every record then keeps a prompt ref to one shared prompt: issue 15's workload) or its prompt; --group (1000) records
per commit while building; --refold-records (100000) records of the one run re-folded; --state-runs (1000) x
--state-records (100) for the optional state part; --timeout (1800) seconds per child process; --parts (fsck,refold);
--[no-]profile (on: one extra profiled run of verify and of the re-fold); --seed (1); --parts also takes "rss". Every store is built with
fsync="off" through the public API (building is not what is measured). Scratch directories come from
tempfile.mkdtemp(dir=$BENCH_DIR) and are removed at the end. Public API only (RunLog, Store.open/init/batch/get_raw,
the objstore CLI), so the harness keeps working while the engine changes.

What it measures
----------------
1. verify as an auditor runs it vs git fsck. A store of R records (attempt records, usage/context maps, a prompt ref,
   one run of R records by default (``--per-run``), one commit per ``--group`` records) with a fresh 2 KB text blob on every third, then ``objstore
   rebuild`` (so verify's state check has every branch cached; the state cache's size against the log is printed).
   A bare git repository holds the SAME canonical bytes as git blobs: every object (found through the public API:
   each run's records and the blobs they reference; their bytes from ``Store.get_raw``) streamed into ``git
   fast-import`` (one commit whose tree holds them all, fanned out as ab/cdef...), then ``git repack -adf``. Timed as
   process wall time, interleaved, order rotated each repetition: ``objstore verify --no-state``, ``objstore verify``
   (with its state check), the same two with ``--jobs 1`` when ``objstore verify --help`` offers a --jobs/--workers
   knob (the single-process figure beside the parallel one), ``git fsck --full --no-dangling``, and the bare
   interpreter start ``python -c 'import objstore_cli.main'``. Reported: wall times, CPU times (user + system of the
   command and every child it waited for: verify's worker processes, git's threads), objects/s, per-repetition
   ratios git wall / objstore wall and git CPU / objstore CPU (min/median/max; the targets), peak RSS of each
   command's own process (/usr/bin/time %M) and of its whole process tree (sampled: the sum of its live processes'
   proportional set sizes, so a page forked workers share is counted once). Optionally
   one verify under cProfile: top functions by tottime, time by phase.
2. cold re-fold vs a FIXED SQLite peer (benchmarks/refold_peer.py: msgspec decode into dicts and the fold copied from
   src/objstore/runs/fold.py, importing nothing from objstore, so the peer does not move with objstore). One run of F records
   (same shapes). Each system in a fresh process: objstore opens the store and runs ``log.refold(view, live)``; the
   peer reads every row of ``rec(id, h, body)`` (the same records' canonical bytes in LSN order, ``h`` their BLAKE3)
   in order, checks the BLAKE3 and the header, decodes and folds; ``episode(log, run, source="refold")`` in process
   and ``objstore episode RUN --source refold --json`` (CLI, process wall) for context. Timed inside the child from
   before opening the store / database to the folded state (imports excluded), and as process wall time. The folded
   states of objstore and the peer are compared by digest (refold_peer.state_digest).
3. (optional, --parts state) verify with its state check vs without on 1000 runs x 100 records, after rebuild.
4. (optional, --parts rss) peak RSS of ``objstore verify --no-state`` over ONE run of --rss-records records (issue
   17: <= 256 MB at 1 M records), the command's own process and its process tree; once per repetition.

Targets (issue 17 for verify, issue 15 for the rest); a target is "met" when the MEDIAN per-repetition figure meets it:

* verify --no-state: >= 0.75x git fsck --full --no-dangling wall time and >= 0.5x its CPU time (same bytes, same run)
* verify with the state check: >= 0.7x git fsck (wall time; informational)
* verify --no-state of one run of 1 M records: peak RSS <= 256 MB (--parts rss)
* cold re-fold: >= 1.0x the fixed SQLite peer (records/s inside the child)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import dir_bytes  # noqa: E402

from objstore import RunLog, Store  # noqa: E402

PY = sys.executable
BASELINE = [PY, "-c", "import objstore_cli.main"]

# building stores through the public API, and the profile reports: their own modules (re-exported: other benchmarks
# import them from here)
from verify_profile import profile_report, profile_steps  # noqa: E402
from verify_stores import TOOLS, Workload, build_store, canonical_bytes, export_to_git, public_objects  # noqa: E402, F401


# -- helpers shared with bench_scale.py ------------------------------------------------------------------------
def env(name, default, cast=int):
    v = os.environ.get(name)
    return cast(v) if v not in (None, "") else default


def mmm(xs):
    return min(xs), statistics.median(xs), max(xs)


def verdict(ok):
    return "met" if ok else "NOT MET"


def say(msg):
    print(msg, flush=True)


def progress(msg):
    print(f"  .. {time.strftime('%H:%M:%S')} {msg}", flush=True)


def mkscratch(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("BENCH_DIR"))


class Child(NamedTuple):
    rc: int
    wall: float  # seconds, fork to exit (measured here)
    maxrss: int  # bytes: peak RSS of the command's process, as /usr/bin/time reports it (-1: unknown)
    cpu: float  # user + system seconds of the command
    out: str
    err: str
    killed: str | None  # why the watchdog killed it, or None
    procs: int = 0  # most processes seen at once in its tree (the launcher and the command: 2), when watched
    tree_rss: int = 0  # peak memory of the command's live process tree (sampled every 0.25 s; PSS summed once it has workers), when watched


TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
# Fallback launcher when /usr/bin/time is missing: a small Python parent reporting RUSAGE_CHILDREN (the command's
# figure then includes the ~10 MB high-water mark it inherits from that parent through fork+exec).
_PYTIME = ("import resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[2:])\n"
           "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
           "open(sys.argv[1], 'w').write(f'{u.ru_maxrss} 0 {u.ru_utime} {u.ru_stime}\\n')\n"
           "sys.exit(r.returncode if r.returncode >= 0 else 128 - r.returncode)\n")
_CHILD_ENV: dict | None = None


def child_env(scratch):
    """The children's environment: bytecode caching on, into a scratch prefix (this environment sets
    PYTHONDONTWRITEBYTECODE=1, which would make every child recompile objstore and its dependencies at start)."""
    global _CHILD_ENV
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    _CHILD_ENV = e
    return e


def _tree_rss(pid, page, pss=False):
    """(RSS in bytes, process count) of pid and all its descendants (``pss``: their proportional set sizes, each
    shared page divided among the processes sharing it: forked workers share the parent's pages)."""
    total = count = 0
    todo = [pid]
    while todo:
        q = todo.pop()
        try:
            if pss:
                with open(f"/proc/{q}/smaps_rollup") as f:
                    total += next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("Pss:"))
            else:
                with open(f"/proc/{q}/statm") as f:
                    total += int(f.read().split()[1]) * page
            count += 1
            with open(f"/proc/{q}/task/{q}/children") as f:
                todo.extend(int(x) for x in f.read().split())
        except (OSError, ValueError, IndexError):
            pass
    return total, count


def run_child(cmd, *, timeout=None, rss_cap=None, env_=None) -> Child:
    """Run ``cmd`` to completion under /usr/bin/time (peak RSS of the command itself: a child forked from this
    driver would inherit the driver's RSS high-water mark through fork+exec). Wall time is measured here. A
    watchdog kills the whole process group past ``timeout`` seconds or ``rss_cap`` bytes of RSS."""
    fd, tfile = tempfile.mkstemp(prefix="bench-time-", dir=os.environ.get("BENCH_DIR"))
    os.close(fd)
    launcher = [TIME, "-f", "%M %e %U %S", "-o", tfile] if TIME else [PY, "-c", _PYTIME, tfile]
    try:
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            t0 = time.perf_counter()
            p = subprocess.Popen(launcher + list(cmd), stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 env=env_ if env_ is not None else _CHILD_ENV, start_new_session=True)
            done = threading.Event()
            killed = [None]
            procs = [0]
            peak = [0]

            def watch():
                page = os.sysconf("SC_PAGE_SIZE")
                while not done.wait(0.25):
                    why = None
                    rss, n = _tree_rss(p.pid, page)
                    procs[0] = max(procs[0], n)
                    peak[0] = max(peak[0], _tree_rss(p.pid, page, pss=True)[0] if n > 2 else rss)
                    if timeout is not None and time.perf_counter() - t0 > timeout:
                        why = f"timeout after {timeout:.0f} s"
                    elif rss_cap is not None:
                        if rss > rss_cap:
                            why = f"RSS {rss / 2**20:.0f} MiB over the cap of {rss_cap / 2**20:.0f} MiB"
                    if why is not None and not done.is_set():
                        killed[0] = why
                        os.killpg(p.pid, signal.SIGKILL)  # our own new session; the leader is not reaped yet
                        return

            w = None
            if timeout is not None or rss_cap is not None:
                w = threading.Thread(target=watch, daemon=True)
                w.start()
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
            wall = time.perf_counter() - t0
            done.set()
            if w is not None:
                w.join()
            p.wait()
            rc = p.returncode
            fo.seek(0)
            fe.seek(0)
            out = fo.read().decode("utf-8", "replace")
            err = fe.read().decode("utf-8", "replace")
        maxrss, cpu = -1, 0.0
        with open(tfile) as f:
            for ln in f.read().splitlines():
                parts = ln.split()
                if len(parts) == 4:
                    try:
                        maxrss = int(float(parts[0])) * 1024
                        cpu = float(parts[2]) + float(parts[3])
                    except ValueError:
                        pass
    finally:
        os.unlink(tfile)
    return Child(rc, wall, maxrss, cpu, out, err, killed[0], procs[0], peak[0])


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_fingerprint():
    """What code is being measured: git HEAD, how many library files differ from it, and a BLAKE3 over the
    working tree's objstore/*.py and cli/*.py (others may be editing the library while this runs)."""
    import blake3

    import objstore
    import objstore_cli

    h = blake3.blake3()
    dirs = [os.path.dirname(os.path.abspath(m.__file__)) for m in (objstore, objstore_cli)]
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "src"], capture_output=True,
                               text=True).stdout.strip().splitlines()
    except OSError:
        head, dirty = "?", []
    where = "working tree" if dirs[0] == os.path.join(REPO, "src", "objstore") else f"imported from {os.path.dirname(dirs[0])}"
    return (f"HEAD {head or '?'}, {len(dirty)} library file(s) modified in the working tree; measured objstore+cli "
            f"({where}) blake3 {h.hexdigest()[:16]}")


def objstore_cmd(store, *args):
    return [PY, "-m", "objstore", "--store", store, *args]


def check_ok(res: Child, what: str) -> bool:
    if res.killed or res.rc != 0:
        why = res.killed or f"exit code {res.rc}"
        tail = (res.err.strip() or res.out.strip())[-2000:]
        say(f"  !! {what} failed: {why}\n{tail}")
        return False
    return True


def mib(b):
    return b / 2**20


def profile_child(cmd_tail, scratch, title, timeout, code=None):
    """Run one child under cProfile (``code``: Python source run as a script with ``cmd_tail`` as its argv)."""
    prof = os.path.join(scratch, f"prof-{os.getpid()}-{time.monotonic_ns()}.out")
    if code is not None:
        script = prof[:-4] + ".py"
        with open(script, "w") as f:
            f.write(code)
        cmd_tail = [script, *cmd_tail]
    res = run_child([PY, "-m", "cProfile", "-o", prof, *cmd_tail], timeout=timeout)
    if res.killed or res.rc not in (0, 1):
        say(f"  !! profiled run: {res.killed or f'exit code {res.rc}'} {res.err.strip()[-500:]}")
    if os.path.exists(prof):
        profile_report(prof, title=title)
        profile_steps(prof)
        os.unlink(prof)
    return res


# -- part 1: verify vs git fsck -------------------------------------------------------------------------------


def verify_jobs_knob():
    """The option that sets verify's worker count, if `objstore verify --help` offers one (--jobs / --workers)."""
    res = subprocess.run([PY, "-m", "objstore", "verify", "--help"], capture_output=True, text=True, env=_CHILD_ENV)
    for opt in ("--jobs", "--workers", "-j"):
        if re.search(rf"(^|\s|,){re.escape(opt)}[\s=,]", res.stdout):
            return opt
    return None


def part_fsck(a, scratch, targets):
    n = max(1000, int(a.records * a.scale))
    per_run = min(a.per_run, n) if a.per_run > 0 else n  # 0: one run of every record (issue 17's gate)
    shape = "ONE run" if per_run == n else f"runs of {per_run:,}"
    say(f"\n[1] verify as an auditor runs it vs git fsck: {n:,} attempt records (~300 B, a prompt ref on every record), "
        f"a fresh {a.blob_size} B text blob as the {a.fresh_as} of every {a.blob_every}{'rd' if a.blob_every == 3 else 'th'} "
        f"record, {shape}, {a.group} records per commit; built with fsync=off")
    d = os.path.join(scratch, "fsck")
    os.makedirs(d)
    spath, repo = os.path.join(d, "store"), os.path.join(d, "git")
    b = build_store(spath, runs=max(1, n // per_run), per_run=per_run, per_commit=a.group, blob_every=a.blob_every,
                    blob_size=a.blob_size, seed=a.seed, label="fsck store", shared_prompts=1, fresh_as=a.fresh_as)
    progress(f"built: {b['records']:,} records, {b['blobs']:,} blobs, {b['commits']:,} commits in {b['seconds']:.1f} s "
             f"({b['rate']:,.0f} rec/s)")
    g = export_to_git(spath, repo)
    nobj, canon = g["objects"], g["bytes"]
    progress(f"git repo: {g['git_objects']:,} objects ({g['objects']:,} blobs + trees + commit), pack {g['pack_kib']:,} KiB; "
             f"fast-import {g['fast_import_s']:.1f} s, repack -adf {g['repack_s']:.1f} s")
    store_disk = dir_bytes(spath)
    say(f"  objects: {nobj:,}; canonical bytes {canon:,} (avg {canon / nobj:.0f} B); objstore on disk {store_disk:,} B "
        f"({store_disk / canon:.3f}x canonical); git pack {g['pack_kib'] * 1024:,} B ({g['pack_kib'] * 1024 / canon:.3f}x)")
    res = run_child(objstore_cmd(spath, "rebuild"), timeout=a.timeout)
    if not check_ok(res, "rebuild"):
        return
    logb = log_bytes(spath)
    st = dir_bytes(spath) - logb  # a store of format 6 keeps a state file per run beside its log: all but the logs
    say(f"  rebuild (so verify's state check has every branch cached): {res.wall:.2f} s; everything but the logs {st:,} B = "
        f"{st / max(1, logb):.3f}x the logs ({logb:,} B)")

    knob = verify_jobs_knob()
    fsck_cmd = ["git", "-C", repo, "fsck", "--full", "--no-dangling"]
    systems = [("objstore verify --no-state", objstore_cmd(spath, "verify", "--no-state")),
               ("objstore verify (state check)", objstore_cmd(spath, "verify"))]
    if knob is not None:
        systems += [(f"objstore verify --no-state {knob} 1", objstore_cmd(spath, "verify", "--no-state", knob, "1")),
                    (f"objstore verify (state check) {knob} 1", objstore_cmd(spath, "verify", knob, "1"))]
    systems += [("git fsck --full", fsck_cmd), ("python import baseline", BASELINE)]
    say(f"  verify's worker knob: {knob or 'none in verify --help (verify is one process: the figures are single-process)'}")
    for name, cmd in systems:  # warm-up (page cache, .pyc): once each, not counted
        if not check_ok(run_child(cmd, timeout=a.timeout), name):
            return
    walls = {name: [] for name, _ in systems}
    cpus = {name: [] for name, _ in systems}
    rss = {name: [] for name, _ in systems}
    trees = {name: [] for name, _ in systems}
    procs = {name: 0 for name, _ in systems}
    for r in range(a.reps):
        k = r % len(systems)
        for name, cmd in systems[k:] + systems[:k]:
            res = run_child(cmd, timeout=a.timeout)
            if not check_ok(res, name):
                return
            if name.startswith("objstore"):
                m = re.search(r"verify: ok \((\d+) entries(?: in \d+ logs)?, (\d+) objects\)", res.err)
                if not m or int(m.group(2)) != nobj:
                    say(f"  !! {name}: verify's summary does not say ok with {nobj:,} objects: {res.err.strip()[-300:]}")
            walls[name].append(res.wall)
            cpus[name].append(res.cpu)
            rss[name].append(res.maxrss)
            trees[name].append(res.tree_rss)
            procs[name] = max(procs[name], res.procs)
        git_w = walls["git fsck --full"][-1]
        progress(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{nm} {walls[nm][-1]:.3f} s (cpu {cpus[nm][-1]:.3f})" for nm, _ in systems)
                 + "; git/objstore wall: " + ", ".join(f"{nm[9:]} {git_w / walls[nm][-1]:.2f}x" for nm, _ in systems
                                                      if nm.startswith("objstore")))
    fsck_summary(systems, walls, cpus, rss, trees, procs, nobj, g["git_objects"], targets)
    if a.profile:
        say("  profile of one verify --no-state run:")
        profile_child(["-m", "objstore", "--store", spath, "verify", "--no-state"], d, "objstore verify --no-state ", a.timeout)
    shutil.rmtree(d, ignore_errors=True)


def fsck_summary(systems, walls, cpus, rss, trees, procs, nobj, git_objects, targets):
    """Part 1's table: wall and CPU per system, objects/s, the ratios against git fsck (the targets), peak memory."""
    say(f"  {'':<52} {'min':>10} {'median':>10} {'max':>10}")
    for name, _ in systems:
        lo, md, hi = mmm(walls[name])
        say(f"  {name + ' wall s':<52} {lo:>10.3f} {md:>10.3f} {hi:>10.3f}")
    for name, _ in systems:
        lo, md, hi = mmm(cpus[name])
        say(f"  {name + ' CPU s (user+sys)':<52} {lo:>10.3f} {md:>10.3f} {hi:>10.3f}")
    git_rate = [git_objects / t for t in walls["git fsck --full"]]
    for name, _ in systems:
        if name.startswith("objstore"):
            lo, md, hi = mmm([nobj / t for t in walls[name]])
            say(f"  {name + ' objects/s':<52} {lo:>10,.0f} {md:>10,.0f} {hi:>10,.0f}")
    lo, md, hi = mmm(git_rate)
    say(f"  {'git fsck --full objects/s (its own object count)':<52} {lo:>10,.0f} {md:>10,.0f} {hi:>10,.0f}")
    for name, _ in systems:
        if not name.startswith("objstore"):
            continue
        ratio = [gw / ow for gw, ow in zip(walls["git fsck --full"], walls[name], strict=True)]
        lo, md, hi = mmm(ratio)
        need = 0.75 if "--no-state" in name else 0.7  # issue 17's gate; the state check: issue 15's
        say(f"  {'ratio git wall / ' + name[9:] + ' wall':<52} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x   target >= {need}x: "
            f"{verdict(md >= need)}")
        targets.append((f"verify: {name[9:]} >= {need}x git fsck (wall)", f"{lo:.2f}x / {md:.2f}x / {hi:.2f}x", md >= need))
        ratio = [gc / oc for gc, oc in zip(cpus["git fsck --full"], cpus[name], strict=True) if oc > 0]
        if ratio:
            lo, md, hi = mmm(ratio)
            need = 0.5 if "--no-state" in name else None
            tail = f"   target >= {need}x: {verdict(md >= need)}" if need else ""
            say(f"  {'ratio git CPU / ' + name[9:] + ' CPU':<52} {lo:>9.2f}x {md:>9.2f}x {hi:>9.2f}x{tail}")
            if need:
                targets.append((f"verify: {name[9:]} >= {need}x git fsck (CPU)", f"{lo:.2f}x / {md:.2f}x / {hi:.2f}x", md >= need))
    for name, _ in systems:
        if name.startswith("objstore") or name.startswith("git"):
            lo, md, hi = mmm(rss[name])
            seen = f"; most processes seen at once in its tree {procs[name] - 1}" if procs[name] > 2 else ""
            say(f"  peak RSS {name:<43} {mib(lo):>8.1f} MiB {mib(md):>6.1f} MiB {mib(hi):>6.1f} MiB  (/usr/bin/time %M: "
                f"the command's own process{seen})")
            lo, md, hi = mmm(trees[name])
            say(f"  peak tree RSS {name:<38} {mib(lo):>8.1f} MiB {mib(md):>6.1f} MiB {mib(hi):>6.1f} MiB  (summed over its "
                "live processes' PSS: a page shared by forked workers counted once)")


RSS_CAP = 256 * 10**6  # issue 17: peak RSS of verify --no-state at 1 M records


def part_rss(a, scratch, targets):
    """Peak RSS of verify --no-state over one run of --rss-records records, built once under --rss-dir and reused."""
    n = max(1000, int(a.rss_records * a.scale))
    say(f"\n[4] peak RSS of objstore verify --no-state over ONE run of {n:,} records (issue 17: <= {RSS_CAP / 1e6:.0f} MB)")
    base = a.rss_dir or os.path.join(scratch, "rss")
    spath = os.path.join(base, f"store-{n}-{a.blob_every}-{a.blob_size}-{a.fresh_as}-{a.seed}")
    done = os.path.join(spath, ".bench-built")
    if os.path.exists(done):
        progress(f"reusing the store built before: {spath}")
    else:
        shutil.rmtree(spath, ignore_errors=True)
        os.makedirs(base, exist_ok=True)
        b = build_store(spath, runs=1, per_run=n, per_commit=a.group, blob_every=a.blob_every, blob_size=a.blob_size,
                        seed=a.seed, label="rss store", shared_prompts=1, fresh_as=a.fresh_as)
        progress(f"built: {b['records']:,} records in {b['seconds']:.1f} s ({b['rate']:,.0f} rec/s) in {spath}")
        with open(done, "w") as f:
            f.write(f"{b['records']}\n")
    cmd = objstore_cmd(spath, "verify", "--no-state")
    own, tree, walls, cpus = [], [], [], []
    for r in range(a.reps):
        res = run_child(cmd, timeout=a.timeout)
        if not check_ok(res, "verify --no-state"):
            return
        own.append(res.maxrss)
        tree.append(res.tree_rss)
        walls.append(res.wall)
        cpus.append(res.cpu)
        progress(f"rep {r + 1}/{a.reps}: wall {res.wall:.2f} s, CPU {res.cpu:.2f} s, peak RSS {res.maxrss / 1e6:.1f} MB "
                 f"(tree {res.tree_rss / 1e6:.1f} MB, {max(0, res.procs - 1)} processes at most)")
    for label, xs in (("wall s", walls), ("CPU s", cpus)):
        lo, md, hi = mmm(xs)
        say(f"  {label:<44} {lo:>10.2f} {md:>10.2f} {hi:>10.2f}")
    for label, xs in (("peak RSS MB (/usr/bin/time %M)", own), ("peak tree PSS MB (sampled sum)", tree)):
        lo, md, hi = mmm(xs)
        say(f"  {label:<44} {lo / 1e6:>10.1f} {md / 1e6:>10.1f} {hi / 1e6:>10.1f}")
    lo, md, hi = mmm(own)
    targets.append((f"verify --no-state, {n:,} records: peak RSS <= {RSS_CAP / 1e6:.0f} MB", f"{lo / 1e6:.0f} / {md / 1e6:.0f} / {hi / 1e6:.0f} MB",
                    md <= RSS_CAP))
    if a.rss_dir is None:
        shutil.rmtree(base, ignore_errors=True)


def log_bytes(spath):
    """Bytes of every log directory's files in a store (the store's one log/, or format 6's log per run and store log)."""
    total = 0
    for d, _dirs, files in os.walk(spath):
        if os.path.basename(d) == "log":
            total += sum(os.path.getsize(os.path.join(d, f)) for f in files if os.path.isfile(os.path.join(d, f)))
    return total


def state_bytes(spath):
    """Bytes of the state cache files (state.db and its -wal/-shm) of a store."""
    db = os.path.join(spath, "state.db")
    return sum(os.path.getsize(db + x) for x in ("", "-wal", "-shm") if os.path.exists(db + x))


# -- part 2: cold re-fold vs SQLite ---------------------------------------------------------------------------
BENCH = os.path.dirname(os.path.abspath(__file__))
OBJ_CHILD = r"""
import json, sys, time
sys.path.insert(0, BENCH_DIR)
from refold_peer import state_digest
from objstore import RunLog, Store
from objstore.runs.query import episode
path, run, mode = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
log = RunLog(Store.open(path))
view = log.view(run)
if mode == "refold":
    state = log.refold(view, view.live)
    n = state["records"]
else:  # episode from a cold re-fold: the state plus every attempt's view
    ep = episode(log, run, source="refold")
    br = ep.branches[0]
    state = {"attempts": br.attempts_total, "views": len(br.attempts)}
    n = br.attempts_total + 1  # + run_started: the records folded
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "records": n, "digest": state_digest(state)}))
""".replace("BENCH_DIR", repr(BENCH))

PEER_CHILD = r"""
import sys
sys.path.insert(0, BENCH_DIR)
import refold_peer
refold_peer.main(sys.argv[1:])
""".replace("BENCH_DIR", repr(BENCH))


def build_peer_db(store_path, run, db_path):
    """The SQLite peer (benchmarks/refold_peer.py): the run's records' canonical bytes, in LSN order, with BLAKE3."""
    import refold_peer

    log = RunLog(Store.open(store_path))
    recs = log.records(run)
    get_raw = log.store.get_raw
    refold_peer.build(db_path, ((r.id, get_raw(r.id)) for r in recs))
    log.store.engine.close()
    return len(recs)


def part_refold(a, scratch, targets):
    n = max(1000, int(a.refold_records * a.scale))
    say(f"\n[2] cold re-fold vs SQLite: one run of {n:,} records (same shapes, blob on every {a.blob_every}rd), "
        f"{a.group} per commit; built with fsync=off")
    d = os.path.join(scratch, "refold")
    os.makedirs(d)
    spath, dbp = os.path.join(d, "store"), os.path.join(d, "peer.sqlite")
    b = build_store(spath, runs=1, per_run=n, per_commit=a.group, steps=500, blob_every=a.blob_every,
                    blob_size=a.blob_size, seed=a.seed, label="refold store", run_fmt="r{:05d}", shared_prompts=1,
                    fresh_as=a.fresh_as)
    run = b["runs"][0]
    progress(f"built: {b['records']:,} records in {b['seconds']:.1f} s ({b['rate']:,.0f} rec/s)")
    nrec = build_peer_db(spath, run, dbp)
    progress(f"peer db: {nrec:,} rows, {os.path.getsize(dbp):,} B")
    systems = [("objstore log.refold", [PY, "-c", OBJ_CHILD, spath, run, "refold"]),
               ("SQLite peer fold", [PY, "-c", PEER_CHILD, dbp]),
               ("objstore episode(refold)", [PY, "-c", OBJ_CHILD, spath, run, "episode"])]
    cli = ("objstore episode --source refold --json (CLI)", objstore_cmd(spath, "episode", run, "--source", "refold", "--json"))
    for name, cmd in systems + [cli]:  # warm-up
        if not check_ok(run_child(cmd, timeout=a.timeout), name):
            return
    inner = {nm: [] for nm, _ in systems}
    walls = {nm: [] for nm, _ in systems + [cli]}
    rss = {nm: [] for nm, _ in systems + [cli]}
    digests = {}
    for r in range(a.reps):
        k = r % (len(systems) + 1)
        every = systems + [cli]
        for name, cmd in every[k:] + every[:k]:
            res = run_child(cmd, timeout=a.timeout)
            if not check_ok(res, name):
                return
            walls[name].append(res.wall)
            rss[name].append(res.maxrss)
            if name == cli[0]:
                continue
            out = json.loads(res.out.strip().splitlines()[-1])
            inner[name].append(out["records"] / out["seconds"])
            digests.setdefault(name, set()).add(out["digest"])
        progress(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{nm} {inner[nm][-1]:,.0f} rec/s" for nm, _ in systems)
                 + f", CLI episode --source refold {walls[cli[0]][-1]:.3f} s wall")
    same = digests["objstore log.refold"] == digests["SQLite peer fold"] and len(digests["SQLite peer fold"]) == 1
    say(f"  folded states equal (objstore vs peer, by digest): {'yes' if same else 'NO'}")
    say(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for name, _ in systems:
        lo, md, hi = mmm(inner[name])
        say(f"  {name + ' rec/s (in child)':<44} {lo:>12,.0f} {md:>12,.0f} {hi:>12,.0f}")
    for name, _ in systems + [cli]:
        lo, md, hi = mmm(walls[name])
        say(f"  {name + ' process wall s':<44} {lo:>12.3f} {md:>12.3f} {hi:>12.3f}")
    cratio = [y / x for x, y in zip(walls[cli[0]], walls["SQLite peer fold"], strict=True)]
    ratio = [x / y for x, y in zip(inner["objstore log.refold"], inner["SQLite peer fold"], strict=True)]
    wratio = [y / x for x, y in zip(walls["objstore log.refold"], walls["SQLite peer fold"], strict=True)]
    lo, md, hi = mmm(ratio)
    say(f"  {'ratio objstore / SQLite (rec/s in child)':<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
    lo2, md2, hi2 = mmm(wratio)
    say(f"  {'ratio objstore / SQLite (process wall)':<44} {lo2:>11.2f}x {md2:>11.2f}x {hi2:>11.2f}x")
    lo4, md4, hi4 = mmm(cratio)
    say(f"  {'ratio CLI episode refold / SQLite (wall)':<44} {lo4:>11.2f}x {md4:>11.2f}x {hi4:>11.2f}x  (context)")
    for name, _ in systems + [cli]:
        lo3, md3, hi3 = mmm(rss[name])
        say(f"  peak RSS {name:<35} {mib(lo3):>10.1f} MiB {mib(md3):>8.1f} MiB {mib(hi3):>8.1f} MiB")
    targets.append(("cold re-fold: objstore >= 1.0x the fixed SQLite peer", f"{lo:.2f}x / {md:.2f}x / {hi:.2f}x", md >= 1.0))
    say(f"  target >= 1.0x the fixed SQLite peer (median, in child): {verdict(md >= 1.0)}")
    if a.profile:
        say("  profile of one cold re-fold child:")
        profile_child([spath, run, "refold"], d, "objstore cold re-fold ", a.timeout, code=OBJ_CHILD)
    shutil.rmtree(d, ignore_errors=True)


# -- part 3: verify's state check -----------------------------------------------------------------------------
def part_state(a, scratch, targets):
    runs = max(10, int(a.state_runs * a.scale))
    per = a.state_records
    say(f"\n[3] verify with vs without its state check: {runs:,} runs x {per} records ({runs * per:,} records), "
        f"one commit per run; built with fsync=off; then 'objstore rebuild'")
    d = os.path.join(scratch, "state")
    os.makedirs(d)
    spath = os.path.join(d, "store")
    b = build_store(spath, runs=runs, per_run=per, per_commit=per, blob_every=a.blob_every, blob_size=a.blob_size,
                    seed=a.seed, label="state store")
    progress(f"built: {b['records']:,} records in {b['seconds']:.1f} s ({b['rate']:,.0f} rec/s)")
    res = run_child(objstore_cmd(spath, "rebuild"), timeout=a.timeout)
    if not check_ok(res, "rebuild"):
        return
    progress(f"rebuild: {res.wall:.2f} s, peak RSS {mib(res.maxrss):.0f} MiB ({res.out.strip()}); "
             f"state.db {dir_bytes(spath) - dir_bytes(os.path.join(spath, 'log')):,} B outside log/")
    systems = [("verify (with state check)", objstore_cmd(spath, "verify")),
               ("verify --no-state", objstore_cmd(spath, "verify", "--no-state"))]
    for name, cmd in systems:
        if not check_ok(run_child(cmd, timeout=a.timeout), name):
            return
    walls = {nm: [] for nm, _ in systems}
    rss = {nm: [] for nm, _ in systems}
    for r in range(a.reps):
        for name, cmd in systems[:: (1 if r % 2 == 0 else -1)]:
            res = run_child(cmd, timeout=a.timeout)
            if not check_ok(res, name):
                return
            walls[name].append(res.wall)
            rss[name].append(res.maxrss)
        progress(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{nm} {walls[nm][-1]:.3f} s" for nm, _ in systems))
    ratio = [x / y for x, y in zip(walls["verify (with state check)"], walls["verify --no-state"], strict=True)]
    say(f"  {'':<44} {'min':>12} {'median':>12} {'max':>12}")
    for name, _ in systems:
        lo, md, hi = mmm(walls[name])
        say(f"  {name + ' wall s':<44} {lo:>12.3f} {md:>12.3f} {hi:>12.3f}")
    lo, md, hi = mmm(ratio)
    say(f"  {'ratio with / without state check':<44} {lo:>11.2f}x {md:>11.2f}x {hi:>11.2f}x")
    for name, _ in systems:
        lo3, md3, hi3 = mmm(rss[name])
        say(f"  peak RSS {name:<35} {mib(lo3):>10.1f} MiB {mib(md3):>8.1f} MiB {mib(hi3):>8.1f} MiB")
    targets.append((f"verify with state check ({runs} runs x {per}) <= 1.5x without", f"{lo:.2f}x / {md:.2f}x / {hi:.2f}x", md <= 1.5))
    say(f"  target <= 1.5x (median): {verdict(md <= 1.5)}")
    say("  profile of one verify run with the state check:")
    profile_child(["-m", "objstore", "--store", spath, "verify"], d, "objstore verify (state check) ", a.timeout)
    shutil.rmtree(d, ignore_errors=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 5))
    p.add_argument("--scale", type=float, default=env("BENCH_SCALE", 1.0, float))
    p.add_argument("--records", type=int, default=env("BENCH_RECORDS", 100_000))
    p.add_argument("--per-run", type=int, default=env("BENCH_PER_RUN", 0))
    p.add_argument("--rss-records", type=int, default=env("BENCH_RSS_RECORDS", 1_000_000))
    p.add_argument("--rss-dir", default=os.environ.get("BENCH_RSS_DIR") or None)
    p.add_argument("--blob-every", type=int, default=3)
    p.add_argument("--blob-size", type=int, default=2048)
    p.add_argument("--fresh-as", choices=("output", "prompt"), default="output")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--group", type=int, default=1000)
    p.add_argument("--refold-records", type=int, default=100_000)
    p.add_argument("--state-runs", type=int, default=1000)
    p.add_argument("--state-records", type=int, default=100)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--parts", default="fsck,refold")
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    t_all = time.perf_counter()
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    say(f"bench_verify: {a.reps} interleaved repetitions, scale {a.scale}; {git}; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs; scratch in {os.environ.get('BENCH_DIR') or tempfile.gettempdir()}")
    code0 = code_fingerprint()
    say(f"  code: {code0}")
    scratch = mkscratch("bench-verify-")
    child_env(scratch)
    say(f"  children run under {TIME or 'a Python rusage wrapper'}; bytecode cached under {_CHILD_ENV['PYTHONPYCACHEPREFIX']}")
    targets: list = []
    try:
        for part, fn in (("fsck", part_fsck), ("refold", part_refold), ("state", part_state), ("rss", part_rss)):
            if part in parts:
                try:
                    fn(a, scratch, targets)
                except Exception as e:  # one broken part must not hide the others' figures
                    import traceback

                    say(f"  !! part {part} failed: {e!r}")
                    traceback.print_exc()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    finish(targets, code0, t_all, "Targets (min / median / max over repetitions; verdict on the median):", 32)


def finish(targets, code0, t_all, heading, width):
    """The closing lines every benchmark script prints: targets, a library-changed warning, totals."""
    say("\n" + heading)
    for label, shown, ok in targets:
        say(f"  {label:<58} {shown:<{width}} {verdict(ok)}")
    code1 = code_fingerprint()
    if code1.rsplit(" ", 1)[1] != code0.rsplit(" ", 1)[1]:
        say(f"\n  !! the library changed during this run: now {code1}; figures mix versions")
    say(f"\npeak RSS of this driver process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
        f"total wall time {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
