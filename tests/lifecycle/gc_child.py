"""Child for the gc / repack kill -9 loop (tests/lifecycle/test_gc.py): run ``objstore gc`` in-process on STORE and
SIGKILL this process at its K-th file operation (K = 0: never). Prints the number of file operations
gc made when it finishes.

    python tests/lifecycle/gc_child.py STORE K
    python tests/lifecycle/gc_child.py --serve

``--serve``: one process for the whole loop. It imports gc and the store (and nothing else of objstore's) once, then
for each line ``STORE<TAB>K<TAB>OUT<TAB>ERR`` on stdin forks a child that does exactly what ``STORE K`` does, its
stdout and stderr written to the files OUT and ERR, and prints the child's exit code (-9: killed) on a line. The
child opens the store after the fork, as a fresh process does after its imports: the server never opens one, so no
store state is shared; what is saved is an interpreter's start and objstore's imports for each K (most of a kill
loop's time).
"""

import os
import signal
import sys

OPS = ("open", "write", "pwrite", "writev", "replace", "rename", "fsync", "fdatasync", "ftruncate", "unlink", "link", "mkdir", "makedirs")


def gc_killed_at(root, k):
    """gc on ROOT, this process SIGKILLed at its K-th file operation; the number of operations if it finished."""
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
    return count[0]


def serve():
    import traceback

    from objstore.lifecycle import gc as _G  # noqa: F401 - imported once here, before any fork
    from objstore.storage.store import Store as _Store  # noqa: F401

    for line in sys.stdin:
        root, k, out, err = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:  # the child: never returns into the loop
            code = 0
            try:
                for fd, path in ((1, out), (2, err)):  # before the os calls are counted
                    f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(f, fd)
                    os.close(f)
                sys.stdout.write(f"{gc_killed_at(root, int(k))}\n")
            except BaseException:  # noqa: BLE001 - reported as the standalone child reports it: a traceback, exit 1
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(f"{os.waitstatus_to_exitcode(status)}\n")
        sys.stdout.flush()


def main():
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    root, k = sys.argv[1], int(sys.argv[2])
    sys.stdout.write(f"{gc_killed_at(root, k)}\n")


if __name__ == "__main__":
    main()
