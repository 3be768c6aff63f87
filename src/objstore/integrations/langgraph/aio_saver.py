"""``AsyncObjstoreSaver``: the LangGraph checkpointer for async graphs (``graph.ainvoke``, ``astream``).

It is ``ObjstoreSaver``'s mapping (saver.py) on ``objstore.aio.AsyncRunLog`` (``saver.alog``): each
async method is one ``alog.call`` of the sync implementation, so the event loop is never blocked and
a call (one ``put``: its blobs, the branch decision, the record — one batch, one commit) runs whole
in one worker thread, one hop rather than one per blob. Inside ``async with saver.alog.batch():``
a task's calls run in that task's batch thread and join its batch (one commit for all of them);
other tasks' calls stay out of it — LangGraph's own included: ``graph.ainvoke`` inside such a
block never returns (its puts, made from LangGraph's tasks, wait for the lock the block holds). ``alist`` pulls one checkpoint at a time from the lazy listing.

Like AsyncSqliteSaver, the sync methods refuse to run on the thread of a running event loop (they
would block it): ``asyncio.InvalidStateError`` there, and from any other thread they work.
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...aio import AsyncRunLog
from ...runs.api import RunLog
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

    def __init__(self, log_or_path: RunLog | str | os.PathLike[str], *, serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[type | tuple[str, ...]] = (), on_concurrent: str = "fork", sync_writes: bool = False) -> None:
        super().__init__(log_or_path, serde=serde, allowed_types=allowed_types, on_concurrent=on_concurrent, sync_writes=sync_writes)
        self.alog = AsyncRunLog(self.log)

    async def __aenter__(self) -> AsyncObjstoreSaver:
        return self

    # -- async: one alog.call of ObjstoreSaver's sync method each (not the guarded ones below) ---
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.alog.call(ObjstoreSaver.get_tuple, self, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        it = await self.alog.call(lambda: iter(ObjstoreSaver.list(self, config, filter=filter, before=before, limit=limit)))
        done = object()
        while True:
            item = await self.alog.call(next, it, done)
            if item is done:
                return
            yield item  # type: ignore[misc]

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self.alog.call(ObjstoreSaver.put, self, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await self.alog.call(ObjstoreSaver.put_writes, self, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.alog.call(ObjstoreSaver.delete_thread, self, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.alog.call(ObjstoreSaver.delete_for_runs, self, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.alog.call(ObjstoreSaver.copy_thread, self, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.alog.call(ObjstoreSaver.prune, self, thread_ids, strategy=strategy)

    # -- sync: refused on the event loop's thread ---------------------------------------------

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
