"""AsyncObjstoreSaver under an async graph: ``ainvoke`` through the interrupt and the retried tool,
the same checkpoints and attempts as the sync saver; its sync methods refuse the event loop's thread
(they would block it) and work from another thread."""

from __future__ import annotations

import asyncio
from collections import Counter

import lg_graphs as G
import pytest
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
