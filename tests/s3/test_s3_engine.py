"""The S3 engine's own rules, over the in-memory bucket (storage.s3.bucket.MemoryBucket), which can make a server
misbehave on cue: a 412 after our PUT landed, a false 412, a rolled-back HEAD, a damaged chunk. The same engine
runs against a real SeaweedFS in tests/test_s3_real.py; what is here needs a server that lies exactly once.

An engine made here is one log at the top of its bucket; a store (``_log``) is format 7, a log per run: a run's
log under ``runs/<xx>/<run>/`` (storage.runlogs.bucketlogs), which is where its HEAD and chunks are looked at."""

from __future__ import annotations

import os

import msgspec
import pytest
from helpers import keys_holding, s3_log

from objstore.errors import Busy, Conflict, CorruptLog, MultiLogBatch
from objstore.runs.anchors import anchor_info
from objstore.runs.api import RunLog
from objstore.runs.verify import verify
from objstore.storage import codec
from objstore.storage.runlogs.bucketlogs import run_prefix
from objstore.storage.s3 import engine as s3engine
from objstore.storage.s3 import gc as s3gc
from objstore.storage.s3 import layout as s3layout
from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.s3.engine import S3Engine
from objstore.storage.s3.layout import HEAD_KEY, INLINE_BYTES, TAIL_ENTRIES


def _log(bucket: MemoryBucket, cache: str) -> RunLog:
    return s3_log(bucket, cache)


def _obj(data: bytes) -> tuple:
    canon = codec.encode("blob", data)
    return codec.object_id(canon), "blob", canon


def _entries(bucket: MemoryBucket) -> int:
    return msgspec.msgpack.decode(bucket.raw()[HEAD_KEY])[1]


def _anchor(log: RunLog) -> str:
    """What ``objstore anchor`` prints: a manifest of every log's head committed to the store log, named by its token."""
    return anchor_info(log.store)["token"]


def test_a_412_that_carries_our_own_entry_is_success(tmp_path):
    b = MemoryBucket()
    ours, other = S3Engine(b, str(tmp_path / "a")), S3Engine(b, str(tmp_path / "b"))
    x = _obj(b"x")
    ours.commit([x], [("run/r/x", None, x[0], "first")])
    other.refresh(force=True)
    y, z = _obj(b"ours"), _obj(b"theirs")

    def lands_then_foreign_then_412(bucket, key, data, etag):
        bucket.poke(key, data)  # our PUT lands; its answer is lost
        other.refresh(force=True)
        other.commit([z], [("run/q/z", None, z[0], "foreign")])  # and another writer builds on it
        return "412"

    b.before_put_if_match.append(lands_then_foreign_then_412)
    pos = ours.commit([y], [("run/r/y", None, y[0], "ours")])
    assert pos.entry == 3 and _entries(b) == 3  # ours once (entry 2), theirs after it; nothing written twice
    assert ours.tables.refs["run/r/y"] == y[0] and ours.tables.refs["run/q/z"] == z[0]
    assert [e.moves[0][0] for e in ours.entries()] == ["run/r/x", "run/r/y", "run/q/z"]


def test_a_false_412_is_retried_and_lands_once(tmp_path):
    b = MemoryBucket()
    eng = S3Engine(b, str(tmp_path / "a"))
    x = _obj(b"x")
    eng.commit([x], [("run/r/x", None, x[0], "first")])
    b.before_put_if_match.append(lambda *_: "412")  # HEAD unchanged: the swap simply failed
    y = _obj(b"y")
    assert eng.commit([y], [("run/r/y", None, y[0], "second")]).entry == 2
    assert _entries(b) == 2 and b.requests["PUT"] == 3


