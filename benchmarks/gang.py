"""Gangs of child processes started together, for the multi-process benchmarks (bench_run_writers.py,
bench_lg_procs.py), and the per-repetition context every benchmark prints beside its ratios.

A gang: every child starts, imports, opens what it writes to, prints one line ``ready`` and waits for a line ``go``
on its stdin; once all are ready the driver writes ``go`` to each; each child then prints one JSON line (its last
line of stdout) with ``t0`` and ``t1``: CLOCK_MONOTONIC (``time.monotonic``, one clock for every process of the
machine) at the start and the end of its timed work, and ``n``, the units of work it did. The aggregate rate is
sum(n) / (max t1 - min t0): from the first child's start to the last child's end, so a straggler counts.
"""

import json
import os
import statistics
import subprocess
import sys
import time

PY = sys.executable


def mmm(xs):
    """(min, median, max)."""
    return min(xs), statistics.median(xs), max(xs)


def fmt3(xs, f="{:.2f}"):
    lo, md, hi = mmm(xs)
    return f"{f.format(lo)} / {f.format(md)} / {f.format(hi)}"


def loadavg():
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def fsync_probe(d):
    """Seconds of one os.fdatasync after a 4 KiB write, in directory d (the disk swings: printed per rep)."""
    path = os.path.join(d, ".fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"\0" * 4096)
        t = time.perf_counter()
        os.fdatasync(fd)
        return time.perf_counter() - t
    finally:
        os.close(fd)
        os.unlink(path)


class GangFailed(Exception):
    pass


def run_gang(cmds, timeout=1800, env=None):
    """Start every command, wait until all print ``ready``, send ``go``, collect each one's last JSON line.
    Returns (results, aggregate units/s, wall seconds from first start to last end)."""
    procs = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for c in cmds]
    try:
        for p in procs:
            assert p.stdout is not None
            while True:
                line = p.stdout.readline()
                if not line:
                    raise GangFailed(f"a child exited before ready: {p.args}\n{p.communicate()[1][-3000:]}")
                if line.strip() == "ready":
                    break
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        deadline = time.monotonic() + timeout
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise GangFailed(f"child failed ({p.returncode}): {p.args}\n{err[-3000:]}")
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if not lines:
                raise GangFailed(f"child printed no result: {p.args}\n{out[-2000:]}\n{err[-2000:]}")
            results.append(json.loads(lines[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    t0 = min(r["t0"] for r in results)
    t1 = max(r["t1"] for r in results)
    return results, sum(r["n"] for r in results) / (t1 - t0), t1 - t0


def wait_for_go():
    """In a child: say ready, block until the driver says go."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go from the driver")


def frame_fn(frame):
    """The bare function name of a py-spy frame ``Class.func (file:line)``."""
    return frame.split(" (")[0].rsplit(".", 1)[-1]


def pyspy_shares(raw_path, loop_fn, marks):
    """Shares of a py-spy ``--idle -f raw`` profile: for each (label, predicate over a stack's frames) in marks,
    the fraction of the samples whose stack is inside ``loop_fn`` (the timed loop; a function name, bare or
    ``Class.name``, or a tuple of them) that the predicate accepts;
    also the top leaf frames and the top functions by inclusive share (on the stack below loop_fn). Raw lines: ``frame;frame;...;leaf COUNT``, a frame ``func (file:line)``."""
    names = {loop_fn} if isinstance(loop_fn, str) else set(loop_fn)
    total = 0
    hits = dict.fromkeys((m[0] for m in marks), 0)
    leaves: dict = {}
    inclusive: dict = {}
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            frames = stack.split(";")
            at = next((i for i, fr in enumerate(frames) if frame_fn(fr) in names or fr.split(" (")[0] in names), None)
            if at is None:
                continue
            c = int(count)
            total += c
            for label, pred in marks:
                if pred(frames):
                    hits[label] += c
            leaf = frames[-1].split(" (")[0] + " (" + os.path.basename(frames[-1].split(" (")[-1])
            leaves[leaf] = leaves.get(leaf, 0) + c
            for fn in {fr.split(" (")[0] for fr in frames[at + 1:]}:
                inclusive[fn] = inclusive.get(fn, 0) + c
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:8]
    incl = sorted(inclusive.items(), key=lambda kv: -kv[1])[:30]
    share = (lambda v: v / total if total else 0.0)  # noqa: E731
    return total, {k: share(v) for k, v in hits.items()}, [(k, share(v)) for k, v in top], [(k, share(v)) for k, v in incl]


def lock_wait_marks(lock_fn="_os_lock"):
    """py-spy marks for time waiting on the writer lock: a frame ``lock_fn`` (the flock, taken in
    src/objstore/storage/log/local_write.py), and the in-process lock threads of one process wait on first (a leaf
    frame ``Writer.transaction`` at the line of ``self._wlock.acquire``, found in the source: a C call has no frame)."""
    import importlib.util

    spec = importlib.util.find_spec("objstore.storage.log.local_write")
    line = None
    if spec is not None and spec.origin:
        with open(spec.origin) as f:
            line = next((i for i, ln in enumerate(f, 1) if "self._wlock.acquire(" in ln), None)
    at = f"local_write.py:{line})" if line else None

    def flock(frames):
        return any(frame_fn(f) == lock_fn for f in frames)

    def wlock(frames):
        return at is not None and frame_fn(frames[-1]) == "transaction" and frames[-1].endswith(at)

    return [(f"lock wait, flock ({lock_fn})", flock), ("lock wait, in-process (_wlock)", wlock),
            ("lock wait, both", lambda fr: flock(fr) or wlock(fr)),
            ("fdatasync (leaf _sync_upto)", lambda fr: frame_fn(fr[-1]) == "_sync_upto")]
