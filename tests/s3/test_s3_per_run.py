"""A store on object storage of format 7: a HEAD per run, the create-once catalog, old one-HEAD buckets read only and
upgraded in place, and the rolled-back HEAD a reader's cache names.

What is counted is what reaches the bucket: every request by method and key (a bucket wrapper below the engine, so
no path of the library can go around it), each conditional PUT refused (412), and the raw keys and bytes stored.
"""

from __future__ import annotations

import os

import msgspec
import pytest
from helpers import run_cli

from objstore.errors import BucketNeedsUpgrade, CorruptLog, NewerFormat
from objstore.legacy import bucket as upgrade_mod
from objstore.runs.api import RunLog
from objstore.runs.verify import verify_report
from objstore.storage.runlogs.bucketlogs import BucketLogs, run_prefix
from objstore.storage.runlogs.catalog import shard
from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.s3.engine import S3Engine
from objstore.storage.s3.layout import MARKER_KEY, head_decoder, marker_bytes
from objstore.storage.store import Store


class Counting(MemoryBucket):
    """A MemoryBucket that logs each request (method, key) and each conditional PUT the server refused."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        self.refused: list[str] = []
        self.die_at: int | None = None  # raise Killed at this request (a process killed there: nothing after it runs)

    def _log(self, method: str, key: str) -> None:
        self.calls.append((method, key))
        if self.die_at is not None and len(self.calls) >= self.die_at:
            raise Killed(f"killed at request {len(self.calls)}: {method} {key}")

    def get(self, key):
        self._log("GET", key)
        return super().get(key)

    def get_if_changed(self, key, etag):
        self._log("GET", key)
        return super().get_if_changed(key, etag)

    def put(self, key, data):
        self._log("PUT", key)
        return super().put(key, data)

    def put_if_absent(self, key, data):
        self._log("PUT", key)
        got = super().put_if_absent(key, data)
        if got is None:
            self.refused.append(key)
        return got

    def put_if_match(self, key, data, etag):
        self._log("PUT", key)
        got = super().put_if_match(key, data, etag)
        if got is None:
            self.refused.append(key)
        return got

    def delete(self, key):
        self._log("DELETE", key)
        return super().delete(key)

    def list(self, prefix=""):
        self._log("LIST", prefix)
        return super().list(prefix)


class Killed(BaseException):
    """A request the test's 'process' never got to make."""


def _open(bucket, tmp_path, name="a") -> RunLog:
    return RunLog(Store.on_bucket(bucket, cache=str(tmp_path / f"cache-{name}")))


def _head(bucket, run):
    return head_decoder.decode(bucket.raw()[run_prefix(run) + "HEAD"])


def test_a_new_bucket_is_format_7_with_the_store_log_a_log_per_run_and_the_catalog(tmp_path):
    b = Counting()
    log = _open(b, tmp_path)
    assert isinstance(log.store.logs, BucketLogs)
    runs = [log.start_run(subject="s") for _ in range(3)]
    for r in runs:
        log.record_attempt(r, 0, 0, "succeeded")
    raw = b.raw()
    assert msgspec.json.decode(raw[MARKER_KEY]) == {"format": "objstore", "version": 7, "engine": "s3"}
    for r in runs:
        assert f"runs/{shard(r)}/{r}/HEAD" in raw
        assert _head(b, r).n == 2  # its run_started and its attempt: one entry each, in its own log
        assert f"catalog/ids/{r}" in raw
    assert not any(k == "HEAD" or k.startswith(("chunk/", "entry/")) for k in raw)  # nothing at the one-HEAD places
    assert log.store.logs.run_ids() == runs  # the catalog's order: the runs' start order


def test_a_commit_to_one_run_writes_only_that_runs_head_and_two_runs_never_refuse_each_other(tmp_path):
    b = Counting()
    a, c = _open(b, tmp_path, "a"), _open(b, tmp_path, "c")
    ra, rc = a.start_run(subject="s"), c.start_run(subject="s")
    a.record_attempt(ra, 0, 0, "succeeded")
    c.record_attempt(rc, 0, 0, "succeeded")
    b.calls.clear()
    b.refused.clear()
    for i in range(1, 21):  # two writers, interleaved, each on its own run
        a.record_attempt(ra, i, 0, "succeeded")
        c.record_attempt(rc, i, 0, "succeeded")
    assert b.refused == []
    heads = [k for m, k in b.calls if m == "PUT" and k.endswith("/HEAD")]
    chunks = [k for m, k in b.calls if m == "PUT" and "/chunk/" in k]
    # one request per commit, its HEAD's conditional PUT; and as each log's 17th entry leaves HEAD's inline tail (16
    # entries), the chunk that takes the 16 before it, once: under that run's prefix
    assert len(heads) == 40 and len(chunks) == 2 and len(b.calls) == 42
    assert set(heads) == {run_prefix(ra) + "HEAD", run_prefix(rc) + "HEAD"}
    assert sorted(k.split("/chunk/")[0] + "/" for k in chunks) == sorted([run_prefix(ra), run_prefix(rc)])


