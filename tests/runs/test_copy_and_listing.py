"""Fork at a record id, fork into a new run (a copy), and lazy newest-first listing (issue 18).

A copy holds nothing of its source: its raw objects are counted; its fold is the source's up to
the fork record (state ≡ re-fold, verify --check-state); forged cross-run forks are named by
verify; listing reads only what it returns (records decoded are counted at the codec)."""

from __future__ import annotations

import pytest

import objstore
from objstore.errors import InvalidInput


def _log(tmp_path):
    return objstore.open_store(str(tmp_path / "s"))


def _all_ids(store):
    """The id of every object in every log of the store (its one log before format 6)."""
    return {oid for _run, engine in store.logs.all_logs() for oid in engine.iter_ids()}


def _has_body(store, oid):
    """Whether any log of the store holds ``oid``'s body."""
    return any(engine.has_body(oid) for _run, engine in store.logs.all_logs())


def _src(log, n=5):
    run = log.start_run()
    recs = [log.record_attempt(run, i, 0, "succeeded" if i % 2 else "failed") for i in range(n)]
    return run, recs


def test_fork_at_a_record_id(tmp_path):
    log = _log(tmp_path)
    run, recs = _src(log)
    fr = log.fork(run, None, at_record=recs[2].id, reason="t")
    assert (fr.parent_branch, fr.parent_lsn, fr.parent_record) == (0, 3, recs[2].id)
    other = log.start_run()
    with pytest.raises(InvalidInput):
        log.fork(other, None, at_record=recs[2].id)  # a record of another run
    with pytest.raises(InvalidInput):
        log.fork(run, 1, at_record=recs[2].id)  # not on that branch
    assert objstore.verify(log) == []


def test_a_copy_is_one_commit_copies_nothing_and_folds_the_source(tmp_path):
    log = _log(tmp_path)
    run, recs = _src(log)
    before = _all_ids(log.store)
    copy = log.fork_run(run, record=recs[2].id, labels={"thread_id": "c"})
    new = _all_ids(log.store) - before
    kinds = sorted(log.store.get(o)[0] for o in new)
    assert kinds == ["fork", "record"]  # the cross-run fork object and the copy's run_started: nothing copied
    started = log.run_started(copy)
    fk = log.store.get(started.parent)[1]
    assert (fk["parent_run"], fk["parent_branch"], fk["parent_lsn"], fk["parent_record"]) == (run, 0, 3, recs[2].id)
    log.record_attempt(copy, 9, 0, "succeeded")
    lineage = [(r.run, r.lsn) for r in log.iter_lineage(log.view(copy), 0)]
    assert lineage == [(run, 0), (run, 1), (run, 2), (run, 3), (copy, 0), (copy, 1)]
    # the copy's state before LSN 1 is the source's up to that record
    st = log.state.state(log, log.view(copy), 0)
    assert st == log.refold(log.view(copy), 0)
    assert objstore.verify(_log(tmp_path), check_state=True) == []
    # the source is untouched and goes on
    log.record_attempt(run, 5, 0, "succeeded")
    assert [r.lsn for r in log.iter_records(copy)] == [1, 0]  # own records only
    assert log.find_run(thread_id="c") == copy


def test_verify_names_a_forged_cross_run_fork(tmp_path):
    log = _log(tmp_path)
    run, recs = _src(log)
    st = log.store
    with st.batch():
        fid = st.put("fork", {"run": "forged", "branch": 0, "parent_run": run, "parent_branch": 0, "parent_lsn": 2,
                              "parent_record": recs[3].id, "parent_head": recs[-1].id, "reason": "x", "compensation": [], "time": 1.0})
        oid = st.put("record", {"run": "forged", "branch": 0, "lsn": 0, "parent": fid, "kind": "run_started", "time": 1.0,
                                "body": {"subject": "default", "workflow_version": "1", "meta": None}})
        st.set_ref("run/forged/branch/0", None, oid, "forged")
    got = [(p.code, p.subject) for p in objstore.verify(_log(tmp_path))]
    assert ("bad-fork", fid.hex()) in got, got


