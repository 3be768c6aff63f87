"""A thread recorded without ``saver.attempt_recorder()`` says so (issue 14, "LangGraph, by the
thread"): failed tries that a RetryPolicy retried are recorded only with the handler in the graph's
config, so ``objstore episode`` of a thread written without it prints a note on stderr naming the
line to add, and the README's switch from SqliteSaver shows that line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import lg_graphs as G
import pytest
from helpers import run_cli
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore.integrations.langgraph import ObjstoreSaver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE = 'config["callbacks"] = [saver.attempt_recorder()]'
NOTE = ("objstore: note: this run was written (in part) without recording failed attempts: a failed try that a retry "
        "fixed is not shown (LangGraph: " + LINE + "; docs/LANGGRAPH.md)\n")


def _chat(root, thread, recorder):
    saver = ObjstoreSaver(root)
    calls: Counter = Counter()
    graph = G.chat_graph(calls).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread}}
    if recorder:
        cfg["callbacks"] = [saver.attempt_recorder()]
    graph.invoke({"messages": [HumanMessage("rome", id="h1")]}, cfg)
    graph.invoke(Command(resume="yes"), cfg)
    assert calls["tools"] == 2  # it failed once, its retry succeeded


def test_episode_of_a_thread_recorded_without_the_handler_says_so(tmp_path):
    root = str(tmp_path / "s")
    _chat(root, "without", recorder=False)
    _chat(root, "with", recorder=True)
    _, out, err = run_cli("episode", "thread_id=without", store=root, exit_code=0)
    attempts, runs = out.split("LangGraph task runs", 1)  # the attempts table, then every task run (issue 19)
    assert err == NOTE and "succeeded" not in attempts and "failed" not in runs  # the failed try is not there: the note says why
    _, out, err = run_cli("episode", "thread_id=with", store=root, exit_code=0)
    assert err == "" and "failed" in out
    _, js, err = run_cli("episode", "thread_id=without", "--json", store=root, exit_code=0)
    assert err == "" and js.startswith("{")  # --json keeps stderr for errors: the note is text output's


def test_the_readme_switch_shows_the_handler():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    snippet = next(b for b in blocks if "ObjstoreSaver" in b and "StateGraph" in b)
    assert LINE in snippet and "graph.invoke(" in snippet.split(LINE)[1]


@pytest.mark.slow
def test_the_readme_switch_records_a_retried_failure(tmp_path):
    """The README's block run as written in a fresh directory: the handler is on, so its episode has no note."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    snippet = next(b for b in blocks if "ObjstoreSaver" in b and "StateGraph" in b)
    p = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "objstore"), "episode", "thread_id=chat-1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
