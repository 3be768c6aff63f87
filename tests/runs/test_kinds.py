"""Record kinds the core does not know (issue 18): x.<integration>.<kind>, declared by schema objects.

Real stores; forged objects are committed below the API (Store.put / set_ref, which check nothing a
forger could not skip) and verify must name them; gc keeps what live x. records reference."""

from __future__ import annotations

import pytest

import objstore
from objstore.errors import InvalidRecord, Refused
from objstore.lifecycle import delete, gc
from objstore.storage import codec

FIELDS = [["checkpoint_id", "str", True, False], ["parts", "list", True, True], ["meta", "map", False, False],
          ["first", "id", False, True], ["n", "int", False, False]]


def _log(tmp_path):
    return objstore.open_store(str(tmp_path / "s"))


def _seg_bytes(tmp_path):
    """{path: bytes} of every segment of every log of the store (the store log and each run's on format 6)."""
    import os

    out = {}
    for d, _, files in os.walk(tmp_path / "s"):
        for f in files:
            if f.endswith(".seg"):
                with open(os.path.join(d, f), "rb") as fh:
                    out[os.path.relpath(os.path.join(d, f), tmp_path)] = fh.read()
    return out


def test_declare_once_and_versions_name_their_predecessor(tmp_path):
    log = _log(tmp_path)
    sid = log.register_kind("x.test.checkpoint", FIELDS)
    before = _seg_bytes(tmp_path)
    assert log.register_kind("x.test.checkpoint", [tuple(f) for f in FIELDS]) == sid  # the same list: nothing written
    assert _seg_bytes(tmp_path) == before
    v2 = log.register_kind("x.test.checkpoint", FIELDS + [["extra", "bool", False, False]])
    otype, value = log.store.get(v2)
    assert otype == codec.SCHEMA and value["previous"] == sid and value["kind"] == "x.test.checkpoint"
    assert log.store.read_ref("schema/x.test.checkpoint") == v2
    # the ref only moves forward: back to the first version is refused, for any writer
    with pytest.raises(Refused):
        with log.store.batch():
            log.store.set_ref("schema/x.test.checkpoint", v2, sid, "roll back")
    assert objstore.verify(log) == []


@pytest.mark.parametrize("kind, fields", [("langgraph.checkpoint", FIELDS), ("x.Bad.kind", FIELDS), ("x.a.b", []),
                                          ("x.a.b", [["a", "date", True, False]]), ("x.a.b", [["a", "str", True, True]]),
                                          ("x.a.b", [["a", "str", True, False], ["a", "int", False, False]])])
def test_bad_declarations_are_refused_and_write_nothing(tmp_path, kind, fields):
    log = _log(tmp_path)
    before = _seg_bytes(tmp_path)
    with pytest.raises(InvalidRecord):
        log.register_kind(kind, fields)
    assert _seg_bytes(tmp_path) == before


def test_bodies_are_checked_against_their_schema(tmp_path):
    log = _log(tmp_path)
    log.register_kind("x.test.checkpoint", FIELDS)
    run = log.start_run()
    b = log.put_blob(b"part")
    rec = log.append(run, "x.test.checkpoint", {"checkpoint_id": "c", "parts": [b], "meta": {"k": [1, 2]}})
    assert log.record(rec.id).body["parts"] == [b]
    before = _seg_bytes(tmp_path)
    for body in ({"parts": [b]}, {"checkpoint_id": 1, "parts": []}, {"checkpoint_id": "c", "parts": [b"short"]},
                 {"checkpoint_id": "c", "parts": [], "unknown": 1}, {"checkpoint_id": "c", "parts": [], "first": b"x" * 31}):
        with pytest.raises(InvalidRecord):
            log.append(run, "x.test.checkpoint", body)
    with pytest.raises(InvalidRecord, match="not declared"):
        log.append(run, "x.test.other", {})
    assert _seg_bytes(tmp_path) == before
    # episode and the fold pass over records of kinds they do not know
    assert objstore.episode(log, run).branches[0].attempts_total == 0
    assert objstore.verify(log, check_state=True) == []


def _forge(log, run, parent, lsn, body, schema):
    st = log.store
    with st.batch():
        oid = st.put("record", {"run": run, "branch": 0, "lsn": lsn, "parent": parent, "kind": "x.test.checkpoint", "time": 1.0,
                                "body": body, **({"schema": schema} if schema is not None else {})})
        st.set_ref(f"run/{run}/branch/0", parent, oid, "forged")
    return oid


def test_verify_names_x_records_without_or_against_their_schema(tmp_path):
    log = _log(tmp_path)
    sid = log.register_kind("x.test.checkpoint", FIELDS)
    other = log.register_kind("x.test.other", [["a", "str", True, False]])
    run = log.start_run()
    head = log.view(run).head(0)
    a = _forge(log, run, head, 1, {"checkpoint_id": "c", "parts": [b"\x01" * 32]}, sid)  # a ref to nothing
    b = _forge(log, run, a, 2, {"checkpoint_id": 5, "parts": []}, sid)  # wrong type
    c = _forge(log, run, b, 3, {"checkpoint_id": "c", "parts": []}, b"\x02" * 32)  # schema not stored
    d = _forge(log, run, c, 4, {"checkpoint_id": "c", "parts": []}, other)  # another kind's schema
    e = _forge(log, run, d, 5, {"checkpoint_id": "c", "parts": []}, None)  # no schema at all
    got = {(p.code, p.subject): p.detail for p in objstore.verify(_log(tmp_path))}
    assert got[("missing-object", "01" * 32)].endswith("(parts[0]) but not stored")
    assert "does not fit its schema" in got[("malformed-object", b.hex())]
    assert got[("malformed-object", c.hex())] == f"x.test.checkpoint record: its schema {'02' * 32} is not stored"
    assert "which declares x.test.other" in got[("malformed-object", d.hex())]
    assert "names its schema object" in got[("malformed-object", e.hex())]
    assert ("damaged-ref", f"run/{run}/branch/0") in got  # the malformed head
    assert len(got) == 6, got


def test_gc_keeps_what_live_x_records_reference(tmp_path):
    log = _log(tmp_path)
    log.register_kind("x.test.checkpoint", FIELDS)
    keep, gone = log.start_run(), log.start_run()
    shared, own = log.put_blob(b"S" * 5000 + b"shared"), log.put_blob(b"O" * 5000 + b"own")
    log.append(keep, "x.test.checkpoint", {"checkpoint_id": "k", "parts": [shared]})
    log.append(gone, "x.test.checkpoint", {"checkpoint_id": "g", "parts": [shared, own]})
    delete.delete_run(log, gone, reason="test")
    gc.gc(log.store)
    fresh = _log(tmp_path)
    assert fresh.get_blob(shared).endswith(b"shared")
    assert not any(engine.has_body(own) for _run, engine in fresh.store.logs.all_logs())
    assert objstore.verify(fresh) == []
