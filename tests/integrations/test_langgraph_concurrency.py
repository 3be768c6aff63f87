"""Two OS processes resume one thread from the same checkpoint (langgraph#8796: both succeed and one
committed checkpoint becomes unreachable). Here both checkpoints are kept: the first on the branch it
continues, the second on a branch of its own forked at the shared parent; every checkpoint is
reachable from a branch head, and the store verifies."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from objstore import open_store, verify
from objstore.integrations.langgraph import CHECKPOINT, ObjstoreSaver

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_two_processes_resuming_one_checkpoint_both_keep_theirs(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    ids = []
    parent = None
    for i in range(2):
        cp = empty_checkpoint()
        cp["channel_values"] = {"who": "start"}
        cp["channel_versions"] = {"who": 1}
        conf = {"thread_id": "t", "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
        parent = saver.put({"configurable": conf}, cp, {"source": "loop", "step": i}, {"who": 1})["configurable"]["checkpoint_id"]
        ids.append(parent)
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "lg_resume.py"), root, "t", ids[-1], name, go],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in ("A", "B")]
    open(go, "w").close()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    new = [o[0].decode().strip() for o in outs]
    assert len(set(new)) == 2

    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    view = log.view(run)
    assert sorted(view.heads) == [0, 1]
    # Every checkpoint is reachable: walking every branch's own records finds all four, once each.
    reach = [r.body["checkpoint_id"] for r in log.records(run, all_branches=True) if r.kind == CHECKPOINT]
    assert sorted(reach) == sorted(ids + new)
    by_branch = {r.body["checkpoint_id"]: r.branch for r in log.records(run, all_branches=True) if r.kind == CHECKPOINT}
    assert sorted(by_branch[c] for c in new) == [0, 1]
    fork = log.fork_object(view, 1)
    parent_rec = next(r for r in log.find_records(run, checkpoint_id=ids[-1]) if r.kind == CHECKPOINT)
    assert fork is not None and fork["parent_record"] == parent_rec.id
    fresh = ObjstoreSaver(root)
    for c, name in zip(new, ("A", "B"), strict=True):
        t = fresh.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": c}})
        assert t is not None and t.checkpoint["channel_values"] == {"who": name} and t.parent_config["configurable"]["checkpoint_id"] == ids[-1]
        assert [(w[0], w[2]) for w in t.pending_writes] == [(f"task-{name}", f"next after {name}")]
    assert sorted(x.config["configurable"]["checkpoint_id"] for x in fresh.list({"configurable": {"thread_id": "t"}})) == sorted(ids + new)
    assert verify(log) == []
