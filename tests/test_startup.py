"""Imports on demand (issue 15): what a fresh process loads before it answers.

Building the click app (``objstore --help``) must load none of the heavy modules — the storage
engine and its codecs, SQLite, rich, cryptography, the T-745 journal layer, the format-1 and
format-2 readers, upgrade, verify, the test-only libraries — and ``objstore log RUN -n 10`` loads
the store but not the journal, old-format, upgrade or verify modules. Each check runs in a fresh interpreter (this test
process has imported everything already) and compares module names, never times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import run_on_pty

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Third-party or stdlib modules too heavy for start-up (each costs milliseconds of CPU to import).
HEAVY = ["cryptography", "rich", "sqlite3", "_sqlite3", "zstandard", "jsonschema", "hypothesis", "blake3", "msgspec"]
# The T-745 layer (journals, grants, keys) and the modules only a few commands need.
T745 = ["identity", "grants", "journal", "sessions", "host", "backend", "snapshot", "compactor", "compaction", "segments"]
ON_DEMAND = ["format1", "format2", "upgrade", "verify"]
NOT_FOR_HELP = HEAVY + [f"objstore.{m}" for m in T745 + ON_DEMAND]

# Run in a fresh interpreter: the command line in argv, then the sorted module names as JSON on
# the last line of stderr (stdout is the command's own output).
PROBE = r"""
import json, sys
args = json.loads(sys.argv[1])
if args is None:
    import objstore_cli.main
elif args == "library":
    import objstore
else:
    import objstore_cli.main
    sys.argv = ["objstore", *args]
    try:
        objstore_cli.main.main()
    except SystemExit as e:
        if e.code not in (0, None):
            raise
sys.stdout.flush()
sys.stderr.write("\n" + json.dumps(sorted(sys.modules)) + "\n")
"""


def probe(args, cwd, tty: bool = False) -> tuple[str, set[str]]:
    """(stdout, modules loaded) of the probe in a fresh interpreter; stdout a pipe, or a pty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBJSTORE_")}
    argv = [sys.executable, "-c", PROBE, json.dumps(args)]
    if not tty:
        p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout, set(json.loads(p.stderr.strip().splitlines()[-1]))
    code, got, err = run_on_pty(argv, cwd=cwd, env={**env, "COLUMNS": "200", "TERM": "xterm"})
    assert code == 0, err
    return got.decode(), set(json.loads(err.strip().splitlines()[-1]))


def loaded(args, cwd) -> set[str]:
    return probe(args, cwd)[1]


def heavy_in(mods: set[str], names) -> list[str]:
    """The names loaded, a package counting as loaded if any of its submodules is."""
    return sorted(n for n in names if n in mods or any(m.startswith(n + ".") for m in mods))


def test_building_the_click_app_imports_nothing_heavy(tmp_path):
    mods = loaded(None, tmp_path)
    assert heavy_in(mods, NOT_FOR_HELP) == []
    # Of the library, only the package itself and its errors; of the CLI, no command group: every command imports
    # the rest, and its group's module loads when the command is looked up (main.Commands).
    assert sorted(m for m in mods if m.split(".")[0] in ("objstore", "objstore_cli")) == [
        "objstore", "objstore.errors", "objstore.interrupt", "objstore_cli", "objstore_cli.main", "objstore_cli.output",
        "objstore_cli.params"]


@pytest.mark.parametrize("args", [["--help"], ["log", "--help"], ["journal", "--help"], ["--version"]])
def test_help_imports_nothing_heavy(tmp_path, args):
    mods = loaded(args, tmp_path)
    assert heavy_in(mods, NOT_FOR_HELP) == []
    assert sorted(m for m in mods if m.startswith("objstore.")) == ["objstore.errors", "objstore.interrupt"]


def test_importing_the_library_loads_only_its_errors(tmp_path):
    """``import objstore`` is the facade; RunLog, Store and the submodules load on first use. (Its
    start-up Ctrl-C handler, ``interrupt``, is a few lines and installs nothing outside the command.)"""
    mods = loaded("library", tmp_path)
    assert sorted(m for m in mods if m.startswith("objstore")) == ["objstore", "objstore.errors", "objstore.interrupt"]