def test_a_batch_holds_its_runs_lease_from_its_first_read_to_its_commit(tmp_path):
    b = Counting()
    a, other = _open(b, tmp_path, "a"), _open(b, tmp_path, "o")
    run = a.start_run(subject="s")
    with a.batch():
        a.record_attempt(run, 0, 0, "succeeded")
        lease = _head(b, run).lease
        assert lease is not None and lease[1] != b""  # held while the batch runs...
        epoch = lease[0]
    assert _head(b, run).lease == [epoch, b""]  # ...and given back by the commit's own swap
    other.record_attempt(run, 1, 0, "succeeded")  # a plain append after it: no lease taken, none held
    assert _head(b, run).lease == [epoch, b""]
    assert [r.lsn for r in other.iter_records(run)] == [2, 1, 0]
    b.calls.clear()
    with other.batch():  # uncontended: the lease's swap on the HEAD this writer holds, then the commit's; nothing read
        other.record_attempt(run, 2, 0, "succeeded")
    assert b.calls == [("PUT", run_prefix(run) + "HEAD")] * 2 and b.refused == []


def test_a_batch_that_raises_gives_its_lease_back(tmp_path):
    b = Counting()
    a = _open(b, tmp_path)
    run = a.start_run(subject="s")
    with pytest.raises(RuntimeError), a.batch():
        a.record_attempt(run, 0, 0, "succeeded")
        raise RuntimeError("the agent's step failed")
    head = _head(b, run)
    assert head.lease is not None and head.lease[1] == b"" and head.n == 1  # nothing of the batch landed


def test_a_killed_lease_holder_costs_the_next_writer_one_lapse_and_its_epoch_is_fenced(tmp_path, monkeypatch):
    from objstore.storage.s3 import engine as s3engine

    monkeypatch.setattr(s3engine, "LEASE_SECONDS", 0.2)
    b = Counting()
    dead, live = _open(b, tmp_path, "dead"), _open(b, tmp_path, "live")
    run = dead.start_run(subject="s")
    eng = dead.store.logs.run_log(run)
    txn = s3engine.S3Txn(eng)
    eng.take_lease(txn, None)  # a holder that is then killed: it never commits nor gives the lease back
    held = _head(b, run).lease
    assert held is not None and held[1] == eng.holder
    live.record_attempt(run, 0, 0, "succeeded")  # waits until HEAD stood unchanged for LEASE_SECONDS, then takes over
    head = _head(b, run)
    assert head.lease == [held[0] + 1, b""] and head.n == 2
    with live.batch():  # a batch takes the next epoch
        live.record_attempt(run, 1, 0, "succeeded")
    assert _head(b, run).lease == [held[0] + 2, b""]


def test_an_old_one_head_bucket_is_read_as_it_is_and_refuses_writes_until_upgraded(tmp_path):
    b = Counting()
    runs = _old_store(b, tmp_path)
    old = _open(b, tmp_path, "reader")
    assert isinstance(old.store.engine, S3Engine) and not old.store.logs.per_run
    assert [len(list(old.iter_records(r, branch=0))) for r in runs] == [11, 2]
    before = b.raw()
    with pytest.raises(BucketNeedsUpgrade) as got:
        old.record_attempt(runs[0], 99, 0, "succeeded")
    assert got.value.exit_code == 5
    assert str(got.value) == ("store at s3://memory/store is format 5 (one HEAD for the whole store), which this objstore reads "
                              "but does not write; run 'objstore --store s3://memory/store upgrade' to give each run its own "
                              "HEAD (format 7)")
    assert b.raw() == before  # refused before any write


