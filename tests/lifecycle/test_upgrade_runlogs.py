"""Upgrade of a store of one log (formats 3, 4, 5, made by the objstore before format 6: fixtures/
make_upgrade_stores.py) to format 6, a log per run, in place.

Every run, record, ref (the runs' cite refs aside) and object with a body is the same after; the old store is kept
byte for byte as PATH.format<N>; a killed upgrade (kill -9 at each named step) leaves a usable store, and running
upgrade again finishes; a store whose gc removed records is refused with nothing changed (it stays on its format).
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers import snapshot_tree

from objstore import RunLog, Store, verify
from objstore.errors import Refused
from objstore.legacy import upgrade as U
from objstore.storage import runrefs

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")


def _copy(tmp_path, name):
    root = str(tmp_path / "s")
    shutil.copytree(os.path.join(FIX, name), root)
    return root


def _everything(root):
    """What a reader sees: runs, each run's records (all branches), the refs (cite aside), and the objects' bytes."""
    store = Store.open(root)
    log = RunLog(store)
    runs = {r: [(x.branch, x.lsn, x.kind, x.id) for x in log.iter_records(r, all_branches=True)] for r in store.run_names()}
    refs = {k: v for k, v in store.list_refs() if not runrefs.is_cite_ref(k)}
    objects = {}
    for _run, eng in store.logs.all_logs():
        for oid in eng.iter_ids():
            if eng.has_body(oid):
                objects[oid] = eng.read(oid)
    store.logs.close()
    return runs, refs, objects


@pytest.mark.parametrize("name,version", [("upgrade-format3-store", 3), ("upgrade-format5-store", 5)])
def test_a_store_of_one_log_upgrades_to_a_log_per_run(tmp_path, name, version):
    root = _copy(tmp_path, name)
    old_tree = snapshot_tree(root)
    runs, refs, objects = _everything(root)
    got = U.upgrade(root)
    assert (got["status"], got["from"], got["to"], got["backup"]) == ("upgraded", version, 6, f"{root}.format{version}")
    assert snapshot_tree(root + f".format{version}") == old_tree  # the old store, kept byte for byte
    store = Store.open(root)
    assert store.logs.per_run and store.engine.log_files
    new_runs, new_refs, new_objects = _everything(root)
    assert new_runs == runs and new_refs == refs
    assert set(objects) <= set(new_objects) and all(new_objects[o] == objects[o] for o in objects)
    assert verify(RunLog(Store.open(root))) == []
    assert U.upgrade(root)["status"] == "already-format-6"


def test_a_store_whose_gc_removed_records_is_refused_and_left_as_it_is(tmp_path):
    root = _copy(tmp_path, "upgrade-format4-store")
    before = snapshot_tree(root)
    with pytest.raises(Refused, match="gc removed record"):
        U.upgrade(root)
    assert snapshot_tree(root) == before
    assert not os.path.exists(root + ".upgrade-tmp") and not os.path.exists(root + ".format4")
    assert RunLog(Store.open(root)).store.run_names()  # still read, as format 4


_CRASH = r"""
import os, sys
from objstore.legacy import upgrade as U
def die(step, at=sys.argv[2]):
    if step == at:
        os.kill(os.getpid(), 9)
U._checkpoint = die
U.upgrade(sys.argv[1])
"""


@pytest.mark.parametrize("step", ["built", "verified", "swap", "between-renames"])
def test_a_killed_upgrade_leaves_a_usable_store_and_upgrade_finishes(tmp_path, step):
    root = _copy(tmp_path, "upgrade-format5-store")
    runs, refs, _objects = _everything(root)
    p = subprocess.run([sys.executable, "-c", _CRASH, root, step], capture_output=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    if step == "between-renames":
        assert not os.path.exists(root) and os.path.isdir(root + ".format5")
    else:
        assert _everything(root)[:2] == (runs, refs)  # the old store, usable as it was
    got = U.upgrade(root)
    assert got["status"] in ("upgraded", "finished")
    assert _everything(root)[:2] == (runs, refs)
    assert Store.open(root).logs.per_run
