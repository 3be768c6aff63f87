"""The S3 engine's stale heads and caches (issue 19): what gc's in-place rewrite of a chunk leaves for a stale writer and for a
reader's cache. Over the in-memory bucket (storage.s3.bucket.MemoryBucket): two engines on one bucket are two
processes (each its own tables, HEAD copy and cache directory), and the order of their requests is the test's.

- A writer whose last commit left HEAD's inline tail full keeps that HEAD in memory (a commit does not read HEAD
  first: a stale head costs a 412). If another writer rolled that tail into a chunk and gc then stripped a deleted
  body out of it, the stale writer's next commit PUTs the chunk again from its own copy of the tail, body included,
  under the same key (a plain PUT), and HEAD names that chunk: the body is back in the bucket, long after gc's
  settle pause.
- A chunk key names its entries' checksums, which gc keeps when it strips a body: a reader's cached copy of the
  chunk from before gc still chains, so it is believed, and the removed body is read from it (a new process on the
  same machine, or a long-lived one from memory).

On format 7 (a HEAD per run, storage.runlogs.bucketlogs) what is said of "the log" is said of the doomed run's own
log (``runs/<xx>/<run>/``): the secret's entry, the tail it sits in and the chunk that tail is rolled into are its.
"""

from __future__ import annotations

import os

import pytest
from helpers import keys_holding, s3_log

from objstore.errors import BodyRemoved, Erased, Refused
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.api import RunLog
from objstore.storage.runlogs.bucketlogs import run_prefix
from objstore.storage.s3 import entries as s3entries
from objstore.storage.s3 import gc as s3gc
from objstore.storage.s3 import layout as s3layout
from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.s3.layout import TAIL_ENTRIES


def _log(bucket: MemoryBucket, cache: str) -> RunLog:
    return s3_log(bucket, cache)


def _holds(bucket: MemoryBucket, secret: bytes) -> list[str]:
    return keys_holding(bucket.raw().items(), secret)


def _tail(log: RunLog, run: str) -> int:
    head = log.store.logs.run_log(run)._head  # type: ignore[attr-defined]  (the run's log's HEAD, as this process has it)
    return len(head.tail) if head is not None else 0


def _chunks(bucket: MemoryBucket, run: str | None = None) -> list[str]:
    """The chunk keys of run ``run``'s log (None: of every log)."""
    return [k for k in bucket.raw() if "/chunk/" in k and (run is None or k.startswith(run_prefix(run)))]


def _secret_in_the_next_chunk(tmp_path) -> tuple[MemoryBucket, RunLog, str, str, bytes, bytes]:
    """Writer A's last commit fills the doomed run's HEAD's tail (TAIL_ENTRIES entries), one of them the doomed run's
    secret; A's engine keeps that HEAD. Returns (bucket, A, keep run, doomed run, secret, the secret blob's id)."""
    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    keep, doomed = a.start_run(subject="s"), a.start_run(subject="s")
    i = 0
    while not _chunks(b, doomed) or _tail(a, doomed) != 1:  # a chunk named, and the next commit starts a fresh tail
        a.record_attempt(doomed, 100 + i, 0, "succeeded")
        a.record_attempt(keep, i, 0, "succeeded")
        i += 1
    secret = os.urandom(16).hex().encode()
    blob = a.put_blob(secret)
    a.record_attempt(doomed, 0, 0, "succeeded", output=blob)
    while _tail(a, doomed) != TAIL_ENTRIES:
        a.record_attempt(doomed, 100 + i, 0, "succeeded")
        a.record_attempt(keep, i, 0, "succeeded")
        i += 1
    assert _chunks(b, doomed) and _holds(b, secret) == [run_prefix(doomed) + "HEAD"]
    return b, a, keep, doomed, secret, blob


def test_a_stale_writer_rolling_its_old_tail_after_gc_does_not_put_a_removed_body_back(tmp_path, monkeypatch):
    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    b, a, keep, doomed, secret, _blob = _secret_in_the_next_chunk(tmp_path)
    other = _log(b, str(tmp_path / "cache-b"))
    other.record_attempt(doomed, 1000, 0, "succeeded")  # rolls A's tail (the secret in it) into a chunk
    chunk = [k for k in _holds(b, secret) if k in _chunks(b, doomed)]
    assert len(chunk) == 1
    D.delete_run(other, doomed, reason="user asked")
    G.gc(other.store)
    assert _holds(b, secret) == []  # gc did its work...
    with pytest.raises((Erased, Refused)):  # ...and A, last seen with a full tail, commits to that log once: refused
        a.record_attempt(doomed, 1001, 0, "succeeded")
    assert _holds(b, secret) == [], "the stale writer's plain chunk PUT put the removed body back"


