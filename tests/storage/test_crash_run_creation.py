"""kill -9 at every file operation of creating a run on a store of a log per run (format 6): a run's log is made
(staged, renamed whole), its catalog entry written once, then the log's first entry. After every kill the catalog
and the run logs agree — every listed run is whole, no listing (``runs``, ``latest``, ``find_run``, ``find_runs``)
shows a half run — the store verifies, and the call run again finishes.

The house technique (tests/storage/test_crash_each_file_operation.py): a forked child SIGKILLs itself at its k-th
file operation (os-level calls and the builtin ``open``), for k = 1, 2, … until the call returns."""

from __future__ import annotations

import builtins
import os
import shutil
import signal

import pytest

import objstore
from objstore.runs import labels as L
from objstore.runs.resolve import resolve_run

OPS = ("open", "write", "pwrite", "writev", "rename", "replace", "fsync", "fdatasync", "unlink", "ftruncate", "mkdir",
       "makedirs", "link")
LABELS = {"thread_id": "T"}


def _base(root):
    log = objstore.open_store(root)
    if not log.store.logs.per_run:
        pytest.skip("one log (OBJSTORE_NEW_FORMAT=3): runs are not created as logs")
    src = log.start_run("src")
    log.record_attempt(src, 1, 0, "succeeded")
    log.store.logs.close()


def _do(op, log):
    if op == "start_run":
        return log.start_run("new-run", subject="s")
    if op == "start_run_labels":
        return log.start_run(labels=LABELS)
    return log.fork_run("src", labels={"copy": "1"})


def _new_run(op):
    return {"start_run": "new-run", "start_run_labels": L.run_id(LABELS), "fork_run": L.run_id({"copy": "1"})}[op]


def _killed_at(k, root, op):
    pid = os.fork()
    if pid == 0:
        try:
            log = objstore.open_store(root)
            log.view("src")
            count = [0]

            def wrap(real):
                def op_(*a, **kw):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*a, **kw)
                return op_

            for name in OPS:
                if hasattr(os, name):
                    setattr(os, name, wrap(getattr(os, name)))
            builtins.open = wrap(builtins.open)
            _do(op, log)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, f"{op} failed in the child instead of finishing or being killed"
        return True
    assert os.WTERMSIG(status) == signal.SIGKILL
    return False


def _agree(log, op):
    """The listings agree with the logs and show the new run whole or not at all; whether it is there."""
    run = _new_run(op)
    listed = log.store.run_names()
    assert "src" in listed
    there = run in listed
    newest = list(log.store.runs_newest_first())
    assert sorted(newest) == sorted(listed)  # the catalog's walk skips exactly the half runs
    assert resolve_run(log, "latest") == (run if there else "src")
    if op == "start_run_labels":
        assert (log.find_run(**LABELS) == run) is there and log.find_runs(thread_id="T") == ([run] if there else [])
    if there:
        assert [r.kind for r in log.records(run)] == ["run_started"]
        entry = log.store.logs.catalog.entry(run)
        assert entry is not None and entry.run == run  # a whole run has its catalog entry
        if op == "fork_run":
            assert entry.copy_of == "src" and log.store.logs.catalog.copies("src") == [run]
    return there


@pytest.mark.parametrize("op", ["start_run", "start_run_labels", "fork_run"])
def test_kill_9_at_every_file_operation_of_creating_a_run(tmp_path, op):
    base, root = str(tmp_path / "base"), str(tmp_path / "s")
    _base(base)
    k = 0
    while True:
        k += 1
        assert k < 300, f"{op} never finished"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        done = _killed_at(k, root, op)
        log = objstore.open_store(root)
        assert objstore.verify(log) == [], (op, k)
        there = _agree(log, op)
        assert done <= there, "the call returned but the run is not there"
        if not there:  # run it again: it finishes, whatever the kill left (a log without entries, a catalog entry)
            _do(op, log)
            assert _agree(objstore.open_store(root), op)
        log.store.logs.close()
        if done:
            break
    assert k > 5  # the creation really did file operations to be killed at
