"""The log is the only truth (issue 15's acceptance), tried as an attacker who can write every file
of the store and recompute every checksum that is not covered by the log: a re-hashed checkpoint,
checksum-valid entries that break a ref rule, a meta row that lies about its record, a re-hashed
``.idx``, a missing sealed segment, a flipped or truncated acknowledged entry, a bad middle entry.

Every test damages bytes on disk in a real store (a copy of a template built once per module) and
compares answers before and after: reads answer as before or fail with one typed line (exit 6),
writes build on the true state or refuse, ``verify`` names the damage with an exact line (exit 1).
Crafted entries are built the way a writer builds them (``engine.build_entry`` with the index rows
and a root the attacker computes from the tables at the log's end).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import blake3
import pytest
from helpers import is_state_file, run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import CorruptLog, ObjstoreError
from objstore.runs.anchors import anchor_token
from objstore.runs.facts import object_facts
from objstore.runs.query import episode
from objstore.runs.verify import verify_report
from objstore.storage import codec, identity
from objstore.storage.log import local_write, segindex
from objstore.storage.log.entry import build_entry
from objstore.storage.log.format import ENTRY_HEAD, SEG_HEADER, WITNESS, WITNESS_MAGIC
from objstore.storage.log.root import root_digest, tables_root
from objstore.storage.log.rules import EntryEffect
from objstore.storage.log.tables import LogState


@pytest.fixture(scope="module", autouse=True)
def one_log():
    """Every store here has one log (formats 3 to 5): these are one log's files and the readers over them. A run's
    log on a store with a log per run is the same log over its own directory (tests/runs/test_anchor_runlogs.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        yield

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_LINE = "damaged-checkpoint {}: its tables do not hash to the root of entry {}; readers do not adopt it (delete it, or let the next writer replace it)"


# -- the template stores ---------------------------------------------------------------------------

def _build(path, tmp):
    """Session A (owner alice) with worker w1 granted, two journal versions, then w1 revoked; run r1
    with two attempts on branch 0 and a rewind (branch 1 live, one attempt on it); run r2."""
    log = RunLog(Store.init(path, fsync="off"))
    owner, _ = identity.ensure_owner_key(log.store, str(tmp / "owner.key"))
    w = identity.generate()
    a = J.start_session(log, "alice", run="A")
    J.grant(log, owner, a, w.public, name="w1")
    J.record_turn(log, a, "user", "hello")
    J.update_journal(log, a, w, {"entries": [{"id": "e1"}]}, reflects_through="latest")
    J.update_journal(log, a, w, {"entries": [{"id": "e1"}, {"id": "e2"}]}, reflects_through="latest")
    J.revoke(log, owner, a, w.public)
    log.start_run("r1")
    p = log.put_blob(b"the prompt of r1")
    log.record_attempt("r1", step=1, attempt=1, state="failed", prompt=p, error="boom")
    log.record_attempt("r1", step=1, attempt=2, state="succeeded", prompt=p)
    log.rewind("r1", 1, reason="again")
    log.record_attempt("r1", step=1, attempt=3, state="succeeded")
    log.start_run("r2")
    log.record_attempt("r2", step=1, attempt=1, state="succeeded")
    log.store.engine._checkpoint()  # an honest checkpoint at the log's end: what the attacker edits
    return owner, w


def _records(log, run, upto=None):
    return repr([(r.branch, r.lsn, r.kind, r.id) for r in log.records(run, all_branches=True)][:upto])


def _api(path, w):
    """Every library read the damages could change, from a freshly opened store."""
    log = RunLog(Store.open(path))
    st = log.store
    out = {"refs": repr(sorted(st.list_refs())), "runs": repr(log.runs()), "owner": identity.owner_public(st),
           "journal": repr(J.show(log, "A")), "grant": repr(J.LocalJournalHost(log).grant_state(w.public, "A", "alice"))}
    for run in ("A", "r1", "r2"):
        view = log.view(run)
        out[f"view {run}"] = repr(view)
        out[f"branches {run}"] = repr(log.branches(view))
        out[f"records {run}"] = _records(log, run)
    for run in ("r1", "r2"):
        out[f"episode {run}"] = episode(log, run, all_branches=True, source="refold").to_json()
    return out


CLI_READS = {"journal": [("journal", "show", "A")], "owner": [("refs", "keys/")],
             "rewind": [("log", "r1", "--all-branches"), ("branches", "r1")], "run": [("runs",), ("log", "r2")]}


def _cli(path, which):
    return {args: run_cli(*args, store=path, exit_code=0)[1] for args in CLI_READS[which]}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("truth")
    path = str(tmp / "s")
    owner, w = _build(path, tmp)
    fresh = Store.open(path).engine
    assert fresh._ckpt_at[0] == fresh.position().entry, "the honest checkpoint is adopted (the forgeries below are not)"
    before = _api(path, w)
    cli = {k: v for which in CLI_READS for k, v in _cli(path, which).items()}
    pos = fresh.position()
    cli["anchor"] = anchor_token(pos.entry, pos.checksum)  # kept elsewhere, before any damage
    return path, owner, w, before, cli


@pytest.fixture
def store(template, tmp_path):
    path, owner, w, before, cli = template
    dst = str(tmp_path / "s")
    shutil.copytree(path, dst)
    return dst, owner, w, before, cli


def _files(path):
    """Every file but the witness (rewritten in place by design) and the state cache (a reader's)."""
    return {k: v for k, v in snapshot_tree(path).items() if k != os.path.join("log", "witness") and not is_state_file(k)}


def _one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, f"not one line: {err!r}"
    return lines[0]


def _problems(path):
    return [p.line() for p in verify_report(RunLog(Store.open(path))).problems]


def _ack(path, n, checksum):
    """Make entry ``n`` acknowledged: the head witness names it, as its writer's sync would."""
    with open(os.path.join(path, "log", "witness"), "wb") as f:
        f.write(WITNESS.pack(WITNESS_MAGIC, n, checksum))


# -- 1. a checkpoint with an edited ref table, re-hashed ------------------------------------------

def _forge_checkpoint(path, edit):
    """Load the checkpoint, apply ``edit(tables, store)`` and write it back with its BLAKE3
    recomputed (the checkpoint's own checksum covers nothing an attacker cannot recompute)."""
    ck = os.path.join(path, "log", "checkpoint")
    with open(ck, "rb") as f:
        data = f.read()
    t, seg, off = LogState.load(data[:-32])
    edit(t, Store.open(path))
    body = t.dump(seg, off, 1)
    assert body != data[:-32], "the edit changed nothing"
    with open(ck, "wb") as f:
        f.write(body + blake3.blake3(body).digest())
    return ck, t.pos.entry


def _unrevoke(t, st):
    """The grant ref of w1 back to the grant object the revocation follows."""
    name = next(k for k in t.refs if k.startswith("run/A/grant/"))
    t.set_ref(name, st.get_typed(t.refs[name], codec.GRANT)["previous"])


def _drop_run(t, st):
    for name in [k for k in t.refs if k.startswith("run/r2/")]:
        t.set_ref(name, None)
    t.tips = {k: v for k, v in t.tips.items() if k[0] != "r2"}
    t.starts.pop("r2", None)


CKPT_DAMAGE = {
    "journal": _unrevoke,
    "owner": lambda t, st: t.set_ref("keys/owner", st.put_blob(identity.generate().public.encode("ascii"))),
    "rewind": lambda t, st: t.set_ref("run/r1/live", "ref: run/r1/branch/0"),
    "run": _drop_run,
}


def _write_after(which, path, owner, w):
    """A write after the damage: it must build on the true state."""
    log = RunLog(Store.open(path))
    if which == "journal":  # w1 stays revoked: its update is refused, the journal unchanged
        with pytest.raises(ObjstoreError) as e:
            J.update_journal(log, "A", w, {"entries": [{"id": "forged"}]}, reflects_through="latest")
        assert "revoked" in str(e.value)
        assert J.show(RunLog(Store.open(path)), "A")["body"] == {"entries": [{"id": "e1"}, {"id": "e2"}]}
    elif which == "owner":  # the owner is still the owner: its grant lands, signed by the true key
        J.grant(log, owner, "A", identity.generate().public, name="w2")
        assert identity.owner_public(Store.open(path)) == owner.public
    elif which == "rewind":  # the next attempt lands on the live branch 1, after its LSN 1
        rec = log.record_attempt("r1", step=2, attempt=1, state="succeeded")
        assert (rec.branch, rec.lsn) == (1, 1)  # branch 1's own LSN 0 is attempt 3
    else:  # r2 is still there: its next record is LSN 2 of its branch 0, a new run r2 is refused
        rec = log.record_attempt("r2", step=2, attempt=1, state="succeeded")
        assert (rec.branch, rec.lsn) == (0, 2)
        with pytest.raises(ObjstoreError):
            log.start_run("r2")


@pytest.mark.parametrize("which", sorted(CKPT_DAMAGE))
def test_rehashed_checkpoint_decides_nothing(store, which):
    path, owner, w, before, cli = store
    ck, n = _forge_checkpoint(path, CKPT_DAMAGE[which])
    got = _api(path, w)
    for k in before:
        assert got[k] == before[k], f"{which}: {k} changed after a re-hashed checkpoint"
    assert Store.open(path).engine._ckpt_at == (0, 0), "the forged checkpoint was adopted"
    assert _cli(path, which) == {k: cli[k] for k in CLI_READS[which]}
    for extra in ((), ("--anchor", cli["anchor"])):  # the anchor holds: the log is intact, only the checkpoint lies
        _, out, _ = run_cli("verify", *extra, store=path, exit_code=1)
        assert out.splitlines() == [CKPT_LINE.format(ck, n)], extra
    _write_after(which, path, owner, w)


# -- crafted commits that break a ref rule ---------------------------------------------------------

def _forge_entry(path, moves, objects=(), ack=True, rows=None):
    """Append a checksum-valid entry with ``moves`` (and ``objects``) after the log's end, with the
    root the tables would have if the rules were not checked. Returns (entry, segment path)."""
    eng = Store.open(path).engine
    t = eng.tables
    assert tables_root(t.refs, t.tips, t.intents, t.starts, t.idx) == t.root_sum, "the attacker's root is the engine's"
    refs = dict(t.refs)
    for name, _old, new, _reason in moves:
        if new is None:
            refs.pop(name, None)
        else:
            refs[name] = new
    root_sum = tables_root(refs, t.tips, t.intents, t.starts, t.idx)  # the tables' root by its definition
    objects = list(objects)
    facts = {oid: f for oid, otype, canon in objects if (f := object_facts(otype, canon, None, oid)) is not None}
    facts.update(rows or {})  # index rows that say something else than their objects
    raw, e = build_entry(t.pos.checksum, t.pos.entry + 1, time.time(), objects, moves, None, True, facts=facts,
                           root=root_digest(root_sum))
    seg = eng.seg_path(eng._seg)
    assert os.path.getsize(seg) == eng._off
    with open(seg, "ab") as f:
        f.write(raw)
    if ack:
        _ack(path, e.n, e.checksum)
    return e._replace(seg=eng._seg, offset=eng._off, data_off=eng._off + e.data_off), seg


def _obj(otype, value):
    canon = codec.encode(otype, value)
    return codec.object_id(canon), otype, canon


def _rule_owner(st):
    blob = _obj(codec.BLOB, identity.generate().public.encode("ascii"))
    return [["keys/owner", st.read_ref("keys/owner"), blob[0], "owner"]], [blob], "ref keys/owner is written once and never moved or deleted"


def _rule_journal(st):
    cur = st.read_ref("run/A/journal")
    old = st.get_typed(cur, codec.JOURNAL)["previous"]
    assert isinstance(old, bytes)
    return ([["run/A/journal", cur, old, "roll back"]], [],
            "ref run/A/journal only moves forward: the new object must be a journal naming the current one as its previous")


def _rule_grant(st):
    name = next(k for k, _ in st.list_refs("run/A/grant/"))
    cur = st.read_ref(name)
    g = dict(st.get_typed(cur, codec.GRANT), action="grant", rights=["read", "write"], previous=None, seq=1)
    new = _obj(codec.GRANT, g)
    return ([[name, cur, new[0], "replaced"]], [new],
            f"ref {name} only moves forward: the new object must be a grant naming the current one as its previous")


def _rule_segments(st):
    other = st.read_ref("run/A/journal")  # stored, but not in the crafted entry (and not a segment)
    return [["run/A/segments", None, other, "publish"]], [], "ref run/A/segments "


def _rule_live(st):
    return ([["run/r1/live", st.read_ref("run/r1/live"), "ref: run/r2/branch/0", "other run"]], [],
            "run/r1/live moves to ref: run/r2/branch/0, which is not an existing branch of run r1")


def _rule_branch(st):
    log = RunLog(st)
    old = log.record_at(log.view("r1"), 0, 1)
    return ([["run/r1/branch/0", st.read_ref("run/r1/branch/0"), old, "back"]], [],
            f"run/r1/branch/0 moves to {old.hex()}, which is neither its chain's newest record nor a fork object of this entry")


RULES = {"owner written twice": _rule_owner, "journal rolled back": _rule_journal, "grant replaced": _rule_grant,
         "segments to an object not in the entry": _rule_segments, "live to another run's branch": _rule_live,
         "branch to a non-tip record": _rule_branch}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_crafted_commit_breaking_a_rule_is_damage(store, rule, tmp_path):
    path, owner, w, before, cli = store
    moves, objects, why = RULES[rule](Store.open(path))
    e, seg = _forge_entry(path, moves, objects)
    files = _files(path)
    # readers stop before it and say so
    with pytest.raises(CorruptLog) as err:
        RunLog(Store.open(path)).records("r1", all_branches=True)
    assert f"entry {e.n}: {why}" in str(err.value) and seg in str(err.value)
    _, _, errtext = run_cli("log", "r1", store=path, exit_code=6)
    assert f"entry {e.n}: {why}" in _one_line(errtext)
    # the readable prefix is the log before it
    pre = RunLog(Store.open(path, readable_prefix=True))
    assert pre.store.engine.position().entry == e.n - 1
    assert _records(pre, "r1") == before["records r1"]
    # a writer refuses, and changes no file
    with pytest.raises(CorruptLog):
        RunLog(Store.open(path)).record_attempt("r2", step=5, attempt=1, state="succeeded")
    blob = tmp_path / "b.txt"
    blob.write_bytes(b"x")
    _one_line(run_cli("put-blob", str(blob), store=path, exit_code=6)[2])
    assert _files(path) == files
    # verify names the entry
    probs = _problems(path)
    assert len(probs) == 1 and probs[0].startswith(f"corrupt-entry {seg}: entry {e.n} at offset {e.offset}: entry {e.n}: {why}"), probs


def test_crafted_commit_rule_through_cli_verify(store):
    path, *_ = store
    moves, objects, why = _rule_owner(Store.open(path))
    e, seg = _forge_entry(path, moves, objects)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert out.splitlines() == [f"corrupt-entry {seg}: entry {e.n} at offset {e.offset}: entry {e.n}: {why}"]


# -- a meta row that disagrees with its record -----------------------------------------------------

def _rewrite_last_entry(path, mutate):
    """Replace the log's last entry by one with the same objects and moves whose index rows went
    through ``mutate(facts)``, root recomputed by the writer's own plan (so readers accept it), and
    the witness moved to it."""
    eng = Store.open(path).engine
    last = list(eng.entries())[-1]
    item = list(eng.scan(last.n))[-1]
    objects = [(oid, otype, data) for oid, otype, data in item.objects]
    seg = eng.seg_path(last.seg)
    os.unlink(os.path.join(path, "log", "witness"))
    with open(seg, "r+b") as f:
        f.truncate(last.offset)
    t = Store.open(path).engine.tables
    assert t.pos.entry == last.n - 1
    facts = {oid: f for oid, otype, canon in objects if (f := object_facts(otype, canon, None, oid)) is not None}
    mutate(facts)
    plan = t.plan(last.n, [(o[0], o[1]) for o in objects], facts, last.moves, None)
    assert isinstance(plan, EntryEffect), plan
    raw, e = build_entry(t.pos.checksum, last.n, last.time, objects, last.moves, None, True, facts=facts, root=plan.root)
    with open(seg, "ab") as f:
        f.write(raw)
    _ack(path, e.n, e.checksum)
    return e


@pytest.mark.parametrize("field", ["refs", "kind"])
def test_meta_row_that_disagrees_with_its_record(store, field):
    path, owner, w, before, cli = store
    log = RunLog(Store.open(path))
    p = log.put_blob(b"a prompt for the crafted row")
    rec = log.record_attempt("r2", step=2, attempt=1, state="succeeded", prompt=p)

    def mutate(facts):
        row = facts[rec.id]
        assert row[5] == [p]
        if field == "refs":
            row[5] = []  # the prompt the record names is not in its row
        else:
            row[4] = "note"  # an attempt whose row says it is a note
    e = _rewrite_last_entry(path, mutate)
    # readers accept the entry (its root is right) and read the record itself
    log = RunLog(Store.open(path))
    got = log.records("r2")[-1]
    assert (got.id, got.kind, got.body["prompt"]) == (rec.id, "attempt", p)
    probs = _problems(path)
    assert len(probs) == 1 and probs[0].startswith(f"bad-meta-row entry {e.n} {rec.id.hex()}: the entry's index row says "), probs
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert out.splitlines() == probs


def test_chain_row_that_lies_about_previous(store):
    """A grant stored with ``previous`` nil whose ``prevs`` row names the current grant: the rule
    (forward-only, judged from the row) passes and the root is right, so readers accept the entry;
    no authority comes of it (w1 stays refused) and verify names the row."""
    path, owner, w, before, cli = store
    st = Store.open(path)
    name = next(k for k, _ in st.list_refs("run/A/grant/"))
    cur = st.read_ref(name)
    g = dict(st.get_typed(cur, codec.GRANT), action="grant", rights=["read", "write"], previous=None, seq=1)
    new = _obj(codec.GRANT, g)
    e, seg = _forge_entry(path, [[name, cur, new[0], "forward?"]], [new], rows={new[0]: [cur]})
    assert RunLog(Store.open(path)).store.read_ref(name) == new[0], "readers took the entry in"
    with pytest.raises(ObjstoreError) as err:
        J.update_journal(RunLog(Store.open(path)), "A", w, {"entries": [{"id": "forged"}]}, reflects_through="latest")
    assert not isinstance(err.value, CorruptLog), err.value
    assert J.show(RunLog(Store.open(path)), "A")["body"] == {"entries": [{"id": "e1"}, {"id": "e2"}]}
    probs = _problems(path)
    assert probs == [f"bad-meta-row entry {e.n} {new[0].hex()}: the entry's index row says ['{cur.hex()}'], "
                     f"the grant itself gives [None] [{seg}]"], probs


# -- 2. forged history: a rule-breaking entry and a checkpoint that matches its forged root ---------

def _forge_history(path, monkeypatch):
    """A crafted entry replacing the owner key (rule: write-once), then a checkpoint at its end whose
    tables are what a reader that skips the rule gets: their root is the forged root the entry names."""
    moves, objects, why = _rule_owner(Store.open(path))
    e, seg = _forge_entry(path, moves, objects)
    with monkeypatch.context() as m:
        m.setattr(LogState, "_rule", lambda *a: None)
        eng = Store.open(path).engine
        assert eng.position().entry == e.n and eng.tables.refs["keys/owner"] == moves[0][2]
        eng._checkpoint()
    assert Store.open(path).engine._ckpt_at[0] == e.n, "the forged checkpoint matches the forged root (adopted at open)"
    return e, seg, why


def test_forged_history_is_refused_by_a_writer_open_before_it(store, monkeypatch):
    path, *_ = store
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "truth_writer.py"), path, "r1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        e, seg, why = _forge_history(path, monkeypatch)
        files = _files(path)
        # the writer that was open before the forgery replays the entry from its own state: refused
        out, err = child.communicate("go\n", timeout=60)
        assert out.startswith("refused CorruptLog") and f"entry {e.n}: {why}" in out and seg in out, (out, err)
        assert _files(path) == files
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_forged_history_is_named_by_verify(store, monkeypatch):
    path, *_ = store
    e, seg, why = _forge_history(path, monkeypatch)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert any(line.startswith(f"corrupt-entry {seg}: entry {e.n} ") and why in line for line in out.splitlines()), out


