"""The S3 race against a real SeaweedFS cluster (master, 2 volume servers, filer, 2 gateways; the
``seaweed_cluster`` fixture, one cluster for this module): many writer processes committing through
two gateways to one store, and writers killed with SIGKILL at random moments and between a chunk PUT
and the HEAD swap.

The store is format 7, a HEAD per run (storage.runlogs.bucketlogs): commits to different runs swap different
HEADs and never race; commits to the shared run's branch contend on its HEAD, get StaleBase in the engine and
are re-run on the new head by ``Store.atomically``, within the retry bound, then ``Busy``. What is checked is the
outcome a fresh process reads: every acknowledged record present exactly once, no record twice,
LSNs contiguous, ``verify`` clean, every Busy record absent. No latency is asserted; the figures
(commits/s, Busy count) are printed (``pytest -s``).

The writers are tests/s3/s3_race_writer.py (real OS processes; each prints every acknowledged append
before it starts the next, so what the test reads was acknowledged). The 16-way warm-up probe of the
raw conditional PUT is tests/s3/test_s3_race_probe.py's, not repeated here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import msgspec
from seaweed import environment

import objstore
from objstore.runs.api import RunLog
from objstore.storage.runlogs.bucketlogs import run_prefix
from objstore.storage.s3 import layout as s3layout
from objstore.storage.s3.client import open_bucket
from objstore.storage.s3.layout import HEAD_KEY, TAIL_ENTRIES, chunk_key
from objstore.storage.store import Store

WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_race_writer.py")
WRITERS = 8
PER_RUN = 200  # each writer appends this many records to the shared run and as many to its own
BUSY_SHARE = 0.02  # Busy allowed for at most 2 % of attempts
LANDED_MIN = 190  # each writer lands at least this many of its PER_RUN, per run
KILLED = 4
KILL_AFTER = 50  # a victim is killed once it has acknowledged about this many appends


def _aws(cluster, gateway: int) -> dict[str, str]:
    env = cluster.env()
    env["AWS_ENDPOINT_URL"] = cluster.gateways[gateway]
    return env


def _point(monkeypatch, cluster, gateway: int, cache: str) -> None:
    """This process's next store open goes through ``gateway`` with a fresh, private local cache."""
    for k, v in _aws(cluster, gateway).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", cache)


def _url(cluster, name: str) -> str:
    return f"s3://{cluster.bucket}/{name}-{uuid.uuid4().hex[:8]}"


