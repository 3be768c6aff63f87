"""What a copy reads once its source is deleted, gc'd, copied again (issue 18).

``fork_run`` copies nothing, so deleting the source (lifecycle.delete.delete_run) is the hard case: the copy's
history before LSN 1 lives in the deleted run. Whatever the readers show (the design keeps the chain a live copy
reaches: gc counts it reachable), they must agree with each other — lineage, the state cache and a re-fold,
episode — before and after gc, verify (state checked too) must pass on the sound store, the command line must
answer with a documented exit code and no traceback, and the copy can be copied again. Also: a copy taken at a
record of a retained (not live) branch folds that branch's lineage."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import objstore
from objstore.lifecycle import delete as D
from objstore.lifecycle.gc import gc


def _build(root):
    log = objstore.open_store(root)
    src = log.start_run("src")
    recs = [log.record_attempt(src, i, 0, "succeeded" if i % 2 else "failed", output=log.put_blob(b"src output %d" % i))
            for i in range(4)]
    cp = log.fork_run(src, record=recs[2].id, labels={"thread_id": "copy"})
    own = log.record_attempt(cp, 10, 0, "succeeded", output=log.put_blob(b"own output"))
    return log, src, recs, cp, own


def _reads(root, run):
    """What every reader says of a run: lineage, state (cache and re-fold), episode, own records."""
    log = objstore.open_store(root)
    view = log.view(run)
    lineage = [(r.run, r.lsn, r.kind, r.body) for r in log.iter_lineage(view, 0)]
    state = log.state.state(log, view, 0)
    assert state == log.refold(view, 0)
    ep = objstore.episode(log, run)
    own = [(r.run, r.lsn) for r in log.iter_records(run)]
    return lineage, state, ep.branches[0].attempts_total, own


def _cli(root, *args):
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, *args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr[-1500:]
    assert p.returncode in (0, 12), (args, p.returncode, p.stderr[-500:])  # 12: Deleted, documented
    return p.returncode


@pytest.mark.slow
def test_a_copy_after_its_source_is_deleted_and_gc_runs(tmp_path):
    root = str(tmp_path / "s")
    log, src, recs, cp, own = _build(root)
    before = _reads(root, cp)
    assert [(r, lsn) for r, lsn, _, _ in before[0]] == [("src", 0), ("src", 1), ("src", 2), ("src", 3), (cp, 0), (cp, 1)]
    D.delete_run(log, src, reason="adv18")
    after_delete = _reads(root, cp)
    assert after_delete[3] == before[3] == [(cp, 1), (cp, 0)]  # its own records, untouched
    # the inherited part is the source's (design: kept for the copy) or header-only, never other records
    assert [(r, lsn) for r, lsn, _, _ in after_delete[0]] == [(r, lsn) for r, lsn, _, _ in before[0]]
    for (r, lsn, kind, body), (_, _, kind0, body0) in zip(after_delete[0], before[0], strict=True):
        assert kind == kind0 and (body == body0 or set(body) == {"deleted"}), (r, lsn, body)
    assert objstore.verify(objstore.open_store(root), check_state=True) == []
    assert objstore.open_store(root).find_run(thread_id="copy") == cp
    gc(objstore.open_store(root).store)
    after_gc = _reads(root, cp)
    assert after_gc == after_delete  # gc changes no answer of a live copy
    assert objstore.open_store(root).get_blob(own.body["output"]) == b"own output"
    assert objstore.verify(objstore.open_store(root), check_state=True) == []
    for args in (["log", cp], ["episode", cp], ["branches", cp], ["diff", cp, "0", "0"], ["verify"]):
        _cli(root, *args)
    assert _cli(root, "verify") == 0 and _cli(root, "episode", cp) == 0
    # the copy copied again, after all that: its history goes through the copy into what the copy reads
    fresh = objstore.open_store(root)
    cc = fresh.fork_run(cp, labels={"thread_id": "copy of copy"})
    fresh.record_attempt(cc, 20, 0, "succeeded")
    got = [(r, lsn) for r, lsn, _, _ in _reads(root, cc)[0]]
    assert got == [(r, lsn) for r, lsn, _, _ in after_gc[0]] + [(cc, 0), (cc, 1)]
    assert objstore.verify(objstore.open_store(root), check_state=True) == []


def test_deleting_a_copy_leaves_its_source_whole_and_gc_takes_only_the_copy(tmp_path):
    root = str(tmp_path / "s")
    log, src, recs, cp, own = _build(root)
    src_before = [(r.id, r.body) for r in log.records(src)]
    D.delete_run(log, cp, reason="adv18")
    r = gc(objstore.open_store(root).store)
    assert r.removed_records == 2 and r.removed_blobs == 1  # the copy's run_started and attempt, its one blob
    fresh = objstore.open_store(root)
    assert [(x.id, x.body) for x in fresh.records(src)] == src_before
    assert fresh.find_run(thread_id="copy") is None and fresh.find_runs(thread_id="copy") == []
    assert objstore.verify(fresh, check_state=True) == []
    again = fresh.fork_run(src, labels={"thread_id": "copy"})
    assert again == cp + "-1"  # the deleted copy's id is never used again


def test_a_copy_at_a_record_of_a_retained_branch(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    src = log.start_run("src")
    [log.record_attempt(src, i, 0, "succeeded") for i in range(4)]
    log.fork(src, 0, 2, make_live=False)  # branch 1, retained: branch 0 stays live
    b1 = [log.append(src, "attempt", {"step": 9, "attempt": i, "state": "failed"}, branch=1, allow_retained=True) for i in range(2)]
    assert log.view(src).live == 0
    cp = log.fork_run(src, record=b1[0].id, run="cp")
    fk = log.store.get(log.run_started(cp).parent)[1]
    assert (fk["parent_run"], fk["parent_branch"], fk["parent_lsn"], fk["parent_record"]) == ("src", 1, 0, b1[0].id)
    lineage = [(r.run, r.branch, r.lsn) for r in log.iter_lineage(log.view(cp), 0)]
    assert lineage == [("src", 0, 0), ("src", 0, 1), ("src", 0, 2), ("src", 1, 0), ("cp", 0, 0)]
    state = log.state.state(log, log.view(cp), 0)
    assert state == log.refold(log.view(cp), 0) and sorted(state["steps"]) == ["0", "1", "9"]
    # a fork inside the copy at its run_started, and a copy of the copy at that record
    fr = log.fork(cp, None, at_record=log.run_started(cp).id)
    assert [(r.run, r.branch, r.lsn) for r in log.iter_lineage(log.view(cp), fr.branch)] == lineage
    c2 = log.fork_run(cp, record=log.run_started(cp).id, run="c2")
    assert [(r.run, r.branch, r.lsn) for r in log.iter_lineage(log.view(c2), 0)] == lineage + [("c2", 0, 0)]
    assert objstore.verify(objstore.open_store(root), check_state=True) == []
    assert os.path.exists(os.path.join(root, "OBJSTORE"))
