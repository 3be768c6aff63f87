"""Test habits (#10), checked on the source of every ``tests/**/*.py`` with ``ast``:

* every ``run_cli(...)`` call passes ``exit_code=`` (borg's ``cmd(..., exit_code=N)``: a call
  says which documented exit code it expects; ``helpers.run_cli`` asserts it and raises
  TypeError without it);
* no ``pytest.raises(Exception)`` / ``pytest.raises(BaseException)`` (alone or in a tuple):
  the typed error of ``objstore.errors`` the code raises, or the narrowest builtin with a
  ``# TODO(lead)`` where the library lets an untyped one escape;
* a ``subprocess`` call or ``CliRunner().invoke`` that runs the objstore CLI has its exit code
  looked at (best effort: the result must not be discarded, and the function must assert on a
  ``returncode`` / ``exit_code`` / ``wait()`` / ``poll()``, or hand the process back to its caller).
"""

from __future__ import annotations

import ast
import glob
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SPAWN = {"run", "Popen", "call"}  # subprocess functions that do not check the exit code themselves
CHECKED = {"check_call", "check_output"}
RC_ATTRS = {"returncode", "exit_code"}
RC_CALLS = {"wait", "poll"}


def _parents(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]


def _up(node: ast.AST):
    while hasattr(node, "_parent"):
        node = node._parent  # type: ignore[attr-defined]
        yield node


def _runs_objstore(call: ast.Call) -> bool:
    """A subprocess call whose argv list names the objstore CLI (``[sys.executable, "-m", "objstore", ...]``)."""
    if not call.args or not isinstance(call.args[0], (ast.List, ast.Tuple)):
        return False
    return any(isinstance(e, ast.Constant) and e.value in ("objstore", "objstore_cli") for e in call.args[0].elts)


def _looks_at_rc(node: ast.AST, rc_names: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in RC_ATTRS:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in RC_CALLS:
            return True
        if isinstance(n, ast.Name) and n.id in rc_names:
            return True
    return False


def _rc_checked(scope: ast.AST) -> bool:
    """The scope asserts on an exit code, directly or through a name that holds one."""
    rc_names: set[str] = set()
    for n in ast.walk(scope):  # names assigned from a returncode / wait() / poll() (one level is enough in practice)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and _looks_at_rc(n.value, set()):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            rc_names |= {x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name)}
    return any(isinstance(n, ast.Assert) and _looks_at_rc(n.test, rc_names) for n in ast.walk(scope))


def _handed_back(scope: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, (ast.Return, ast.Yield)) and n.value is not None
               and any(isinstance(x, ast.Name) and x.id in names for x in ast.walk(n.value)) for n in ast.walk(scope))


def _cli_call_problem(call: ast.Call) -> str | None:
    stmt = next(p for p in _up(call) if isinstance(p, ast.stmt))
    scope = next((p for p in _up(call) if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))), None)
    if isinstance(stmt, ast.Expr) and stmt.value is call:
        return "its result (and exit code) is discarded"
    if isinstance(stmt, (ast.Return, ast.Expr)) and isinstance(getattr(stmt, "value", None), (ast.Yield, ast.Call, ast.List, ast.Tuple)) \
            or isinstance(stmt, ast.Return):
        return None  # handed to the caller / to a checking helper
    names: set[str] = set()
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.With)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else [
            i.optional_vars for i in stmt.items if i.optional_vars is not None]
        names = {x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name)}
    if scope is not None and (_rc_checked(scope) or _handed_back(scope, names)):
        return None
    return "no assertion on its returncode / exit_code in the enclosing function"


