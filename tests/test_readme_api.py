"""The README's Python snippet is the API a newcomer guesses: it imports only ``objstore`` and runs
as written, in a fresh directory (issue 16)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _snippet() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_the_snippet_imports_only_objstore():
    imports = [n for n in ast.walk(ast.parse(_snippet())) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in imports] == ["import objstore"]


def test_the_snippet_runs_as_written(tmp_path):
    code = _snippet() + "\nassert [b.branch for b in view.branches] == [0, 1] and entries and pinned.run == run\nprint('ok')\n"
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OBJSTORE_KEYS": str(tmp_path / "keys")})
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr


def test_the_labels_snippet_runs_after_the_first(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    second = next(b for b in blocks if "labels=" in b and "fork_run" in b)
    code = _snippet() + second + ("\nassert log.find_record(run, note_id='n1').id == rec.id and log.find_run(thread_id='t-43', "
                                   "checkpoint_ns='') == copy\nassert objstore.verify(log) == []\nprint('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OBJSTORE_KEYS": str(tmp_path / "keys")})
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr


@pytest.mark.langgraph  # imports LangGraph (or runs a process that does): left out without it
def test_the_langgraph_snippet_runs_as_written(tmp_path):
    """The README's one-line switch: the StateGraph example, run as written in a fresh directory, leaves a
    labelled run that the command line finds by the thread id its user knows."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    snippet = next(b for b in blocks if "ObjstoreSaver" in b and "StateGraph" in b)
    p = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "objstore"), "log", "thread_id=chat-1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "x.langgraph.checkpoint" in out.stdout, out.stderr
