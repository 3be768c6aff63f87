"""The objstore command line (installed as the ``objstore_cli`` package).

Importing click and the command's part of the library takes tens of milliseconds (more where no
bytecode is cached; main.py imports on demand, issue 15); a Ctrl-C in that window would be a
KeyboardInterrupt traceback. Until ``main`` takes over (and restores Python's handler, which the
root group turns into exit 130), SIGINT prints the same one line — or JSON object — and exits 130.
"""

import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    if any(a == "--json" for a in sys.argv[1:]):
        sys.stderr.write('{"error":"interrupted","exit":130,"message":"interrupted"}\n')
    else:
        sys.stderr.write("objstore: error: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def _is_the_command() -> bool:
    """The ``objstore`` console script or ``python -m objstore`` — not a program (a test run, an
    application) that merely imports the CLI, whose Ctrl-C is its own business."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) == "objstore" or argv0.endswith(os.path.join("objstore", "__main__.py"))


if _is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
