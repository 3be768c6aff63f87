"""``AsyncObjstoreSaver``: the LangGraph checkpointer for async graphs (``graph.ainvoke``, ``astream``).

It is ``ObjstoreSaver``'s mapping (saver.py) behind async methods that never block the event loop:
each call (one ``put``, one ``put_writes``: one batch, one commit) runs whole in a worker thread,
so a batch is never split across awaits and concurrent tasks each get their own. The sync methods
stay usable (from another thread, or before the loop runs), as on AsyncSqliteSaver's ``get_tuple``.
``alist`` pulls one checkpoint at a time from the lazy listing in the worker thread.
"""

from __future__ import annotations

import os
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from ...runs.runlog import RunLog
from .saver import ObjstoreSaver


class AsyncObjstoreSaver(ObjstoreSaver):
    """``async with AsyncObjstoreSaver("path") as saver: graph = builder.compile(checkpointer=saver)``."""

    def __init__(self, log_or_path: RunLog | str | os.PathLike[str], *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(log_or_path, serde=serde)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], **kwargs: Any) -> AsyncObjstoreSaver:
        return cls(path, **kwargs)

    async def __aenter__(self) -> AsyncObjstoreSaver:
        return self