def test_listing_is_newest_first_lazy_and_reads_only_what_it_returns(tmp_path, monkeypatch):
    log = _log(tmp_path)
    run, recs = _src(log, 200)
    fr = log.fork(run, 0, 100)
    own = [log.record_attempt(run, 1000 + i, 0, "succeeded") for i in range(3)]
    assert [r.id for r in log.iter_records(run)] == [r.id for r in reversed(own)]
    allb = list(log.iter_records(run, all_branches=True))
    assert [r.id for r in allb[:3]] == [r.id for r in reversed(own)]  # the fork's records are the newest commits
    assert len(allb) == 204 and allb[-1].kind == "run_started"
    assert [r.id for r in log.iter_records(run, branch=0, before=recs[150].id, limit=2)] == [recs[149].id, recs[148].id]
    assert [r.body["step"] for r in log.iter_records(run, branch=0, kinds=["attempt"], limit=3)] == [199, 198, 197]
    fresh = _log(tmp_path)
    fresh.view(run)
    decoded = []
    real_dec = fresh.store.get_decoded

    def counting(oid):
        decoded.append(oid)
        return real_dec(oid)

    monkeypatch.setattr(fresh.store, "get_decoded", counting)
    got = list(fresh.iter_records(run, branch=0, limit=5))
    assert len(got) == 5 and len(decoded) == 5
    decoded.clear()
    got = list(fresh.iter_records(run, branch=0, before=recs[50].id, limit=3))
    assert [r.id for r in got] == [recs[49].id, recs[48].id, recs[47].id] and len(decoded) == 3
    assert fr.branch == 1


