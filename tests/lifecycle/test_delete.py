"""Recorded deletion (issue 17), the library side: deleted runs vanish from every query at once, in this
process and in a fresh one; records covered by a partial deletion fold header-only, the same bytes from
the state cache and from a cold re-fold; who may delete is decided by signatures and delete grants, and
a refusal writes nothing; verify names a forged deletion.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest
from helpers import is_per_run, log_engine_of, log_files, new_key, state_db_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.errors import (
    BranchNotFound,
    CorruptLog,
    Deleted,
    InvalidInput,
    ObjectNotFound,
    Redacted,
    Refused,
    RunNotFound,
    Unauthenticated,
)
from objstore.journal import grants as G
from objstore.lifecycle import delete as D
from objstore.runs import completion, export, history, query, views
from objstore.runs import records as R
from objstore.runs.resolve import resolve_run
from objstore.runs.verify import assert_refold_identical, verify, verify_report
from objstore.storage import codec, identity, runrefs
from objstore.storage.log.craft import encode_next


def _log_files(root):
    """Every file of the logs (what a commit writes), byte for byte."""
    return log_files(root)


@pytest.fixture
def world(tmp_path):
    """Two runs of subject alice, one of bob; A has a fork (branch 1) from LSN 2. The owner key exists."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    for run, subject in (("A", "alice"), ("B", "alice"), ("C", "bob")):
        log.start_run(run, subject=subject)
        p = log.put_blob(f"prompt of {run}".encode())
        for i in range(5):
            log.record_attempt(run, i, 0, "failed" if i == 1 else "succeeded", prompt=p, context={"i": i})
    log.rewind("A", 2, reason="try again")
    for i in range(3):
        log.record_attempt("A", 10 + i, 0, "succeeded")
    return root, log, owner


def _reads(log, run):
    """Every way a run is read by name: each raises Deleted once the run is deleted."""
    return {
        "view": lambda: log.view(run),
        "episode": lambda: query.episode(log, run),
        "episode refold": lambda: query.episode(log, run, source="refold"),
        "diff": lambda: query.diff(log, run, 0, 0),
        "export": lambda: export.export(log, run),
        "log": lambda: list(history.entries(log, log.view(run))),
        "records": lambda: log.records(run),
        "run_started": lambda: log.run_started(run),
        "fork": lambda: log.fork(run, 0, 1),
    }


def test_a_deleted_run_vanishes_from_every_listing_and_query_at_once(world):
    root, log, _owner = world
    assert resolve_run(log, "latest") == "C"
    did = D.delete_run(log, "C", reason="customer asked")
    # listings: the run is gone, 'latest' is the run started before it
    assert log.runs() == ["A", "B"]
    assert [r["run"] for r in views.runs(log)] == ["A", "B"]
    assert resolve_run(log, "latest") == "B"
    assert completion.runs(log.store, "") == ["A", "B", "latest"]
    with pytest.raises(RunNotFound):
        resolve_run(log, "latest~2")
    # naming it: Deleted, exit 12, the deletion's id and reason, for every read and write
    for what, read in _reads(log, "C").items():
        with pytest.raises(Deleted) as e:
            read()
        assert e.value.exit_code == 12, what
        assert str(e.value) == f"run C was deleted ({did.hex()}): customer asked", what
    files = _log_files(root)
    with pytest.raises(Refused, match="run C is deleted: no record is appended to it"):  # the log's rule, for any writer
        log.record_attempt("C", 99, 0, "succeeded")
    assert _log_files(root) == files
    assert resolve_run(log, "C") == "C"  # an exact id still names it (to say it was deleted)
    # the other runs read as before, and the store verifies
    assert query.episode(log, "A").to_json() == query.episode(log, "A", source="refold").to_json()
    assert verify(log) == []
    # a fresh process sees the same
    code = ("import sys; from objstore import RunLog, Store; from objstore.errors import Deleted\n"
            "log = RunLog(Store.open(sys.argv[1])); print(log.runs())\n"
            "try:\n    log.view('C')\nexcept Deleted as e:\n    print(e.exit_code, e)\n")
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["['A', 'B']", f"12 run C was deleted ({did.hex()}): customer asked"]


