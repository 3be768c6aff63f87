"""A new user's path through the README (issue 14): every Python block says whether it is a program of its
own or continues the block above, and the blocks run top to bottom as they say, in a fresh directory, with
the demo of the Quickstart before them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWN = "A program of its own"
CONTINUES = "continues the one above"


def _blocks() -> list[tuple[str, str]]:
    """(what the line before says, code) of each Python block, in README order."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, re.S):
        before = [ln for ln in text[:m.start()].splitlines() if ln.strip()][-1]
        out.append((before, m.group(1)))
    return out


def test_every_python_block_says_whether_it_continues_another():
    blocks = _blocks()
    assert blocks, "the README has no Python block"
    for i, (before, _code) in enumerate(blocks):
        assert (OWN in before) != (CONTINUES in before), f"block {i + 1}: the line before it says neither (or both): {before!r}"
    assert OWN in blocks[0][0], "the first block cannot continue another"


def _programs() -> list[str]:
    """The README's Python blocks joined as they say: each program of its own starts a new one."""
    progs: list[str] = []
    for before, code in _blocks():
        if CONTINUES in before:
            progs[-1] += code
        else:
            progs.append(code)
    return progs


@pytest.mark.langgraph  # the LangGraph block is one of them
def test_the_readme_runs_top_to_bottom_in_a_fresh_directory(tmp_path):
    env = {**os.environ, "OBJSTORE_KEYS": str(tmp_path / "keys")}
    env.pop("OBJSTORE_DIR", None)
    demo = subprocess.run([sys.executable, "-m", "objstore", "demo"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert demo.returncode == 0, demo.stderr
    for i, prog in enumerate(_programs()):
        p = subprocess.run([sys.executable, "-c", prog], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, f"program {i + 1} of the README failed:\n{p.stderr}"
    v = subprocess.run([sys.executable, "-m", "objstore", "verify"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env=env)
    assert v.returncode == 0, v.stdout + v.stderr
