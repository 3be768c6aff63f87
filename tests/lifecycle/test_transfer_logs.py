"""push / clone between stores with a log per run (issue 16): a run's log copied entry for entry, so its head
(entry, checksum) — its anchor — is the same at both ends after a clone and after a push; the catalog entry
copied as it is; a target that wrote the run on its own gets refs and objects instead (fast-forward or a
conflict); a store of one log to a store of logs and back: objects and refs, one commit per run on the side of logs.

Each test makes the shapes it needs (``OBJSTORE_NEW_FORMAT`` set per store), so the file means the same with and
without ``OBJSTORE_NEW_FORMAT=3`` in the environment.
"""

from __future__ import annotations

import os

from helpers import is_per_run, run_cli, run_log_root, snapshot_tree

from objstore import RunLog, Store
from objstore.lifecycle.transfer import transfer
from objstore.runs.verify import verify
from objstore.storage import runrefs


def make(root, fmt, monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", str(fmt))
    st = Store.init(str(root))
    monkeypatch.delenv("OBJSTORE_NEW_FORMAT")
    assert is_per_run(root) == (fmt == 6)
    return st


def world(store):
    """A: 4 attempts rewound to LSN 2 with one more; B: 4 attempts; C: a copy of B with one of its own; a labelled
    run (its id the one its labels give: ``LAB``)."""
    log = RunLog(store)
    lab = log.start_run(labels={"team": "x"})
    assert lab == LAB
    log.record_attempt(lab, 0, 0, "succeeded")
    for run in ("A", "B"):
        log.start_run(run)
        p = log.put_blob(f"prompt of {run}".encode())
        for i in range(4):
            log.record_attempt(run, i, 0, "succeeded", prompt=p, output=log.put_blob(f"out {run} {i}".encode()))
    log.rewind("A", 2, reason="again")
    log.record_attempt("A", 10, 0, "succeeded")
    log.fork_run("B", run="C")
    log.record_attempt("C", 20, 0, "succeeded")
    return log


LAB = RunLog(Store.memory()).start_run(labels={"team": "x"})
RUNS = sorted(["A", "B", "C", LAB])


def heads(store):
    return {r: store.logs.run_log(r).refresh() for r in store.logs.run_ids()}


def seg_files(root, run):
    d = os.path.join(run_log_root(root, run), "log")
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".seg")}


def test_clone_and_push_between_stores_of_logs_keep_each_runs_head(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    log = world(make(a, 6, monkeypatch))
    target = make(b, 6, monkeypatch)
    rep = transfer(log.store, target)
    assert rep.landed == RUNS and rep.conflicts == [] and rep.entries == sum(p.entry for p in heads(log.store).values())
    assert heads(target) == heads(log.store)  # the same entries: each run's (entry, checksum) head, its anchor
    for run in RUNS:
        assert seg_files(b, run) == seg_files(a, run)
        assert target.logs.catalog.entry(run) == log.store.logs.catalog.entry(run)  # the catalog entry as it is
        assert target.run_refs(run) == log.store.run_refs(run)
    assert target.logs.catalog.copies("B") == ["C"]
    assert RunLog(target).find_run(team="x") == LAB
    assert verify(RunLog(target)) == []
    # a push of more: only the new entries, appended; a second push writes nothing
    log.record_attempt("A", 30, 0, "succeeded", output=log.put_blob(b"late"))
    log.rewind("B", 1, reason="back")
    before_c = snapshot_tree(run_log_root(b, "C"))
    rep = transfer(log.store, target)
    assert (rep.landed, rep.already, rep.entries) == (["A", "B"], sorted(["C", LAB]), 2)
    assert heads(target) == heads(log.store)
    assert snapshot_tree(run_log_root(b, "C")) == before_c  # a run with nothing new: its log untouched
    rep = transfer(log.store, target)
    assert (rep.landed, rep.entries, rep.objects) == ([], 0, 0)
    assert verify(RunLog(target)) == []
    # the CLI: clone DIR of a store of logs is one too, with the same heads
    run_cli("clone", str(a), str(tmp_path / "c"), exit_code=0)
    assert heads(Store.open(str(tmp_path / "c"))) == heads(log.store)


def test_a_run_the_target_wrote_on_its_own_gets_refs_and_objects(tmp_path, monkeypatch):
    """Not a prefix of the source's log: refs and objects (one commit per run), fast-forward or a conflict."""
    log = world(make(tmp_path / "a", 6, monkeypatch))
    target = make(tmp_path / "b", 6, monkeypatch)
    transfer(log.store, target)
    RunLog(target).record_attempt("A", 40, 0, "succeeded")  # written on the far end only
    log.record_attempt("A", 41, 0, "succeeded")
    log.record_attempt("B", 42, 0, "succeeded")
    before = target.logs.run_log("A").refresh()
    rep = transfer(log.store, target)
    assert [(r, ref) for r, ref, _d in rep.conflicts] == [("A", runrefs.branch_ref("A", 1))]
    assert rep.landed == ["B"] and heads(target)["B"] == heads(log.store)["B"]
    assert target.logs.run_log("A").refresh() == before  # nothing of A written
    assert verify(RunLog(target)) == []


def test_between_a_store_of_one_log_and_a_store_of_logs_both_ways(tmp_path, monkeypatch):
    one = world(make(tmp_path / "one", 3, monkeypatch))
    logs = make(tmp_path / "logs", 6, monkeypatch)
    rep = transfer(one.store, logs)
    assert rep.landed == RUNS
    assert {r: p.entry for r, p in heads(logs).items()} == dict.fromkeys(RUNS, 1)  # one commit per run, its own log
    assert RunLog(logs).find_run(team="x") == LAB
    for run in RUNS:
        assert logs.run_refs(run) == one.store.run_refs(run)
        assert [r.id for r in RunLog(logs).records(run, all_branches=True)] == [r.id for r in one.records(run, all_branches=True)]
    assert logs.logs.catalog.copies("B") == ["C"]
    assert verify(RunLog(logs)) == []
    back = make(tmp_path / "back", 3, monkeypatch)
    rep = transfer(logs, back)
    assert rep.landed == RUNS and back.engine.refresh().entry == 4
    for run in RUNS:
        assert back.run_refs(run) == one.store.run_refs(run)
    assert verify(RunLog(back)) == []
    assert transfer(logs, back).entries == 0 and transfer(one.store, logs).entries == 0
