"""Child of tests/storage/test_run_isolation.py: appends N records to one run, one durable commit each.

argv: store root, run, N, then "hold" to hold the run's lock in an open batch until stdin closes (printing
``held`` once it holds it) instead of appending."""

import sys

from objstore import RunLog, Store

root, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = RunLog(Store.open(root))
if len(sys.argv) > 4 and sys.argv[4] == "hold":
    with log.batch():
        log.record_attempt(run, 1000, 0, "running")  # reads the run's head: its lock is held from here
        print("held", flush=True)
        sys.stdin.read()
    print("committed", flush=True)
else:
    for i in range(n):
        with log.batch():  # one commit: the bodies and the record naming them
            prompt, output = log.put_blob(f"prompt {i}".encode()), log.put_blob(f"output {i}".encode())
            log.record_attempt(run, i, 0, "succeeded", prompt=prompt, output=output)
    print("done", flush=True)
