"""Group commit across writer processes (storage.log.groupsync), with real processes and fsync full.

The flushes are counted where they happen: each child wraps ``os.fdatasync`` and ``os.fsync`` once its
store is open and prints how many it called while committing one record. The test takes the ``sync``
file's lock itself (as a syncer in flight would hold it) to stop children at the point where they wait,
then lets them go, and checks:

* two writers stopped there share one flush after it, and the head witness names the newest entry the
  flush covered, one written by a third writer meanwhile (the syncer caught up before flushing);
* a writer whose entry a flush of its segment begun after its write covered (the counters say so)
  flushes nothing; a flush of another segment, or counters no syncer writes, do not count;
* a syncer killed with SIGKILL in the middle of its flush, or a waiter killed while it waits, stops
  nobody: the next writer flushes its own entry, and the run's records stay contiguous and verify clean.

This file is also the writer child: ``python test_group_sync.py ROOT RUN MODE`` (MODE ``count`` or
``hang``: the first flush prints ``flushing`` and never returns).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time


def _child(root: str, run: str, mode: str) -> None:
    from objstore import RunLog, Store

    log = RunLog(Store.open(root, fsync="full"))
    calls = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def counting(real):
        def wrapped(fd):
            calls.append(fd)
            if mode == "hang":
                print("flushing", flush=True)
                while True:
                    time.sleep(60)
            return real(fd)
        return wrapped

    os.fdatasync, os.fsync = counting(real_fdatasync), counting(real_fsync)
    rec = log.record_attempt(run, step=0, attempt=0, state="succeeded", context={"pid": os.getpid()})
    print(json.dumps({"flushes": len(calls), "lsn": rec.lsn}), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3])
    sys.exit(0)


# -- the tests ----------------------------------------------------------------------------------------

from helpers import log_engine_of, run_cli, run_log_root  # noqa: E402

from objstore import RunLog, Store  # noqa: E402
from objstore.storage.log import groupsync  # noqa: E402
from objstore.storage.log.witness import read_witness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = "r"


def _store(tmp_path) -> str:
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    log.start_run(RUN)
    log.store.logs.close()
    return root


def _spawn(root: str, mode: str = "count") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    env.pop("OBJSTORE_FSYNC", None)
    return subprocess.Popen([sys.executable, __file__, root, RUN, mode], stdout=subprocess.PIPE, text=True, env=env)


def _entries(root: str) -> int:
    """The entries of the run's log (the one the children write; the store's one log before format 6)."""
    store = Store.open(root, fsync="off")
    try:
        return log_engine_of(store, RUN).refresh().entry
    finally:
        store.logs.close()


def _wait_entries(root: str, n: int, children: list) -> None:
    """Until the log holds ``n`` entries (the children wrote theirs and wait for a flush)."""
    deadline = time.monotonic() + 60
    while _entries(root) < n:
        assert all(c.poll() is None for c in children), "a child ended before its entry was in the log"
        assert time.monotonic() < deadline, "the children's entries never reached the log"
        time.sleep(0.01)


def _wait_blocked(root: str, children: list) -> None:
    """Until one of ``children`` waits for the sync file's lock (a blocked flock, ``->`` in /proc/locks): it read
    the sync counters right after its write, before waiting, so counters set from now on are a flush begun after
    that read (waiting for its entry alone raced with that read: the first durable commit imports groupsync)."""
    ino = os.stat(os.path.join(run_log_root(root, RUN), groupsync.SYNC_FILE)).st_ino
    pids = {str(c.pid) for c in children}
    deadline = time.monotonic() + 60
    while True:
        with open("/proc/locks") as f:
            rows = [line.split() for line in f]
        if any("->" in r and r[r.index("->") + 4] in pids and r[r.index("->") + 5].endswith(f":{ino}") for r in rows):
            return
        assert all(c.poll() is None for c in children), "a child ended before it waited for the sync lock"
        assert time.monotonic() < deadline, "no child ever waited for the sync lock"
        time.sleep(0.005)


def _result(c: subprocess.Popen) -> dict:
    out, _ = c.communicate(timeout=60)
    assert c.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


class _SyncLock:
    """The ``sync`` file's lock of the run's log, held by the test as a syncer in flight holds it."""

    def __init__(self, root: str) -> None:
        self.fd = groupsync.open_sync(run_log_root(root, RUN))
        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _lsns(root: str) -> list[int]:
    store = Store.open(root, fsync="off")
    try:
        return [r.lsn for r in RunLog(store).records(RUN)]
    finally:
        store.logs.close()


def test_two_waiting_writers_share_one_flush_which_names_the_newest_entry(tmp_path):
    root = _store(tmp_path)
    start = _entries(root)
    lock = _SyncLock(root)
    try:
        kids = [_spawn(root)]
        _wait_entries(root, start + 1, kids)
        kids.append(_spawn(root))
        _wait_entries(root, start + 2, kids)
        # A third writer (fsync off: it makes no flush of its own) appends meanwhile: the syncer
        # catches up before flushing, so its flush covers and its witness names this entry too.
        log = RunLog(Store.open(root, fsync="off"))
        log.record_attempt(RUN, step=1, attempt=0, state="succeeded")
        newest = log_engine_of(log.store, RUN).position()
        log.store.logs.close()
    finally:
        lock.release()
    got = [_result(c) for c in kids]
    assert sum(g["flushes"] for g in got) == 1, got
    w = read_witness(os.path.join(run_log_root(root, RUN), "log", "witness"))
    assert w == (newest.entry, newest.checksum)
    assert _lsns(root) == [0, 1, 2, 3]


def _one_waiting_writer(root: str, entries: int, segment: int | None) -> int:
    """A child's flushes for one record, while the test holds the sync lock and, once the child's entry
    is written, leaves the counters a sync of ``segment`` begun after that write leaves (None: none)."""
    lock = _SyncLock(root)
    try:
        kid = _spawn(root)
        _wait_entries(root, entries, [kid])
        _wait_blocked(root, [kid])
        if segment is not None:
            s = groupsync.started(lock.fd)
            groupsync._set(lock.fd, s + 1, s + 1, segment)
    finally:
        lock.release()
    return _result(kid)["flushes"]


def test_a_flush_of_its_segment_begun_after_the_write_covers_the_entry(tmp_path):
    root = _store(tmp_path)
    start = _entries(root)
    assert _one_waiting_writer(root, start + 1, 1) == 0
    assert _one_waiting_writer(root, start + 2, 2) == 1  # another segment's flush covers nothing here
    assert _one_waiting_writer(root, start + 3, None) == 1
    assert _lsns(root) == [0, 1, 2, 3]


def test_counters_no_syncer_writes_are_not_trusted(tmp_path):
    root = _store(tmp_path)
    fd = groupsync.open_sync(run_log_root(root, RUN))
    assert fd is not None
    try:
        groupsync._set(fd, 5, 9, 1)  # completed above started: no syncer leaves this
        assert groupsync.started(fd) == groupsync.NEVER
        os.pwrite(fd, b"\xff", 3)  # a torn or damaged record
        assert groupsync.started(fd) == groupsync.NEVER
    finally:
        os.close(fd)
    kid = _spawn(root)
    assert _result(kid)["flushes"] == 1


def test_a_syncer_killed_in_its_flush_stops_no_one(tmp_path):
    root = _store(tmp_path)
    start = _entries(root)
    syncer = _spawn(root, "hang")
    try:
        assert syncer.stdout.readline().strip() == "flushing"  # it holds the sync lock, in fdatasync
        waiter = _spawn(root)
        _wait_entries(root, start + 2, [waiter])
    finally:
        syncer.send_signal(signal.SIGKILL)
        syncer.wait()
    assert _result(waiter)["flushes"] == 1  # the killed syncer's flush covered nobody
    assert _result(_spawn(root))["flushes"] == 1
    assert _lsns(root) == [0, 1, 2, 3]  # the killed writer's entry was written before its flush
    run_cli("verify", store=root, exit_code=0)


def test_a_waiter_killed_while_it_waits_stops_no_one(tmp_path):
    root = _store(tmp_path)
    start = _entries(root)
    lock = _SyncLock(root)
    try:
        waiter = _spawn(root)
        _wait_entries(root, start + 1, [waiter])
        waiter.send_signal(signal.SIGKILL)
        waiter.wait()
    finally:
        lock.release()
    got = _result(_spawn(root))
    assert got["flushes"] == 1 and got["lsn"] == 2
    assert _lsns(root) == [0, 1, 2]
    run_cli("verify", store=root, exit_code=0)
