"""The journal-compaction (T-745) formats, pinned (docs/FORMAT.md, "Journal compaction objects").

fixtures/golden-journal.json holds the canonical bytes and ids of a schema-2 grant, journal version
and segment, the Host answer JSON, the startup event, task records and schema-1 (legacy) objects.
They are rebuilt here from code (fixtures/make_golden_journal.py) and compared byte for byte, so an
accidental change of what the code writes fails; a deliberate one bumps the object's ``v`` and
regenerates the file. Each object also decodes strictly, passes ``schemas.schema_problem``, and
carries signatures that verify; legacy shapes are still accepted; malformed ones are named by verify.
"""

import dataclasses
import hashlib
import json
import os
import sys

import pytest
from helpers import log_engine_of

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import WriterRevoked
from objstore.journal.restore import frozen_of
from objstore.runs import records as R
from objstore.runs import schemas as S
from objstore.runs.verify import verify
from objstore.storage import codec, identity

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
GOLDEN = os.path.join(FIXTURES, "golden-journal.json")
sys.path.insert(0, FIXTURES)
import make_golden_journal as G  # noqa: E402

CHANGED = "journal format changed: a change is a versioned act (bump 'v', update docs/FORMAT.md, regenerate the fixture)"


def load() -> dict:
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def golden():
    return load()


@pytest.fixture(scope="module")
def built():
    return G.build()


def vec(doc, name):
    return next(v for v in doc["vectors"] if v["name"] == name)


def raw(v) -> bytes:
    return bytes.fromhex(v["canonical_hex"] if "canonical_hex" in v else v["json_hex"])


# -- the golden bytes ---------------------------------------------------------------------------------

def test_rebuilt_from_code_byte_for_byte(golden, built):
    assert [v["name"] for v in built["vectors"]] == [v["name"] for v in golden["vectors"]]
    for have, want in zip(built["vectors"], golden["vectors"], strict=True):
        assert have["type"] == want["type"], have["name"]
        assert raw(have).hex() == raw(want).hex(), f"{have['name']}: {CHANGED}"
        if "id" in want:
            assert have["id"] == want["id"], f"{have['name']}: {CHANGED}"
    assert G.dump(built) == open(GOLDEN, encoding="utf-8").read(), CHANGED


def test_fixture_covers_the_documented_objects(golden):
    kinds = {(v["type"], (v.get("value") or {}).get("v")) for v in golden["vectors"] if v["type"] != "json"}
    assert {("grant", 2), ("journal", 2), ("segment", 2), ("grant", None), ("journal", None), ("segment", None)} <= kinds
    assert {v["name"] for v in golden["vectors"] if v["type"] == "json"} >= {
        "host answer (compaction read)", "startup event (run_started meta.startup of s2)",
        "signed update request (journal v2 'request')"}


@pytest.mark.parametrize("name", [v["name"] for v in load()["vectors"] if v["type"] != "json"])
def test_object_decodes_and_passes_its_schema(golden, name):
    v = vec(golden, name)
    data = raw(v)
    assert codec.object_id(data).hex() == v["id"]
    otype, value = codec.decode(data, bytes.fromhex(v["id"]), strict=True)
    assert otype == v["type"]
    if otype == codec.BLOB:
        assert value.decode("utf-8") == v["text"]
        return
    assert value == G.from_json(v["value"])
    assert S.schema_problem(otype, value) is None
    assert codec.encode(otype, value) == data


# -- signatures and hashes ---------------------------------------------------------------------------

def test_keys_are_the_fixed_ones(golden):
    owner, worker = G.key(bytes(range(32))), G.key(bytes(range(32, 64)))
    assert golden["keys"]["owner"]["public"] == owner.public
    assert golden["keys"]["worker"]["public"] == worker.public
    blob = vec(golden, "owner public key blob (keys/owner)")
    assert blob["ref"] == identity.OWNER_REF and blob["text"] == owner.public  # 64 lowercase hex digits, nothing else
    assert identity.parse_public(raw(blob).split(b"\x00", 1)[1]) == owner.public


