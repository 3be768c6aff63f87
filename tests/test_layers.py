"""The import graph runs one way: every module imports (at run time) only modules below it, so no
layer calls up into the facade behind a parameter. Type-only imports (``if TYPE_CHECKING:``) make a
dependency visible without running it and are allowed; the T-745 modules form one layer and may
import each other. The state cache in particular reads through the chain layer, never RunLog."""

from __future__ import annotations

import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first. A module may import at run time only what stands before it (or its own group).
ORDER = [
    "errors", "codec", "fileutil", "runrefs", "compactor", "refs", "segindex", "records", "format1", "format2", "engine",
    "identity", "fold", "history", "ingest", "resolve", "store", "chain", "upgrade", "repair", "state", "views", "query",
    "export", "verify", "completion", "runlog",
    ("grants", "host", "journal", "sessions", "snapshot", "segments", "compaction"),  # T-745, one layer
    "backend", "demo", "__init__", "__main__",
]
RANK = {}
for i, entry in enumerate(ORDER):
    for name in entry if isinstance(entry, tuple) else (entry,):
        RANK[name] = i


def _imports(path: str, runtime_only: bool) -> set[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    skip: set[int] = set()
    if runtime_only:
        for n in ast.walk(tree):
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                skip.update(id(x) for x in ast.walk(n))
    out = set()
    for n in ast.walk(tree):
        if id(n) in skip or not isinstance(n, ast.ImportFrom) or n.level != 1:
            continue
        out.update([n.module.split(".")[0]] if n.module else [a.name for a in n.names])
    return out


def modules() -> list[str]:
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "objstore", "*.py")))


def test_every_module_has_a_place_in_the_order():
    assert sorted(RANK) == modules()


def test_run_time_imports_only_go_down():
    upward = []
    for mod in modules():
        for dep in sorted(_imports(os.path.join(ROOT, "objstore", mod + ".py"), runtime_only=True)):
            if RANK[dep] > RANK[mod]:
                upward.append(f"{mod} imports {dep}")
    assert upward == [], "imports that run upward: " + ", ".join(upward)


def test_the_state_cache_reads_through_the_layer_below_not_the_facade():
    deps = _imports(os.path.join(ROOT, "objstore", "state.py"), runtime_only=False)
    assert "runlog" not in deps and "chain" in deps
    with open(os.path.join(ROOT, "objstore", "state.py"), encoding="utf-8") as f:
        src = f.read()
    assert "RunLog" not in src
