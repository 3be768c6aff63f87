"""Peak memory of the reading commands on one long run (issue 15), and the state cache's size against the log.

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_memory.py                        # 1 run x 1 000 000 attempts (the target)
    .venv/bin/python benchmarks/bench_memory.py --attempts 200000      # the same shape at 200 k
    .venv/bin/python benchmarks/bench_memory.py --scale 0.05           # smoke: 50 000 attempts
    BENCH_DIR=/mnt/big .venv/bin/python benchmarks/bench_memory.py

Options: --attempts (1000000) attempts in the run; --scale (BENCH_SCALE, 1.0) multiplies it; --steps (50) at most
this many steps; --reps (BENCH_REPS, 1) runs of every command (the peak over them is the figure); --interval (0.01)
seconds between samples; --timeout (1800) seconds per command; --fresh-blobs (off: the output refs point at a pool of
1000 2 KB blobs; on: a fresh 2 KB blob per output, as bench_commit's workload, a much bigger store); --rebuild-store
(build again even if cached); --seed (1).

The store: one run, ``--attempts`` attempt records over at most ``--steps`` steps, 2 branches: half of the attempts on
branch 0, then ``rewind`` to the middle of branch 0 (branch 1, live), then the other half on branch 1. Every attempt
has a prompt ref (one of 50 shared prompt blobs) and every third an output ref; usage and context maps as in
bench_verify. Built once through the public API with fsync="off", 1000 attempts per commit, and cached under
$BENCH_DIR/bench-memory-cache/ (keyed by attempts, steps, blobs, seed and the store format of the objstore imported;
a store is used only if its build finished: a ``complete.json`` beside it). Building 1 M attempts takes minutes.

Each command runs as a fresh process, output to /dev/null, in this order (the state cache files are removed before
``rebuild``): ``rebuild``; ``episode RUN --json`` (live branch, served from the cache); ``episode RUN --all-branches
--json`` (context); ``log RUN -n 10``; ``verify`` (with its state check, as an auditor runs it); ``verify --no-state``
(context); and the bare interpreter ``python -c 'import objstore_cli.main'`` as the floor.

Memory: a sampler in this driver reads every ``--interval`` s the ``Pss`` line of /proc/<pid>/smaps_rollup of the
command and of every descendant (its workers), keeps each process's own peak, and reports the SUM OF THOSE PEAKS (the
target's figure), beside the peak of the instantaneous sum and the processes seen. Where smaps_rollup cannot be read
it falls back to VmHWM (kernel-tracked peak RSS) from /proc/<pid>/status, and says so. Sampling can miss a peak
shorter than the interval; VmHWM of the command's own process (read at each sample) is printed as a cross-check.

Targets (issue 15): peak memory <= 256 MB each for verify, rebuild, episode --json and log -n 10 on 1 run x 1 M attempts,
<= 50 steps, 2 branches (MB = 10^6 bytes here, as in the issue; MiB printed too); state cache (state.db and its -wal,
-shm) after the rebuild <= 0.5x the log (log/ directory bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_verify import BASELINE, PY, Workload, child_env, code_fingerprint, dir_bytes, env, say, verdict  # noqa: E402

from objstore import RunLog, Store  # noqa: E402

LIMIT = 256 * 10**6
CACHE_VERSION = 1


# -- the store ------------------------------------------------------------------------------------------------
def store_format():
    """The store format the imported objstore writes (part of the cache key: a format change builds anew)."""
    try:
        from objstore.storage import store as _store

        return str(getattr(_store, "FORMAT_VERSION", "?"))
    except Exception:
        return "?"


def build(path, attempts, steps, fresh_blobs, seed):
    """One run, 2 branches, `attempts` attempts over <= `steps` steps (see the module docstring). Returns facts."""
    w = Workload(seed, 2048)
    t0 = time.perf_counter()
    log = RunLog(Store.init(path, fsync="off"))
    run = "mem"
    with log.store.batch():
        log.start_run(run)
        prompts = [log.put_blob(w.blob(f"prompt-{i}")) for i in range(50)]
        pool = [] if fresh_blobs else [log.put_blob(w.blob(f"out-{i}")) for i in range(1000)]
    half = attempts // 2
    per_step = max(1, -(-half // steps))
    record_attempt, put_blob, batch = log.record_attempt, log.put_blob, log.store.batch
    ctx, usage, npool = w.ctx, w.usage, w.pool
    done = 0
    next_report = time.perf_counter() + 15
    for branch_part, count in ((0, half), (1, attempts - half)):
        if branch_part == 1:
            view = log.view(run)
            tip = len(log.own_records(view, view.live)) - 1
            log.rewind(run, tip // 2, reason="bench_memory: second branch")
        for lo in range(0, count, 1000):
            with batch():
                for j in range(lo, min(lo + 1000, count)):
                    step = min(steps - 1, j // per_step)
                    k = done + j - lo
                    out = None
                    if j % 3 == 0:
                        out = put_blob(w.blob(f"o-{branch_part}-{j}")) if fresh_blobs else pool[k % len(pool)]
                    record_attempt(run, step=step, attempt=j % per_step, state="failed" if j % 5 == 4 else "succeeded",
                                   prompt=prompts[step % len(prompts)], output=out, usage=usage[k % npool],
                                   context=ctx[(k * 7) % npool])
            done += min(lo + 1000, count) - lo
            if time.perf_counter() > next_report:
                el = time.perf_counter() - t0
                say(f"  .. {time.strftime('%H:%M:%S')} building: {done:,}/{attempts:,} attempts ({done / el:,.0f} rec/s)")
                next_report = time.perf_counter() + 15
    view = log.view(run)
    facts = {"run": run, "attempts": attempts, "branches": len(view.heads), "steps": steps, "fresh_blobs": fresh_blobs,
             "seconds": time.perf_counter() - t0, "format": store_format()}
    log.store.engine.close()
    return facts


def cached_store(a):
    base = os.path.join(os.environ.get("BENCH_DIR") or tempfile.gettempdir(), "bench-memory-cache")
    key = f"a{a.attempts}-s{a.steps}-{'fresh' if a.fresh_blobs else 'pool'}-seed{a.seed}-f{store_format()}-v{CACHE_VERSION}"
    d = os.path.join(base, key)
    done = os.path.join(d, "complete.json")
    path = os.path.join(d, "store")
    if os.path.exists(done) and not a.rebuild_store:
        with open(done) as f:
            facts = json.load(f)
        say(f"  store: cached {path} ({facts['attempts']:,} attempts, {facts['branches']} branches, built in "
            f"{facts['seconds']:.0f} s)")
        return path, facts
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    say(f"  store: building {path} ...")
    facts = build(path, a.attempts, a.steps, a.fresh_blobs, a.seed)
    with open(done, "w") as f:
        json.dump(facts, f)
    say(f"  store: built {facts['attempts']:,} attempts, {facts['branches']} branches in {facts['seconds']:.1f} s "
        f"({facts['attempts'] / facts['seconds']:,.0f} rec/s, fsync=off)")
    return path, facts


def state_files(path):
    db = os.path.join(path, "state.db")
    return [db + x for x in ("", "-wal", "-shm")]


def state_bytes(path):
    return sum(os.path.getsize(p) for p in state_files(path) if os.path.exists(p))


# -- measuring ------------------------------------------------------------------------------------------------
def _children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _pss_kb(pid):
    """(Pss kB from smaps_rollup, or None; VmHWM kB from status, or None)."""
    pss = hwm = None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
                    break
    except (OSError, ValueError, IndexError):
        pass
    return pss, hwm


class Measured:
    def __init__(self):
        self.peaks = {}  # pid -> peak kB (Pss, or VmHWM where Pss was unreadable)
        self.fallback = set()  # pids measured by VmHWM
        self.sum_peak = 0  # peak of the instantaneous sum, kB
        self.root_hwm = 0  # VmHWM of the command's own process, kB
        self.samples = 0
        self.wall = 0.0
        self.rc = None
        self.killed = None
        self.err = ""

    @property
    def sum_of_peaks(self):
        return sum(self.peaks.values()) * 1024


def measure(cmd, interval, timeout, env_):
    """Run cmd (stdout to /dev/null) and sample the PSS of its process tree until it exits."""
    m = Measured()
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env_,
                         start_new_session=True)
    done = threading.Event()

    def sample():
        while True:
            total = 0
            todo = [p.pid]
            while todo:
                q = todo.pop()
                pss, hwm = _pss_kb(q)
                if q == p.pid and hwm is not None:
                    m.root_hwm = max(m.root_hwm, hwm)
                val = pss
                if val is None and hwm is not None:
                    val = hwm
                    m.fallback.add(q)
                if val is not None:
                    m.peaks[q] = max(m.peaks.get(q, 0), val)
                    total += val
                todo.extend(_children(q))
            m.sum_peak = max(m.sum_peak, total)
            m.samples += 1
            if time.perf_counter() - t0 > timeout and m.killed is None:
                m.killed = f"timeout after {timeout:.0f} s"
                os.killpg(p.pid, signal.SIGKILL)  # its own session; the leader is not reaped yet
            if done.wait(interval):
                return

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        # wait without reaping: the sampler can still read the exited leader's /proc entry until it is reaped
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        m.wall = time.perf_counter() - t0
        done.set()
        th.join()
        m.rc = p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err.seek(0)
    m.err = err.read().decode("utf-8", "replace")
    err.close()
    return m


def mb(b):
    return b / 10**6


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--attempts", type=int, default=1_000_000)
    p.add_argument("--scale", type=float, default=env("BENCH_SCALE", 1.0, float))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--reps", type=int, default=env("BENCH_REPS", 1))
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--fresh-blobs", action="store_true")
    p.add_argument("--rebuild-store", action="store_true")
    p.add_argument("--seed", type=int, default=env("BENCH_SEED", 1))
    a = p.parse_args(argv)
    a.attempts = max(1000, int(a.attempts * a.scale))
    return a


def main(argv):
    a = parse_args(argv)
    t_all = time.perf_counter()
    say(f"bench_memory: 1 run x {a.attempts:,} attempts, <= {a.steps} steps, 2 branches; {a.reps} rep(s); sampling every "
        f"{a.interval * 1000:.0f} ms; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    say(f"  code: {code_fingerprint()}")
    path, facts = cached_store(a)
    run = facts["run"]
    scratch = tempfile.mkdtemp(prefix="bench-memory-", dir=os.environ.get("BENCH_DIR"))
    env_ = child_env(scratch)

    def commands(path):
        obj = [PY, "-m", "objstore", "--store", path]
        return [("rebuild", obj + ["rebuild"], True),
                ("episode --json", obj + ["episode", run, "--json"], True),
                ("episode --all-branches --json", obj + ["episode", run, "--all-branches", "--json"], False),
                ("log -n 10", obj + ["log", run, "-n", "10", "--no-pager"], True),
                ("verify", obj + ["verify"], True),
                ("verify --no-state", obj + ["verify", "--no-state"], False),
                ("python import baseline", BASELINE, False)]

    cmds = commands(path)
    # Warm-up, not counted: every command once on a 1 000-attempt store, so the children's bytecode cache (a fresh
    # prefix: this environment may forbid writing .pyc next to the sources) is filled before anything is measured.
    results = {name: [] for name, _, _ in cmds}
    targets = []
    state_size = None
    try:
        tiny = os.path.join(scratch, "tiny")
        build(tiny, 1000, a.steps, False, a.seed)
        for name, cmd, _ in commands(tiny):
            m = measure(cmd, a.interval, a.timeout, env_)
            if m.rc != 0:
                say(f"  !! warm-up {name} on a 1 000-attempt store: exit {m.rc}: {m.err.strip()[-500:]}")
        for r in range(a.reps):
            for name, cmd, _ in cmds:
                if name == "rebuild":
                    for f in state_files(path):
                        if os.path.exists(f):
                            os.unlink(f)
                m = measure(cmd, a.interval, a.timeout, env_)
                results[name].append(m)
                if name == "rebuild" and m.rc == 0:
                    state_size = state_bytes(path)
                fb = f"; VmHWM used for {len(m.fallback)} process(es)" if m.fallback else ""
                say(f"  .. rep {r + 1} {name}: exit {m.rc}, wall {m.wall:.2f} s, sum of PSS peaks {mb(m.sum_of_peaks):.1f} MB"
                    f" over {len(m.peaks)} process(es) ({m.samples} samples){fb}; peak of the summed PSS "
                    f"{mb(m.sum_peak * 1024):.1f} MB; VmHWM of the command {mb(m.root_hwm * 1024):.1f} MB")
                if m.rc != 0:
                    say(f"    {m.killed or 'failed'}: " + m.err.strip()[-800:].replace("\n", "\n    "))
        logb = dir_bytes(os.path.join(path, "log"))
        say(f"\n  peak memory per command (max over reps; MB = 10^6 B): target <= {mb(LIMIT):.0f} MB")
        say(f"  {'command':<32} {'sum PSS peaks':>14} {'MiB':>8} {'summed peak':>12} {'VmHWM':>8} {'procs':>6} {'wall s':>8}")
        for name, _, is_target in cmds:
            ms = results[name]
            ok_runs = [m for m in ms if m.rc == 0]
            if not ok_runs:
                say(f"  {name:<32} failed (exit {ms[-1].rc})")
                if is_target:
                    targets.append((f"{name}: peak memory <= 256 MB", "failed", False))
                continue
            peak = max(m.sum_of_peaks for m in ok_runs)
            say(f"  {name:<32} {mb(peak):>11.1f} MB {peak / 2**20:>8.1f} {mb(max(m.sum_peak for m in ok_runs) * 1024):>9.1f} MB "
                f"{mb(max(m.root_hwm for m in ok_runs) * 1024):>5.1f} MB {max(len(m.peaks) for m in ok_runs):>6} "
                f"{max(m.wall for m in ok_runs):>8.2f}")
            if is_target:
                targets.append((f"{name}: peak memory <= 256 MB", f"{mb(peak):.1f} MB", peak <= LIMIT))
        if state_size is not None:
            ratio = state_size / logb
            say(f"\n  state cache after rebuild: {state_size:,} B (state.db + -wal + -shm) vs the log {logb:,} B = {ratio:.3f}x")
            targets.append(("state cache after a rebuild <= 0.5x the log", f"{ratio:.3f}x", ratio <= 0.5))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"\nTargets ({a.attempts:,} attempts; issue 15's figure is at 1 000 000):")
    for label, shown, ok in targets:
        say(f"  {label:<48} {shown:<14} {verdict(ok)}")
    say(f"\ntotal wall time {time.perf_counter() - t_all:.0f} s (store cached under {os.path.dirname(path)})")


if __name__ == "__main__":
    main(sys.argv[1:])