# -- 3. acknowledged means kept ----------------------------------------------------------------------

def _commits_after_checkpoint(path, k):
    """``k`` acknowledged entries after the template's checkpoint (so the damage below leaves the
    checkpoint's own entry intact: verify's one line is about the damage itself)."""
    log = RunLog(Store.open(path))
    for i in range(k):
        log.record_attempt("r2", step=10 + i, attempt=1, state="succeeded")


@pytest.mark.parametrize("where", ["meta", "trailer"])
def test_flipped_byte_in_newest_acknowledged_entry_is_never_cut(store, where, tmp_path):
    path, *_ = store
    _commits_after_checkpoint(path, 1)
    eng = Store.open(path).engine
    last = list(eng.entries())[-1]
    assert eng.witness() == (last.n, last.checksum), "the newest entry is acknowledged"
    seg = eng.seg_path(last.seg)
    at = last.offset + ENTRY_HEAD.size + 3 if where == "meta" else last.offset + last.length - 1
    with open(seg, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))
    files = _files(path)
    with pytest.raises(CorruptLog) as err:
        RunLog(Store.open(path)).record_attempt("r2", step=5, attempt=1, state="succeeded")
    assert seg in str(err.value) and f"offset {last.offset}" in str(err.value)
    blob = tmp_path / "b.txt"
    blob.write_bytes(b"x")
    line = _one_line(run_cli("put-blob", str(blob), store=path, exit_code=6)[2])
    assert seg in line
    assert _files(path) == files, "the acknowledged entry was cut"
    probs = _problems(path)
    assert len(probs) == 1 and probs[0].startswith(f"corrupt-entry {seg}: entry {last.n} at offset {last.offset}: "), probs


