"""push / clone (objstore.lifecycle.transfer, objstore_cli.remote): runs copied between a local store and an
S3 store, one commit per run (re-chained), fast-forward only, idempotent.

Round trips local -> S3 (a MemoryBucket, and once the real SeaweedFS) -> local compare every object's
canonical bytes by id and every run's refs; verify is clean on all three stores; a second push writes no
entry (the engines' positions); a diverged branch is a Conflict naming the run while the other runs go on;
copies, rewinds, grants revoked after a deletion, partial and whole-run deletions travel; what the
source's gc removed is reported, not faked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import log_engine_of, new_key, raw_objects, run_cli

from objstore import RunLog, Store
from objstore.errors import Erased, InvalidInput, RunNotFound
from objstore.journal import grants as G
from objstore.lifecycle import delete as D
from objstore.lifecycle.gc import gc
from objstore.lifecycle.transfer import GC_UNAVAILABLE, transfer
from objstore.runs.verify import verify
from objstore.storage import codec, identity, runrefs
from objstore.storage.log.format import COMP_GONE
from objstore.storage.s3.bucket import MemoryBucket


def fake_s3(tmp_path, name="s3", url=True):
    """A store on a MemoryBucket (the S3 engine, no server), its marker written as `init` writes it;
    ``url=False``: without the URL Store.open sets, so gc does not take it (its bodies stay)."""
    st = Store.on_bucket(MemoryBucket(), str(tmp_path / name))
    if not url:
        st.url = None  # gc takes a store for a remote one by its URL
    return st


def world(root):
    """A: 4 attempts, rewound to LSN 2 (branch 1) with one more; B: 4 attempts; a copy of B with one
    of its own. Blobs named by records; the owner key set."""
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    for run in ("A", "B"):
        log.start_run(run)
        p = log.put_blob(f"prompt of {run}".encode())
        for i in range(4):
            log.record_attempt(run, i, 0, "succeeded", prompt=p, output=log.put_blob(f"out {run} {i}".encode()))
    log.rewind("A", 2, reason="again")
    log.record_attempt("A", 10, 0, "succeeded")
    copy = log.fork_run("B", run="C")
    log.record_attempt(copy, 20, 0, "succeeded")
    return log, owner


def objects(store):
    """{id: canonical bytes} of every object with its body, read from the log's entries."""
    return {oid: data for oid, _t, data in raw_objects(store) if data is not None}


def run_refs(store):
    """Each run's refs, its cite aside (a position in its own store's store log: each store's commits cite their own)."""
    return {r: {k: v for k, v in store.run_refs(r).items() if not runrefs.is_cite_ref(k)} for r in sorted(store.logs.run_ids())}


def entries(store):
    """Entries of every log of the store (a store of logs: the store log's and each run's)."""
    return sum(engine.refresh().entry for _run, engine in store.logs.all_logs())


