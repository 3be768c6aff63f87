"""Issue 15 benchmark: peak memory of `rebuild` and `episode --json`, and the state cache's size.

    python benchmarks/bench_episode_mem.py [N ...]    (default: 50000 200000 attempts)

For each N, builds one run of N attempts (at most 50 steps, a prompt ref on every attempt and an
output ref on every third, one rewind half way so there are 2 branches), then runs, each in a
fresh child process (peak RSS = the child's VmHWM, read by a small trampoline):

* ``objstore runs``                                     (opening the store: the engine's own floor,
                                                         measured on the second open — the first writes
                                                         the checkpoint a fresh store lacks)
* ``objstore rebuild``                                  (the state cache from nothing)
* ``objstore episode RUN --all-branches --json``        (served from the cache; output to /dev/null)
* ``objstore episode RUN --all-branches --json --source refold``

and prints the peak RSS of each, the state cache's bytes after the rebuild (state.db plus its
-wal and -shm) against the log's (sum of log/*.seg bytes), and the idle interpreter's RSS
(``python -c 'import objstore.cli'``) as the floor. Memory that does not grow with N shows as
equal peaks at 50 k and 200 k. The store lives under $BENCH_DIR (default: the temp directory).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from objstore import RunLog, Store  # noqa: E402

# Runs a command and prints its peak resident set (VmHWM of the child, in kB) on stderr's last line.
TRAMPOLINE = r"""
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
peak = 0
while True:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
    except OSError:
        pass
    try:
        p.wait(timeout=0.02)
        break
    except subprocess.TimeoutExpired:
        pass
import resource
ru = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB on Linux; the child's own peak
sys.stderr.write(f"\npeak_kb {max(peak, ru)} rc {p.returncode}\n")
"""


def build(path: str, n: int) -> str:
    log = RunLog(Store.init(path, fsync="off"))
    run = log.start_run("mem", subject="bench")
    half = n // 2
    blob_p = log.put_blob(b"p" * 64)
    k = 0
    for branch in range(2):
        count = half if branch == 0 else n - half
        done = 0
        while done < count:
            with log.store.batch():
                for _ in range(min(5000, count - done)):
                    out = log.put_blob(b"o%d" % k) if k % 3 == 0 else None
                    log.record_attempt(run, step=k % 50, attempt=k // 50, state="failed" if k % 7 == 0 else "succeeded",
                                       prompt=blob_p, output=out, usage={"in": k % 1000, "out": 17})
                    k += 1
                    done += 1
        if branch == 0:
            log.rewind(run, half // 2, reason="bench rewind")
    log.store.engine.close()
    return run


def peak(cmd: list[str]) -> tuple[int, float]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", TRAMPOLINE, *cmd], capture_output=True, text=True)
    dt = time.perf_counter() - t
    last = p.stderr.strip().splitlines()[-1].split()
    if last[0] != "peak_kb" or last[3] != "0":
        raise SystemExit(f"{cmd}: {p.stderr}")
    return int(last[1]) // 1024, dt


def sizes(path: str) -> tuple[int, int]:
    seg = sum(os.path.getsize(os.path.join(path, "log", f)) for f in os.listdir(os.path.join(path, "log")) if f.endswith(".seg"))
    state = sum(os.path.getsize(os.path.join(path, "state.db" + s)) for s in ("", "-wal", "-shm")
                if os.path.exists(os.path.join(path, "state.db" + s)))
    return seg, state


def main(ns: list[int]) -> None:
    base = tempfile.mkdtemp(prefix="epmem-", dir=os.environ.get("BENCH_DIR"))
    obj = [sys.executable, "-m", "objstore"]
    floor, _ = peak([sys.executable, "-c", "import cli.main"])
    print(f"idle interpreter with the CLI imported: {floor} MB")
    print(f"{'attempts':>9} {'open MB':>7} {'rebuild MB':>10} {'episode MB':>10} {'refold MB':>9} {'log MB':>7} {'cache MB':>8} {'cache/log':>9}  times (s)")
    try:
        for n in ns:
            path = os.path.join(base, f"s{n}")
            run = build(path, n)
            peak([*obj, "--store", path, "runs"])  # the first open writes the checkpoint a fresh store lacks
            op, _ = peak([*obj, "--store", path, "runs"])
            rb, t_rb = peak([*obj, "--store", path, "rebuild"])
            seg, state = sizes(path)
            ep, t_ep = peak([*obj, "--store", path, "episode", run, "--all-branches", "--json"])
            rf, t_rf = peak([*obj, "--store", path, "episode", run, "--all-branches", "--json", "--source", "refold"])
            print(f"{n:>9} {op:>7} {rb:>10} {ep:>10} {rf:>9} {seg / 2**20:>7.1f} {state / 2**20:>8.1f} {state / seg:>9.2f}  "
                  f"rebuild {t_rb:.1f} episode {t_ep:.1f} refold {t_rf:.1f}")
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [50_000, 200_000])