@pytest.mark.parametrize("k", [1, 3])
def test_truncated_by_whole_entries_is_log_truncated(store, k, tmp_path):
    path, *_ = store
    _commits_after_checkpoint(path, k)
    eng = Store.open(path).engine
    entries = list(eng.entries())
    last, keep = entries[-1], entries[-1 - k]
    assert eng.witness() == (last.n, last.checksum)
    with open(eng.seg_path(last.seg), "r+b") as f:
        f.truncate(keep.offset + keep.length)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    wit = os.path.join(path, "log", "witness")
    assert out.splitlines() == [f"log-truncated log: the log ends at entry {keep.n}, but the head witness says entry {last.n} "
                                f"was made durable [{wit}]"]
    files = _files(path)
    with pytest.raises(CorruptLog):
        RunLog(Store.open(path)).record_attempt("r2", step=5, attempt=1, state="succeeded")
    blob = tmp_path / "b.txt"
    blob.write_bytes(b"x")
    # the reader's warning line, then the refusal (the witness named): nothing else
    lines = run_cli("put-blob", str(blob), store=path, exit_code=6)[2].splitlines()
    why = f"log-truncated: the log ends at entry {keep.n}, but the head witness says entry {last.n} was made durable"
    assert lines[-1].startswith(f"objstore: error: integrity error: log {wit}: {why}; refusing to write"), lines
    assert lines[:-1] in ([], [f"objstore: warning: {why} (run 'objstore verify')"]), lines
    assert _files(path) == files


