"""The runs-and-history commands (issue 16), each tried as a git or click user would:
``log --all-branches --graph``, a --since/--until that does not parse (exit 2), ``episode`` of a fresh
fork (the inherited attempts), ``episode`` on a terminal (rich, one line per row in 80 columns, no
escape code under NO_COLOR), ``export --json``, rewinding a branch with no records, and --help texts
free of ticket numbers."""

import json
import os
import re
import sys

import pytest
from helpers import run_cli, run_on_pty

import objstore
from objstore.runs.query import episode as lib_episode


@pytest.fixture
def forked(tmp_path):
    """A run of five attempts (one failed) rewound to LSN 3: branch 1 is live, fresh, with no own records."""
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    run = log.start_run("r1")
    for step in range(1, 5):
        log.record_attempt(run, step=step, attempt=0, state="failed" if step == 2 else "succeeded",
                           usage={"input_tokens": step, "output_tokens": 10})
    log.rewind(run, to_lsn=3)
    return root, run


def _pty(root, *args, env=None):
    e = {"PATH": os.environ.get("PATH", ""), "TERM": "xterm", **(env or {})}
    e.pop("COLUMNS", None)
    return run_on_pty([sys.executable, "-m", "objstore", "--store", root, *args], env=e)


# 1 -------------------------------------------------------------------------------------------------------------
def test_log_all_branches_graph_is_the_graph(forked):
    root, run = forked
    rc, graph, err = run_cli("log", run, "--graph", store=root, exit_code=0)
    rc, both, err = run_cli("log", run, "--all-branches", "--graph", store=root, exit_code=0)
    assert graph and both == graph


# 2 -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--since", "--until"])
@pytest.mark.parametrize("value", ["2.foos", "@" + "1" * 40])
def test_a_time_that_does_not_parse_is_a_usage_error(forked, option, value):
    root, run = forked
    rc, out, err = run_cli("log", run, option, value, store=root, exit_code=2)
    assert out == ""
    assert len(err.splitlines()) == 1 and f"'{option}'" in err and "@EPOCH" in err and "1h30m" in err, err


@pytest.mark.parametrize("value", ["2.days", "1.week.ago", "1h30m"])
def test_gits_time_forms_are_accepted(forked, value):
    root, run = forked
    rc, out, err = run_cli("log", run, "--since", value, "--format", "oneline", store=root, exit_code=0)
    assert len(out.splitlines()) == 5  # all written just now: the fork, then branch 0 up to LSN 3


# 3 -------------------------------------------------------------------------------------------------------------
def test_episode_of_a_fresh_fork_shows_what_it_inherits(forked):
    root, run = forked
    rc, out, err = run_cli("episode", run, store=root, exit_code=0)
    lines = out.splitlines()
    assert lines[1] == "branch 1 (live) forked from 0@3"
    assert lines[2].split() == ["step", "attempt", "state", "prompt", "output", "usage", "from"]
    rows = [ln.split()[:3] + ln.split()[-1:] for ln in lines[3:]]
    assert all('"output_tokens": 10}' in ln for ln in lines[3:])  # into a pipe the usage stays its JSON
    # LSN 0 is run_started: LSNs 1..3 are the attempts of steps 1..3, inherited from branch 0
    assert rows == [["1", "0", "succeeded", "0"], ["2", "0", "failed", "0"], ["3", "0", "succeeded", "0"]], out


def test_episode_json_stays_the_libraries_bytes(forked):
    root, run = forked
    rc, out, err = run_cli("episode", run, "--json", store=root, exit_code=0)
    log = objstore.open_store(root)
    assert out.encode() == lib_episode(log, run).to_json() + b"\n"
    assert json.loads(out)["branches"][0]["attempts"] == []  # the inherited ones are not the branch's own


# 4 -------------------------------------------------------------------------------------------------------------
def test_episode_on_a_terminal_is_a_rich_table_one_line_a_row(forked):
    root, run = forked
    rc, got, err = _pty(root, "episode", run)
    assert rc == 0, err
    text = got.decode()
    assert "┏" in text and "tokens=12" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("│")]
    assert len(rows) == 3, text  # one line per attempt: no cell wrapped
    assert all(len(re.sub(r"\x1b\[[0-9;]*m", "", ln).rstrip("\r")) <= 80 for ln in text.splitlines()), text
    assert b"\x1b[" in got  # colours on a terminal (the failed attempt is red, the inherited ones dim)


