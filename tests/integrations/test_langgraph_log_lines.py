"""``objstore log`` of a LangGraph thread reads as its users think (issue 19): each checkpoint line
says its step, its source, the nodes whose writes made it and its checkpoint id; each writes line
names its task's node and the channels it wrote. Read from the records' own bodies (no LangGraph
import on the CLI's side; ``objstore.runs.xsummary``). The graph is ``lg_graphs.chat_graph``: a
deterministic stub LLM node, an interrupt and resume, a tool that fails once under RetryPolicy
with ``saver.attempt_recorder()`` attached."""

from __future__ import annotations

import re
from collections import Counter

import lg_graphs as G
from helpers import run_cli
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore.integrations.langgraph import ObjstoreSaver
from objstore.runs import xsummary


def _thread(root: str) -> list:
    saver = ObjstoreSaver(root)
    graph = G.chat_graph(Counter()).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "T"}, "callbacks": [saver.attempt_recorder()]}
    graph.invoke({"messages": [HumanMessage("rome", id="h1")]}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
    return list(saver.list({"configurable": {"thread_id": "T"}}))  # newest first


def test_log_lines_of_checkpoints_say_step_source_nodes_and_id(tmp_path):
    root = str(tmp_path / "s")
    tuples = _thread(root)
    _, out, _ = run_cli("log", "thread_id=T", "--no-pager", store=root, exit_code=0)
    want = {-1: "input", 0: "__start__", 1: "llm", 2: "review", 3: "tools", 4: "llm"}
    for t in tuples:
        step, cid = t.metadata["step"], t.config["configurable"]["checkpoint_id"]
        line = next(x for x in out.splitlines() if f"checkpoint {cid}" in x and "x.langgraph.checkpoint" in x)
        assert f"step {step} " in line and f"({t.metadata['source']})" in line, line
        assert re.search(rf"\bby {re.escape(want[step])}\b", line) or (step == -1 and "by " not in line), line
    writes = [x for x in out.splitlines() if "x.langgraph.writes" in x]
    assert any("tools wrote messages" in x for x in writes) and any("input wrote __resume__" in x for x in writes), writes
    _, graph_out, _ = run_cli("log", "thread_id=T", "--graph", "--no-pager", store=root, exit_code=0)
    assert f"step 4 (loop) by llm checkpoint {tuples[0].config['configurable']['checkpoint_id']}" in graph_out


def test_a_body_that_is_not_plain_msgpack_is_left_out_not_constructed():
    # an ext-typed value (what the serde writes for a class) is never built by the summarizer
    import msgspec

    md = msgspec.msgpack.encode({"step": 2, "source": "loop", "x": msgspec.msgpack.Ext(5, b"\x93\xa2os\xa6system\xa2ls")})
    body = {"checkpoint_id": "c1", "checkpoint_type": "pickle", "checkpoint": b"\x80", "metadata_type": "msgpack", "metadata": md}
    assert xsummary.summarize("x.langgraph.checkpoint", body) == "step 2 (loop) checkpoint c1"
    assert xsummary.summarize("x.other", {"a": 1}) is None