# -- 4. readers say when they stop short -------------------------------------------------------------

def _flip_middle_entry(path):
    """Flip a bit of the chain checksum of the entry holding r1's second attempt: (entry, its segment path)."""
    log = RunLog(Store.open(path))
    view = log.view("r1")
    second = log.record_at(view, 0, 2)  # r1's second attempt: A's history and r1's first attempt lie before it
    eng = log.store.engine
    n = eng.loc(second).entry
    bad = next(x for x in eng.entries() if x.n == n)
    seg = eng.seg_path(bad.seg)
    with open(seg, "r+b") as f:
        f.seek(bad.offset + bad.length - 1)
        b = f.read(1)
        f.seek(bad.offset + bad.length - 1)
        f.write(bytes([b[0] ^ 0x80]))
    return bad, seg


def test_bad_middle_entry_stops_readers_with_one_line(store, template):
    path, owner, w, before, cli = store
    bad, seg = _flip_middle_entry(path)
    n = bad.n
    os.unlink(os.path.join(path, "log", "checkpoint"))  # else a fresh open starts past the damage (the price of O(1) open)
    _, out, err = run_cli("log", "r1", store=path, exit_code=6)
    line = _one_line(err)
    assert seg in line and f"offset {bad.offset}" in line and out == ""
    with pytest.raises(CorruptLog):
        RunLog(Store.open(path)).records("r1", all_branches=True)
    pre = RunLog(Store.open(path, readable_prefix=True))
    assert pre.store.engine.position().entry == n - 1
    assert repr(J.show(pre, "A")) == before["journal"]
    full = RunLog(Store.open(template[0]))  # the undamaged template
    assert _records(pre, "r1") == _records(full, "r1", upto=2)  # run_started and the first attempt


