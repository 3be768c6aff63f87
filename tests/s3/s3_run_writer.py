"""One writer process of tests/s3/test_s3_run_writers.py; not a test module itself.

Usage: ``python s3_run_writer.py URL RUN WRITER COUNT MODE BARRIER [DIE_AT]``

The environment points it at one gateway. It opens the store, waits until the file BARRIER exists (all writers start
at once; ``-`` starts at once), then makes COUNT commits to RUN: MODE ``append`` — one ``append`` each (a
self-contained commit, re-run by the store on StaleBase); ``batch`` — ``with log.batch():`` reading the run's live
branch, then appending two records (a caller's batch: it holds the run's lease, so it never meets StaleBase). Every
acknowledged record is printed as one JSON line ``{"lsn", "id", "tag"}`` (flushed) as soon as its call returned, so
whatever the test reads was acknowledged. A StaleBase or Busy that reaches it is printed as ``{"surfaced": …}`` and
the writer exits 3.

``DIE_AT`` (n): SIGKILL this process just before its n-th request to the bucket (every method of the bucket is
counted; the request is never made): a kill -9 at a request boundary, a lease holder's included.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def die_at(n: int) -> None:
    from objstore.storage.s3.client import ObstoreBucket

    seen = [0]
    for name in ("get", "get_if_changed", "put", "put_if_absent", "put_if_match", "delete", "list"):
        real = getattr(ObstoreBucket, name)

        def counted(self, *a, _real=real, **k):
            seen[0] += 1
            if seen[0] >= n:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(self, *a, **k)

        setattr(ObstoreBucket, name, counted)


def main() -> int:
    url, run, writer, count, mode, barrier = sys.argv[1:7]
    if len(sys.argv) > 7:
        die_at(int(sys.argv[7]))
    import objstore
    from objstore.errors import Busy, StaleBase

    log = objstore.open_store(url)
    while barrier != "-" and not os.path.exists(barrier):
        time.sleep(0.005)
    try:
        for i in range(int(count)):
            tag = f"w{writer}-{i}"
            if mode == "append":
                r = log.append(run, "task_opened", {"task": tag})
                say(lsn=r.lsn, id=r.id.hex(), tag=tag)
            else:
                with log.batch():
                    live = log.view(run).live  # what the batch decides on: the run's live branch as it stands
                    a = log.append(run, "task_opened", {"task": tag + "a", "title": f"on branch {live}"})
                    b = log.append(run, "task_opened", {"task": tag + "b"})
                say(lsn=a.lsn, id=a.id.hex(), tag=tag + "a")
                say(lsn=b.lsn, id=b.id.hex(), tag=tag + "b")
    except (StaleBase, Busy) as e:
        say(surfaced=f"{type(e).__name__}: {e}")
        return 3
    say(done=writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
