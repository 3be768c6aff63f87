"""Help that teaches, and shell completion.

Walks the whole click tree: every command and group has a one-line summary, an ``Examples:``
section with at least one real invocation, a description of every argument (an ``Arguments:``
section) and of every option; ``-h`` works as ``--help`` everywhere; the jargon (LSN, live
branch, fork, compensation) is explained. Every example line parses against the real command
line, and the read-only ones run for real on a demo store with exit 0. Completion is tested
through click's environment protocol in a subprocess, as a shell would call it.
"""

import json
import os
import re
import shlex

import click
import pytest
from helpers import run_cli, snapshot_tree

from objstore_cli.main import cli
from objstore_cli.output import EXIT_CODES_HELP


def walk(group, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, prefix + (name,))


TREE = [((), cli)] + list(walk(cli))
IDS = [" ".join(p) or "objstore" for p, _ in TREE]


def section(helptext: str, title: str) -> list[str]:
    """The lines of a ``Title:`` section of a docstring (up to the next blank line)."""
    lines = helptext.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == title:
            out = []
            for x in lines[i + 1:]:
                if not x.strip() or x.strip() == "\b":
                    break
                out.append(x.strip())
            return out
    return []


def examples(cmd) -> list[str]:
    return section(cmd.help or "", "Examples:")


def invocations(line: str) -> list[list[str]]:
    """The objstore command lines in one example line (pipes, redirections, '&' and comments cut off)."""
    words = shlex.split(line, comments=True)
    out, cur = [], []
    for w in words + ["|"]:
        if w in ("|", "&", "&&", ";") or w.startswith(">") or w.startswith("<"):
            if cur and cur[0] == "objstore":
                out.append(cur[1:])
            cur = [] if w in ("|", "&", "&&", ";") else cur + ["\0"]
            continue
        if cur and cur[-1] == "\0":
            continue  # the target of a redirection
        cur.append(w)
    return [[w for w in inv if w != "\0"] for inv in out]


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_summary_arguments_options_examples(path, cmd):
    text = cmd.help or ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    assert first and len(first) <= 100, f"{IDS[TREE.index((path, cmd))]}: no one-line summary"
    rest = text.strip().splitlines()[1:]
    assert not rest or not rest[0].strip(), f"the summary of {path} runs over one line: {first!r} / {rest[0]!r}"
    assert cmd.get_short_help_str(limit=200), path
    for p in cmd.params:
        if isinstance(p, click.Option) and p.name != "help" and "--version" not in p.opts:
            assert p.help, f"option {'/'.join(p.opts)} of {path or 'objstore'} has no help"
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    if args:
        described = section(text, "Arguments:")
        assert described, f"{path}: arguments {[a.human_readable_name for a in args]} but no Arguments: section"
        for a in args:
            assert any(line.split()[0] == a.human_readable_name for line in described if line.split()), \
                f"{path}: argument {a.human_readable_name} is not described under Arguments:"
    ex = examples(cmd)
    assert ex, f"{path or 'objstore'} has no Examples: section"
    assert any(inv and inv[0] != "--help" for line in ex for inv in invocations(line)), f"{path}: no real invocation"
    if path and not isinstance(cmd, click.Group):
        assert any(path[-1] in inv for line in ex for inv in invocations(line)), f"{path}: no example of this command"


