"""Issue 19's acceptance, the reading part: a realistic graph recorded as the README says, read from
the command line. The graph is ``lg_graphs.agent_graph``: a deterministic stub LLM node (no model,
no network), a tool that fails once under RetryPolicy with ``saver.attempt_recorder()`` attached,
an interrupt and its resume, a subgraph, then ``update_state`` on the past (a time-travel fork).
``log thread_id=T`` shows the thread and its namespaces, each checkpoint line its step and nodes;
``episode`` every task run and the failed try with its retry; ``diff`` the first differing message."""

from __future__ import annotations

import re
from collections import Counter

import lg_graphs as G
from helpers import run_cli
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore.integrations.langgraph import ObjstoreSaver


def test_a_realistic_thread_reads_as_its_users_think(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)  # the README's switch: the saver, and the recorder in the config
    graph = G.agent_graph(Counter()).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "T"}}
    config["callbacks"] = [saver.attempt_recorder()]
    graph.invoke({"messages": [HumanMessage("rome", id="h1")]}, config)
    graph.invoke(Command(resume="yes"), config)
    step1 = next(t for t in saver.list(config) if t.metadata["step"] == 1 and not t.config["configurable"]["checkpoint_ns"])
    graph.update_state(step1.config, {"messages": [HumanMessage("paris", id="h2")]})

    _, out, _ = run_cli("log", "thread_id=T", "--all-branches", "--no-pager", store=root, exit_code=0)
    lines = out.splitlines()
    assert re.match(r"LangGraph thread 'T' namespace ''; other namespaces: 'summarize:[0-9a-f-]+' ", lines[0]), lines[0]
    steps = [re.search(r"x\.langgraph\.checkpoint \S+ .*?step (-?\d+) \((\w+)\)(?: by (\S+))? checkpoint", x) for x in lines]
    got = sorted((int(m[1]), m[2], m[3] or "") for m in steps if m)
    assert got == [(-1, "input", ""), (0, "loop", "__start__"), (1, "loop", "llm"), (2, "loop", "review"), (2, "update", "llm"),
                   (3, "loop", "tools"), (4, "loop", "llm"), (5, "loop", "summarize")], got

    _, ep, err = run_cli("episode", "thread_id=T", "--all-branches", "--no-pager", store=root, exit_code=0)
    table = [x.split(None, 4) for x in ep.split("LangGraph task runs (every try)", 1)[1].splitlines()[2:] if x.strip()]
    tools = [r[:4] for r in table if r[1] == "tools"]
    assert tools == [["3", "tools", "0", "failed"], ["3", "tools", "1", "succeeded"]], table
    assert [r[1] for r in table if r[3] != "failed"] == ["__start__", "llm", "review", "review", "tools", "llm", "summarize"], table
    assert "ConnectionError: weather backend unreachable" in ep and "not recorded" not in ep and err == ""

    run = saver._run("T", "")
    _, d, _ = run_cli("diff", run, "0", "1", store=root, exit_code=0)
    assert "messages: 5 vs 3 items, first difference at [2]: tool: 'sunny in rome'  |  human: 'paris'" in d, d
