"""Seed T-745, journal compaction: one test group per condition of the verification record.

Real store, real compare-and-swap, real compaction; only the model is replaced
by StubCompactor (deterministic), which proves transport and storage, not
summary quality.
"""

import hashlib
import json
import os

import pytest

from objstore import RunLog, Store, codec
from objstore import journal as J
from objstore.errors import (InvalidRecord, JobCaller, LimitExceeded, Unauthenticated, WriterRevoked,
                             WrongSession, WrongSubject)
from objstore.export import export
from objstore.verify import verify

from helpers import snapshot_tree, assert_prefix_kept


@pytest.fixture
def env(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    run = J.start_session(log, "s1", subject="alice")
    boss = J.owner(log, run)
    J.grant_writer(log, run, "w1", boss)
    w1 = J.Caller("w1", "alice", session=run)
    host = J.LocalJournalHost(log)
    return log, run, boss, w1, host


def talk(log, run, n, prefix="turn"):
    return [J.record_turn(log, run, "user" if i % 2 == 0 else "model", f"{prefix} {i}") for i in range(n)]


def seg_journal_blob(log, seg, key):
    return log.store.get_blob(seg["journal"][key])


# 1 -----------------------------------------------------------------------------------------------
def test_c1_snapshot_reaches_input_and_segment_over_three_compactions(env):
    log, run, boss, w1, host = env
    comp = J.StubCompactor()
    ids = []
    for k in range(3):
        recs = talk(log, run, 6, prefix=f"round{k}")
        jid, ver = J.update_journal(log, run, w1, {"done": [f"round {k}"], "open": ["next"]}, source_end=recs[-1].lsn, checkpoint=recs[-1].lsn)
        ids.append(jid)
        res = J.compact(log, run, comp, host=host, caller=w1, keep_tail=2)
        req = json.loads(comp.requests[-1])
        seg = log.store.get_typed(res.segment_id, codec.SEGMENT)
        body = log.store.get_blob(log.store.get_typed(jid, codec.JOURNAL)["body"])
        # the same full text, reference, checkpoint, hash and provenance on both sides
        assert req["journal"]["text"].encode() == seg_journal_blob(log, seg, "rendered")
        assert seg_journal_blob(log, seg, "body") == body
        assert req["journal"]["sha256"] == seg["journal"]["sha256"] == hashlib.sha256(body).hexdigest()
        assert req["journal"]["version"] == seg["journal"]["version"] == ver == k + 1
        assert req["journal"]["checkpoint"] == seg["journal"]["checkpoint"] == recs[-1].lsn
        assert req["journal"]["provenance"] == seg["journal"]["provenance"]
        assert seg["journal"]["journal_id"] == jid
        assert hashlib.sha256(comp.requests[-1]).hexdigest() == seg["input_sha256"]
        assert log.store.get_blob(seg["input"]) == comp.requests[-1]
    # no older injection mixed into the latest reference
    last = J.segments(log, run)[-1][1]
    assert last["journal"]["journal_id"] == ids[2]
    assert b"round 0" not in seg_journal_blob(log, last, "rendered") and b"round 1" not in seg_journal_blob(log, last, "rendered")
    assert verify(log) == []


# 2 -----------------------------------------------------------------------------------------------
def test_c2_frozen_under_concurrent_update(env):
    log, run, boss, w1, host = env
    talk(log, run, 6)
    v1, _ = J.update_journal(log, run, w1, {"state": "original"}, source_end=3, checkpoint=3)
    v1_body = log.store.get_blob(log.store.get_typed(v1, codec.JOURNAL)["body"])

    def update_during_call(request):
        J.update_journal(log, run, w1, {"state": "changed while compacting"}, source_end=5, checkpoint=5)

    comp = J.StubCompactor(on_call=update_during_call)
    res = J.compact(log, run, comp, host=host, caller=w1, keep_tail=1)
    cur_id, cur = J.current_journal(log, run)
    assert cur["version"] == 2 and cur_id != v1, "the store moved to the next version"
    assert list(log.store.ref_log(J.journal_ref(run)))[-1]["old"] == v1.hex(), "by compare-and-swap from v1"
    req = json.loads(comp.requests[0])
    assert v1_body.decode() in req["journal"]["text"] and "changed while compacting" not in comp.requests[0].decode()
    assert seg_journal_blob(log, res.segment, "body") == v1_body
    assert res.segment["journal"]["sha256"] == hashlib.sha256(v1_body).hexdigest()
    assert res.segment["journal"]["journal_id"] == v1


# 3 -----------------------------------------------------------------------------------------------
def test_c3_unreflected_input_is_carried(env):
    log, run, boss, w1, host = env
    recs = talk(log, run, 4)
    late = J.record_turn(log, run, "user", "UNREFLECTED: deploy to staging, not production")
    recs += [late] + talk(log, run, 4, prefix="after")
    J.update_journal(log, run, w1, {"done": ["setup"]}, source_end=recs[2].lsn, checkpoint=recs[-1].lsn)
    comp = J.StubCompactor()
    res = J.compact(log, run, comp, host=host, caller=w1, keep_tail=2)
    req = json.loads(comp.requests[0])
    assert req["journal"]["source_end"] != req["journal"]["checkpoint"]
    carried = [t for t in req["turns"] + req["retained_tail"] if "UNREFLECTED" in t["text"]]
    assert len(carried) == 1 and carried[0]["reflected_in_journal"] is False
    assert late.id in res.segment["unreflected"] or late.id in res.segment["retained"]
    assert all(not t["reflected_in_journal"] for t in req["turns"] if t["lsn"] > recs[2].lsn)
    assert "Fill gaps, do not copy the journal" in req["instructions"]


# 4 -----------------------------------------------------------------------------------------------
def test_c4_no_waiting_and_reads_change_nothing(env):
    log, run, boss, w1, host = env
    talk(log, run, 3)
    J.record_turn(log, run, "model", "partial output...", generation={"state": "active"})  # an active generation
    J.update_journal(log, run, w1, {"open": [{"id": "e1", "status": "open"}]}, source_end=1, checkpoint=2)  # open entry, unreflected range
    before = snapshot_tree(log.store.root)
    refs_before = dict(log.store.list_refs())
    snap = host.read(w1, run, 1 << 20)
    assert snap.outcome == "present"
    assert snapshot_tree(log.store.root) == before, "a compaction read writes nothing"
    # compaction completes now, with an update arriving during the call
    comp = J.StubCompactor(on_call=lambda req: J.update_journal(log, run, w1, {"open": []}, source_end=3, checkpoint=3))
    res = J.compact(log, run, comp, host=host, caller=w1, keep_tail=1)
    assert res.snapshot.outcome == "present"
    refs_after = dict(log.store.list_refs())
    changed = {k for k in set(refs_before) | set(refs_after) if refs_before.get(k) != refs_after.get(k)}
    assert changed == {J.segments_ref(run), J.journal_ref(run)}, changed  # the journal moved only by the concurrent update
    assert_prefix_kept({k: v for k, v in before.items() if k.startswith("log")}, snapshot_tree(log.store.root))


# 5 -----------------------------------------------------------------------------------------------
def test_c5_outcomes_are_distinct_and_summarization_still_succeeds(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    seen = {}

    def case(name, host, setup=None, budget=1 << 20):
        run = J.start_session(log, f"c-{name}", subject="bob")
        boss = J.owner(log, run)
        talk(log, run, 5)
        if setup:
            setup(run, boss)
        res = J.compact(log, run, J.StubCompactor(), host=host, caller=boss, keep_tail=1, budget_bytes=budget)
        assert res.summary.startswith("SUMMARY 1: 4 turn(s) summarized")  # plain summarization still works
        assert J.segments(log, run)[-1][0] == res.segment_id
        seen[name] = (res.snapshot.outcome, (res.snapshot.reason or "").split(":")[0])
        return res

    local = J.LocalJournalHost(log)
    case("empty", local)
    case("disabled", local, lambda run, boss: J.set_journal_enabled(log, run, boss, False))
    case("nohost", None)
    case("failure", J.FailingHost())
    big = case("overbudget", local, lambda run, boss: J.update_journal(log, run, boss, {"x": "y" * 5000}, source_end=1, checkpoint=1), budget=1000)
    assert big.snapshot.body_json is None and big.segment["journal"]["body"] is None, "an over-budget body is not smuggled in"
    case("present", local, lambda run, boss: J.update_journal(log, run, boss, {"x": 1}, source_end=1, checkpoint=1))
    assert seen["empty"][0] == "absent" and seen["disabled"][0] == "disabled" and seen["overbudget"][0] == "over_budget"
    assert seen["nohost"] == ("unavailable", "no_host") and seen["failure"] == ("unavailable", "read_failed")
    assert len(set(seen.values())) == 6, seen
    for name in ("empty", "disabled", "nohost", "failure", "overbudget"):
        text = log.store.get_blob(J.segments(log, f"c-{name}")[-1][1]["journal"]["rendered"]).decode()
        assert "does not mean the history was recorded" in text


def test_c5_subject_boundary_refusals(env):
    log, run, boss, w1, host = env
    talk(log, run, 3)
    J.update_journal(log, run, w1, {"k": 1}, source_end=1, checkpoint=1)
    other = J.start_session(log, "s-other", subject="alice")
    cases = [
        (J.Caller("mallory", "eve"), WrongSubject),
        (J.Caller("w1", "alice", session=other), WrongSession),
        (J.Caller("w1", "alice", signed=False), Unauthenticated),
        (J.Caller("nightly", "alice", kind="job"), JobCaller),
    ]
    for caller, exc in cases:
        with pytest.raises(exc):
            host.read(caller, run, 1 << 20)
        with pytest.raises(exc):
            J.compact(log, run, J.StubCompactor(), host=host, caller=caller)
        with pytest.raises(exc):
            J.update_journal(log, run, caller, {"x": 1}, source_end=1, checkpoint=1)
    with pytest.raises(WriterRevoked):  # same subject, but never granted
        J.update_journal(log, run, J.Caller("w2", "alice"), {"x": 1}, source_end=1, checkpoint=1)
    assert J.segments(log, run) == []
    assert J.current_journal(log, run)[1]["version"] == 1


def test_c5_current_session_priority_and_same_subject_supplement(env):
    log, run, boss, w1, host = env
    J.update_journal(log, run, w1, {"from": "predecessor"}, source_end=0, checkpoint=0)
    s2 = J.start_session(log, "s2", subject="alice", predecessor=run)
    talk(log, s2, 4)
    b2 = J.owner(log, s2)
    res = J.compact(log, s2, J.StubCompactor(), host=host, caller=b2, keep_tail=1)
    assert res.snapshot.session == run and res.snapshot.provenance["supplement_for"] == s2
    J.update_journal(log, s2, b2, {"from": "current"}, source_end=2, checkpoint=2)
    talk(log, s2, 2)
    res = J.compact(log, s2, J.StubCompactor(), host=host, caller=b2, keep_tail=1)
    assert res.snapshot.session == s2 and b'"from":"current"' in res.snapshot.body_json
    # a predecessor of another subject is never read
    s3 = J.start_session(log, "s3", subject="carol", predecessor=run)
    talk(log, s3, 2)
    res = J.compact(log, s3, J.StubCompactor(), host=host, caller=J.owner(log, s3), keep_tail=1)
    assert res.snapshot.outcome == "absent" and res.snapshot.session == s3


# 6 -----------------------------------------------------------------------------------------------
def test_c6_chain_of_three_full_previous_summary(env):
    log, run, boss, w1, host = env
    long_text = "L" * 200_000 + "THE-LAST-BYTES"

    class Long(J.StubCompactor):
        def __call__(self, request, request_bytes):
            out = super().__call__(request, request_bytes)
            return {"role": "assistant", "text": long_text + f" #{len(self.requests)}"}

    comp = Long(max_input_bytes=10 << 20)
    segs = []
    for k in range(3):
        recs = talk(log, run, 5, prefix=f"c{k}")
        J.update_journal(log, run, w1, {"round": k}, source_end=recs[-1].lsn, checkpoint=recs[-1].lsn)
        segs.append(J.compact(log, run, comp, host=host, caller=w1, keep_tail=2))
        if k == 0:
            first_raw = log.store.get_raw(segs[0].segment_id)
    r2, r3 = json.loads(comp.requests[1]), json.loads(comp.requests[2])
    assert r2["previous_summary"] == long_text + " #1"  # whole, to its last byte
    assert r3["previous_summary"] == long_text + " #2"
    assert r3["previous_summary"].endswith("THE-LAST-BYTES #2")
    # old journals: each once, labelled historical, never the current one again
    hist_versions = [h["version"] for h in r3["historical_journals"]]
    assert hist_versions == [1, 2] and r3["journal"]["version"] == 3
    assert all(h["label"].startswith("historical") for h in r3["historical_journals"])
    # retention boundary: the turn just before the tail is summarized, the tail is retained
    turns3 = [t["text"] for t in r3["turns"]]
    tail3 = [t["text"] for t in r3["retained_tail"]]
    assert tail3 == ["c2 3", "c2 4"] and turns3[-1] == "c2 2" and turns3[0] == "c1 3"
    # the original segment's raw bytes are unchanged, and the chain links them
    assert log.store.get_raw(segs[0].segment_id) == first_raw
    chain = J.segments(log, run)
    assert [s[0] for s in chain] == [s.segment_id for s in segs]
    assert [s[1]["previous"] for s in chain] == [None, segs[0].segment_id, segs[1].segment_id]


def test_c6_over_the_hard_limit_fails_and_writes_nothing(env):
    log, run, boss, w1, host = env
    talk(log, run, 6)
    J.update_journal(log, run, w1, {"big": "z" * 3000}, source_end=1, checkpoint=1)
    before = snapshot_tree(log.store.root)
    with pytest.raises(LimitExceeded, match="over its hard limit of 2000; nothing was truncated"):
        J.compact(log, run, J.StubCompactor(max_input_bytes=2000), host=host, caller=w1)
    after = snapshot_tree(log.store.root)
    assert {k: v for k, v in after.items() if not k.startswith("state.db")} == {k: v for k, v in before.items() if not k.startswith("state.db")}


# 7 -----------------------------------------------------------------------------------------------
def test_c7_restore_and_normal_turns_do_not_reread(env):
    log, run, boss, w1, host = env
    recs = talk(log, run, 6)
    jid, _ = J.update_journal(log, run, w1, {"frozen": "yes"}, source_end=recs[-1].lsn, checkpoint=recs[-1].lsn)
    res = J.compact(log, run, J.StubCompactor(), host=host, caller=w1, keep_tail=2)
    reads = host.reads
    assert reads == 1, "one read per compaction"
    for i in range(5):  # normal turns
        J.record_turn(log, run, "user", f"normal {i}")
        ctx = J.context(log, run)
    assert host.reads == reads
    # the catalog changes; restore still gives the stored body, hash and provenance
    J.update_journal(log, run, w1, {"frozen": "no, changed"}, source_end=99, checkpoint=99)
    log.rewind(run, recs[-1].lsn + 1, reason="restore after rewind")
    ctx = J.context(log, run)
    assert host.reads == reads
    jitem = next(c for c in ctx if c["kind"] == "journal_context")
    assert '"frozen":"yes"' in jitem["text"] and jitem["sha256"] == res.segment["journal"]["sha256"]
    assert jitem["provenance"] == res.segment["journal"]["provenance"]
    assert [c["text"] for c in ctx if c["kind"] == "turn"] == ["turn 4", "turn 5", "normal 0"]


# 8 -----------------------------------------------------------------------------------------------
def test_c8_derived_never_becomes_source_even_as_user(env):
    log, run, boss, w1, host = env
    talk(log, run, 5)
    res = J.compact(log, run, J.StubCompactor(role="user"), host=host, caller=w1, keep_tail=1)
    assert res.segment["summary_role"] == "user" and res.segment["origin"] == "derived"
    src = J.source_material(log, run)
    texts = [log.store.get_blob(r.body["content"]).decode() for r in src]
    assert res.summary not in texts and all(r.kind == "turn" for r in src)
    ctx = J.context(log, run)
    assert next(c for c in ctx if c["kind"] == "summary")["origin"] == "derived"
    exported = json.dumps(export(log, run))
    assert "SUMMARY" not in exported and res.segment_id.hex() not in exported
    with pytest.raises(InvalidRecord):
        log.append(run, "turn", {"role": "user", "content": log.put_blob(b"x"), "origin": "derived"})


def test_c8_revoked_writer_refused_and_read_does_not_revive(env):
    log, run, boss, w1, host = env
    J.update_journal(log, run, w1, {"a": 1}, source_end=0, checkpoint=0)
    J.revoke_writer(log, run, "w1", boss, reason="rotated")
    with pytest.raises(WriterRevoked, match="revoked"):
        J.update_journal(log, run, w1, {"a": 2}, source_end=0, checkpoint=0)
    assert host.read(w1, run, 1 << 20).outcome == "present"  # reading is still allowed to the subject
    with pytest.raises(WriterRevoked):
        J.update_journal(log, run, w1, {"a": 3}, source_end=0, checkpoint=0)
    J.grant_writer(log, run, "w3", boss)
    J.supersede_writer(log, run, "w3", "w4", boss)
    with pytest.raises(WriterRevoked):
        J.update_journal(log, run, J.Caller("w3", "alice"), {"a": 4}, source_end=0, checkpoint=0)
    J.update_journal(log, run, J.Caller("w4", "alice"), {"a": 5}, source_end=0, checkpoint=0)
    hist = J.grant_history(log, run, "w1")
    assert [g["action"] for g in hist] == ["grant", "revoke"], "revocation recorded, grant not erased"


def test_c8_legacy_records_classified_by_type_only(env):
    log, run, boss, w1, host = env
    # A legacy turn written before origins existed, whose body *looks* like a summary.
    view = log.view(run)
    head = view.heads[0]
    legacy = {"run": run, "branch": 0, "lsn": 1, "parent": head, "kind": "turn", "time": 0.0,
              "body": {"role": "user", "content": log.put_blob(b"[SUMMARY] previous context: ...")}}
    lid = log.store.put("record", legacy)
    log.store.set_ref(f"run/{run}/branch/0", head, lid, "legacy import")
    assert J.classify("record", legacy) == "source"
    assert [r.id for r in J.source_material(log, run)] == [lid]
    talk(log, run, 3)
    res = J.compact(log, run, J.StubCompactor(), host=host, caller=w1, keep_tail=1)
    assert J.classify("segment", res.segment) == "derived"
    assert verify(log) == []


# 9 -----------------------------------------------------------------------------------------------
def test_c9_docs_say_what_the_stub_proves_and_what_not():
    root = os.path.join(os.path.dirname(__file__), "..")
    doc = open(os.path.join(root, "docs", "JOURNAL.md")).read()
    assert "proves transport and storage" in doc and "not the quality" in doc
    assert "No live model" in doc
    assert "proves transport and storage, not summary quality" in J.StubCompactor.__doc__


def test_cli_journal_compact_segments(tmp_path):
    from helpers import run_cli

    root = str(tmp_path / "s")
    events = "\n".join(json.dumps(e) for e in [
        {"v": 1, "type": "run_started", "run": "sess", "subject": "alice", "meta": {"session": True}},
        {"v": 1, "type": "turn", "run": "sess", "role": "user", "content": "hello"},
        {"v": 1, "type": "turn", "run": "sess", "role": "model", "content": "hi"},
        {"v": 1, "type": "turn", "run": "sess", "role": "user", "content": "do X"},
    ]) + "\n"
    assert run_cli("ingest", "-", store=root, input=events.encode())[0] == 0
    rc, out, err = run_cli("journal", "update", "sess", "-", "--source-end", "2", "--checkpoint", "3", store=root, input=b'{"open": ["X"]}')
    assert rc == 0 and "version 1" in out, err
    rc, out, err = run_cli("compact", "sess", "--keep", "1", "--json", store=root)
    assert rc == 0, err
    res = json.loads(out)
    assert res["journal_outcome"] == "present" and res["seq"] == 1
    rc, out, err = run_cli("segments", "sess", store=root)
    assert rc == 0 and out.startswith("segment 1 ") and "journal present v1" in out
    rc, out, err = run_cli("journal", "update", "sess", "-", "--source-end", "1", "--checkpoint", "1", "--writer", "bob", store=root, input=b"{}")
    assert rc == 8 and err.strip() == "objstore: error: refused: writer 'bob' has no live grant on run sess: never granted"
    rc, out, err = run_cli("journal", "disable", "sess", store=root)
    assert rc == 0
    rc, out, err = run_cli("compact", "sess", "--json", store=root)
    assert json.loads(out)["journal_outcome"] == "disabled"
    assert run_cli("verify", store=root)[0] == 0


def test_concurrent_compaction_loses_cleanly(env):
    from objstore.errors import Conflict

    log, run, boss, w1, host = env
    talk(log, run, 6)

    def race(request):
        # another compaction lands while this one's compactor is running
        J.compact(log, run, J.StubCompactor(), host=host, caller=w1, keep_tail=1)

    with pytest.raises(Conflict):
        J.compact(log, run, J.StubCompactor(on_call=race), host=host, caller=w1, keep_tail=1)
    assert [s[1]["seq"] for s in J.segments(log, run)] == [1]
