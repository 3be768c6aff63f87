"""append_many / record_attempts: many records of one kind as one commit, the same records ``append`` writes.

The property: ``append_many`` of N bodies writes exactly the bytes N ``append`` calls inside one batch write (the
same record ids: same payloads, chained), in exactly one entry of the run's log; a body refused anywhere in the
list writes nothing; its expectations are judged against the branch as the first record finds it.
"""

import os

import pytest
from helpers import log_engine_of, log_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.errors import Conflict, InvalidRecord
from objstore.runs import records as R

T = 1_700_000_000.25


def _attempts(n, blob):
    return [{"step": i, "attempt": i % 3, "state": ("failed", "succeeded")[i % 2], "prompt": blob,
             "usage": {"in": i, "out": 7}, "context": {"task": f"t{i}"}} for i in range(n)]


def _pair(tmp_path):
    logs = []
    for name in ("one", "many"):
        log = RunLog(Store.init(os.path.join(str(tmp_path), name), fsync="off"))
        log.start_run("r1", when=T)
        logs.append(log)
    return logs


def test_append_many_writes_the_records_a_batch_of_appends_writes_in_one_entry(tmp_path):
    one, many = _pair(tmp_path)
    blobs = [one.put_blob(b"prompt"), many.put_blob(b"prompt")]
    assert blobs[0] == blobs[1]
    with one.batch():
        want = [one.record_attempt("r1", when=T, **a) for a in _attempts(25, blobs[0])]
    engine = log_engine_of(many.store, "r1")
    before = engine.tables.pos.entry
    got = many.record_attempts("r1", _attempts(25, blobs[1]), when=T)
    assert engine.tables.pos.entry == before + 1  # one commit, one entry
    assert [r.id for r in got] == [r.id for r in want]
    assert [(r.lsn, r.parent, r.body) for r in got] == [(r.lsn, r.parent, r.body) for r in want]
    for r in want:  # the stored bytes, read back from each store's log
        assert many.store.get_raw(r.id) == one.store.get_raw(r.id)
    assert many.view("r1").head(0) == one.view("r1").head(0) == want[-1].id
    # the writer's memory of the head is what the log says: the next append follows on
    assert many.record_attempt("r1", step=99, attempt=0, state="succeeded", when=T).id == \
        one.record_attempt("r1", step=99, attempt=0, state="succeeded", when=T).id


def test_a_body_refused_anywhere_in_the_list_writes_nothing(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r1")
    bad = _attempts(10, None)
    bad[7]["state"] = "exploded"
    before = log_files(tmp_path / "s")
    with pytest.raises(InvalidRecord, match="state"):
        log.record_attempts("r1", bad)
    bad[7] = {"step": 1, "attempt": 0, "state": "succeeded", "colour": "blue"}
    with pytest.raises(InvalidRecord, match="unknown field 'colour'"):
        log.append_many("r1", R.ATTEMPT, bad)
    assert log_files(tmp_path / "s") == before
    assert log.record_attempts("r1", []) == []
    assert log_files(tmp_path / "s") == before


def test_expectations_are_judged_against_the_branch_as_the_first_record_finds_it(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r1")
    head = log.record_attempt("r1", step=0, attempt=0, state="succeeded").id
    stale = log.record_attempt("r1", step=1, attempt=0, state="succeeded").id
    log.record_attempt("r1", step=2, attempt=0, state="succeeded")
    before = log_files(tmp_path / "s")
    with pytest.raises(Conflict):
        log.record_attempts("r1", _attempts(3, None), expect_head=stale)
    with pytest.raises(Conflict):
        log.record_attempts("r1", _attempts(3, None), expect_branch=1)
    assert log_files(tmp_path / "s") == before
    got = log.record_attempts("r1", _attempts(3, None), expect_head=log.view("r1").head(0), expect_branch=0)
    assert [r.lsn for r in got] == [4, 5, 6]
    assert got[0].parent != head


def test_run_finished_is_one_per_branch(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r1")
    with pytest.raises(InvalidRecord, match="one per branch"):
        log.append_many("r1", R.RUN_FINISHED, [{"status": "succeeded", "error": None}] * 2)
    log.append_many("r1", R.RUN_FINISHED, [{"status": "succeeded", "error": None}])
    with pytest.raises(InvalidRecord, match="has finished"):
        log.record_attempts("r1", _attempts(1, None))


_value = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=8),
                   st.floats(allow_nan=False, allow_infinity=False))
_body = st.fixed_dictionaries(
    {"step": st.one_of(st.integers(0, 2**64 + 5), st.integers(-3, -1), st.text(max_size=2)),
     "attempt": st.integers(0, 9),
     "state": st.sampled_from(["succeeded", "failed", "running", "bogus"])},
    optional={"context": st.dictionaries(st.text(max_size=4), _value, max_size=3),
              "usage": st.one_of(st.none(), st.dictionaries(st.text(max_size=4), _value, max_size=3)),
              "error": st.one_of(st.none(), st.text(max_size=5), st.integers()),
              "workflow_version": st.one_of(st.none(), st.text(max_size=3), st.integers(0, 5)),
              "output": st.one_of(st.none(), st.binary(min_size=32, max_size=32), st.binary(max_size=3)),
              "tools": st.one_of(st.none(), st.lists(_value, max_size=2).map(tuple).map(lambda t: {"t": t}))})


def _one(b):
    try:
        return R.check_body(R.ATTEMPT, b)
    except InvalidRecord as e:
        return ("refused", str(e))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_body, max_size=6))
def test_check_bodies_decides_each_body_as_check_body_does(bodies):
    singles = [_one(b) for b in bodies]
    refused = [s for s in singles if isinstance(s, tuple)]
    if refused:
        with pytest.raises(InvalidRecord) as e:
            R.check_bodies(R.ATTEMPT, bodies)
        assert str(e.value) == refused[0][1]  # the first refused body, named as check_body names it
    else:
        got = R.check_bodies(R.ATTEMPT, bodies)
        assert got == singles
        assert [type(v) for g in got for v in g.values()] == [type(v) for s in singles for v in s.values()]


_ids = st.one_of(st.none(), st.binary(min_size=32, max_size=32))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_body, _ids, _ids, st.one_of(st.none(), st.binary(min_size=32, max_size=32)), st.integers(0, 9), st.integers(0, 2**40))
def test_the_writers_index_row_of_an_attempt_is_the_one_its_bytes_give(body, prompt, output, parent, branch, lsn):
    """The row an append builds from what it holds (``checked_attempt_row``) is exactly what ``object_facts`` reads
    from the record's canonical bytes: readers and verify derive the same row from the entry."""
    from objstore.runs import facts as F
    from objstore.storage import codec

    body = dict(body, prompt=prompt, output=output)
    try:
        checked = R.check_body(R.ATTEMPT, body)
    except InvalidRecord:
        return
    payload = {"run": "r1", "branch": branch, "lsn": lsn, "parent": parent, "kind": R.ATTEMPT, "time": T, "body": checked}
    canonical = codec.encode(codec.RECORD, payload)
    oid = codec.object_id(canonical)
    want = F.object_facts(codec.RECORD, canonical, None, oid)
    assert F.checked_attempt_row("r1", branch, lsn, parent, checked) == want
