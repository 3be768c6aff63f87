"""Torn tails and short writes (the issue's acceptance).

"Cut the active segment at every byte offset inside its last entry: earlier
commits readable, the cut one invisible, verify exits 0 with the note, the next
write cuts it and records the cut." And: "a commit hitting a short write
(``ulimit -f`` in a child) is invisible, raises a typed error (exit 10), and the
store commits again once space returns."

A torn tail is only ever the end of the active segment. A damaged entry with a
complete entry after it is not torn: verify reports it and writers refuse
rather than cut committed entries.
"""

import os
import re
import resource
import subprocess
import sys

import blake3
import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, snapshot_tree, store_log_root

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.runs.verify import verify_report
from objstore.storage.log import local_catchup, local_write
from objstore.storage.log.craft import encode_entry
from objstore.storage.log.format import ENTRY_HEAD, ENTRY_MAGIC


def build(root):
    """A store whose active segment is segment 2 (segment 1 sealed), with three commits in it; the
    last is one record of a few hundred bytes. Returns (log, run, records, segment path, size
    before the last commit, size after it)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(local_write, "SEAL_BYTES", 2048)
    try:
        log = RunLog(Store.init(root, fsync="off"))
        run = log.start_run("r1", when=1_700_000_000.0)
        recs = [log.record_attempt(run, 1, i, "failed", when=1_700_000_001.0 + i) for i in range(6)]
    finally:
        mp.undo()
    engine = log_engine_of(log.store, run)  # r1's log (the store's one log before format 6)
    assert engine._seg >= 2, "segment 1 must be sealed"
    path = engine.seg_path(engine._seg)
    recs.append(log.record_attempt(run, 2, 0, "failed", error="x" * 50))
    recs.append(log.record_attempt(run, 2, 1, "failed", error="y" * 50))
    before = os.path.getsize(path)
    WITNESS_BEFORE[root] = read_witness(run_log_root(root, run))
    recs.append(log.record_attempt(run, 3, 0, "succeeded", usage={"tokens": 123}, error="z" * 100))
    after = os.path.getsize(path)
    assert 300 <= after - before <= 1000
    return log, run, recs, path, before, after


WITNESS_BEFORE: dict = {}


def read_witness(log_root):
    """The head witness of the log at ``log_root`` (helpers.run_log_root / store_log_root)."""
    with open(os.path.join(log_root, "log", "witness"), "rb") as f:
        return f.read()


def crash_before_sync(log_root, witness):
    """A crash before the last entry's fdatasync: its writer never wrote the head witness for it,
    so the witness still names the entry before (what a genuine torn tail looks like)."""
    with open(os.path.join(log_root, "log", "witness"), "wb") as f:
        f.write(witness)


def fresh(root):
    return RunLog(Store.open(root, fsync="off"))


def ok_line(store, run_entries, objects):
    """verify's summary of a clean store whose one run is ``run`` with ``run_entries`` entries in its log (format 6:
    the store log's entries too, and the logs counted: the store log and the run's)."""
    if not is_per_run(store.root):
        return f"verify: ok ({run_entries} entries, {objects} objects)\n"
    total = run_entries + log_engine_of(store).position().entry
    return f"verify: ok ({total} entries in 2 logs, {objects} objects)\n"


def in_log(root, path):
    """The tail of a line of verify's pass of one log (``path``: a segment of it) on a store of a log per run: the
    log it is in. None on the store's one log."""
    return f" [{os.path.dirname(path)}]" if is_per_run(root) else ""


def torn_line(root, path, before, cut_len, total):
    why = "incomplete entry header" if cut_len < ENTRY_HEAD.size else f"incomplete entry ({cut_len} of {total} bytes)"
    return (f"torn-tail {path}: {cut_len} bytes after the last complete entry at offset {before} ({why}); "
            f"invisible to readers, cut by the next commit{in_log(root, path)}")