def test_a_readers_cached_chunk_from_before_gc_does_not_serve_a_removed_body(tmp_path):
    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(doomed, 1000, 0, "succeeded")  # the tail, the secret in it, goes into a chunk
    reader = _log(b, str(tmp_path / "cache-r"))  # reads every entry of the run's log: the chunk is in its cache directory
    assert reader.get_blob(blob) == secret
    gcer = _log(b, str(tmp_path / "cache-g"))
    D.delete_run(gcer, doomed, reason="user asked")
    G.gc(gcer.store)
    assert _holds(b, secret) == []
    with pytest.raises(BodyRemoved):
        gcer.store.logs.run_log(doomed).read(blob)  # the engine that stripped it
    with pytest.raises(BodyRemoved):
        _log(b, str(tmp_path / "cache-new")).store.logs.run_log(doomed).read(blob)  # a new cache
    # the same machine's next process, its cache read before gc: the removed body must not be read from it
    again = _log(b, str(tmp_path / "cache-r"))
    with pytest.raises(BodyRemoved):
        again.store.logs.run_log(doomed).read(blob)


def test_a_long_lived_reader_does_not_serve_a_removed_body_from_memory(tmp_path):
    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(doomed, 1000, 0, "succeeded")
    reader = _log(b, str(tmp_path / "cache-r"))
    assert reader.get_blob(blob) == secret
    engine = reader.store.logs.run_log(doomed)  # the log it read the body from, kept open
    gcer = _log(b, str(tmp_path / "cache-g"))
    D.delete_run(gcer, doomed, reason="user asked")
    G.gc(gcer.store)
    engine.refresh(force=True)  # it takes in the deletion and whatever gc changed in HEAD
    with pytest.raises(BodyRemoved):
        engine.read(blob)


# -- the read set of a commit rebuilt on a newer head ------------------------------------------------------------
# On S3 a commit body runs without a lock; when its HEAD swap loses to another writer's entry, the engine rebuilds the
# same entry on the new head if every ref the body read through ``txn.read_ref`` (or ``watch``) still holds. A body
# that reads a run's refs through ``store.run_refs`` (``RunLog.view``) leaves them out of that set.

def _race(writer: RunLog, other_commit) -> None:
    """The next HEAD swap ``writer`` sends loses to ``other_commit()``, run just before it (another process)."""
    bucket = writer.store.logs.bucket  # type: ignore[attr-defined]  (every log's: the next swap of any HEAD)

    def foreign_then_412(b, key, data, etag):
        other_commit()
        return "412"

    bucket.before_put_if_match.append(foreign_then_412)


def test_a_fork_rebuilt_after_a_racing_commit_of_a_side_effect_flags_it(tmp_path):
    """fork() computes the compensation from the parent branch's records up to its head; a non-idempotent effect
    committed on that branch past the fork point by a writer that wins the race must be flagged on the fork
    (locally the writer lock orders them), or the fork must be refused/re-run — never land unflagged."""
    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    run = a.start_run(subject="s")
    a.record_attempt(run, 0, 0, "succeeded")
    a.record_intent(run, "refund-1", 1, "issue_refund", False)
    other = _log(b, str(tmp_path / "cache-b"))
    _race(a, lambda: other.commit_intent(run, "refund-1"))
    fork = a.fork(run, 0, 1, reason="retry", make_live=False)
    head = other.view(run).head(0)
    assert fork.parent_head == head, "the fork names a parent head older than the branch's head when it landed"
    assert [c["intent"] for c in fork.compensation] == ["refund-1"], "a committed refund past the fork point is not flagged"


class _RaceBeforeFirstHead(MemoryBucket):
    """Runs ``before()`` (another process's commit) just before the next run log's HEAD is created (its first commit's
    ``PUT If-None-Match: *``): on format 7 a copy's commit swaps the copy's HEAD, never its source's."""

    before = None

    def put_if_absent(self, key: str, data: bytes):
        if key.startswith("runs/") and key.endswith("/HEAD") and self.before is not None:
            before, self.before = self.before, None
            before()
        return super().put_if_absent(key, data)


