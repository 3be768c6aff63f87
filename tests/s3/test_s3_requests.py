"""Requests counted on a real SeaweedFS (the bucket client counts one per HTTP request): a commit to a run is one
PUT, of that run's HEAD only (format 7: a HEAD per run); a reader whose cache saw the HEADs last revalidates each it
opens with one conditional GET (a 304) and reads nothing else; a cold reader reads the marker, the store log's HEAD,
the run's HEAD and each chunk of the run's log once."""

from __future__ import annotations

from objstore import open_store
from objstore.storage.runlogs.bucketlogs import STORE_PREFIX, run_prefix
from objstore.storage.s3.layout import HEAD_KEY, TAIL_ENTRIES
from objstore.storage.store import Store


def test_a_commit_is_one_put_and_a_warm_open_is_one_304(s3_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache"))
    log = open_store(s3_url)
    run = log.start_run(subject="s")
    b = log.store.logs.bucket
    def contents() -> dict[str, bytes]:
        return {x.key: b.get(x.key).data for x in b.list("")}

    was = contents()
    before = dict(b.requests)
    for i in range(40):
        with log.batch():
            blob = log.put_blob(b"fresh output %d" % i + bytes(2048))
            log.record_attempt(run, i, 0, "succeeded", output=blob)
    got = {k: v - before.get(k, 0) for k, v in b.requests.items()}
    chunks = (41 // TAIL_ENTRIES)  # the run log's tails rolled into chunks while these commits ran (each one PUT more)
    # a caller's batch takes the run's writer's lease first (one PUT of its HEAD), then commits (one more)
    assert got == {"PUT": 2 * 40 + chunks, "GET": 0, "LIST": 0}  # (the LIST and GETs are this test's own, before and after)
    # what they wrote: the run's HEAD and its new chunks; nothing of the store log, the catalog or another log
    now = contents()
    changed = sorted(k for k in now if was.get(k) != now[k])
    assert sorted(was) == sorted(k for k in now if not k.startswith(run_prefix(run) + "chunk/"))
    assert changed == [run_prefix(run) + HEAD_KEY] + sorted(k for k in now if k.startswith(run_prefix(run) + "chunk/"))
    assert len(changed) == 1 + chunks and not any(k.startswith(STORE_PREFIX) for k in changed)
    before = dict(b.requests)
    for i in range(5):  # a plain append, no batch: one PUT of the run's HEAD each (46 entries: no chunk more)
        log.append(run, "task_opened", {"task": f"plain {i}"})
    assert {k: v - before.get(k, 0) for k, v in b.requests.items()} == {"PUT": 5, "GET": 0, "LIST": 0}
    reader = Store.open(s3_url)  # its cache saw the HEADs at the last refresh: revalidated, nothing else read
    reader.logs.run_log(run).refresh(force=True)
    warm = Store.open(s3_url)
    warm_run = warm.logs.run_log(run)
    assert dict(warm.engine.bucket.requests) == {"GET": 2}  # the store log's HEAD, the run's HEAD: each a 304
    assert warm_run.head_unchanged  # type: ignore[attr-defined]
    assert warm_run.position() == log.store.logs.run_log(run).position()
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cold"))
    cold = Store.open(s3_url)
    cold_run = cold.logs.run_log(run)
    assert dict(cold.engine.bucket.requests) == {"GET": 3 + chunks}  # marker, the store log's HEAD, the run's HEAD, each chunk
    assert list(cold_run.iter_chain(run, 0))[-1][0] == 45


def test_an_edited_cached_head_is_not_believed(s3_url, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache"))
    log = open_store(s3_url)
    run = log.start_run(subject="s")
    log.append(run, "task_opened", {"task": "real"})
    Store.open(s3_url).logs.run_log(run)  # leaves the run's HEAD and its ETag in the cache
    head = os.path.join(log.store.logs.run_log(run).cache, "HEAD")  # type: ignore[attr-defined]  (the run log's)
    tag, _, body = open(head, "rb").read().partition(b"\n")
    with open(head, "wb") as f:  # the ETag kept, the bytes an older HEAD's (one entry less)
        f.write(tag + b"\n" + body[:-1] + bytes([body[-1] ^ 1]))
    again = Store.open(s3_url)
    before = dict(again.engine.bucket.requests)
    again_run = again.logs.run_log(run)
    got = {k: v - before.get(k, 0) for k, v in again.engine.bucket.requests.items()}
    assert before == {"GET": 1}  # the store log's HEAD, revalidated (its cached copy was not edited)
    assert got == {"GET": 1} and not again_run.head_unchanged  # type: ignore[attr-defined]  (the run's HEAD read whole, not a 304)
    assert again_run.position() == log.store.logs.run_log(run).position()
