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
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.storage import codec, identity


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
    last_good = log.store.engine.position()
    seg = log.store.engine.seg_path(log.store.engine._seg)
    before = os.path.getsize(seg)
    log.record_attempt(run, 1, 1, "succeeded", error="x" * 40)
    assert log.store.engine.witness()[0] == last_good.entry + 1  # acknowledged
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
    assert out.splitlines() == [f"corrupt-entry {seg}: entry {last_good.entry + 1} at offset {before}: checksum mismatch"]


def test_repair_cuts_on_the_record_signed_by_the_owner(damaged):
    root, env, run, last_good, seg, before, tail = damaged
    code, out, err = run_cli("repair", "--cut-after", str(last_good.entry), "--reason", "bit rot, no backup",
                             store=root, env_extra=env, exit_code=0)
    s = Store.open(root)
    pos = s.engine.position()
    assert pos.entry == last_good.entry + 1
    e = list(s.engine.entries())[-1]
    assert e.cut == [s.engine._seg, before, len(tail), blake3.blake3(tail).hexdigest()]
    note = json.loads(s.get_blob(s.read_ref("log/repairs")))
    owner = identity.owner_public(s)
    assert note["reason"] == "bit rot, no backup" and note["cut_after"] == last_good.entry
    assert note["removed"] == [{"segment": s.engine._seg, "offset": before, "length": len(tail)}]
    assert identity.object_signed_by(note, owner)
    assert s.engine.witness() == (pos.entry, pos.checksum)
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
    code, out, err = run_cli("repair", "--cut-after", str(last_good.entry), "--reason", "x", store=root, env_extra=other, exit_code=8)
    assert err.count("\n") == 1
    code, out, err = run_cli("repair", "--cut-after", str(last_good.entry - 1), "--reason", "x", store=root, env_extra=env, exit_code=5)
    assert f"reads through entry {last_good.entry}" in err and err.count("\n") == 1
    code, out, err = run_cli("repair", "--cut-after", str(last_good.entry), store=root, env_extra=env, exit_code=2)
    assert snapshot_tree(root) == files


def test_a_repair_note_is_a_blob_the_log_names(damaged):
    """What repair wrote is an object like any other: its id is the hash of its bytes, verify
    checks it, and the ref's move says why."""
    root, env, run, last_good, seg, before, tail = damaged
    run_cli("repair", "--cut-after", str(last_good.entry), "--reason", "why", store=root, env_extra=env, exit_code=0)
    s = Store.open(root)
    oid = s.read_ref("log/repairs")
    assert codec.object_id(s.get_raw(oid)) == oid
    moves = [m for m in s.ref_log("log/repairs")]
    assert len(moves) == 1 and moves[0]["reason"] == f"repair: cut after entry {last_good.entry}: why"