def test_a_copy_racing_its_sources_deletion_is_a_copy_of_the_source_as_read_and_erasable(tmp_path, monkeypatch):
    """fork_run() reads the source's log, then writes the copy's: two logs, two HEADs, no swap covers both. On format 7
    (as on format 6 between releasing the source's lock and taking the copy's) a deletion of the source landing between
    the read and the copy's first HEAD does not stop the copy: it is a copy of the source as it was read, as a copy made
    just before the deletion is (docs/FORMAT.md, "Format 7"). What must hold: the store verifies clean, the copy reads,
    gc keeps only what the copy's lineage names, and deleting the copy too lets gc take the secret out of the bucket."""
    from objstore.runs.verify import verify_report

    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    b = _RaceBeforeFirstHead()
    a = _log(b, str(tmp_path / "cache-a"))
    source = a.start_run(subject="s")
    secret = os.urandom(16).hex().encode()
    a.record_attempt(source, 0, 0, "succeeded", output=a.put_blob(secret))
    other = _log(b, str(tmp_path / "cache-b"))
    deleted = []
    b.before = lambda: deleted.append(D.delete_run(other, source, reason="user asked"))
    try:
        copy = a.fork_run(source)
    except Erased:
        copy = None  # the deletion came first: no copy (what a single HEAD always gave)
    assert deleted, "the source's deletion did not race the copy"
    G.gc(other.store)
    auditor = _log(b, str(tmp_path / "cache-auditor"))
    assert verify_report(auditor).problems == []
    if copy is not None:
        assert [r.kind for r in auditor.iter_records(copy)][-1] == "run_started"
        D.delete_run(other, copy, reason="the copy too")
        G.gc(other.store)
    assert _holds(b, secret) == [], "a deleted run's secret stays in the bucket after every run naming it is deleted"


@pytest.mark.langgraph  # imports LangGraph (or runs a process that does): left out without it
def test_a_langgraph_put_writes_that_loses_the_race_to_another_process_still_lands(tmp_path):
    """put_writes runs in the caller-batch form (``log.batch()``), so on S3 a commit made stale by another process's
    write to the same thread raises StaleBase (a Conflict, exit 7) out of put_writes instead of being re-run; put()
    retries a Conflict, put_writes does not. Locally the writer lock orders the two and both land."""
    from langgraph.checkpoint.base import empty_checkpoint

    from objstore.integrations.langgraph import ObjstoreSaver

    b = MemoryBucket()
    sa, sb = ObjstoreSaver(_log(b, str(tmp_path / "cache-a"))), ObjstoreSaver(_log(b, str(tmp_path / "cache-b")))
    cp = empty_checkpoint()
    cfg = sa.put({"configurable": {"thread_id": "T", "checkpoint_ns": ""}}, cp, {"source": "loop", "step": 0}, {})
    sb.get_tuple(cfg)  # B knows the thread's run
    _race(sa.log, lambda: sb.put_writes(cfg, [("ch", "from b")], "task-b"))
    sa.put_writes(cfg, [("ch", "from a")], "task-a")
    got = sorted((w[0], w[2]) for w in sb.get_tuple(cfg).pending_writes)
    assert got == [("task-a", "from a"), ("task-b", "from b")]


def test_task_open_after_another_process_appended_to_the_session_lands(tmp_path):
    """sessions.open_task / close_task decide in a caller batch (``store.batch()``) and append. A process's HEAD copy
    is only refreshed by a 412 on S3, so after another process appended to the same run the append's branch move is
    stale: StaleBase (exit 7) out of open_task, where locally the writer lock serializes them and both land. (The same
    shape: grants.py grant/revoke, compaction.py's segment commit, the LangGraph saver's put_writes.)"""
    from objstore.journal import sessions as S

    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    run = a.start_run(subject="s")
    S.open_task(a, run, "t1")
    other = _log(b, str(tmp_path / "cache-b"))
    other.record_attempt(run, 0, 0, "succeeded")  # another process (the agent, a Host) appends to the session
    S.open_task(a, run, "t2")
    assert [t["task"] for t in S.open_tasks(other, run)] == ["t1", "t2"]


def test_a_run_deletion_rebuilt_after_a_racing_journal_update_lists_its_body(tmp_path, monkeypatch):
    """delete_runs lists the session's journal and segment blobs in the deletion (gc removes the blobs it lists,
    and only those), reading the journal ref through store.run_refs: a journal version written by another process
    while the deletion was built is not in its read set, so the deletion lands without that version's body, which
    then outlives gc in the bucket. Locally the writer lock orders them."""
    from objstore import journal as J
    from objstore.storage import identity

    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "keys"))
    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    owner, _ = identity.ensure_owner_key(a.store)
    run = J.start_session(a, "alice", run="s1")
    J.update_journal(a, run, owner, {"entries": [{"id": "e", "text": "v1"}]})
    other = _log(b, str(tmp_path / "cache-b"))
    secret = os.urandom(16).hex()
    _race(a, lambda: J.update_journal(other, run, owner, {"entries": [{"id": "e", "text": secret}]}))
    D.delete_run(a, run, reason="user asked")
    G.gc(a.store)
    assert _holds(b, secret.encode()) == [], "the journal version written meanwhile outlived the run's deletion and gc"


