"""verify beside gc (issue 13, item 6): a gc that rewrites segments while verify reads them is seen as
what it is, never as damage.

gc puts each packed segment's index and then its file in place (renames), and then commits a rewrite
entry naming them; verify reads one snapshot (the log position at its start) without a lock. A pass
that read a segment's old index and its new file (or the other way round), or a packed file whose
removals a deletion after its snapshot justifies, used to report ``damaged-index`` or ``missing-body``.
Each test here runs a real ``objstore gc`` process from verify's progress callback, so the rewrite lands
inside the pass at a chosen point every time (not by chance), and asserts that the report is clean; a
last test checks that damage found beside such a gc is still named."""

import os
import signal
import subprocess
import sys

import pytest
from helpers import is_per_run, log_engine_of, run_log_root
from test_gc import build

from objstore.lifecycle import delete as D
from objstore.runs import verify as V
from objstore.runs.api import RunLog
from objstore.runs.verify_logs import walk_runs
from objstore.storage.store import Store


def _gc_process(root):
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "gc"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def _verify_with_gc_at(root, call, jobs, before_gc=None):
    """verify's report, a gc process run (once) from its ``call``-th progress call (after ``before_gc``)."""
    calls = [0]

    def progress(_objects, _bytes):
        calls[0] += 1
        if calls[0] == call:
            if before_gc is not None:
                before_gc()
            _gc_process(root)

    report = V.verify_report(RunLog(Store.open(root)), jobs=jobs, progress=progress)
    assert calls[0] > call  # the gc did run inside the pass
    return report


def _packed_segments(root):
    """(log directory, segment) of every packed segment of every log of the store (its one log before format 6)."""
    s = Store.open(root)
    dirs = [eng.dir for _run, eng in s.logs.all_logs()]
    s.logs.close()
    out = []
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if name.endswith(".seg"):
                with open(os.path.join(d, name), "rb") as f:
                    if f.read(4) == b"OSPK":
                        out.append((d, int(name[:-4])))
    return out


@pytest.mark.parametrize(("call", "jobs"), [(1, 1), (40, 1), (1, 2)], ids=["first-entry", "mid-pass", "workers"])
def test_a_gc_that_repacks_during_verify_is_no_damage(tmp_path, call, jobs):
    root = str(tmp_path / "s")
    build(root, runs=2, records=40, seal_bytes=6 << 10)  # about 11 segments: workers read at most 4 ahead
    assert _packed_segments(root) == []
    report = _verify_with_gc_at(root, call, jobs)
    assert _packed_segments(root)  # the gc did rewrite segments under verify
    assert [p.line() for p in report.problems] == []
    assert [n.code for n in report.notes] == ["verified-again"], report.notes
    assert V.verify_report(RunLog(Store.open(root))).problems == []


def test_a_deletion_and_its_gc_during_verify_are_no_damage(tmp_path):
    """The bodies gc removes during the pass are justified by a deletion committed after verify's snapshot."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=2, records=40, seal_bytes=16 << 10)

    def delete():
        D.delete_run(RunLog(Store.open(root)), runs[0], reason="deleted during verify")

    report = _verify_with_gc_at(root, 1, 1, before_gc=delete)
    assert [p.line() for p in report.problems] == []
    after = V.verify_report(RunLog(Store.open(root)))
    assert after.problems == []


def test_damage_beside_a_gc_is_still_named(tmp_path):
    """A damaged index of a segment the racing gc does not rewrite is reported, though a writer replaced
    it during the pass: the index verify judges is the one it found at its start, whatever the pass it
    finishes in."""
    root = str(tmp_path / "s")
    log, runs = build(root, runs=2, records=40, seal_bytes=16 << 10)
    if is_per_run(root):
        # verify proves the logs one at a time, shard by shard (a run's shard is a hash of its id): the damaged log
        # must be the first run verify takes, so that the writer's replacement and the gc land inside its pass
        order = [run for _xx, run, _cat, _dir in walk_runs(root)]
        runs = sorted(runs, key=order.index)
    _gc_process(root)  # every sealed segment packed: the next gc rewrites only those that hold what goes
    for i in range(40, 60):
        log.record_attempt(runs[1], i, 0, "succeeded", usage={"i": i})
    rec = log.record_at(log.view(runs[1]), 0, 45)
    D.delete_records(log, runs[1], [rec], reason="goes at the next gc")
    # the index of the first segment of run 0's log (the store's one log before format 6): the gc rewrites none of it
    idx = os.path.join(run_log_root(root, runs[0]), "log", "0000000001.idx")
    with open(idx, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0x40
        f.seek(0)
        f.write(data)
    with open(idx, "rb") as f:
        wrong = f.read()

    def a_writer_replaces_it():
        # a writer that came upon the wrong index replaces it (engine: the next writer does) before the gc
        w = RunLog(Store.open(root))
        first = w.record_at(w.view(runs[0]), 0, 0)
        eng = log_engine_of(w.store, runs[0] if is_per_run(root) else None)
        assert eng.loc(first).seg == 1
        eng.read(first)
        w.record_attempt(runs[0], 60, 0, "succeeded")  # a writer of that log
        with open(idx, "rb") as f:
            assert f.read() != wrong

    report = _verify_with_gc_at(root, 1, 1, before_gc=a_writer_replaces_it)
    assert [p.code for p in report.problems] == ["damaged-index"], [p.line() for p in report.problems]
    assert report.problems[0].subject == idx
    assert [n.code for n in report.notes] == ["verified-again"]


_GC_STOPPED_BEFORE_ITS_ENTRY = """
import os, signal, sys
from objstore.lifecycle import gc as G
from objstore.storage.log.local import LogEngine
from objstore.storage.store import Store
real = LogEngine._write_bare
stopped = []
def bare(self, seal=False, rw=None):
    if rw is not None and not stopped:  # the first log gc rewrites (the store log, where each run has a log)
        stopped.append(self.dir)
        os.kill(os.getpid(), signal.SIGSTOP)  # every packed file of that log in place; the parent resumes it
    return real(self, seal, rw)
LogEngine._write_bare = bare
G.gc(Store.open(sys.argv[1]))
"""


def test_a_rewrite_entry_committed_after_the_snapshot_is_no_unfinished_gc(tmp_path):
    """verify begins while a gc has put every packed file in place and not yet committed its rewrite
    entry; the entry lands during the pass. The files verify read are that rewrite's, which its
    snapshot does not name: it reads the store again rather than call the gc unfinished."""
    root = str(tmp_path / "s")
    build(root, runs=2, records=40, seal_bytes=16 << 10)
    gc = subprocess.Popen([sys.executable, "-c", _GC_STOPPED_BEFORE_ITS_ENTRY, root], stderr=subprocess.PIPE)
    try:
        _, status = os.waitpid(gc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        calls = [0]

        def progress(_objects, _bytes):
            calls[0] += 1
            if calls[0] == 1:
                os.kill(gc.pid, signal.SIGCONT)
                assert gc.wait(timeout=120) == 0, gc.stderr.read() if gc.stderr else ""

        report = V.verify_report(RunLog(Store.open(root)), jobs=1, progress=progress)
    finally:
        if gc.poll() is None:
            gc.kill()
            gc.wait()
    assert [p.line() for p in report.problems] == []
    assert [n.code for n in report.notes] == ["verified-again"], [n.line() for n in report.notes]