def test_a_foreign_commit_on_other_refs_is_rebased_on(tmp_path):
    b = MemoryBucket()
    a, c = S3Engine(b, str(tmp_path / "a")), S3Engine(b, str(tmp_path / "c"))
    x = _obj(b"x")
    a.commit([x], [("run/r/x", None, x[0], "first")])
    c.refresh(force=True)
    y = _obj(b"y")
    c.commit([y], [("run/q/y", None, y[0], "c")])
    z = _obj(b"z")
    a.commit([z], [("run/r/z", None, z[0], "a, on a stale head")])  # a 412, then rebuilt on c's entry
    assert a.position() == c.refresh(force=True) and a.position().entry == 3


def test_a_stale_batch_on_the_same_ref_is_stalebase_and_append_retries(tmp_path):
    """B read the run's log before A appended. With the writer's lease (format 7) B's batch, which set no expectation,
    holds the run's log from its first read and lands after A's append (no StaleBase: issue 18); an append that
    expects the head B saw is refused (exit 7), and a self-contained append re-runs on the new head."""
    b = MemoryBucket()
    la, lb = _log(b, str(tmp_path / "a")), _log(b, str(tmp_path / "b"))
    run = la.start_run(subject="s")
    lb.store.logs.run_log(run).refresh(force=True)  # b has read the run's log: its HEAD at entry 1
    seen = lb.view(run).head(0)
    la.append(run, "task_opened", {"task": "a1"})
    with pytest.raises(Conflict) as got:  # b's expectation was built on the old head: refused, nothing written
        lb.append(run, "task_opened", {"task": "b-stale"}, expect_head=seen)
    assert got.value.exit_code == 7 and f"ref run/{run}/branch/0 moved" in str(got.value)
    with lb.batch():
        lb.append(run, "task_opened", {"task": "b-in-batch"})
    rec = lb.append(run, "task_opened", {"task": "b1"})  # a self-contained append re-runs on the new head
    assert rec.lsn == 3
    la.store.logs.run_log(run).refresh(force=True)
    texts = [r.body["task"] for r in la.iter_records(run) if r.kind == "task_opened"]
    assert texts == ["b1", "b-in-batch", "a1"]
    assert verify(la) == []


def test_a_batch_over_two_runs_is_multilogbatch_and_writes_nothing(tmp_path):
    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    r1, r2 = log.start_run(subject="s"), log.start_run(subject="s")
    before = dict(b.raw())
    with pytest.raises(MultiLogBatch) as got:
        with log.batch():
            log.append(r1, "task_opened", {"task": "1"})
            log.append(r2, "task_opened", {"task": "2"})
    assert got.value.exit_code == 15 and r1 in str(got.value) and r2 in str(got.value)
    # no entry anywhere: every key as it was, but r1's HEAD, where the batch took its writer's lease (format 7)
    head = run_prefix(r1) + HEAD_KEY
    after = dict(b.raw())
    assert {k: v for k, v in after.items() if k != head} == {k: v for k, v in before.items() if k != head}
    was, now = (msgspec.msgpack.decode(x[head], type=s3layout.Head) for x in (before, after))
    assert (now.fmt, now.n, now.checksum, now.chunk, now.tail, now.gc) == (was.fmt, was.n, was.checksum, was.chunk, was.tail, was.gc)


def test_busy_after_the_retry_bound_and_nothing_landed(tmp_path, monkeypatch):
    monkeypatch.setattr(s3engine, "BUSY_SECONDS", 0.2)
    b = MemoryBucket()
    eng = S3Engine(b, str(tmp_path / "a"))
    x = _obj(b"x")
    eng.commit([x], [("run/r/x", None, x[0], "first")])
    before = dict(b.raw())
    b.before_put_if_match = [lambda *_: "412"] * 10_000
    orig = b.put_if_match

    def always_412(key, data, etag):
        b.before_put_if_match.append(lambda *_: "412")
        return orig(key, data, etag)

    b.put_if_match = always_412  # type: ignore[method-assign]
    y = _obj(b"y")
    with pytest.raises(Busy) as got:
        eng.commit([y], [("run/r/y", None, y[0], "never")])
    assert got.value.exit_code == 14
    assert b.raw() == before