def _is_pytest_raises(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "raises" and isinstance(f.value, ast.Name) and f.value.id == "pytest"


def check_source(src: str, filename: str = "<test>") -> list[str]:
    """Every habit broken in ``src``: ``file:line: what``."""
    tree = ast.parse(src, filename)
    _parents(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        where = f"{filename}:{node.lineno}"
        f = node.func
        if isinstance(f, ast.Name) and f.id == "run_cli":
            if not any(k.arg == "exit_code" for k in node.keywords):
                out.append(f"{where}: run_cli(...) without exit_code=")
        elif _is_pytest_raises(node) and node.args:
            a = node.args[0]
            kinds = a.elts if isinstance(a, ast.Tuple) else [a]
            for k in kinds:
                if isinstance(k, ast.Name) and k.id in ("Exception", "BaseException"):
                    out.append(f"{where}: pytest.raises({k.id}): name the typed error")
        elif isinstance(f, ast.Attribute) and f.attr in SPAWN | CHECKED and _runs_objstore(node):
            if f.attr in CHECKED or any(k.arg == "check" for k in node.keywords):
                continue
            problem = _cli_call_problem(node)
            if problem:
                out.append(f"{where}: the objstore CLI run by {ast.unparse(f)}(...): {problem}")
        elif isinstance(f, ast.Attribute) and f.attr == "invoke" and isinstance(f.value, ast.Call) \
                and isinstance(f.value.func, ast.Name) and f.value.func.id == "CliRunner":
            problem = _cli_call_problem(node)
            if problem:
                out.append(f"{where}: CliRunner().invoke(...): {problem}")
    return out


def test_every_test_file_keeps_the_habits():
    problems = []
    files = sorted(glob.glob(os.path.join(HERE, "**", "*.py"), recursive=True))
    assert len(files) > 20
    for path in files:
        with open(path, encoding="utf-8") as f:
            problems += check_source(f.read(), os.path.relpath(path, os.path.dirname(HERE)))
    assert problems == [], "test habits (#10) broken:\n" + "\n".join(problems)


BAD = '''
import subprocess, sys
import pytest
from click.testing import CliRunner

def test_a(root):
    run_cli("verify", store=root)

def test_b():
    with pytest.raises(Exception):
        pass
    with pytest.raises((ValueError, BaseException), match="x"):
        pass

def test_c(root):
    subprocess.run([sys.executable, "-m", "objstore", "--store", root, "verify"])

def test_d(root):
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "verify"], capture_output=True)
    assert b"ok" in p.stderr

def test_e(cli):
    CliRunner().invoke(cli, ["runs"])
'''

GOOD = '''
import subprocess, sys
import pytest
from click.testing import CliRunner
from objstore.errors import InvalidInput

def test_a(root):
    run_cli("verify", store=root, exit_code=0)

def test_b():
    with pytest.raises(InvalidInput):
        pass

def test_c(root):
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "verify"], capture_output=True)
    assert p.returncode == 0

def test_d(root):
    procs = [subprocess.Popen([sys.executable, "-m", "objstore", "demo"]) for _ in range(3)]
    results = [p.wait(timeout=60) for p in procs]
    assert results == [0, 0, 0]

def serve(root):
    p = subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "journal-serve"])
    return p

def test_e(cli):
    r = CliRunner().invoke(cli, ["runs"])
    assert r.exit_code == 0, r.output

def test_f():
    subprocess.run(["grep", "-q", "x", "f"])  # not the objstore CLI
    subprocess.run([sys.executable, "-m", "objstore", "--version"], check=True)
'''


@pytest.mark.parametrize("src,expect", [
    (BAD, ["bad.py:7: run_cli(...) without exit_code=",
           "bad.py:10: pytest.raises(Exception): name the typed error",
           "bad.py:12: pytest.raises(BaseException): name the typed error",
           "bad.py:16: the objstore CLI run by subprocess.run(...): its result (and exit code) is discarded",
           "bad.py:19: the objstore CLI run by subprocess.run(...): no assertion on its returncode / exit_code in the enclosing function",
           "bad.py:23: CliRunner().invoke(...): its result (and exit code) is discarded"]),
    (GOOD, []),
], ids=["bad", "good"])
def test_the_checker_itself(src, expect):
    assert sorted(check_source(src, "bad.py"), key=lambda s: int(s.split(":")[1])) == expect
