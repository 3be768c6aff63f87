"""Store discovery like git's: no --store/OBJSTORE_DIR → .objstore in the current directory or
a parent, never across a filesystem boundary; init makes ./.objstore; demo uses the found store."""

import json
import os

import pytest
from click.testing import CliRunner
from helpers import run_cli

from objstore.errors import StoreNotFound
from objstore.store import discover


def _has_store_above(path):
    p = os.path.abspath(path)
    while True:
        if os.path.isdir(os.path.join(p, ".objstore")):
            return True
        if os.path.dirname(p) == p:
            return False
        p = os.path.dirname(p)


def test_commands_find_the_store_from_a_nested_directory(tmp_path):
    rc, out, err = run_cli("init", cwd=str(tmp_path), exit_code=0)
    assert out.startswith(f"initialised objstore store in {tmp_path / '.objstore'}")
    nested = tmp_path / "a" / "b" / "c"
    nested.mkdir(parents=True)
    rc, out, err = run_cli("demo", "--run", "d1", cwd=str(nested), exit_code=0)
    assert out.splitlines()[0] == f"store: {tmp_path / '.objstore'}"
    assert not (nested / ".objstore").exists(), "demo used the discovered store"
    rc, out, err = run_cli("runs", "--json", cwd=str(nested), exit_code=0)
    assert [r["run"] for r in json.loads(out)] == ["d1"]
    rc, out, err = run_cli("log", "latest", "-n", "1", "--format", "oneline", cwd=str(nested / ".."), exit_code=0)
    assert "run_finished" in out
    rc, out, err = run_cli("verify", cwd=str(nested), exit_code=0)
    # init from the nested directory makes a new ./.objstore there, never the parent's
    rc, out, err = run_cli("init", cwd=str(nested), exit_code=0)
    assert out.startswith(f"initialised objstore store in {nested / '.objstore'}")
    rc, out, err = run_cli("runs", "--json", cwd=str(nested), exit_code=0)
    assert json.loads(out) == [], "the nearest store wins"
    # --store and OBJSTORE_DIR still win over discovery
    rc, out, err = run_cli("runs", "--json", cwd=str(nested), env_extra={"OBJSTORE_DIR": str(tmp_path / ".objstore")}, exit_code=0)
    assert [r["run"] for r in json.loads(out)] == ["d1"]


def test_init_again_says_already_initialised(tmp_path):
    run_cli("init", cwd=str(tmp_path), exit_code=0)
    rc, out, err = run_cli("init", cwd=str(tmp_path), exit_code=0)
    assert out.startswith(f"already initialised objstore store in {tmp_path / '.objstore'}")


def test_no_store_anywhere_names_where_it_looked(tmp_path):
    if _has_store_above(tmp_path):
        pytest.skip("a parent of the temporary directory holds a .objstore")
    sub = tmp_path / "x" / "y"
    sub.mkdir(parents=True)
    for args in (["runs"], ["log", "latest"], ["verify"]):
        rc, out, err = run_cli(*args, cwd=str(sub), exit_code=3)
        assert err.startswith(f"objstore: error: not an objstore store: no .objstore in {sub} or any parent up to ")
        assert len(err.strip().splitlines()) == 1
    assert not (sub / ".objstore").exists()


def test_demo_without_a_store_creates_dot_objstore(tmp_path):
    if _has_store_above(tmp_path):
        pytest.skip("a parent of the temporary directory holds a .objstore")
    rc, out, err = run_cli("demo", cwd=str(tmp_path), exit_code=0)
    assert out.splitlines()[0] == f"store: {tmp_path / '.objstore'}"


def test_discovery_stops_at_a_filesystem_boundary_simulated(tmp_path, monkeypatch):
    """st_dev changes between tmp_path/sub and tmp_path (os.stat patched in-process, CliRunner):
    the store in tmp_path is beyond the boundary and is not used."""
    from cli.main import cli

    run_cli("init", cwd=str(tmp_path), exit_code=0)
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    monkeypatch.delenv("OBJSTORE_DIR", raising=False)
    assert discover() == str(tmp_path / ".objstore")  # same filesystem: found
    r = CliRunner().invoke(cli, ["runs", "--json"])
    assert r.exit_code == 0, r.output

    real_stat = os.stat

    def stat(path, *a, **kw):
        st = real_stat(path, *a, **kw)
        if os.path.abspath(os.fspath(path)) == str(tmp_path):
            fields = list(st)
            fields[2] = st.st_dev + 1  # st_dev
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(StoreNotFound, match="filesystem boundary"):
        discover()
    r = CliRunner().invoke(cli, ["runs"])
    assert r.exit_code == 3
    assert f"no .objstore in {sub} or any parent up to {sub} (filesystem boundary)" in r.output


def test_discovery_stops_at_a_real_filesystem_boundary(tmp_path):
    """/dev/shm is a tmpfs mounted on /dev (another st_dev): a search from it stops there."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK) or os.stat(shm).st_dev == os.stat("/dev").st_dev:
        pytest.skip("no writable /dev/shm on its own filesystem")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as d:
        sub = os.path.join(d, "deep")
        os.mkdir(sub)
        with pytest.raises(StoreNotFound, match=f"up to {shm} \\(filesystem boundary\\)"):
            discover(sub)
        rc, out, err = run_cli("runs", cwd=sub, exit_code=3)
        assert f"up to {shm} (filesystem boundary)" in err
