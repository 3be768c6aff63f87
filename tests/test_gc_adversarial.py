"""Adversarial pass over ``objstore gc`` (issue 17): real processes, small stores, damage on disk.

What tests/test_gc.py already pins (repack identity, a stale in-process reader, an edited packed meta,
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
from helpers import run_cli, snapshot_tree

import objstore.storage.engine as E
from objstore import RunLog, Store
from objstore.errors import BodyRemoved, IntegrityError, LockTimeout, SnapshotGone
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report
from objstore.storage import codec
from objstore.storage.gclock import gc_lock

HERE = os.path.dirname(os.path.abspath(__file__))
SEAL = 32 << 10
MOST = 300  # commits per writer process: the store stays small, gc stays quick
PY = sys.executable


@pytest.fixture
def small_seal(monkeypatch):
    monkeypatch.setattr(E, "SEAL_BYTES", SEAL)


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
    while any(_lines(p) < w for p, w in zip(paths, want)) and time.monotonic() < deadline:
        time.sleep(0.02)


def _unpacked(eng):
    return [s for s in range(1, eng._seg) if eng._packed(s) is None]


def _all_objects(root):
    """{id: canonical bytes} of every readable object (BodyRemoved ones apart)."""
    s = Store.open(root)
    out, gone = {}, set()
    for oid in list(s.engine.iter_ids()):
        try:
            out[oid] = bytes(s.engine.read(oid))
        except BodyRemoved:
            gone.add(oid)
    s.engine.close()
    return out, gone


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
    doomed = set(mine) | {oid for _l, oid in log.store.engine.iter_chain(deleted, 0)}
    return log, doomed, shared


# -- 1. gc while 4 writers append and 2 readers read -------------------------------------------------------------
def test_gc_while_four_writers_append_and_two_readers_read(tmp_path, small_seal):
    root, stop = str(tmp_path / "s"), str(tmp_path / "stop")
    log, doomed, shared = _prebuilt(root)
    dpath = str(tmp_path / "doomed")
    with open(dpath, "w") as f:
        f.write("".join(o.hex() + "\n" for o in doomed))
    acks = [str(tmp_path / f"ack{i}") for i in range(4)]
    runs = ["w0", "w1", "sh", "sh"]
    writers = [_child("gc_adv_writer.py", root, runs[i], stop, acks[i], SEAL, MOST) for i in range(4)]
    readers = [_child("gc_adv_reader.py", root, stop, dpath, SEAL, "old") for _ in range(2)]
    try:
        for p in writers + readers:
            _ready(p)
        _wait_lines(acks, 40)
        D.delete_run(log, "old", reason="adversarial: deleted just before gc")
        assert len(_unpacked(Store.open(root).engine)) >= 3, "gc has several sealed segments to rewrite while writers run"
        during = []
        for _ in range(2):  # gc twice, the writers and readers going on
            n0 = sum(map(_lines, acks))
            run_cli("gc", "--json", store=root, exit_code=0)
            during.append(sum(map(_lines, acks)) - n0)
            _wait_lines(acks, 10)
    finally:
        open(stop, "w").close()
        outs = [p.communicate(timeout=120) for p in writers + readers]
    for p, (out, err) in zip(writers + readers, outs):
        assert p.returncode == 0, (out, err[-3000:])
    reads = [o for o, _ in outs[4:]]
    assert all(o.split()[0] == "passes" for o in reads), reads
    # Every acknowledged record is in the store with its bytes, at its place.
    s = Store.open(root)
    eng = s.engine
    by_run: dict = {}
    for run, path in zip(runs, acks):
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
    assert [lsn for lsn, _ in eng.iter_chain("sh", 0)] == list(range(len(by_run["sh"]) + 1))
    # Only the deleted run's bodies are gone; the blob it shared with a live run stays.
    for oid in doomed:
        with pytest.raises(BodyRemoved):
            eng.read(oid)
    assert eng.read(shared)
    rep = verify_report(RunLog(s), check_state=False)
    assert rep.problems == [], rep.problems
    # gc again: only the segments not packed yet (the one it seals among them) are rewritten, nothing removed.
    before = _unpacked(eng) + [eng._seg]
    res = G.gc(Store.open(root))
    assert set(res.rewritten) <= set(before), (res.rewritten, before)
    assert during[0] > 0, "commits were acknowledged while the first gc ran"
    print("segments", eng._seg, "readers", reads, "acks", [len(_acks(a)) for a in acks], "during gc", during)
    assert verify_report(RunLog(Store.open(root)), check_state=False).problems == []


# -- 2. gc and backup together --------------------------------------------------------------------------------------
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
    for p, (out, err) in zip(writers, outs):
        assert p.returncode == 0, err[-3000:]
    assert bk.returncode == 0, (bout, berr[-3000:])
    assert int(bout.split()[-1]) >= 3, bout
    # A last backup after the writers stopped: DEST is SRC's log, the deleted run's bodies gone from it too.
    from objstore.lifecycle.backup import backup

    r = backup(Store.open(root), dest)
    d = Store.open(dest)
    assert d.engine.refs_at("") == Store.open(root).engine.refs_at("")
    assert verify_report(RunLog(d), anchor=r.anchor, check_state=False).problems == []
    for oid in doomed:
        with pytest.raises(BodyRemoved):
            d.engine.read(oid)
