"""A writer that was open before a forgery (issue 15, "Forged history"), as its own OS process.

    python truth_writer.py STORE RUN

Opens the store (its tables are the log's up to now), prints ``ready``, waits for one line on
stdin, then records one attempt on RUN from its own state and prints ``ok <entry>`` or
``refused <ErrorClass> <message>`` (exit 0 either way: the parent judges the answer).
"""

import sys

from objstore import RunLog, Store
from objstore.errors import ObjstoreError


def main(argv):
    store, run = argv[1], argv[2]
    log = RunLog(Store.open(store))
    log.view(run)  # the run is known to this process before the forgery
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        log.record_attempt(run, step=99, attempt=1, state="succeeded")
    except ObjstoreError as e:
        print("refused", type(e).__name__, str(e).replace("\n", " "), flush=True)
        return
    print("ok", log.store.engine.position().entry, flush=True)


if __name__ == "__main__":
    main(sys.argv)
