"""The async half of ``ObjstoreSaver``'s checkpointer API: each method runs its sync twin in a worker thread
(``asyncio.to_thread``), so an event loop is never blocked (``AsyncObjstoreSaver`` overrides them with its own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple


class ThreadedAsync:
    """``a<name>`` = ``<name>`` in a worker thread; mixed into ``ObjstoreSaver`` ahead of ``BaseCheckpointSaver``."""

    # the sync methods, which ObjstoreSaver has
    get_tuple: Any
    list: Any
    put: Any
    put_writes: Any
    delete_thread: Any
    delete_for_runs: Any
    copy_thread: Any
    prune: Any

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        it = await asyncio.to_thread(lambda: iter(self.list(config, filter=filter, before=before, limit=limit)))
        done = object()
        while True:
            item = await asyncio.to_thread(next, it, done)
            if item is done:
                return
            yield item  # type: ignore[misc]

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