def test_bad_middle_entry_below_the_checkpoint_is_verify_s_only_line(store):
    path, *_ = store
    bad, seg = _flip_middle_entry(path)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert out.splitlines() == [f"corrupt-entry {seg}: entry {bad.n} at offset {bad.offset}: checksum mismatch"]


# -- sealed segments: a re-hashed .idx, a missing segment ------------------------------------------

@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """Run s1: 20 steps, each attempt with a fresh 700-byte output, over several 4 KiB segments."""
    path = str(tmp_path_factory.mktemp("sealed") / "s")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(local_write, "SEAL_BYTES", 4096)
        log = RunLog(Store.init(path, fsync="off"))
        log.start_run("s1")
        for step in range(1, 21):
            out = log.put_blob(os.urandom(700))
            log.record_attempt("s1", step=step, attempt=1, state="succeeded", output=out)
    segs = sorted(f for f in os.listdir(os.path.join(path, "log")) if f.endswith(".seg"))
    assert len(segs) >= 4, segs
    before = {"refold": run_cli("episode", "s1", "--source", "refold", "--json", store=path, exit_code=0)[1],
              "log": run_cli("log", "s1", store=path, exit_code=0)[1], "api": _sealed_api(path)}
    assert _steps(before["refold"]) == list(range(1, 21))
    return path, before


