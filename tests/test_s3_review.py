"""Review of the S3 engine (issue 19): what gc's in-place rewrite of a chunk leaves for a stale writer and for a
reader's cache. Over the in-memory bucket (storage.bucket.MemoryBucket): two engines on one bucket are two
processes (each its own tables, HEAD copy and cache directory), and the order of their requests is the test's.

- A writer whose last commit left HEAD's inline tail full keeps that HEAD in memory (a commit does not read HEAD
  first: a stale head costs a 412). If another writer rolled that tail into a chunk and gc then stripped a deleted
  body out of it, the stale writer's next commit PUTs the chunk again from its own copy of the tail, body included,
  under the same key (a plain PUT), and HEAD names that chunk: the body is back in the bucket, long after gc's
  settle pause.
- A chunk key names its entries' checksums, which gc keeps when it strips a body: a reader's cached copy of the
  chunk from before gc still chains, so it is believed, and the removed body is read from it (a new process on the
  same machine, or a long-lived one from memory).
"""

from __future__ import annotations

import os

import pytest

from objstore.errors import BodyRemoved
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.runlog import RunLog
from objstore.storage import s3engine
from objstore.storage.bucket import MemoryBucket
from objstore.storage.s3engine import TAIL_ENTRIES, S3Engine
from objstore.storage.store import Store


def _log(bucket: MemoryBucket, cache: str) -> RunLog:
    st = Store(S3Engine(bucket, cache), root=cache)
    st._version = 3
    st.url = bucket.url
    return RunLog(st)


def _holds(bucket: MemoryBucket, secret: bytes) -> list[str]:
    """The keys whose bytes hold ``secret``, raw or inside any zstd frame."""
    import zstandard

    out = []
    for key, data in bucket.raw().items():
        if secret in data:
            out.append(key)
            continue
        i = data.find(b"\x28\xb5\x2f\xfd")
        while i >= 0:
            try:
                if secret in zstandard.ZstdDecompressor().decompressobj().decompress(data[i:]):
                    out.append(key)
                    break
            except zstandard.ZstdError:
                pass
            i = data.find(b"\x28\xb5\x2f\xfd", i + 1)
    return out


def _tail(log: RunLog) -> int:
    head = log.store.engine._head  # type: ignore[attr-defined]
    return len(head.tail) if head is not None else 0


def _secret_in_the_next_chunk(tmp_path) -> tuple[MemoryBucket, RunLog, str, str, bytes, bytes]:
    """Writer A's last commit fills HEAD's tail (TAIL_ENTRIES entries), one of them the doomed run's secret;
    A's engine keeps that HEAD. Returns (bucket, A, keep run, doomed run, secret, the secret blob's id)."""
    b = MemoryBucket()
    a = _log(b, str(tmp_path / "cache-a"))
    keep, doomed = a.start_run(subject="s"), a.start_run(subject="s")
    i = 0
    while _tail(a) != 1:  # the next commit starts a fresh tail
        a.record_attempt(keep, i, 0, "succeeded")
        i += 1
    secret = os.urandom(16).hex().encode()
    blob = a.put_blob(secret)
    a.record_attempt(doomed, 0, 0, "succeeded", output=blob)
    while _tail(a) != TAIL_ENTRIES:
        a.record_attempt(keep, i, 0, "succeeded")
        i += 1
    assert [k for k in b.raw() if k.startswith("chunk/")] and _holds(b, secret) == ["HEAD"]
    return b, a, keep, doomed, secret, blob


def test_a_stale_writer_rolling_its_old_tail_after_gc_does_not_put_a_removed_body_back(tmp_path, monkeypatch):
    monkeypatch.setattr(s3engine, "GC_SETTLE_SECONDS", 0.0)
    b, a, keep, doomed, secret, _blob = _secret_in_the_next_chunk(tmp_path)
    other = _log(b, str(tmp_path / "cache-b"))
    other.record_attempt(keep, 1000, 0, "succeeded")  # rolls A's tail (the secret in it) into a chunk
    chunk = [k for k in _holds(b, secret) if k.startswith("chunk/")]
    assert len(chunk) == 1
    D.delete_run(other, doomed, reason="user asked")
    G.gc(other.store)
    assert _holds(b, secret) == []  # gc did its work...
    a.record_attempt(keep, 1001, 0, "succeeded")  # ...and A, last seen with a full tail, commits once
    assert _holds(b, secret) == [], "the stale writer's plain chunk PUT put the removed body back"


def test_a_readers_cached_chunk_from_before_gc_does_not_serve_a_removed_body(tmp_path):
    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(keep, 1000, 0, "succeeded")  # the tail, the secret in it, goes into a chunk
    reader = _log(b, str(tmp_path / "cache-r"))  # reads every entry: the chunk is in its cache directory
    assert reader.get_blob(blob) == secret
    gcer = _log(b, str(tmp_path / "cache-g"))
    D.delete_run(gcer, doomed, reason="user asked")
    G.gc(gcer.store)
    assert _holds(b, secret) == []
    with pytest.raises(BodyRemoved):
        gcer.store.engine.read(blob)  # the engine that stripped it
    with pytest.raises(BodyRemoved):
        _log(b, str(tmp_path / "cache-new")).store.engine.read(blob)  # a new cache
    # the same machine's next process, its cache read before gc: the removed body must not be read from it
    again = _log(b, str(tmp_path / "cache-r"))
    with pytest.raises(BodyRemoved):
        again.store.engine.read(blob)


def test_a_long_lived_reader_does_not_serve_a_removed_body_from_memory(tmp_path):
    b, a, keep, doomed, secret, blob = _secret_in_the_next_chunk(tmp_path)
    a.record_attempt(keep, 1000, 0, "succeeded")
    reader = _log(b, str(tmp_path / "cache-r"))
    assert reader.get_blob(blob) == secret
    gcer = _log(b, str(tmp_path / "cache-g"))
    D.delete_run(gcer, doomed, reason="user asked")
    G.gc(gcer.store)
    reader.store.engine.refresh(force=True)  # it takes in the deletion and whatever gc changed in HEAD
    with pytest.raises(BodyRemoved):
        reader.store.engine.read(blob)
