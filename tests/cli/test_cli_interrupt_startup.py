"""Ctrl-C while the command is still starting (issue 16): from the first line of objstore on, a SIGINT is
one line and exit 130 — never a KeyboardInterrupt traceback out of objstore's, click's or the library's
imports, never an "Exception ignored" traceback with the command going on to exit 0.

The signal is sent at delays spread over the whole start-up (the imports take tens of milliseconds here),
to the console script and to ``python -m objstore``. What no package can cover is the interpreter's own
start-up before objstore's first line runs (``site`` and ``runpy``, or the console script's ``import re``):
a traceback whose every frame is there is Python's, not ours, and is reported apart, never failed on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from objstore.interrupt import install_if_the_command, is_the_command

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(sys.executable), "objstore")
OURS = ("objstore", "click", "msgspec", "blake3", "zstandard", "sqlite3")


# Where objstore's first line is: a traceback whose objstore frames are all these module bodies was
# raised before the handler could be installed (the modules that hold that line being loaded).
BEFORE_THE_HANDLER = (os.path.join("objstore_cli", "__init__.py"), os.path.join("objstore", "__init__.py"),
                      os.path.join("objstore", "interrupt.py"), os.path.join("objstore", "__main__.py"))


def _ours(err: str) -> bool:
    """The traceback passes through objstore (past its first line) or what it imports."""
    frames = [line.strip() for line in err.splitlines() if line.lstrip().startswith("File ")]
    for f in frames:
        if any(f"{os.sep}{name}{os.sep}" in f for name in OURS if name != "objstore") and "site-packages" in f:
            return True
        if f"{os.sep}objstore" in f and "__editable__" not in f and f'File "{SCRIPT}"' not in f:
            if not (any(b in f for b in BEFORE_THE_HANDLER) and f.endswith("in <module>")):
                return True
    return False


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("s") / "store")
    env = {**os.environ, "OBJSTORE_KEYS": root + "-keys"}
    subprocess.run([sys.executable, "-m", "objstore", "--store", root, "demo"], check=True, capture_output=True, env=env, timeout=300)
    return root, env


@pytest.mark.slow
@pytest.mark.parametrize("how", ["script", "module"])
def test_ctrl_c_at_any_moment_of_start_up_is_one_line(store, how):
    root, env = store
    argv = [SCRIPT] if how == "script" else [sys.executable, "-m", "objstore"]
    # the install puts bin/objstore beside the interpreter (pyproject script-files): its absence is a failure
    assert how != "script" or os.path.exists(SCRIPT), f"no objstore command at {SCRIPT}"
    ours, pythons = [], 0
    for i in range(36):
        p = subprocess.Popen([*argv, "--store", root, "log", "latest", "--graph"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=env)
        time.sleep(0.005 * i)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=120)[1].decode()
        if "Traceback" in err or "Exception ignored" in err:
            if _ours(err) or "Exception ignored" in err:
                ours.append(f"{how} at {0.005 * i:.3f}s: exit {p.returncode}: {err[-600:]}")
            else:
                pythons += 1
        elif p.returncode not in (0, 130, -signal.SIGINT):
            ours.append(f"{how} at {0.005 * i:.3f}s: exit {p.returncode}: {err[-300:]}")
        elif p.returncode == 130:
            assert err == "objstore: error: interrupted\n", err
    print(f"{how}: {pythons} of 36 Ctrl-Cs landed in the interpreter's start-up, before objstore's first line")
    assert ours == []


def test_only_the_command_installs_the_start_up_handler(monkeypatch):
    """A program that imports objstore (this test run) keeps its own Ctrl-C: a KeyboardInterrupt."""
    assert not is_the_command()
    before = signal.getsignal(signal.SIGINT)
    install_if_the_command()
    assert signal.getsignal(signal.SIGINT) is before
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "objstore", "log"])
    assert is_the_command()
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "pytest", "objstore"])
    monkeypatch.setattr(sys, "argv", ["/x/pytest", "objstore"])
    assert not is_the_command()


def test_a_ctrl_c_python_could_not_raise_still_ends_the_command_with_130(tmp_path):
    """A KeyboardInterrupt raised in a weakref callback is "ignored" by Python; the command would go on
    and exit 0. The root group remembers it and ends with exit 130 and its one line."""
    code = ("import sys, weakref\n"
            "sys.argv = ['objstore', '--store', sys.argv[1], 'init']\n"
            "from objstore_cli import main as m\n"
            "from objstore import interrupt\n"
            "interrupt.take_over()\n"
            "class T: pass\n"
            "def cb(_):\n    raise KeyboardInterrupt\n"
            "t = T(); r = weakref.ref(t, cb); del t\n"
            "m.cli(prog_name='objstore')\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OBJSTORE_KEYS": str(tmp_path / "k")})
    assert (p.returncode, p.stderr) == (130, "objstore: error: interrupted\n")  # init's own lines may be on stdout
