"""LangGraph checkpointers on objstore: ``ObjstoreSaver`` (sync, with async methods run off the event
loop) and ``AsyncObjstoreSaver`` (for async graphs). Needs the ``objstore[langgraph]`` extra; nothing
outside this package imports it (tests/test_layers.py).

    from objstore.integrations.langgraph import ObjstoreSaver
    graph = builder.compile(checkpointer=ObjstoreSaver("run-store"))   # was: SqliteSaver(conn)

docs/LANGGRAPH.md says how checkpoints, writes, time travel and deletion map onto runs and records.
"""

from .aio_saver import AsyncObjstoreSaver
from .saver import CHECKPOINT, WRITES, ObjstoreSaver, strict_serde

__all__ = ["ObjstoreSaver", "AsyncObjstoreSaver", "CHECKPOINT", "WRITES", "strict_serde"]
