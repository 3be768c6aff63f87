"""Adversarial pass over ``objstore gc`` (issue 17): real processes, small stores, damage on disk.

What tests/lifecycle/test_gc.py already pins (repack identity, a stale in-process reader, an edited packed meta,
kill -9 at every file operation) is not repeated. Here:

1. gc (twice) while 4 writer processes append (two to a shared run) and 2 reader processes read every
   run's log and every object by id, with a run deleted just before gc: every acknowledged record is
   there with its bytes, only the deleted run's bodies are gone, verify is clean, gc again rewrites only
   segments not packed yet;
2. backups in a loop in one process while gc runs in another and writers write: each backup verifies
   against its anchor and holds exactly SRC's refs at its snapshot;
3. refusals: the gc lock held, bad ages and flags, a directory that is no store, a damaged sealed
   segment (typed error, and the store byte for byte as it was);
4. a full disk (ENOSPC at the k-th ``os.write`` of a gc child, for k across the run);
5. forgery: a valid packing that silently drops a body put in place (with its index), and a rewrite
   entry whose rows are edited with every checksum recomputed;
6. a stale reader process pinned before gc, reading after gc and after a second gc that re-packs a
   segment for a new deletion.

Segments are sealed small (``engine.SEAL_BYTES`` is read at commit time: every child sets it at start).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import blake3
import pytest
from helpers import log_engine_of, run_cli, run_log_root, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import BodyRemoved, IntegrityError, LockTimeout
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report
from objstore.storage import codec
from objstore.storage.gclock import gc_lock
from objstore.storage.log import local_write, packed
from objstore.storage.log.entry import block_starts
from objstore.storage.log.format import REMOVED, WITNESS, WITNESS_MAGIC
from objstore.storage.log.segfile import seg_name
from objstore.storage.storedir import RUNLOGS_VERSION, new_store_format

HERE = os.path.dirname(os.path.abspath(__file__))
SEAL = 32 << 10
MOST = 1000  # commits per writer process at most (the test stops them sooner): the store stays small whatever the disk
PY = sys.executable


@pytest.fixture
def small_seal(monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)


def _env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    env.pop("OBJSTORE_DIR", None)
    return env


def _child(name, *args, **kw):
    return subprocess.Popen([PY, os.path.join(HERE, name), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), **kw)


def _ready(p):
    line = p.stdout.readline().strip()
    assert line == "ready", (line, p.stderr.read() if p.poll() is not None else "")


def _acks(path):
    with open(path) as f:
        return [(bytes.fromhex(a), int(b), None if c == "-" else bytes.fromhex(c)) for a, b, c in (ln.split() for ln in f if ln.strip())]


def _lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _wait_lines(paths, more, limit=60.0):
    """Wait until each ack file has ``more`` lines beyond what it has now (the writers went on), or
    MOST (the writer's cap)."""
    want = [min(_lines(p) + more, MOST) for p in paths]
    deadline = time.monotonic() + limit  # a bound against a hung writer, not a timed assertion
    while any(_lines(p) < w for p, w in zip(paths, want, strict=True)) and time.monotonic() < deadline:
        time.sleep(0.02)


def _eng(store, run):
    """The log run ``run``'s things are in: its own (a store of a log per run), else the store's one log."""
    return log_engine_of(store, run if store.logs.per_run else None)


def _unpacked(eng):
    return [s for s in range(1, eng._seg) if eng._packed(s) is None]


def _all_objects(root):
    """{id: canonical bytes} of every readable object (BodyRemoved ones apart), of every log of the store."""
    s = Store.open(root)
    out, gone = {}, set()
    for _run, eng in s.logs.all_logs():
        for oid in list(eng.iter_ids()):
            try:
                out[oid] = bytes(eng.read(oid))
            except BodyRemoved:
                gone.add(oid)
    s.logs.close()
    return out, gone - set(out)  # (a body one log holds and another's copy lost is readable)


def _prebuilt(root, deleted="old", records=24):
    """Runs w0, w1, sh (the writers' own and shared) and ``deleted`` (its blobs its own, but one it
    shares with w0's first record), a few segments sealed. Returns (log, doomed ids, shared blob id)."""
    log = RunLog(Store.init(root, fsync="off"))
    for run in ("w0", "w1", "sh", deleted):
        log.start_run(run)
    shared = log.put_blob(b"shared between a deleted and a live run " * 30)
    log.record_attempt("w0", 0, 0, "succeeded", prompt=shared)
    mine = []
    for i in range(records):
        b = log.put_blob(f"{deleted} private {i} ".encode() * 60)
        mine.append(b)
        log.record_attempt(deleted, 1, i, "succeeded", prompt=b, output=shared if i == 0 else None)
    doomed = set(mine) | {oid for _l, oid in _eng(log.store, deleted).iter_chain(deleted, 0)}
    return log, doomed, shared


# -- 1. gc while 4 writers append and 2 readers read -------------------------------------------------------------
@pytest.mark.slow
def test_gc_while_four_writers_append_and_two_readers_read(tmp_path, small_seal):
    root, stop = str(tmp_path / "s"), str(tmp_path / "stop")
    log, doomed, shared = _prebuilt(root)
    per_run = log.store.logs.per_run
    where = "old" if per_run else "-"  # the log holding the deleted run's bodies ("-": the store's one log)
    dpath = str(tmp_path / "doomed")
    with open(dpath, "w") as f:  # with a log per run, the deleted run's own copy of the shared blob goes too
        f.write("".join(f"{where} {o.hex()}\n" for o in doomed | ({shared} if per_run else set())))
    acks = [str(tmp_path / f"ack{i}") for i in range(4)]
    runs = ["w0", "w1", "sh", "sh"]
    writers = [_child("gc_adv_writer.py", root, runs[i], stop, acks[i], SEAL, MOST) for i in range(4)]
    readers = [_child("gc_adv_reader.py", root, stop, dpath, SEAL, "old") for _ in range(2)]
    try:
        for p in writers + readers:
            _ready(p)
        _wait_lines(acks, 40)
        D.delete_run(log, "old", reason="adversarial: deleted just before gc")
        assert sum(len(_unpacked(e)) for _r, e in Store.open(root).logs.all_logs()) >= 3, \
            "gc has several sealed segments to rewrite while writers run"
        during = []
        for _ in range(2):  # gc twice, the writers and readers going on
            n0 = sum(map(_lines, acks))
            run_cli("gc", "--json", store=root, exit_code=0)
            during.append(sum(map(_lines, acks)) - n0)
            _wait_lines(acks, 10)
    finally:
        open(stop, "w").close()
        outs = [p.communicate(timeout=120) for p in writers + readers]
    for p, (out, err) in zip(writers + readers, outs, strict=True):
        assert p.returncode == 0, (out, err[-3000:])
    reads = [o for o, _ in outs[4:]]
    assert all(o.split()[0] == "passes" for o in reads), reads
    # Every acknowledged record is in the store with its bytes, at its place.
    s = Store.open(root)
    by_run: dict = {}
    for run, path in zip(runs, acks, strict=True):
        eng = _eng(s, run)  # the run's log (the store's one log)
        for oid, lsn, blob in _acks(path):
            data = eng.read(oid)
            assert blake3.blake3(bytes(data)).digest() == oid
            v = codec.decode(data, oid, False)[1]
            assert (v["run"], v["lsn"]) == (run, lsn)
            assert eng.record_at(run, 0, lsn) == oid
            if blob is not None:
                assert blake3.blake3(bytes(eng.read(blob))).digest() == blob
            by_run.setdefault(run, []).append(lsn)
    assert sorted(by_run["w0"]) == list(range(2, 2 + len(by_run["w0"])))  # after run_started and the prebuilt record
    assert sorted(by_run["w1"]) == list(range(1, 1 + len(by_run["w1"])))
    assert sorted(by_run["sh"]) == list(range(1, 1 + len(by_run["sh"])))  # two writers, one chain, no lsn twice
    assert [lsn for lsn, _ in _eng(s, "sh").iter_chain("sh", 0)] == list(range(len(by_run["sh"]) + 1))
    # Only the deleted run's bodies are gone; the blob it shared with a live run stays (in w0's log).
    for oid in doomed:
        with pytest.raises(BodyRemoved):
            _eng(s, "old").read(oid)
    assert _eng(s, "w0").read(shared)
    rep = verify_report(RunLog(s), check_state=False)
    assert rep.problems == [], rep.problems
    # gc again: only the segments not packed yet (the one it seals among them) are rewritten, nothing removed.
    if per_run:  # each log's, named LOG:SEGMENT
        before = [f"{r or 'store'}:{seg}" for r, e in s.logs.all_logs() for seg in _unpacked(e) + [e._seg]]
    else:
        before = _unpacked(s.engine) + [s.engine._seg]
    eng = _eng(s, "sh")
    res = G.gc(Store.open(root))
    assert set(res.rewritten) <= set(before), (res.rewritten, before)
    assert during[0] > 0, "commits were acknowledged while the first gc ran"
    print("segments", eng._seg, "readers", reads, "acks", [len(_acks(a)) for a in acks], "during gc", during)
    assert verify_report(RunLog(Store.open(root)), check_state=False).problems == []


# -- 2. gc and backup together --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_backups_in_a_loop_while_gc_runs_and_writers_write(tmp_path, small_seal):
    root, dest, stop = str(tmp_path / "s"), str(tmp_path / "dest"), str(tmp_path / "stop")
    log, doomed, _shared = _prebuilt(root)
    acks = [str(tmp_path / f"ack{i}") for i in range(2)]
    writers = [_child("gc_adv_writer.py", root, run, stop, acks[i], SEAL, MOST) for i, run in enumerate(("w0", "sh"))]
    try:
        for p in writers:
            _ready(p)
        _wait_lines(acks, 10)
        bk = _child("gc_adv_backup.py", root, dest, stop, SEAL)
        _ready(bk)
        D.delete_run(log, "old", reason="adversarial: gc during backups")
        for _ in range(3):
            run_cli("gc", store=root, exit_code=0)
            _wait_lines(acks, 8)
    finally:
        open(stop, "w").close()
        outs = [p.communicate(timeout=120) for p in writers]
        bout, berr = bk.communicate(timeout=120)
    for p, (_out, err) in zip(writers, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert bk.returncode == 0, (bout, berr[-3000:])
    assert int(bout.split()[-1]) >= 2, bout  # at least one before the gcs and one after (the loop makes two at least)
    # A last backup after the writers stopped: DEST is SRC's log, the deleted run's bodies gone from it too.
    from objstore.lifecycle.backup import backup

    r = backup(Store.open(root), dest)
    d, src = Store.open(dest), Store.open(root)
    dest_logs = {name: e.refs_at("") for name, e in d.logs.all_logs()}  # every log's refs (the one log's)
    assert dest_logs == {name: e.refs_at("") for name, e in src.logs.all_logs()}
    assert verify_report(RunLog(d), anchor=r.anchor, check_state=False).problems == []
    for oid in doomed:
        with pytest.raises(BodyRemoved):
            _eng(d, "old").read(oid)


# -- 3. bad input and refusals --------------------------------------------------------------------------------------
def _small(root, runs=2, per=60):
    """A store of a few sealed (not packed) segments, fsync off, one record per commit, a blob on every third."""
    log = RunLog(Store.init(root, fsync="off"))
    for r in range(runs):
        run = log.start_run(f"r{r}")
        for i in range(per):
            b = log.put_blob(f"run {r} step {i} ".encode() * 30) if i % 3 == 0 else None
            log.record_attempt(run, 1, i, "failed", prompt=b)
    log.store.engine.close()
    return RunLog(Store.open(root))


def _one_line(err):
    """The error: one line, the last of stderr (gc's progress lines come before it), no traceback."""
    lines = err.strip().splitlines()
    assert lines and "Traceback" not in err, err
    assert [ln for ln in lines if ln.startswith(("objstore:", '{"error"'))] == lines[-1:], err  # --json: the error as JSON
    return lines[-1]


def test_gc_while_another_gc_holds_the_lock_times_out_and_writes_nothing(tmp_path, small_seal):
    root = str(tmp_path / "s")
    _small(root)
    with gc_lock(root, shared=False, timeout=1):  # this process is "the other gc" (an flock: per open file)
        before = snapshot_tree(root)
        _, _, err = run_cli("gc", "--timeout", "0.2", store=root, exit_code=9)
        assert "gc.lock" in _one_line(err)
        _, _, err = run_cli("gc", "--json", "--timeout", "0.2", store=root, exit_code=9)
        _one_line(err)
        assert snapshot_tree(root) == before
        with pytest.raises(LockTimeout):  # the library call too
            G.gc(Store.open(root), timeout=0.2)
        assert snapshot_tree(root) == before
    run_cli("gc", store=root, exit_code=0)  # the lock gone with its holder: gc goes


@pytest.mark.parametrize("args, code", [
    (["--delete-runs-older-than", "5x"], 5),
    (["--delete-runs-older-than", "5x", "--reason", "r"], 5),
    (["--delete-runs-older-than", "-1d", "--reason", "r"], 5),
    (["--delete-runs-older-than", "1d"], 5),
    (["--delete-runs-older-than", "1d", "--reason", "  "], 5),
    (["--reason", "r"], 2),
    (["--dry-run"], 2),
    (["--timeout", "-1"], 2),
])
def test_bad_gc_arguments_are_one_line_and_write_nothing(tmp_path, small_seal, args, code):
    root = str(tmp_path / "s")
    _small(root, runs=1, per=20)
    before = snapshot_tree(root)
    _, out, err = run_cli("gc", *args, store=root, exit_code=code)
    assert "Traceback" not in err and out == ""
    if code == 5:
        _one_line(err)
    assert snapshot_tree(root) == before


def test_gc_and_stats_on_a_directory_that_is_no_store(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "file.txt").write_text("not a store")
    for cmd in (["gc"], ["gc", "--json"], ["stats"], ["stats", "--json"]):
        _, out, err = run_cli(*cmd, store=str(d), exit_code=3)
        _one_line(err)
        assert out == ""
    assert sorted(os.listdir(d)) == ["file.txt"]
    _, _, err = run_cli("gc", store=str(tmp_path / "absent"), exit_code=3)
    _one_line(err)
    assert not (tmp_path / "absent").exists()


def _record_block(root, seg, run=None):
    """(file offset, stored length, comp) of the first block of sealed segment ``seg`` holding a record (of
    run ``run``'s log; None: the store's one log)."""
    s = Store.open(root)
    eng = log_engine_of(s, run)
    for item in eng.scan(eng.refresh().entry):
        e = item.entry
        if e.seg != seg:
            continue
        starts = block_starts(e)
        for _oid, otype, _len, bi, _off in e.objs:
            if otype == codec.RECORD:
                comp, _raw, stored = e.blocks[bi]
                s.logs.close()
                return starts[bi], stored, comp
    raise AssertionError(f"no record in segment {seg}")


@pytest.mark.parametrize("where", ["block", "meta"])
def test_gc_on_a_damaged_sealed_segment_is_a_typed_error_and_touches_nothing(tmp_path, small_seal, where):
    """A flipped byte in a sealed segment: in a record's block (the bytes gc would carry into a packed
    file) or in the entry around it (its meta: the chain breaks). gc must stop with a typed error
    (exit 6) before writing anything: not seal, not pack, not rewrite the index, not the checkpoint. With a log per
    run: nothing in the damaged log (gc goes log by log: the store log before it is collected whole)."""
    root = str(tmp_path / "s")
    per_run = new_store_format() == RUNLOGS_VERSION
    _small(root, per=150 if per_run else 60)  # several sealed segments in each run's log too
    off, stored, _comp = _record_block(root, 2, "r0" if per_run else None)
    base = run_log_root(root, "r0")  # the damaged log's directory (the store's, on a store of one log)
    p = os.path.join(base, "log", seg_name(2))
    with open(p, "r+b") as f:
        at = off + stored // 2 if where == "block" else off - 8  # the middle of the block / the meta just before it
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    before = snapshot_tree(base)
    _, out, err = run_cli("gc", store=root, exit_code=6)
    _one_line(err)
    after = snapshot_tree(base)
    after.pop("gc.lock", None)  # the lock file itself (empty) may appear: taking the lock is not writing the store
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], f"gc on a damaged store changed {changed}"
    with open(p, "rb") as f:
        assert f.read(8) != packed.PK_MAGIC, "the damaged segment was not packed"


def test_gc_again_says_it_removed_nothing(tmp_path, small_seal):
    """What gc reports is what it did: a second gc after a deletion's bodies are gone removes nothing,
    and its figures (library and --json) say 0."""
    root = str(tmp_path / "s")
    log = _small(root)
    D.delete_run(log, "r1", reason="gone")
    first = G.gc(Store.open(root))
    assert (first.removed_records, first.removed_blobs) == (61, 20)  # run_started + 60 attempts; a blob on every third
    _, out, _ = run_cli("gc", "--json", store=root, exit_code=0)
    import json

    got = json.loads(out)
    assert (got["removed_records"], got["removed_blobs"], got["removed_other"]) == (0, 0, 0), got


# -- 1b. content addressing against removed bodies ---------------------------------------------------------------
def _deleted_blob_store(root):
    """A run "old" whose only record names blob X, deleted; a live run. (log, X's bytes, X's id)."""
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("old")
    log.start_run("live")
    data = b"the same transcript, written again later by a live run " * 20
    x = log.put_blob(data)
    log.record_attempt("old", 1, 0, "succeeded", prompt=x)
    D.delete_run(log, "old", reason="deleted")
    return log, data, x


def test_a_blob_put_again_after_gc_removed_its_body_is_stored_again(tmp_path):
    """Ids are content: a live run that writes the bytes of a body gc removed (a deleted run's blob) gets
    the same id. Its acknowledged commit must hold the bytes: the blob reads back, verify is clean."""
    root = str(tmp_path / "s")
    _deleted_blob_store(root)
    G.gc(Store.open(root))
    log = RunLog(Store.open(root))
    data = b"the same transcript, written again later by a live run " * 20
    x = log.put_blob(data)
    log.record_attempt("live", 1, 0, "succeeded", prompt=x)
    fresh = Store.open(root)
    assert fresh.get_blob(x) == data
    assert verify_report(RunLog(fresh), check_state=False).problems == []


def test_a_live_record_naming_a_doomed_blob_while_gc_runs_keeps_the_blob(tmp_path):
    """The same race with gc running: gc (a child process) has decided what goes and pauses there; a
    writer in this process puts the deleted run's blob again (deduplicated: the body is still there) and
    commits a live record naming it; then gc goes on. The acknowledged record's blob must survive."""
    root = str(tmp_path / "s")
    _log, data, x = _deleted_blob_store(root)
    ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
    g = _child("gc_adv_gc_pause.py", root, ready, go)
    try:
        while not os.path.exists(ready) and g.poll() is None:
            time.sleep(0.01)
        log = RunLog(Store.open(root))
        assert log.put_blob(data) == x
        log.record_attempt("live", 1, 0, "succeeded", prompt=x)
    finally:
        open(go, "w").close()
        out, err = g.communicate(timeout=120)
    assert g.returncode == 0, err
    fresh = Store.open(root)
    assert fresh.get_blob(x) == data
    assert verify_report(RunLog(fresh), check_state=False).problems == []


# -- 4. a full disk during gc ---------------------------------------------------------------------------------------
def _enospc(root, k):
    return subprocess.run([PY, os.path.join(HERE, "gc_adv_enospc.py"), root, str(k)], capture_output=True, text=True,
                          env=_env(), timeout=120)


@pytest.mark.slow
def test_a_full_disk_at_the_kth_write_of_gc(tmp_path, monkeypatch):
    """ENOSPC at the k-th os.write of a gc (half the buffer written first), for k across the run: exit
    10 with one line; the store opens, verifies clean, every entry and object is as before; gc run
    again (the disk has room) finishes and leaves no unfinished rewrite behind."""
    monkeypatch.setattr(local_write, "SEAL_BYTES", 16 << 10)
    base = str(tmp_path / "base")
    _small(base, runs=2, per=30)
    entries = [(e.n, e.checksum) for e in Store.open(base).engine.entries()]
    objs, _ = _all_objects(base)
    shutil.copytree(base, tmp_path / "probe")
    p = _enospc(str(tmp_path / "probe"), 0)
    assert p.returncode == 0, p.stderr
    total = int(p.stdout.split()[-1])
    assert total >= 10, total
    ks = sorted({1, 2, 3, total // 4, total // 2, 3 * total // 4, total - 2, total - 1, total})
    print("writes", total, "k", ks)
    for k in ks:
        root = str(tmp_path / f"k{k}")
        shutil.copytree(base, root)
        p = _enospc(root, k)
        assert p.returncode == 10, (k, p.returncode, p.stderr)
        assert "No space left on device" in _one_line(p.stderr), k
        s = Store.open(root)
        assert [(e.n, e.checksum) for e in s.engine.entries()][: len(entries)] == entries, k
        rep = verify_report(RunLog(s), check_state=False)
        assert rep.problems == [], (k, rep.problems)
        assert _all_objects(root) == (objs, set()), k
        G.gc(Store.open(root))
        rep = verify_report(RunLog(Store.open(root)), check_state=False)
        assert rep.problems == [] and not [n for n in rep.notes if n.code == "gc-unfinished"], (k, rep.notes)
        assert _all_objects(root) == (objs, set()), k
        assert all(Store.open(root).engine._packed(s) is not None for s in range(1, Store.open(root).engine._seg)), k
        shutil.rmtree(root)


# -- 6. a stale reader process ----------------------------------------------------------------------------------------
def test_stale_reader_processes_after_gc_and_after_a_second_gc_for_a_new_deletion(tmp_path, small_seal):
    """Readers that opened the store (and pinned its position) before gc read every object they knew
    after gc, and after a deletion and a second gc that re-packs the segments holding that run's bodies:
    right bytes, or SnapshotGone/BodyRemoved for the newly deleted run's bodies only; never
    IntegrityError, never wrong bytes. One reader read everything before gc (its descriptors of the old
    files still give the old bytes: allowed), one read nothing before the second gc: every deleted body
    is gone for it, and nothing else."""
    root = str(tmp_path / "s")
    log, doomed, shared = _prebuilt(root, records=40)
    per_run = log.store.logs.per_run
    for i in range(40):  # more live records after it, so the deleted run's bodies sit in segments with live ones
        log.record_attempt("w1", 1, i, "failed", prompt=log.put_blob(f"w1 {i} ".encode() * 50))
    if log.store.logs.per_run:
        # The deleted run's log holds its own records only, all in its active segment so far: seal it, so its bodies
        # sit in sealed segments as on one log (a reader's descriptor of the active segment, opened with the engine,
        # would still give the old bytes: allowed, as for the reader that read everything)
        _eng(log.store, "old").seal_now()
    ids = [(run, oid) for run, eng in log.store.logs.all_logs() for oid in list(eng.iter_ids())]  # every log's
    log.store.logs.close()
    idsfile = str(tmp_path / "ids")
    with open(idsfile, "w") as f:
        f.write("".join(f"{run or '-'} {o.hex()}\n" for run, o in ids))
    go1, go2 = str(tmp_path / "go1"), str(tmp_path / "go2")
    readers = [_child("gc_adv_stale.py", root, go1, go2, "all", "12", idsfile),
               _child("gc_adv_stale.py", root, go1, go2, "none", "2", idsfile)]
    try:
        for r in readers:
            _ready(r)
        res1 = G.gc(Store.open(root))
        assert res1.rewritten and res1.removed_records == 0
        open(go1, "w").close()
        assert readers[0].stdout.readline().startswith("phase 1 read"), readers[0].stderr.read()
        log = RunLog(Store.open(root))
        eng = _eng(log.store, "old")  # the deleted run's log (the store's one log)
        segs_of = {eng.loc(o).seg for o in doomed}
        if log.store.logs.per_run:  # gc names each log's segments LOG:SEGMENT
            segs_of = {f"old:{seg}" for seg in segs_of}
        D.delete_run(log, "old", reason="deleted between two gcs")
        res2 = G.gc(Store.open(root))
        assert segs_of <= set(res2.rewritten), (segs_of, res2.rewritten)  # packed segments packed again, without the bodies
        open(go2, "w").close()
        outs = [r.communicate(timeout=120) for r in readers]
    finally:
        for g in (go1, go2):
            open(g, "a").close()
        for r in readers:
            if r.poll() is None:
                r.kill()
    for r, (out, err) in zip(readers, outs, strict=True):
        assert r.returncode == 0, (out[-2000:], err[-2000:])
        assert out.splitlines()[-1] .startswith("phase 2 read"), out[-2000:]
    # (log, id) of each body a reader found gone: the log is the deleted run's ("-": the store's one log)
    gone = [{(ln.split()[3], bytes.fromhex(ln.split()[1])) for ln in out.splitlines() if ln.startswith("gone ")} for out, _ in outs]
    where = "old" if per_run else "-"
    # with a log per run, the deleted run's log held its own copy of the blob it shared with w0: gone with it
    doomed_there = doomed | ({shared} if per_run else set())
    assert gone[0] <= {(where, o) for o in doomed_there}
    assert "deleted old" in outs[0][0].splitlines()
    assert gone[1] == {(where, o) for o in doomed_there}, (len(gone[1]), len(doomed_there))
    assert ("w0" if per_run else "-", shared) not in gone[1]  # the live run's copy stays


# -- 5. forgery -------------------------------------------------------------------------------------------------------
def _forge(root, seg, drop, run="r0"):
    """Put in place of segment ``seg`` (of run ``run``'s log on a store of a log per run) another valid packing
    of it without the bodies ``drop`` (no deletion names them), its index beside it: what gc would write, had a
    deletion named them. The file's digest."""
    s = Store.open(root)
    eng = _eng(s, run)
    out = os.path.join(os.path.dirname(root), "forged.seg")
    digest, idx, removed = G.pack_segment(eng, seg, set(drop), out, sync=False)
    assert len(removed) == len(drop)
    s.logs.close()
    with open(eng.idx_path(seg), "wb") as f:
        f.write(idx)
    os.replace(out, eng.seg_path(seg))
    return digest, blake3.blake3(idx).digest()


def _objects_in(root, seg, otype, run="r0"):
    s = Store.open(root)
    eng = _eng(s, run)
    found = [o[0] for item in eng.scan(eng.refresh().entry) if item.entry.seg == seg
             for o in item.entry.objs if o[1] == otype and o[3] != REMOVED]
    s.logs.close()
    return found


def _readers_never_lie(root, objs, dropped):
    """A fresh process's view, through the log holding each object: every object but the dropped ones reads
    back byte for byte; a dropped one is a typed error, never bytes."""
    s = Store.open(root)
    seen = set()
    for _run, eng in s.logs.all_logs():
        for oid in list(eng.iter_ids()):
            if oid not in objs:
                continue
            seen.add(oid)
            if oid in dropped:
                with pytest.raises((BodyRemoved, IntegrityError)):
                    eng.read(oid)
            else:
                assert eng.read(oid) == objs[oid]
    assert seen == set(objs)  # every object was read back
    s.logs.close()


@pytest.mark.parametrize("packed_before", [True, False], ids=["over-a-packed-segment", "over-a-plain-segment"])
@pytest.mark.parametrize("kind", ["blob", "record"])
def test_a_packing_that_silently_drops_a_body_is_named_by_verify(tmp_path, small_seal, packed_before, kind):
    root = str(tmp_path / "s")
    _small(root, per=150 if new_store_format() == RUNLOGS_VERSION else 60)  # segment 2 of r0's log sealed too
    if packed_before:
        G.gc(Store.open(root))
    objs, _ = _all_objects(root)
    victim = _objects_in(root, 2, codec.BLOB if kind == "blob" else codec.RECORD)[1]
    _forge(root, 2, {victim})
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert f"missing-body {victim.hex()}" in out or "bad-rewrite" in out, out
    _readers_never_lie(root, objs, {victim})
    if kind == "record":  # the run's log: a typed error (exit 6 or 12), not a record without its body
        run = codec.decode(objs[victim], victim, False)[1]["run"]
        p = subprocess.run([PY, "-m", "objstore", "--store", root, "log", run], capture_output=True, text=True, env=_env(), timeout=60)
        assert p.returncode in (6, 12), (p.returncode, p.stderr)
        _one_line(p.stderr)


def test_an_unreferenced_blob_dropped_by_a_forged_packing_is_named(tmp_path, small_seal):
    """A committed blob no record names is kept by gc (stats counts it): dropping it is no deletion either."""
    root = str(tmp_path / "s")
    log = _small(root, runs=1, per=40)
    with log.store.batch():  # committed with a run's entry (a put outside a batch is only held by the process)
        lone = log.put_blob(b"committed, named by no record " * 20)
        log.record_attempt("r0", 2, 0, "failed")
    _small_more = [log.record_attempt("r0", 2, i, "failed") for i in range(1, 60)]
    assert _small_more
    s = Store.open(root)
    seg = _eng(s, "r0").loc(lone).seg
    assert seg < _eng(s, "r0")._seg
    G.gc(Store.open(root))
    objs, _ = _all_objects(root)
    _forge(root, seg, {lone})
    _, out, _ = run_cli("verify", store=root, exit_code=1)
    assert f"missing-body {lone.hex()}" in out or "bad-rewrite" in out, out
    _readers_never_lie(root, objs, {lone})


def _drop_last_entry(root, run="r0"):
    """Cut the log's last entry (the rewrite entry gc wrote; of run ``run``'s log on a store of a log per run)
    off the active segment, as if never written: witness back to the entry before, checkpoint removed
    (derived). Its rows."""
    s = Store.open(root)
    eng = _eng(s, run)
    ents = list(eng.entries())
    last, prev = ents[-1], ents[-2]
    assert last.rw and last.seg == eng._seg, "the rewrite entry is the log's last"
    s.logs.close()
    with open(eng.seg_path(last.seg), "r+b") as f:
        f.truncate(last.offset)
    with open(os.path.join(run_log_root(root, run), "log", "witness"), "r+b") as f:
        f.write(WITNESS.pack(WITNESS_MAGIC, prev.n, prev.checksum))
    os.unlink(os.path.join(run_log_root(root, run), "log", "checkpoint"))
    return [list(r) for r in last.rw]


@pytest.mark.parametrize("edit", ["name-the-forged-file", "name-a-digest-no-file-has", "name-a-plain-segment"])
def test_a_rewrite_entry_whose_rows_are_edited_with_every_checksum_recomputed(tmp_path, small_seal, edit):
    """The rewrite entry is the log's last: cut it off and commit another in its place through the engine
    (its root and checksum recomputed, the witness written; what a forger with write access can do).
    name-the-forged-file: a packing of segment 2 that drops a live blob is put in place and the new
    entry names its file and index digests: the log now agrees with the files, and only the body
    check can tell (missing-body). name-a-digest-no-file-has: the row for segment 2 names a file no
    gc wrote (nothing is lost). name-a-plain-segment: a segment that is not packed is named as
    rewritten. An anchor taken before gc still verifies: the forgery sits after it."""
    root = str(tmp_path / "s")
    _small(root)
    _, before_gc, _ = run_cli("anchor", store=root, exit_code=0)
    G.gc(Store.open(root))
    dropped: set = set()
    if edit == "name-a-plain-segment":  # more commits seal plain segments after the packed ones
        log = RunLog(Store.open(root))
        for i in range(80):
            log.record_attempt("r0", 3, i, "failed", prompt=log.put_blob(f"late {i} ".encode() * 40))
        log.store.logs.close()
        plain = _unpacked(_eng(Store.open(root), "r0"))
        assert plain
    objs, _ = _all_objects(root)
    if edit == "name-the-forged-file":
        victim = _objects_in(root, 2, codec.BLOB)[1]
        dropped = {victim}
        fd, idd = _forge(root, 2, dropped)
        rows = [[seg, fd, idd] if seg == 2 else [seg, f, i] for seg, f, i in _drop_last_entry(root)]
    elif edit == "name-a-digest-no-file-has":
        rows = [[seg, b"\x5a" * 32, i] if seg == 2 else [seg, f, i] for seg, f, i in _drop_last_entry(root)]
    else:
        rows = [[plain[0], b"\x5a" * 32, b"\x5b" * 32]]  # a new rewrite entry, the log's last
    _eng(Store.open(root), "r0").commit_rewrite(rows)
    code = 0 if edit == "name-a-digest-no-file-has" else 1
    rc, out, err = run_cli("verify", store=root, exit_code=code)
    if edit == "name-the-forged-file":
        assert f"missing-body {victim.hex()}" in out, out
    elif edit == "name-a-digest-no-file-has":
        assert "gc-unfinished" in err, err  # named as a note only: see the report
    else:
        assert "bad-rewrite" in out, out
    run_cli("verify", "--anchor", before_gc.strip(), store=root, exit_code=code)
    _readers_never_lie(root, objs, dropped)
