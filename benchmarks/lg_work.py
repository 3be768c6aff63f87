"""The LangGraph side of bench_langgraph.py: graphs, savers, and the child processes that measure them.

Run as a child: ``python benchmarks/lg_work.py OP '<json args>'`` prints one JSON line (the last line of stdout).
Every op imports LangGraph, both savers and objstore BEFORE it starts measuring, so "after imports" means what it
says. The driver (bench_langgraph.py) starts one fresh process per measurement.

Savers, as the issue-18 benchmark table wants them:

* ``objstore``: ``ObjstoreSaver(objstore.open_store(path))`` (default fsync policy: full; the driver removes
  OBJSTORE_FSYNC from the children's environment); ``AsyncObjstoreSaver`` for async graphs.
* ``sqlite``: ``SqliteSaver(sqlite3.connect(path, check_same_thread=False))`` as ``SqliteSaver.from_conn_string``
  opens it, then ``setup()`` (which sets ``journal_mode=WAL``, nothing else) and ``PRAGMA synchronous=FULL`` set
  explicitly on the connection (read back and printed); ``AsyncSqliteSaver`` on ``aiosqlite.connect`` the same way.
* ``build=True`` (stores that are built, not measured): objstore with fsync="off", SQLite with synchronous=OFF.

Graphs: every run uses ``durability="sync"`` (langgraph 1.x: each checkpoint is written before the next step).

* loop: ``a -> b -> a -> ...``, one task per super-step; each node bumps a counter and writes a fresh 1 KB text
  payload (seeded words, so it compresses like text); a conditional edge on b ends after ``steps`` super-steps;
  ``recursion_limit = 2 * steps``. A run of S steps writes S+1 checkpoints (the input one too) and S put_writes.
* chat: one node ``turn`` looping ``turns`` super-steps, each appending ONE new message (HumanMessage /
  AIMessage alternating, 300-900 B of seeded words) to ``messages`` (``add_messages``: the channel holds the whole
  list); the message of turn 1 carries a 50 KB base64 image (seeded random bytes, so incompressible like a JPEG).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import resource
import sqlite3
import sys
import time
from typing import Annotated, TypedDict

import aiosqlite
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import objstore
from objstore.integrations.langgraph import AsyncObjstoreSaver, ObjstoreSaver
from objstore.storage import codec
from objstore.storage.log.format import STATS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_commit import VOCAB  # noqa: E402  (one text vocabulary for every benchmark)

PAYLOAD = 1024
IMAGE = 50 * 1024  # base64 characters of the turn-1 image


def words(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(VOCAB)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


# -- graphs -------------------------------------------------------------------------------------------------------
class LoopState(TypedDict):
    n: int
    payload: str


def _step(state: LoopState, tag: str) -> dict:
    n = state["n"] + 1
    return {"n": n, "payload": (f"{tag}{n} " + words(random.Random(n), PAYLOAD))[:PAYLOAD]}


def loop_graph(steps: int, aio: bool = False):
    g = StateGraph(LoopState)
    if aio:
        async def a(s):  # noqa: ANN001, ANN202
            return _step(s, "a")

        async def b(s):  # noqa: ANN001, ANN202
            return _step(s, "b")
    else:
        def a(s):  # noqa: ANN001, ANN202
            return _step(s, "a")

        def b(s):  # noqa: ANN001, ANN202
            return _step(s, "b")
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_conditional_edges("b", lambda s: END if s["n"] >= steps else "a")
    return g


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


def chat_message(i: int):
    """Turn i's one new message (1-based); turn 1 carries the image."""
    rng = random.Random(1000 + i)
    text = words(rng, rng.randint(300, 900))
    if i == 1:
        img = base64.b64encode(random.Random(7).randbytes(IMAGE * 3 // 4)).decode()
        content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + img}}]
        return HumanMessage(content=content, id=f"m{i}")
    cls = HumanMessage if i % 2 == 1 else AIMessage
    return cls(content=text, id=f"m{i}")


def chat_graph(turns: int):
    g = StateGraph(ChatState)

    def turn(s):  # noqa: ANN001, ANN202
        return {"messages": [chat_message(len(s["messages"]) + 1)]}

    g.add_node("turn", turn)
    g.add_edge(START, "turn")
    g.add_conditional_edges("turn", lambda s: END if len(s["messages"]) >= turns else "turn")
    return g


