"""The import graph runs one way. Packages by subsystem, lowest first — errors, storage, the run model,
the journal, lifecycle, integrations, the top (demo, the facade), then the command line — and inside
each package its modules in a fixed order. A module may import only what stands before it: every
import counts, whatever its form (``import objstore.x``, ``from objstore.x import y``, relative at any
level, inside a function, under ``if TYPE_CHECKING:``, ``importlib.import_module("objstore.x")``), so
no circle of any length can form. A package's ``__init__`` stands above its own members (it may
re-export them); nothing inside the package imports it."""

from __future__ import annotations

import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first: (package, its members lowest first). The package's __init__ ranks after its members; a
# subpackage's modules are members spelled with its name ("log.format"), its __init__ the member "log".
ORDER: list[tuple[str, list[str]]] = [
    ("objstore.errors", []),
    ("objstore.interrupt", []),
    ("objstore.lazy", []),
    ("objstore.storage", ["codec", "fileutil", "fdbudget", "runrefs", "refs", "labels", "authority", "log.format", "log.blockcache", "log.root", "log.entry", "log.parse", "log.facts", "log.rules", "log.segindex", "log.idxtrust", "log.tables", "log.craft", "log.txn",
                          "log.engine", "log.memory", "log.packed", "log.segfile", "log.segrows", "log.local_state", "log.scan", "log.witness",
                          "log.checkpoint", "log.local_catchup", "log.local_objects", "log.local_index", "log.groupsync", "log.local_write", "log.local", "log.fsck", "log", "s3", "gclock", "erased", "storedir", "batch", "logset",
                          "runlogs.catalog", "runlogs.held", "runlogs.idindex", "runlogs.multitxn", "runlogs.citation",
                          "runlogs.logs", "runlogs.bucketcatalog", "runlogs.bucketlogs", "runlogs", "store", "identity"]),
    ("objstore.storage.s3", ["bucket", "client", "layout", "entries", "reader", "gc", "engine"]),  # a subpackage ranks where its parent lists it
    ("objstore.runs", ["facts", "labels", "kinds", "records", "schemas", "fold", "chain", "listing", "xsummary", "history", "pictures", "resolve", "labelspec", "refold", "statefiles", "state", "api", "ingest", "anchor_manifest", "anchors", "verify_report", "verify_objects",
                       "verify_runmodel", "verify_logs", "verify", "views", "export",
                       "query", "completion", "otel", "otlp", "page_html", "page"]),
    ("objstore.journal", ["grants", "versions", "host", "updates", "snapshot", "sessions", "restore", "compactor", "compaction",
                          "backend"]),
    ("objstore.lifecycle", ["repair", "delete", "gc_copies", "retention", "gc", "backup_io", "backup_copy", "backup_dest", "backup_runs", "backup", "transfer_logs", "transfer", "stats"]),
    ("objstore.legacy", ["format1", "format2", "runlogs", "bucket", "upgrade"]),  # old formats, for the upgrade command only
    ("objstore.aio", []),  # the async API over runs and lifecycle; integrations (the async LangGraph saver) stand above it
    ("objstore.integrations.langgraph", ["parts", "partree", "attempts", "newest", "threaded", "trees", "saver", "aio_saver", "present"]),
    ("objstore.integrations", []),
    ("objstore.demo", []),
    ("objstore", []),
    ("objstore_cli", ["output", "params", "tables", "objects", "runs", "audit", "journal", "sessions", "admin", "lifecycle", "maintenance", "remote", "main"]),
    ("objstore.__main__", []),  # ``python -m objstore``: the command line's entry point
]


def _rank_table() -> dict[str, tuple[int, ...]]:
    rank: dict[str, tuple[int, ...]] = {}
    for i, (pkg, members) in enumerate(ORDER):
        # a subpackage its parent (an earlier entry) lists among its members stands at that place: its
        # members just above the parent's member before it, its __init__ above them, below the next one
        base = rank.get(pkg, (i,))
        for j, m in enumerate(members):
            rank[f"{pkg}.{m}"] = (*base, j)
        rank[pkg] = (*base, len(members))
    return rank


RANK = _rank_table()


def _module_files() -> dict[str, tuple[str, bool]]:
    """module name -> (path, is a package __init__), for objstore and the CLI (src/objstore, src/objstore_cli)."""
    out = {}
    for name in ("objstore", "objstore_cli"):
        base = os.path.join(ROOT, "src", name)
        for path in glob.glob(os.path.join(base, "**", "*.py"), recursive=True):
            parts = os.path.relpath(path, base)[:-3].split(os.sep)
            is_pkg = parts[-1] == "__init__"
            mod = ".".join([name] + (parts[:-1] if is_pkg else parts))
            out[mod] = (path, is_pkg)
    return out


FILES = _module_files()


def imports_of(source: str, module: str, is_pkg: bool) -> set[str]:
    """Every objstore or objstore_cli module ``source`` imports, in any form, resolved to a module name:
    ``from pkg import name`` counts as ``pkg.name`` when that is a module, else as ``pkg``."""
    tree = ast.parse(source)
    package = module if is_pkg else module.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str) -> None:
        if name.split(".")[0] in ("objstore", "objstore_cli"):
            found.add(name)

    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                add(a.name)
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                parts = package.split(".")
                if n.level - 1 >= len(parts):
                    raise AssertionError(f"{module}: relative import beyond the top package")
                base = ".".join(parts[: len(parts) - (n.level - 1)] + ([n.module] if n.module else []))
            else:
                base = n.module or ""
            for a in n.names:
                full = f"{base}.{a.name}"
                add(full if full in FILES else base)
        elif isinstance(n, ast.Call) and ast.unparse(n.func).endswith("import_module") and n.args:
            arg = n.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value)
    return found


