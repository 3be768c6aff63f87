"""A label spec that matches several runs differing only in one label, empty in one of them, names
that one (issue 14, "LangGraph, by the thread"): ``objstore log thread_id=T`` of a graph with a
subgraph names the thread's root namespace (``checkpoint_ns=``), not "ambiguous run".

The rule is run resolution's, not LangGraph's: any runs whose labels agree on every label but one the
spec does not give, that label empty in exactly one of them. ``runs --label thread_id=T`` lists every
namespace; plain ``runs`` lists a thread once (its root) and ``runs --all-namespaces`` every run. The
graph runs in this process; every command is a real ``objstore`` process."""

from __future__ import annotations

import json
from collections import Counter

import lg_graphs as G
import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.errors import AmbiguousRun
from objstore.integrations.langgraph import ObjstoreSaver
from objstore.runs import labelspec


@pytest.fixture
def thread(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    G.nested_graph(Counter()).compile(checkpointer=saver).invoke({"notes": []}, {"configurable": {"thread_id": "T"}})
    G.nested_graph(Counter()).compile(checkpointer=saver).invoke({"notes": []}, {"configurable": {"thread_id": "U"}})
    log = saver.log
    runs = log.find_runs(thread_id="T")
    top = log.find_run(thread_id="T", checkpoint_ns="")
    subs = [r for r in runs if r != top]
    assert top is not None and len(subs) == 1 and log.run_labels(subs[0])["checkpoint_ns"].startswith("child:")
    return {"root": root, "top": top, "sub": subs[0], "u_top": log.find_run(thread_id="U", checkpoint_ns="")}


@pytest.mark.slow
def test_a_thread_with_a_subgraph_is_named_by_its_thread_id(thread):
    root, top = thread["root"], thread["top"]
    for args in (["log", "{}"], ["log", "{}", "--json"], ["episode", "{}", "--json"], ["branches", "{}", "--json"], ["export", "{}"]):
        by_id = run_cli(*[a.format(top) for a in args], store=root, exit_code=0)[1]
        by_thread = run_cli(*[a.format("thread_id=T") for a in args], store=root, exit_code=0)[1]
        assert by_thread == by_id and by_id.strip(), args
    # the subgraph's namespace is still named by both labels
    sub_ns = json.loads(run_cli("runs", "--label", "thread_id=T", "--json", store=root, exit_code=0)[1])
    assert sorted(r["run"] for r in sub_ns) == sorted([top, thread["sub"]])


def test_runs_lists_a_thread_once_and_all_namespaces_lists_every_run(thread):
    root = thread["root"]
    _, plain, err = run_cli("runs", store=root, exit_code=0)
    assert {ln.split()[0] for ln in plain.splitlines()} == {thread["top"], thread["u_top"]}
    assert "2 runs of other namespaces not listed (--all-namespaces lists them)" in err
    _, everything, _ = run_cli("runs", "--all-namespaces", store=root, exit_code=0)
    assert len(everything.splitlines()) == 4 and thread["sub"] in everything
    js = json.loads(run_cli("runs", "--json", store=root, exit_code=0)[1])
    assert sorted(r["run"] for r in js) == sorted([thread["top"], thread["u_top"]])
    js = json.loads(run_cli("runs", "--json", "--all-namespaces", store=root, exit_code=0)[1])
    assert len(js) == 4
    _, labelled, _ = run_cli("runs", "--label", "thread_id=T", store=root, exit_code=0)
    assert {ln.split()[0] for ln in labelled.splitlines()} == {thread["top"], thread["sub"]}


def test_runs_differing_in_more_than_one_label_stay_ambiguous(thread, tmp_path):
    # both threads' root namespaces carry checkpoint_ns= : they differ in thread_id, which the spec does not give
    _, _, err = run_cli("log", "checkpoint_ns=", store=thread["root"], exit_code=5)
    assert err.startswith("objstore: error: ambiguous run 'checkpoint_ns=': it matches 2 runs: ")


def test_the_rule_is_about_labels_not_langgraph(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    main = log.start_run(labels={"user": "ann", "session": "s1", "part": ""})
    log.start_run(labels={"user": "ann", "session": "s1", "part": "a"})
    log.start_run(labels={"user": "ann", "session": "s1", "part": "b"})
    assert labelspec.resolve_labels(log, "user=ann") == main
    assert labelspec.resolve_labels(log, "user=ann,session=s1") == main
    log.start_run(labels={"user": "ann", "session": "s2", "part": "a"})  # differs in two labels from the empty one
    with pytest.raises(AmbiguousRun):
        labelspec.resolve_labels(log, "user=ann")
    other = RunLog(Store.init(str(tmp_path / "t"), fsync="off"))
    other.start_run(labels={"user": "bo", "part": "x"})
    other.start_run(labels={"user": "bo", "part": "y"})  # no empty one: ambiguous as before
    with pytest.raises(AmbiguousRun):
        labelspec.resolve_labels(other, "user=bo")