def test_head_never_grows_with_history(tmp_path):
    b = MemoryBucket()
    eng = S3Engine(b, str(tmp_path / "a"))
    prev = None
    sizes = []
    for i in range(300):
        o = _obj(os.urandom(200) if i % 50 else os.urandom(INLINE_BYTES + 10))
        eng.commit([o], [("run/r/x", prev, o[0], "m")])
        prev = o[0]
        sizes.append(len(b.raw()[HEAD_KEY]))
    assert max(sizes) <= INLINE_BYTES + 4096
    head = msgspec.msgpack.decode(b.raw()[HEAD_KEY])
    assert len(head[4]) <= TAIL_ENTRIES
    keys = b.raw()
    assert sum(k.startswith("entry/") for k in keys) == 6  # the six large entries, each under its own key
    fresh = S3Engine(b, str(tmp_path / "fresh"))
    assert fresh.refresh() == eng.position()
    assert fresh.read(prev) == eng.read(prev)


def test_a_rolled_back_head_is_refused_and_named_by_the_anchor(tmp_path):
    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    run = log.start_run(subject="s")
    head = run_prefix(run) + HEAD_KEY  # the run's log's HEAD
    old_head = b.raw()[head]
    for i in range(3):
        log.append(run, "task_opened", {"task": str(i)})
    token = _anchor(log)
    engine = log.store.logs.run_log(run)  # (reopened after the anchor's commit closed it): it reads entry 4
    assert engine.refresh().entry == 4
    b.poke(head, old_head)  # someone with write access to the bucket rolls the run's log back
    with pytest.raises(CorruptLog, match="went back from entry 4 to entry 1"):
        engine.refresh(force=True)
    fresh = _log(b, str(tmp_path / "fresh"))
    problems = verify(fresh, anchor=token)
    assert [p.code for p in problems] and all(p.code.startswith("anchor") for p in problems)


def test_a_damaged_chunk_is_found_by_verify_and_a_damaged_cache_copy_is_not_believed(tmp_path):
    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    run = log.start_run(subject="s")
    for i in range(40):
        log.append(run, "task_opened", {"task": f"n{i}"})
    at = run_prefix(run)
    chunks = sorted(k for k in b.raw() if "/chunk/" in k)
    assert len(chunks) == 2 and all(k.startswith(at + "chunk/") for k in chunks)  # the run's log's
    # a damaged local cache copy: the reader drops it and reads the bucket
    reader = _log(b, str(tmp_path / "r"))
    engine = reader.store.logs.run_log(run)
    assert engine.refresh().entry == 41
    cached = os.path.join(engine.cache, "keys", "g0_" + chunks[0][len(at):].replace("/", "_"))  # type: ignore[attr-defined]
    with open(cached, "r+b") as f:
        f.seek(200)
        f.write(b"\xff\xff\xff\xff")
    again = _log(b, str(tmp_path / "r"))
    assert again.store.logs.run_log(run).refresh().entry == 41
    assert verify(again) == []
    # a damaged chunk in the bucket: verify names it
    data = bytearray(b.raw()[chunks[0]])
    data[200] ^= 0xFF
    b.poke(chunks[0], bytes(data))
    problems = verify(_log(b, str(tmp_path / "v")))
    assert problems and problems[0].code in ("corrupt-entry", "corrupt-log"), [p.line() for p in problems]
    assert any(chunks[0] in (p.where + p.subject + p.detail) for p in problems), [p.line() for p in problems]


def _holds(bucket: MemoryBucket, secret: bytes) -> list[str]:
    return keys_holding(bucket.raw().items(), secret)


