"""Deletion through the LangGraph saver is real: a planted incompressible secret in a channel value
is in the store's files (zstd frames decompressed) before ``delete_thread`` and in none of them
after it and gc; another thread's checkpoints read back unchanged and the store verifies."""

from __future__ import annotations

import os

from langgraph.checkpoint.base import empty_checkpoint
from test_erasure import found

from objstore import verify
from objstore.integrations.langgraph import ObjstoreSaver
from objstore.lifecycle import gc as G


def _put(saver, thread, values, parent=None, ns=""):
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    if parent:
        conf["checkpoint_id"] = parent
    return saver.put({"configurable": conf}, cp, {"source": "loop", "step": 0}, cp["channel_versions"])["configurable"]["checkpoint_id"]


def test_delete_thread_then_gc_leaves_no_trace_of_a_planted_secret(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    secret = os.urandom(24).hex()
    c1 = _put(saver, "doomed", {"messages": ["hello", f"my card is {secret}"], "note": f"n {secret}"})
    c2 = _put(saver, "doomed", {"messages": ["hello", f"my card is {secret}", "ok"], "note": "plain"}, c1)
    saver.put_writes({"configurable": {"thread_id": "doomed", "checkpoint_ns": "", "checkpoint_id": c2}},
                     [("messages", f"pending {secret}")], "task-1")
    _put(saver, "doomed", {"x": f"child {secret}"}, ns="child:1")  # another namespace: another run of the thread
    kept = _put(saver, "kept", {"messages": ["hello", "other"]})
    assert found(root, secret.encode()) != []

    saver.delete_thread("doomed")
    assert saver.get_tuple({"configurable": {"thread_id": "doomed", "checkpoint_ns": ""}}) is None
    assert list(saver.list({"configurable": {"thread_id": "doomed"}})) == []
    G.gc(saver.log.store)
    assert found(root, secret.encode()) == []

    fresh = ObjstoreSaver(root)
    t = fresh.get_tuple({"configurable": {"thread_id": "kept", "checkpoint_ns": ""}})
    assert t is not None and t.config["configurable"]["checkpoint_id"] == kept
    assert t.checkpoint["channel_values"] == {"messages": ["hello", "other"]}  # "hello" was shared with the deleted thread
    assert verify(fresh.log) == []
    # The thread id is free again: a new run (the next generation of its labels) starts empty.
    c = _put(fresh, "doomed", {"messages": ["again"]})
    assert [x.config["configurable"]["checkpoint_id"] for x in fresh.list({"configurable": {"thread_id": "doomed"}})] == [c]
