"""LangGraph checkpoints written before keep reading: a thread written by the ObjstoreSaver of format 5 (commit
158b5ba: one log, a checkpoint naming its parts as one flat list), upgraded with ``objstore upgrade``, reads back
through today's saver exactly as the old saver read it, and goes on.

The store is fixtures/upgrade-format5-langgraph-store, beside it upgrade-format5-langgraph-expected.json, both
made by fixtures/make_upgrade_stores.py (its docstring says how): a chat of 30 turns (the messages channel grows
to 60 messages and more), every turn's put_writes, a subgraph namespace (turn 20 runs the summarize subgraph), a
fork (a turn from turn 10's last checkpoint, which is not its branch's newest) and a turn after it on the fork.
The expected file holds what the old saver's ``list`` and ``get_tuple`` gave for every checkpoint of every
namespace (parent, metadata, channel values, pending writes, in ``make_upgrade_stores.lg_comparable``'s form).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from helpers import run_cli
from langchain_core.messages import HumanMessage

from objstore import RunLog, Store, verify
from objstore.integrations.langgraph import ObjstoreSaver

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")
sys.path.insert(0, FIX)
import make_upgrade_stores as M  # noqa: E402

with open(os.path.join(FIX, M.LG_EXPECTED), encoding="utf-8") as _f:
    EXPECTED = json.load(_f)
ROOT_NS = EXPECTED[""]


def read(saver: ObjstoreSaver) -> dict:
    return json.loads(json.dumps(M.lg_read(saver)))  # (tuples as the JSON file's lists)


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory):
    """The fixture store copied and upgraded with the CLI (once per module; tests that write copy it again)."""
    root = str(tmp_path_factory.mktemp("lgup") / "s")
    shutil.copytree(os.path.join(FIX, "upgrade-format5-langgraph-store"), root)
    _, out, _ = run_cli("upgrade", "--json", store=root, exit_code=0)
    got = json.loads(out)
    assert (got["status"], got["from"], got["to"]) == ("upgraded", 5, 6), got
    return root


def test_every_checkpoint_reads_as_the_old_saver_read_it(upgraded):
    run_cli("verify", store=upgraded, exit_code=0)
    assert len(EXPECTED) == 2 and len(ROOT_NS["list"]) > 90, "the fixture: two namespaces, ~100 root checkpoints"
    with ObjstoreSaver(upgraded) as saver:
        got = read(saver)
        run = saver._run(M.LG_THREAD, "")
        log = saver.log
        # the old layout, as stored: a flat list of part ids (blobs), and a fork of the root run's branch 0
        bodies = [r.body for r in log.iter_records(run, all_branches=True) if r.kind == "x.langgraph.checkpoint"]
        assert len(bodies) == len(ROOT_NS["list"]) and all("fanout" not in b for b in bodies)
        assert all(isinstance(p, bytes) and len(p) == 32 for b in bodies for p in b["parts"])
        assert sorted(log.view(run).heads) == [0, 1]
    assert got.keys() == EXPECTED.keys()
    for ns in EXPECTED:
        assert got[ns]["list"] == EXPECTED[ns]["list"], ns
        for cid, want in EXPECTED[ns]["checkpoints"].items():
            assert got[ns]["checkpoints"][cid] == want, (ns, cid)


def test_the_thread_goes_on_from_its_newest_checkpoint(upgraded, tmp_path):
    root = str(tmp_path / "s")
    shutil.copytree(upgraded, root)
    config = {"configurable": {"thread_id": M.LG_THREAD}}
    newest = ROOT_NS["list"][0]
    with ObjstoreSaver(root) as saver:
        assert saver.get_tuple(config).config["configurable"]["checkpoint_id"] == newest
        M.lg_graph().compile(checkpointer=saver).invoke({"messages": [HumanMessage("turn 31", id="h31")]}, config)
    with ObjstoreSaver(root) as saver:  # a fresh saver: what is read back comes from the store
        got = read(saver)
        run = saver._run(M.LG_THREAD, "")
        view = saver.log.view(run)
        on = {r.body["checkpoint_id"]: r.branch for r in saver.log.iter_records(run, all_branches=True)
              if r.kind == "x.langgraph.checkpoint"}
    added = got[""]["list"][:-len(ROOT_NS["list"])]
    assert got[""]["list"][len(added):] == ROOT_NS["list"] and len(added) == 3, added  # input, __start__, bot
    assert got[""]["checkpoints"][added[-1]]["parent"] == newest
    assert {on[c] for c in added} == {on[newest]} and sorted(view.heads) == [0, 1], "on the newest's branch: no fork"
    was = ROOT_NS["checkpoints"][newest]["values"]["messages"]
    assert got[""]["checkpoints"][added[0]]["values"]["messages"] == was + [["human", "turn 31", "h31"], ["ai", "you said: turn 31", "ai-h31"]]
    for ns in EXPECTED:  # and every checkpoint written before still reads the same
        assert {c: got[ns]["checkpoints"][c] for c in EXPECTED[ns]["list"]} == EXPECTED[ns]["checkpoints"], ns
    assert verify(RunLog(Store.open(root))) == []