def _old_store(b, tmp_path) -> list[str]:
    """A store of one HEAD (format 5), as an objstore before format 7 wrote it: two runs, one rewound."""
    b.put(MARKER_KEY, marker_bytes(5))
    eng = S3Engine(b, str(tmp_path / "old-writer"))
    store = Store(eng, root=str(tmp_path / "old-writer"))
    store._version, store.url = 5, b.url
    w = RunLog(store)
    r1, r2 = w.start_run(subject="s"), w.start_run(subject="s")
    for i in range(10):
        w.record_attempt(r1, i, 0, "succeeded", output=w.put_blob(os.urandom(40)))
    w.record_attempt(r2, 0, 0, "failed")
    w.rewind(r1, 4)
    b.calls.clear()
    return [r1, r2]


def _records(log: RunLog, runs: list[str]) -> list:
    return [[(r.id, r.kind, r.lsn) for r in log.iter_records(run, all_branches=True)] for run in runs]


def test_upgrade_of_a_one_head_bucket_keeps_every_record_and_moves_by_one_marker_swap(tmp_path):
    b = Counting()
    runs = _old_store(b, tmp_path)
    want = _records(_open(b, tmp_path, "before"), runs)
    old_keys = {k: v for k, v in b.raw().items() if k != MARKER_KEY}
    got = upgrade_mod._upgrade(b)
    assert got["status"] == "upgraded" and got["from"] == 5 and got["to"] == 7 and got["runs"] == 2
    marker_puts = [i for i, (m, k) in enumerate(b.calls) if m == "PUT" and k == MARKER_KEY]
    assert len(marker_puts) == 1 and marker_puts[0] == max(i for i, (m, _k) in enumerate(b.calls) if m in ("PUT", "DELETE"))
    assert {k: v for k, v in b.raw().items() if k in old_keys} == old_keys  # the old keys stay as they were
    new = _open(b, tmp_path, "after")
    assert isinstance(new.store.logs, BucketLogs)
    assert _records(new, runs) == want
    new.record_attempt(runs[1], 1, 0, "succeeded")  # and it is written again
    rep = verify_report(new)
    assert rep.problems == []
    assert upgrade_mod._upgrade(b)["status"] == "already-format-7"


def test_an_upgrade_killed_at_every_request_leaves_the_old_store_as_it_was_and_the_next_one_finishes(tmp_path):
    b = Counting()
    runs = _old_store(b, tmp_path)
    want = _records(_open(b, tmp_path, "before"), runs)
    b.calls.clear()
    upgrade_mod._upgrade(_copy(b))  # how many requests a whole upgrade makes (on a copy)
    total = len(_copy.last.calls)
    assert total > 20
    for k in range(1, total + 1):
        c = _copy(b)
        c.die_at = k
        with pytest.raises(Killed):
            upgrade_mod._upgrade(c)
        c.die_at = None
        if k < total:  # the marker's swap is the last request: before it, the old store as it was
            assert msgspec.json.decode(c.raw()[MARKER_KEY])["version"] == 5, k
            assert _records(_open(c, tmp_path / f"k{k}", "ro"), runs) == want, k
        got = upgrade_mod._upgrade(c)  # run again: it finishes
        assert got["status"] in ("upgraded", "already-format-7"), k
        assert _records(_open(c, tmp_path / f"k{k}", "new"), runs) == want, k


def _copy(b: Counting) -> Counting:
    c = Counting()
    for k, v in b.raw().items():
        c.poke(k, v)
    _copy.last = c  # type: ignore[attr-defined]
    return c


def test_an_objstore_that_reads_up_to_format_6_refuses_a_format_7_bucket_before_writing(tmp_path, monkeypatch):
    from objstore.storage import store as store_mod

    b = Counting()
    _open(b, tmp_path).start_run(subject="s")
    before = b.raw()
    monkeypatch.setattr(store_mod, "NEWEST_VERSION", 6)  # what the release before format 7 knew
    with pytest.raises(NewerFormat) as got:
        Store.on_bucket(b, cache=str(tmp_path / "cache-old"))
    assert got.value.exit_code == 5
    assert b.raw() == before


