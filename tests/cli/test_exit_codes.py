"""Every exit code is listed wherever a user looks for it, from the one table in objstore.errors.

``objstore --help`` once listed codes only up to 13 while 14 (busy) and 15 (a batch spanning several
runs on object storage) existed: the help is now generated from ``errors.EXIT_CODES``, every error
class's code must be in that table, and docs/CLI.md's table and README's list must name every code.
"""

import os
import re

from helpers import run_cli

from objstore import errors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _classes(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _classes(sub)


CODES = [code for code, _ in errors.EXIT_CODES]


def test_every_error_class_has_its_code_in_the_table():
    assert CODES == sorted(set(CODES)) and {0, 1, 2, 130} <= set(CODES)
    for cls in _classes(errors.ObjstoreError):
        assert cls.exit_code in CODES, f"{cls.__name__}: exit {cls.exit_code} is not in errors.EXIT_CODES"


def test_help_lists_every_exit_code(tmp_path):
    rc, out, err = run_cli("--help", cwd=tmp_path, exit_code=0)
    epilog = " ".join(out[out.index("Exit codes:"):].split())
    listed = [int(n) for n in re.findall(r"(?:codes:|;) (\d+) ", epilog)] + [int(n) for n in re.findall(r"; (\d+) \w+\.$", epilog.split(" Under")[0])]
    for code, what in errors.EXIT_CODES:
        assert f"{code} {what}" in epilog, f"objstore --help does not list exit {code} ({what})"
    assert sorted(set(listed)) == CODES


def test_docs_list_every_exit_code():
    with open(os.path.join(ROOT, "docs", "CLI.md")) as f:
        cli_md = f.read()
    table = cli_md[cli_md.index("## Exit codes"):]
    table = table[: table.index("\n\n", table.index("| code |"))]
    assert [int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)] == CODES
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    para = " ".join(readme[readme.index("Exit codes: 0 ok"):].split("\n\n")[0].split())
    listed = [int(n) for n in re.findall(r"(?:^Exit codes: |· )(\d+) ", para)]
    assert listed == CODES, "README's exit-code list"
