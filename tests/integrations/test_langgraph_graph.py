"""A real LangGraph StateGraph on ObjstoreSaver (tests/integrations/lg_graphs.py: a stub LLM, deterministic; a
tool that fails once and is retried by its RetryPolicy; an interrupt), then time travel, the CLI on
the thread's run, and prune keeping a resume safe."""

from __future__ import annotations

import json
from collections import Counter

import lg_graphs as G
import pytest
from helpers import raw_objects, run_cli
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore import open_store, verify
from objstore.integrations.langgraph import CHECKPOINT, ObjstoreSaver
from objstore.storage import codec


@pytest.mark.slow
def test_a_state_graph_runs_forks_on_time_travel_and_the_cli_reads_it(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    calls: Counter = Counter()
    graph = G.chat_graph(calls).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat-1"}, "callbacks": [saver.attempt_recorder()]}

    out = graph.invoke({"messages": [HumanMessage("paris", id="h1")]}, cfg)
    assert "__interrupt__" in out and graph.get_state(cfg).next == ("review",)
    out = graph.invoke(Command(resume="yes"), cfg)
    assert [m.content for m in out["messages"]] == ["paris", "", "sunny in paris", "The weather: sunny in paris"]
    assert calls == Counter(llm=2, review=2, tools=2)  # the tool failed once, its retry succeeded

    log = saver.log
    run = log.find_run(thread_id="chat-1", checkpoint_ns="")
    assert run is not None
    history = list(graph.get_state_history(cfg))
    assert [(s.next, s.metadata["step"]) for s in history] == [
        ((), 4), (("llm",), 3), (("tools",), 2), (("review",), 1), (("llm",), 0), (("__start__",), -1)]
    assert sorted(log.view(run).heads) == [0]  # one branch so far: a plain run appends, never forks

    # The failed try is an attempt record (state failed), its retry the next attempt (succeeded).
    attempts = [r.body for r in log.records(run) if r.kind == "attempt"]
    assert [(a["step"], a["attempt"], a["state"], a["context"]["node"]) for a in attempts] == [
        (3, 0, "failed", "tools"), (3, 1, "succeeded", "tools")]
    assert attempts[0]["error"] == "ConnectionError: weather backend unreachable"

    before = {oid: (t, data) for oid, t, data in raw_objects(log.store)}
    head0 = log.view(run).heads[0]

    # Time travel: run again from the checkpoint before the first llm step.
    old = next(s for s in history if s.metadata["step"] == 0)
    old_rec = next(r for r in log.find_records(run, checkpoint_id=old.config["configurable"]["checkpoint_id"]) if r.kind == CHECKPOINT)
    out = graph.invoke(None, {**old.config, "callbacks": cfg["callbacks"]})
    assert graph.get_state(cfg).next == ("review",)

    view = log.view(run)
    assert sorted(view.heads) == [0, 1] and view.live == 1 and view.heads[0] == head0
    fork = log.fork_object(view, 1)
    assert fork is not None
    otype, raw = log.store.get(fork["id"])
    assert otype == codec.FORK and raw["parent_record"] == old_rec.id and raw["parent_branch"] == 0
    first = log.records(run, 1)[0]
    assert first.kind == CHECKPOINT and first.parent == fork["id"] and first.body["parent_id"] == old.config["configurable"]["checkpoint_id"]

    # The abandoned branch: every object it had is there byte for byte.
    after = {oid: (t, data) for oid, t, data in raw_objects(log.store)}
    assert all(after[oid] == v for oid, v in before.items())

    # The CLI reaches the thread by the name its user knows (a label spec), and by run id.
    _, text, _ = run_cli("runs", "--label", "thread_id=chat-1", store=root, exit_code=0)
    assert run in text
    _, text, _ = run_cli("log", "thread_id=chat-1", "--graph", store=root, exit_code=0)
    assert "fork" in text.lower() and CHECKPOINT in text
    _, text, _ = run_cli("branches", "thread_id=chat-1", store=root, exit_code=0)
    assert "1" in text and "0" in text
    _, text, _ = run_cli("diff", "thread_id=chat-1", "0", "1", "--json", store=root, exit_code=0)
    assert old_rec.id.hex() in text  # the fork point
    _, text, _ = run_cli("episode", "thread_id=chat-1", "--all-branches", "--json", store=root, exit_code=0)
    ep = json.loads(text)
    b0 = next(b for b in ep["branches"] if b["branch"] == 0)
    assert [(a["state"], a["context"].get("error")) for a in b0["attempts"]] == [
        ("failed", "ConnectionError: weather backend unreachable"), ("succeeded", None)]
    _, text, _ = run_cli("log", run, "-n", "2", store=root, exit_code=0)
    assert CHECKPOINT in text and "branch 1 (live)" in text
    run_cli("verify", store=root, exit_code=0)
    assert verify(open_store(root)) == []


def test_prune_keep_latest_then_resume_runs_no_completed_tool_again(tmp_path):
    saver = ObjstoreSaver(str(tmp_path / "s"))
    calls: Counter = Counter()
    graph = G.fan_graph(calls).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "fan"}}
    graph.invoke({"results": []}, cfg)
    assert graph.get_state(cfg).next == ("tool",) and calls == Counter(plan=1, a=1, b=1, c=1)
    assert len(list(saver.list(cfg))) == 3

    saver.prune(["fan"], strategy="keep_latest")
    assert len(list(saver.list(cfg))) == 1
    pending = saver.get_tuple(cfg).pending_writes
    assert sorted(v for _t, ch, v in pending if ch == "results") == [["a:done"], ["b:done"]]

    # A fresh saver on the same store (nothing in memory): the resume re-runs only tool c.
    graph2 = G.fan_graph(calls).compile(checkpointer=ObjstoreSaver(str(tmp_path / "s")))
    out = graph2.invoke(Command(resume="ok"), cfg)
    assert sorted(out["results"]) == ["a:done", "b:done", "c:ok"]
    assert calls == Counter(plan=1, a=1, b=1, c=2)  # c ran again (it was interrupted), a and b did not
    assert verify(saver.log) == []


def test_a_task_whose_retries_all_fail_is_a_failed_attempt_without_the_callback(tmp_path):
    """No attempt_recorder: the tool fails all three tries of its RetryPolicy, so LangGraph writes an
    ERROR write and the invoke raises; the saver records that as a failed attempt, and the resumed
    run's success as the next attempt."""
    saver = ObjstoreSaver(str(tmp_path / "s"))
    calls: Counter = Counter()
    graph = G.chat_graph(calls, fail_first=3).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("oslo", id="h1")]}, cfg)
    try:
        graph.invoke(Command(resume="yes"), cfg)
        raised = None
    except ConnectionError as e:
        raised = e
    assert raised is not None and calls["tools"] == 3
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    attempts = [r.body for r in saver.log.records(run) if r.kind == "attempt"]
    # (LangGraph's put_writes names the task, not its node: the node is known only from the callback)
    assert [(a["step"], a["attempt"], a["state"], a["context"]["node"]) for a in attempts] == [(3, 0, "failed", "")]
    out = graph.invoke(None, cfg)
    assert out["messages"][-1].content == "The weather: sunny in oslo" and calls["tools"] == 4
    attempts = [r.body for r in saver.log.records(run) if r.kind == "attempt"]
    assert [(a["attempt"], a["state"], a["context"].get("error")) for a in attempts] == [
        (0, "failed", "ConnectionError: weather backend unreachable"), (1, "succeeded", None)]
