"""Who may delete is a rule of applying an entry (issue 13 item 1): a deletion ref moved to a deletion
its signer had no authority for is refused by the writer (nothing written); the same entry written
with the rule patched out of the forger's process (checksum-valid, as a process with write access to
the files can) makes every fresh reader stop before it (exit 6, one line naming it), gc and backup
refuse to run over it, writers refuse until the owner's ``repair --cut-after``, and verify names it
``bad-deletion``.
"""

from __future__ import annotations

import os
import time

import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, snapshot_tree, store_log_root

from objstore import RunLog, Store
from objstore.errors import CorruptLog, Deleted, Refused
from objstore.journal import grants as G
from objstore.lifecycle import delete as D
from objstore.storage import authority, codec, identity, runrefs


@pytest.fixture
def world(tmp_path, monkeypatch):
    """Runs A (alice: the victim, with a blob only it names) and B (alice), an owner key under
    $OBJSTORE_KEYS, and keys: a never-granted stranger, a revoked deleter, a write-only worker, a
    live delete grantee, and a self-granter (a delete grant it signed itself)."""
    keys = tmp_path / "keys"
    monkeypatch.setenv("OBJSTORE_KEYS", str(keys))
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    owner, _ = identity.ensure_owner_key(log.store)
    k = {name: identity.generate() for name in ("stranger", "revoked", "worker", "grantee", "selfgrant")}
    for run in ("A", "B"):
        log.start_run(run, subject="alice")
        for i in range(3):
            log.record_attempt(run, i, 0, "succeeded", prompt=log.put_blob(f"only {run} names this, {i}".encode()))
    g = {"revoked": G.grant(log, owner, "A", k["revoked"].public, rights=["delete"], name="was a deleter")}
    G.revoke(log, owner, "A", k["revoked"].public, reason="left")
    g["worker"] = G.grant(log, owner, "A", k["worker"].public, name="worker")  # read and write, no delete
    g["grantee"] = G.grant(log, owner, "A", k["grantee"].public, rights=["delete"], name="deleter")
    # a grant object the key signed itself, naming delete: stored behind its grant ref, but not the owner's
    me = k["selfgrant"]
    obj = identity.sign_object(me, {"v": 2, "run": "A", "subject": "alice", "grantee": me.public, "name": "me", "action": "grant",
                                    "role": "worker", "rights": ["delete", "read", "write"], "supersedes": None, "previous": None,
                                    "seq": 1, "reason": "", "time": time.time()})
    with log.store.batch():
        g["selfgrant"] = log.store.put(codec.GRANT, obj)
        log.store.set_ref(runrefs.run_grant_ref("A", me.public), None, g["selfgrant"], "self-granted")
    env = {"OBJSTORE_KEYS": str(keys)}
    return root, log, owner, k, g, env


def _deletion(key, grant=None, **fields):
    obj = {"v": 1, "scope": "run", "run": "A", "records": None, "blob": None, "reason": "forged", "time": time.time(),
           "by": None, "grant": grant, "previous": None, "sig": None}
    obj.update(fields)
    if key is not None:
        obj["by"] = key.public
        obj["sig"] = key.sign(identity.object_message(obj))
    return obj


def _case(name, log, owner, k, g):
    """(deletion object, ref it moves, what the refusal says) of each unauthorised deletion."""
    store = log.store
    rec_b = store.indexed_record("B", 0, 2)
    blob_a = store.get(store.indexed_record("A", 0, 1))[1]["body"]["prompt"]
    if name == "unsigned":
        return _deletion(None), runrefs.deleted_ref("A"), "unsigned, but the store has an owner key"
    if name == "never granted":
        return (_deletion(k["stranger"]), runrefs.deleted_ref("A"),
                f"its signer {k['stranger'].public[:16]}… held no live delete grant on run A")
    if name == "revoked deleter":
        return (_deletion(k["revoked"], g["revoked"]), runrefs.deleted_ref("A"),
                f"its signer {k['revoked'].public[:16]}… held no live delete grant on run A")
    if name == "write-only worker":
        return (_deletion(k["worker"], g["worker"]), runrefs.deleted_ref("A"),
                f"its signer {k['worker'].public[:16]}… held no live delete grant on run A")
    if name == "redaction by a delete grantee":
        return (_deletion(k["grantee"], g["grantee"], scope="blob", run=None, blob=blob_a), runrefs.redacted_ref(blob_a),
                f"a redaction is signed by the owner key only, not {k['grantee'].public[:16]}…")
    if name == "rows name another run's record":
        return (_deletion(owner, scope="records", records=[[rec_b, 0, 2, "attempt"]]), runrefs.deletions_ref("A"),
                f"covers {rec_b.hex()} as run A branch 0 LSN 2, which the log's index does not hold there")
    if name == "grant not signed by the owner":
        return (_deletion(k["selfgrant"], g["selfgrant"]), runrefs.deleted_ref("A"),
                f"its signer {k['selfgrant'].public[:16]}… held no live delete grant on run A")
    raise AssertionError(name)


