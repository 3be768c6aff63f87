"""The state cache per run (issue 16): on a store with a log per run, each run's cached state lives in its own
``state.db`` beside its log, so episode readers of different runs share no file.

Seen at the lowest layer: the files a reader process has open (/proc/<pid>/fd), and the raw bytes and mtimes of
another run's state files. On a store of one log (``OBJSTORE_NEW_FORMAT=3``) the cache is one ``state.db`` at
the root, as before: the tests that need a file per run say so and skip there.
"""

import os
import subprocess
import sys

import pytest
from helpers import is_per_run, run_cli, state_db_path

from objstore import RunLog, Store
from objstore.runs import statefiles
from objstore.runs.query import episode

HERE = os.path.dirname(os.path.abspath(__file__))
READER = os.path.join(HERE, "state_reader.py")
SUFFIXES = ("", "-wal", "-shm")


def _store(tmp_path, runs=("A", "B")):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    for r in runs:
        log.start_run(r)
        for i in range(3):
            log.record_attempt(r, i, 0, "failed" if i == 1 else "succeeded")
    return root, log


def _per_run_only(root):
    if not is_per_run(root):
        pytest.skip("a store of one log keeps one state.db at its root (this test is about a log per run)")


def _files(root, run):
    """(name -> (bytes, mtime in ns)) of run ``run``'s state files, read raw."""
    out = {}
    for s in SUFFIXES:
        p = state_db_path(root, run) + s
        if os.path.exists(p):
            with open(p, "rb") as f:
                out[s] = (f.read(), os.stat(p).st_mtime_ns)
    return out


def test_two_readers_of_two_runs_open_two_different_state_files(tmp_path):
    root, log = _store(tmp_path)
    _per_run_only(root)
    procs = {r: subprocess.Popen([sys.executable, READER, root, r, "20"], stdout=subprocess.PIPE, text=True) for r in ("A", "B")}
    opened = {}
    for r, p in procs.items():
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        opened[r] = set(out.split())
    for r, other in (("A", "B"), ("B", "A")):
        mine = os.path.realpath(state_db_path(root, r))
        assert mine in opened[r], f"the reader of {r} did not use its run's state file: {opened[r]}"
        assert opened[r] <= {mine + s for s in SUFFIXES}, f"the reader of {r} opened another state file: {opened[r]}"
        assert not {os.path.realpath(state_db_path(root, other)) + s for s in SUFFIXES} & opened[r]
    assert not os.path.exists(os.path.join(root, "state.db")), "no store-wide state file on a store with a log per run"
    fresh = RunLog(Store.open(root))
    for r in ("A", "B"):
        assert len(fresh.state.cached(r)) == 1  # each run's rows are in its own file, up to date


def test_reading_one_run_never_creates_or_changes_another_runs_state_file(tmp_path):
    root, log = _store(tmp_path, runs=("A", "B", "C"))
    _per_run_only(root)
    episode(log, "B", all_branches=True)  # B has a cache; C never had one
    log.state.close()
    before_b = _files(root, "B")
    assert before_b
    got = subprocess.run([sys.executable, READER, root, "A", "5"], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    assert _files(root, "B") == before_b, "a reader of A changed B's state file"
    assert _files(root, "C") == {}, "a reader of A made C a state file"
    assert _files(root, "A"), "the reader of A cached A"


def test_rows_of_a_run_are_only_in_its_own_file(tmp_path):
    root, log = _store(tmp_path)
    _per_run_only(root)
    for r in ("A", "B"):
        episode(log, r, all_branches=True)
    log.state.close()
    import sqlite3

    for r in ("A", "B"):
        db = sqlite3.connect(state_db_path(root, r))
        assert {x for (x,) in db.execute("SELECT DISTINCT run FROM branch")} == {r}
        assert {x for (x,) in db.execute("SELECT DISTINCT run FROM recs")} == {r}
        db.close()


def test_verify_and_a_rebuild_of_one_run_make_no_other_runs_file(tmp_path):
    root, log = _store(tmp_path, runs=("A", "B"))
    _per_run_only(root)
    run_cli("verify", store=root, exit_code=0)
    assert _files(root, "A") == {} and _files(root, "B") == {}, "verify made a state file"
    run_cli("rebuild", "A", store=root, exit_code=0)
    assert _files(root, "A") and _files(root, "B") == {}
    wal = state_db_path(root, "A") + "-wal"
    assert not os.path.exists(wal) or os.path.getsize(wal) == 0  # rebuild leaves each file its tables' size
    run_cli("rebuild", store=root, exit_code=0)
    assert _files(root, "B")
    run_cli("verify", store=root, exit_code=0)


def test_a_copy_reads_its_sources_rows_and_makes_no_file_for_the_source(tmp_path):
    root, log = _store(tmp_path, runs=("A",))
    _per_run_only(root)
    cp = log.fork_run("A", run="cp")
    log.record_attempt(cp, 9, 0, "succeeded")
    fresh = RunLog(Store.open(root))
    want = episode(fresh, cp, all_branches=True, source="refold").to_json()
    assert episode(fresh, cp, all_branches=True).to_json() == want
    assert _files(root, cp) and _files(root, "A") == {}, "reading the copy made its source a state file"
    episode(fresh, "A", all_branches=True)  # the source's own rows: in the source's file
    assert _files(root, "A")
    fresh2 = RunLog(Store.open(root))
    assert episode(fresh2, cp, all_branches=True).to_json() == want
    run_cli("verify", store=root, exit_code=0)


def test_a_reader_of_many_runs_keeps_a_bounded_number_of_files_open(tmp_path, monkeypatch):
    monkeypatch.setattr(statefiles, "MAX_OPEN", 8)
    runs = [f"r{i:02d}" for i in range(20)]
    root, log = _store(tmp_path, runs=runs)
    fresh = RunLog(Store.open(root))
    want = {}
    for r in runs:
        want[r] = episode(fresh, r, all_branches=True, source="refold").to_json()
        assert episode(fresh, r, all_branches=True).to_json() == want[r]
        assert fresh.state.files.open_count() <= (8 if is_per_run(root) else 1)
    real = os.path.realpath(root)
    open_files = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")]
    state_dbs = [p for p in open_files if p.startswith(real + os.sep) and os.path.basename(p) == "state.db"]
    assert len(state_dbs) <= (8 if is_per_run(root) else 1)
    for r in runs:  # an evicted run's file is opened again, and serves
        assert episode(fresh, r, all_branches=True).to_json() == want[r]
    fresh.state.close()
    assert fresh.state.files.open_count() == 0


def test_gc_vacuums_a_deleted_runs_file_and_leaves_the_others_untouched(tmp_path):
    from objstore.lifecycle import delete as D
    from objstore.lifecycle import gc as GC

    root, log = _store(tmp_path, runs=("A", "B"))
    log.start_run("D", meta={"secret": "SECRET-RUN-5e1d"})
    for r in ("A", "B", "D"):
        episode(log, r, all_branches=True)
    D.delete_run(log, "D", reason="secret")
    log.state.close()
    before_a = _files(root, "A")
    GC.gc(log.store)

    def raw(run):
        return b"".join(v[0] for v in _files(root, run).values())

    assert b"SECRET-RUN-5e1d" not in raw("D")
    if is_per_run(root):
        assert _files(root, "A") == before_a, "gc opened a state file of a run with no deletion"
    fresh = RunLog(Store.open(root))
    assert episode(fresh, "A").to_json() == episode(fresh, "A", source="refold").to_json()
