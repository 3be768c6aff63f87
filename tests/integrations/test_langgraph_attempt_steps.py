"""Every attempt of a LangGraph task is filed under its own step, whatever order the saver's calls
arrive in (issue 13, item 12).

With LangGraph's default durability ("async") a checkpoint's ``put`` runs in the background while
the step's tasks run, so a task's ``put_writes`` can reach the saver before the checkpoint it belongs
to is stored. The saver used to read the step from that checkpoint's record, found none, and filed
the retry as step 0 ("step 3, attempt 0, failed" and a spurious "step 0, attempt 1, succeeded").
Here every checkpoint commit is delayed by 0.3 s (the put path patched), so the writes always arrive
first; the graph is tests/integrations/lg_graphs.py's chat graph, whose tool fails then succeeds under a
RetryPolicy."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import lg_graphs as G
import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver

DELAY = 0.3


@pytest.fixture
def slow_puts(monkeypatch):
    """Every checkpoint reaches the store DELAY seconds late (both savers' put goes through this)."""
    put = ObjstoreSaver.put
    order: list[str] = []

    def delayed(self, config, checkpoint, metadata, new_versions):
        time.sleep(DELAY)
        out = put(self, config, checkpoint, metadata, new_versions)
        order.append(f"put {metadata.get('step')}")
        return out

    monkeypatch.setattr(ObjstoreSaver, "put", delayed)
    return order


def _attempts(saver, thread):
    run = saver.log.find_run(thread_id=thread, checkpoint_ns="")
    return [(a["step"], a["attempt"], a["state"], a["context"]["node"])
            for a in (r.body for r in saver.log.records(run) if r.kind == "attempt")]


def _run(saver, graph, cfg, is_async):
    if is_async:
        async def go():
            await graph.ainvoke({"messages": [HumanMessage("paris", id="h1")]}, cfg)
            return await graph.ainvoke(Command(resume="yes"), cfg)
        return asyncio.run(go())
    graph.invoke({"messages": [HumanMessage("paris", id="h1")]}, cfg)
    return graph.invoke(Command(resume="yes"), cfg)


@pytest.mark.parametrize("cls", [ObjstoreSaver, AsyncObjstoreSaver])
def test_a_retry_is_filed_under_its_step_when_the_writes_arrive_first(tmp_path, slow_puts, cls):
    saver = cls(str(tmp_path / "s"))
    calls: Counter = Counter()
    graph = G.chat_graph(calls).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}, "callbacks": [saver.attempt_recorder()]}
    out = _run(saver, graph, cfg, cls is AsyncObjstoreSaver)
    assert out["messages"][-1].content == "The weather: sunny in paris" and calls["tools"] == 2
    assert _attempts(saver, "chat") == [(3, 0, "failed", "tools"), (3, 1, "succeeded", "tools")]


def test_a_last_failure_without_the_callback_is_filed_under_its_step_when_the_writes_arrive_first(tmp_path, slow_puts):
    """No attempt_recorder: the failure reaches the saver only as the task's ERROR write, before its
    checkpoint is stored; it is filed under the checkpoint's step once that lands."""
    saver = ObjstoreSaver(str(tmp_path / "s"))
    calls: Counter = Counter()
    graph = G.chat_graph(calls, fail_first=3).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("oslo", id="h1")]}, cfg)
    with pytest.raises(ConnectionError):
        graph.invoke(Command(resume="yes"), cfg)
    assert _attempts(saver, "t") == [(3, 0, "failed", "")]
    graph.invoke(None, cfg)
    assert _attempts(saver, "t") == [(3, 0, "failed", ""), (3, 1, "succeeded", "")]