def _target(name: str) -> str:
    """The ranked module an import names: itself, or the nearest ranked enclosing one."""
    while name not in RANK and "." in name:
        name = name.rpartition(".")[0]
    return name


def upward_imports(files: dict[str, tuple[str, bool]]) -> list[str]:
    bad = []
    for mod, (path, is_pkg) in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            deps = imports_of(f.read(), mod, is_pkg)
        for dep in sorted(deps):
            t = _target(dep)
            if t not in RANK:
                bad.append(f"{mod} imports {dep}, which has no place in the order")
            elif t == mod or RANK[t] >= RANK[mod]:
                bad.append(f"{mod} imports {dep}")
    return bad


def test_every_module_has_a_place_in_the_order():
    assert sorted(FILES) == sorted(RANK)


def test_imports_only_go_down():
    assert upward_imports(FILES) == [], "imports that do not run down"


@pytest.mark.parametrize("form", [
    "from objstore.journal.compaction import compact",            # absolute
    "import objstore.runs.api",                                # plain import
    "from .store import Store",                                   # relative, level 1: a later member
    "from ..journal import compaction",                           # relative, level 2: a higher package
    "from .. import journal",                                     # relative, level 2: a facade
    "def f():\n    from objstore.runs import api\n",             # inside a function
    "if TYPE_CHECKING:\n    from .identity import Key\n",        # type-only
    "importlib.import_module('objstore.runs.query')",             # by name
    "import objstore_cli.main",                                   # the command line
])
def test_an_upward_import_of_any_form_is_caught(tmp_path, form):
    """The same import planted in a low module (the engine) is reported, in every form the test reads."""
    victim = "objstore.storage.log.local"
    path, is_pkg = FILES[victim]
    with open(path, encoding="utf-8") as f:
        source = f.read() + "\n" + form + "\n"
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    assert upward_imports({victim: (str(planted), is_pkg)}) != [], form
    assert upward_imports({victim: (path, is_pkg)}) == []


def test_the_journal_circle_is_gone():
    """The T-745 modules used to import each other through journal.py, both a member and the facade.
    Now each imports only members before it, and none imports the facade."""
    members = dict(ORDER)["objstore.journal"]
    for mod in members:
        path, is_pkg = FILES[f"objstore.journal.{mod}"]
        with open(path, encoding="utf-8") as f:
            deps = imports_of(f.read(), f"objstore.journal.{mod}", is_pkg)
        assert "objstore.journal" not in deps, f"{mod} imports the journal facade"
        later = {f"objstore.journal.{m}" for m in members[members.index(mod):]}
        assert not deps & later, f"{mod} imports {sorted(deps & later)}"


def test_the_core_never_imports_an_integration():
    for mod, (path, is_pkg) in FILES.items():
        if mod.startswith(("objstore.storage", "objstore.runs", "objstore.journal", "objstore.lifecycle", "objstore.errors")):
            with open(path, encoding="utf-8") as f:
                deps = imports_of(f.read(), mod, is_pkg)
            assert not any(d.startswith("objstore.integrations") for d in deps), mod


def test_the_state_cache_reads_through_the_layer_below_not_the_facade():
    path, _ = FILES["objstore.runs.state"]
    with open(path, encoding="utf-8") as f:
        src = f.read()
    deps = imports_of(src, "objstore.runs.state", False)
    assert "objstore.runs.api" not in deps and "objstore.runs.chain" in deps
    assert "RunLog" not in src


def test_only_the_upgrade_command_imports_legacy():
    """The format-1 and format-2 readers and ``upgrade`` are loaded by ``objstore upgrade`` alone:
    outside ``objstore.legacy`` itself, no module of the library or the command line imports them."""
    importers = []
    for mod, (path, is_pkg) in sorted(FILES.items()):
        if mod == "objstore.legacy" or mod.startswith("objstore.legacy."):
            continue
        with open(path, encoding="utf-8") as f:
            deps = imports_of(f.read(), mod, is_pkg)
        if any(d == "objstore.legacy" or d.startswith("objstore.legacy.") for d in deps):
            importers.append(mod)
    assert importers and all(m.startswith("objstore_cli.") for m in importers), importers
    for mod in importers:  # and there, only the function of the upgrade command
        path, _ = FILES[mod]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and "objstore.legacy" in ast.unparse(n)]
        users = [fn.name for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                 and any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("objstore.legacy") for n in fn.body)]
        assert top == [] and users == ["upgrade"], f"{mod}: objstore.legacy imported outside the upgrade command"


def test_a_command_group_imports_no_other_group():
    """Each command-group module stands on the shared ones (output, params, tables) only: what two
    groups share moves down, and ``main`` alone knows every group."""
    shared = {"objstore_cli.output", "objstore_cli.params", "objstore_cli.tables"}
    groups = [f"objstore_cli.{m}" for m in dict(ORDER)["objstore_cli"] if f"objstore_cli.{m}" not in shared | {"objstore_cli.main"}]
    bad = []
    for mod in groups:
        path, is_pkg = FILES[mod]
        with open(path, encoding="utf-8") as f:
            deps = {d for d in imports_of(f.read(), mod, is_pkg) if d.startswith("objstore_cli.")}
        bad += [f"{mod} imports {d}" for d in sorted(deps - shared)]
    assert bad == []
