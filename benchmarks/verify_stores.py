"""bench_verify's stores: built through the public API only (RunLog / Store.batch / record_attempt / put_blob), and the same
canonical bytes exported into a bare git repository for git fsck. Other benchmarks take Workload and build_store from
bench_verify, which re-exports them."""

from __future__ import annotations

import random
import subprocess
import time

from bench_commit import VOCAB  # (one text vocabulary for every benchmark's blobs)

from objstore import RunLog, Store

TOOLS = ["search", "fetch_order", "send_email", "sql", "python"]


def progress(msg):
    print(f"  .. {time.strftime('%H:%M:%S')} {msg}", flush=True)


class Workload:
    """Deterministic, cheap record bodies: a pool of contexts/usages cycled, fresh text blobs on request."""

    def __init__(self, seed=1, blob_size=1024, pool=997):
        rnd = random.Random(seed)
        self.rnd = random.Random(seed + 1)
        self.blob_size = blob_size
        self.ctx = [{"ticket": f"T-{rnd.randint(10000, 99999)}", "path": rnd.choice("ABC"), "tool": rnd.choice(TOOLS),
                     "trace": rnd.randbytes(16).hex()} for _ in range(pool)]
        self.usage = [{"input_tokens": rnd.randint(50, 4000), "output_tokens": rnd.randint(5, 800)} for _ in range(pool)]
        self.pool = pool

    def blob(self, tag: str) -> bytes:
        words = self.rnd.choices(VOCAB, k=self.blob_size // 5)
        return (f"#{tag} " + " ".join(words)).encode()[: self.blob_size]


def build_store(path, *, runs, per_run, per_commit, steps=50, blob_every=3, blob_size=1024, round_robin=False,
                shared_prompts=0, seed=1, fsync="off", label="store", run_fmt="r{:05d}", fresh_as="prompt"):
    """Build a store through the public API (RunLog / Store.batch / record_attempt / put_blob).

    ``runs`` runs of ``per_run`` attempt records each; every commit holds ``per_commit`` records of one run.
    round_robin: commits visit the runs in turn (run 0's first commit, run 1's first, ...); otherwise each run is
    written whole before the next. Step of record j = j * steps // per_run (so ``steps`` steps per run), attempt =
    its index within the step; every fifth attempt failed. A fresh text blob on every ``blob_every``-th record
    (0: none); with ``shared_prompts`` > 0 the other records point at one of that many shared prompt blobs.
    fresh_as="output": the fresh blob is the record's ``output`` and every record keeps its shared prompt ref (issue
    15's workload: a prompt ref on every record, a fresh blob on every third).
    Returns a dict of facts (run names, counts, build time)."""
    w = Workload(seed, blob_size)
    t0 = time.perf_counter()
    log = RunLog(Store.init(path, fsync=fsync))
    names = [run_fmt.format(i) for i in range(runs)]
    shared = []
    with log.store.batch():
        for i in range(shared_prompts):
            shared.append(log.put_blob(w.blob(f"shared-{i}")))
        if len(names) == 1:
            log.start_run(names[0])
    if len(names) > 1:  # a batch writes one run's log (format 6): each run is started by its own commit
        for r in names:
            log.start_run(r)
    record_attempt, put_blob, batch = log.record_attempt, log.put_blob, log.store.batch
    ctx, usage, pool = w.ctx, w.usage, w.pool
    nblobs = 0
    commits = 0
    per_commit = max(1, min(per_commit, per_run))
    chunks = [(c, min(c + per_commit, per_run)) for c in range(0, per_run, per_commit)]
    order = ([(ri, ch) for ch in chunks for ri in range(runs)] if round_robin
             else [(ri, ch) for ri in range(runs) for ch in chunks])
    total = runs * per_run
    done = 0
    next_report = time.perf_counter() + 15
    for ri, (lo, hi) in order:
        run = names[ri]
        with batch():
            for j in range(lo, hi):
                step = j * steps // per_run
                attempt = j - (-(-step * per_run // steps))
                k = ri * per_run + j
                prompt = output = None
                fresh = blob_every and j % blob_every == 0
                if fresh and fresh_as == "prompt":
                    prompt = put_blob(w.blob(f"{run}-{j}"))
                    nblobs += 1
                elif shared:
                    prompt = shared[step % len(shared)]
                if fresh and fresh_as == "output":
                    output = put_blob(w.blob(f"{run}-{j}"))
                    nblobs += 1
                record_attempt(run, step=step, attempt=attempt, state="failed" if j % 5 == 4 else "succeeded",
                               prompt=prompt, output=output, usage=usage[k % pool], context=ctx[(k * 7) % pool])
        commits += 1
        done += hi - lo
        if time.perf_counter() > next_report:
            el = time.perf_counter() - t0
            progress(f"building {label}: {done:,}/{total:,} records ({done / el:,.0f} rec/s)")
            next_report = time.perf_counter() + 15
    dt = time.perf_counter() - t0
    log.store.engine.close()
    return {"log": None, "runs": names, "records": total, "blobs": nblobs + len(shared), "commits": commits,
            "seconds": dt, "rate": total / dt, "objects": total + runs + nblobs + len(shared)}


def public_objects(log):
    """Every object a benchmark store holds, found through the public API only (the engine is being rewritten):
    per run, the records of every branch (run_started included), each preceded by the blobs it references
    (prompt, output) the first time they are seen: roughly the order they were written. Fork objects are not
    reached (the benchmark stores have none); verify's own object count is compared where it matters."""
    seen = set()
    out = []
    for run in log.store.run_names():
        for r in log.records(run, all_branches=True):
            body = r.body if isinstance(r.body, dict) else {}
            for key in ("prompt", "output"):
                ref = body.get(key)
                if isinstance(ref, bytes) and ref not in seen:
                    seen.add(ref)
                    out.append(ref)
            if r.id not in seen:
                seen.add(r.id)
                out.append(r.id)
    return out


def canonical_bytes(path):
    """(objects, canonical bytes) of every object in the store (public_objects, bytes by Store.get_raw)."""
    log = RunLog(Store.open(path))
    ids = public_objects(log)
    size = sum(len(log.store.get_raw(oid)) for oid in ids)
    log.store.engine.close()
    return len(ids), size


def export_to_git(store_path, repo):
    """Every object's canonical bytes as a git blob (one commit, a tree fanned out by id), then repack -adf.
    (fast-import writes them into a pack rather than loose; after ``repack -adf`` the repository is the same.)"""
    log = RunLog(Store.open(store_path))
    store = log.store
    t0 = time.perf_counter()
    ids = public_objects(log)  # in write order: consecutive reads of one record block hit the block cache
    subprocess.run(["git", "init", "-q", "--bare", repo], check=True)
    p = subprocess.Popen(["git", "-C", repo, "fast-import", "--quiet"], stdin=subprocess.PIPE)
    out = p.stdin
    nbytes = 0
    for i, oid in enumerate(ids, 1):
        data = store.get_raw(oid)
        nbytes += len(data)
        out.write(b"blob\nmark :%d\ndata %d\n" % (i, len(data)))
        out.write(data)
        out.write(b"\n")
    out.write(b"commit refs/heads/main\nmark :%d\ncommitter bench <bench@example.com> 1764400000 +0000\ndata 6\nbench\n"
              % (len(ids) + 1))
    for i, oid in enumerate(ids, 1):
        h = oid.hex()
        out.write(b"M 100644 :%d %s/%s\n" % (i, h[:2].encode(), h[2:].encode()))
    out.write(b"\n")
    out.close()
    if p.wait() != 0:
        raise RuntimeError("git fast-import failed")
    t1 = time.perf_counter()
    subprocess.run(["git", "-C", repo, "repack", "-adf", "-q"], check=True)
    t2 = time.perf_counter()
    store.engine.close()
    cnt = subprocess.run(["git", "-C", repo, "count-objects", "-v"], check=True, capture_output=True, text=True).stdout
    info = dict(ln.split(": ", 1) for ln in cnt.splitlines() if ": " in ln)
    return {"objects": len(ids), "git_objects": int(info.get("in-pack", 0)) + int(info.get("count", 0)),
            "bytes": nbytes, "pack_kib": int(info.get("size-pack", 0)), "fast_import_s": t1 - t0, "repack_s": t2 - t1}