def test_round_trip_local_s3_local(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    src = log.store
    s3 = fake_s3(tmp_path)
    rep = transfer(src, s3)
    assert (rep.store_refs, rep.landed, rep.conflicts, rep.erased, rep.gc) == ("landed", ["A", "B", "C"], [], [], None)
    assert entries(s3) == 4  # the store-level refs, then one commit per run: none spans two logs (MultiLogBatch)
    back = Store.init(str(tmp_path / "b"))
    rep2 = transfer(s3, back)
    assert rep2.landed == ["A", "B", "C"] and entries(back) == 4
    want = objects(src)
    assert len(want) > 20
    for st in (s3, back):
        assert objects(st) == want  # every record, fork and blob: the same bytes under the same id, nothing more
        assert run_refs(st) == run_refs(src)  # branch heads and live refs
        assert dict(st.list_refs("keys/")) == dict(src.list_refs("keys/"))
        assert verify(RunLog(st)) == []
        assert RunLog(st).view("A").live == 1
    assert verify(log) == []
    # the copy reads into its source on the far end too
    assert [r.id for r in RunLog(back).records("C")] == [r.id for r in log.records("C")]
    # anchors differ between the ends (re-chained), heads do not
    assert s3.engine.anchor() != src.engine.anchor()


def test_second_push_writes_nothing_and_more_appends_fast_forward(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    s3 = fake_s3(tmp_path)
    transfer(log.store, s3)
    n = entries(s3)
    puts = s3.engine.bucket.requests.copy()
    rep = transfer(log.store, s3)
    assert (rep.landed, rep.already, rep.entries, rep.objects, rep.store_refs) == ([], ["A", "B", "C"], 0, 0, "already")
    assert entries(s3) == n
    writes = ("PUT", "DELETE")  # (reads — GETs, and the LIST of the target's catalog — are not writes)
    assert {k: v for k, v in s3.engine.bucket.requests.items() if k in writes} == {k: v for k, v in puts.items() if k in writes}
    for i in range(3):
        log.record_attempt("A", 30 + i, 0, "succeeded", output=log.put_blob(f"late {i}".encode()))
    log.rewind("B", 1, reason="back")
    rep = transfer(log.store, s3)
    assert (rep.landed, rep.already, rep.entries) == (["A", "B"], ["C"], 2)
    assert run_refs(s3) == run_refs(log.store)
    assert objects(s3) == objects(log.store)
    assert verify(RunLog(s3)) == []


def test_diverged_branch_is_a_conflict_naming_the_run_and_the_others_go_on(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    s3 = fake_s3(tmp_path)
    transfer(log.store, s3)
    RunLog(s3).record_attempt("A", 40, 0, "succeeded")  # written on the far end only
    log.record_attempt("A", 41, 0, "succeeded")
    log.record_attempt("B", 42, 0, "succeeded")
    before_a = s3.run_refs("A")
    n = entries(s3)
    rep = transfer(log.store, s3)
    assert [(r, ref) for r, ref, _d in rep.conflicts] == [("A", runrefs.branch_ref("A", 1))]
    assert "not an ancestor" in rep.conflicts[0][2]
    assert rep.landed == ["B"] and entries(s3) == n + 1
    assert s3.run_refs("A") == before_a  # nothing of A written
    assert s3.run_refs("B") == log.store.run_refs("B")
    assert verify(RunLog(s3)) == []


def test_a_copy_pushed_alone_brings_its_source_run_first(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    target = Store.init(str(tmp_path / "b"))
    rep = transfer(log.store, target, ["C"])
    assert rep.landed == ["B", "C"]
    assert sorted(target.logs.run_ids()) == ["B", "C"]
    assert verify(RunLog(target)) == []
    with pytest.raises(RunNotFound):
        transfer(log.store, target, ["nope"])
    with pytest.raises(InvalidInput):
        transfer(log.store, Store.open(str(tmp_path / "a")))


def test_a_partial_deletion_and_a_grant_revoked_after_it_travel(tmp_path):
    log, owner = world(str(tmp_path / "a"))
    w, _ = new_key(tmp_path, "w")
    G.grant(log, owner, "A", w.public, rights=["delete"], name="deleter")
    doomed = log.store.indexed_record("A", 0, 3)
    did = D.delete_records(log, "A", [doomed], reason="pii", key=w)
    G.revoke(log, owner, "A", w.public)  # after the deletion: the deletion stays valid, judged at its entry
    assert verify(log) == []
    s3 = fake_s3(tmp_path)
    rep = transfer(log.store, s3)
    assert rep.landed == ["A", "B", "C"] and rep.gc == "ran"  # the S3 target's gc took the covered body out
    # A: its records, the grant and the deletion in one commit, the revocation in the next (a chain moves one step per entry)
    assert entries(s3) == 5
    assert s3.run_refs("A")[runrefs.deletions_ref("A")] == did
    with pytest.raises(Erased):
        s3.get(doomed)
    assert s3.logs.run_log("A").loc(doomed).comp == COMP_GONE  # (in run A's log: the S3 store has a log per run)
    assert verify(RunLog(s3)) == []
    # what the S3 target's gc removed cannot be sent on: a clone of it lacks A (the engines cannot store a
    # record "as removed"), and says so
    rep = transfer(s3, Store.init(str(tmp_path / "c")))
    assert [r for r, _d in rep.erased] == ["A"] and "removed by gc" in rep.erased[0][1] and rep.landed == ["B", "C"]
    # an S3 store before its gc: there the grant and the deletion share one entry; the grant goes first again
    kept = fake_s3(tmp_path, "kept", url=False)
    assert transfer(log.store, kept).gc == GC_UNAVAILABLE
    back = Store.init(str(tmp_path / "b"))
    rep = transfer(kept, back)
    assert rep.landed == ["A", "B", "C"] and rep.gc == "ran"  # a local target is gc'd: the covered body leaves its files
    with pytest.raises(Erased):  # BodyRemoved now
        back.get(doomed)
    assert log_engine_of(back, "A").loc(doomed).comp == COMP_GONE
    assert verify(RunLog(back)) == []
    assert run_refs(back) == run_refs(log.store)


def test_a_journal_chain_moves_one_version_per_commit_judged_by_the_grants_of_its_time(tmp_path):
    from objstore.journal.updates import update_journal

    log, owner = world(str(tmp_path / "a"))
    w, _ = new_key(tmp_path, "w")
    G.grant(log, owner, "A", w.public, name="worker")
    update_journal(log, "A", w, {"entries": [{"id": "e1", "text": "one"}]})
    update_journal(log, "A", w, {"entries": [{"id": "e1", "text": "two"}]})
    G.revoke(log, owner, "A", w.public)  # after v2: v1 and v2 stay valid, judged at their entries
    update_journal(log, "A", owner, {"entries": [{"id": "e1", "text": "three"}]})
    assert verify(log) == []
    s3 = fake_s3(tmp_path)
    rep = transfer(log.store, s3, ["A"])
    # [records, grant, v1], [v2], [revocation, v3]: a chain ref moves one element per entry, a grant
    # step never after a version it would re-date
    assert (rep.landed, entries(s3)) == (["A"], 1 + 3)
    assert run_refs(s3)["A"] == run_refs(log.store)["A"]  # (each store's cite names its own store log)
    assert verify(RunLog(s3)) == []
    for i in range(2):  # two more versions: the target's journal head is two elements behind
        update_journal(log, "A", owner, {"entries": [{"id": "e1", "text": f"later {i}"}]})
    rep = transfer(log.store, s3, ["A"])
    assert (rep.landed, rep.entries) == (["A"], 2)
    assert run_refs(s3)["A"] == run_refs(log.store)["A"]
    assert objects(s3).items() <= objects(log.store).items()  # the same bytes under the same ids
    assert verify(RunLog(s3)) == []


def test_appending_after_a_deleted_tail_pushes_again_and_never_resends_what_the_target_gc_removed(tmp_path):
    log, owner = world(str(tmp_path / "a"))
    tail = [log.store.indexed_record("B", 0, lsn) for lsn in (3, 4)]
    D.delete_branch_from(log, "B", 0, 3, reason="tail", key=owner)
    target = Store.init(str(tmp_path / "b"))
    assert transfer(log.store, target).gc == "ran"
    assert all(log_engine_of(target, "B").loc(oid).comp == COMP_GONE for oid in tail)
    log.record_attempt("B", 60, 0, "succeeded")  # its parent is a covered record, whose body the target no longer has
    rep = transfer(log.store, target)
    assert (rep.landed, rep.entries, rep.objects) == (["B"], 1, 1)
    assert all(log_engine_of(target, "B").loc(oid).comp == COMP_GONE for oid in tail)
    assert run_refs(target) == run_refs(log.store)
    assert verify(RunLog(target)) == []


def test_what_the_source_gc_removed_is_reported_not_faked(tmp_path):
    log, owner = world(str(tmp_path / "a"))
    early = fake_s3(tmp_path, "early")
    transfer(log.store, early)  # holds A before the deletion
    doomed = log.store.indexed_record("A", 0, 3)
    D.delete_records(log, "A", [doomed], reason="pii", key=owner)
    D.delete_run(log, "B", reason="gone", key=owner)
    gc(log.store)
    assert log_engine_of(log.store, "A").loc(doomed).comp == COMP_GONE
    fresh = fake_s3(tmp_path, "fresh")
    rep = transfer(log.store, fresh)
    # A needs a body gc removed; B is deleted and fresh never had it; C is a copy of the deleted B
    assert [r for r, _d in rep.erased] == ["A", "C"] and "removed by gc" in rep.erased[0][1]
    assert rep.deleted == ["B"] and rep.landed == []
    assert sorted(fresh.engine.tables.run_refs) == []
    assert verify(RunLog(fresh)) == []
    # a target that had them receives the deletions, and nothing else is needed
    rep = transfer(log.store, early)
    assert rep.landed == ["A", "B"] and rep.erased == [] and rep.already == ["C"]
    with pytest.raises(Erased):  # the S3 target's gc removed it
        early.get(doomed)
    assert runrefs.deleted_ref("B") in early.run_refs("B")
    assert RunLog(early).runs() == ["A", "C"]
    assert verify(RunLog(early)) == []


def test_a_redacted_blob_never_travels_and_its_redaction_does(tmp_path):
    log, owner = world(str(tmp_path / "a"))
    blob = codec.object_id(codec.encode(codec.BLOB, b"prompt of A"))
    early = Store.init(str(tmp_path / "early"))
    transfer(log.store, early)  # holds the blob before the redaction
    D.redact(log, blob, reason="secret", key=owner)
    fresh = fake_s3(tmp_path, "fresh")
    rep = transfer(log.store, fresh)
    assert [r for r, _d in rep.erased] == ["A"] and "redacted" in rep.erased[0][1]
    assert rep.landed == ["B", "C"] and rep.store_refs == "landed"  # the owner key; the redaction has nothing to withhold there
    assert not fresh.engine.has(blob) and runrefs.redacted_ref(blob) not in dict(fresh.list_refs())
    assert verify(RunLog(fresh)) == []
    rep = transfer(log.store, early)
    assert (rep.store_refs, rep.gc, rep.already) == ("landed", "ran", ["A", "B", "C"])
    with pytest.raises(Erased):
        early.get_blob(blob)
    assert log_engine_of(early, "A").loc(blob).comp == COMP_GONE  # the target's gc removed it (from A's log, which held it)
    assert verify(RunLog(early)) == []


def test_round_trip_through_a_real_server(tmp_path, s3_url):
    log, _ = world(str(tmp_path / "a"))
    s3 = Store.open(s3_url, create=True)
    rep = transfer(log.store, s3)
    assert rep.landed == ["A", "B", "C"] and rep.conflicts == []
    assert transfer(log.store, Store.open(s3_url)).entries == 0
    back = Store.init(str(tmp_path / "b"))
    transfer(Store.open(s3_url), back)
    for st in (Store.open(s3_url), back):
        assert objects(st) == objects(log.store)
        assert run_refs(st) == run_refs(log.store)
        assert verify(RunLog(st)) == []


def _writer(store, run, n):
    """tests/lifecycle/transfer_writer.py in its own process: RUN started if absent, N attempts appended."""
    return subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "transfer_writer.py"), store, run, str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_pushes_while_another_process_appends_to_the_source_catch_up(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    target = fake_s3(tmp_path)
    p = _writer(str(tmp_path / "a"), "A", 150)
    pushes = 0
    while p.poll() is None or pushes == 0:
        rep = transfer(Store.open(str(tmp_path / "a")), target)  # each push: the source at some instant, per run
        assert rep.conflicts == [] and rep.erased == []
        pushes += 1
    out, err = p.communicate()
    assert p.returncode == 0 and out.split() == [b"done", b"150"], err
    transfer(Store.open(str(tmp_path / "a")), target)
    src = Store.open(str(tmp_path / "a"))
    assert run_refs(target) == run_refs(src) and objects(target) == objects(src)
    assert verify(RunLog(target)) == []


def test_a_push_to_a_real_server_while_another_process_writes_another_run_there(tmp_path, s3_url):
    log, _ = world(str(tmp_path / "a"))
    Store.open(s3_url, create=True)
    p = _writer(s3_url, "W", 60)
    reps = [transfer(log.store, Store.open(s3_url))]
    for i in range(3):  # more to push while W is being written
        log.record_attempt("A", 70 + i, 0, "succeeded")
        reps.append(transfer(log.store, Store.open(s3_url)))
    out, err = p.communicate()
    assert p.returncode == 0 and out.split() == [b"done", b"60"], err
    assert all(r.conflicts == [] and r.erased == [] for r in reps)  # a foreign commit on another run is rebased on, never a conflict
    s3 = Store.open(s3_url)
    got = run_refs(s3)
    assert len(RunLog(s3).records("W")) == 61
    assert {r: v for r, v in got.items() if r != "W"} == run_refs(log.store)
    assert verify(RunLog(s3)) == []


# -- the command line ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_push_and_clone(tmp_path):
    log, _ = world(str(tmp_path / "a"))
    a, mirror, c = str(tmp_path / "a"), str(tmp_path / "mirror"), str(tmp_path / "c")
    _, out, _ = run_cli("push", mirror, store=a, exit_code=0)
    assert "3 run(s) written" in out and "0 conflict(s)" in out
    _, out, _ = run_cli("push", mirror, "--json", store=a, exit_code=0)
    got = json.loads(out)
    assert (got["landed"], got["already"], got["entries"], got["objects"]) == ([], ["A", "B", "C"], 0, 0)
    RunLog(Store.open(mirror)).record_attempt("B", 50, 0, "succeeded")
    log.record_attempt("B", 51, 0, "succeeded")
    log.record_attempt("A", 52, 0, "succeeded")
    _, out, _ = run_cli("push", mirror, "--run", "B", "--run", "A", "--json", store=a, exit_code=7)
    got = json.loads(out)
    assert got["landed"] == ["A"] and [x["run"] for x in got["conflicts"]] == ["B"]
    _, out, _ = run_cli("clone", a, c, exit_code=0)
    assert "3 run(s) written" in out
    assert run_refs(Store.open(c)) == run_refs(log.store)
    run_cli("verify", store=c, exit_code=0)
    _, out, err = run_cli("clone", a, c, "--json", exit_code=5)  # DIR is not empty
    assert json.loads(err)["exit"] == 5
    d = str(tmp_path / "d")
    run_cli("clone", str(tmp_path / "missing"), d, exit_code=3)
    assert not os.path.exists(d)
    _, _, err = run_cli("push", mirror, "--run", "nope", store=a, exit_code=4)
    assert "nope" in err and "Traceback" not in err


def test_cli_clone_of_a_real_server(tmp_path, s3_url):
    world(str(tmp_path / "a"))
    a, c = str(tmp_path / "a"), str(tmp_path / "c")
    _, out, _ = run_cli("push", s3_url, "--json", store=a, exit_code=0)
    assert json.loads(out)["landed"] == ["A", "B", "C"]
    _, out, _ = run_cli("clone", s3_url, c, "--json", exit_code=0)
    assert json.loads(out)["landed"] == ["A", "B", "C"]
    assert codec.HEX_LEN == 64 and run_refs(Store.open(c)) == run_refs(Store.open(a))
    run_cli("verify", store=c, exit_code=0)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4])
def test_a_large_run_is_pushed_in_several_commits_each_a_consistent_prefix(tmp_path, monkeypatch, chunk):
    from objstore.lifecycle import transfer as T

    log, _ = world(str(tmp_path / "a"))
    monkeypatch.setattr(T, "CHUNK_OBJECTS", chunk)
    s3 = fake_s3(tmp_path)
    seen = []
    real = T._Transfer._commit

    landed = []

    def commit(self, commits, run):  # every commit of the split, checked as the target stands after it
        for c in commits:
            n = real(self, [c], run)
            # (a store of logs holds a commit of objects alone in the process until the commit whose record names
            # them, and that one lands them: n 0, then 1)
            assert n == (1 if c[1] or run is None else n) and n in (0, 1) and verify(RunLog(self.dst)) == []
            seen.append(len(c[0]))
            landed.append(n)
        return len(commits)

    monkeypatch.setattr(T._Transfer, "_commit", commit)
    rep = transfer(log.store, s3)
    assert rep.landed == ["A", "B", "C"] and max(seen) <= chunk and entries(s3) == sum(landed) >= 3
    assert objects(s3) == objects(log.store) and run_refs(s3) == run_refs(log.store)
