"""Child for the full-disk gc test (tests/lifecycle/test_gc_adversarial.py): run the ``objstore gc`` CLI in this
process with the disk "full" at its K-th ``os.write`` (half the buffer written, then OSError ENOSPC,
as a real full disk does; every later write fails too). K = 0: never; the number of writes gc made is
then printed to stdout (after the CLI's own output) as ``writes N``.

    python gc_adv_enospc.py STORE K
"""

import errno
import os
import sys


def main():
    root, k = sys.argv[1], int(sys.argv[2])
    real = os.write
    count = [0]

    def write(fd, data):
        count[0] += 1
        if k and count[0] >= k:
            if count[0] == k and len(data) > 1:
                real(fd, bytes(memoryview(data)[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    os.write = write
    import objstore_cli  # noqa: F401 - as objstore/__main__.py does
    from objstore_cli.main import main as cli_main

    sys.argv = ["objstore", "--store", root, "gc"]
    try:
        cli_main()
    except SystemExit as e:
        if k == 0:
            sys.stdout.write(f"writes {count[0]}\n")
        raise SystemExit(e.code) from None
    if k == 0:
        sys.stdout.write(f"writes {count[0]}\n")


if __name__ == "__main__":
    main()