def test_gc_on_s3_removes_deleted_bodies_everywhere_and_anchors_still_verify(tmp_path):
    from objstore.errors import Erased
    from objstore.lifecycle import delete as D
    from objstore.lifecycle import gc as G

    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    keep, doomed = log.start_run(subject="s"), log.start_run(subject="s")
    secrets = {}
    for i in range(40):  # enough for chunks, the HEAD tail and one entry key above the inline limit
        run = doomed if i % 2 else keep
        secret = os.urandom(24).hex().encode()
        size = INLINE_BYTES + 100 if i == 5 else 0
        blob = log.put_blob(secret + os.urandom(size // 2).hex().encode())
        rec = log.record_attempt(run, i, 0, "succeeded", output=blob)
        secrets[secret] = (run, rec.id)
    token = _anchor(log)
    assert all(_holds(b, s) for s in secrets)
    D.delete_run(log, doomed, reason="test")
    res = G.gc(log.store)
    gone = [s for s, (run, _) in secrets.items() if run == doomed]
    assert res.removed_records == 21 and res.removed_blobs == 20  # its run_started too
    assert [s for s in gone if _holds(b, s)] == []
    assert all(_holds(b, s) for s, (run, _) in secrets.items() if run == keep)
    fresh = _log(b, str(tmp_path / "fresh"))
    for s, (run, rid) in secrets.items():
        if run == keep:
            assert fresh.get_blob(fresh.record(rid).body["output"]).startswith(s)
    with pytest.raises(Erased):
        fresh.record(secrets[gone[0]][1])
    # a reader that read the entries before gc rewrote them reads the kept ones still
    for s, (run, rid) in secrets.items():
        if run == keep:
            assert log.get_blob(log.record(rid).body["output"]).startswith(s)
    assert verify(fresh, anchor=token) == []
    assert G.gc(fresh.store).removed_records == 0  # nothing left to do


def test_gc_prunes_unreferenced_blobs_and_unnamed_keys_only_when_asked(tmp_path):
    from objstore.lifecycle import gc as G

    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    run = log.start_run(subject="s")
    with log.store.batch():  # a blob put outside a run's batch is only held by the process: committed with one
        lonely = log.put_blob(b"nobody names me " + os.urandom(8).hex().encode())
        named = log.put_blob(b"a record names me")
        log.record_attempt(run, 0, 0, "succeeded", output=named)
    at = run_prefix(run)  # the run's log's keys
    b.poke(at + "chunk/000000000001-000000000002-" + "ab" * 32, b"an orphan a lost swap left", modified=0.0)  # not the log's entries 1-2
    b.poke(at + "chunk/000000000004-000000000019-" + "cd" * 32, b"entries the log has not reached", modified=0.0)
    assert G.gc(log.store).removed_blobs == 0 and lonely in {o for o in log.store.logs.run_log(run).tables.locs}
    res = G.gc(log.store, prune_unreferenced_older_than=0)
    assert res.removed_blobs == 1 and res.removed_other == 1
    assert at + "chunk/000000000001-000000000002-" + "ab" * 32 not in b.raw()
    assert at + "chunk/000000000004-000000000019-" + "cd" * 32 in b.raw()  # a commit may still name it: never pruned
    fresh = _log(b, str(tmp_path / "f"))
    from objstore.errors import Erased
    with pytest.raises(Erased):
        fresh.get_blob(lonely)
    assert fresh.get_blob(named) == b"a record names me"
    assert verify(fresh) == []


def test_a_stale_writers_late_chunk_put_does_not_bring_a_removed_body_back(tmp_path, monkeypatch):
    """A writer that built a chunk from a HEAD older than gc's rewrite may PUT it after gc wrote the stripped one
    (the same key: it held the same entries); gc reads what it rewrote back after a pause and strips it again."""
    from objstore.lifecycle import delete as D
    from objstore.lifecycle import gc as G

    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    keep, doomed = log.start_run(subject="s"), log.start_run(subject="s")
    secret = os.urandom(16).hex().encode()
    log.record_attempt(doomed, 0, 0, "succeeded", output=log.put_blob(secret))
    for i in range(20):  # the doomed run's log rolls its tail, the secret's entry with it, into a chunk
        log.record_attempt(doomed, i + 1, 0, "succeeded")
        log.record_attempt(keep, i, 0, "succeeded")
    chunk = next(k for k in b.raw() if k.startswith(run_prefix(doomed) + "chunk/"))
    assert _holds(b, secret) == [chunk]
    old = b.raw()[chunk]
    D.delete_run(log, doomed, reason="test")
    real_put = b.put
    late = []

    def put(key, data):
        etag = real_put(key, data)
        if key == chunk and not late:
            late.append(key)
            b.poke(key, old)  # the stale writer's PUT lands just after gc's
        return etag

    b.put = put  # type: ignore[method-assign]
    G.gc(log.store)
    assert late == [chunk] and _holds(b, secret) == []
    assert verify(_log(b, str(tmp_path / "fresh"))) == []


def test_a_run_log_whose_deletion_is_judged_by_the_owner_key_opens(tmp_path):
    """A deletion in a run's log is judged by the store log's owner key at the position it cites: applying it asks
    the run's citations (CiteHistory), read from the entries the log has taken in so far — never by taking in HEAD
    again in the middle of taking it in (which, at open, applied the same entries again without end)."""
    from objstore import identity
    from objstore.errors import Deleted
    from objstore.lifecycle import delete as D

    b = MemoryBucket()
    log = _log(b, str(tmp_path / "a"))
    identity.ensure_owner_key(log.store)
    run = log.start_run(subject="s")
    for i in range(20):  # the deletion's entry after a chunk: its citations are read from the chunk and the tail
        log.append(run, "task_opened", {"task": str(i)})
    D.delete_run(log, run, reason="test")
    fresh = _log(b, str(tmp_path / "fresh"))
    engine = fresh.store.logs.run_log(run)
    assert engine.position() == log.store.logs.run_log(run).refresh(force=True) and engine.position().entry == 22
    with pytest.raises(Deleted):
        fresh.records(run)
    assert verify(fresh) == []


def _old_bucket(tmp_path) -> tuple[MemoryBucket, str, list[str]]:
    """A store of one HEAD (format 3, what objstore wrote on object storage before format 7): marker version 3, and
    every run's entries in the one log at the top of the prefix, written through an S3Engine directly. Returns the
    bucket, its run and the tasks of its records."""
    from objstore.storage.s3 import layout as s3layout
    from objstore.storage.store import Store

    b = MemoryBucket()
    b.poke(s3layout.MARKER_KEY, s3layout.marker_bytes(3))
    cache = str(tmp_path / "old-writer")
    store = Store(S3Engine(b, cache), root=cache)
    store.url = b.url
    log = RunLog(store)
    run = log.start_run(subject="s")
    tasks = [f"t{i}" for i in range(TAIL_ENTRIES + 4)]  # past one tail: a chunk too
    for t in tasks:
        log.append(run, "task_opened", {"task": t})
    assert HEAD_KEY in b.raw() and not [k for k in b.raw() if k.startswith(("runs/", "store/", "catalog/"))]
    return b, run, tasks


def test_an_old_one_head_bucket_still_reads_and_refuses_every_write_until_upgraded(tmp_path):
    from objstore.errors import BucketNeedsUpgrade
    from objstore.lifecycle import delete as D
    from objstore.lifecycle import gc as G

    b, run, tasks = _old_bucket(tmp_path)
    before = dict(b.raw())
    log = _log(b, str(tmp_path / "new"))
    assert log.store.engine.needs_upgrade == 3  # type: ignore[attr-defined]
    assert [r.body["task"] for r in log.records(run)[1:]] == tasks
    assert log.runs() and verify(log) == []
    writes = [
        lambda: log.append(run, "task_opened", {"task": "new"}),
        lambda: log.start_run(subject="s"),
        lambda: D.delete_run(log, run, reason="test"),
        lambda: G.gc(log.store),
    ]
    for write in writes:
        with pytest.raises(BucketNeedsUpgrade) as got:
            write()
        assert got.value.exit_code == 5
        assert str(got.value).startswith(f"store at {b.url} is format 3 (one HEAD for the whole store)")
    assert b.raw() == before  # nothing written: not a key, not the marker
    assert [r.body["task"] for r in _log(b, str(tmp_path / "again")).records(run)[1:]] == tasks
