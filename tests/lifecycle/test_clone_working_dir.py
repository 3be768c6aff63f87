"""`objstore clone URL DIR` makes DIR a directory holding `.objstore`, as git makes one holding `.git`.

So `cd DIR && objstore runs` finds the clone (it failed with exit 3 when DIR itself was the store).
`--store DIR`, OBJSTORE_DIR=DIR and the library's `open_store(DIR)` take either a store or a directory
holding `.objstore`, so stores cloned the old way (DIR itself the store) and scripts passing them stay
usable. Every command line here is a real process.
"""

import json
import os

from helpers import run_cli

from objstore import RunLog, Store, open_store
from objstore.storage.storedir import MARKER


def _source(tmp_path):
    root = str(tmp_path / "src")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "succeeded")
    log.store.engine.close()
    return root


def test_clone_makes_a_directory_holding_the_store(tmp_path):
    src = _source(tmp_path)
    work = tmp_path / "work"
    run_cli("clone", src, str(work), exit_code=0)
    assert os.path.isfile(work / ".objstore" / MARKER) and not os.path.exists(work / MARKER)
    assert sorted(os.listdir(work)) == [".objstore"]
    rc, out, err = run_cli("runs", cwd=str(work), exit_code=0)
    assert "r1" in out
    (work / "sub").mkdir()
    rc, out, err = run_cli("log", "r1", "--oneline", cwd=str(work / "sub"), exit_code=0)
    assert "attempt" in out
    rc, out, err = run_cli("verify", cwd=str(work), exit_code=0)


def test_store_option_takes_a_directory_holding_the_store(tmp_path):
    src = _source(tmp_path)
    work = str(tmp_path / "work")
    run_cli("clone", src, work, "--json", exit_code=0)
    rc, out, err = run_cli("runs", "--json", store=work, cwd=str(tmp_path), exit_code=0)
    assert [r["run"] for r in json.loads(out)] == ["r1"]
    rc, out, err = run_cli("runs", cwd=str(tmp_path), env_extra={"OBJSTORE_DIR": work}, exit_code=0)
    assert "r1" in out
    assert open_store(work).store.root == os.path.join(os.path.abspath(work), ".objstore")
    # a push into the directory lands in its store, not in a second store beside it
    log = RunLog(Store.open(src))
    log.record_attempt("r1", 2, 0, "succeeded")
    log.store.engine.close()
    run_cli("push", work, store=src, cwd=str(tmp_path), exit_code=0)
    assert sorted(os.listdir(work)) == [".objstore"]
    rc, out, err = run_cli("log", "r1", "--oneline", cwd=work, exit_code=0)
    assert len([ln for ln in out.splitlines() if " attempt " in ln]) == 2


def test_a_store_cloned_the_old_way_stays_usable(tmp_path):
    src = _source(tmp_path)
    old = str(tmp_path / "old")
    Store.init(old).engine.close()  # what `clone` made before: DIR itself the store
    run_cli("push", old, store=src, cwd=str(tmp_path), exit_code=0)
    rc, out, err = run_cli("runs", store=old, cwd=str(tmp_path), exit_code=0)
    assert "r1" in out
    rc, out, err = run_cli("runs", cwd=old, exit_code=3)  # as before: no .objstore in it (git would say the same)


def test_clone_into_a_non_empty_directory_is_refused(tmp_path):
    src = _source(tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    rc, out, err = run_cli("clone", src, str(busy), exit_code=5)
    assert sorted(os.listdir(busy)) == ["notes.txt"]