CASES = ["unsigned", "never granted", "revoked deleter", "write-only worker", "redaction by a delete grantee",
         "rows name another run's record", "grant not signed by the owner"]


def _holder(ref):
    """The run whose log holds deletion ref ``ref`` (None: the store log, which holds redactions) — on a store of
    one log, that log either way."""
    return None if ref.startswith(runrefs.REDACTED_PREFIX) else runrefs.run_of(ref)


def _log_dir(root, run):
    """The ``log/`` directory of run ``run``'s log (None: the store log)."""
    return os.path.join(run_log_root(root, run) if run is not None else store_log_root(root), "log")


def _where(root, run):
    """What verify appends to a line of that log's pass: its path on a store of a log per run, nothing on one log."""
    return f" [{_log_dir(root, run)}]" if is_per_run(root) else ""


def _write(store, obj, ref):
    """The deletion object and the ref move naming it, in one batch through the Store API."""
    with store.batch():
        did = store.put(codec.DELETION, obj)
        store.set_ref(ref, None, did, "delete")
    return did


@pytest.mark.parametrize("case", CASES)
def test_a_writer_refuses_an_unauthorised_deletion_and_writes_nothing(world, case):
    root, log, owner, k, g, env = world
    obj, ref, why = _case(case, log, owner, k, g)
    files = snapshot_tree(root)
    with pytest.raises(Refused) as err:
        _write(log.store, obj, ref)
    did = codec.object_id(codec.encode(codec.DELETION, obj))
    assert str(err.value).startswith(f"refused: bad-deletion {did.hex()}: {why}"), str(err.value)
    assert err.value.exit_code == 8
    assert snapshot_tree(root) == files
    assert log.store.read_ref(ref) is None and RunLog(Store.open(root)).runs() == ["A", "B"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_a_forged_unauthorised_deletion_stops_readers_gc_backup_and_writers(world, case, monkeypatch, tmp_path):
    root, log, owner, k, g, env = world
    obj, ref, why = _case(case, log, owner, k, g)
    blob_a = log.store.get(log.store.indexed_record("A", 0, 1))[1]["body"]["prompt"]  # only run A names it
    with monkeypatch.context() as m:  # the forger's process: the rule patched out, the entry checksum-valid
        m.setattr(authority, "entry_problem", lambda *a, **kw: None)
        did = _write(log.store, obj, ref)
    # the log holding it: run A's (a run or records deletion), the store log (a redaction); one log before format 6
    holder = _holder(ref)
    n = log_engine_of(log.store, holder).position().entry
    line = f"entry {n}: bad-deletion {did.hex()}: {why}"
    # a fresh reader, in this process and in fresh CLI processes, stops before it, naming it: every reader of run A's
    # log, or every reader of the store log (a blob read, which would obey a redaction)
    with pytest.raises(CorruptLog, match="bad-deletion"):
        RunLog(Store.open(root)).runs() if holder is not None else Store.open(root).get_blob(blob_a)
    readers = (["log", "A"], ["runs"], ["cat", did.hex()]) if holder is not None else (["cat", did.hex()], ["cat", blob_a.hex(), "--body"])
    for args in readers:
        _, out, err = run_cli(*args, store=root, env_extra=env, exit_code=6)
        assert out == "" and err.count("\n") == 1 and line in err, (args, err)
    files = snapshot_tree(_log_dir(root, holder))  # (gc's lock file may appear: it writes nothing under it)
    # gc and backup refuse to run over it, writers refuse; nothing changes
    _, _, err = run_cli("gc", store=root, env_extra=env, exit_code=6)
    err = _gc_stop(root, holder, err)
    assert err.count("\n") == 1 and line in err, err
    dest = str(tmp_path / "backup")
    _, _, err = run_cli("backup", dest, store=root, env_extra=env, exit_code=6)
    assert err.count("\n") == 1 and line in err
    with pytest.raises(CorruptLog):  # a writer of run A; a record naming the blob a redaction would withhold
        RunLog(Store.open(root)).record_attempt("A" if holder is not None else "B", 9, 0, "succeeded", prompt=blob_a)
    assert snapshot_tree(_log_dir(root, holder)) == files
    assert not any(os.path.exists(os.path.join(dest, d)) for d in ("log", "store", "runs"))
    # verify names it
    _, out, _ = run_cli("verify", store=root, env_extra=env, exit_code=1)
    seg = log_engine_of(Store.open(root, readable_prefix=True), holder).seg_path(1)
    named = [x for x in out.splitlines() if "bad-deletion" in x]
    assert len(named) == 1 and named[0].startswith(f"bad-deletion {seg}: entry {n} at offset {_offset(root, n, holder)}: {line}"), out
    assert named[0].endswith(f"({ref}){_where(root, holder)}")


def _offset(root, n, run=None):
    eng = log_engine_of(Store.open(root, readable_prefix=True), run)
    return next(e.offset for e in eng.entries() if e.n == n)


def test_the_owners_repair_cuts_a_forged_deletion_and_the_store_writes_again(world, monkeypatch):
    root, log, owner, k, g, env = world
    obj, ref, _why = _case("never granted", log, owner, k, g)
    with monkeypatch.context() as m:
        m.setattr(authority, "entry_problem", lambda *a, **kw: None)
        _write(log.store, obj, ref)
    n = log_engine_of(log.store, "A").position().entry
    run_cli("repair", *_repair_target(root, "A"), "--cut-after", str(n - 1), "--reason", "a forged deletion", store=root, env_extra=env,
            exit_code=0)
    fresh = RunLog(Store.open(root))
    assert fresh.runs() == ["A", "B"] and fresh.store.read_ref(ref) is None
    fresh.record_attempt("A", 9, 0, "succeeded")
    run_cli("verify", store=root, env_extra=env, exit_code=0)


def _gc_stop(root, run, err):
    """gc's stderr from the line it stops with: gc of a store of a log per run collects one log at a time, the store
    log first, so the store log's progress lines come before a run's log stops it (and nothing else)."""
    if run is None or not is_per_run(root):
        return err
    lines = err.splitlines(keepends=True)
    assert all(x.startswith("store: ") and "bad-deletion" not in x for x in lines[:-1]), err
    return lines[-1]


def _repair_target(root, run):
    """The RUN argument of ``repair`` cutting run ``run``'s log: on a store of one log, none (its one log)."""
    return [run] if is_per_run(root) else []


def test_authorised_deletions_still_apply_for_every_reader(world):
    """The owner, a live delete grantee (run scope), and the owner's redaction: written, read by a
    fresh process, verified clean."""
    root, log, owner, k, g, env = world
    rec = log.store.indexed_record("A", 0, 2)
    D.delete_records(log, "A", [rec], reason="by the grantee", key=k["grantee"])
    D.redact(log, log.put_blob(b"secret"), reason="by the owner", key=owner)
    D.delete_run(log, "B", reason="by the owner", key=owner)
    D.delete_run(log, "A", reason="by the grantee", key=k["grantee"])
    _, out, _ = run_cli("runs", store=root, env_extra=env, exit_code=0)
    assert "A" not in out.split() and "B" not in out.split()
    run_cli("verify", store=root, env_extra=env, exit_code=0)


def test_the_rule_holds_on_object_storage_and_in_memory(tmp_path, monkeypatch):
    """The S3 engine (over a MemoryBucket) refuses to write an unauthorised deletion, and a second store
    on the same bucket stops before one written with the rule patched out; the memory engine refuses it too."""
    from objstore.errors import CorruptLog as Corrupt
    from objstore.storage.s3.bucket import MemoryBucket

    bucket = MemoryBucket()
    log = RunLog(Store.on_bucket(bucket, str(tmp_path / "c1")))
    owner, _ = identity.ensure_owner_key(log.store, str(tmp_path / "owner.key"))
    log.start_run("A")
    stranger = identity.generate()
    obj = _deletion(stranger)
    with pytest.raises(Refused, match="bad-deletion"):
        _write(log.store, obj, runrefs.deleted_ref("A"))
    with monkeypatch.context() as m:
        m.setattr(authority, "entry_problem", lambda *a, **kw: None)
        did = _write(log.store, obj, runrefs.deleted_ref("A"))
    with pytest.raises(Corrupt, match=f"bad-deletion {did.hex()}: its signer {stranger.public[:16]}"):
        RunLog(Store.on_bucket(bucket, str(tmp_path / "c2"))).runs()
    mem = RunLog(Store.memory())
    identity.ensure_owner_key(mem.store, str(tmp_path / "owner.key"))
    mem.start_run("A")
    with pytest.raises(Refused, match="unsigned, but the store has an owner key"):
        _write(mem.store, _deletion(None), runrefs.deleted_ref("A"))
    assert mem.runs() == ["A"]


def _forge_behind_checkpoint(log, obj, ref, monkeypatch):
    """The forger: deletion ``obj`` behind ``ref`` written with the authority rule patched out, then the
    checkpoint its process writes past the entry (every seal does), which fresh readers adopt. Its id."""
    with monkeypatch.context() as m:
        m.setattr(authority, "entry_problem", lambda *a, **kw: None)
        did = _write(log.store, obj, ref)
        log_engine_of(log.store, _holder(ref))._checkpoint()  # the checkpoint of the log holding it
    return did


def test_gc_refuses_a_forged_deletion_behind_a_forged_checkpoint(world, monkeypatch):
    """Readers adopt a checkpoint whose tables match the log's root (derived data, like the ref rules'):
    one written by the forger's process past the forged entry holds the deletion unchecked; a read
    checks it where it obeys it, and gc, which makes a deletion permanent, checks every deletion it
    acts on, refuses (exit 6, one line naming it) and removes nothing; verify replays from the first
    entry and names it."""
    root, log, owner, k, g, env = world
    obj, ref, why = _case("never granted", log, owner, k, g)
    did = _forge_behind_checkpoint(log, obj, ref, monkeypatch)
    with pytest.raises(CorruptLog, match=f"bad-deletion {did.hex()}"):  # adopted: checked where a read obeys it
        RunLog(Store.open(root)).runs()
    files = snapshot_tree(_log_dir(root, "A"))
    _, _, err = run_cli("gc", store=root, env_extra=env, exit_code=6)
    err = _gc_stop(root, "A", err)
    assert err.count("\n") == 1 and f"bad-deletion {did.hex()}: {why}" in err, err
    assert snapshot_tree(_log_dir(root, "A")) == files
    _, out, _ = run_cli("verify", store=root, env_extra=env, exit_code=1)
    assert f"bad-deletion {did.hex()}: {why}" in out


def test_a_subject_grant_does_not_let_its_key_delete_a_run_of_no_subject_it_names(world):
    """A run nobody has started has no subject: a key whose only delete grant is on another subject
    may not write its whole deletion (which would refuse that run for good, whoever starts it later)."""
    root, log, owner, k, g, env = world
    bob = identity.generate()
    gid = G.grant(log, owner, None, bob.public, subject="bob", rights=["delete"], name="bob's deleter")
    obj = _deletion(bob, gid, run="Z")
    with pytest.raises(Refused) as err:
        _write(log.store, obj, runrefs.deleted_ref("Z"))
    assert f"its signer {bob.public[:16]}… held no live delete grant on run Z" in str(err.value), str(err.value)
    log.start_run("Z", subject="alice")
    assert RunLog(Store.open(root)).runs() == ["A", "B", "Z"]


def test_backup_and_clone_refuse_a_forged_deletion_a_forged_checkpoint_hides(world, monkeypatch, tmp_path):
    """What acts on a deletion beyond this store's reads checks it as gc does: a clone (or push)
    would leave the run out of the copy ('deleted, not sent'), and a backup would copy the forged
    checkpoint to DEST; both refuse (exit 6, one line naming it) and write nothing."""
    root, log, owner, k, g, env = world
    obj, ref, why = _case("never granted", log, owner, k, g)
    did = _forge_behind_checkpoint(log, obj, ref, monkeypatch)
    line = f"bad-deletion {did.hex()}: {why}"
    dest, copy = str(tmp_path / "backup"), str(tmp_path / "copy")
    _, _, err = run_cli("backup", dest, store=root, env_extra=env, exit_code=6)
    assert err.count("\n") == 1 and line in err, err
    assert not any(os.path.exists(os.path.join(dest, d)) for d in ("log", "store", "runs"))
    _, _, err = run_cli("clone", root, copy, env_extra=env, exit_code=6)
    assert err.count("\n") == 1 and line in err, err
    run_cli("init", store=copy, env_extra=env, exit_code=0)
    _, _, err = run_cli("push", copy, store=root, env_extra=env, exit_code=6)
    assert err.count("\n") == 1 and line in err, err
    assert RunLog(Store.open(copy)).runs() == []


def test_a_run_deletion_lists_only_blobs_its_runs_journal_or_segments_name(world):
    """A run deletion's ``blobs`` (the blobs its journal and segment objects named, which gc removes
    with it) is a claim like a records deletion's rows: a delete grantee of run A listing a blob of
    someone else's — here one put and not yet named, as a worker does before its commit — would have
    it withheld at once and removed by gc, a redaction only the owner may make. The writer refuses it."""
    root, log, owner, k, g, env = world
    theirs = log.put_blob(b"a worker's next prompt, put before the record that names it")
    obj = _deletion(k["grantee"], g["grantee"], blobs=[theirs])
    with pytest.raises(Refused) as err:
        _write(log.store, obj, runrefs.deleted_ref("A"))
    assert f"lists blob {theirs.hex()}, which no journal or segment object of run A names" in str(err.value), str(err.value)
    assert log.store.get_blob(theirs)
    D.delete_run(log, "A", reason="by the grantee", key=k["grantee"])  # the deletion as it is made still applies
    assert log.store.get_blob(theirs)


def test_a_subject_grant_does_not_delete_a_run_whose_run_started_names_no_subject(world):
    """A run born below the API with a run_started naming no subject (the birth rule does not read
    bodies) belongs to no subject: a key with a delete grant on some subject may not delete it by
    naming that grant (the grant's own subject stands in only once gc removed the run_started)."""
    root, log, owner, k, g, env = world
    st = log.store
    with st.batch():
        oid = st.put(codec.RECORD, {"run": "N", "branch": 0, "lsn": 0, "parent": None, "kind": "run_started", "time": 1.0,
                                    "body": {"meta": None, "subject": None, "workflow_version": "1"}})
        st.set_ref(runrefs.branch_ref("N", 0), None, oid, "a run with no subject")
        st.set_ref("run/N/live", None, "ref: " + runrefs.branch_ref("N", 0), "a run with no subject")
    bob = identity.generate()
    gid = G.grant(log, owner, None, bob.public, subject="bob", rights=["delete"], name="bob's deleter")
    with pytest.raises(Refused) as err:
        _write(st, _deletion(bob, gid, run="N"), runrefs.deleted_ref("N"))
    assert f"its signer {bob.public[:16]}… held no live delete grant on run N" in str(err.value), str(err.value)


def test_a_records_deletion_does_not_cover_a_runs_run_started(world):
    """A run's run_started (LSN 0 of branch 0) goes only with the whole run (what `delete` refuses to
    write) — also for an entry written below the API: once gc removed it alone, the run would have no
    subject and the subject rule above would have nothing to check a later deletion against."""
    root, log, owner, k, g, env = world
    first = log.store.indexed_record("A", 0, 0)
    obj = _deletion(k["grantee"], g["grantee"], scope="records", records=[[first, 0, 0, "run_started"]])
    with pytest.raises(Refused) as err:
        _write(log.store, obj, runrefs.deletions_ref("A"))
    assert "covers the run_started record of run A (LSN 0 of branch 0): only a run deletion does" in str(err.value), str(err.value)


def test_a_reader_does_not_adopt_a_checkpoint_past_a_forged_deletion(world, monkeypatch):
    root, log, owner, k, g, env = world
    obj, ref, why = _case("never granted", log, owner, k, g)
    did = _forge_behind_checkpoint(log, obj, ref, monkeypatch)
    with pytest.raises(CorruptLog, match=f"bad-deletion {did.hex()}: "):
        RunLog(Store.open(root)).runs()


# -- readers that adopt a checkpoint past a deletion check it where a read obeys it -----------------

def _forged_behind_checkpoint(world, monkeypatch):
    """A forged ("never granted") deletion of run A, then the forger's checkpoint past it: what every
    fresh reader adopts. Returns (root, env, the line a replaying reader stops with)."""
    root, log, owner, k, g, env = world
    obj, ref, why = _case("never granted", log, owner, k, g)
    did = _forge_behind_checkpoint(log, obj, ref, monkeypatch)
    n = log_engine_of(log.store, "A").position().entry
    return root, env, (f"entry {n}: bad-deletion {did.hex()}: {why}", f"({ref})); the log is readable only up to it")


def _one_line(err, line):
    assert err.count("\n") == 1 and line[0] in err and line[1] in err, err


def test_a_reader_past_a_forged_deletion_stops_at_the_runs_view(world, monkeypatch):
    root, env, line = _forged_behind_checkpoint(world, monkeypatch)
    _, out, err = run_cli("log", "A", store=root, env_extra=env, exit_code=6)
    assert out == ""
    _one_line(err, line)


def test_a_reader_past_a_forged_deletion_stops_before_withholding_a_blob(world, monkeypatch):
    log = world[1]
    blob = log.store.get(log.store.indexed_record("A", 0, 1))[1]["body"]["prompt"]  # only run A names it
    root, env, line = _forged_behind_checkpoint(world, monkeypatch)
    _, out, err = run_cli("cat", blob.hex(), "--body", store=root, env_extra=env, exit_code=6)
    assert out == ""
    _one_line(err, line)


def test_a_reader_past_a_forged_deletion_stops_before_listing_runs_without_it(world, monkeypatch):
    root, env, line = _forged_behind_checkpoint(world, monkeypatch)
    _, out, err = run_cli("runs", store=root, env_extra=env, exit_code=6)
    assert out == ""
    _one_line(err, line)


_APPEND = """
import sys
from objstore import Store
from objstore.errors import ObjstoreError
from objstore.storage import codec, runrefs
st = Store.open(sys.argv[1])
try:
    head = st.indexed_record("A", 0, 3)  # below the run model (no view read): only the writer's ref rules see run A
    with st.batch():
        oid = st.put(codec.RECORD, {"run": "A", "branch": 0, "lsn": 4, "parent": head, "kind": "attempt", "time": 1.0,
                                    "body": {"step": 9, "attempt": 0, "status": "succeeded"}})
        st.set_ref(runrefs.branch_ref("A", 0), head, oid, "append")
except ObjstoreError as e:
    print(e, file=sys.stderr)
    sys.exit(e.exit_code)
"""


def test_a_writer_past_a_forged_deletion_stops_instead_of_refusing_the_deleted_run(world, monkeypatch):
    import subprocess
    import sys

    root, env, line = _forged_behind_checkpoint(world, monkeypatch)
    got = subprocess.run([sys.executable, "-c", _APPEND, root], capture_output=True, text=True, env={**os.environ, **env})
    assert got.returncode == 6, got.stderr
    _one_line(got.stderr, line)


def test_an_authorised_deletion_behind_a_checkpoint_is_obeyed_and_checked_once(world, monkeypatch):
    root, log, owner, k, g, env = world
    D.delete_run(log, "A", reason="by the grantee", key=k["grantee"])
    log_engine_of(log.store, "A")._checkpoint()  # the checkpoint of the log holding the deletion (run A's)
    _, _, err = run_cli("log", "A", store=root, env_extra=env, exit_code=12)
    assert "deleted" in err
    calls = []
    real = authority.entry_problem
    monkeypatch.setattr(authority, "entry_problem", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    fresh = RunLog(Store.open(root))
    assert log_engine_of(fresh.store, "A").tables.adopted > 0
    for _ in range(3):
        with pytest.raises(Deleted):
            fresh.view("A")
        assert fresh.runs() == ["B"]
    assert len(calls) == 1, calls


def test_what_acts_on_deletions_checks_each_one_once_per_process(world, monkeypatch):
    """gc, backup, push and clone check every deletion before they act (check_authority); a second check in
    the same process (clone checks before it makes DIR, transfer again) and the reads after it verify no
    signature again."""
    root, log, owner, k, g, env = world
    D.delete_run(log, "A", reason="by the grantee", key=k["grantee"])
    log_engine_of(log.store, "A")._checkpoint()  # the checkpoint of the log holding the deletion (run A's)
    calls = []
    real = authority.entry_problem
    monkeypatch.setattr(authority, "entry_problem", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    fresh = RunLog(Store.open(root))
    D.check_authority(fresh.store)
    D.check_authority(fresh.store)
    with pytest.raises(Deleted):
        fresh.view("A")
    assert len(calls) == 1, calls


@pytest.mark.slow
def test_the_owners_repair_cuts_a_forged_deletion_behind_a_checkpoint(world, monkeypatch):
    """The checkpoint past the forged entry does not keep the owner's repair from cutting it."""
    root, env, line = _forged_behind_checkpoint(world, monkeypatch)
    n = int(line[0].split(":")[0].split()[1])
    run_cli("repair", *_repair_target(root, "A"), "--cut-after", str(n - 1), "--reason", "a forged deletion", store=root, env_extra=env,
            exit_code=0)
    fresh = RunLog(Store.open(root))
    assert fresh.runs() == ["A", "B"]
    fresh.record_attempt("A", 9, 0, "succeeded")
    run_cli("verify", store=root, env_extra=env, exit_code=0)


_START_LABELLED = """
import sys
from objstore import RunLog, Store
from objstore.errors import ObjstoreError
try:
    print(RunLog(Store.open(sys.argv[1])).start_run(labels={"thread_id": "T"}, subject="alice"))
except ObjstoreError as e:
    print(e, file=sys.stderr)
    sys.exit(e.exit_code)
"""


def test_a_label_look_up_past_a_forged_deletion_stops_instead_of_skipping_the_run(world, monkeypatch):
    """A labelled run's forged deletion behind a checkpoint: naming the run by its labels, and starting
    the next generation of those labels (which only a deleted generation 0 allows), stop at it."""
    import subprocess
    import sys

    root, log, owner, k, g, env = world
    run = log.start_run(labels={"thread_id": "T"}, subject="alice")
    stranger = k["stranger"]
    did = _forge_behind_checkpoint(log, _deletion(stranger, run=run), runrefs.deleted_ref(run), monkeypatch)
    n = log_engine_of(log.store, run).position().entry
    line = (f"entry {n}: bad-deletion {did.hex()}: its signer {stranger.public[:16]}… held no live delete grant on run {run}",
            f"({runrefs.deleted_ref(run)})); the log is readable only up to it")
    _, out, err = run_cli("log", "thread_id=T", store=root, env_extra=env, exit_code=6)
    _one_line(err, line)
    got = subprocess.run([sys.executable, "-c", _START_LABELLED, root], capture_output=True, text=True, env={**os.environ, **env})
    assert got.returncode == 6, (got.stdout, got.stderr)
    _one_line(got.stderr, line)


@pytest.mark.parametrize("case", CASES)
def test_every_unauthorised_deletion_behind_a_checkpoint_stops_the_read_that_would_obey_it(world, case, monkeypatch):
    """Each forged deletion, then the forger's checkpoint: a fresh reader process stops at the read
    it would obey it in — the run's log (run and records deletions), the blob's body (a redaction)."""
    root, log, owner, k, g, env = world
    obj, ref, why = _case(case, log, owner, k, g)
    did = _forge_behind_checkpoint(log, obj, ref, monkeypatch)
    n = log_engine_of(log.store, _holder(ref)).position().entry
    args = ("cat", obj["blob"].hex(), "--body") if ref.startswith(runrefs.REDACTED_PREFIX) else ("log", "A")
    _, out, err = run_cli(*args, store=root, env_extra=env, exit_code=6)
    assert out == ""
    _one_line(err, (f"entry {n}: bad-deletion {did.hex()}: {why}", f"({ref})); the log is readable only up to it"))
