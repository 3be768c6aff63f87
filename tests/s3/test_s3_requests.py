"""Requests counted on a real SeaweedFS (the bucket client counts one per HTTP request): a commit is one PUT; a
reader whose cache saw HEAD last revalidates it with one conditional GET (a 304) and reads nothing else; a cold
reader reads the marker, HEAD and each chunk once."""

from __future__ import annotations

from objstore import open_store
from objstore.storage.store import Store


def test_a_commit_is_one_put_and_a_warm_open_is_one_304(s3_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache"))
    log = open_store(s3_url)
    run = log.start_run(subject="s")
    b = log.store.engine.bucket
    before = dict(b.requests)
    for i in range(40):
        with log.batch():
            blob = log.put_blob(b"fresh output %d" % i + bytes(2048))
            log.record_attempt(run, i, 0, "succeeded", output=blob)
    got = {k: v - before.get(k, 0) for k, v in b.requests.items()}
    chunks = (41 // 16)  # tails rolled into chunks while these commits ran (each one PUT more)
    assert got == {"PUT": 40 + chunks, "GET": 0}
    reader = Store.open(s3_url)  # its cache saw HEAD at the last refresh: revalidated, nothing else read
    reader.engine.refresh(force=True)
    warm = Store.open(s3_url)
    assert dict(warm.engine.bucket.requests) == {"GET": 1}
    assert warm.engine.position() == log.store.engine.position()
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cold"))
    cold = Store.open(s3_url)
    assert dict(cold.engine.bucket.requests) == {"GET": 2 + chunks}  # marker, HEAD, each chunk
    assert list(cold.engine.iter_chain(run, 0))[-1][0] == 40


def test_an_edited_cached_head_is_not_believed(s3_url, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache"))
    log = open_store(s3_url)
    run = log.start_run(subject="s")
    log.append(run, "task_opened", {"task": "real"})
    Store.open(s3_url)  # leaves HEAD and its ETag in the cache
    head = os.path.join(log.store.root, "HEAD")
    tag, _, body = open(head, "rb").read().partition(b"\n")
    with open(head, "wb") as f:  # the ETag kept, the bytes an older HEAD's (one entry less)
        f.write(tag + b"\n" + body[:-1] + bytes([body[-1] ^ 1]))
    again = Store.open(s3_url)
    assert again.engine.bucket.requests["GET"] == 2 and not again.engine.head_unchanged  # HEAD read whole, and the marker
    assert again.engine.position() == log.store.engine.position()
