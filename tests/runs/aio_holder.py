"""Child process of tests/runs/test_aio.py: holds the store's writer lock in an open batch (with one
record written in it) until a line arrives on stdin, then commits. Prints ``held`` once the lock is
held and ``committed <entry>`` after the commit. It gives up waiting after 60 s, so a test whose
event loop is blocked (the bug under test) fails instead of hanging."""

import select
import sys

from objstore import RunLog, Store

root, run = sys.argv[1], sys.argv[2]
log = RunLog(Store.open(root))
with log.batch():
    rec = log.record_attempt(run, step=99, attempt=0, state="succeeded", context={"by": "another process"})
    print("held", flush=True)
    select.select([sys.stdin], [], [], 60)
print("committed", log.store.logs.run_log(run).loc_entry(rec.id), flush=True)