class Writers:
    """WRITERS writer processes, writer k through gateway k % 2, each with its own cache and stdout file."""

    def __init__(self, cluster, tmp, url: str, shared: str, count: int, n: int = WRITERS, extra: tuple = (),
                 env_extra: dict | None = None) -> None:
        self.dir = tmp
        self.barrier = str(tmp / "go")
        self.outs = [str(tmp / f"w{k}.out") for k in range(n)]
        self.procs = []
        for k in range(n):
            env = dict(os.environ, **_aws(cluster, k % 2), OBJSTORE_CACHE_DIR=str(tmp / f"cache-w{k}"), **(env_extra or {}))
            with open(self.outs[k], "wb") as out, open(str(tmp / f"w{k}.err"), "wb") as err:
                self.procs.append(subprocess.Popen([sys.executable, WRITER, url, shared, str(k), str(count), self.barrier, *extra],
                                                   env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL))

    def lines(self, k: int) -> list[dict]:
        """Writer k's complete lines so far (a line cut by a kill is not one it acknowledged)."""
        with open(self.outs[k], "rb") as f:
            text = f.read().decode()
        return [json.loads(line) for line in text.split("\n")[:-1]]

    def err(self, k: int) -> str:
        with open(str(self.dir / f"w{k}.err"), "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def release(self, timeout: float = 60) -> float:
        """Once every writer has started its own run, let them all go at once; the release time."""
        deadline = time.monotonic() + timeout
        while not all(any("own" in d for d in self.lines(k)) for k in range(len(self.procs))):
            for k, p in enumerate(self.procs):
                assert p.poll() is None, f"writer {k} exited with {p.returncode} before the barrier:\n{self.err(k)}"
            assert time.monotonic() < deadline, "the writers did not start their runs"
            time.sleep(0.02)
        with open(self.barrier, "w"):
            pass
        return time.monotonic()

    def wait(self, ks, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        for k in ks:
            try:
                self.procs[k].wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                raise AssertionError(f"writer {k} did not finish in {timeout:.0f} s") from None
            assert self.procs[k].returncode == 0, f"writer {k} exited with {self.procs[k].returncode}:\n{self.err(k)}"

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


class Outcome:
    """What the writers printed: acknowledged appends by tag, Busy tags, each writer's own run."""

    def __init__(self, writers: Writers) -> None:
        self.acked: dict[str, dict] = {}
        self.busy: list[str] = []
        self.own: dict[int, str] = {}
        self.last: dict[int, str | None] = {}  # each writer's last printed tag (acknowledged or Busy)
        for k in range(len(writers.procs)):
            self.last[k] = None
            for d in writers.lines(k):
                if "own" in d:
                    self.own[k] = d["own"]
                elif "tag" in d:
                    assert d["tag"] not in self.acked, f"writer {k} acknowledged {d['tag']} twice"
                    self.acked[d["tag"]] = d
                    self.last[k] = d["tag"]
                elif "busy" in d and "done" not in d:
                    self.busy.append(d["busy"])
                    self.last[k] = d["busy"]

    def in_flight(self, k: int, count: int) -> str | None:
        """The tag writer k was appending when it was killed (the one after its last printed tag)."""
        order = [f"w{k}-{i}-{which}" for i in range(count) for which in ("shared", "own")]
        last = self.last[k]
        nxt = 0 if last is None else order.index(last) + 1
        return order[nxt] if nxt < len(order) else None


def _records(log: RunLog, runs) -> dict[str, list]:
    return {run: log.records(run, all_branches=True) for run in runs}


def _check_runs(recs: dict[str, list]) -> Counter:
    """LSNs 0..N on branch 0 of every run (nothing else exists); the tags present, counted."""
    tags: Counter = Counter()
    for run, rs in recs.items():
        assert {r.branch for r in rs} == {0}, f"run {run} has branches {sorted({r.branch for r in rs})}"
        assert [r.lsn for r in rs] == list(range(len(rs))), f"run {run}: LSNs are not contiguous"
        assert rs[0].kind == "run_started" and all(r.kind == "task_opened" for r in rs[1:])
        for r in rs[1:]:
            tags[r.body["task"]] += 1
    return tags


def _check_acked(recs: dict[str, list], out: Outcome) -> None:
    """Every acknowledged append is the record the writer was told: its run, LSN and id."""
    by_id = {r.id.hex(): r for rs in recs.values() for r in rs}
    for tag, d in out.acked.items():
        r = by_id.get(d["id"])
        assert r is not None, f"acknowledged {tag} (id {d['id'][:16]}) is not in the store"
        assert (r.run, r.lsn, r.body["task"]) == (d["run"], d["lsn"], tag), f"acknowledged {tag} reads back as {r}"


def _head(cluster, url: str, run: str) -> s3layout.Head:
    """Run ``run``'s log's HEAD object as raw bytes from the bucket, parsed with the engine's own decoder."""
    got = open_bucket_at(cluster, url).get(run_prefix(run) + HEAD_KEY)
    assert got is not None, "HEAD is missing"
    return msgspec.msgpack.decode(got.data, type=s3layout.Head)


def test_eight_writers_two_gateways_nothing_lost_nothing_twice(seaweed_cluster, tmp_path, monkeypatch):
    cluster = seaweed_cluster
    url = _url(cluster, "race")
    _point(monkeypatch, cluster, 0, str(tmp_path / "cache-setup"))
    shared = objstore.open_store(url).start_run(subject="shared")
    ws = Writers(cluster, tmp_path, url, shared, PER_RUN)
    try:
        t0 = ws.release()
        ws.wait(range(WRITERS))
        seconds = time.monotonic() - t0
    finally:
        ws.kill_all()
    out = Outcome(ws)
    attempts = WRITERS * 2 * PER_RUN
    assert len(out.acked) + len(out.busy) == attempts  # every attempt ended one way or the other, once
    print(f"\nS3 race: {WRITERS} writers x {2 * PER_RUN} appends through 2 gateways: {len(out.acked)} acknowledged, "
          f"{len(out.busy)} Busy ({100 * len(out.busy) / attempts:.2f} %), {seconds:.1f} s, {len(out.acked) / seconds:.0f} commits/s")

    _point(monkeypatch, cluster, 1, str(tmp_path / "cache-reader"))  # a fresh open, through the other gateway
    log = objstore.open_store(url, create=False)
    recs = _records(log, [shared, *out.own.values()])
    tags = _check_runs(recs)
    assert [t for t, c in tags.items() if c > 1] == []  # nothing twice
    assert set(tags) == set(out.acked)  # nothing lost, and nothing landed that was not acknowledged
    assert [t for t in out.busy if t in tags] == []  # every Busy commit is absent
    _check_acked(recs, out)
    assert len(recs[shared]) == 1 + sum(1 for t in out.acked if t.endswith("-shared"))
    assert len(out.busy) <= BUSY_SHARE * attempts, f"{len(out.busy)} Busy of {attempts} attempts"
    for k in range(WRITERS):
        for which in ("shared", "own"):
            landed = sum(1 for t in out.acked if t.startswith(f"w{k}-") and t.endswith(f"-{which}"))
            assert landed >= LANDED_MIN, f"writer {k} landed {landed} of {PER_RUN} on its {which} run"
    assert objstore.verify(log) == []
    entries = 0
    for run in [shared, *out.own.values()]:  # each run's HEAD names exactly its records, one entry each
        head = _head(cluster, url, run)
        assert head.n == log.store.logs.run_log(run).refresh(force=True).entry == len(recs[run])
        entries += head.n
    assert entries == 1 + WRITERS + len(out.acked)  # shared start, 8 starts, appends


def test_kill_9_of_four_writers_mid_run_leaves_nothing_half_visible(seaweed_cluster, tmp_path, monkeypatch):
    cluster = seaweed_cluster
    url = _url(cluster, "kill")
    _point(monkeypatch, cluster, 0, str(tmp_path / "cache-setup"))
    shared = objstore.open_store(url).start_run(subject="shared")
    ws = Writers(cluster, tmp_path, url, shared, PER_RUN)
    rng = random.Random()
    victims = list(range(KILLED))  # writers 0..3: two on each gateway
    at = {k: KILL_AFTER + rng.randint(-5, 10) for k in victims}
    try:
        ws.release()
        alive = set(victims)
        deadline = time.monotonic() + 120
        while alive:
            assert time.monotonic() < deadline, f"victims {sorted(alive)} never acknowledged {KILL_AFTER} appends"
            for k in sorted(alive):
                if sum("tag" in d or "busy" in d for d in ws.lines(k)) >= at[k]:
                    time.sleep(rng.uniform(0, 0.1))  # a random moment in the next few appends (each takes tens of ms here)
                    ws.procs[k].send_signal(signal.SIGKILL)
                    ws.procs[k].wait()
                    alive.discard(k)
                assert ws.procs[k].returncode in (None, -signal.SIGKILL), f"victim {k} ended on its own:\n{ws.err(k)}"
            time.sleep(0.002)
        survivors = range(KILLED, WRITERS)
        ws.wait(survivors)  # the survivors finish
    finally:
        ws.kill_all()
    out = Outcome(ws)
    for k in victims:
        assert ws.procs[k].returncode == -signal.SIGKILL

    _point(monkeypatch, cluster, 1, str(tmp_path / "cache-reader"))
    log = objstore.open_store(url, create=False)  # a fresh reader opens the store
    for run in [shared, *out.own.values()]:
        head = _head(cluster, url, run)  # every run's HEAD parses
        assert head.n == log.store.logs.run_log(run).refresh(force=True).entry
    assert objstore.verify(log) == []
    recs = _records(log, [shared, *out.own.values()])
    tags = _check_runs(recs)
    assert [t for t, c in tags.items() if c > 1] == []
    missing = sorted(set(out.acked) - set(tags))
    assert missing == [], f"acknowledged but lost: {missing[:5]}"
    _check_acked(recs, out)
    assert [t for t in out.busy if t in tags] == []
    # Beyond the acknowledged ones, only the append a victim was making when it died may have landed.
    flying = {out.in_flight(k, PER_RUN) for k in victims}
    extra = set(tags) - set(out.acked)
    assert extra <= flying, f"landed without an acknowledgement or a killed writer's append in flight: {sorted(extra - flying)}"
    for k in survivors:
        mine = [t for t in out.acked if t.startswith(f"w{k}-")]
        assert len(mine) + sum(t.startswith(f"w{k}-") for t in out.busy) == 2 * PER_RUN
    # the next writer on a killed writer's run builds on exactly what landed
    for k in victims:
        rec = log.append(out.own[k], "task_opened", {"task": f"after-w{k}"})
        assert rec.lsn == len(recs[out.own[k]])
    assert objstore.verify(log) == []
    killed_acked = sum(t.startswith(f"w{k}-") for k in victims for t in out.acked)
    print(f"\nS3 kill -9: {KILLED} writers killed after {killed_acked} acknowledged appends between them "
          f"({len(extra)} in-flight appends landed), {len(out.acked)} acknowledged in all, {len(out.busy)} Busy")


def test_busy_commits_are_absent(seaweed_cluster, tmp_path, monkeypatch):
    """The Busy path on the real cluster: writers whose retry bound is 20 ms (OBJSTORE_S3_BUSY_SECONDS)
    give up often under contention; every append that ended in Busy is absent, every acknowledged one
    present once. (The race above, at the default 30 s, sees no Busy on this machine.)"""
    cluster = seaweed_cluster
    url = _url(cluster, "busy")
    _point(monkeypatch, cluster, 0, str(tmp_path / "cache-setup"))
    shared = objstore.open_store(url).start_run(subject="shared")
    n, count = 4, 50
    ws = Writers(cluster, tmp_path, url, shared, count, n=n, env_extra={"OBJSTORE_S3_BUSY_SECONDS": "0.02"})
    try:
        ws.release()
        ws.wait(range(n))
    finally:
        ws.kill_all()
    out = Outcome(ws)
    assert len(out.acked) + len(out.busy) == n * 2 * count
    assert out.busy, "no Busy at a 20 ms retry bound: this test did not exercise the Busy path"
    _point(monkeypatch, cluster, 1, str(tmp_path / "cache-reader"))
    log = objstore.open_store(url, create=False)
    recs = _records(log, [shared, *out.own.values()])
    tags = _check_runs(recs)
    assert [t for t, c in tags.items() if c > 1] == []
    assert set(tags) == set(out.acked)
    assert [t for t in out.busy if t in tags] == []
    _check_acked(recs, out)
    assert objstore.verify(log) == []
    print(f"\nS3 Busy at a 20 ms bound: {len(out.busy)} Busy of {n * 2 * count} appends, all absent")


class _CountingGets:
    """A bucket whose GETs are counted by key (every other call passes through)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.got: Counter = Counter()

    def get(self, key):
        self.got[key] += 1
        return self.inner.get(key)

    def get_if_changed(self, key, etag):
        self.got[key] += 1
        return self.inner.get_if_changed(key, etag)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_kill_between_the_chunk_put_and_the_head_swap(seaweed_cluster, tmp_path, monkeypatch):
    cluster = seaweed_cluster
    url = _url(cluster, "orphan")
    # The writer starts its run (entry 1) and appends until the inline tail is full: the 16th append
    # (entry 17) PUTs the tail as a chunk first, and the writer dies right after that PUT returned.
    ws = Writers(cluster, tmp_path, url, "-", TAIL_ENTRIES + 4, n=1, extra=("--die-before-head-swap",))
    ws.release()
    ws.procs[0].wait(timeout=120)
    assert ws.procs[0].returncode == -signal.SIGKILL, ws.err(0)
    out = Outcome(ws)
    lines = ws.lines(0)
    orphan = lines[-1]["orphan"]
    own = out.own[0]
    assert len(out.acked) == TAIL_ENTRIES - 1 and out.busy == []
    assert orphan == run_prefix(own) + chunk_key(1, TAIL_ENTRIES, bytes.fromhex(orphan.rsplit("-", 1)[1]))  # the run log's

    raw = open_bucket_at(cluster, url)
    orphan_bytes = raw.get(orphan)
    assert orphan_bytes is not None  # the chunk PUT landed
    head = _head(cluster, url, own)
    assert head.n == TAIL_ENTRIES and head.chunk is None and len(head.tail) == TAIL_ENTRIES  # the old HEAD, whole

    # A fresh reader reads the old HEAD's log and never names the orphan: not one GET of it.
    _point(monkeypatch, cluster, 1, str(tmp_path / "cache-reader"))
    st = Store.open(url)
    counting = _CountingGets(st.logs.bucket)  # type: ignore[attr-defined]
    st.logs.bucket = counting  # type: ignore[attr-defined]  (the run logs opened from here on read through it)
    log = RunLog(st)
    recs = _records(log, [own])
    tags = _check_runs(recs)
    assert set(tags) == set(out.acked) and len(recs[own]) == TAIL_ENTRIES
    _check_acked(recs, out)
    assert objstore.verify(log) == []
    assert counting.got[orphan] == 0 and counting.got[run_prefix(own) + HEAD_KEY] >= 1

    # The next writer commits fine: its chunk PUT (create-once) finds the same key with the same bytes and names it.
    _point(monkeypatch, cluster, 0, str(tmp_path / "cache-next"))
    nxt = objstore.open_store(url, create=False)
    puts: list[tuple[str, bytes]] = []
    bucket = nxt.store.logs.bucket  # type: ignore[attr-defined]  (every log's keys go through it)
    plain_put, create = bucket.put, bucket.put_if_absent

    def put(key: str, data: bytes) -> str:
        puts.append((key, bytes(data)))
        return plain_put(key, data)

    def put_if_absent(key: str, data: bytes) -> str | None:
        puts.append((key, bytes(data)))
        return create(key, data)

    bucket.put, bucket.put_if_absent = put, put_if_absent
    rec = nxt.append(own, "task_opened", {"task": "next-writer"})
    assert rec.lsn == TAIL_ENTRIES
    assert puts == [(orphan, orphan_bytes.data)]  # the orphan's key, with the bytes it already holds: left as it is
    again = raw.get(orphan)
    assert again is not None and again.data == orphan_bytes.data
    head = _head(cluster, url, own)
    assert head.n == TAIL_ENTRIES + 1 and run_prefix(own) + chunk_key(*head.chunk) == orphan and len(head.tail) == 1
    _point(monkeypatch, cluster, 1, str(tmp_path / "cache-reader-2"))
    fresh = objstore.open_store(url, create=False)
    assert [r.body.get("task") for r in fresh.records(own)][-2:] == [f"w0-{TAIL_ENTRIES - 2}-own", "next-writer"]
    assert objstore.verify(fresh) == []


def open_bucket_at(cluster, url: str):
    """A raw bucket (no engine) through gateway 0, as a test or an attacker reads it."""
    with environment(_aws(cluster, 0)):
        return open_bucket(url)
