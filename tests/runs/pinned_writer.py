"""Child for test_pinned_view.py: appends and rewinds a run until told to stop (stdin closes)."""

import sys
import threading

from objstore import RunLog, Store

root, run = sys.argv[1], sys.argv[2]
log = RunLog(Store.open(root))
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
i = 0
while not stop.is_set() and i < 400:
    i += 1
    log.record_attempt(run, step=100 + i, attempt=0, state="failed" if i % 3 == 0 else "succeeded")
    if i % 25 == 0:
        fr = log.rewind(run, 1, reason=f"writer rewind {i}")
        print(f"forked {fr.branch}", flush=True)
print(f"done {i}", flush=True)
