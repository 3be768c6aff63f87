"""A bare `objstore`, or a group typed without its subcommand, prints the group's help.

The first thing a newcomer types must read well: the whole help on stdout, with real line breaks
(never one error line full of literal ``\\n``, which click >= 8.2's NoArgsIsHelpError became when the
one-line error printer escaped it), and exit 2, click's usage code. Every group of the tree is run
as a real process.
"""

import click
import pytest
from helpers import run_cli

from objstore_cli.main import cli


def groups(group, prefix=()):
    yield prefix
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from groups(cmd, prefix + (name,))


GROUPS = list(groups(cli))


def test_the_tree_has_groups():
    assert len(GROUPS) >= 5 and ("journal",) in GROUPS and ("session",) in GROUPS


@pytest.mark.parametrize("path", GROUPS, ids=[" ".join(p) or "objstore" for p in GROUPS])
def test_bare_group_prints_its_help(path, tmp_path):
    rc, out, err = run_cli(*path, cwd=tmp_path, exit_code=2)
    assert "\\n" not in out + err
    assert out.startswith(f"Usage: {' '.join(('objstore',) + path)} [OPTIONS] COMMAND [ARGS]...\n"), out[:200]
    assert "\nCommands:\n" in out and len(out.splitlines()) > 8
    assert err == ""
    # the same text as --help
    rc, help_out, _ = run_cli(*path, "--help", cwd=tmp_path, exit_code=0)
    assert out == help_out
