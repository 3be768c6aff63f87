"""Store discovery like git's: no --store/OBJSTORE_DIR → .objstore in the current directory or
a parent, never across a filesystem boundary; init makes ./.objstore; demo uses the found store."""

import json
import os

import pytest
from click.testing import CliRunner
from helpers import run_cli

from objstore.errors import StoreNotFound
from objstore.storage.storedir import discover


def _alone(tmp_path):
    """Environment for a child that must not find a store above ``tmp_path`` (whatever the
    machine's directories hold): its parent is a ceiling, as git's GIT_CEILING_DIRECTORIES."""
    return {"OBJSTORE_CEILING_DIRECTORIES": str(tmp_path.parent)}


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
    sub = tmp_path / "x" / "y"
    sub.mkdir(parents=True)
    for args in (["runs"], ["log", "latest"], ["verify"]):
        rc, out, err = run_cli(*args, cwd=str(sub), env_extra=_alone(tmp_path), exit_code=3)
        assert err == (f"objstore: error: not an objstore store: no .objstore in {sub} or any parent up to {tmp_path} "
                       f"(ceiling {tmp_path.parent} in $OBJSTORE_CEILING_DIRECTORIES) (run 'objstore init' or pass --store)\n")
        assert len(err.strip().splitlines()) == 1
    assert not (sub / ".objstore").exists()


def test_demo_without_a_store_creates_dot_objstore(tmp_path):
    rc, out, err = run_cli("demo", cwd=str(tmp_path), env_extra=_alone(tmp_path), exit_code=0)
    assert out.splitlines()[0] == f"store: {tmp_path / '.objstore'}"


def test_discovery_stops_at_a_filesystem_boundary_simulated(tmp_path, monkeypatch):
    """st_dev changes between tmp_path/sub and tmp_path (os.stat patched in-process, CliRunner):
    the store in tmp_path is beyond the boundary and is not used."""
    from objstore_cli.main import cli

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
        # the property is covered everywhere by test_discovery_stops_at_a_filesystem_boundary_simulated;
        # this one proves it on a real mount where the machine has one
        pytest.skip("no writable tmpfs at /dev/shm on a filesystem of its own (the simulated boundary test covers this)")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as d:
        sub = os.path.join(d, "deep")
        os.mkdir(sub)
        with pytest.raises(StoreNotFound, match=f"up to {shm} \\(filesystem boundary\\)"):
            discover(sub)
        rc, out, err = run_cli("runs", cwd=sub, exit_code=3)
        assert f"up to {shm} (filesystem boundary)" in err


def test_a_ceiling_directory_stops_the_search_like_git(tmp_path):
    run_cli("init", cwd=str(tmp_path), exit_code=0)
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert discover(str(sub), ceilings=[]) == str(tmp_path / ".objstore")
    # a ceiling at tmp_path: the search never goes up into it, so its store is not found
    with pytest.raises(StoreNotFound) as ei:
        discover(str(sub), ceilings=[str(tmp_path)])
    assert str(ei.value) == (f"not an objstore store: no .objstore in {sub} or any parent up to {tmp_path / 'a'} "
                             f"(ceiling {tmp_path} in $OBJSTORE_CEILING_DIRECTORIES) (run 'objstore init' or pass --store)")
    rc, out, err = run_cli("runs", cwd=str(sub), env_extra={"OBJSTORE_CEILING_DIRECTORIES": f"relative/ignored:{tmp_path}"}, exit_code=3)
    assert f"(ceiling {tmp_path} in $OBJSTORE_CEILING_DIRECTORIES)" in err
    # a ceiling above the store does not hide it; a store in the start directory is always found
    run_cli("runs", cwd=str(sub), env_extra=_alone(tmp_path), exit_code=0)
    assert discover(str(tmp_path), ceilings=[str(tmp_path)]) == str(tmp_path / ".objstore")