def test_delete_runs_is_one_entry_and_deleting_again_writes_nothing(world):
    root, log, _owner = world
    if is_per_run(root):  # a log per run: one commit in each run's own log, none in the store log
        before = {r: log_engine_of(log.store, r).refresh().entry for r in (None, "B", "C")}
        ids = D.delete_runs(log, ["B", "C"], reason="retention")
        assert {r: log_engine_of(log.store, r).refresh().entry for r in (None, "B", "C")} == {None: before[None], "B": before["B"] + 1, "C": before["C"] + 1}
        assert log.store.logs.catalog.is_deleted("B") and log.store.logs.catalog.is_deleted("C")
    else:
        before = log.store.engine.refresh().entry
        ids = D.delete_runs(log, ["B", "C"], reason="retention")
        assert log.store.engine.refresh().entry == before + 1  # one commit for both
    assert [D.deletion_of(log.store, r)[0] for r in ("B", "C")] == ids
    assert D.deleted_runs(log.store) == {"B": ids[0], "C": ids[1]}
    files = _log_files(root)
    assert D.delete_runs(log, ["C", "B"], reason="again") == [ids[1], ids[0]]  # no-op: the existing ones
    assert _log_files(root) == files
    for did, run in zip(ids, ("B", "C"), strict=True):
        v = log.store.get_typed(did, codec.DELETION)
        assert {k: v[k] for k in ("v", "scope", "run", "records", "blob", "reason", "grant", "previous")} == {
            "v": 1, "scope": "run", "run": run, "records": None, "blob": None, "reason": "retention", "grant": None, "previous": None}
        assert v["by"] == identity.owner_public(log.store)
        assert identity.verify_sig(v["by"], v["sig"], identity.object_message(v))


def test_the_state_cache_drops_a_deleted_runs_rows(world):
    root, log, _owner = world
    for run in ("A", "B", "C"):
        query.episode(log, run, all_branches=True)
    db_a, db_b = (sqlite3.connect(state_db_path(root, r)) for r in ("A", "B"))  # one file on one log, two with a log per run
    assert db_b.execute("SELECT count(*) FROM branch WHERE run='B'").fetchone()[0] == 1
    D.delete_run(log, "B", reason="gone")
    for table in ("branch", "recs"):
        assert db_b.execute(f"SELECT count(*) FROM {table} WHERE run='B'").fetchone()[0] == 0, table
        assert db_a.execute(f"SELECT count(*) FROM {table} WHERE run='A'").fetchone()[0] > 0, table


def _middle(log, run, branch, lsn):
    return log.record_at(log.view(run), branch, lsn)


def test_a_deleted_middle_record_folds_header_only_and_state_equals_refold_byte_for_byte(world):
    root, log, _owner = world
    full = log.refold(log.view("A"), 0)
    before = query.episode(log, "A", all_branches=True).to_json()  # the cache holds both branches now
    rid = _middle(log, "A", 0, 2)  # LSN 2: the failed attempt of step 1, inherited by branch 1 too
    did = D.delete_records(log, "A", [rid], reason="wrong upload")
    got = query.episode(log, "A", all_branches=True)
    cold = query.episode(log, "A", all_branches=True, source="refold")
    assert got.to_json() == cold.to_json()
    assert got.to_json() != before
    folded = log.refold(log.view("A"), 0)
    # it keeps its place (records counted) and contributes nothing else
    assert folded["records"] == full["records"]
    assert folded["attempts"] == full["attempts"] - 1 and folded["failed_attempts"] == full["failed_attempts"] - 1
    assert "1" not in folded["steps"]
    assert [a["step"] for a in got.attempts(0)] == [0, 2, 3, 4]
    # state == re-fold for every branch, rows confirmed against the log (what verify checks too)
    assert_refold_identical(log, "A")
    assert verify(log) == []
    # views show it as deleted, with the deletion's id; its neighbours are untouched
    recs = {r.lsn: r for r in log.records("A", 0)}
    assert recs[2].body == {"deleted": did} and recs[2].kind == "attempt" and recs[2].time is None
    assert recs[2].parent == recs[1].id and recs[3].parent == rid
    assert views.record(recs[2])["body"] == {"deleted": did.hex()}
    assert history.summary(recs[2]) == f"deleted ({did.hex()[:12]})"
    assert export.export(log, "A")  # branch 1 is live; its lineage is folded header-only too
    with pytest.raises(Deleted, match=f"record {rid.hex()} was deleted \\({did.hex()}\\): wrong upload"):
        log.store.get(rid)