def test_a_reader_whose_cache_kept_a_newer_head_names_a_rolled_back_one(tmp_path):
    b = Counting()
    w = _open(b, tmp_path, "w")
    run = w.start_run(subject="s")
    w.record_attempt(run, 0, 0, "succeeded")
    older = b.raw()[run_prefix(run) + "HEAD"]
    for i in range(1, 4):
        w.record_attempt(run, i, 0, "succeeded")
    assert len(list(_open(b, tmp_path, "r").iter_records(run))) == 5  # a reader reads the whole log; its cache keeps HEAD
    b.poke(run_prefix(run) + "HEAD", older)  # a lying server puts the older HEAD back
    again = _open(b, tmp_path, "r")
    with pytest.raises(CorruptLog) as got:
        list(again.iter_records(run))
    assert str(got.value) == (f"integrity error: log s3://memory/store/{run_prefix(run)}HEAD: HEAD went back from entry 5 (read "
                              f"before on this machine, kept in {tmp_path}/cache-r/runs/{shard(run)}/{run}) to entry 2: a rolled-back log")
    b.delete(run_prefix(run) + "HEAD")  # and one that loses it altogether
    with pytest.raises(CorruptLog, match="HEAD is gone; this machine read entry 5 of this log before"):
        list(_open(b, tmp_path, "r").iter_records(run))


def test_verify_names_a_runs_log_swapped_for_another_runs(tmp_path):
    b = Counting()
    w = _open(b, tmp_path, "w")
    r1, r2 = w.start_run(subject="s"), w.start_run(subject="s")
    w.record_attempt(r1, 0, 0, "succeeded")
    b.poke(run_prefix(r1) + "HEAD", b.raw()[run_prefix(r2) + "HEAD"])
    rep = verify_report(_open(b, tmp_path, "auditor"))
    assert [p.line() for p in rep.problems] == [
        f"wrong-run-log {r1}: the log at run {r1}'s place holds the refs of run {r2} [s3://memory/store/runs/{shard(r1)}/{r1}]"]


def test_the_cli_refuses_to_write_an_old_bucket_and_upgrades_it(s3_url):
    from objstore.storage.s3.client import open_bucket

    bucket = open_bucket(s3_url)
    bucket.put(MARKER_KEY, marker_bytes(3))
    eng = S3Engine(bucket, None)
    store = Store(eng)
    store._version, store.url = 3, s3_url
    run = RunLog(store).start_run(subject="s")
    err = run_cli("fork", run, "--from-branch", "0", "--at-lsn", "0", store=s3_url, exit_code=5)[2]
    assert err.strip().endswith(f"run 'objstore --store {s3_url} upgrade' to give each run its own HEAD (format 7)")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert run_cli("log", run, store=s3_url, exit_code=0)[1].count("run_started") == 1  # read as it is
    got = msgspec.json.decode(run_cli("upgrade", "--json", store=s3_url, exit_code=0)[1])
    assert got["status"] == "upgraded" and got["from"] == 3 and got["to"] == 7 and got["counts"]["runs"] == 1
    run_cli("fork", run, "--from-branch", "0", "--at-lsn", "0", store=s3_url, exit_code=0)
    run_cli("verify", store=s3_url, exit_code=0)


def test_an_anchor_names_a_runs_head_rolled_back_by_a_lying_server(tmp_path):
    from objstore.runs.anchor_manifest import write_manifest

    b = Counting()
    w = _open(b, tmp_path, "w")
    run, other = w.start_run(subject="s"), w.start_run(subject="s")
    w.record_attempt(run, 0, 0, "succeeded")
    older = b.raw()[run_prefix(run) + "HEAD"]
    w.record_attempt(run, 1, 0, "succeeded")
    w.record_attempt(other, 0, 0, "succeeded")
    token = write_manifest(w.store)["token"]  # a manifest of every log's head, in the store log
    anchored = _head(b, run).checksum
    assert verify_report(_open(b, tmp_path, "auditor-1"), anchors=[token]).problems == []
    b.poke(run_prefix(run) + "HEAD", older)  # the older HEAD put back: a log that still chains, two entries short
    rep = verify_report(_open(b, tmp_path, "auditor-2"), anchors=[token])  # an auditor with no cache of its own
    head = _head(b, run)
    assert head.n == 2
    assert [p.line() for p in rep.problems] == [
        f"anchor-rolled-back run/{run}: the log ends at entry 2, the anchor names entry 3 "
        f"({anchored.hex()}) [s3://memory/store/runs/{shard(run)}/{run}]"]


