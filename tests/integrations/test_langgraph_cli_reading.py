"""A LangGraph thread read from the command line as its users think (issue 19). ``log``: each
checkpoint line says its step, its source, the nodes whose writes made it and its checkpoint id;
each writes line names its task's node and the channels it wrote (read from the records' own
bodies, no LangGraph import on the runs side: ``objstore.runs.xsummary``). ``show`` of a checkpoint:
its metadata decoded and its channel values summarised through the saver's serializer. The graph is ``lg_graphs.chat_graph``: a
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


def _thread(root: str, saver: ObjstoreSaver | None = None) -> list:
    saver = saver or ObjstoreSaver(root)
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


def test_show_of_a_checkpoint_decodes_metadata_and_summarises_messages(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    latest = _thread(root, saver)[0]
    cid = latest.config["configurable"]["checkpoint_id"]
    rec = saver.log.find_record(saver._run("T", ""), checkpoint_id=cid)
    _, out, _ = run_cli("show", rec.id.hex(), store=root, exit_code=0)
    tail = out.split(f"LangGraph checkpoint {cid}", 1)[1]
    assert '"source": "loop"' in tail and '"step": 4' in tail and "written by: llm" in tail
    assert "messages: list of 4" in tail
    assert "[0] human: 'rome'" in tail and "[1] ai: '' calls weather" in tail
    assert "[2] tool: 'sunny in rome'" in tail and "[3] ai: 'The weather: sunny in rome'" in tail


def test_show_of_a_deleted_checkpoint_decodes_nothing(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    old = _thread(root, saver)[1].config["configurable"]["checkpoint_id"]
    rec = saver.log.find_record(saver._run("T", ""), checkpoint_id=old)
    saver.prune(["T"], strategy="keep_latest")
    _, out, err = run_cli("show", rec.id.hex(), store=root, exit_code=12)  # the store's read path refuses it
    assert out == "" and "rome" not in err and "was deleted" in err


def _episode_rows(out: str) -> list[list[str]]:
    table = out.split("LangGraph task runs (every try)", 1)[1].splitlines()[2:]
    return [line.split(None, 4) for line in table if line.strip()]


def test_episode_lists_every_task_run_and_the_failed_try_with_its_retry(tmp_path):
    root = str(tmp_path / "s")
    _thread(root)
    _, out, err = run_cli("episode", "thread_id=T", "--no-pager", store=root, exit_code=0)
    rows = [r[:4] for r in _episode_rows(out)]
    assert rows == [["0", "__start__", "0", "succeeded"], ["1", "llm", "0", "succeeded"], ["2", "review", "0", "interrupted"],
                    ["2", "review", "1", "succeeded"], ["3", "tools", "0", "failed"], ["3", "tools", "1", "succeeded"],
                    ["4", "llm", "0", "succeeded"]], out
    assert "ConnectionError: weather backend unreachable" in out and "not recorded" not in out and err == ""


def test_episode_says_in_task_retries_not_recorded_without_the_recorder(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    graph = G.chat_graph(Counter()).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "T"}}
    graph.invoke({"messages": [HumanMessage("rome", id="h1")]}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
    _, out, _ = run_cli("episode", "thread_id=T", "--no-pager", store=root, exit_code=0)
    rows = _episode_rows(out)
    assert [r[1] for r in rows] == ["__start__", "llm", "review", "review", "tools", "llm"]  # the failed try is not there
    assert all(r[-1].endswith("in-task retries not recorded") for r in rows), out


class _Rec:
    def __init__(self, kind: str, body: dict) -> None:
        self.kind, self.body = kind, body


def test_a_checkpoint_written_before_the_attempts_field_reads_as_unknown():
    import msgspec

    md = msgspec.msgpack.encode({"step": 0, "source": "loop"})
    cp = {"checkpoint_id": "c0", "parent_id": "", "metadata_type": "msgpack", "metadata": md}
    rows = xsummary.task_runs([_Rec("x.langgraph.checkpoint", cp),
                               _Rec("x.langgraph.writes", {"checkpoint_id": "c0", "task_id": "t1", "task_path": "~__pregel_pull, llm",
                                                           "channels": ["messages"]})])
    assert [(r["step"], r["node"], r["state"], r["retries"]) for r in rows] == [(1, "llm", "succeeded", "unknown")]


def test_diff_of_a_time_travel_fork_names_the_first_differing_message(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    graph = G.chat_graph(Counter()).compile(checkpointer=saver)
    tuples = _thread(root, saver)
    step1 = next(t for t in tuples if t.metadata["step"] == 1)
    graph.update_state(step1.config, {"messages": [HumanMessage("paris", id="h2")]})  # update_state on the past: a fork
    run = saver._run("T", "")
    _, out, _ = run_cli("diff", run, "0", "1", store=root, exit_code=0)
    assert "messages: 4 vs 3 items, first difference at [2]: tool: 'sunny in rome'  |  human: 'paris'" in out, out


def test_log_of_a_thread_names_its_namespaces(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    graph = G.nested_graph(Counter()).compile(checkpointer=saver)
    graph.invoke({"notes": []}, {"configurable": {"thread_id": "T"}})
    _, out, _ = run_cli("log", "thread_id=T", "--no-pager", store=root, exit_code=0)
    head = out.splitlines()[0]
    m = re.match(r"LangGraph thread 'T' namespace ''; other namespaces: '(child:[0-9a-f-]+)' "
                 r"\(objstore log thread_id=T,checkpoint_ns=child:[0-9a-f-]+\)$", head)
    assert m, head
    _, sub, _ = run_cli("log", f"thread_id=T,checkpoint_ns={m.group(1)}", "--graph", "--no-pager", store=root, exit_code=0)
    assert sub.splitlines()[0] == f"LangGraph thread 'T' namespace '{m.group(1)}'; other namespaces: '' (objstore log thread_id=T,checkpoint_ns=)"
    assert re.search(r"x\.langgraph\.checkpoint step 1 \(loop\) by inner checkpoint", sub), sub


def test_diff_of_two_checkpoints_and_of_two_threads(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    tuples = _thread(root, saver)
    new, old = (t.config["configurable"]["checkpoint_id"] for t in (tuples[0], tuples[2]))
    run = saver._run("T", "")
    _, out, _ = run_cli("diff", run, old, new, store=root, exit_code=0)
    assert out.splitlines()[0] == f"checkpoint {old} (run {run}) vs checkpoint {new} (run {run}):"
    assert "messages: 2 vs 4 items, first difference at [2]: (none)  |  tool: 'sunny in rome'" in out, out
    graph = G.chat_graph(Counter()).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "U"}, "callbacks": [saver.attempt_recorder()]}
    graph.invoke({"messages": [HumanMessage("oslo", id="h1")]}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
    _, out, _ = run_cli("diff", "thread_id=T", "0", "0", "--run-b", "thread_id=U", store=root, exit_code=0)
    assert "messages: 4 vs 4 items, first difference at [0]: human: 'rome'  |  human: 'oslo'" in out, out
    _, js, _ = run_cli("diff", "thread_id=T", "0", "0", "--run-b", "thread_id=U", "--json", store=root, exit_code=0)
    assert '"index":0' in js.replace(" ", "") and '"channel":"messages"' in js.replace(" ", "")
    _, _, err = run_cli("diff", run, "00000000-0000-0000-0000-00000000000a", new, store=root, exit_code=5)
    assert err.count("\n") == 1 and "no LangGraph checkpoint '00000000-0000-0000-0000-00000000000a'" in err


def test_show_of_a_redacted_message_withholds_its_body(tmp_path):
    from objstore.lifecycle.delete import redact

    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    cid = _thread(root, saver)[0].config["configurable"]["checkpoint_id"]
    rec = next(r for r in saver.log.find_records(saver._run("T", ""), checkpoint_id=cid) if r.kind == "x.langgraph.checkpoint")
    at = 0
    for name, n in rec.body["layout"]:
        if name == "messages":
            break
        at += 1 if n == -1 else n
    first = bytes(rec.body["parts"][at])  # the human message 'rome'
    redact(saver.log, first, reason="the user asked")
    _, out, _ = run_cli("show", rec.id.hex(), store=root, exit_code=0)
    assert f"[0] (erased) {first.hex()[:12]}" in out and "human: 'rome'" not in out, out
    assert "[1] ai: '' calls weather" in out