def test_the_cache_notices_a_deletion_made_by_another_process(world, tmp_path):
    root, log, _owner = world
    warm = query.episode(log, "B").to_json()  # this process's cache rows reflect B before the deletion
    rid = _middle(log, "B", 0, 4)  # step 3
    code = ("import sys; from objstore import RunLog, Store; from objstore.lifecycle import delete as D\n"
            "log = RunLog(Store.open(sys.argv[1])); D.delete_records(log, 'B', [bytes.fromhex(sys.argv[2])], reason='other process')\n"
            "D.delete_run(log, 'C', reason='other process')\n")
    subprocess.run([sys.executable, "-c", code, root, rid.hex()], check=True, env=dict(os.environ))
    got = query.episode(log, "B").to_json()  # the same RunLog, the same cache file
    assert got != warm
    assert got == query.episode(log, "B", source="refold").to_json()
    assert [a["step"] for a in query.episode(log, "B").attempts()] == [0, 1, 2, 4]
    with pytest.raises(Deleted):
        query.episode(log, "C")
    assert log.runs() == ["A", "B"]


def test_delete_branch_from_covers_the_branch_to_its_head_and_appends_go_on(world):
    root, log, _owner = world
    did = D.delete_branch_from(log, "A", 1, 1, reason="leaked key")
    v = log.store.get_typed(did, codec.DELETION)
    view = log.view("A")
    own = log.records("A", 1)
    assert v["records"] == [[r.id, 1, r.lsn, r.kind] for r in own if r.lsn >= 1]
    assert [r.lsn for r in own if R.deleted_by(r) == did] == [1, 2]
    assert v["previous"] is None and view.deletions == did
    files = _log_files(root)
    assert D.delete_branch_from(log, "A", 1, 1, reason="again") is None  # all deleted already: nothing written
    assert _log_files(root) == files
    log.record_attempt("A", 20, 0, "succeeded")  # the branch goes on after its header-only records
    assert [a["step"] for a in query.episode(log, "A").attempts()] == [10, 20]
    assert query.episode(log, "A").to_json() == query.episode(log, "A", source="refold").to_json()
    # a second partial deletion chains behind the first
    did2 = D.delete_records(log, "A", [_middle(log, "A", 0, 3)], reason="second")
    assert log.store.get_typed(did2, codec.DELETION)["previous"] == did
    assert verify(log) == []


@pytest.mark.parametrize("call,error", [
    (lambda log: D.delete_run(log, "nope", reason="x"), RunNotFound),
    (lambda log: D.delete_run(log, "A", reason=""), InvalidInput),
    (lambda log: D.delete_run(log, "A", reason="   "), InvalidInput),
    (lambda log: D.delete_runs(log, [], reason="x"), InvalidInput),
    (lambda log: D.delete_runs(log, ["A", "A"], reason="x"), InvalidInput),
    (lambda log: D.delete_records(log, "A", [b"\x01" * 32], reason="x"), ObjectNotFound),
    (lambda log: D.delete_records(log, "A", [_middle(log, "B", 0, 1)], reason="x"), InvalidInput),
    (lambda log: D.delete_records(log, "A", [_middle(log, "A", 0, 0)], reason="x"), InvalidInput),  # run_started: delete the run
    (lambda log: D.delete_branch_from(log, "A", 0, 99, reason="x"), InvalidInput),
    (lambda log: D.delete_branch_from(log, "A", 7, 0, reason="x"), BranchNotFound),
    (lambda log: D.redact(log, _middle(log, "A", 0, 1), reason="x"), InvalidInput),  # a record is not a blob
    (lambda log: D.redact(log, b"\x02" * 32, reason="x"), ObjectNotFound),
])
def test_bad_input_is_a_typed_error_and_writes_nothing(world, call, error):
    root, log, _owner = world
    files = _log_files(root)
    with pytest.raises(error) as e:
        call(log)
    assert e.value.exit_code in (4, 5)
    assert _log_files(root) == files


