"""An incremental backup keeps a DEST segment only after checking its bytes (issue 13, item 9).

A DEST segment with a flipped byte in its middle keeps its size, magic and last 32 bytes: the old
reuse rule kept it unread and the backup exited 0 over a DEST that verify then called damaged. Now
every kept (and appended-to) DEST segment is re-hashed and compared with the digest it must have —
the one the log names for a packed segment, the one the last backup recorded when it wrote and read
back the file (``SRC/tmp/backup-digests/``), else SRC's file hashed — and a segment that differs is
copied again from SRC and named in the result (``recopied``) and on the CLI's summary line.
Damage is made on disk, in DEST's files (a store with a log per run: in run r0's log, named "K of run r0").
"""

import json
import os

import pytest
from helpers import run_cli
from test_backup import PER_RUN, SEAL, L, all_segs, assert_is_snapshot, build, segs

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.lifecycle.backup import backup
from objstore.runs.verify import verify
from objstore.storage.log import local_write


@pytest.fixture
def small_seal(monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)


def rc(k):
    """How a backup names DEST's segment k of the log under test when it copies it again."""
    return f"{k} of run r0" if PER_RUN else k


def flip_middle(path, at=0.5):
    with open(path, "r+b") as f:
        off = int(os.fstat(f.fileno()).st_size * at)
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))


def dest_problems(dest):
    """verify's problems, and every log's entries re-read from its segment files (each checksum chained,
    each block decompressed and hashed): a store of logs has a log per run that verify may not read whole."""
    s = Store.open(dest)
    try:
        problems = list(verify(RunLog(s), jobs=1, check_state=False))
        for run in [None, *(s.logs.run_ids() if s.logs.per_run else ())]:  # the store log (the one log), each run's
            try:  # a run's log damaged before its end refuses to open (and its reader to read)
                engine = s.logs.store_log if run is None else s.logs.run_log(run)
                problems += [(run, item) for item in engine.scan(engine.refresh().entry) if hasattr(item, "code")]
            except CorruptLog as e:  # damage before the log's end: its reader refuses it
                problems.append((run, str(e)))
        return problems
    finally:
        s.engine.close()


@pytest.mark.parametrize("layout", ["sealed", "packed"])
def test_a_damaged_kept_segment_is_copied_again(tmp_path, small_seal, layout):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=60)
    if layout == "packed":
        from objstore.lifecycle.gc import gc

        gc(Store.open(src))
    backup(Store.open(src), dest)
    names = segs(dest)
    victim = os.path.join(L(dest), "log", names[1])
    assert open(victim, "rb").read(4) == (b"OSPK" if layout == "packed" else b"OSSG")
    size = os.path.getsize(victim)
    flip_middle(victim)
    assert os.path.getsize(victim) == size
    assert dest_problems(dest), "the flipped byte is damage verify sees"
    r = backup(Store.open(src), dest)
    assert dest_problems(dest) == []
    assert r.recopied == [rc(2)], r
    assert_is_snapshot(src, dest, r.anchor, check_state=False)
    # The CLI says so on its summary line and in --json.
    flip_middle(victim)
    code, out, err = run_cli("backup", dest, store=src, exit_code=0)
    assert f"segment {rc(2)} of DEST was damaged: copied again" in err
    flip_middle(victim)
    code, out, err = run_cli("backup", dest, "--json", store=src, exit_code=0)
    assert json.loads(out)["recopied"] == [rc(2)]
    assert dest_problems(dest) == []


def test_a_damaged_prefix_is_not_appended_to(tmp_path, small_seal):
    """DEST's last segment (the previous backup's active one) gets only SRC's new bytes appended:
    its old bytes are checked first, and a flipped byte among them makes the segment copied whole."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=20)
    backup(Store.open(src), dest)
    n = len(segs(dest))
    last = os.path.join(L(dest), "log", segs(dest)[-1])
    flip_middle(last, at=0.3)  # not in its last entry, whose checksum the append rule checks
    assert dest_problems(dest)
    build(src, runs=1, per=2, start=20)
    r = backup(Store.open(src), dest)
    assert dest_problems(dest) == []
    assert r.recopied == [rc(n)], r
    assert_is_snapshot(src, dest, r.anchor, check_state=False)


def test_a_clean_incremental_backup_recopies_nothing(tmp_path, small_seal):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=60)
    backup(Store.open(src), dest)
    import shutil

    shutil.rmtree(os.path.join(src, "tmp", "backup-digests"))  # none recorded: SRC's files are hashed
    kept = len(all_segs(dest)) - (2 if PER_RUN else 1)  # all but the active segment of each log that grows (r0's, r1's)
    build(src, runs=2, per=3, start=60)
    r = backup(Store.open(src), dest)
    assert r.recopied == [] and r.reused == kept
    again = backup(Store.open(src), dest)
    assert (again.recopied, again.copied, again.bytes_copied) == ([], 0, 0)


@pytest.mark.parametrize("where", ["kept", "appended to"])
def test_a_forged_digests_file_matching_the_damage_does_not_keep_it(tmp_path, small_seal, where):
    """DEST/backup-digests is DEST's own file: whoever flips a byte of a DEST segment can write the
    BLAKE3 of the damaged file there too. The digests a backup trusts instead of re-reading SRC are
    kept beside SRC (it read SRC to make them), so an edit of DEST cannot vouch for itself."""
    import blake3

    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=60) if where == "kept" else build(src, runs=1, per=20)  # (appended to: one long segment)
    backup(Store.open(src), dest)
    names = segs(dest)
    k = 2 if where == "kept" else len(names)
    victim = os.path.join(L(dest), "log", names[k - 1])
    flip_middle(victim, at=0.3)
    with open(victim, "rb") as f:
        data = f.read()
    path = os.path.join(dest, "backup-digests")  # where they were kept: a forger writes the damage's digests
    sums = {"segments": {str(k): [len(data), blake3.blake3(data).hexdigest()]}}
    with open(path, "w") as f:
        json.dump(sums, f)
    assert dest_problems(dest)
    if where == "appended to":
        build(src, runs=1, per=2, start=20)
    r = backup(Store.open(src), dest)
    assert r.recopied == [rc(k)], r
    assert dest_problems(dest) == []
    assert_is_snapshot(src, dest, r.anchor, check_state=False)
