"""A writer process for the online backup test (tests/lifecycle/test_backup.py).

    python backup_writer.py STORE RUN STOPFILE

Seals segments small (``objstore.storage.log.local_write.SEAL_BYTES`` from $OBJSTORE_TEST_SEAL_BYTES, set before
anything is written). Starts RUN, then appends one attempt (a fresh prompt blob on every third) per
commit until STOPFILE exists; prints ``ready`` after its first commit and, at the end, the number of
commits that returned (each one acknowledged: durable before it returned).
"""

import os
import sys

import objstore.storage.log.local_write
from objstore import RunLog, Store


def main(argv):
    store, run, stop = argv[1], argv[2], argv[3]
    objstore.storage.log.local_write.SEAL_BYTES = int(os.environ["OBJSTORE_TEST_SEAL_BYTES"])
    log = RunLog(Store.open(store))
    log.start_run(run)
    n = 0
    while not os.path.exists(stop):
        prompt = log.put_blob(f"prompt {run} {n} ".encode() * 8) if n % 3 == 0 else None
        log.record_attempt(run, 1, n, "failed", prompt=prompt)
        n += 1
        if n == 1:
            print("ready", flush=True)
    print(n, flush=True)


if __name__ == "__main__":
    main(sys.argv)
