"""Parts trees under racing writers: two OS processes of two threads each run chats that start from
one checkpoint of a thread already longer than a node and continue their own checkpoints, so most
puts lose a race somewhere and fork. Every checkpoint reads back from a fresh saver as it was put,
every parts node a checkpoint names is a record of that checkpoint's own lineage (what prune and gc
rely on: partree.py), and the store verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from objstore import verify
from objstore.integrations.langgraph import CHECKPOINT, ObjstoreSaver
from objstore.integrations.langgraph import partree as T

HERE = os.path.dirname(os.path.abspath(__file__))
TURNS = 12


@pytest.mark.slow
def test_racing_chats_keep_every_checkpoint_readable_and_their_nodes_on_their_lineage(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    msgs = [f"opening {i}" for i in range(T.FANOUT * 2 + 3)]
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": msgs}
    cp["channel_versions"] = {"messages": 1}
    start = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"source": "loop", "step": 0},
                      {"messages": 1})["configurable"]["checkpoint_id"]
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "lg_chat_writer.py"), root, "t", start, name, str(TURNS), go],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in ("A", "B")]
    open(go, "w").close()
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    puts = [json.loads(line) for o in outs for line in o[0].decode().splitlines()]
    assert len(puts) == 4 * TURNS

    fresh = ObjstoreSaver(root)
    for cid, values in puts:
        t = fresh.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}})
        assert t is not None and t.checkpoint["channel_values"] == {"messages": values}
    run = fresh.log.find_run(thread_id="t", checkpoint_ns="")
    recs = [r for r in fresh.log.records(run, all_branches=True) if r.kind == CHECKPOINT]
    assert len(recs) == 1 + 4 * TURNS
    assert len({r.branch for r in recs}) > 1  # the races forked
    for r in recs:
        own = {x.id for x in fresh._walk_back(r.id)}
        named = fresh.trees.nodes([r])
        assert named <= own, r.body["checkpoint_id"]
    assert verify(fresh.log) == []