def test_the_command_line_shows_a_copy(tmp_path):
    import subprocess
    import sys

    log = _log(tmp_path)
    run, recs = _src(log)
    copy = log.fork_run(run, record=recs[1].id)
    log.record_attempt(copy, 7, 0, "succeeded")
    bin_ = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "bin", "objstore")

    def cli(*args):
        p = subprocess.run([sys.executable, bin_, "--store", str(tmp_path / "s"), *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout

    graph = cli("log", "--graph", copy).splitlines()
    assert len(graph) == 3 and graph[-1].endswith(f"branch 0 copied from run {run} branch 0 at lsn 2 (copy)"), graph
    assert f"copied from run {run} branch 0 at lsn 2" in cli("branches", copy)
    assert '"parent_run":"' + run + '"' in cli("branches", "--json", copy)
    assert cli("verify") == ""  # ok goes to stderr; nothing on stdout


def test_a_copy_keeps_its_history_when_its_source_is_deleted_and_gc_runs(tmp_path):
    """gc counts the source chain as reachable from a live copy: the source run is gone as a run, the
    records the copy inherits stay (bodies included); what the copy does not reach goes."""
    from objstore.errors import Deleted
    from objstore.lifecycle import delete, gc

    log = _log(tmp_path)
    run, recs = _src(log)
    reached = log.put_blob(b"R" * 3000 + b"reached")
    beyond = log.put_blob(b"B" * 3000 + b"beyond")
    early = log.record_attempt(run, 50, 0, "succeeded", output=reached)
    late = log.record_attempt(run, 51, 0, "succeeded", output=beyond)
    copy = log.fork_run(run, record=early.id)
    log.record_attempt(copy, 60, 0, "succeeded")
    want = [(r.run, r.lsn, r.body) for r in log.iter_lineage(log.view(copy), 0)]
    delete.delete_run(log, run, reason="the source thread is deleted")
    gc.gc(log.store)
    fresh = _log(tmp_path)
    assert [(r.run, r.lsn, r.body) for r in fresh.iter_lineage(fresh.view(copy), 0)] == want
    assert fresh.get_blob(reached).endswith(b"reached")
    assert not _has_body(fresh.store, beyond) and not _has_body(fresh.store, late.id)
    with pytest.raises(Deleted):
        fresh.view(run)
    assert fresh.state.state(fresh, fresh.view(copy), 0) == fresh.refold(fresh.view(copy), 0)
    assert objstore.verify(fresh, check_state=True) == []


def test_log_of_a_copy_whose_source_was_deleted_shows_the_kept_history(tmp_path):
    import os
    import subprocess
    import sys

    from objstore.lifecycle import delete

    log = _log(tmp_path)
    run, recs = _src(log, 3)
    copy = log.fork_run(run, run="cp")
    log.record_attempt(copy, 9, 0, "succeeded")
    delete.delete_run(log, run, reason="gone")
    bin_ = os.path.join(os.path.dirname(__file__), "..", "..", "bin", "objstore")
    p = subprocess.run([sys.executable, bin_, "--store", str(tmp_path / "s"), "log", "cp"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1 + 2 + 1 + 4 and lines[-1].startswith("lsn 0    run_started"), lines  # header, own 2, fork, source 4


def test_verify_a_run_by_label(tmp_path):
    import os
    import subprocess
    import sys

    log = _log(tmp_path)
    run, _recs = _src(log, 3)
    copy = log.fork_run(run, labels={"thread_id": "chat-1"})
    log.record_attempt(copy, 9, 0, "failed")
    bin_ = os.path.join(os.path.dirname(__file__), "..", "..", "bin", "objstore")
    p = subprocess.run([sys.executable, bin_, "--store", str(tmp_path / "s"), "verify", "thread_id=chat-1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "", p.stderr
    assert f"verify: run {copy}: 1 branch, 2 records folded (4 inherited)" in p.stderr
    p = subprocess.run([sys.executable, bin_, "--store", str(tmp_path / "s"), "verify", "thread_id=nobody"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 4 and p.stderr.count("\n") == 1


def test_listing_all_branches_reads_only_what_it_returns(tmp_path, monkeypatch):
    """Merged over 40 branches, the newest record is one decode; a page below a cut reads nothing newer
    than the cut (branches are positioned by their ids' log positions and a binary search on the chain
    index, not by decoding heads)."""
    log = _log(tmp_path)
    run, recs = _src(log, 50)
    for i in range(40):
        log.fork(run, 0, i, make_live=False)
        log.record_attempt(run, 100 + i, 0, "succeeded", branch=i + 1, allow_retained=True)
        log.record_attempt(run, 200 + i, 0, "succeeded", branch=i + 1, allow_retained=True)
    want = list(log.iter_records(run, all_branches=True))
    fresh = _log(tmp_path)
    fresh.view(run)
    decoded = []
    real = fresh.store.get_decoded

    def counting(oid):
        decoded.append(oid)
        return real(oid)

    monkeypatch.setattr(fresh.store, "get_decoded", counting)
    got = list(fresh.iter_records(run, all_branches=True, limit=1))
    assert [r.id for r in got] == [want[0].id] and len(decoded) == 1
    decoded.clear()
    mid = want[30]
    got = list(fresh.iter_records(run, all_branches=True, before=mid.id, limit=3))
    assert [r.id for r in got] == [r.id for r in want[31:34]]
    assert len(decoded) <= 4  # the page, and at most one fork object a walk ends at: nothing newer than the cut
    decoded.clear()
    assert [r.id for r in fresh.iter_records(run, all_branches=True)] == [r.id for r in want]


# Issue 16's library fixes, each pinned where a Python caller meets it.
def test_the_run_listing_names_each_run_as_plain_runs_does(tmp_path):
    from objstore.runs import views
    from objstore.runs.resolve import resolve_run

    log = objstore.open_store(str(tmp_path / "s"))
    a = log.start_run(subject="alice", workflow_version="wf-1", when=1_700_000_000.0)
    log.start_run(subject="carol", when=1_700_000_000.5)
    log.start_run("named", subject="bob", when=1_700_000_001.0)
    rows = {r["run"]: r for r in views.runs(log)}
    assert rows["named"] == {"run": "named", "short_id": "named", "subject": "bob", "workflow_version": "1",
                             "started": 1_700_000_001.0, "live_branch": 0, "branch_count": 1}
    assert rows[a]["subject"] == "alice" and rows[a]["workflow_version"] == "wf-1" and rows[a]["started"] == 1_700_000_000.0
    assert len(rows[a]["short_id"]) < len(a) and resolve_run(log, rows[a]["short_id"]) == a
