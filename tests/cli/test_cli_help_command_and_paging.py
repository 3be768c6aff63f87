"""`objstore help [COMMAND...]`, `log --oneline`, and `episode`/`diff` paged on a terminal like `log`.

`help` prints the help of the root, a command or a group's subcommand (`help journal show`), as
`--help` does; an unknown name is a usage error. `log --oneline` is git's spelling of
`--format oneline`. `episode` and `diff` go through $PAGER when stdout is a terminal (run here on
a pseudo-terminal, with PAGER a script that records what it got) and never into a pipe.
"""

import os

import pytest
from helpers import run_cli, run_on_terminal

AT = 1800000000


@pytest.fixture
def demo(tmp_path):
    root = str(tmp_path / "s")
    run_cli("demo", "--run", "demo", "--at", str(AT), store=root, exit_code=0)
    return root


# -- help ---------------------------------------------------------------------------------
@pytest.mark.parametrize("words", [(), ("log",), ("journal",), ("journal", "show"), ("gc",), ("help",)])
def test_help_is_the_commands_help(words, tmp_path):
    rc, out, err = run_cli("help", *words, cwd=tmp_path, exit_code=0)
    rc, expected, _ = run_cli(*words, "--help", cwd=tmp_path, exit_code=0)
    assert out == expected and err == ""
    assert out.startswith("Usage: " + " ".join(("objstore", *words)))


def test_help_of_an_unknown_command_is_a_usage_error(tmp_path):
    rc, out, err = run_cli("help", "nosuch", cwd=tmp_path, exit_code=2)
    assert out == "" and err.startswith("objstore: error: ") and "'nosuch'" in err and len(err.splitlines()) == 1
    rc, out, err = run_cli("help", "log", "extra", cwd=tmp_path, exit_code=2)
    assert "'objstore log' has no subcommands" in err


def test_root_help_names_the_help_command(tmp_path):
    rc, out, err = run_cli("--help", cwd=tmp_path, exit_code=0)
    assert "\n  help " in out


# -- log --oneline --------------------------------------------------------------------------
def test_log_oneline_is_format_oneline(demo):
    rc, out, err = run_cli("log", "demo", "--oneline", store=demo, exit_code=0)
    rc, expected, _ = run_cli("log", "demo", "--format", "oneline", store=demo, exit_code=0)
    assert out == expected and len(out.splitlines()) > 3
    rc, out, err = run_cli("log", "demo", "--oneline", "--format", "full", store=demo, exit_code=2)
    assert "--oneline" in err


# -- the pager ------------------------------------------------------------------------------
def _on_terminal(args, env):
    return run_on_terminal(args, env)


@pytest.fixture
def pager(tmp_path):
    paged = tmp_path / "paged.txt"
    script = tmp_path / "pager.sh"  # click runs $PAGER as an argv (no shell)
    script.write_text(f"#!/bin/sh\ncat > {paged}\n")
    script.chmod(0o755)
    env = dict(os.environ, PAGER=str(script), NO_COLOR="1")
    env.pop("OBJSTORE_DIR", None)
    return paged, env


@pytest.mark.parametrize("cmd,marker", [(("episode", "demo"), "run demo subject"), (("diff", "demo", "0", "1"), "shared history")])
def test_paged_on_a_terminal_never_into_a_pipe(cmd, marker, demo, pager):
    paged, env = pager
    rc, shown = _on_terminal(["--store", demo, *cmd], env)
    assert rc == 0 and paged.exists(), f"{cmd[0]} on a terminal did not go through $PAGER: {shown!r}"
    assert marker in paged.read_text() and marker not in shown
    paged.unlink()
    rc, shown = _on_terminal(["--store", demo, *cmd, "--no-pager"], env)
    assert rc == 0 and not paged.exists() and marker in shown
    rc, out, err = run_cli(*cmd, store=demo, env_extra={"PAGER": env["PAGER"]}, exit_code=0)
    assert not paged.exists() and marker in out, "piped: never paged"