@pytest.mark.parametrize("name", ["grant v2 (owner-signed)", "grant v2 revocation (seq 2)"])
def test_grants_are_signed_by_the_owner(golden, name):
    owner = golden["keys"]["owner"]["public"]
    v = vec(golden, name)
    g = codec.decode(raw(v))[1]
    assert g["signer"] == owner and identity.object_signed_by(g, owner)
    msg = b"objstore-signed-object-v1\x00" + codec.canonical_json({k: x for k, x in g.items() if k != "sig"})
    assert msg == identity.object_message(g) == bytes.fromhex(v["signed_message_hex"])
    assert identity.verify_sig(owner, g["sig"], msg)
    assert not identity.object_signed_by(g, golden["keys"]["worker"]["public"])
    assert not identity.object_signed_by(dict(g, reason="forged"), owner)  # every field is covered
    assert not identity.object_signed_by({k: x for k, x in g.items() if k != "signer"}, owner)
    assert v["ref"] == f"run/s1/grant/{g['grantee']}"


def test_grant_chain_links(golden):
    first = codec.decode(raw(vec(golden, "grant v2 (owner-signed)")))[1]
    second = codec.decode(raw(vec(golden, "grant v2 revocation (seq 2)")))[1]
    assert (first["seq"], first["previous"], first["action"]) == (1, None, "grant")
    assert (second["seq"], second["previous"], second["action"]) == (2, bytes.fromhex(vec(golden, "grant v2 (owner-signed)")["id"]), "revoke")


