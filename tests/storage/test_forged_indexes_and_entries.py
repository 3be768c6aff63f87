"""Forged indexes and entries: derived files and entries edited by someone who can recompute checksums (issue 18).

Derived files: a sealed segment's ``.idx`` and the checkpoint's ``active`` index get label rows added, dropped,
renumbered or pointed elsewhere, with their trailing BLAKE3 recomputed so nothing but the log can tell. A sealed
index's digest is named by the log, so a reader rebuilds it: every lookup answers as on the pristine store; the
checkpoint's rows are claims checked against the record they name: a row naming a record that does not carry
the label (or is of another run) changes no answer. verify names exactly the edited file.

Entries written below the API (Store.put / set_ref in a batch: what a forger can write) — labelled-run ids that
do not match, x. records whose schema is missing or another kind's, schema refs moved back, copies whose fork
object lies — are each named by verify with their exact code; the writer refuses what its rules forbid, writing
nothing; readers answer typed errors, never a traceback."""

from __future__ import annotations

import os

import blake3
import msgspec
import pytest
from helpers import log_engine_of, log_files, run_log_root

import objstore
from objstore.errors import ObjstoreError, Refused
from objstore.storage import labels as SL
from objstore.storage.log import local_write, segindex


def _fill(root):
    """Two labelled runs; T has two records labelled C (the newer is b), U one; unlabelled padding."""
    log = objstore.open_store(root)
    t = log.start_run(labels={"thread_id": "T", "ns": ""})
    u = log.start_run(labels={"thread_id": "U", "ns": ""})
    a = log.append(t, "attempt", {"step": 0, "attempt": 0, "state": "running"}, labels={"checkpoint_id": "C"})
    b = log.append(t, "attempt", {"step": 0, "attempt": 1, "state": "running"}, labels={"checkpoint_id": "C", "w": "1"})
    c = log.append(u, "attempt", {"step": 0, "attempt": 0, "state": "running"}, labels={"checkpoint_id": "C"})
    plain = log.record_attempt(t, 1, 0, "succeeded")
    return log, t, u, a, b, c, plain


def _answers(root, t, u):
    log = objstore.open_store(root)
    rec = log.find_record(t, checkpoint_id="C")
    return {
        "find_records T C": [r.id for r in log.find_records(t, checkpoint_id="C")],
        "find_record T C": rec.id if rec else None,
        "find_records T w": [r.id for r in log.find_records(t, w="1")],
        "find_records U C": [r.id for r in log.find_records(u, checkpoint_id="C")],
        "find_records T D": [r.id for r in log.find_records(t, checkpoint_id="D")],
        "find_runs T": log.find_runs(thread_id="T"),
        "find_runs U": log.find_runs(thread_id="U"),
        "find_runs ns": log.find_runs(ns=""),
        "find_run T": log.find_run(thread_id="T", ns=""),
        "iter T labels": [r.id for r in log.iter_records(t, labels={"checkpoint_id": "C"})],
    }


def _forge(rows, mode, t, u, a, b, c, plain, run_started):
    """The index's chain and label rows (key, n, id) with one forgery applied."""
    kc = SL.key(t, "checkpoint_id", "C")
    out = list(rows)
    if mode == "point at a record without the label":
        out.append((SL.key(t, "checkpoint_id", "D"), 10**6, plain.id))
        out.append((kc, 10**6, plain.id))
    elif mode == "point at another run's record":
        out.append((kc, 10**6, c.id))
    elif mode == "store-scope label at another run":
        out.append((SL.key("", "thread_id", "T"), 10**6, run_started[u]))
    elif mode == "drop the newest row":
        out = [r for r in rows if not (r[0] == kc and r[2] == b.id)]
    elif mode == "renumber the older row":
        out = [(k, 10**6, oid) if (k == kc and oid == a.id) else (k, n, oid) for k, n, oid in rows]
    elif mode == "drop a run's store-scope row":
        out = [r for r in rows if r[0] != SL.key("", "thread_id", "T")]
    assert out != list(rows), "the forgery changed nothing: the rows it edits are not in this index"
    return out


SEALED_MODES = ["point at a record without the label", "point at another run's record", "store-scope label at another run",
                "drop the newest row", "renumber the older row", "drop a run's store-scope row"]


