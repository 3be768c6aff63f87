"""One writer process of the S3 race tests (tests/s3/test_s3_race.py); not a test module itself.

Usage: ``python s3_race_writer.py URL SHARED_RUN WRITER COUNT BARRIER [--die-before-head-swap]``

The environment (AWS_ENDPOINT_URL …) points it at one gateway. It opens ``objstore.open_store(URL)``,
starts its own run, prints ``{"own": RUN}``, waits until the file BARRIER exists (so all writers start
at once), then for i in 0..COUNT-1 appends one record to SHARED_RUN and one to its own run. Every
acknowledged append is printed as one JSON line ``{"run", "lsn", "id", "tag"}`` (flushed) before the
next append starts, so whatever the test reads was acknowledged; an append that ends in ``Busy`` is
printed as ``{"busy": TAG}`` and the writer goes on. A tag names the writer, i and the run
(``w3-17-shared``), so the test can count every record exactly. At the end it prints ``{"done": …}``.

``--die-before-head-swap``: the writer appends to its own run only, and SIGKILLs itself right after a
chunk PUT returned, before the conditional HEAD PUT that would have named the chunk (the
``kill -9`` between the chunk PUT and the HEAD swap). The chunk's key is printed first, as
``{"orphan": KEY}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")  # one write per line: a kill never leaves half a line we trust
    sys.stdout.flush()


def main() -> int:
    url, shared, writer, count, barrier = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    die = "--die-before-head-swap" in sys.argv[6:]

    import objstore
    from objstore.errors import Busy

    log = objstore.open_store(url)
    if die:
        bucket = log.store.logs.bucket  # type: ignore[attr-defined]  (every log's keys go through it: format 7)
        last_put: list[str] = []
        plain_put, create, swap = bucket.put, bucket.put_if_absent, bucket.put_if_match

        def put(key: str, data: bytes) -> str:
            etag = plain_put(key, data)
            last_put.append(key)
            return etag

        def put_if_absent(key: str, data: bytes) -> str | None:  # how a chunk is written (create-once)
            etag = create(key, data)
            last_put.append(key)
            return etag

        def put_if_match(key: str, data: bytes, etag: str) -> str | None:
            if last_put and "/chunk/" in last_put[-1]:  # runs/<xx>/<run>/chunk/…
                say(orphan=last_put[-1])
                os.kill(os.getpid(), signal.SIGKILL)  # the chunk is in the bucket; HEAD never names it
            last_put.clear()
            return swap(key, data, etag)

        bucket.put, bucket.put_if_absent, bucket.put_if_match = put, put_if_absent, put_if_match
    while True:  # the writers start their runs at once: with a tiny retry bound (the Busy test) that may be Busy too
        try:
            own = log.start_run(subject=f"writer-{writer}")
            break
        except Busy:
            time.sleep(0.01)
    say(own=own)
    while not os.path.exists(barrier):
        time.sleep(0.005)
    busy = 0
    t0 = time.monotonic()
    for i in range(count):
        for which, run in (("shared", shared), ("own", own)):
            if die and which == "shared":
                continue
            tag = f"w{writer}-{i}-{which}"
            try:
                rec = log.append(run, "task_opened", {"task": tag})
            except Busy:
                busy += 1
                say(busy=tag)
                continue
            say(run=run, lsn=rec.lsn, id=rec.id.hex(), tag=tag)
    say(done=writer, busy=busy, seconds=round(time.monotonic() - t0, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