def _steps(refold_json):
    """The steps of s1's attempts in the order ``episode --source refold --json`` lists them."""
    return [a["step"] for b in json.loads(refold_json)["branches"] for a in b["attempts"]]


def _sealed_api(path):
    log = RunLog(Store.open(path))
    recs = log.records("s1")
    return repr([(r.lsn, r.id, r.body, log.get_blob(r.body["output"])) for r in recs if "output" in r.body])


@pytest.fixture
def sealed_copy(sealed, tmp_path):
    path, before = sealed
    dst = str(tmp_path / "s")
    shutil.copytree(path, dst)
    return dst, before


def _rehash_idx(path, seg, edit):
    p = os.path.join(path, "log", f"{seg:010d}.idx")
    with open(p, "rb") as f:
        data = bytearray(f.read())
    head = segindex.HEAD.unpack_from(data, 0)
    nobj, nchain = head[5], head[6]
    objs = segindex.HEAD.size + segindex.FANOUT.size
    chain = objs + nobj * segindex.OBJ.size
    edit(data, objs, nobj, chain, nchain)
    body = bytes(data[:-32])
    with open(p, "wb") as f:
        f.write(body + blake3.blake3(body).digest())
    return p


def _swap_chain_ids(data, objs, nobj, chain, nchain):
    """Swap the record ids of two consecutive LSNs of one branch."""
    rows = [segindex.CHAIN.unpack_from(data, chain + i * segindex.CHAIN.size) for i in range(nchain)]
    i = next(i for i in range(nchain - 1) if rows[i][0] == rows[i + 1][0])
    assert rows[i][2] != rows[i + 1][2]
    for j, other in ((i, rows[i + 1]), (i + 1, rows[i])):
        segindex.CHAIN.pack_into(data, chain + j * segindex.CHAIN.size, rows[j][0], rows[j][1], other[2])