def test_journal_carries_its_signed_request(golden):
    worker = golden["keys"]["worker"]["public"]
    j = codec.decode(raw(vec(golden, "journal v2")))[1]
    body = raw(vec(golden, "journal body blob")).split(b"\x00", 1)[1]
    assert j["body"] == bytes.fromhex(vec(golden, "journal body blob")["id"])
    assert j["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert codec.canonical_json(json.loads(body)) == body
    req = identity.Request.from_json(j["request"])
    rv = vec(golden, "signed update request (journal v2 'request')")
    assert codec.canonical_json(req.to_json()) == raw(rv)
    assert (req.op, req.run, req.key, req.nonce, req.time, req.subject) == ("update", "s1", worker, G.NONCE, G.T, None)
    assert req.key == j["writer"] and req.expect_head is None and j["previous"] is None
    assert req.params == {"reflects_through": j["reflects_through"].hex(), "checkpoint": None, "enabled": None}
    msg = b"objstore-request-v1\x00" + codec.canonical_json({k: getattr(req, k) for k in (
        "op", "run", "subject", "body_sha256", "expect_head", "time", "nonce", "key")})
    assert msg == req.message() == bytes.fromhex(rv["message_hex"])
    assert identity.verify_sig(worker, req.sig, msg)
    hash_input = codec.canonical_json(req.params) + b"\x00" + body
    assert hash_input == bytes.fromhex(rv["body_hash_input_hex"])
    assert req.body_sha256 == identity.body_hash(req.params, body) == hashlib.sha256(hash_input).hexdigest()
    assert not identity.verify_sig(worker, req.sig, dataclasses.replace(req, nonce="f" * 32).message())


def test_answer_segment_and_startup_event_agree(golden):
    av = vec(golden, "host answer (compaction read)")
    answer = raw(av)
    assert hashlib.sha256(answer).hexdigest() == av["sha256"] and codec.canonical_json(json.loads(answer)) == answer
    a = json.loads(answer)
    assert a["v"] == 1 and a["outcome"] in J.OUTCOMES and a["purpose"] == "compaction"
    seg = codec.decode(raw(vec(golden, "segment v2")))[1]
    snap = seg["snapshot"]
    assert snap["answer"] == codec.object_id(codec.encode("blob", answer)) and snap["answer_sha256"] == av["sha256"]
    rendered = raw(vec(golden, "rendered answer blob")).split(b"\x00", 1)[1].decode()
    assert snap["rendered"] == bytes.fromhex(vec(golden, "rendered answer blob")["id"])
    assert f"read result sha256: {av['sha256']}" in rendered and rendered.endswith("read result: " + answer.decode())
    assert (snap["outcome"], snap["session"], snap["version"], snap["body_sha256"]) == (
        a["outcome"], a["session"], a["version"], a["body_sha256"])
    assert seg["tasks"] == [{"task": "t-1", "title": "write the report"}]
    ev = vec(golden, "startup event (run_started meta.startup of s2)")["value"]
    assert ev["type"] == "journal_startup" and hashlib.sha256(ev["answer"].encode()).hexdigest() == ev["answer_sha256"]
    assert json.loads(ev["answer"])["purpose"] == "startup"
    rec = codec.decode(raw(vec(golden, "run_started record with startup event")))[1]
    assert rec["kind"] == R.RUN_STARTED and rec["body"]["meta"] == {"session": True, "predecessor": "s1", "startup": ev}


def test_task_records(golden):
    opened = codec.decode(raw(vec(golden, "task_opened record")))[1]
    closed = codec.decode(raw(vec(golden, "task_closed record")))[1]
    assert (opened["kind"], opened["body"]) == (R.TASK_OPENED, {"task": "t-1", "title": "write the report"})
    assert (closed["kind"], closed["body"]) == (R.TASK_CLOSED, {"task": "t-2", "outcome": "done"})


# -- schema 1 (legacy) is still read -----------------------------------------------------------------

Z, ONE = bytes(32), bytes(range(32))
LEGACY_JOURNAL = {"run": "r1", "version": 2, "body": ONE, "source_end": 7, "checkpoint": 4, "enabled": False,
                  "previous": Z, "writer": "user:bob", "time": 1600000000.5}
LEGACY_GRANT = {"run": "r1", "writer": "w1", "action": "revoke", "previous": Z, "by": "user:bob", "reason": "gone", "time": 1600000000}
LEGACY_SEGMENT = {"run": "r1", "seq": 2, "previous": Z, "branch": 1, "covered_through": None, "summary": ONE, "summary_role": None,
                  "origin": "derived", "journal": {"outcome": "unavailable", "reason": "read_failed: x", "session": "r1",
                                                   "journal_id": None, "version": None, "body": None, "sha256": None,
                                                   "source_end": None, "checkpoint": None, "provenance": {}, "rendered": ONE},
                  "retained": [], "unreflected": [ONE, Z], "input": Z, "input_sha256": "0" * 64, "compactor": "c", "time": 1.0}


@pytest.mark.parametrize("otype,value", [("journal", LEGACY_JOURNAL), ("grant", LEGACY_GRANT), ("segment", LEGACY_SEGMENT)])
def test_legacy_shapes_are_accepted(otype, value):
    data = codec.encode(otype, value)
    assert codec.decode(data, strict=True) == (otype, value)
    assert S.schema_problem(otype, value) is None


def test_legacy_objects_are_read_as_documented(golden):
    """Legacy journal versions reflect nothing; legacy unsigned grants grant nothing; legacy
    segments are read for restore."""
    owner, worker = G.key(bytes(range(32))), G.key(bytes(range(32, 64)))
    log = RunLog(Store.memory())
    identity.set_owner(log.store, owner.public)
    run = J.start_session(log, "alice", run="r1")
    t = J.record_turn(log, run, "user", "hi")
    assert J.reflected_ids(log, dict(LEGACY_JOURNAL, source_end=t.lsn)) == set()
    with log.store.batch():
        gid = log.store.put(codec.GRANT, {"run": run, "writer": worker.public, "action": "grant", "previous": None,
                                          "by": "user:alice", "reason": "", "time": 1.0})
        log.store.set_ref(J.grant_ref(run, worker.public), None, gid, "legacy grant")
    host = J.LocalJournalHost(log)
    assert host.grant_state(worker.public, run, "alice") is None
    with pytest.raises(WriterRevoked):
        J.update_journal(log, run, worker, {"x": 1}, host=host)
    with log.store.batch():
        rendered = log.store.put_blob(b"[journal context: legacy]")
        seg = dict(LEGACY_SEGMENT, run=run, seq=1, previous=None, branch=0, journal=dict(LEGACY_SEGMENT["journal"], rendered=rendered))
        sid = log.store.put(codec.COMPACTION_SEGMENT, seg)
    f = frozen_of(log, log.store.get_typed(sid, codec.COMPACTION_SEGMENT))
    assert (f["outcome"], f["rendered"], f["answer_sha256"]) == ("unavailable", "[journal context: legacy]", None)


# -- malformed objects -----------------------------------------------------------------------------

def golden_value(name):
    return G.from_json(vec(load(), name)["value"])


def _without(d, k):
    return {x: y for x, y in d.items() if x != k}


BAD = [
    ("journal v2", lambda j: dict(j, version=0), "field 'version' must be an integer >= 1, is 0"),
    ("journal v2", lambda j: _without(j, "request"), "missing field 'request'"),
    ("journal v2", lambda j: dict(j, body=b"short"), "field 'body' must be a 32-byte id, is 5 bytes"),
    ("journal v2", lambda j: dict(j, writer="Mallory"), "field 'writer' must be 64 lowercase hex digits (an ed25519 public key), is 'Mallory'"),
    ("journal v2", lambda j: dict(j, reflects_through=j["reflects_through"].hex()),
     "field 'reflects_through' must be a 32-byte id or nil, is '" + golden_value("journal v2")["reflects_through"].hex()[:37] + "'…"),
    ("journal v2", lambda j: dict(j, v=3), "unknown journal schema version 3 (known: 1, written without 'v', and 2)"),
    ("journal v2", lambda j: dict(j, previous=Z), "version 1 and only version 1 has no previous version"),
    ("journal v2", lambda j: dict(j, request=dict(j["request"], sig=None)), "field 'request.sig' must be 128 hex digits (an ed25519 signature), is None"),
    ("journal v2", lambda j: dict(j, request=dict(j["request"], params={})), "missing field 'request.params.reflects_through'"),
    ("journal v2", lambda j: dict(j, request=dict(j["request"], params=dict(j["request"]["params"], extra=1))),
     "field 'request.params' must hold reflects_through, checkpoint and enabled only"),
    ("grant v2 (owner-signed)", lambda g: dict(g, action="promote"), "field 'action' must be 'grant' or 'revoke', is 'promote'"),
    ("grant v2 (owner-signed)", lambda g: dict(g, rights=["write", "read"]),
     "field 'rights' must be a sorted, non-empty list of distinct rights from delete, read, write, is list"),
    ("grant v2 (owner-signed)", lambda g: dict(g, role="admin"), "field 'role' must be one of worker, job, is 'admin'"),
    ("grant v2 (owner-signed)", lambda g: _without(g, "sig"), "missing field 'sig'"),
    ("grant v2 (owner-signed)", lambda g: dict(g, seq=0), "field 'seq' must be an integer >= 1, is 0"),
    ("segment v2", lambda s: dict(s, snapshot=dict(s["snapshot"], outcome="fine")),
     "field 'snapshot.outcome' must be one of present, absent, disabled, unavailable, over_budget, is 'fine'"),
    ("segment v2", lambda s: dict(s, tasks=[{"task": ""}]), "field 'tasks' must be a list of maps {task: non-empty string, title: string}, is list"),
    ("segment v2", lambda s: dict(s, retained=[b"x"]), "field 'retained' must be a list of 32-byte ids, is list"),
    ("segment v2", lambda s: dict(s, origin="source"), "field 'origin' must be 'derived', is 'source'"),
    ("segment v2", lambda s: dict(s, seq=2), "seq 1 and only seq 1 has no previous segment"),
    ("segment v1 (legacy)", lambda s: dict(s, journal=dict(s["journal"], outcome=None)),
     "field 'journal.outcome' must be one of present, absent, disabled, unavailable, over_budget, is None"),
    ("journal v1 (legacy)", lambda j: dict(j, source_end=-2), "field 'source_end' must be an integer >= -1, is -2"),
    ("grant v1 (legacy)", lambda g: _without(g, "by"), "missing field 'by'"),
]


@pytest.mark.parametrize("name,mutate,problem", BAD, ids=[f"{b[0]}: {b[2][:40]}" for b in BAD])
def test_schema_names_what_is_wrong(name, mutate, problem):
    v = vec(load(), name)
    value = mutate(G.from_json(v["value"]))
    assert S.schema_problem(v["type"], value) == problem


def test_verify_reports_a_malformed_journal_object(tmp_path):
    """A schema-2 journal object without its signed request, put through the raw store API into its
    run's log: verify names it (malformed-object) with the segment it is in; moving a plain ref to it
    adds damaged-ref. (run/*/journal is forward-only, so that ref is not moved.)"""
    log = RunLog(Store.init(str(tmp_path / "s")))
    run = J.start_session(log, "alice", run="r1")
    assert verify(log) == []
    good = golden_value("journal v2")
    with log.store.batch_in(run):
        body = log.store.put_blob(b"{}")
        bad = log.store.put(codec.JOURNAL, dict(_without(good, "request"), run=run, body=body))
    engine = log_engine_of(log.store, run)
    where = engine.seg_path(engine._seg)
    line = f"malformed-object {bad.hex()}: missing field 'request' [{where}]"
    assert [p.line() for p in verify(RunLog(Store.open(log.store.root)))] == [line]
    with log.store.batch():
        log.store.set_ref("tags/x", None, bad, "points at a malformed object")
    # tags/x is a store-wide ref: with a log per run the store log holds it and a copy of the object it names, each
    # log proved on its own (the store log's first); one log holds both once
    store_log = log_engine_of(log.store)
    at = store_log.seg_path(store_log._seg)
    damaged = f"damaged-ref tags/x: points to damaged object {bad.hex()} [{at}]"
    want = [f"malformed-object {bad.hex()}: missing field 'request' [{at}]", damaged, line] if log.store.logs.per_run else [line, damaged]
    assert [p.line() for p in verify(RunLog(Store.open(log.store.root)))] == want


def test_verify_accepts_every_object_the_code_writes(tmp_path):
    """The same pipeline as the golden vectors, on a store on disk: verify finds nothing."""
    owner, worker = G.key(bytes(range(32))), G.key(bytes(range(32, 64)))
    log = RunLog(Store.init(str(tmp_path / "s")))
    identity.set_owner(log.store, owner.public)
    host = J.LocalJournalHost(log)
    run = J.start_session(log, "alice", run="s1", host=host, key=owner)
    for i in range(4):
        J.record_turn(log, run, "user" if i % 2 == 0 else "model", f"turn {i}")
    J.open_task(log, run, "t-1", "a task")
    J.grant(log, owner, run, worker.public, name="w")
    J.grant(log, owner, None, worker.public, subject="alice", rights=("read",))
    J.update_journal(log, run, worker, {"entries": [{"id": "a"}]}, reflects_through="latest", host=host)
    J.compact(log, run, J.StubCompactor(), host=host, key=owner, keep_tail=1)
    J.compact(log, run, J.StubCompactor(), host=None, key=owner, keep_tail=0)
    J.set_journal_enabled(log, run, owner, False, host=host)
    J.supersede(log, owner, run, worker.public, G.key(bytes(range(64, 96))).public)
    J.start_session(log, "alice", run, run="s2", host=host, key=owner)
    assert verify(RunLog(Store.open(log.store.root))) == []
