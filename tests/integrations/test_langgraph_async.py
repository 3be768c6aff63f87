"""AsyncObjstoreSaver under an async graph: ``ainvoke`` through the interrupt and the retried tool,
the same checkpoints and attempts as the sync saver; its sync methods refuse the event loop's thread
(they would block it) and work from another thread."""

from __future__ import annotations

import asyncio
from collections import Counter

import lg_graphs as G
import pytest
from helpers import log_engine_of
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore import verify
from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver


def test_an_async_graph_on_the_async_saver(tmp_path):
    async def main():
        async with AsyncObjstoreSaver(str(tmp_path / "s")) as saver:
            calls: Counter = Counter()
            graph = G.chat_graph(calls).compile(checkpointer=saver)
            cfg = {"configurable": {"thread_id": "a"}, "callbacks": [saver.attempt_recorder()]}
            await graph.ainvoke({"messages": [HumanMessage("rome", id="h1")]}, cfg)
            out = await graph.ainvoke(Command(resume="yes"), cfg)
            with pytest.raises(asyncio.InvalidStateError):
                saver.get_tuple({"configurable": {"thread_id": "a", "checkpoint_ns": ""}})
            from_thread = await asyncio.to_thread(saver.get_tuple, {"configurable": {"thread_id": "a", "checkpoint_ns": ""}})
            listed = [t async for t in saver.alist({"configurable": {"thread_id": "a"}})]
            return calls, out, from_thread, listed, saver

    calls, out, latest, listed, saver = asyncio.run(main())
    assert calls == Counter(llm=2, review=2, tools=2)
    assert out["messages"][-1].content == "The weather: sunny in rome"
    assert latest.checkpoint["channel_values"]["messages"][-1].content == "The weather: sunny in rome"
    assert [t.metadata["step"] for t in listed] == [4, 3, 2, 1, 0, -1]
    log = ObjstoreSaver(saver.log).log
    run = log.find_run(thread_id="a", checkpoint_ns="")
    assert [(a.body["attempt"], a.body["state"]) for a in log.records(run) if a.kind == "attempt"] == [(0, "failed"), (1, "succeeded")]
    assert verify(log) == []


def test_a_tasks_batch_makes_its_puts_one_commit(tmp_path):
    """``async with saver.alog.batch():`` — the task's aput/aput_writes join one store batch: one log
    entry for all of them; without it each call is its own commit."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = AsyncObjstoreSaver(str(tmp_path / "s"))

    async def puts(n, parent):
        for i in range(n):
            cp = empty_checkpoint()
            cp["channel_values"] = {"i": i}
            cp["channel_versions"] = {"i": i + 1}
            conf = {"thread_id": "b", "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
            cfg = await saver.aput({"configurable": conf}, cp, {"step": i}, {"i": i + 1})
            await saver.aput_writes(cfg, [("i", i)], f"task{i}")
            parent = cfg["configurable"]["checkpoint_id"]
        return parent

    async def main():
        parent = await puts(1, None)  # the kinds and the run exist from here on
        # the thread's run's log (the store's one log before format 6): where its commits are entries
        engine = log_engine_of(saver.log.store, saver.log.find_run(thread_id="b", checkpoint_ns=""))
        e0 = engine.refresh().entry
        parent = await puts(3, parent)
        e1 = engine.refresh().entry
        async with saver.alog.batch():
            parent = await puts(3, parent)
        e2 = engine.refresh().entry
        return e1 - e0, e2 - e1, [t.metadata["step"] async for t in saver.alist({"configurable": {"thread_id": "b"}})]

    alone, batched, steps = asyncio.run(main())
    assert (alone, batched) == (6, 1)
    assert steps == [2, 1, 0, 2, 1, 0, 0]
