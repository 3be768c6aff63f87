"""``AsyncObjstoreSaver``: the LangGraph checkpointer for async graphs (``graph.ainvoke``, ``astream``).

It is ``ObjstoreSaver``'s mapping (saver.py) behind async methods that never block the event loop:
each call (one ``put``, one ``put_writes``: one batch, one commit) runs whole in a worker thread,
so its batch lives in one thread from start to commit and concurrent tasks each get their own;
``alist`` pulls one checkpoint at a time from the lazy listing there. (``objstore.aio.AsyncRunLog``
would hop to a thread per RunLog call: a checkpoint of 200 parts is 200 blob puts, one hop here.)

Like AsyncSqliteSaver, the sync methods refuse to run on the thread of a running event loop (they
would block it): ``asyncio.InvalidStateError`` there, and from any other thread they work.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

from .saver import ObjstoreSaver


def _off_the_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop runs on this thread: a sync call blocks nobody
    raise asyncio.InvalidStateError(f"synchronous {what} on AsyncObjstoreSaver would block the event loop: "
                                    f"use `await saver.a{what}(...)` or `await graph.ainvoke(...)`")


class AsyncObjstoreSaver(ObjstoreSaver):
    """``async with AsyncObjstoreSaver("path") as saver: graph = builder.compile(checkpointer=saver)``."""

    async def __aenter__(self) -> AsyncObjstoreSaver:
        return self

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        _off_the_loop("get_tuple")
        return super().get_tuple(config)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        _off_the_loop("list")
        return super().list(config, filter=filter, before=before, limit=limit)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        _off_the_loop("put")
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        _off_the_loop("put_writes")
        super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        _off_the_loop("delete_thread")
        super().delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        _off_the_loop("delete_for_runs")
        super().delete_for_runs(run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        _off_the_loop("prune")
        super().prune(thread_ids, strategy=strategy)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        _off_the_loop("copy_thread")
        super().copy_thread(source_thread_id, target_thread_id)


__all__: builtins.list[str] = ["AsyncObjstoreSaver"]