def _shift_offsets(data, objs, nobj, chain, nchain):
    for i in range(nobj):
        at = objs + i * segindex.OBJ.size
        row = list(segindex.OBJ.unpack_from(data, at))
        row[2] += 13  # the block's file offset
        segindex.OBJ.pack_into(data, at, *row)


@pytest.mark.parametrize("edit", [_swap_chain_ids, _shift_offsets], ids=["chain row swapped", "offsets shifted"])
def test_rehashed_index_decides_nothing(sealed_copy, edit):
    path, before = sealed_copy
    p = _rehash_idx(path, 1, edit)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert out.splitlines() == [f"damaged-index {p}: index of segment 1 does not match its entries (rebuild: delete the file)"]
    refold = run_cli("episode", "s1", "--source", "refold", "--json", store=path, exit_code=0)[1]
    assert refold == before["refold"] and _steps(refold) == list(range(1, 21))  # each step once, in order
    assert run_cli("log", "s1", store=path, exit_code=0)[1] == before["log"]
    assert _sealed_api(path) == before["api"]


def _drop_segment_2(path):
    """Delete sealed segment 2: (its path, the id of a record it held, the last entry before it)."""
    seg2 = os.path.join(path, "log", "0000000002.seg")
    eng = Store.open(path).engine
    oid = next(r.id for r in RunLog(Store.open(path)).records("s1") if eng.loc(r.id).seg == 2)
    with open(seg2, "rb") as f:
        first = SEG_HEADER.unpack(f.read(SEG_HEADER.size))[2]
    os.unlink(seg2)
    return seg2, oid, first - 1


def test_missing_sealed_segment_is_named_by_verify_and_the_api(sealed_copy):
    path, before = sealed_copy
    seg2, oid, ends = _drop_segment_2(path)
    with pytest.raises(CorruptLog) as err:
        RunLog(Store.open(path)).records("s1")
    assert seg2 in str(err.value)
    _, out, _ = run_cli("verify", store=path, exit_code=1)
    assert out.splitlines() == [f"missing-segment {seg2}: segment 2 is missing; the log ends at entry {ends}"]


@pytest.mark.parametrize("cmd", ["log", "show", "cat"])
def test_missing_sealed_segment_is_one_line(sealed_copy, cmd):
    path, before = sealed_copy
    seg2, oid, _ = _drop_segment_2(path)
    args = ("log", "s1") if cmd == "log" else (cmd, oid.hex())
    _, out, err = run_cli(*args, store=path, exit_code=6)
    assert seg2 in _one_line(err), (args, err)
