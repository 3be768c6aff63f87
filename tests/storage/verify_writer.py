"""A writer process for verify's seal race test (tests/storage/test_verify_seal_race.py).

    python verify_writer.py STORE RUN STOPFILE MAX DONEFILE

Seals segments small: ``objstore.storage.log.local_write.SEAL_BYTES`` is set from $OBJSTORE_TEST_SEAL_BYTES before
anything is written. Appends one attempt (with a fresh prompt blob on every third) per commit to
RUN until STOPFILE exists or MAX commits are made, then creates DONEFILE (no seal of RUN's log follows: a verify
waiting for one stops waiting) and prints the number made.
"""

import os
import sys

import objstore.storage.log.local_write
from objstore import RunLog, Store


def main(argv):
    store, run, stop, most, done = argv[1], argv[2], argv[3], int(argv[4]), argv[5]
    objstore.storage.log.local_write.SEAL_BYTES = int(os.environ["OBJSTORE_TEST_SEAL_BYTES"])
    log = RunLog(Store.open(store, fsync="off"))
    n = 0
    while n < most and not os.path.exists(stop):
        prompt = log.put_blob(f"prompt {run} {n} ".encode() * 8) if n % 3 == 0 else None
        log.record_attempt(run, 1, n, "failed", prompt=prompt)
        n += 1
    open(done, "w").close()
    print(n)


if __name__ == "__main__":
    main(sys.argv)