@pytest.mark.parametrize("packed", [False, True], ids=["sealed", "packed by gc"])
@pytest.mark.parametrize("mode", SEALED_MODES)
def test_a_forged_sealed_index_changes_no_answer_and_verify_names_it(tmp_path, monkeypatch, mode, packed):
    monkeypatch.setattr(local_write, "SEAL_BYTES", 4096)
    root = str(tmp_path / "s")
    log, t, u, a, b, c, plain = _fill(root)
    # T's log (the store's one log before format 6) holds T's labelled records and T's store-scope label rows
    logdir = os.path.join(run_log_root(root, t), "log")
    for i in range(30):  # seal the segment holding the labelled records
        log.record_attempt(t, 1, i, "succeeded", output=log.put_blob(os.urandom(300)))
    if packed:
        from objstore.lifecycle.gc import gc

        gc(log.store)
        with open(os.path.join(logdir, "0000000001.seg"), "rb") as f:
            assert f.read(4) == b"OSPK"
    truth = _answers(root, t, u)
    assert truth["find_record T C"] == b.id and truth["find_records T C"] == [b.id, a.id]
    path = os.path.join(logdir, "0000000001.idx")
    idx = segindex.load(path, 1)
    assert any(r[2] == b.id for r in idx.chain_rows() if r[0] == SL.key(t, "checkpoint_id", "C")), "the labelled records are sealed"
    started = {r: log.run_started(r).id for r in (t, u)}
    rows = _forge(list(idx.chain_rows()), mode, t, u, a, b, c, plain, started)
    data = segindex.build(1, idx.first, idx.last, idx.checksum, list(idx.object_rows()), rows)
    del idx
    with open(path, "wb") as f:
        f.write(data)
    assert segindex.load(path, 1).check_sum()  # its own checksum holds: only the log's digest tells
    assert _answers(root, t, u) == truth
    problems = objstore.verify(objstore.open_store(root))
    assert [(p.code, p.subject) for p in problems] == [("damaged-index", path)], problems


def _rewrite_checkpoint(log_root, fn):
    """Rewrite the checkpoint of the log at ``log_root`` (helpers.run_log_root / store_log_root)."""
    path = os.path.join(log_root, "log", "checkpoint")
    with open(path, "rb") as f:
        data = f.read()
    m = msgspec.msgpack.decode(data[:-32])
    idx = segindex.SegmentIndex(m["active"], m["seg"])
    m["active"] = segindex.build(m["seg"], idx.first, idx.last, idx.checksum, list(idx.object_rows()), fn(list(idx.chain_rows())))
    body = msgspec.msgpack.encode(m)
    with open(path, "wb") as f:
        f.write(body + blake3.blake3(body).digest())
    return path


# "drop the newest row" / "renumber the older row" / "drop a run's store-scope row": see tests/adv18_failing.py
CHECKPOINT_MODES = ["point at a record without the label", "point at another run's record", "store-scope label at another run"]


@pytest.mark.parametrize("mode", CHECKPOINT_MODES)
def test_a_forged_checkpoint_label_row_changes_no_answer_and_verify_names_it(tmp_path, monkeypatch, mode):
    monkeypatch.setattr(local_write, "CHECKPOINT_ENTRIES", 5)
    root = str(tmp_path / "s")
    log, t, u, a, b, c, plain = _fill(root)
    for i in range(4):  # T's log (the store's one log before format 6) writes its checkpoint
        log.record_attempt(t, 1, i, "succeeded")
    assert os.path.exists(os.path.join(run_log_root(root, t), "log", "checkpoint"))
    truth = _answers(root, t, u)
    started = {r: log.run_started(r).id for r in (t, u)}
    path = _rewrite_checkpoint(run_log_root(root, t), lambda rows: _forge(rows, mode, t, u, a, b, c, plain, started))
    fresh = objstore.open_store(root)
    assert log_engine_of(fresh.store, t).tables.frozen is not None, "the forged checkpoint is adopted (its tables hash to the log's root)"
    assert _answers(root, t, u) == truth
    problems = objstore.verify(objstore.open_store(root))
    assert [(p.code, p.subject) for p in problems] == [("damaged-checkpoint", path)], problems


# -- entries written below the API ------------------------------------------------------------------------------------
SB = {"subject": "default", "workflow_version": "1", "meta": None}
FIELDS = [["a", "str", True, False], ["r", "id", False, True]]


def _started(run, labels=None, parent=None):
    p = {"run": run, "branch": 0, "lsn": 0, "parent": parent, "kind": "run_started", "time": 1.0, "body": SB}
    if labels is not None:
        p["labels"] = labels
    return p


def _base(root):
    log = objstore.open_store(root)
    src = log.start_run(labels={"thread_id": "S"})
    recs = [log.record_attempt(src, i, 0, "succeeded") for i in range(3)]
    sid = log.register_kind("x.t.k", FIELDS)
    other = log.register_kind("x.t.other", [["a", "str", True, False]])
    return log, src, recs, sid, other