def test_an_unsigned_deletion_is_refused_where_an_owner_key_exists(world, tmp_path, monkeypatch):
    root, log, _owner = world
    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "no-keys-here"))  # no default key: nothing to sign with
    files = _log_files(root)
    for call in (lambda: D.delete_run(log, "A", reason="x"), lambda: D.delete_records(log, "A", [_middle(log, "A", 0, 1)], reason="x"),
                 lambda: D.redact(log, log.put_blob(b"prompt of A"), reason="x")):
        with pytest.raises(Unauthenticated) as e:
            call()
        assert e.value.exit_code == 8
    assert _log_files(root) == files
    assert log.runs() == ["A", "B", "C"]


def test_a_store_without_an_owner_key_takes_unsigned_deletions(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    log.start_run("X")
    did = D.delete_run(log, "X", reason="no owner here")
    v = log.store.get_typed(did, codec.DELETION)
    assert (v["by"], v["sig"], v["grant"]) == (None, None, None)
    assert verify(log) == []


@pytest.mark.parametrize("scope", ["run", "subject"])
def test_a_key_with_a_delete_grant_may_delete_and_a_revoked_one_may_not(world, tmp_path, scope):
    root, log, owner = world
    w, _ = new_key(tmp_path, "w")
    run, subject = ("B", None) if scope == "run" else (None, "alice")  # B is alice's
    gid = G.grant(log, owner, run, w.public, subject=subject, rights=["delete"], name="deleter")
    did = D.delete_records(log, "B", [_middle(log, "B", 0, 2)], reason="by a granted key", key=w)
    v = log.store.get_typed(did, codec.DELETION)
    assert (v["by"], v["grant"]) == (w.public, gid)
    assert verify(log) == []
    files = _log_files(root)
    with pytest.raises(Refused, match="holds no live 'delete' grant"):
        D.delete_run(log, "C", reason="bob's run", key=w)  # not in the grant's scope
    assert _log_files(root) == files
    G.revoke(log, owner, run, w.public, subject=subject, reason="fired")
    files = _log_files(root)
    with pytest.raises(Refused, match="holds no live 'delete' grant") as e:
        D.delete_run(log, "B", reason="after revocation", key=w)
    assert e.value.exit_code == 8
    assert _log_files(root) == files
    assert log.runs() == ["A", "B", "C"]
    assert verify(log) == []  # the deletion made before the revocation still verifies (judged at its entry)


def test_a_run_delete_grant_reaches_only_its_run_and_read_write_grants_do_not_delete(world, tmp_path):
    root, log, owner = world
    w, _ = new_key(tmp_path, "w")
    G.grant(log, owner, "A", w.public, name="journal worker")  # read and write: the default, no delete
    files = _log_files(root)
    with pytest.raises(Refused):
        D.delete_run(log, "A", reason="x", key=w)
    gid = G.grant(log, owner, "A", w.public, rights=["delete"], name="deleter")
    files = _log_files(root)
    with pytest.raises(Refused):
        D.delete_run(log, "B", reason="x", key=w)
    assert _log_files(root) == files
    did = D.delete_run(log, "A", reason="granted", key=w)
    v = log.store.get_typed(did, codec.DELETION)
    assert (v["by"], v["grant"]) == (w.public, gid)
    with pytest.raises(Refused, match="a redaction is signed by the store's owner key"):
        D.redact(log, log.put_blob(b"prompt of B"), reason="x", key=w)
    assert verify(log) == []


def _forge(log, obj, moves):
    """Append a checksum-valid entry carrying ``obj`` (a deletion) and ``moves``, built as a writer
    builds it (engine.encode_next: index rows, rules, root), to the end of the active segment of the
    log the first move's ref lives in (a run's own log with a log per run)."""
    eng = log_engine_of(log.store, runrefs.run_of(moves[0][0]))
    eng.refresh()
    canon = codec.encode(codec.DELETION, obj)
    did = codec.object_id(canon)
    moves = [[m[0], m[1], did if m[2] is None else m[2], m[3]] for m in moves]
    seg, off = eng._seg, eng._off
    assert os.path.getsize(eng.seg_path(seg)) == off
    data, _e = encode_next(eng.tables, time.time(), [(did, codec.DELETION, canon)], moves, seg=seg, off=off)
    with open(eng.seg_path(seg), "ab") as f:
        f.write(data)
    return did


def _signed(key, **fields):
    obj = {"v": 1, "scope": "run", "run": None, "records": None, "blob": None, "reason": "forged", "time": time.time(),
           "by": key.public, "grant": None, "previous": None, "sig": None}
    obj.update(fields)
    obj["sig"] = key.sign(identity.object_message(obj))
    return obj


def _breach(root, did):
    """A fresh reader stops before the forged deletion's entry (the authority rule is a rule of
    applying an entry: objstore.storage.authority); verify names it ``bad-deletion`` there: the
    problems' details, after the entry's place."""
    with pytest.raises(CorruptLog, match=f"bad-deletion {did.hex()}"):
        RunLog(Store.open(root)).runs()
    report = verify_report(RunLog(Store.open(root, readable_prefix=True)))
    return [(p.code, p.detail.split(f"bad-deletion {did.hex()}: ", 1)[1]) for p in report.problems]


def test_verify_names_a_forged_deletion_signed_by_a_key_that_is_not_the_owners(world, tmp_path):
    root, log, _owner = world
    stranger = identity.generate()
    n = log_engine_of(log.store, "B").position().entry + 1
    did = _forge(log, _signed(stranger, run="B"), [[runrefs.deleted_ref("B"), None, None, "forged deletion"]])
    assert _breach(root, did) == [("bad-deletion", f"its signer {stranger.public[:16]}… held no live delete grant on run B at entry {n} "
                                   f"({runrefs.deleted_ref('B')})")]


def test_verify_names_a_deletion_whose_rows_are_not_the_logs(world):
    root, log, owner = world
    rid = _middle(log, "A", 0, 1)
    obj = _signed(owner, scope="records", run="A", records=[[rid, 0, 2, "attempt"]])  # LSN 2 is another record
    did = _forge(log, obj, [[runrefs.deletions_ref("A"), None, None, "forged rows"]])
    assert _breach(root, did) == [("bad-deletion", f"covers {rid.hex()} as run A branch 0 LSN 2, which the log's index does not hold there"
                                   f" ({runrefs.deletions_ref('A')})")]


def test_verify_names_an_edited_signature(world):
    root, log, owner = world
    obj = _signed(owner, run="B")
    obj["reason"] = "edited after signing"
    did = _forge(log, obj, [[runrefs.deleted_ref("B"), None, None, "edited"]])
    assert _breach(root, did) == [("bad-deletion", f"its signature does not verify against its signer {owner.public[:16]}… "
                                   f"({runrefs.deleted_ref('B')})")]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 9), fork_at=st.integers(0, 8), picks=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 12)), max_size=4))
