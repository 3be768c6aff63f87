"""Linear growth (the issue's acceptance): a 200-turn chat thread — one new message per turn in a
``messages`` channel that holds the whole list, a 50 KB base64 image in turn 1 — is stored in bytes
that grow with the turns, not their square: each message and the image once, and each checkpoint
names its messages through a tree shared with its parent (partree.py), so **as written, before any
gc**, the bytes a turn adds over turns 150–200 are at most 1.25x those over turns 10–50 and the
store is at most 0.1x SqliteSaver's on the same fixture. After gc the store is at most 2x the
distinct messages and image plus 1 KB per checkpoint, and every checkpoint reads back equal to what
was put. Bytes are the store directory's file sizes, read after each put."""

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


def _fixture(saver, after=None):
    """Put the 200 checkpoints (``after()`` called after each); returns [(config, channel values put)] in order."""
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
        if after is not None:
            after()
    return out


def _bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(root) for f in fs)


@pytest.mark.slow
def test_a_200_turn_chat_grows_linearly_as_written_and_after_gc(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    written: list[int] = []  # the store's bytes after each turn (index i: after turn i)
    puts = _fixture(saver, lambda: written.append(_bytes(root)))
    early, late = (written[50] - written[10]) / 40, (written[199] - written[149]) / 50
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
    print(f"\n200-turn chat: as written {written[-1]} bytes ({written[-1] / sqlite_bytes:.3f}x SqliteSaver's {sqlite_bytes}), "
          f"{early:.0f} bytes per turn over turns 10-50, {late:.0f} over 150-200 ({late / early:.3f}x); after gc {stored} bytes "
          f"({stored / sqlite_bytes:.3f}x); distinct messages + image {distinct} bytes; budget {budget}")
    assert late <= 1.25 * early  # linear as written: no id list that grows with the thread
    assert written[-1] <= 0.1 * sqlite_bytes
    assert stored <= budget
    assert stored <= 0.1 * sqlite_bytes

    fresh = ObjstoreSaver(root)
    for cfg, values in puts:
        t = fresh.get_tuple(cfg)
        assert t is not None and t.checkpoint["channel_values"] == values