def _fork(run, src, lsn, record, head, branch=0, **extra):
    fk = {"run": run, "branch": branch, "parent_branch": 0, "parent_lsn": lsn, "parent_record": record, "parent_head": head,
          "reason": "forged", "compensation": [], "time": 1.0}
    if src is not None:
        fk["parent_run"] = src
    fk.update(extra)
    return fk


def _x_record(st, src, head, **p):
    payload = {"run": src, "branch": 0, "lsn": 4, "parent": head, "kind": "x.t.k", "time": 1.0, "body": {"a": "v"}}
    payload.update(p)
    return st.put("record", payload)


def _forge_entry(log, src, recs, sid, other, case):
    """Write one forged entry; returns the id verify must name, and (run, head ref) moved."""
    st = log.store
    head = log.view(src).heads[0]
    if case in ("copy naming another run's record", "branch-1 fork naming another run"):
        o2 = log.start_run("o2")  # another run, written before the forgery (a batch writes one run's log)
        r2 = log.record_attempt(o2, 0, 0, "succeeded")
    with st.batch():
        if case == "x record without a schema field":
            oid = _x_record(st, src, head)
            st.set_ref(f"run/{src}/branch/0", head, oid, "forged")
            return oid
        elif case.startswith("x record"):
            run = src
            schema = {"x record, schema not stored": b"\x07" * 32, "x record, schema is a blob": st.put_blob(b"not a schema"),
                      "x record, schema of another kind": other, "x record, body does not fit": sid,
                      "x record, ref not stored": sid}[case]
            body = {"x record, body does not fit": {"a": 5}, "x record, ref not stored": {"a": "v", "r": b"\x09" * 32}}.get(case, {"a": "v"})
            oid = _x_record(st, src, head, schema=schema, body=body)
            st.set_ref(f"run/{src}/branch/0", head, oid, "forged")
            return oid
        elif case == "copy naming a record not at that place":
            run = "cp"
            fid = st.put("fork", _fork(run, src, 1, recs[2].id, recs[-1].id))
            oid = st.put("record", _started(run, parent=fid))
            st.set_ref(f"run/{run}/branch/0", None, oid, "forged")
            return fid
        elif case == "copy naming another run's record":
            fid = st.put("fork", _fork("cp", src, 1, r2.id, recs[-1].id))
            oid = st.put("record", _started("cp", parent=fid))
            st.set_ref("run/cp/branch/0", None, oid, "forged")
            return fid
        elif case == "copy of a run that does not exist":
            fid = st.put("fork", _fork("cp", "nosuch", 1, recs[0].id, recs[-1].id))
            oid = st.put("record", _started("cp", parent=fid))
            st.set_ref("run/cp/branch/0", None, oid, "forged")
            return fid
        elif case == "copy of itself":
            fid = st.put("fork", _fork("cp", "cp", 0, recs[0].id, recs[-1].id))
            oid = st.put("record", _started("cp", parent=fid))
            st.set_ref("run/cp/branch/0", None, oid, "forged")
            return fid
        elif case == "copy with compensation flags":
            fid = st.put("fork", _fork("cp", src, 1, recs[0].id, recs[-1].id,
                                       compensation=[{"intent": "i", "committed_record": recs[1].id, "step": 0}]))
            oid = st.put("record", _started("cp", parent=fid))
            st.set_ref("run/cp/branch/0", None, oid, "forged")
            return fid
        elif case == "branch-0 run_started with a plain fork parent":
            fid = st.put("fork", _fork("cp", None, 1, recs[0].id, recs[-1].id))
            oid = st.put("record", _started("cp", parent=fid))
            st.set_ref("run/cp/branch/0", None, oid, "forged")
            return fid
        elif case == "branch-1 fork naming another run":
            fid = st.put("fork", _fork(src, "o2", 1, r2.id, r2.id, branch=1))
            st.set_ref(f"run/{src}/branch/1", None, fid, "forged")
            return fid
        else:
            raise AssertionError(case)
        st.set_ref(f"run/{run}/branch/0", None, oid, "forged")
    return oid


# A labelled run whose labels do not give its id (an l- run without labels, a generation with a leading zero, a
# plain run with labels) breaks a rule of applying its entry: tests/storage/test_forged_entries_refused_on_read.py.
ENTRY_CASES = {
    "x record, schema not stored": "malformed-object",
    "x record, schema is a blob": "malformed-object",
    "x record, schema of another kind": "malformed-object",
    "x record, body does not fit": "malformed-object",
    "x record without a schema field": "malformed-object",
    "x record, ref not stored": "missing-object",
    "copy naming a record not at that place": "bad-fork",
    "copy naming another run's record": "bad-fork",
    "copy of a run that does not exist": "bad-fork",
    "copy of itself": "bad-fork",
    "copy with compensation flags": "bad-fork",
    "branch-0 run_started with a plain fork parent": "bad-fork",
    "branch-1 fork naming another run": "bad-fork",
}