# -- savers -------------------------------------------------------------------------------------------------------
def sqlite_conn(path: str, build: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)  # as SqliteSaver.from_conn_string opens it
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=" + ("OFF" if build else "FULL"))
    return conn


def open_sync(kind: str, d: str, build: bool = False):
    """(saver, facts) for kind objstore|sqlite in directory d."""
    if kind == "objstore":
        log = objstore.open_store(os.path.join(d, "store"), fsync="off" if build else None)
        return ObjstoreSaver(log), {"fsync": log.store.engine.policy.mode}
    conn = sqlite_conn(os.path.join(d, "checkpoints.sqlite"), build)
    saver = SqliteSaver(conn)
    saver.setup()
    facts = {"journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
             "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0]}
    return saver, facts


async def open_async(kind: str, d: str, build: bool = False):
    """(saver, facts, closer) for the async peers."""
    if kind == "objstore":
        log = objstore.open_store(os.path.join(d, "store"), fsync="off" if build else None)
        return AsyncObjstoreSaver(log), {"fsync": log.store.engine.policy.mode}, None
    conn = await aiosqlite.connect(os.path.join(d, "checkpoints.sqlite"))
    saver = AsyncSqliteSaver(conn)
    await saver.setup()
    await conn.execute("PRAGMA synchronous=" + ("OFF" if build else "FULL"))
    async with conn.execute("PRAGMA synchronous") as cur:
        sync = (await cur.fetchone())[0]
    async with conn.execute("PRAGMA journal_mode") as cur:
        jm = (await cur.fetchone())[0]
    return saver, {"journal_mode": jm, "synchronous": sync}, conn


def cfg(thread: str, steps: int) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": max(25, 2 * steps)}


def cpu() -> float:
    return time.process_time()  # CLOCK_PROCESS_CPUTIME_ID: user+sys of every thread of this process


# -- ops (each: args dict -> result dict) -----------------------------------------------------------------------
def op_loop(a: dict) -> dict:
    """Run the loop graph for a['steps'] super-steps on a fresh thread; wall and CPU of the invoke only."""
    steps, kind, d = a["steps"], a["saver"], a["dir"]
    build = a.get("build", False)
    thread = a.get("thread", "t1")
    if a.get("aio"):
        async def main():  # noqa: ANN202
            saver, facts, conn = await open_async(kind, d, build)
            app = loop_graph(steps, aio=True).compile(checkpointer=saver)
            w0, c0 = time.perf_counter(), cpu()
            out = await app.ainvoke({"n": 0, "payload": ""}, cfg(thread, steps), durability="sync")
            w, c = time.perf_counter() - w0, cpu() - c0
            if conn is not None:
                await conn.close()
            return out, w, c, facts
        out, w, c, facts = asyncio.run(main())
    else:
        saver, facts = open_sync(kind, d, build)
        app = loop_graph(steps).compile(checkpointer=saver)
        w0, c0 = time.perf_counter(), cpu()
        out = app.invoke({"n": 0, "payload": ""}, cfg(thread, steps), durability="sync")
        w, c = time.perf_counter() - w0, cpu() - c0
    assert out["n"] == steps, out["n"]
    return {"wall": w, "cpu": c, "steps": steps, **facts}


def op_build_thread(a: dict) -> dict:
    """A thread of a['steps']+1 checkpoints (the loop graph, non-durable build); its ids: latest and old."""
    r = op_loop({**a, "build": True})
    saver, _ = open_sync(a["saver"], a["dir"], build=True)
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": a.get("thread", "t1")}})]
    return {**r, "checkpoints": len(ids), "latest": ids[0], "old": ids[-1 - a.get("old_index", 10)], "old2": ids[-2]}


def op_build_threads(a: dict) -> dict:
    """a['threads'] threads of the loop graph, a['steps'] super-steps each (a['steps']+1 checkpoints), one
    graph compiled once, non-durable; the old id (index 1 from the oldest) of the first and the last thread."""
    kind, d, steps, n = a["saver"], a["dir"], a["steps"], a["threads"]
    saver, _ = open_sync(kind, d, build=True)
    app = loop_graph(steps).compile(checkpointer=saver)
    t0 = time.perf_counter()
    for i in range(a.get("start", 0), n):
        app.invoke({"n": 0, "payload": ""}, cfg(f"t{i}", steps), durability="sync")
        if i % 500 == 499:
            print(f"  .. built {i + 1} threads in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = {"seconds": time.perf_counter() - t0}
    for tag, i in (("first", 0), ("last", n - 1)):
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": f"t{i}"}})]
        out[tag] = {"thread": f"t{i}", "old": ids[-2], "latest": ids[0], "checkpoints": len(ids)}
    return out


def op_get(a: dict) -> dict:
    """Fresh process, after imports: open the saver, one get_tuple (latest, or by a['checkpoint_id'])."""
    w0, c0 = time.perf_counter(), cpu()
    saver, _ = open_sync(a["saver"], a["dir"])
    c1 = cpu()
    conf = {"thread_id": a.get("thread", "t1")}
    if a.get("checkpoint_id"):
        conf["checkpoint_id"] = a["checkpoint_id"]
    t = saver.get_tuple({"configurable": conf})
    w2, c2 = time.perf_counter(), cpu()
    assert t is not None
    if a.get("checkpoint_id"):
        assert t.config["configurable"]["checkpoint_id"] == a["checkpoint_id"]
    return {"cpu": c2 - c0, "wall": w2 - w0, "open_cpu": c1 - c0, "get_cpu": c2 - c1, "n": t.checkpoint["channel_values"]["n"]}


def op_list(a: dict) -> dict:
    """Fresh process, after imports: open the saver, list the thread (all, or limit)."""
    w0, c0 = time.perf_counter(), cpu()
    saver, _ = open_sync(a["saver"], a["dir"])
    got = list(saver.list({"configurable": {"thread_id": a.get("thread", "t1")}}, limit=a.get("limit")))
    w, c = time.perf_counter() - w0, cpu() - c0
    ids = [t.config["configurable"]["checkpoint_id"] for t in got]
    assert ids == sorted(ids, reverse=True), "not newest first"
    return {"wall": w, "cpu": c, "count": len(got)}


def op_chat(a: dict) -> dict:
    """The 200-turn chat fixture, durable; the distinct messages' serialized bytes; every checkpoint checked."""
    kind, d, turns = a["saver"], a["dir"], a["turns"]
    saver, facts = open_sync(kind, d)
    app = chat_graph(turns).compile(checkpointer=saver)
    conf = cfg("chat", turns)
    w0 = time.perf_counter()
    app.invoke({"messages": []}, conf, durability="sync")
    wall = time.perf_counter() - w0
    tuples = list(saver.list({"configurable": {"thread_id": "chat"}}))
    # every checkpoint reads back whole: the list at checkpoint k is messages 1..len, each equal to its fixture
    for t in tuples:
        msgs = t.checkpoint["channel_values"].get("messages", [])
        for j, m in enumerate(msgs):
            want = chat_message(j + 1)
            assert m.content == want.content and m.id == want.id and type(m) is type(want), (t.config, j)
    distinct = [chat_message(i) for i in range(1, turns + 1)]
    ser = saver.serde
    msg_bytes = sum(len(ser.dumps_typed(m)[1]) for m in distinct)
    text_bytes = sum(len(m.content) if isinstance(m.content, str) else len(m.content[0]["text"]) for m in distinct)
    image = len(distinct[0].content[1]["image_url"]["url"])
    out = {"wall": wall, "checkpoints": len(tuples), "distinct_message_bytes": msg_bytes, "text_bytes": text_bytes,
           "image_bytes": image, **facts}
    if kind == "objstore":  # what the records hold (context for the bytes: ids are 32 B each and incompressible)
        log = saver.log
        run = log.find_run(thread_id="chat", checkpoint_ns="")
        ids = cbytes = mbytes = 0
        for rec in log.records(run, all_branches=True):
            if rec.kind.startswith("x.langgraph."):
                ids += len(rec.body["parts"])
            if rec.kind == "x.langgraph.checkpoint":
                cbytes += len(rec.body["checkpoint"])
                mbytes += len(rec.body["metadata"])
        out.update({"part_ids": ids, "checkpoint_field_bytes": cbytes, "metadata_bytes": mbytes})
    return out


def _read_proc(path: str) -> tuple[str, int, int]:
    """(text, bytes read, read calls): os.read until EOF, so what this snapshot itself adds to rchar and syscr
    is known exactly and subtracted."""
    fd = os.open(path, os.O_RDONLY)
    chunks, calls = [], 0
    try:
        while True:
            b = os.read(fd, 1 << 20)
            calls += 1
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data.decode(), len(data), calls


def _snap(root: str) -> dict:
    io_text, n1, c1 = _read_proc("/proc/self/io")
    io = {k: int(v) for k, v in (ln.split(": ") for ln in io_text.splitlines())}
    smaps, n2, c2 = _read_proc("/proc/self/smaps")
    rss = size = 0
    cur = False
    for ln in smaps.splitlines():
        head = ln.split()
        if head and not head[0].endswith(":"):  # a mapping's header line: range perms offset dev inode [path]
            cur = len(head) >= 6 and head[5].startswith(root)
        elif cur and head and head[0] == "Rss:":
            rss += int(head[1]) * 1024
        elif cur and head and head[0] == "Size:":
            size += int(head[1]) * 1024
    return {"rchar": io["rchar"], "read_bytes": io["read_bytes"], "syscr": io["syscr"], "mmap_rss": rss, "mmap_size": size,
            "objects_decoded": codec.STATS["objects_decoded"], "entries_decoded": STATS["entries_decoded"],
            "blocks_read": STATS["blocks_read"], "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
            "_self_bytes": n1 + n2, "_self_calls": c1 + c2}


def op_find(a: dict) -> dict:
    """Fresh process: open the store, find_run(thread_id, checkpoint_ns), find_record(run, checkpoint_id); the
    process's /proc/self/io counters (this op's own /proc reads subtracted exactly), its mappings of store files
    (smaps: resident and mapped bytes) and the decode counters, at each point."""
    root = os.path.realpath(os.path.join(a["dir"], "store"))
    _snap(root)
    s0 = _snap(root)
    log = objstore.open_store(root, create=False)
    s1 = _snap(root)
    run = log.find_run(thread_id=a["thread"], checkpoint_ns="")
    s2 = _snap(root)
    rec = log.find_record(run, checkpoint_id=a["checkpoint_id"]) if run is not None else None
    s3 = _snap(root)
    assert run is not None and rec is not None and rec.body["checkpoint_id"] == a["checkpoint_id"]

    def delta(x: dict, y: dict) -> dict:
        out = {k: y[k] - x[k] for k in ("read_bytes", "objects_decoded", "entries_decoded", "blocks_read", "minflt")}
        out["rchar"] = y["rchar"] - x["rchar"] - x["_self_bytes"]
        out["syscr"] = y["syscr"] - x["syscr"] - x["_self_calls"]
        return out

    steps = {"open": delta(s0, s1), "find_run": delta(s1, s2), "find_record": delta(s2, s3)}
    total = {k: sum(st[k] for st in steps.values()) for k in steps["open"]}
    total["mmap_rss"] = s3["mmap_rss"]
    total["mmap_size"] = s3["mmap_size"]
    return {**steps, "total": total,
            "incremental_mmap": {"open": s1["mmap_rss"] - s0["mmap_rss"], "find_run": s2["mmap_rss"] - s1["mmap_rss"],
                                 "find_record": s3["mmap_rss"] - s2["mmap_rss"]}}


def op_repeat(a: dict) -> dict:
    """Run op a['op'] a['times'] times in this process (for a profile of a few-ms operation)."""
    for _ in range(a["times"]):
        OPS[a["op"]](a["args"])
    return {"times": a["times"]}


OPS = {"repeat": op_repeat, "loop": op_loop, "build_thread": op_build_thread, "build_threads": op_build_threads, "get": op_get,
       "list": op_list, "chat": op_chat, "find": op_find}

if __name__ == "__main__":
    res = OPS[sys.argv[1]](json.loads(sys.argv[2]))
    print(json.dumps(res), flush=True)
