"""A run's log on object storage reads as freshly as its store log: the window a CLI command sets on the store's
engine (``Ctx.log``: one command reads as of its start) holds for every run log the command opens, so reading a run
revalidates its HEAD once, not at every ref read. Counted on an in-memory bucket (one GET per revalidation)."""

from __future__ import annotations

from helpers import s3_log

from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.store import Store


def _run_head_gets(bucket: MemoryBucket, run: str, fn) -> int:
    seen: list[str] = []
    real = bucket.get_if_changed

    def counted(key, etag):
        seen.append(key)
        return real(key, etag)
    bucket.get_if_changed = counted  # type: ignore[method-assign]
    try:
        fn()
    finally:
        bucket.get_if_changed = real  # type: ignore[method-assign]
    return sum(1 for k in seen if k.endswith(f"/{run}/HEAD"))


def test_a_run_log_takes_the_store_logs_freshness_window(tmp_path):
    bucket = MemoryBucket()
    log = s3_log(bucket, tmp_path / "writer")
    run = log.start_run(subject="s")
    for i in range(3):
        log.record_attempt(run, i, 0, "succeeded")
    reader = Store.on_bucket(bucket, str(tmp_path / "reader"))
    reader.engine.fresh_seconds = 60.0  # as Ctx.log sets it for one CLI command
    before = dict(bucket.requests)
    reads = _run_head_gets(bucket, run, lambda: [reader.run_refs(run) for _ in range(5)])
    assert reads == 0  # opened with one GET of its HEAD; the five reads inside the window ask nothing
    assert dict(bucket.requests).get("GET", 0) - before.get("GET", 0) >= 1
    assert reader.logs.run_log(run).fresh_seconds == 60.0


def test_without_a_window_every_read_of_a_run_revalidates(tmp_path):
    bucket = MemoryBucket()
    log = s3_log(bucket, tmp_path / "writer")
    run = log.start_run(subject="s")
    reader = Store.on_bucket(bucket, str(tmp_path / "reader"))  # a library reader: sees every commit before its read
    reads = _run_head_gets(bucket, run, lambda: [reader.run_refs(run) for _ in range(3)])
    assert reads == 3