def test_verify_notes_a_key_no_entry_names_and_gc_prune_removes_it(tmp_path, monkeypatch):
    from objstore.lifecycle.gc import gc
    from objstore.storage.s3 import gc as s3gc

    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    b = Counting()
    w = _open(b, tmp_path, "w")
    run = w.start_run(subject="s")
    w.record_attempt(run, 0, 0, "succeeded")
    orphan = f"{run_prefix(run)}entry/{99:012d}-{'ab' * 32}"  # what a writer killed before its HEAD swap leaves
    b.poke(orphan, b"never named", modified=1.0)
    b.poke(f"{run_prefix(run)}entry/{1:012d}-{'cd' * 32}", b"named by no HEAD", modified=1.0)
    rep = verify_report(_open(b, tmp_path, "auditor"))
    assert rep.problems == []
    assert [n.line() for n in rep.notes] == [
        f"unnamed-key {run}: no entry names it (a writer killed between its PUT and the HEAD swap); 'objstore gc "
        f"--prune-unreferenced-older-than AGE' removes it [s3://memory/store/{run_prefix(run)}entry/{1:012d}-{'cd' * 32}]"]
    # (entry 99 is past HEAD: a commit in flight may still name it, so it is neither noted nor pruned yet)
    gc(_open(b, tmp_path, "gc").store, prune_unreferenced_older_than=60)
    assert f"{run_prefix(run)}entry/{1:012d}-{'cd' * 32}" not in b.raw() and orphan in b.raw()
    assert verify_report(_open(b, tmp_path, "auditor-2")).notes == []


def test_latest_reads_one_page_of_the_catalog_and_a_stream_is_the_listing_in_order(s3_url, tmp_path, monkeypatch):
    import objstore
    from objstore.runs.resolve import resolve_run
    from objstore.storage.s3 import client
    from objstore.storage.s3.client import open_bucket

    monkeypatch.setattr(client, "LIST_PAGE", 2)  # pages of two keys: five runs are three pages
    log = objstore.open_store(s3_url)
    runs = [log.start_run(subject="s") for _ in range(5)]
    b = open_bucket(s3_url)
    for prefix in ("catalog/newest/", "catalog/order/", "catalog/ids/", f"catalog/ids/{runs[2]}", "catalog/nothing/"):
        assert [x.key for x in b.stream(prefix)] == [x.key for x in b.list(prefix)]
    b.requests.clear()
    first = next(iter(b.stream("catalog/newest/")))
    assert first.key.endswith("-" + runs[-1]) and b.requests["LIST"] == 1  # one page, not the whole listing
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cold"))
    cold = objstore.open_store(s3_url)
    bucket = cold.store.logs.bucket
    bucket.requests.clear()
    assert resolve_run(cold, "latest") == runs[-1]
    assert bucket.requests["LIST"] == 1


def test_appends_queue_behind_a_writer_of_batches_and_are_handed_the_lease_not_starved(tmp_path, monkeypatch):
    import threading
    import time

    from objstore.storage.s3 import engine as s3engine

    monkeypatch.setattr(s3engine, "BUSY_SECONDS", 10.0)  # starving appends would end in Busy
    monkeypatch.setattr(s3engine.S3Engine, "retry_seconds", 10.0)
    b = Counting()
    batcher, appender = _open(b, tmp_path, "batches"), _open(b, tmp_path, "appends")
    run = batcher.start_run(subject="s")
    stop = threading.Event()

    def batches() -> None:  # a loop of batches: each gives the lease back and wants it again a moment later
        i = 0
        while not stop.is_set():
            with batcher.batch():
                batcher.record_attempt(run, i, 0, "succeeded")
            i += 1
            time.sleep(0.001)  # (an agent's step between commits; threads of one process share one interpreter)

    t = threading.Thread(target=batches)
    t.start()
    try:
        for i in range(10):
            appender.append(run, "task_opened", {"task": f"a{i}"})  # each queues for the lease and is handed it
    finally:
        stop.set()
        t.join()
    kinds = [r.kind for r in reversed(list(appender.iter_records(run)))]
    assert kinds.count("task_opened") == 10
    last_append = max(i for i, k in enumerate(kinds) if k == "task_opened")
    assert kinds[last_append + 1:].count("attempt") <= 2  # the appends landed while the batches ran, not after them
    heads = [msgspec.msgpack.decode(b.raw()[run_prefix(run) + "HEAD"])]
    assert heads[0][6][1] == b""  # and the lease is free at the end
