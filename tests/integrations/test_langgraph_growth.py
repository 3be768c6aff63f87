"""Linear growth (the issue's acceptance): a 200-turn chat thread — one new message per turn in a
``messages`` channel that holds the whole list, a 50 KB base64 image in turn 1 — is stored in bytes
that grow with the turns, not their square: each message and the image once. After gc the store is
at most 2x the distinct messages and image plus 1 KB per checkpoint, every checkpoint reads back
equal to what was put, and SqliteSaver's bytes on the same fixture are printed beside."""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from objstore.integrations.langgraph import ObjstoreSaver
from objstore.integrations.langgraph import parts as P
from objstore.lifecycle import gc as G

TURNS = 200


def _message(i: int):
    text = " ".join(hashlib.sha256(f"turn {i} word {j}".encode()).hexdigest()[:8] for j in range(40))  # ~360 bytes, all distinct
    if i == 0:
        image = base64.b64encode(hashlib.shake_256(b"image").digest(37_500)).decode()  # 50 000 base64 characters
        return HumanMessage(content=[{"type": "text", "text": text},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}], id="m0")
    return (HumanMessage if i % 2 == 0 else AIMessage)(content=text, id=f"m{i}")


def _fixture(saver):
    """Put the 200 checkpoints; returns [(config, channel values put)] in order."""
    out = []
    parent = None
    messages: list = []
    for i in range(TURNS):
        messages = messages + [_message(i)]
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": messages, "turn": i}
        cp["channel_versions"] = {"messages": i + 1, "turn": i + 1}
        conf = {"thread_id": "chat", "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
        cfg = saver.put({"configurable": conf}, cp, {"source": "loop", "step": i}, {"messages": i + 1, "turn": i + 1})
        parent = cfg["configurable"]["checkpoint_id"]
        out.append((cfg, {"messages": messages, "turn": i}))
    return out


def _bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(root) for f in fs)


@pytest.mark.slow
def test_a_200_turn_chat_grows_linearly(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    puts = _fixture(saver)
    G.gc(saver.log.store)
    stored = _bytes(root)
    distinct = sum(len(P.encode(saver.serde, _message(i))) for i in range(TURNS))
    budget = 2 * distinct + 1024 * TURNS

    sq = str(tmp_path / "lg.sqlite")
    conn = sqlite3.connect(sq, check_same_thread=False)
    conn.execute("PRAGMA synchronous=FULL")
    _fixture(SqliteSaver(conn))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    sqlite_bytes = _bytes(str(tmp_path)) - _bytes(root)
    print(f"\n200-turn chat: objstore {stored} bytes after gc, SqliteSaver {sqlite_bytes} bytes "
          f"({stored / sqlite_bytes:.3f}x); distinct messages + image {distinct} bytes; budget {budget}")
    assert stored <= budget
    assert stored <= 0.1 * sqlite_bytes  # the benchmark line for this fixture

    fresh = ObjstoreSaver(root)
    for cfg, values in puts:
        t = fresh.get_tuple(cfg)
        assert t is not None and t.checkpoint["channel_values"] == values