def _parse(args):
    """Parse a command line through the click tree without running anything (UsageError if bad)."""
    ctx = cli.make_context("objstore", list(args), resilient_parsing=False)
    cmd = cli
    rest = list(getattr(ctx, "_protected_args", [])) + list(ctx.args)
    while isinstance(cmd, click.Group) and rest:
        name, sub, rest = cmd.resolve_command(ctx, rest)
        ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
        cmd = sub
        rest = list(getattr(ctx, "_protected_args", [])) + list(ctx.args) if isinstance(sub, click.Group) else []
    return ctx


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_every_example_parses(path, cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the files examples name exist (empty) here, for File/Path arguments
    for line in examples(cmd):
        for inv in invocations(line):
            for w in inv:
                if not w.startswith("-") and "/" not in w and os.path.splitext(w)[1] in (".jsonl", ".json", ".txt", ".key", ".pub"):
                    (tmp_path / w).touch()
            try:
                _parse(inv)
            except click.UsageError as e:
                pytest.fail(f"example {line!r} does not parse: {e.format_message()}")


def test_jargon_is_explained():
    root = cli.help
    for word, meaning in (("LSN", "position on its branch"), ("live branch", "by default"),
                          ("compensation", "side effect"), ("fork", "root of a new branch")):
        assert word in root and meaning in root, f"objstore -h does not explain {word!r}"
    cmds = dict(walk(cli))
    for name in (("rewind",), ("fork",), ("log",), ("branches",)):
        text = cmds[name].help + " ".join(p.help or "" for p in cmds[name].params if isinstance(p, click.Option))
        assert "position" in text, f"{name}: LSN not explained"
    for name in (("rewind",), ("log",), ("branches",)):
        assert "side effect" in cmds[name].help, f"{name}: compensation not explained"
    assert "11 state cache error" in EXIT_CODES_HELP and "130 interrupted" in EXIT_CODES_HELP


@pytest.mark.slow
def test_dash_h_is_help_everywhere():
    for path, _cmd in TREE:
        rc, out, err = run_cli(*path, "-h", exit_code=0)
        assert out.startswith(" ".join(("Usage: objstore",) + path)), (path, out[:200])
        assert "-h, --help" in out and "Examples:" in out, path
    assert run_cli("log", "--help", exit_code=0)[1] == run_cli("log", "-h", exit_code=0)[1]
    rc, out, err = run_cli("-h", exit_code=0)
    assert "Exit codes" in out and "130 interrupted" in out


# -- examples that run for real ----------------------------------------------------------------------------
READ_ONLY = {("runs",), ("log",), ("branches",), ("show",), ("refs",), ("diff",), ("episode",), ("export",),
             ("verify",), ("anchor",), ("stats",)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("help")
    root = str(tmp / "s")
    env = {"OBJSTORE_KEYS": str(tmp / "keys")}
    run_cli("demo", store=root, env_extra=env, exit_code=0)
    run = json.loads(run_cli("runs", "--json", store=root, env_extra=env, exit_code=0)[1])[0]["run"]
    branches = json.loads(run_cli("branches", run, "--json", store=root, env_extra=env, exit_code=0)[1])
    token = run_cli("anchor", store=root, env_extra=env, exit_code=0)[1].strip()
    (tmp / "anchors.txt").write_text(token + "\n")  # what 'verify --anchors anchors.txt' reads, whatever runs first
    return {"root": root, "env": env, "cwd": str(tmp), "subst": {"RUN": run, "ID": branches[0]["head"], "TOKEN": token}}


@pytest.mark.slow
def test_read_only_examples_run(demo):
    ran = 0
    for _path, cmd in TREE:
        for line in examples(cmd):
            for inv in invocations(line):
                if "--store" in inv:
                    continue
                words = [w for w in inv]
                sub = [w for w in words if not w.startswith("-")]
                key = next((k for k in READ_ONLY if tuple(sub[: len(k)]) == k), None)
                if key is None:
                    continue
                args = [demo["subst"].get(w, w) for w in words]
                args = [a for a in args if a != "--no-pager"] + (["--no-pager"] if key == ("log",) else [])
                # in a scratch directory: an example may write a file it names (anchor --append anchors.txt)
                run_cli(*args, store=demo["root"], env_extra=demo["env"], cwd=demo["cwd"], exit_code=0)
                ran += 1
    assert ran >= 10, f"only {ran} examples ran"


# -- completion ---------------------------------------------------------------------------------------------
def complete(words: str, env=None, cwd=None):
    """Candidates bash would get for the command line ``words`` (the cursor at its end)."""
    parts = shlex.split(words)
    cword = len(parts) if words.endswith(" ") else len(parts) - 1
    e = {"_OBJSTORE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    e.update(env or {})
    rc, out, err = run_cli(env_extra=e, cwd=cwd, exit_code=0)
    assert err == "", err
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


def test_completion_of_run_ids_and_latest(demo, tmp_path):
    root, run = demo["root"], demo["subst"]["RUN"]
    before = snapshot_tree(root)
    got = complete(f"objstore --store {root} log ")
    assert run in got and "latest" in got
    assert complete(f"objstore --store {root} log {run[:12]}") == [run]
    assert complete(f"objstore --store {root} log lat") == ["latest"]
    assert complete(f"objstore --store {root} branches {run.rsplit('-', 1)[1][:6]}") == [run], "the random suffix completes too"
    # the store from OBJSTORE_DIR, and the one discovered from the working directory
    assert run in complete("objstore episode ", env={"OBJSTORE_DIR": root})
    sub = tmp_path / "project" / "deep"
    sub.mkdir(parents=True)
    os.symlink(root, tmp_path / "project" / ".objstore")
    assert run in complete("objstore log ", cwd=str(sub)), "the store discovered from the working directory"
    assert complete("objstore log ", cwd=str(tmp_path)) == [], "no store: nothing, and no error"
    assert snapshot_tree(root) == before, "completion wrote to the store"


def test_completion_of_branch_numbers(demo):
    root, run = demo["root"], demo["subst"]["RUN"]
    assert complete(f"objstore --store {root} log {run} --branch ") == ["0", "1"]
    assert complete(f"objstore --store {root} log latest --branch 1") == ["1"]
    assert complete(f"objstore --store {root} diff {run} ") == ["0", "1"]
    assert complete(f"objstore --store {root} diff {run} 0 ") == ["0", "1"]
    assert complete(f"objstore --store {root} fork {run[:14]} --from-branch ") == ["0", "1"]
    assert complete(f"objstore --store {root} rewind {run} --to-lsn 2 --expect-branch ") == ["0", "1"]
    assert complete(f"objstore --store {root} log nope --branch ") == []


def test_completion_source_script_is_documented():
    rc, out, err = run_cli(env_extra={"_OBJSTORE_COMPLETE": "bash_source"}, exit_code=0)
    assert "_OBJSTORE_COMPLETE=bash_complete" in out and "complete " in out
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "CLI.md"), encoding="utf-8") as f:
        assert '_OBJSTORE_COMPLETE=bash_source objstore' in f.read()


# -- help that speaks to the user (issue 16) ---------------------------------------------------------------
TICKET_WORDS = re.compile(r"seed T2\.3|stub compactor|\bstub\b|T-745|\bT\d+\.\d+\b", re.I)


def _walk(cmd, path):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))


def test_no_help_text_speaks_in_ticket_numbers():
    seen = 0
    for path, cmd in _walk(cli, ("objstore",)):
        text = cmd.get_help(click.Context(cmd, info_name=" ".join(path)))
        assert not TICKET_WORDS.search(text), f"{' '.join(path)} --help: {TICKET_WORDS.search(text)[0]!r}"
        seen += 1
    assert seen >= 40  # every command and group, not only a few


def test_demo_and_compact_help_say_what_they_do():
    demo = run_cli("demo", "--help", exit_code=0)[1]
    assert "six-step run" in demo and "step 2" in demo and "step 6 failing" in demo and "verify" in demo
    compact = " ".join(run_cli("compact", "--help", exit_code=0)[1].split())
    assert "Summarize a session's older turns into one new signed segment" in compact
    assert "deterministic compactor" in compact
