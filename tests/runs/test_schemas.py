"""The record schemas as msgspec Structs (issue 15): the C path gives the bytes the Python rules
gave, refuses what they refused with their message, refuses unknown fields by name, and a stored
object of a newer schema version is refused on read with NewerFormat naming it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore.errors import InvalidInput, InvalidRecord, NewerFormat
from objstore.runs import records as R
from objstore.runs import schemas as S
from objstore.runs.api import RunLog
from objstore.runs.verify import verify
from objstore.storage import codec
from objstore.storage.store import Store

ID = b"\x07" * 32


@pytest.fixture
def disk_log(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r1", when=1.7e9)
    return log


# -- unknown fields ---------------------------------------------------------------------------------

def test_an_unknown_field_in_an_append_is_refused_by_name_and_nothing_is_written(disk_log):
    before = disk_log.store.engine.position()
    with pytest.raises(InvalidRecord) as e:
        disk_log.append("r1", R.ATTEMPT, {"step": 1, "attempt": 0, "state": "failed", "contxt": {"typo": 1}})
    assert str(e.value).startswith("invalid record: unknown field 'contxt' in a attempt body (known: ")
    assert e.value.exit_code == 5
    with pytest.raises(InvalidRecord, match="unknown fields 'a', 'b' in a intent_committed body"):
        disk_log.append("r1", R.INTENT_COMMITTED, {"intent": "i", "b": 1, "a": 2})
    with pytest.raises(InvalidRecord, match="unknown field '1' in a task_opened body"):
        disk_log.append("r1", R.TASK_OPENED, {"task": "t", 1: "x"})
    assert disk_log.store.engine.position() == before
    assert [r.lsn for r in disk_log.records("r1")] == [0]


@pytest.mark.parametrize("kind", sorted(R.BODIES))
def test_every_kind_refuses_an_unknown_field(kind):
    with pytest.raises(InvalidRecord, match=f"unknown field 'zz' in a {kind} body"):
        R.check_body(kind, {"zz": 1})


def test_a_stored_body_with_an_unknown_field_is_malformed():
    rec = {"run": "r1", "branch": 0, "lsn": 1, "parent": ID, "kind": "intent_committed", "time": 1.0,
           "body": {"intent": "i", "extra": True}}
    assert S.schema_problem("record", rec).startswith("body: unknown field 'extra' in a intent_committed body")
    assert S.schema_problem("record", dict(rec, body={"intent": "i"}, color="red")) == "unknown field 'color'"


# -- newer schema versions -----------------------------------------------------------------------------

def test_a_record_of_a_newer_schema_version_is_refused_on_read_naming_it(disk_log):
    head = disk_log.store.read_ref("run/r1/branch/0")
    newer = {"v": 2, "run": "r1", "branch": 0, "lsn": 1, "parent": head, "kind": R.INTENT_COMMITTED, "time": 1.7e9,
             "body": {"intent": "i"}}
    with disk_log.store.batch():  # as a later objstore would write it (the branch moves to it)
        oid = disk_log.store.put(codec.RECORD, newer)
        disk_log.store.set_ref("run/r1/branch/0", head, oid, "a newer writer")
    with pytest.raises(NewerFormat) as e:
        disk_log.record(oid)
    assert str(e.value) == (f"newer format: record {oid.hex()} has schema version 2; this objstore reads up to version 1 "
                            "(upgrade objstore to read it)")
    assert e.value.exit_code == 5 and e.value.code == "newer-format"
    assert S.schema_problem("record", newer) == "record schema version 2 is newer than this objstore reads (1, written without 'v')"
    assert disk_log.record(head).lsn == 0  # the schema-1 record beside it reads as before


@pytest.mark.parametrize("otype,known", [("journal", R.JOURNAL_SCHEMA), ("grant", R.GRANT_SCHEMA), ("segment", R.COMPACTION_SEGMENT_SCHEMA)])
def test_check_version_refuses_a_newer_t745_object(otype, known):
    R.check_version(otype, {"v": known})
    R.check_version(otype, {})  # schema 1 (legacy, no v)
    with pytest.raises(NewerFormat, match=f"newer format: {otype} {'ab' * 32} has schema version {known + 1}; "
                                          f"this objstore reads up to version {known}"):
        R.check_version(otype, {"v": known + 1}, bytes.fromhex("ab" * 32))
    with pytest.raises(NewerFormat, match="fork"):
        R.check_version("fork", {"v": 1})


# -- the C path refuses what the Python rules refuse, with their message and class ----------------------

BAD_VALUES = [float("nan"), float("inf"), float("-inf"), 2**64, -(2**63) - 1, b"raw", {1, 2}, frozenset([1]), {1: "x"},
              {"k": {2: 1}}, "\ud800", {"\udc00": 1}, object(), 1j, [[[]]]]


def _deep(n):
    v = {}
    for _ in range(n - 1):
        v = {"a": v}
    return v


@pytest.mark.parametrize("bad", BAD_VALUES + [_deep(65), [_deep(64)]], ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("field", ["context", "tools", "usage"])
def test_user_maps_refuse_what_they_refused(field, bad):
    body = {"step": 1, "attempt": 0, "state": "failed", field: {"x": bad}}
    want = None
    try:
        R._check_body_py(R.ATTEMPT, body)
    except InvalidRecord as e:
        want = str(e)
    if want is None:  # [[[]]]: valid; the C path must accept it too, with the same bytes
        assert codec.encode("record", R.check_body(R.ATTEMPT, body)) == codec.encode("record", R._check_body_py(R.ATTEMPT, body))
        return
    with pytest.raises(InvalidRecord) as got:
        R.check_body(R.ATTEMPT, body)
    assert str(got.value) == want


def test_depth_limit_is_exact():
    R.check_body(R.ATTEMPT, {"step": 1, "attempt": 0, "state": "failed", "context": _deep(64)})
    with pytest.raises(InvalidRecord, match="context nests deeper than 64 levels"):
        R.check_body(R.ATTEMPT, {"step": 1, "attempt": 0, "state": "failed", "context": _deep(65)})
    with pytest.raises(InvalidRecord, match="context nests deeper than 64 levels"):
        R.check_body(R.ATTEMPT, {"step": 1, "attempt": 0, "state": "failed", "context": _deep(100000)})
    R.check_body(R.RUN_STARTED, {"meta": {"many": [[] for _ in range(500)], "digits": 18446744073709551615, "neg": -(2**63)}})


def test_a_tuple_counts_as_an_array_with_the_same_bytes():
    body = {"step": 1, "attempt": 0, "state": "failed", "context": {"t": (1, (2, "x"))}}
    listed = {"step": 1, "attempt": 0, "state": "failed", "context": {"t": [1, [2, "x"]]}}
    assert codec.encode("record", R.check_body(R.ATTEMPT, body)) == codec.encode("record", R.check_body(R.ATTEMPT, listed))


def test_the_valid_path_runs_no_python_walk(monkeypatch, disk_log):
    """A 300-byte context is checked in C: the walk (and the Python body rules) never run."""
    def boom(*a, **k):
        raise AssertionError("the Python walk ran on a valid value")
    monkeypatch.setattr(codec, "_walk_json_value", boom)
    monkeypatch.setattr(R, "_check_body_py", boom)
    ctx = {"path": "A", "task": "look up the order and the customer record, then check the ledger",
           "items": [{"id": i, "name": f"item-{i}", "price": 1.25 * i, "ok": i % 2 == 0} for i in range(4)], "note": None}
    assert len(codec.canonical_json(ctx)) >= 250
    rec = disk_log.record_attempt("r1", 1, 0, "failed", prompt=ID, context=ctx, tools={"m": "x"}, usage={"in": 3}, when=1.7e9)
    assert S.schema_problem("record", disk_log.store.get(rec.id)[1]) is None
    codec.check_json_value(ctx)  # the journal's check takes the same C path


# -- schema_problem through the Structs: same verdicts and messages as the field loops -------------------

GOOD_RECORD = {"run": "r1", "branch": 0, "lsn": 3, "parent": ID, "kind": "attempt", "time": 1.5,
               "body": {"step": 1, "attempt": 0, "state": "failed", "workflow_version": None, "context": {"a": [1]},
                        "prompt": ID, "output": None, "tools": None, "usage": None, "error": "boom"}}
MUTATIONS = [
    ("run", 5), ("branch", -1), ("branch", "0"), ("lsn", True), ("parent", b"short"), ("parent", "x" * 32), ("kind", None),
    ("time", "now"), ("time", True), ("body", []), ("kind", "nope"),
]


@pytest.mark.parametrize("field,value", MUTATIONS, ids=[f"{f}={v!r}"[:30] for f, v in MUTATIONS])
def test_schema_problem_messages_are_the_field_loops(field, value):
    bad = dict(GOOD_RECORD, **{field: value})
    assert S.schema_problem("record", bad) == S._record_problem(bad) is not None


@pytest.mark.parametrize("field", sorted(GOOD_RECORD))
def test_schema_problem_names_a_missing_field(field):
    bad = {k: v for k, v in GOOD_RECORD.items() if k != field}
    assert S.schema_problem("record", bad) == S._record_problem(bad) == f"missing field {field!r}"


def test_schema_problem_body_values():
    assert S.schema_problem("record", GOOD_RECORD) is None
    for v, msg in ((float("nan"), "not a JSON number"), (b"x", "bytes is not JSON-like"), ({1: 2}, "keys must be strings")):
        bad = dict(GOOD_RECORD, body=dict(GOOD_RECORD["body"], context={"x": v}))
        assert S.schema_problem("record", bad).startswith("body: ") and msg in S.schema_problem("record", bad)
    bad = dict(GOOD_RECORD, body=dict(GOOD_RECORD["body"], prompt=b"\1" * 31))
    assert S.schema_problem("record", bad) == "body: prompt must be a 32-byte blob id or None"


def test_verify_still_finds_a_malformed_body_on_disk(disk_log):
    head = disk_log.store.read_ref("run/r1/branch/0")
    bad = {"run": "r1", "branch": 0, "lsn": 1, "parent": head, "kind": "attempt", "time": 1.0,
           "body": {"step": 1, "attempt": 0, "state": "failed", "usage": {"x": float("inf")}}}
    with disk_log.store.batch():
        oid = disk_log.store.put(codec.RECORD, bad)
        disk_log.store.set_ref("run/r1/branch/0", head, oid, "crafted")
    lines = [p.line() for p in verify(disk_log)]
    assert any(f"malformed-object {oid.hex()}" in line and "body: usage: inf is not a JSON number" in line for line in lines), lines


# -- property: the Structs' bytes are the Python rules' bytes -----------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json = st.recursive(_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=20)
_maps = st.none() | st.dictionaries(st.text(max_size=8), _json, max_size=5)
_ids = st.none() | st.binary(min_size=32, max_size=32)
_names = st.text(min_size=1, max_size=12)
_count = st.integers(0, 2**64 - 1)
BODY_STRATEGIES = {
    R.ATTEMPT: st.fixed_dictionaries({"step": _count, "attempt": _count, "state": st.sampled_from(R.ATTEMPT_STATES)},
                                     optional={"workflow_version": st.none() | _names | st.integers(), "context": _maps,
                                               "prompt": _ids, "output": _ids, "tools": _maps, "usage": _maps,
                                               "error": st.none() | st.text()}),
    R.RUN_STARTED: st.fixed_dictionaries({}, optional={"subject": _names, "workflow_version": _names | st.integers() | st.floats(),
                                                       "meta": _json}),
    R.INTENT: st.fixed_dictionaries({"intent": _names, "step": _count, "effect": _names, "idempotent": st.booleans()}),
    R.INTENT_COMMITTED: st.fixed_dictionaries({"intent": _names}),
    R.RUN_FINISHED: st.fixed_dictionaries({"status": st.sampled_from(R.RUN_STATUSES)}, optional={"error": st.none() | st.text()}),
    R.TURN: st.fixed_dictionaries({"role": _names}, optional={"content": _ids, "origin": st.just("source"), "generation": _json}),
    R.TASK_OPENED: st.fixed_dictionaries({"task": _names}, optional={"title": st.text()}),
    R.TASK_CLOSED: st.fixed_dictionaries({"task": _names}, optional={"outcome": _names}),
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(BODY_STRATEGIES)).flatmap(lambda k: st.tuples(st.just(k), BODY_STRATEGIES[k])),
       st.floats(R.TIME_MIN, R.TIME_MAX))
def test_struct_validated_bytes_are_todays_bytes(kind_body, t):
    kind, body = kind_body
    try:
        today = R._check_body_py(kind, body)
    except InvalidInput as e:  # e.g. a lone surrogate from st.text(): both refuse, with one message
        with pytest.raises(InvalidInput) as got:
            R.check_body(kind, body)
        assert str(got.value) == str(e)
        return
    now = R.check_body(kind, body)
    payload = {"run": "r1", "branch": 0, "lsn": 1, "parent": ID, "kind": kind, "time": t}
    assert codec.encode("record", dict(payload, body=now)) == codec.encode("record", dict(payload, body=today))
    assert S.schema_problem("record", codec.decode(codec.encode("record", dict(payload, body=now)))[1]) is None