def test_the_facade_still_reaches_every_name(tmp_path):
    code = ("import objstore, objstore.runs.api, objstore.storage.store\n"
            "assert objstore.RunLog is objstore.runs.api.RunLog and objstore.Store is objstore.storage.store.Store\n"
            "assert objstore.View.__name__ == 'View' and objstore.ForkResult.__name__ == 'ForkResult'\n"
            "import objstore as o2\n"
            "assert o2.storage.gclock.__name__ == 'objstore.storage.gclock'  # a submodule as an attribute, loaded on use\n"
            "assert callable(o2.verify) and callable(o2.episode) and callable(o2.export) and callable(o2.diff)\n"
            "try:\n    objstore.no_such_name\nexcept AttributeError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "module 'objstore' has no attribute 'no_such_name'\n"


def test_log_loads_the_store_but_not_the_journal_format1_upgrade_or_verify(tmp_path):
    from objstore import RunLog, Store

    store = str(tmp_path / "s")
    log = RunLog(Store.open(store, create=True))
    run = log.start_run("startup", subject="t")
    for i in range(12):
        log.record_attempt(run, step=i, attempt=0, state="succeeded")
    mods = loaded(["--store", store, "log", run, "-n", "10"], tmp_path)
    assert "objstore.storage.log.local" in mods and "objstore.runs.history" in mods  # it did read the store
    assert heavy_in(mods, ["cryptography", "rich", "jsonschema", "hypothesis"]) == []
    assert heavy_in(mods, [f"objstore.{m}" for m in T745 + ON_DEMAND]) == []
    assert not {"objstore.runs.page", "objstore.runs.page_html", "objstore.runs.pictures"} & set(mods)  # view's, --graph's


@pytest.fixture
def two_branches(tmp_path):
    """A run with a failed and a retried attempt, rewound past them: branch 1 is live."""
    from objstore import RunLog, Store

    store = str(tmp_path / "s")
    log = RunLog(Store.open(store, create=True))
    run = log.start_run("startup", subject="t", workflow_version="w1")
    prompt, output = log.put_blob(b"the prompt"), log.put_blob(b"the output")
    log.record_attempt(run, step=1, attempt=0, state="succeeded", prompt=prompt, output=output, usage={"tokens": 7})
    log.record_attempt(run, step=2, attempt=0, state="failed")
    log.record_attempt(run, step=2, attempt=1, state="succeeded")
    log.rewind(run, 1, reason="retry")
    log.record_attempt(run, step=2, attempt=0, state="succeeded", usage={"tokens": 12345})
    return store, run, prompt.hex()[:12], output.hex()[:12]


def test_episode_into_a_pipe_is_one_line_per_attempt_without_rich(two_branches, tmp_path):
    store, run, p, o = two_branches
    out, mods = probe(["--store", store, "episode", run, "--all-branches"], tmp_path)
    assert heavy_in(mods, ["rich"]) == []
    lines = out.splitlines()
    assert lines[0] == f"run {run} subject t workflow w1 live branch 1"
    cells = [line.split() for line in lines[1:]]
    # every attempt on one line whose cells are the table's, in order; ids cut to 12 hex digits
    assert [c[:3] for c in cells] == [
        ["branch", "0"], ["step", "attempt", "state"], ["1", "0", "succeeded"], ["2", "0", "failed"], ["2", "1", "succeeded"],
        ["branch", "1", "(live)"], ["step", "attempt", "state"], ["1", "0", "succeeded"], ["2", "0", "succeeded"]]
    assert lines[1:6] == ["branch 0",
                          "step  attempt  state      prompt        output        usage",
                          f"1     0        succeeded  {p}  {o}  {{\"tokens\": 7}}",
                          "2     0        failed",  # empty cells at the end of a line: no trailing blanks
                          "2     1        succeeded"]
    assert lines[6] == "branch 1 (live) forked from 0@1"
    # branch 1 shows what it inherits from branch 0 first, its 'from' column naming the branch (#16)
    assert lines[7:] == ["step  attempt  state      prompt        output        usage              from",
                         f"1     0        succeeded  {p}  {o}  {{\"tokens\": 7}}      0",
                         "2     0        succeeded" + " " * 30 + '{"tokens": 12345}']


def test_episode_on_a_terminal_is_rich_table(two_branches, tmp_path):
    store, run, _p, _o = two_branches
    out, mods = probe(["--store", store, "episode", run], tmp_path, tty=True)
    assert "rich.table" in mods
    assert "┏" in out and "succeeded" in out and "tokens=12345" in out  # usage summarized: no wrapped JSON cell (#16)


def test_a_sqlite_error_escaping_a_command_is_still_exit_11(two_branches, tmp_path):
    """The CLI's net for sqlite3 errors no longer names sqlite3 at import time (it is loaded only
    by commands that open the state cache); a raw sqlite3.Error still becomes one line and exit 11,
    and any other exception still propagates."""
    store, _run, _p, _o = two_branches
    code = ("import sys, sqlite3\n"
            "import objstore.runs.api as rl\n"
            "def boom(self):\n    raise sqlite3.OperationalError('disk I/O error')\n"
            "rl.RunLog.runs = boom\n"
            "sys.argv = ['objstore', '--store', sys.argv[1], 'runs']\n"
            "import objstore_cli.main\nobjstore_cli.main.main()\n")
    p = subprocess.run([sys.executable, "-c", code, store], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (p.returncode, p.stdout) == (11, "")
    assert p.stderr == ("objstore: error: state cache error while trying to use it: disk I/O error "
                        "(run 'objstore rebuild' to remake it from the objects)\n")
    p = subprocess.run([sys.executable, "-c", code.replace("sqlite3.OperationalError", "LookupError"), store],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 1 and p.stderr.splitlines()[-1] == "LookupError: disk I/O error"


def test_the_flat_layout_s_module_paths_are_aliases_of_their_new_homes(tmp_path):
    """``import objstore.engine`` (the layout before the packages) gives the module at its new path
    itself — one object, its own spec kept — and the two names that are functions now say where
    their modules went."""
    code = ("import objstore, objstore.engine as e, objstore.storage.log.local as e2\n"
            "from objstore.runlog import RunLog\n"
            "from objstore.segments import context\n"
            "import objstore.runs.api as rl, objstore.journal.restore as rs\n"
            "assert e is e2 and e.__spec__.name == 'objstore.storage.log.local' and RunLog is rl.RunLog and context is rs.context\n"
            "for old in ('verify', 'export'):\n"
            "    try:\n        __import__('objstore.' + old)\n    except ModuleNotFoundError as x:\n        print(x)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("objstore.verify is now objstore.runs.verify (objstore.verify is a function)\n"
                        "objstore.export is now objstore.runs.export (objstore.export is a function)\n")


# The objstore modules each command loads, exactly (issue 15): the click app, the command's own group module, and for
# a command on a local store what opening it through RunLog reads with — never the S3 package (objstore.storage.s3),
# never a group the command is not in. A module added to a command's path shows here as a difference to judge.
APP = {"objstore", "objstore.errors", "objstore.interrupt", "objstore_cli", "objstore_cli.main", "objstore_cli.output",
       "objstore_cli.params"}
GROUPS = {f"objstore_cli.{m}" for m in ("admin", "audit", "journal", "lifecycle", "maintenance", "objects", "remote", "runs",
                                        "sessions", "tables")}
LOCAL_STORE = {"objstore.lazy", "objstore.storage", *(f"objstore.storage.{m}" for m in (
    "authority", "batch", "codec", "erased", "fdbudget", "fileutil", "labels", "logset", "refs", "runrefs", "store", "storedir")),
    "objstore.storage.runlogs", "objstore.storage.runlogs.catalog", "objstore.storage.runlogs.held", "objstore.storage.runlogs.logs",
    "objstore.storage.log", *(f"objstore.storage.log.{m}" for m in (
        "blockcache", "checkpoint", "engine", "entry", "facts", "format", "idxtrust", "local", "local_catchup", "local_index", "local_objects",
        "local_state", "local_write", "memory", "packed", "parse", "root", "rules", "scan", "segfile", "segindex", "segrows",
        "tables", "txn", "witness")),
    "objstore.runs", *(f"objstore.runs.{m}" for m in (
        "api", "chain", "fold", "kinds", "labels", "listing", "records", "refold", "resolve", "state", "statefiles", "views"))}
LOADS = {
    "--help": APP | GROUPS,  # every command's line: each group's module, and nothing of the library
    "log --help": APP | {"objstore_cli.runs", "objstore_cli.tables"},
    "log RUN -n 10": APP | LOCAL_STORE | {"objstore_cli.runs", "objstore_cli.tables", "objstore.runs.history", "objstore.runs.labelspec"},
    "show ID": APP | LOCAL_STORE | {"objstore_cli.objects", "objstore.storage.runlogs.idindex"},  # a bare id: the id index
    "verify": APP | LOCAL_STORE | {"objstore_cli.audit", "objstore.storage.gclock", "objstore.storage.log.fsck", *(f"objstore.runs.{m}" for m in (
        "anchor_manifest", "anchors", "facts", "schemas", "verify", "verify_logs", "verify_objects", "verify_report", "verify_runmodel"))},
    "runs": APP | LOCAL_STORE | {"objstore_cli.runs", "objstore_cli.tables", "objstore.runs.labelspec"},
}


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    """A local store with one run of 12 records and a blob: (store, run id, blob id)."""
    from objstore import RunLog, Store

    store = str(tmp_path_factory.mktemp("startup") / "s")
    log = RunLog(Store.open(store, create=True))
    run = log.start_run("startup", subject="t")
    for i in range(12):
        log.record_attempt(run, step=i, attempt=0, state="succeeded")
    with log.store.batch_in(run):  # stored in the run's log (a blob put alone is held by its process on format 6)
        blob = log.put_blob(b"a blob")
    return store, run, blob.hex()


@pytest.mark.parametrize("command", list(LOADS))
def test_a_command_loads_exactly_its_modules(a_run, tmp_path, command):
    store, run, blob = a_run
    words = command.replace("RUN", run).replace("ID", blob).split()
    mods = loaded(words if words[0] == "--help" else ["--store", store, *words], tmp_path)
    got = {m for m in mods if m.split(".")[0] in ("objstore", "objstore_cli")}
    extra, missing = sorted(got - LOADS[command]), sorted(LOADS[command] - got)
    assert (extra, missing) == ([], []), f"objstore {command} loads {extra} too, and no longer {missing}"
    assert heavy_in(mods, ["obstore", "cryptography", "jsonschema", "hypothesis"]) == []


def test_the_commands_table_names_each_command_where_it_is(tmp_path):
    """main.Commands imports a group's module on the first look-up of one of its commands: every name in the
    table is a command of that name, and each group module's commands are all in the table. In a fresh
    interpreter: a process that ran a command has looked some up already."""
    code = """
import click
from objstore_cli import main
table = dict(main.cli.commands._table)  # before any look-up: "module:attribute" strings (help is main's own)
assert {k for k, v in table.items() if not isinstance(v, str)} == {"help"}, table
for name in table:
    assert main.cli.commands[name].name == name
for module in {v.partition(":")[0] for v in table.values() if isinstance(v, str)}:
    group = __import__(f"objstore_cli.{module}", fromlist=["_"])
    commands = [c for c in vars(group).values() if isinstance(c, click.Command)]
    subcommands = {id(sub) for c in commands if isinstance(c, click.Group) for sub in c.commands.values()}
    top = {c.name for c in commands if id(c) not in subcommands}
    assert top <= set(table), f"objstore_cli.{module}: {sorted(top - set(table))} missing from main's table"
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (p.returncode, p.stdout) == (0, "ok\n"), p.stderr


@pytest.mark.parametrize("words", [["init"], ["stats"], ["gc"], ["episode", "RUN"], ["export", "RUN"], ["view", "RUN"]])
def test_a_local_store_loads_no_s3_module(a_run, tmp_path, words):
    """The S3 package (objstore.storage.s3) and obstore are for s3:// stores only, whatever the command."""
    store, run, _blob = a_run
    target = str(tmp_path / "new") if words == ["init"] else store
    mods = loaded(["--store", target, *(run if w == "RUN" else w for w in words)], tmp_path)
    assert heavy_in(mods, ["objstore.storage.s3", "obstore"]) == []