@pytest.mark.slow
def test_cut_at_every_offset_inside_the_last_entry(tmp_path):
    root = str(tmp_path / "s")
    log, run, recs, path, before, after = build(root)
    seg_n = log_engine_of(log.store, run)._seg
    last, prev = recs[-1], recs[-2]
    n_last = log_engine_of(log.store, run).position().entry
    pristine = open(path, "rb").read()
    assert len(pristine) == after
    total = after - before
    cli_offsets = {before + 1, before + ENTRY_HEAD.size, (before + after) // 2, after - 1}
    for off in range(before + 1, after):
        with open(path, "wb") as f:
            f.write(pristine[:off])
        crash_before_sync(run_log_root(root, run), WITNESS_BEFORE[root])
        cut_len = off - before
        rl = fresh(root)
        # Earlier commits readable, the cut one invisible.
        for r in recs[:-1]:
            assert rl.record(r.id).id == r.id
        assert not rl.store.has(last.id), off
        assert rl.view(run).heads[0] == prev.id, off
        assert [r.id for r in rl.records(run)][1:] == [r.id for r in recs[:-1]], off  # [0]: run_started
        assert log_engine_of(rl.store, run).position().entry == n_last - 1
        # verify: clean, with exactly the torn-tail note.
        report = verify_report(rl)
        assert report.problems == [], (off, [p.line() for p in report.problems])
        assert [n.line() for n in report.notes] == [torn_line(root, path, before, cut_len, total)], off
        if off in cli_offsets:
            code, out, err = run_cli("verify", store=root, exit_code=0)
            assert (code, out) == (0, ""), (off, out, err)
            assert err == f"note: {torn_line(root, path, before, cut_len, total)}\n" + ok_line(rl.store, n_last - 1, len(recs))
        # The next write cuts the torn bytes and records the cut in its own entry.
        new = rl.record_attempt(run, 3, 0, "succeeded", error="again")
        assert (new.parent, new.lsn) == (prev.id, last.lsn)
        e = list(log_engine_of(rl.store, run).entries())[-1]
        assert e.n == n_last and e.offset == before
        assert e.cut == [seg_n, before, cut_len, blake3.blake3(pristine[before:off]).hexdigest()], off
        data = open(path, "rb").read()
        assert data[:before] == pristine[:before] and len(data) == before + e.length
        # verify: the past cut is a note, not a problem.
        report = verify_report(fresh(root))
        assert report.problems == [], (off, [p.line() for p in report.problems])
        assert [n.line() for n in report.notes] == [
            f"past-cut entry {n_last}: its writer cut a torn tail of {cut_len} bytes at segment {seg_n} offset {before} "
            f"(blake3 {e.cut[3]}) [{path}]"], off
        assert fresh(root).view(run).heads[0] == new.id


GARBAGE = {
    "zeros": b"\x00" * 4096,  # preallocated blocks a crash left behind
    "text": b"this is not an entry\n" * 3,
    "plausible-header": ENTRY_HEAD.pack(ENTRY_MAGIC, 40, 1000) + b"\x01" * 30,
    "magic-only": ENTRY_MAGIC,
}
WHY = {  # what the reader found at the torn tail
    "zeros": "bad entry magic",
    "text": "bad entry magic",
    "plausible-header": "incomplete entry (46 of 1096 bytes)",  # the header's lengths, 46 bytes there
    "magic-only": "incomplete entry header",
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_after_the_last_entry_is_a_torn_tail(tmp_path, kind):
    root = str(tmp_path / "s")
    log, run, recs, path, before, after = build(root)
    garbage = GARBAGE[kind]
    with open(path, "ab") as f:
        f.write(garbage)
    rl = fresh(root)
    assert rl.view(run).heads[0] == recs[-1].id
    report = verify_report(rl)
    assert report.problems == []
    note = (f"torn-tail {path}: {len(garbage)} bytes after the last complete entry at offset {after} ({WHY[kind]}); "
            f"invisible to readers, cut by the next commit{in_log(root, path)}")
    assert [n.line() for n in report.notes] == [note]
    code, out, err = run_cli("verify", store=root, exit_code=0)
    assert (out, err) == ("", f"note: {note}\n" + ok_line(rl.store, log_engine_of(rl.store, run).position().entry, 10))
    new = rl.record_attempt(run, 4, 0, "failed")
    e = list(log_engine_of(rl.store, run).entries())[-1]
    assert e.cut == [log_engine_of(rl.store, run)._seg, after, len(garbage), blake3.blake3(garbage).hexdigest()]
    assert e.offset == after and os.path.getsize(path) == after + e.length
    report = verify_report(fresh(root))
    assert report.problems == [] and [n.line() for n in report.notes] == [
        f"past-cut entry {e.n}: its writer cut a torn tail of {len(garbage)} bytes at segment {log_engine_of(rl.store, run)._seg} offset {after} "
        f"(blake3 {blake3.blake3(garbage).hexdigest()}) [{path}]"]
    assert fresh(root).view(run).heads[0] == new.id


def test_damaged_entry_followed_by_a_complete_entry_is_not_a_torn_tail(tmp_path):
    """Bit rot in the second-to-last entry of the active segment: a complete entry follows it, so
    it is damage, not a crash. verify reports corrupt-entry (exit 1), readers stop before it, and a
    writer refuses (CorruptLog, exit 6) instead of cutting committed entries."""
    root = str(tmp_path / "s")
    log, run, recs, path, before, after = build(root)
    entries = [e for e in log_engine_of(log.store, run).entries() if e.seg == log_engine_of(log.store, run)._seg]
    victim = entries[-2]
    assert victim.offset + victim.length == before
    with open(path, "rb") as f:
        meta = f.read()[victim.offset + ENTRY_HEAD.size : victim.data_off]
    at = victim.offset + ENTRY_HEAD.size + meta.index(b"run/r1/branch/0") + 7
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0x20
    open(path, "wb").write(bytes(data))
    files = snapshot_tree(root)

    rl = fresh(root)
    with pytest.raises(CorruptLog):  # readers say they would stop short: a typed error...
        rl.view(run)
    rl = RunLog(Store.open(root, fsync="off", readable_prefix=True))  # ...unless the caller asks for the readable prefix
    # (on format 6 the damaged run's log raises as it opens, so its engine is looked at through the readable prefix)
    assert log_engine_of(rl.store, run).torn is None and log_engine_of(rl.store, run).damaged is not None
    assert rl.view(run).heads[0] == recs[-3].id  # readers stop before the damaged entry
    assert not rl.store.has(recs[-2].id) and not rl.store.has(recs[-1].id)
    report = verify_report(rl)
    line = f"corrupt-entry {path}: entry {victim.n} at offset {victim.offset}: checksum mismatch{in_log(root, path)}"
    assert [p.line() for p in report.problems] == [line]
    assert report.notes == []
    code, out, err = run_cli("verify", store=root, exit_code=1)
    assert (code, out.splitlines()) == (1, [line])

    with pytest.raises(CorruptLog) as ei:
        rl.record_attempt(run, 4, 0, "failed")
    assert str(ei.value) == (f"integrity error: log {path}: damaged entry at offset {victim.offset} (checksum mismatch; "
                             "complete entries follow it); refusing to write (run 'objstore verify')")
    # A writer that did not ask for the readable prefix: on format 6 the damaged run's log stops it as it opens (before
    # any write), with the reader's line; on one log the writer's own refusal above.
    with pytest.raises(CorruptLog) as plain:
        fresh(root).record_attempt(run, 4, 0, "failed")
    assert str(plain.value) == (str(ei.value) if not is_per_run(root) else (
        f"integrity error: log {path}: damaged entry at offset {victim.offset} (checksum mismatch; complete entries "
        "follow it); the log is readable only up to it (run 'objstore verify')"))
    blob = tmp_path / "b.txt"
    blob.write_bytes(b"hello")
    code, out, err = _write_blob(root, str(blob))
    assert (code, out) == (6, ""), err
    assert err == f"objstore: error: {plain.value}\n"
    assert snapshot_tree(root) == files  # nothing cut, nothing appended


# -- short writes ------------------------------------------------------------------------------


# Format 6: a blob no record names is held by its process, not written (the CLI's put-blob writes no log), so the
# commit under test is a record of r1 naming the blob, made by a child that reports errors as the CLI does.
_RECORD_BLOB_CHILD = r"""
import sys
from objstore import RunLog, Store
from objstore.errors import ObjstoreError

try:
    log = RunLog(Store.open(sys.argv[1]))
    with log.batch():
        blob = log.put_blob(open(sys.argv[2], "rb").read())
        log.record_attempt("r1", 77, 0, "succeeded", output=blob)
except ObjstoreError as e:
    print(f"objstore: error: {e}", file=sys.stderr)
    sys.exit(e.exit_code)
print(blob.hex())
"""


def _write_blob(root, path, limit=None):
    """Commit the file at ``path`` as a blob, in a child process (its file size limited to ``limit``): the CLI's
    put-blob on one log; on format 6 a record of run r1 naming it (r1's log is the one written). (exit, out, err)."""
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)

    def limit_file_size():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    if is_per_run(root):
        argv = [sys.executable, "-c", _RECORD_BLOB_CHILD, root, path]
    else:
        argv = [sys.executable, "-m", "objstore", "--store", root, "put-blob", path]
    p = subprocess.run(argv, capture_output=True, env=env, timeout=120, preexec_fn=limit_file_size)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@pytest.mark.parametrize("headroom", [0, 4096], ids=["EFBIG", "short-write"])
def test_short_write_is_invisible_typed_and_recoverable(tmp_path, headroom):
    """``ulimit -f`` just above (or at) the active segment's size: appending a 200 KB blob fails
    part-way (Python ignores SIGXFSZ, so the write is short or fails with EFBIG)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "failed")
    engine = log_engine_of(log.store, run)
    seg = engine.seg_path(engine._seg)
    size = os.path.getsize(seg)
    n = engine.position().entry
    payload = os.urandom(200_000)
    src = tmp_path / "big.bin"
    src.write_bytes(payload)
    blob_id = blake3.blake3(b"blob %d\x00" % len(payload) + payload).digest()
    files = snapshot_tree(root)

    code, out, err = _write_blob(root, str(src), size + headroom)
    assert (code, out) == (10, ""), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    prefix = "objstore: error: operating-system error while trying to append a commit entry: "
    if headroom:
        assert re.fullmatch(re.escape(prefix) + r"\[Errno 28\] short write \(4096 of \d+ bytes\)\n", err), err
    else:
        assert err == prefix + "[Errno 27] File too large\n"
    # Invisible: the segment is as it was (the writer took its partial bytes back), verify is clean.
    assert snapshot_tree(root) == files
    rl = RunLog(Store.open(root))
    assert not rl.store.has(blob_id)
    assert log_engine_of(rl.store, run).position().entry == n
    report = verify_report(rl)
    assert (report.problems, report.notes) == ([], [])

    # Space returns: the same commit goes through, with nothing to cut.
    code, out, err = _write_blob(root, str(src))
    assert (code, out, err) == (0, blob_id.hex() + "\n", "")
    rl = RunLog(Store.open(root))
    assert rl.store.get_blob(blob_id) == payload
    assert list(log_engine_of(rl.store, run).entries())[-1].cut is None
    code, out, err = run_cli("verify", store=root, exit_code=0)
    assert (code, out) == (0, "") and err.startswith("verify: ok (")


# -- a crash while sealing ------------------------------------------------------------------------

_SEAL_CRASH_CHILD = r"""
import os, sys
from objstore import RunLog, Store
from objstore.storage.log.format import SEG_HEADER
from objstore.storage.log import local_write

log = RunLog(Store.open(sys.argv[1]))
local_write.SEAL_BYTES = 1  # the next commit seals its segment
real_write = os.write


def dying_write(fd, data):
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        path = ""
    if ".seg" in os.path.basename(path) and len(data) == SEG_HEADER.size:
        real_write(fd, data[:20])  # part of the next segment's header reaches the file...
        os._exit(9)  # ...and the process dies
    return real_write(fd, data)


os.write = dying_write
log.record_attempt("r1", 9, 0, "failed", error="committed just before the seal")
print("survived")
"""


def test_crash_while_sealing_leaves_a_readable_store(tmp_path):
    """The writer dies while writing the header of the segment it is sealing into: its commit is
    already durable, and the store must stay readable, verify clean and take the next commit —
    a crash is never damage."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    first = log.record_attempt(run, 1, 0, "failed")
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)
    p = subprocess.run([sys.executable, "-c", _SEAL_CRASH_CHILD, root], capture_output=True, env=env, timeout=120)
    assert p.returncode == 9 and p.stdout == b"", p.stderr.decode()

    rl = RunLog(Store.open(root))
    records = rl.records(run)
    assert [r.id for r in records][:2] == [rl.record_at(rl.view(run), 0, 0), first.id]
    assert records[-1].body["error"] == "committed just before the seal"
    code, out, err = run_cli("refs", store=root, exit_code=0)
    assert code == 0, err
    report = verify_report(rl)
    assert report.problems == [], [x.line() for x in report.problems]
    code, out, err = run_cli("verify", store=root, exit_code=0)
    assert (code, out) == (0, ""), err
    nxt = rl.record_attempt(run, 10, 0, "succeeded")
    assert RunLog(Store.open(root)).view(run).heads[0] == nxt.id
    assert verify_report(RunLog(Store.open(root))).problems == []


