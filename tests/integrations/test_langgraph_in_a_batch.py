"""The saver's puts inside a caller's ``log.batch()`` on a fresh store (many checkpoints, one commit).

The saver declares its three record kinds (``schema/x.langgraph.*``, refs of the store log) on its first write;
the checkpoint's run is one run's log. On a store of a log per run a batch writes one log, so the declarations
are a commit of the store log of their own, made before the batch's (``Store.store_log_commit``): the batch
still lands as one entry of the run's log, and a batch that fails leaves only the (idempotent) declarations.
Counted in entries of each log, read from the logs themselves."""

from __future__ import annotations

import pytest
from helpers import is_per_run, log_engine_of
from langgraph.checkpoint.base import empty_checkpoint

import objstore
from objstore.integrations.langgraph import ObjstoreSaver
from objstore.integrations.langgraph.partree import NODE
from objstore.integrations.langgraph.saver import CHECKPOINT, WRITES


def _entries(log, run=None):
    eng = log_engine_of(log.store, run)
    eng.refresh()
    return eng.tables.pos.entry


def test_puts_in_a_batch_on_a_fresh_store_land_as_one_commit(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root, fsync="off")
    saver = ObjstoreSaver(log)
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    ids = []
    with log.batch():
        for step in range(3):
            cp = empty_checkpoint()
            conf = saver.put(conf, cp, {"source": "loop", "step": step}, {})
            ids.append(cp["id"])
    fresh = ObjstoreSaver(objstore.open_store(root))
    assert [t.checkpoint["id"] for t in fresh.list({"configurable": {"thread_id": "t"}})] == ids[::-1]
    run = fresh.log.find_run(thread_id="t", checkpoint_ns="")
    if is_per_run(root):
        assert _entries(fresh.log) == 3  # the three declarations: a commit of the store log each
        assert _entries(fresh.log, run) == 1  # the run's start and three checkpoints: the batch's one entry
        assert {n for n, _v in fresh.log.store.list_refs("schema/")} == {f"schema/{CHECKPOINT}", f"schema/{WRITES}", f"schema/{NODE}"}
    assert objstore.verify(fresh.log) == []


def test_a_failed_batch_leaves_only_the_declarations(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root, fsync="off")
    saver = ObjstoreSaver(log)
    with pytest.raises(RuntimeError, match="the caller's own failure"), log.batch():
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        raise RuntimeError("the caller's own failure")
    fresh = objstore.open_store(root)
    assert fresh.find_run(thread_id="t", checkpoint_ns="") is None
    assert ObjstoreSaver(fresh).get_tuple({"configurable": {"thread_id": "t"}}) is None
    if is_per_run(root):
        assert fresh.store.logs.run_ids() == []
        assert _entries(fresh) == 3
    assert objstore.verify(fresh) == []
