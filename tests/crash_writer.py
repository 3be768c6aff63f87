"""Child process for test_crash.py: appends forever, acknowledging each durable write.

Prints "ack <kind> <head hex> <count>" only after the write (objects, then ref
move) has returned; the parent kills it with SIGKILL at a random instant.
"""

import sys

from objstore import RunLog, Store

root, run, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = RunLog(Store.open(root))
if run not in log.runs():
    log.start_run(run)
print("ready", flush=True)
i = 0
while True:
    i += 1
    if i % 7 == 0:
        name = log.start_run(f"c{seed}-{i}")
        head = log.view(name).heads[0]
        print(f"ack start {head.hex()} {name}", flush=True)
    elif (i + seed) % 3 == 0:
        with log.store.batch():
            for k in range(25):
                rec = log.record_attempt(run, step=i, attempt=k, state="failed" if k % 2 else "succeeded",
                                         prompt=log.put_blob(b"prompt %d %d " % (i, k) * 8))
        print(f"ack batch {rec.id.hex()} {i}", flush=True)
    else:
        rec = log.record_attempt(run, step=i, attempt=0, state="succeeded", output=log.put_blob(b"out %d %d" % (seed, i)))
        print(f"ack single {rec.id.hex()} {i}", flush=True)