def _readers_never_crash(root):
    """Every reader on every run answers or raises a typed error."""
    log = objstore.open_store(root)
    for run in log.runs():
        readers = (lambda r: log.records(r, all_branches=True), lambda r: list(log.iter_records(r, all_branches=True)),
                   lambda r: [list(log.iter_lineage(log.view(r), b)) for b in log.view(r).heads],
                   lambda r: objstore.episode(log, r), lambda r: log.run_labels(r),
                   lambda r: log.state.state(log, log.view(r), log.view(r).live),
                   lambda r: log.find_runs(thread_id="S"), lambda r: log.find_run(thread_id="Q"),
                   lambda r: log.find_records(r, checkpoint_id="C"))
        for fn in readers:
            try:
                fn(run)
            except ObjstoreError:
                pass


@pytest.mark.parametrize("case", list(ENTRY_CASES))
def test_a_forged_entry_is_named_with_its_code_and_readers_never_crash(tmp_path, case):
    root = str(tmp_path / "s")
    log, src, recs, sid, other = _base(root)
    assert objstore.verify(log) == []
    subject = _forge_entry(log, src, recs, sid, other, case)
    problems = objstore.verify(objstore.open_store(root))
    want = ENTRY_CASES[case]
    hits = [p for p in problems if p.subject in (subject.hex(), "0909" * 16)]
    assert [p.code for p in hits if p.code == want], (want, problems)
    # nothing but the forged object's problem and what follows from it (a ref to a damaged object, a missing ref)
    assert {p.code for p in problems} <= {want, "damaged-ref", "broken-chain", "missing-object"}, problems
    _readers_never_crash(root)
    if case == "l- run whose labels give another id":
        assert objstore.open_store(root).find_runs(thread_id="other") == []  # the forged run is not an answer


@pytest.mark.parametrize("case", ["back to its predecessor", "to a blob", "to a schema naming another predecessor", "to a schema stored earlier"])
def test_a_schema_ref_moves_only_forward_and_a_refused_move_writes_nothing(tmp_path, case):
    root = str(tmp_path / "s")
    log, src, recs, sid, other = _base(root)
    v2 = log.register_kind("x.t.k", [["a", "str", True, False]])
    st = log.store
    before = log_files(root)  # every log's files (schema refs are the store log's; a record is its run's log's)
    with pytest.raises(Refused):
        with st.batch():
            if case == "back to its predecessor":
                st.set_ref("schema/x.t.k", v2, sid, "back")
            elif case == "to a blob":
                st.set_ref("schema/x.t.k", v2, st.put_blob(b"not a schema"), "blob")
            elif case == "to a schema naming another predecessor":
                new = st.put("schema", {"kind": "x.t.k", "fields": [["z", "int", True, False]], "previous": sid, "time": 2.0})
                st.set_ref("schema/x.t.k", v2, new, "f")
            else:
                st.set_ref("schema/x.t.k", v2, other, "f")
    assert log_files(root) == before
    assert objstore.open_store(root).schema_of("x.t.k")[0] == v2
    assert objstore.verify(objstore.open_store(root)) == []


@pytest.mark.parametrize("labels", [{"a": 1}, {}, {"": "v"}, [["a", "b"]], {f"k{i}": "v" for i in range(17)}, {"a": "x" * 1025},
                                    {"a": None}], ids=["int value", "empty", "empty name", "a list", "17", "1025 chars", "None"])
def test_a_record_whose_labels_are_no_label_set_is_refused_below_the_api(tmp_path, labels):
    """Its index row cannot carry them, so the entry has no row for the record: the writer refuses, nothing written."""
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    run = log.start_run("r")
    st = log.store
    head = log.view(run).heads[0]
    before = log_files(root)  # every log's files (schema refs are the store log's; a record is its run's log's)
    with pytest.raises(Refused):
        with st.batch():
            oid = st.put("record", {"run": run, "branch": 0, "lsn": 1, "parent": head, "kind": "attempt", "time": 1.0,
                                    "body": {"step": 0, "attempt": 0, "state": "running"}, "labels": labels})
            st.set_ref(f"run/{run}/branch/0", head, oid, "forged")
    assert log_files(root) == before
    assert objstore.verify(objstore.open_store(root)) == []