def test_an_entry_shaped_blob_inside_a_torn_entry_is_still_a_torn_tail(tmp_path):
    """A crash while writing an entry that carries bytes shaped like an entry must not pass for
    damage: the next writer cuts it and verify stays clean."""

    root = str(tmp_path / "s")
    s = Store.init(root, fsync="off")
    s.set_ref("refs/a", None, s.put_blob(b"a"), "a")
    fake, _ = encode_entry(b"\0" * 32, 99, 0.0, [], [["refs/z", None, b"\1" * 32, "r"]], None)
    seg = s.engine.seg_path(1)
    start = os.path.getsize(seg)
    witness = read_witness(store_log_root(root))  # refs/* are the store log's
    with s.batch():
        s.set_ref("refs/b", None, s.put_blob(fake), "b")
    os.truncate(seg, os.path.getsize(seg) - 20)  # the trailer of that entry never reached the disk
    crash_before_sync(store_log_root(root), witness)
    torn = open(seg, "rb").read()[start:]
    r = Store.open(root, fsync="off")
    assert r.engine.torn is not None and r.engine.damaged is None
    cutter = r.engine.position().entry + 1  # the next commit (the put_blob) cuts the torn bytes
    r.set_ref("refs/c", None, r.put_blob(b"c"), "c")
    assert r.read_ref("refs/b") is None and r.read_ref("refs/c") is not None
    report = verify_report(RunLog(Store.open(root)))
    assert report.problems == [] and [n.line() for n in report.notes] == [
        f"past-cut entry {cutter}: its writer cut a torn tail of {len(torn)} bytes at segment 1 offset {start} "
        f"(blake3 {blake3.blake3(torn).hexdigest()}) [{seg}]"]


def test_an_entry_larger_than_the_read_window_is_read_whole(tmp_path, monkeypatch):
    """A complete entry whose meta alone exceeds the tail window (many ref moves in one commit) is
    taken in, never mistaken for a torn tail (which the next writer would cut)."""

    monkeypatch.setattr(local_catchup, "TAIL_WINDOW", 4096)
    root = str(tmp_path / "s")
    s = Store.init(root, fsync="off")
    b = s.put_blob(b"v")
    with s.batch():
        for i in range(400):
            s.set_ref(f"refs/bulk/{i:04d}", None, b, "bulk import of a ref namespace")
    r = Store.open(root, fsync="off")
    assert r.engine.torn is None and r.engine.damaged is None
    assert r.engine.position() == s.engine.position()
    r.set_ref("refs/after", None, b, "one more")
    assert Store.open(root, fsync="off").read_ref("refs/bulk/0399") == b