def test_episode_under_no_color_and_into_a_pipe_has_no_escape_code(forked):
    root, run = forked
    rc, got, err = _pty(root, "episode", run, env={"NO_COLOR": "1"})
    assert rc == 0, err
    assert b"\x1b" not in got and "┏".encode() in got
    assert got.startswith(f"run {run} subject".encode())
    rc, out, err = run_cli("episode", run, store=root, exit_code=0)
    assert "\x1b" not in out and out.startswith(f"run {run} subject")


# 5 -------------------------------------------------------------------------------------------------------------
def test_export_json_is_one_list_of_the_json_lines(forked):
    root, run = forked
    rc, lines, err = run_cli("export", run, store=root, exit_code=0)
    rc, listed, err = run_cli("export", run, "--json", store=root, exit_code=0)
    assert len(listed.splitlines()) == 1
    assert json.loads(listed) == [json.loads(x) for x in lines.splitlines()] and json.loads(listed)


# 6 -------------------------------------------------------------------------------------------------------------
def test_rewinding_a_branch_with_no_records_says_so(forked):
    root, run = forked
    rc, out, err = run_cli("rewind", run, "--to-lsn", "0", store=root, exit_code=5)
    assert out == ""
    assert err == f"objstore: error: invalid input: branch 1 of run {run} has no records yet; there is nothing to fork at LSN 0\n"


@pytest.mark.parametrize("command", ["runs", "log", "branches", "rewind", "fork", "diff", "export", "ingest", "episode"])
def test_help_says_what_the_command_does_not_the_ticket(command):
    rc, out, err = run_cli(command, "--help", exit_code=0)
    for ticket in ("seed T", "T1.", "T2.", "stub compactor", "T-745", "issue 1"):
        assert ticket not in out, f"{command} --help: {ticket!r}"


@pytest.mark.parametrize("command", ["runs", "branches"])
def test_runs_and_branches_on_a_terminal_are_rich_tables(forked, command):
    root, run = forked
    args = [command] + ([run] if command == "branches" else [])
    rc, got, err = _pty(root, *args)
    assert rc == 0 and "┏".encode() in got and b"\x1b[" in got, err
    assert all(len(re.sub(r"\x1b\[[0-9;]*m", "", ln).rstrip("\r")) <= 80 for ln in got.decode().splitlines())
    rc, got, err = _pty(root, *args, env={"NO_COLOR": "1"})
    assert rc == 0 and "┏".encode() in got and b"\x1b" not in got, err
    rc, out, err = run_cli(*args, store=root, exit_code=0)  # into a pipe: the lines scripts parse, unchanged
    assert "┏" not in out and "\x1b" not in out
    assert out.splitlines()[0].startswith("r1  live branch 1" if command == "runs" else "  branch 0  head ")


@pytest.mark.parametrize("cmd", [["log", "r1"], ["log", "r1", "--all-branches"], ["diff", "r1", "0", "1"]])
def test_log_and_diff_on_a_terminal_are_tables_one_line_a_row(tmp_path, cmd):
    """On an 80-column terminal under NO_COLOR: rich tables whose rows never wrap (a long summary or
    JSON value ends in '…'), no escape code; into a pipe the plain lines scripts read are unchanged."""
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    run = log.start_run("r1")
    log.record_attempt(run, step=1, attempt=0, state="succeeded")
    log.record_intent(run, "refund-" + "x" * 120, step=1, effect="issue_refund_" + "y" * 120, idempotent=False)
    log.rewind(run, to_lsn=1, reason="try again " + "z" * 150)
    log.record_attempt(run, step=2, attempt=0, state="failed")
    rc, out, err = _pty(root, *cmd, env={"NO_COLOR": "1", "PAGER": "cat"})
    text = out.decode()
    assert rc == 0, err
    assert "\x1b" not in text
    lines = text.replace("\r\n", "\n").split("\n")
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" in text  # the long cells were cut, not wrapped
    if cmd[0] == "log":
        assert "run r1 branch 1 (live)" in text and re.search(r"^ *lsn +kind +id +time +what *$", "\n".join(lines), re.M)
    else:
        assert "folded state" in text and re.search(r"^ *path +branch 0 +branch 1 *$", "\n".join(lines), re.M)
    plain = run_cli(*cmd, store=root, exit_code=0)[1]
    assert ("== run r1 branch 1 (live)" in plain) if cmd[0] == "log" else plain.startswith("run r1: branch 0 vs branch 1")
