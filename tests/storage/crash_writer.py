"""Child process for test_crash.py: writes forever, acknowledging each durable write.

A random mix (seeded by the round) of single appends, batches of appends, new runs,
rewinds, and batches holding a rewind plus appends to the new branch. Each line is
printed only after the write has returned (its commit is durable):

* ``ack single <record id> <branch>`` / ``ack batch <record id> <branch>`` (one line per
  record of a batch, after the batch has committed);
* ``ack start <run_started id> <run>``;
* ``ack rewind <fork id> <new branch>``.

The parent kills it with SIGKILL at a random instant.
"""

import random
import sys

from objstore import RunLog, Store
from objstore.storage import codec

root, run, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = RunLog(Store.open(root))
if run not in log.runs():
    log.start_run(run)
rnd = random.Random(seed)
print("ready", flush=True)


def rewind():
    """Rewind the live branch to a random LSN of it; None if it has no record yet."""
    view = log.view(run)
    head = view.heads[view.live]
    if log.store.get(head)[0] == codec.FORK:
        return None
    nxt = log.next_of(head)[0]
    return log.rewind(run, rnd.randrange(nxt), reason=f"crash round {seed}")


i = 0
while True:
    i += 1
    x = rnd.random()
    if x < 0.08:
        name = log.start_run(f"c{seed}-{i}")
        head = log.view(name).heads[0]
        print(f"ack start {head.hex()} {name}", flush=True)
    elif x < 0.16:
        fr = rewind()
        if fr is not None:
            print(f"ack rewind {fr.fork_id.hex()} {fr.branch}", flush=True)
    elif x < 0.22:  # one commit: a rewind and the new branch's first records
        recs = []
        with log.store.batch():
            fr = rewind()
            if fr is not None:
                for k in range(3):
                    recs.append(log.record_attempt(run, step=i, attempt=k, state="succeeded",
                                                   output=log.put_blob(b"after rewind %d %d %d" % (seed, i, k))))
        if fr is not None:
            print(f"ack rewind {fr.fork_id.hex()} {fr.branch}", flush=True)
        print("".join(f"ack batch {r.id.hex()} {r.branch}\n" for r in recs), end="", flush=True)
    elif x < 0.55:
        recs = []
        with log.store.batch():
            for k in range(25):
                recs.append(log.record_attempt(run, step=i, attempt=k, state="failed" if k % 2 else "succeeded",
                                               prompt=log.put_blob(b"prompt %d %d " % (i, k) * 8)))
        print("".join(f"ack batch {r.id.hex()} {r.branch}\n" for r in recs), end="", flush=True)
    else:
        rec = log.record_attempt(run, step=i, attempt=0, state="succeeded", output=log.put_blob(b"out %d %d" % (seed, i)))
        print(f"ack single {rec.id.hex()} {rec.branch}", flush=True)
