"""The docs name real code: every `module.name` a document gives for an objstore module exists
(a rename or a split that leaves docs pointing at nothing fails here), and no module but
``runrefs`` spells a run's ref names by hand."""

from __future__ import annotations

import ast
import glob
import importlib
import os
import pkgutil
import re

import pytest

import objstore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every module of the package, by its dotted path under objstore ("storage.engine") and by its leaf
# name ("engine"), which the docs use where the package is clear from the context
# (a package's leaf name is not one: ``log`` in the docs is a RunLog, not ``objstore.storage.log``)
_FOUND = list(pkgutil.walk_packages(objstore.__path__, "objstore."))
MODULES = {m.name[len("objstore."):]: m.name for m in _FOUND}
LEAVES = {m.name.rpartition(".")[2]: m.name for m in _FOUND if not m.ispkg}
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
NAME = re.compile(r"`(?:objstore\.)?((?:[a-z_0-9]+\.)*[a-z_0-9]+)\.([A-Za-z_][A-Za-z_0-9]*)")


def _module(mod: str) -> str | None:
    return MODULES.get(mod) or (LEAVES.get(mod) if "." not in mod else None)


def references():
    out = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in NAME.finditer(text):
            mod, name = m.groups()
            if _module(mod) and name not in ("py", "md", "db"):  # file names (`state.db`), not attributes
                out.append(pytest.param(mod, name, id=f"{os.path.basename(path)}:{mod}.{name}"))
    return out


REFS = references()


def test_the_docs_name_code_at_all():
    assert len(REFS) >= 30


@pytest.mark.parametrize("mod,name", REFS)
def test_a_documented_name_exists(mod, name):
    full = _module(mod)
    m = importlib.import_module(full)
    # a module attribute, a submodule (`storage.engine`), or a method of one of the module's classes (`host.authorize`)
    found = (hasattr(m, name) or f"{full}.{name}"[len("objstore."):] in MODULES
             or any(isinstance(v, type) and v.__module__ == m.__name__ and hasattr(v, name) for v in vars(m).values()))
    assert found, f"docs name {full}.{name}, which does not exist"


def _string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string in code, docstrings left out."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_ref_names_are_spelled_in_runrefs_only():
    prefixes = ("run/", "subjects/", "keys/", "ref: ")
    bad = []
    for path in sorted(glob.glob(os.path.join(ROOT, "src", "objstore", "**", "*.py"), recursive=True) + glob.glob(os.path.join(ROOT, "src", "objstore_cli", "*.py"))):
        if os.path.basename(path) == "runrefs.py":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        bad += [f"{os.path.relpath(path, ROOT)}:{line}: {text!r}" for line, text in _string_constants(tree) if text.startswith(prefixes)]
    assert bad == [], "ref names spelled outside src/objstore/storage/runrefs.py:\n" + "\n".join(bad)
