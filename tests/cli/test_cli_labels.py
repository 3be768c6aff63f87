"""Runs found by their labels on the command line: ``objstore runs --label k=v`` and a RUN argument
``thread_id=T`` (or ``k=v,k2=v2``) wherever a RUN is taken, when it names one run.

A real store with labelled runs (two LangGraph-like namespaces of one thread, a thread id that needs
escapes, an unlabelled run, a deleted labelled run); the CLI runs as a subprocess; a label spec's
output is compared byte for byte with the same command given the run id; errors are the documented
exit codes and write nothing.
"""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, snapshot_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.errors import AmbiguousRun, InvalidInput, RunNotFound
from objstore.lifecycle.delete import delete_run
from objstore.runs import labelspec
from objstore.runs.labels import run_id

# -- the grammar ------------------------------------------------------------------------------

def test_parse_and_escapes():
    assert labelspec.parse("thread_id=T") == {"thread_id": "T"}
    assert labelspec.parse("thread_id=T,checkpoint_ns=") == {"thread_id": "T", "checkpoint_ns": ""}
    assert labelspec.parse(r"path=a\,b\=c\\d") == {"path": "a,b=c\\d"}
    assert labelspec.parse("url=x=y") == {"url": "x=y"}  # the first '=' ends the name
    assert labelspec.parse(r"a\=b=1") == {"a=b": "1"}
    for bad, why in [("", "name=value"), ("=x", "needs a name"), ("a=1,a=2", "given twice"), ("a=1,", "is not name=value"),
                     ("a=1,b", "is not name=value"), (r"a=\x", "escapes only"), ("a=b\\", "trailing")]:
        with pytest.raises(InvalidInput, match=why):
            labelspec.parse(bad)


def test_what_is_a_label_spec():
    for run in ("r20261201-052011123456-9f3c2a7b1e04", "latest", "latest~2", "abc", "l-82ee4c8d"):
        assert not labelspec.is_label_spec(run)
    assert labelspec.is_label_spec("thread_id=T") and labelspec.is_label_spec("a\\,b=c")
    assert not labelspec.is_label_spec(r"a\=b")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=12), min_size=1, max_size=4))
def test_show_reads_back(labels):
    labels = {k: v for k, v in labels.items() if "\x00" not in k + v and all(not 0xD800 <= ord(c) <= 0xDFFF for c in k + v)}
    if not labels:
        return
    assert labelspec.parse(labelspec.show(labels)) == labels


# -- a store with labelled runs ----------------------------------------------------------------

