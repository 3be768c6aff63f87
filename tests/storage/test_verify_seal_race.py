"""verify beside 8 writer processes that seal segments while it reads (issue 15, "Snapshots").

verify reads one snapshot: the log position at its start. A segment that a writer seals while verify
reads it is, at that snapshot, the active segment: its index file (written at the seal) covers
entries beyond the snapshot and must not be judged against the entries verify read. Before this
was so, such a pass reported a false ``damaged-index``.

The writers (tests/storage/verify_writer.py, real OS processes) seal at 8 KiB, so seals are frequent; each
pass counts the segment files before and after, and the test asserts that at least 3 seals
happened during passes, so it cannot pass by never racing. Passes alternate between one process
and two worker processes (jobs 1 and 2). To make every pass race, the test holds verify's read of the
segment that was active at the start until a writer has sealed it (``_scan_after_a_seal``), or until every writer of
that log has stopped (then no seal will come: waiting would only wait out the poll's bound)."""

import os
import subprocess
import sys
import time

from helpers import run_log_root, store_log_root

import objstore.runs.verify as V
import objstore.storage.log.fsck as F
from objstore import RunLog, Store

HERE = os.path.dirname(os.path.abspath(__file__))
WRITERS = 8
SEAL = 8 << 10
MAX_COMMITS = 3000  # per writer: a bound, not a target (the writers are stopped once enough seals raced)
MIN_SEALS = 3
MAX_PASSES = 400


def _segments(root, runs):
    """The segment files of every log the writers write (each run's log and the store log; the store's one log
    before format 6: counted once)."""
    roots = {store_log_root(root), *(run_log_root(root, r) for r in runs)}
    return sum(1 for d in roots for f in os.listdir(os.path.join(d, "log")) if f.endswith(".seg"))


def _scan_after_a_seal(real, done_of):
    """scan_segment, but the segment that was active when verify listed the files is read only
    after a writer has sealed it (a bounded number of short polls, never asserted): the seal lands
    after verify's snapshot and before verify reads that segment, in every pass that races.
    ``done_of``: a log's ``log/`` folder -> the files its writers create when they stop. A log no writer writes (the
    store log) or whose writers all stopped gets no seal: its segment is read at once, not after the poll's bound
    (which made each pass wait 3 s per such log). Files, not process handles: worker processes (jobs 2) see them."""
    def scan(path, next_path, *rest):
        done = done_of.get(os.path.realpath(os.path.dirname(path)), [])
        for _ in range(300):
            if os.path.exists(next_path) or all(os.path.exists(d) for d in done):
                break
            time.sleep(0.01)
        return real(path, next_path, *rest)
    return scan


def test_verify_beside_eight_sealing_writers_reports_nothing(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    runs = [log.start_run(f"w{i}") for i in range(WRITERS)]
    stop = str(tmp_path / "stop")
    env = dict(os.environ, OBJSTORE_TEST_SEAL_BYTES=str(SEAL), PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    done_of: dict[str, list[str]] = {}
    for run in runs:
        done_of.setdefault(os.path.realpath(os.path.join(run_log_root(root, run), "log")), []).append(str(tmp_path / f"done-{run}"))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "verify_writer.py"), root, run, stop, str(MAX_COMMITS),
                               str(tmp_path / f"done-{run}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for run in runs]
    passes, raced, bad = 0, 0, []
    monkeypatch.setattr(F, "scan_segment", _scan_after_a_seal(F.scan_segment, done_of))  # worker processes fork with it
    try:
        while passes < MAX_PASSES and (raced < MIN_SEALS or passes < 10):
            if all(p.poll() is not None for p in procs):
                break
            before = _segments(root, runs)
            report = V.verify_report(RunLog(Store.open(root, fsync="off")), jobs=1 + passes % 2)
            after = _segments(root, runs)
            passes += 1
            raced += after - before
            bad.extend(p.line() for p in report.problems)
    finally:
        open(stop, "w").close()
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, [err.decode()[-2000:] for _out, err in outs]
    assert bad == []
    assert raced >= MIN_SEALS, f"only {raced} seals happened during {passes} verify passes"
    # and the store the writers left verifies clean, in both modes, with the same report
    monkeypatch.undo()
    final = [V.verify_report(RunLog(Store.open(root)), jobs=j) for j in (1, 2)]
    assert final[0] == final[1] and final[0].problems == []
    assert sum(int(out) for out, _err in outs) > 0
