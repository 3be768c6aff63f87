"""Code habits, checked by the same test command as everything else (so CI and the README
keep one command): ruff (pyflakes, bugbear, import order, pyupgrade) and mypy
(``disallow_untyped_defs`` on ``objstore/``) run clean, with the configuration in
pyproject.toml; the package has one version source and a LICENSE matching its metadata."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_check_is_clean():
    p = _run("ruff", "check", "--no-cache", ".")
    assert p.returncode == 0, f"ruff check found problems:\n{p.stdout}{p.stderr}"


@pytest.mark.slow
def test_mypy_is_clean_on_objstore():
    p = _run("mypy", "--no-incremental", "--cache-dir", os.devnull)
    assert p.returncode == 0, f"mypy found problems:\n{p.stdout}{p.stderr}"
    assert "Success: no issues found" in p.stdout


def _pyproject() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return f.read()


def test_one_version_source():
    import objstore

    text = _pyproject()
    assert re.search(r'^dynamic\s*=\s*\["version"\]', text, re.M), "pyproject.toml must take its version from objstore.__version__"
    assert not re.search(r'^version\s*=\s*"', text, re.M), "a second version string in pyproject.toml"
    assert 'version = { attr = "objstore.__version__" }' in text
    assert re.fullmatch(r"\d+\.\d+\.\d+", objstore.__version__)
    p = subprocess.run([sys.executable, "-m", "objstore", "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"objstore, version {objstore.__version__}"


def test_license_file_matches_pyproject():
    text = _pyproject()
    m = re.search(r'^license\s*=\s*\{\s*text\s*=\s*"([^"]+)"', text, re.M)
    assert m, "pyproject.toml declares no license"
    assert m.group(1) == "Apache-2.0"
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        lic = f.read()
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in lic


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_lint_tools_are_configured_in_pyproject(tool):
    text = _pyproject()
    if tool == "ruff":
        m = re.search(r"^\[tool\.ruff\.lint\]\s*\n(?:#.*\n)*select\s*=\s*\[([^\]]*)\]", text, re.M)
        assert m, "no [tool.ruff.lint] select"
        assert {s.strip().strip('"') for s in m.group(1).split(",")} >= {"F", "B", "I", "UP"}
    else:
        section = text.split("\n[tool.mypy]\n", 1)[1].split("\n[", 1)[0]
        assert re.search(r"^disallow_untyped_defs\s*=\s*true", section, re.M)
        assert re.search(r'^files\s*=\s*\["src/objstore"\]', section, re.M)
