"""A reader of one run's episodes, for tests/runs/test_state_per_run.py (run in its own process).

``state_reader.py ROOT RUN N``: N times, append one attempt to RUN and read its episode from the state cache
(so the cache is written and read each time); then print, one a line, every file under ROOT this process has
open whose name starts with ``state.db`` (read from /proc/self/fd while the cache's connections are open).
"""

import os
import sys

from objstore import RunLog, Store
from objstore.runs.query import episode


def main() -> None:
    root, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = RunLog(Store.open(root, fsync="off"))
    for i in range(n):
        log.record_attempt(run, 100 + i, 0, "succeeded")
        assert episode(log, run, all_branches=True).to_json() == episode(log, run, all_branches=True, source="refold").to_json()
    real = os.path.realpath(root)
    for fd in sorted(os.listdir("/proc/self/fd")):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if path.startswith(real + os.sep) and os.path.basename(path).startswith("state.db"):
            print(path)


if __name__ == "__main__":
    main()
