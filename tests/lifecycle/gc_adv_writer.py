"""A writer process for the adversarial gc tests (tests/lifecycle/test_gc_adversarial.py).

    python gc_adv_writer.py STORE RUN STOPFILE ACKFILE SEAL_BYTES MAX

Seals segments small (``engine.SEAL_BYTES`` = SEAL_BYTES, set before anything is written: it is read at
commit time). RUN exists already (several writers may share it). Appends one attempt per commit (a fresh
blob on every other one) until STOPFILE exists or MAX commits were made (then it waits for STOPFILE:
the store stays small); fsync as $GC_ADV_FSYNC says (default: the store's). After each commit returns, appends
``<record id hex> <lsn> <blob id hex or ->`` to ACKFILE and flushes it (the commit was acknowledged:
only then is its id written). Prints ``ready`` after the first commit, the number of commits at the end.
"""

import os
import sys
import time

import objstore.storage.log.local_write


def main(argv):
    root, run, stop, ackpath, seal, most = argv[1], argv[2], argv[3], argv[4], int(argv[5]), int(argv[6])
    objstore.storage.log.local_write.SEAL_BYTES = seal
    from objstore import RunLog, Store

    log = RunLog(Store.open(root, fsync=os.environ.get("GC_ADV_FSYNC")))
    n = 0
    with open(ackpath, "a", buffering=1) as ack:
        while not os.path.exists(stop) and n < most:
            blob = log.put_blob(f"{run} {os.getpid()} {n} ".encode() * 40) if n % 2 == 0 else None
            rec = log.record_attempt(run, 1, n, "failed", prompt=blob, context={"pid": os.getpid(), "n": n})
            ack.write(f"{rec.id.hex()} {rec.lsn} {blob.hex() if blob else '-'}\n")
            n += 1
            if n == 1:
                print("ready", flush=True)
    while not os.path.exists(stop):
        time.sleep(0.01)
    print(n, flush=True)


if __name__ == "__main__":
    main(sys.argv)
