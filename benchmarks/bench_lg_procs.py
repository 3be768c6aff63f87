"""LangGraph from 8 processes, each on its own thread: one objstore store against one SQLite database
(SqliteSaver), total super-steps per second (issue 16, reported measure; today 0.54x).

Run (from the repository root, with the project venv):

    .venv/bin/python benchmarks/bench_lg_procs.py                      # 8 processes, 200 steps each, 5 reps
    .venv/bin/python benchmarks/bench_lg_procs.py --procs 4 --steps 500
    .venv/bin/python benchmarks/bench_lg_procs.py --reps 1 --steps 20  # smoke
    BENCH_DIR=/mnt/disk .venv/bin/python benchmarks/bench_lg_procs.py

What it measures
----------------
The graph is benchmarks/lg_work.py's ``loop_graph`` (a -> b -> a ..., one task per super-step, a fresh 1 KB text
payload per step), run with ``durability="sync"``: each super-step is one ``put`` of a checkpoint and one
``put_writes`` of its task's writes, each written before the next step, as in bench_langgraph.py's loop row. The
savers are opened by lg_work.open_sync: ``ObjstoreSaver(objstore.open_store(DIR/store))`` with the default fsync
policy (full; OBJSTORE_FSYNC is removed from the children's environment) and ``SqliteSaver`` on
``sqlite3.connect(DIR/checkpoints.sqlite, check_same_thread=False)`` (as SqliteSaver.from_conn_string opens it, so
SQLite's default busy timeout of 5 s), ``setup()`` (WAL) and ``PRAGMA synchronous=FULL``.

Per repetition and saver: a fresh directory; the driver first runs one 2-step graph on thread ``setup`` (creating the
store or the tables, registering the record kinds) so the processes do not race to create them; then --procs
processes (benchmarks/gang.py: each imports, opens its saver, compiles the graph, says ready; all start on go),
process i runs --steps super-steps on thread ``t<i>``. Total steps/s = all steps / (last end - first start). The two
savers alternate, order reversed on alternate repetitions; per-rep ratio objstore/SqliteSaver, min/median/max. Each
repetition prints its load average and fsync latency (one os.fdatasync of a 4 KiB write in the scratch directory).

Unless --no-profile: one more objstore round (not timed) with process 0 under ``py-spy record --idle -f raw``: the
shares of its samples inside the saver's put and put_writes (LangGraph calls them from a thread of its own) spent
waiting for the writer lock (the flock in ``_os_lock``; the in-process ``_wlock`` the saver's threads wait on
first) and in fdatasync, and
the top functions.

Aim (issue 16): objstore >= 1.5x SqliteSaver's total steps/s (median per-rep ratio); main before the per-run format:
0.54x.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gang import PY, fmt3, fsync_probe, loadavg, lock_wait_marks, mmm, pyspy_shares, run_gang, wait_for_go  # noqa: E402

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
SAVERS = ("objstore", "sqlite")
NAMES = {"objstore": "ObjstoreSaver", "sqlite": "SqliteSaver"}
SAVER_CALLS = ("ObjstoreSaver.put", "ObjstoreSaver.put_writes")


def _steps(app, config):
    """The timed graph run (its name marks the samples of a py-spy profile)."""
    return app.invoke({"n": 0, "payload": ""}, config, durability="sync")


def child_main(a):
    from lg_work import cfg, loop_graph, open_sync

    saver, facts = open_sync(a["saver"], a["dir"])
    app = loop_graph(a["steps"]).compile(checkpointer=saver)
    wait_for_go()
    t0 = time.monotonic()
    out = _steps(app, cfg(a["thread"], a["steps"]))
    t1 = time.monotonic()
    assert out["n"] == a["steps"], out["n"]
    print(json.dumps({"t0": t0, "t1": t1, "n": a["steps"], **facts}), flush=True)


def child_env():
    env = dict(os.environ)
    env.pop("OBJSTORE_FSYNC", None)  # objstore's default policy: full
    return env


def one_round(scratch, saver, procs, steps, wrap0=()):
    d = tempfile.mkdtemp(prefix=f"{saver}-", dir=scratch)
    env = child_env()
    try:
        setup = subprocess.run([PY, os.path.join(os.path.dirname(HERE), "lg_work.py"), "loop",
                                json.dumps({"saver": saver, "dir": d, "steps": 2, "thread": "setup"})],
                               capture_output=True, text=True, env=env, check=False)
        if setup.returncode != 0:
            raise SystemExit(f"setup of {saver} failed:\n{setup.stderr[-3000:]}")
        cmds = [[*(wrap0 if i == 0 else ()), PY, HERE, "--child", json.dumps({"saver": saver, "dir": d, "steps": steps, "thread": f"t{i}"})]
                for i in range(procs)]
        res, rate, wall = run_gang(cmds, env=env)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    facts = {k: v for k, v in res[0].items() if k not in ("t0", "t1", "n")}
    return rate, wall, facts


def profile_objstore(scratch, procs, steps):
    """One untimed objstore round with process 0 under py-spy --idle: where its wall time goes."""
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    if not os.path.exists(pyspy):
        print("  (py-spy not found: pip install py-spy into the venv; no profile)")
        return
    raw = os.path.join(os.environ.get("BENCH_DIR") or tempfile.gettempdir(), f"lg-procs-p0-{os.getpid()}.txt")
    rate, _, _ = one_round(scratch, "objstore", procs, steps, wrap0=(pyspy, "record", "--idle", "-r", "200", "-f", "raw", "-o", raw, "--"))
    marks = lock_wait_marks()
    # LangGraph calls the saver from a thread of its own executor: the saver's samples are not under _steps.
    wall, _, _, _ = pyspy_shares(raw, "_steps", [])
    total, shares, top, incl = pyspy_shares(raw, SAVER_CALLS, marks)
    print(f"  py-spy --idle, process 0 of {procs} on ObjstoreSaver ({rate:,.0f} steps/s in that round, not a timed figure): "
          f"{wall} samples of the graph run (main thread), {total} inside the saver's put/put_writes "
          f"({100 * total / max(wall, 1):.0f} % of the run's wall time); of the latter:")
    for label, v in shares.items():
        print(f"    {label:<30} {100 * v:5.1f} % of them")
    print("    top functions, inclusive: " + "; ".join(f"{k} {100 * v:.1f} %" for k, v in incl[:12]))
    print("    top leaf frames: " + "; ".join(f"{k} {100 * v:.1f} %" for k, v in top[:6]))
    print(f"    raw profile kept: {raw}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=8, help="processes, each on its own thread (8)")
    ap.add_argument("--steps", type=int, default=200, help="super-steps per process (200)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (5)")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                    help="after the reps, one untimed objstore round with process 0 under py-spy --idle (on)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    if a.child:
        child_main(json.loads(a.child))
        return 0
    scratch = tempfile.mkdtemp(prefix="lg-procs-", dir=os.environ.get("BENCH_DIR"))
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"bench_lg_procs: code {rev or '?'}, {os.cpu_count()} CPUs, scratch {scratch}, {a.procs} processes x {a.steps} "
          f"super-steps (durability sync: one put + one put_writes each), {a.reps} reps, {loadavg()}")
    rates = {s: [] for s in SAVERS}
    try:
        for r in range(a.reps):
            lat = fsync_probe(scratch)
            facts = {}
            for s in SAVERS if r % 2 == 0 else SAVERS[::-1]:
                rate, _, facts[s] = one_round(scratch, s, a.procs, a.steps)
                rates[s].append(rate)
            print(f"  rep {r}: ObjstoreSaver {rates['objstore'][-1]:,.0f} steps/s  SqliteSaver {rates['sqlite'][-1]:,.0f} steps/s  "
                  f"ratio {rates['objstore'][-1] / rates['sqlite'][-1]:.2f}  | fsync {1000 * lat:.2f} ms  {loadavg()}  "
                  f"| {json.dumps(facts)}", flush=True)
        if a.profile:
            profile_objstore(scratch, a.procs, a.steps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for s in SAVERS:
        print(f"  {NAMES[s]:<14} total steps/s min/median/max {fmt3(rates[s], '{:,.0f}')}")
    ratios = [x / y for x, y in zip(rates["objstore"], rates["sqlite"], strict=True)]
    met = mmm(ratios)[1] >= 1.5
    print(f"  objstore / SqliteSaver per rep min/median/max {fmt3(ratios)}   aim >= 1.5x (main before per-run logs: 0.54x): "
          f"{'met' if met else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