def test_a_journal_update_rebuilt_after_a_racing_deletion_of_its_run_does_not_land(tmp_path, monkeypatch):
    """The Host's update watches the grants and the owner key it decided on (capture_refs), not the run's other
    refs: a deletion of the session by another process that wins the race leaves the update's read set as it was,
    so the update is rebuilt on the head that deleted the run. The log's rule that a deleted run's refs do not move
    refuses it then (Refused, exit 8, where the same update after the deletion locally is Deleted, exit 12): nothing
    lands. A guard, passing: it fails if that rule is ever the only thing relaxed."""
    from objstore import journal as J
    from objstore.storage import identity, runrefs

    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "keys"))
    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    owner, _ = identity.ensure_owner_key(a.store)
    run = J.start_session(a, "alice", run="s1")
    J.update_journal(a, run, owner, {"entries": [{"id": "e", "text": "v1"}]})
    other = _log(b, str(tmp_path / "cache-b"))
    before = other.store.read_ref(runrefs.journal_ref(run))
    _race(a, lambda: D.delete_run(other, run, reason="user asked"))
    with pytest.raises((Erased, Refused)):
        J.update_journal(a, run, owner, {"entries": [{"id": "e", "text": "after the deletion"}]})
    fresh = _log(b, str(tmp_path / "cache-f"))
    assert fresh.store.read_ref(runrefs.journal_ref(run)) == before


def test_a_cached_chunk_edited_to_look_collected_does_not_hide_a_live_body(tmp_path):
    """gc's stripped form of an entry keeps its checksum (it covers ids, types and lengths, not blocks), so a cached
    chunk copy edited into that form (s3entries.strip_entry on a live body: what gc would write) still chains and is
    believed: the live blob reads as BodyRemoved (exit 12, 'erased') though no deletion or redaction names it. An edited
    cache copy must never change an answer: a removed body read from a cached copy should be read from the bucket once."""
    import msgspec

    from objstore.storage.log.format import ZERO
    from objstore.storage.log.parse import parse_entry

    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(doomed, 1000, 0, "succeeded")  # the secret's entry goes into a chunk
    cache = str(tmp_path / "cache-r")
    reader = _log(b, cache)
    assert reader.get_blob(blob) == secret
    eng = reader.store.logs.run_log(doomed)
    keys = os.path.join(eng.cache, "keys")  # type: ignore[attr-defined]  (the doomed run's log's cache)
    edited = 0
    for name in os.listdir(keys):
        with open(os.path.join(keys, name), "rb") as f:
            ch = msgspec.msgpack.decode(f.read(), type=s3layout.Chunk)
        slots = list(ch.slots)
        for i, slot in enumerate(slots):
            n = ch.first + i
            if not isinstance(slot, bytes):
                continue
            e = parse_entry(slot, 0, len(slot), eng._cks.get(n - 1, ZERO), 0, n)  # type: ignore[attr-defined]
            got = s3entries.strip_entry(slot, e, {blob})
            if got is not None:
                slots[i], edited = got[0], edited + 1
        with open(os.path.join(keys, name), "wb") as f:
            f.write(msgspec.msgpack.encode(s3layout.Chunk(ch.fmt, ch.prev, ch.first, slots)))
    assert edited == 1
    assert _log(b, cache).get_blob(blob) == secret  # the bucket still holds it; nothing deleted it


def test_a_writer_that_read_a_blob_before_gc_stripped_it_stores_it_again_when_it_names_it(tmp_path, monkeypatch):
    """A commit leaves out the objects its tables say are stored (content addressing), and S3Txn.put stores one again
    only if its tables know gc removed it. gc strips a chunk in place (HEAD is unchanged when no tail slot is), so a
    process that read the chunk before gc keeps the blob's old location; when it then names the same content in a
    new record after gc's 'named meanwhile' scan, the record lands without the body: a live record whose blob is
    gone (verify: missing-body), though both its writer and gc succeeded."""
    from objstore.runs.verify import verify

    monkeypatch.setattr(s3gc, "GC_SETTLE_SECONDS", 0.0)
    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(doomed, 1000, 0, "succeeded")  # the blob's entry goes into a chunk
    writer = _log(b, str(tmp_path / "cache-w"))  # opened before gc: its tables hold the blob's location
    assert writer.get_blob(blob) == secret and writer.store.logs.run_log(doomed).loc(blob) is not None
    gcer = _log(b, str(tmp_path / "cache-g"))
    D.delete_run(gcer, doomed, reason="user asked")
    G.gc(gcer.store)
    assert _holds(b, secret) == []
    rec = writer.record_attempt(keep, 1001, 0, "succeeded", output=writer.put_blob(secret))  # the same content, live now
    fresh = _log(b, str(tmp_path / "cache-f"))
    assert fresh.get_blob(fresh.record(rec.id).body["output"]) == secret
    assert verify(fresh) == []


