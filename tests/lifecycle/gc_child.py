"""Child for the gc / repack kill -9 loop (tests/lifecycle/test_gc.py): run ``objstore gc`` in-process on STORE and
SIGKILL this process at its K-th file operation (K = 0: never). Prints the number of file operations
gc made when it finishes.

    python tests/lifecycle/gc_child.py STORE K
"""

import os
import signal
import sys

OPS = ("open", "write", "pwrite", "writev", "replace", "rename", "fsync", "fdatasync", "ftruncate", "unlink", "link", "mkdir", "makedirs")


def main():
    root, k = sys.argv[1], int(sys.argv[2])
    from objstore.lifecycle import gc as G
    from objstore.storage.store import Store

    store = Store.open(root)
    count = [0]

    def wrap(real):
        def op(*a, **kw):
            count[0] += 1
            if count[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **kw)
        return op

    for name in OPS:
        if hasattr(os, name):
            setattr(os, name, wrap(getattr(os, name)))
    G.gc(store)
    sys.stdout.write(f"{count[0]}\n")


if __name__ == "__main__":
    main()
