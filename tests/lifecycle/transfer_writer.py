"""A writer of one run as its own OS process, for the push tests (a source or a target written while a push runs).

    python transfer_writer.py STORE RUN N

Starts RUN if it does not exist, appends N attempts to it (one commit each) and prints ``done <N>``.
"""

import sys

from objstore import RunLog, Store
from objstore.errors import RunNotFound


def main(argv):
    store, run, n = argv[1], argv[2], int(argv[3])
    log = RunLog(Store.open(store))
    try:
        log.view(run)
    except RunNotFound:
        log.start_run(run)
    for i in range(n):
        log.record_attempt(run, 1000 + i, 0, "succeeded", output=log.put_blob(f"{run} {i}".encode()))
    print("done", n, flush=True)


if __name__ == "__main__":
    main(sys.argv)