def test_state_equals_refold_with_any_deleted_records(tmp_path_factory, n, fork_at, picks):
    """Any records of either branch deleted (in one or several deletions): the cache's episode, the
    cold re-fold's and verify's fold agree, byte for byte."""
    root = str(tmp_path_factory.mktemp("h") / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("H")
    for i in range(n):
        log.record_attempt("H", i % 3, i, ["succeeded", "failed"][i % 2], usage={"t": i})
    log.fork("H", 0, min(fork_at, n))
    for i in range(3):
        log.record_attempt("H", 7, i, "succeeded", branch=1)
    query.episode(log, "H", all_branches=True)  # warm the cache before deleting
    for b, lsn in picks:
        view = log.view("H")
        head = log.next_of(view.head(b))[0] - 1
        if 0 < lsn <= head or (b == 1 and lsn <= head):
            D.delete_records(log, "H", [log.record_at(view, b, lsn)], reason="hypothesis")
    cached = query.episode(log, "H", all_branches=True).to_json()
    assert cached == query.episode(log, "H", all_branches=True, source="refold").to_json()
    assert_refold_identical(log, "H")
    assert verify(log) == []


def test_a_sessions_deleted_turn_is_header_only_in_compaction_and_context(tmp_path):
    from objstore import journal as J

    log = RunLog(Store.init(str(tmp_path / "s")))
    owner, _ = identity.ensure_owner_key(log.store)
    s = J.start_session(log, "alice", run="S")
    for i in range(4):
        J.record_turn(log, s, "user" if i % 2 == 0 else "model", f"turn {i} secret-{i}")
    D.delete_records(log, "S", [log.record_at(log.view("S"), 0, 2)], reason="turn 1 leaked")  # LSN 2: turn 1
    res = J.compact(log, s, J.StubCompactor(), host=J.LocalJournalHost(log), key=owner, keep_tail=4)
    assert res.segment_id is not None
    texts = [i.get("text") for i in J.context(log, s) if i.get("kind") == "turn"]
    assert texts == ["turn 0 secret-0", "", "turn 2 secret-2", "turn 3 secret-3"]
    assert verify(log) == []


def test_after_gc_the_views_the_fold_and_verify_are_what_they_were(world, tmp_path):
    """Once gc has removed the bodies: header-only records are placed from their deletions' rows and
    the chain index (a forked branch's LSN 0 too), state = re-fold as before, the deleted run and the
    redacted blob still answer with their typed errors, and verify is clean — a subject-granted
    deletion of a run whose run_started is gone included."""
    from objstore.lifecycle import gc as GC

    root, log, owner = world
    w, _ = new_key(tmp_path, "w")
    G.grant(log, owner, None, w.public, subject="alice", rights=["delete"], name="deleter")
    D.delete_branch_from(log, "A", 1, 0, reason="the whole fork")  # LSN 0 of a fork: its parent is the fork object
    D.delete_records(log, "A", [_middle(log, "A", 0, 2)], reason="one attempt")
    D.delete_run(log, "B", reason="by a subject grant", key=w)
    blob = log.put_blob(b"prompt of C")
    D.redact(log, blob, reason="leak")
    before = query.episode(log, "A", all_branches=True).to_json()
    entries = [views.log_entry(e.record, e.fork) for e in history.entries(log, log.view("A"), all_branches=True)]
    GC.gc(log.store)
    fresh = RunLog(Store.open(root))
    assert query.episode(fresh, "A", all_branches=True).to_json() == before
    assert query.episode(fresh, "A", all_branches=True, source="refold").to_json() == before
    assert [views.log_entry(e.record, e.fork) for e in history.entries(fresh, fresh.view("A"), all_branches=True)] == entries
    with pytest.raises(Deleted):
        fresh.view("B")
    with pytest.raises(Redacted):
        fresh.store.get_blob(blob)
    assert fresh.runs() == ["A", "C"]
    report = verify_report(fresh)
    assert report.problems == []
    assert [n.code for n in report.notes if n.code == "redacted"] == ["redacted"]


@pytest.mark.parametrize("what", ["record", "blob"])
def test_verify_names_a_body_gc_removed_that_no_deletion_covers(world, monkeypatch, what):
    """A gc that removed one body too many (here: made to, by widening what it finds doomed) leaves a
    store whose removed body no deletion covers: verify names it ``missing-body``; the covered ones pass."""
    from objstore.lifecycle import gc as GC

    root, log, _owner = world
    D.delete_records(log, "B", [_middle(log, "B", 0, 2)], reason="covered")
    extra = _middle(log, "C", 0, 3) if what == "record" else log.put_blob(b"prompt of C")
    real = GC.doomed

    def wider(store, log=None):  # what goes from each log (a store of a log per run: called once per log)
        d = real(store, log)
        return GC.Doomed(d.records | ({extra} if what == "record" else set()), d.blobs | ({extra} if what == "blob" else set()), d.other)

    monkeypatch.setattr(GC, "doomed", wider)
    GC.gc(log.store)
    problems = verify(RunLog(Store.open(root)))
    assert [(p.code, p.subject) for p in problems if p.code == "missing-body"] == [("missing-body", extra.hex())]
    detail = next(p.detail for p in problems if p.code == "missing-body")
    if what == "blob":
        assert detail.startswith("gc removed the body of this blob, but a live record (")
    else:
        assert detail == "gc removed the body of this record, but no recorded deletion or redaction covers it"


def test_gc_leaves_no_covered_body_in_the_state_cache_file(world):
    """The cache held what a covered record contributed to a folded state (an intent's name) and a
    deleted run's folded state (its run_started meta), both stored uncompressed in state.db; after
    gc (drop_deleted_and_vacuum) neither is in state.db or its WAL, read as raw bytes."""
    from objstore.lifecycle import gc as GC

    root, log, _owner = world
    intent = log.record_intent("A", "SECRET-PARTIAL-7f3a", 50, "email", True)
    log.record_attempt("A", 51, 0, "succeeded")
    log.start_run("D", meta={"secret": "SECRET-RUN-91bc"})
    for run in ("A", "D"):
        query.episode(log, run)
        log.state.state(log, log.view(run), log.view(run).live)

    def cache_bytes():  # every state file of the store (one at the root, or one beside each run's log), and its WAL
        out = b""
        for d, _dirs, names in os.walk(root):
            for n in names:
                if n in ("state.db", "state.db-wal"):
                    with open(os.path.join(d, n), "rb") as f:
                        out += f.read()
        return out

    assert b"SECRET-PARTIAL-7f3a" in cache_bytes() and b"SECRET-RUN-91bc" in cache_bytes()
    D.delete_records(log, "A", [intent.id], reason="secret")
    D.delete_run(log, "D", reason="secret")
    log.state.close()  # gc runs in its own process, as 'objstore gc' would
    GC.gc(log.store)
    data = cache_bytes()
    assert b"SECRET-PARTIAL-7f3a" not in data and b"SECRET-RUN-91bc" not in data
    fresh = RunLog(Store.open(root))
    assert query.episode(fresh, "A").to_json() == query.episode(fresh, "A", source="refold").to_json()
    assert "SECRET-PARTIAL-7f3a" not in fresh.refold(fresh.view("A"), fresh.view("A").live)["intents"]


_DELETER = """
import sys
from objstore import RunLog, Store
from objstore.lifecycle import delete as D
log = RunLog(Store.open(sys.argv[1]))
ids = [bytes.fromhex(h) for h in sys.argv[2].split(",")]
for oid in ids:
    D.delete_records(log, "A", [oid], reason="process " + sys.argv[3])
"""

_APPENDER = """
import sys
from objstore import RunLog, Store
log = RunLog(Store.open(sys.argv[1]))
for i in range(20):
    log.record_attempt("A", 100 + i, 0, "succeeded", branch=0, allow_retained=True)
"""


def test_processes_deleting_records_of_one_run_while_another_appends(world):
    """Three OS processes delete records of run A one at a time while a fourth appends to it: every
    deletion lands (the run's deletions chain serializes them under the writer lock, each naming the
    one before), every append lands, and state = re-fold and verify hold."""
    import subprocess as sp

    root, log, _owner = world
    view = log.view("A")
    targets = [log.record_at(view, 0, lsn) for lsn in (1, 2, 3, 4, 5)] + [log.record_at(view, 1, lsn) for lsn in (0, 1, 2)]
    parts = [targets[0::3], targets[1::3], targets[2::3]]
    procs = [sp.Popen([sys.executable, "-c", _DELETER, root, ",".join(t.hex() for t in part), str(i)]) for i, part in enumerate(parts)]
    procs.append(sp.Popen([sys.executable, "-c", _APPENDER, root]))
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    fresh = RunLog(Store.open(root))
    view = fresh.view("A")
    chain = []
    did = view.deletions
    while did is not None:
        v = fresh.store.get_typed(did, codec.DELETION)
        chain.append(v["records"][0][0])
        did = v["previous"]
    assert sorted(chain) == sorted(targets)  # eight deletions, one chain, none lost
    assert set(fresh.store.covered_records("A", view.deletions)) == set(targets)
    assert fresh.next_of(view.head(0))[0] == 6 + 20  # run_started, five attempts, twenty appended
    assert query.episode(fresh, "A", all_branches=True).to_json() == query.episode(fresh, "A", all_branches=True, source="refold").to_json()
    assert_refold_identical(fresh, "A")
    assert verify(fresh) == []


def test_appending_after_another_process_deleted_the_branch_head(world):
    """A writer whose store has not seen the deletion of its branch's head record still appends: the
    next LSN comes from the deletion's row, never from the body it may no longer read (the race the
    four-process test above hit now and then)."""
    root, _log, _owner = world
    writer = RunLog(Store.open(root))
    view = writer.view("B")
    head = view.head(0)
    other = RunLog(Store.open(root))
    D.delete_records(other, "B", [head], reason="the last answer leaked a key")
    rec = writer.record_attempt("B", 50, 0, "succeeded")
    assert rec.lsn == 6 and rec.parent == head
    assert verify(RunLog(Store.open(root))) == []
