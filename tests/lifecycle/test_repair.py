"""``objstore repair``: acknowledged entries are never cut by a writer, only by an explicit,
owner-signed, recorded repair (issue 15, "Acknowledged means kept").

Each test damages bytes on disk in a real store: a flipped byte in the newest entry, which the head
witness says was made durable. The next writer refuses (exit 6) and leaves the bytes alone; verify
names it; `objstore repair --cut-after N` cuts it, records the cut (offset, length, BLAKE3) in its
own entry and a signed note under log/repairs; verify is clean again and writes go on."""

import json
import os

import blake3
import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.storage import codec, identity


def _eng(store, run):
    return log_engine_of(store, run if store.logs.per_run else None)


def _repair(root, run, *args, exit_code, **kw):
    """``objstore repair [RUN] ARGS``: the run's log is named where each run has one; every caller
    names the exit code it expects (the test habit of #10)."""
    return run_cli("repair", *([run] if is_per_run(root) else []), *args, store=root, exit_code=exit_code, **kw)


@pytest.fixture
def damaged(tmp_path):
    """A store made by `objstore init` (so it has an owner key), three records, and a flipped
    byte in the last entry's meta; the witness names that entry."""
    root = str(tmp_path / "s")
    keys = str(tmp_path / "keys")
    env = {"OBJSTORE_KEYS": keys}
    run_cli("init", store=root, env_extra=env, exit_code=0)
    log = RunLog(Store.open(root))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "failed")
    eng = _eng(log.store, run)  # the run's own log (a log per run), else the store's one log
    last_good = eng.position()
    seg = eng.seg_path(eng._seg)
    before = os.path.getsize(seg)
    log.record_attempt(run, 1, 1, "succeeded", error="x" * 40)
    assert eng.witness()[0] == last_good.entry + 1  # acknowledged
    data = bytearray(open(seg, "rb").read())
    data[len(data) - 5] ^= 0x04  # in the trailer's chain checksum
    open(seg, "wb").write(bytes(data))
    return root, env, run, last_good, seg, before, bytes(data[before:])


def test_a_writer_never_cuts_an_acknowledged_entry(damaged):
    root, env, run, last_good, seg, before, tail = damaged
    files = snapshot_tree(root)
    with pytest.raises(CorruptLog, match="made durable"):
        RunLog(Store.open(root)).record_attempt(run, 2, 0, "failed")
    code, out, err = run_cli("log", run, store=root, env_extra=env, exit_code=6)
    assert out == "" and err.count("\n") == 1 and "damaged entry" in err
    assert snapshot_tree(root) == files  # nothing cut, nothing written
    code, out, err = run_cli("verify", store=root, env_extra=env, exit_code=1)
    where = f" [{os.path.join(run_log_root(root, run), 'log')}]" if is_per_run(root) else ""  # each log's lines name it
    assert out.splitlines() == [f"corrupt-entry {seg}: entry {last_good.entry + 1} at offset {before}: checksum mismatch{where}"]


def test_repair_cuts_on_the_record_signed_by_the_owner(damaged):
    root, env, run, last_good, seg, before, tail = damaged
    code, out, err = _repair(root, run, "--cut-after", str(last_good.entry), "--reason", "bit rot, no backup", env_extra=env, exit_code=0)
    s = Store.open(root)
    eng = _eng(s, run)
    pos = eng.position()
    assert pos.entry == last_good.entry + 1
    e = list(eng.entries())[-1]
    assert e.cut == [eng._seg, before, len(tail), blake3.blake3(tail).hexdigest()]
    noted = eng.tables.refs["log/repairs"]  # the note is in the log it cut
    note = json.loads(codec.decode(eng.read(noted), noted, False)[1])
    owner = identity.owner_public(s)
    assert note["reason"] == "bit rot, no backup" and note["cut_after"] == last_good.entry
    assert note["removed"] == [{"segment": eng._seg, "offset": before, "length": len(tail)}]
    assert identity.object_signed_by(note, owner)
    assert eng.witness() == (pos.entry, pos.checksum)
    code, out, err = run_cli("verify", store=root, env_extra=env, exit_code=0)
    assert f"past-cut entry {pos.entry}" in err
    log = RunLog(Store.open(root))
    rec = log.record_attempt(run, 2, 0, "succeeded")
    assert rec.lsn == 2 and [r.lsn for r in log.records(run)] == [0, 1, 2]
    run_cli("verify", store=root, env_extra=env, exit_code=0)


def test_repair_is_refused_without_the_owner_key_or_past_the_readable_prefix(damaged, tmp_path):
    root, env, run, last_good, seg, before, tail = damaged
    files = snapshot_tree(root)
    other = {"OBJSTORE_KEYS": str(tmp_path / "elsewhere")}
    code, out, err = _repair(root, run, "--cut-after", str(last_good.entry), "--reason", "x", env_extra=other, exit_code=8)
    assert err.count("\n") == 1
    code, out, err = _repair(root, run, "--cut-after", str(last_good.entry - 1), "--reason", "x", env_extra=env, exit_code=5)
    assert f"reads through entry {last_good.entry}" in err and err.count("\n") == 1
    code, out, err = _repair(root, run, "--cut-after", str(last_good.entry), env_extra=env, exit_code=2)
    assert snapshot_tree(root) == files


def test_a_repair_note_is_a_blob_the_log_names(damaged):
    """What repair wrote is an object like any other: its id is the hash of its bytes, verify
    checks it, and the ref's move says why."""
    root, env, run, last_good, seg, before, tail = damaged
    _repair(root, run, "--cut-after", str(last_good.entry), "--reason", "why", env_extra=env, exit_code=0)
    s = Store.open(root)
    eng = _eng(s, run)
    oid = eng.tables.refs["log/repairs"]  # in the log it cut
    assert codec.object_id(eng.read(oid)) == oid
    moves = [m for e in eng.entries() for m in e.moves if m[0] == "log/repairs"]
    assert len(moves) == 1 and moves[0][3] == f"repair: cut after entry {last_good.entry}: why"
