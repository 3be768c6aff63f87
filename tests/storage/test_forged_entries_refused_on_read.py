"""What verify calls forged is not served by readers either (issue 13, item 5).

Where the entry's own index rows decide it — a labelled run's labels give its id, generation g ≥ 1 of a
label set only beside deleted generations 0 … g−1 — it is a rule of applying the entry
(``storage.labels.birth_problem``, called from ``Tables.plan``): a writer refuses it (``Refused``, nothing
written); an entry written past it (the rule patched out of the forger's process) makes every reader stop
before it (exit 6, one line naming the entry) and verify names it.

Where only a body decides it — a record of an ``x.`` kind against the schema its payload names, a schema
object's fields — the read of that record refuses it (``MalformedObject``-style ``IntegrityError``, exit 6 at the
CLI, one line naming it), and listings that show it (``log``, ``episode``) say so by failing the same way.

A copy whose fork object names a record that is not the source's record at that place is refused where the
copy's lineage crosses into the source (one look-up in the source's chain index)."""

from __future__ import annotations

import os

import pytest

import objstore
from objstore.errors import Refused
from objstore.lifecycle.delete import delete_run
from objstore.runs import labels as L
from objstore.storage.log.tables import LogState
from tests.helpers import run_cli


@pytest.fixture(scope="module", autouse=True)
def one_log():
    """Every store here has one log (formats 3 to 5): the forged entries are appended by hand to the log holding
    every run. (On a store with a log per run the generation rule spans two runs' logs: not here yet.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        yield

SB = {"subject": "default", "workflow_version": "1", "meta": None}


def _started(run, labels=None, parent=None):
    p = {"run": run, "branch": 0, "lsn": 0, "parent": parent, "kind": "run_started", "time": 1.0, "body": SB}
    if labels is not None:
        p["labels"] = labels
    return p


def _seg_bytes(root):
    d = os.path.join(root, "log")
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".seg")}


BIRTH_CASES = {
    "labels that do not give the run id": lambda: (L.run_id({"thread_id": "Q"}), {"thread_id": "other"}),
    "an l- run without labels": lambda: (L.run_id({"thread_id": "Q"}), None),
    "a plain run with labels": lambda: ("plain", {"thread_id": "S"}),
    "generation 1 while generation 0 is live": lambda: (L.run_id({"thread_id": "S"}, 1), {"thread_id": "S"}),
}


def _forge_birth(log, case):
    run, labels = BIRTH_CASES[case]()
    st = log.store
    with st.batch():
        oid = st.put("record", _started(run, labels))
        st.set_ref(f"run/{run}/branch/0", None, oid, "forged")
        st.set_ref(f"run/{run}/live", None, f"ref: run/{run}/branch/0", "forged")
    return run, oid


def _base(root):
    log = objstore.open_store(root)
    src = log.start_run(labels={"thread_id": "S"})
    log.record_attempt(src, 0, 0, "succeeded")
    return log, src


@pytest.mark.parametrize("case", list(BIRTH_CASES))
def test_a_run_whose_labels_break_the_rule_is_refused_by_the_writer(tmp_path, case):
    root = str(tmp_path / "s")
    log, _src = _base(root)
    before = _seg_bytes(root)
    with pytest.raises(Refused) as err:
        _forge_birth(log, case)
    assert "run_started record" in str(err.value), err.value
    assert _seg_bytes(root) == before, "a refused entry wrote nothing"
    assert objstore.verify(objstore.open_store(root)) == []


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BIRTH_CASES))
def test_a_forged_run_birth_stops_every_reader_and_verify_names_it(tmp_path, monkeypatch, case):
    root = str(tmp_path / "s")
    log, src = _base(root)
    with monkeypatch.context() as m:  # the forger: its process has the rule patched out
        m.setattr(LogState, "_birth_rule", lambda *a: None, raising=False)
        run, oid = _forge_birth(objstore.open_store(root), case)
    # a fresh reader process: it stops before the entry, one line naming it, exit 6
    for args in (("log", src), ("episode", src, "--json"), ("runs",)):
        _, out, err = run_cli(*args, store=root, exit_code=6)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "run_started record " + oid.hex() in lines[0], (args, err)
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert any(line.startswith("corrupt-entry ") and oid.hex() in line for line in out.splitlines()), out
    # and a writer (another fresh process) refuses to append after it, writing nothing
    before = _seg_bytes(root)
    blob = tmp_path / "b.txt"
    blob.write_bytes(b"x")
    _, _out, err = run_cli("put-blob", str(blob), store=root, exit_code=6)
    assert err.strip().count("\n") == 0 and "run_started record " + oid.hex() in err, err
    assert _seg_bytes(root) == before


def test_a_labelled_run_of_a_later_generation_is_created_once_the_earlier_is_deleted(tmp_path):
    root = str(tmp_path / "s")
    log, src = _base(root)
    delete_run(log, src, reason="done")
    again = log.start_run(labels={"thread_id": "S"})
    assert again == L.run_id({"thread_id": "S"}, 1)
    assert objstore.verify(objstore.open_store(root)) == []


# -- decided by a body: the read of the record refuses it ----------------------------------------------------------

XF = [["a", "str", True, False]]


def _x_payload(run, lsn, parent, schema, body):
    return {"run": run, "branch": 0, "lsn": lsn, "parent": parent, "kind": "x.t.k", "time": 1.0, "body": body, "schema": schema}


def _forge_x(root, case):
    """A run r with one x.t.k record written below the API (the writer's body check is in RunLog.append,
    which a forger skips); returns (run, the id every reader must name)."""
    log = objstore.open_store(root)
    run = log.start_run("r")
    log.record_attempt(run, 0, 0, "succeeded")
    sid = log.register_kind("x.t.k", XF)
    st = log.store
    head = log.view(run).heads[0]
    with st.batch():
        if case == "a body that breaks its schema":
            oid = st.put("record", _x_payload(run, 2, head, sid, {"a": 5}))
            named = oid
        elif case == "a schema object with invalid fields":
            bad = st.put("schema", {"kind": "x.t.k", "fields": [["a", "date", True, False], ["a", "str", True, False]],
                                    "previous": None, "time": 1.0})
            oid = st.put("record", _x_payload(run, 2, head, bad, {"a": "v"}))
            named = oid
        st.set_ref(f"run/{run}/branch/0", head, oid, "forged")
    return run, named, bad if case == "a schema object with invalid fields" else None


X_CASES = ["a body that breaks its schema", "a schema object with invalid fields"]


@pytest.mark.slow
@pytest.mark.parametrize("case", X_CASES)
def test_a_record_its_schema_does_not_allow_is_refused_by_every_read(tmp_path, case):
    root = str(tmp_path / "s")
    run, oid, schema = _forge_x(root, case)
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert any(line.startswith(f"malformed-object {oid.hex()}") for line in out.splitlines()), out
    for args in (("log", run), ("log", run, "--json"), ("show", oid.hex()), ("episode", run, "--json"),
                 ("episode", run, "--source", "refold", "--json")):
        _, _out, err = run_cli(*args, store=root, exit_code=6)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"object {oid.hex()} is malformed: x.t.k " in lines[0], (args, err)
    if schema is not None:
        _, _out, err = run_cli("show", schema.hex(), store=root, exit_code=6)
        assert err.strip().count("\n") == 0 and f"object {schema.hex()} is malformed: its schema {schema.hex()} is malformed (" in err, err


# -- a copy whose fork object names a record that is not at the place it says --------------------------------------

def _forge_copy(root, case):
    log = objstore.open_store(root)
    src = log.start_run("src")
    recs = [log.record_attempt(src, i, 0, "succeeded") for i in range(3)]
    other = log.start_run("other")
    theirs = [log.record_attempt(other, 7, i, "failed") for i in range(2)]
    st = log.store
    parent = {"another run's record": theirs[0].id, "its source's record at another LSN": recs[2].id}[case]
    with st.batch():
        fid = st.put("fork", {"run": "cp", "branch": 0, "parent_branch": 0, "parent_lsn": 1, "parent_record": parent,
                              "parent_head": recs[-1].id, "reason": "forged", "compensation": [], "time": 1.0, "parent_run": src})
        oid = st.put("record", _started("cp", parent=fid))
        st.set_ref("run/cp/branch/0", None, oid, "forged")
        st.set_ref("run/cp/live", None, "ref: run/cp/branch/0", "forged")
    return fid


@pytest.mark.slow
@pytest.mark.parametrize("case", ["another run's record", "its source's record at another LSN"])
def test_a_copy_whose_fork_names_a_record_elsewhere_is_refused_by_its_readers(tmp_path, case):
    root = str(tmp_path / "s")
    fid = _forge_copy(root, case)
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert any(line.startswith(f"bad-fork {fid.hex()}") and "copy says run src branch 0 LSN 1" in line for line in out.splitlines()), out
    for args in (("log", "cp"), ("log", "cp", "--json"), ("episode", "cp", "--json"), ("episode", "cp", "--source", "refold", "--json"),
                 ("episode", "cp")):
        _, _out, err = run_cli(*args, store=root, exit_code=6)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and f"object {fid.hex()} is malformed: copy says run src branch 0 LSN 1, but its parent record is " in lines[0], (args, err)
    run_cli("log", "src", store=root, exit_code=0)  # the source itself reads as ever
