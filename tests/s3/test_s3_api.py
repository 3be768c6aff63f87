"""The library names an S3 store as it names a directory: ``open_store("s3://…")``, ``OBJSTORE_DIR=s3://…``,
``ObjstoreSaver("s3://…")`` (the README's graph, unchanged but for the path), ``objstore.aio`` over it."""

from __future__ import annotations

import asyncio
from typing import Annotated, TypedDict

from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from objstore import open_store
from objstore.aio import AsyncRunLog
from objstore.integrations.langgraph import ObjstoreSaver
from objstore.runs.verify import verify


class State(TypedDict):
    messages: Annotated[list, add_messages]


def test_the_readme_graph_on_s3(s3_url):
    builder = StateGraph(State)
    builder.add_node("echo", lambda s: {"messages": [("ai", "you said: " + s["messages"][-1].content)]})
    builder.add_edge(START, "echo")
    graph = builder.compile(checkpointer=ObjstoreSaver(s3_url))
    cfg = {"configurable": {"thread_id": "chat-1"}}
    graph.invoke({"messages": [("user", "hi")]}, cfg)
    graph.invoke({"messages": [("user", "again")]}, cfg)
    other = builder.compile(checkpointer=ObjstoreSaver(s3_url))  # another process would open it so
    got = [m.content for m in other.get_state(cfg).values["messages"]]
    assert got == ["hi", "you said: hi", "again", "you said: again"]
    log = open_store(s3_url, create=False)
    assert log.find_run(thread_id="chat-1", checkpoint_ns="") is not None
    assert verify(log) == []


def test_objstore_dir_and_aio(s3_url, monkeypatch):
    monkeypatch.setenv("OBJSTORE_DIR", s3_url)
    log = open_store()  # the store OBJSTORE_DIR names
    assert log.store.url == s3_url
    alog = AsyncRunLog(log)

    async def main():
        run = await alog.start_run(subject="s")
        await asyncio.gather(*(alog.append(run, "task_opened", {"task": f"t{i}"}) for i in range(10)))
        return run

    run = asyncio.run(main())
    fresh = open_store(s3_url, create=False)
    assert sorted(r.body["task"] for r in fresh.iter_records(run) if r.kind == "task_opened") == [f"t{i}" for i in range(10)]