@pytest.fixture
def world(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    root_ns = log.start_run(labels={"thread_id": "T", "checkpoint_ns": ""})
    sub_ns = log.start_run(labels={"thread_id": "T", "checkpoint_ns": "sub"})
    odd = log.start_run(labels={"thread_id": "a,b=c", "checkpoint_ns": ""})
    only = log.start_run(labels={"thread_id": "T"})  # exactly {thread_id: T}: the exact match of 'thread_id=T'
    gone = log.start_run(labels={"thread_id": "G", "checkpoint_ns": ""})
    plain = log.start_run("plain")
    for i in range(3):
        log.record_attempt(root_ns, step=1 + i, attempt=0, state="failed" if i == 0 else "succeeded", error="e" if i == 0 else None)
    log.rewind(root_ns, 1, reason="time travel")
    log.record_attempt(root_ns, step=9, attempt=0, state="succeeded")
    delete_run(log, gone, reason="thread deleted")
    return {"root": root, "log": log, "root_ns": root_ns, "sub_ns": sub_ns, "odd": odd, "only": only, "gone": gone, "plain": plain}


def test_resolve_labels_in_the_library(world):
    log = world["log"]
    assert labelspec.resolve_labels(log, "thread_id=T,checkpoint_ns=") == world["root_ns"] == run_id({"thread_id": "T", "checkpoint_ns": ""})
    assert labelspec.resolve_labels(log, "thread_id=T") == world["only"]  # exact wins over runs that include it
    assert labelspec.resolve_labels(log, "checkpoint_ns=sub") == world["sub_ns"]  # one run includes it
    assert labelspec.resolve_labels(log, r"thread_id=a\,b\=c") == world["odd"]
    with pytest.raises(AmbiguousRun) as e:
        labelspec.resolve_labels(log, "checkpoint_ns=")
    assert str(e.value).startswith("ambiguous run 'checkpoint_ns=': it matches 2 runs: ")
    assert f"{world['root_ns']} (checkpoint_ns=,thread_id=T)" in str(e.value) and f"{world['odd']} (checkpoint_ns=,thread_id=a\\,b\\=c)" in str(e.value)
    with pytest.raises(RunNotFound, match="no run has the labels thread_id=G"):  # deleted: never found
        labelspec.resolve_labels(log, "thread_id=G")
    with pytest.raises(RunNotFound):
        labelspec.resolve_labels(log, "thread_id=nope")


def _cli(world, *args, code=0):
    return run_cli(*args, store=world["root"], exit_code=code)


def test_runs_label_filters_text_and_json(world):
    _, out, _ = _cli(world, "runs", "--label", "thread_id=T")
    lines = out.splitlines()
    assert {ln.split()[0] for ln in lines} == {world["root_ns"], world["sub_ns"], world["only"]}
    assert f"{world['sub_ns']}  live branch 0  (1 branch)  checkpoint_ns=sub,thread_id=T" in lines
    _, everything, _ = _cli(world, "runs", "--all-namespaces")  # plain runs lists sub_ns under its root only
    assert [ln for ln in everything.splitlines() if ln.split()[0] in {world["root_ns"], world["sub_ns"], world["only"]}] == lines
    assert "plain  live branch 0  (1 branch)" in everything.splitlines()  # an unlabelled run's line as before
    assert world["gone"] not in everything

    _, js, _ = _cli(world, "runs", "--label", "thread_id=T", "--label", "checkpoint_ns=", "--json")
    _, all_js, _ = _cli(world, "runs", "--json")
    assert json.loads(js) == [r for r in json.loads(all_js) if r["run"] == world["root_ns"]]
    _, both, _ = _cli(world, "runs", "--label", "thread_id=T,checkpoint_ns=", "--json")
    assert both == js
    _, none, _ = _cli(world, "runs", "--label", "thread_id=nope", "--json")
    assert json.loads(none) == []


def test_a_label_spec_names_the_run_wherever_a_run_is_taken(world):
    rid = world["root_ns"]
    spec = "thread_id=T,checkpoint_ns="
    for args in (["log", "{}", "--all-branches"], ["log", "{}", "--graph"], ["branches", "{}", "--json"], ["episode", "{}", "--json"],
                 ["diff", "{}", "0", "1", "--json"], ["export", "{}"]):
        by_id = _cli(world, *[a.format(rid) for a in args])[1]
        by_labels = _cli(world, *[a.format(spec) for a in args])[1]
        assert by_labels == by_id and by_id.strip() and (rid in by_id or "--graph" in args), args
    assert _cli(world, "log", r"thread_id=a\,b\=c", "--json")[1] == _cli(world, "log", world["odd"], "--json")[1]


def test_ambiguous_missing_and_malformed_specs_write_nothing(world):
    before = snapshot_tree(world["root"])
    _, _, err = _cli(world, "log", "checkpoint_ns=", code=5)
    assert err.startswith("objstore: error: ambiguous run 'checkpoint_ns=': it matches 2 runs: ") and world["odd"] in err
    assert err.count("\n") == 1 and "Traceback" not in err
    _, _, err = _cli(world, "rewind", "thread_id=G", "--to-lsn", "0", code=4)  # deleted: not found
    assert err == "objstore: error: run not found: no run has the labels thread_id=G\n"
    _, _, err = _cli(world, "fork", r"thread_id=\x", "--from-branch", "0", "--at-lsn", "0", code=5)
    assert "escapes only" in err and err.count("\n") == 1
    _, _, err = _cli(world, "runs", "--label", "=x", code=2)
    assert "Invalid value for '--label'" in err
    _, _, err = _cli(world, "runs", "--label", "a=1", "--label", "a=2", code=2)
    assert "given twice" in err
    assert snapshot_tree(world["root"]) == before


def test_a_label_may_be_named_self(tmp_path):
    """Any label name works on the command line, ``self`` too (it was a TypeError traceback: the
    labels were passed to ``find_run(self, **labels)`` as keyword arguments)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.open(root, create=True))
    run = log.start_run(labels={"self": "x", "thread_id": "T"})
    code, out, err = run_cli("runs", "--label", "self=x", store=root, exit_code=0)
    assert out.startswith(run) and "Traceback" not in err
    code, out, err = run_cli("log", "self=x", "--format", "oneline", store=root, exit_code=0)
    assert "run_started" in out
    code, out, err = run_cli("log", "self=y", store=root, exit_code=4)
    assert "Traceback" not in err and "no run has the labels self=y" in err
    assert labelspec.resolve_labels(log, "self=x,thread_id=T") == run
