"""Ctrl-C while the ``objstore`` command is still starting: one line and exit 130, never a traceback.

Importing click and the command's part of the library takes tens of milliseconds; a SIGINT in that
window would be Python's KeyboardInterrupt and its traceback. So the very first thing the command's
process runs — ``src/objstore/__init__.py`` for ``python -m objstore``, ``objstore_cli/__init__.py`` for
the console script — installs this handler, and the root click group replaces it once it runs
(``objstore_cli.main``: a Ctrl-C from then on is the ``Interrupted`` error, exit 130, the same line).
A program that merely imports objstore keeps its own SIGINT handling.

What no package can cover: the interpreter's own start-up and ``site``, before the first line of
objstore runs (a few milliseconds; the console script's own ``import re`` is in it too).
"""

# the C module itself: ``signal.py`` (its enums) takes a millisecond to import, inside the window this closes
import _signal  # type: ignore[import-not-found]  # no stub: the same functions as signal.py, without its enums
import os
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    if any(a == "--json" for a in sys.argv[1:]):
        sys.stderr.write('{"error":"interrupted","exit":130,"message":"interrupted"}\n')
    else:
        sys.stderr.write("objstore: error: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def is_the_command() -> bool:
    """This process is the ``objstore`` console script or ``python -m objstore`` — not a program (a
    test run, an application) that merely imports the library or the CLI."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "objstore" or argv0.endswith(os.path.join("objstore", "__main__.py")):
        return True
    orig = list(getattr(sys, "orig_argv", []))  # while ``-m objstore`` imports the package, argv[0] is "-m"
    return "-m" in orig and orig[orig.index("-m") + 1:orig.index("-m") + 2] == ["objstore"]


def install_if_the_command() -> None:
    if is_the_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _interrupted_while_starting)


# Once the command line has taken over, a Ctrl-C is Python's KeyboardInterrupt, which the root group
# reports as exit 130. Raised inside a callback Python cannot propagate from (a weakref callback, a
# __del__, an import lock's cleanup), it would be printed as "Exception ignored ... Traceback" and the
# command would go on to exit 0: such a Ctrl-C is remembered instead, and the root group ends with 130.
_swallowed = False
_default_unraisablehook = sys.unraisablehook


def _unraisable(unraisable: "sys.UnraisableHookArgs") -> None:
    global _swallowed
    if isinstance(unraisable.exc_value, KeyboardInterrupt) or (
            isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type, KeyboardInterrupt)):
        _swallowed = True
        return
    _default_unraisablehook(unraisable)


def take_over() -> None:
    """From here on Ctrl-C raises KeyboardInterrupt (the root group turns it into exit 130), and one
    raised where Python cannot propagate it is remembered (``interrupted_meanwhile``), not printed."""
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    sys.unraisablehook = _unraisable


def interrupted_meanwhile() -> bool:
    return _swallowed