def test_a_per_run_ingest_rerun_on_a_newer_head_lands(tmp_path):
    """ingest --per-run commits each run's events with Store.atomically, which runs the body again after StaleBase.
    _apply replaces an event's text blob fields by the blob ids it put (in place, in the parsed events), so the
    re-run finds an id whose blob was put only in the aborted attempt: IngestError 'blob … is not in the store'
    (exit 5, the run reported failed) for input that is fine, where locally it lands."""
    import json

    from objstore.runs import ingest as I

    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    run = a.start_run("r-1", subject="s")
    other = _log(b, str(tmp_path / "cache-b"))
    events = I.parse([json.dumps({"v": 1, "type": "attempt", "run": run, "step": 0, "attempt": 0, "state": "succeeded",
                                  "output": "the output"})])
    _race(a, lambda: other.record_attempt(run, 9, 0, "succeeded"))  # another process appends to the run first
    summary = I.apply_events_per_run(a, events)
    assert summary["failed"] == [] and summary["landed"] == [run]


class _WriterDuringPrune(MemoryBucket):
    """After gc lists the chunk/ and entry/ keys, the first chunk GET of its walk of the named chain lets
    ``during()`` run first (another process's commit)."""

    during = None
    listed = False

    def list(self, prefix: str = ""):
        if prefix.endswith("/chunk/"):  # a run's log's (runs/<xx>/<run>/chunk/)
            self.listed = True
        return super().list(prefix)

    def get(self, key: str):
        if self.listed and "/chunk/" in key and self.during is not None:
            during, self.during = self.during, None
            during()
        return super().get(key)


def test_gc_pruning_an_old_orphan_chunk_a_writer_adopts_meanwhile_does_not_break_the_log(tmp_path):
    """A writer killed between its chunk PUT and its HEAD swap leaves the chunk of HEAD's full tail unnamed; the next
    commit after it PUTs the same key again (the same bytes) and names it. gc --prune-unreferenced-older-than lists
    the keys, walks the named chain, then deletes what is unnamed and old by the listing's time: when that next commit
    lands between its walk and its DELETE, the chunk HEAD now names is deleted — the log is damaged (CorruptLog on
    every read). An unnamed chunk that starts right after the newest named chunk can still be named: not prunable."""
    from objstore.errors import CorruptLog

    b = _WriterDuringPrune()
    a = _log(b, str(tmp_path / "cache-a"))
    run = a.start_run(subject="s")
    i = 0
    while not _chunks(b, run) or _tail(a, run) != TAIL_ENTRIES:  # a chunk named, the tail full
        a.record_attempt(run, i, 0, "succeeded")
        i += 1

    def killed(bucket, key, data, etag):
        raise KeyboardInterrupt  # kill -9 after the chunk PUT, before the HEAD swap lands

    b.before_put_if_match.append(killed)
    with pytest.raises(KeyboardInterrupt):
        a.record_attempt(run, i, 0, "succeeded")
    named = {run_prefix(run) + k for k in a.store.logs.run_log(run).named_keys()}  # type: ignore[attr-defined]
    (orphan,) = [k for k in _chunks(b) if k not in named]
    assert orphan.startswith(run_prefix(run))
    b.poke(orphan, b.raw()[orphan], modified=0.0)  # written long ago (the store was idle since)
    writer = _log(b, str(tmp_path / "cache-w"))
    b.during = lambda: writer.record_attempt(run, 1000, 0, "succeeded")  # the first commit after the idle time
    G.gc(_log(b, str(tmp_path / "cache-g")).store, prune_unreferenced_older_than=3600)
    assert orphan in b.raw(), "gc deleted the chunk HEAD names"
    fresh = _log(b, str(tmp_path / "cache-f"))
    try:
        n = len(fresh.records(run))
    except CorruptLog as e:
        raise AssertionError(f"the log is damaged after gc: {e}") from None
    assert n == i + 2
