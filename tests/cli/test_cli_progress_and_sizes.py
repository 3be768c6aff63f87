"""push, clone, backup and gc: a progress bar on a terminal, none into a pipe or under --json; human sizes.

They run for tens of seconds on a large store; on a terminal each now shows a rich progress bar on
stderr (runs done of the total for push and clone, bytes of log for backup, segments packed for gc),
and never when stderr is a pipe or under --json (not even an escape code). Their summaries print sizes
as people read them (``1.2 MiB``), while --json keeps the raw integers. The terminal is a real
pseudo-terminal (``pty``), the commands real processes.
"""

import json
import os
import re

import pytest
from helpers import run_cli, run_on_terminal

from objstore import RunLog, Store

BAR = "━"  # rich's bar
HUMAN = re.compile(r"\b\d+(\.\d)? (bytes|KiB|MiB|GiB)\b")
RAW = re.compile(r"\b\d{4,} bytes\b")


def _store(tmp_path, name="src"):
    root = str(tmp_path / name)
    log = RunLog(Store.init(root, fsync="off"))
    for r in range(4):
        run = log.start_run(f"r{r}")
        for i in range(30):
            log.record_attempt(run, i, 0, "succeeded", output=log.put_blob(os.urandom(2000)))
    log.store.logs.close()
    return root


def _on_terminal(args, cwd):
    """The CLI with stdin, stdout and stderr on a pseudo-terminal: its exit code and what the terminal showed."""
    env = dict(os.environ, COLUMNS="120", TERM="xterm")
    env.pop("OBJSTORE_DIR", None)
    env.pop("NO_COLOR", None)
    return run_on_terminal(args, env, cwd=cwd, timeout=120)


def _commands(tmp_path):
    src = _store(tmp_path)
    return {
        "push": (["--store", src, "push", str(tmp_path / "mirror")], "push"),
        "clone": (["clone", src, str(tmp_path / "copy")], "clone"),
        "backup": (["--store", src, "backup", str(tmp_path / "bak")], "backup"),
        "gc": (["--store", src, "gc"], "gc"),
    }


@pytest.mark.parametrize("command", ["push", "clone", "backup", "gc"])
def test_a_bar_on_a_terminal_and_human_sizes(tmp_path, command):
    args, label = _commands(tmp_path)[command]
    rc, shown = _on_terminal(args, str(tmp_path))
    assert rc == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)
    bars = [ln for ln in re.split(r"[\r\n]+", plain) if ln.startswith(label + " " + BAR)]
    assert bars, f"{command}: no progress bar on a terminal: {shown!r}"
    done = {"push": "4/4 runs", "clone": "4/4 runs", "backup": "KiB/", "gc": "segment(s) packed"}[command]
    assert any(done in ln for ln in bars), bars[-1]  # what it counts: runs, bytes of log, segments
    assert HUMAN.search(plain) and not RAW.search(plain), plain


@pytest.mark.parametrize("command", ["push", "clone", "backup", "gc"])
def test_no_bar_into_a_pipe_and_sizes_stay_human(tmp_path, command):
    args, _label = _commands(tmp_path)[command]
    store = None
    if args[0] == "--store":
        store, args = args[1], args[2:]
    rc, out, err = run_cli(*args, store=store, cwd=str(tmp_path), exit_code=0)
    assert BAR not in out + err and "\x1b" not in out + err
    assert HUMAN.search(out + err) and not RAW.search(out + err), out + err


@pytest.mark.parametrize("command", ["push", "clone", "backup", "gc"])
def test_json_has_no_bar_and_raw_integers(tmp_path, command):
    args, _label = _commands(tmp_path)[command]
    rc, shown = _on_terminal([*args, "--json"], str(tmp_path))
    assert rc == 0 and BAR not in shown
    got = json.loads(shown[shown.index("{"):].splitlines()[0])
    sizes = [v for k, v in got.items() if "bytes" in k]
    assert sizes and all(isinstance(v, int) for v in sizes), got
