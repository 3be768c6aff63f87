"""Shared fixtures: real stores in temporary directories, and a CLI runner.

Stores use fsync=full unless a test says otherwise: the durability path is the
one under test. Hypothesis-heavy tests use fsync=off stores (only CPU paths).
"""


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


