"""kill -9 at each file operation: the first format-5 writes on a format-3 store, and gc on a store of copies (issue 18).

``start_run(labels=...)``, ``register_kind``, ``fork_run`` and ``append(..., labels=...)`` are the first writes that need format 5 on a store
that is format 3: the marker must say 5 before the first format-5 entry lands. A forked child of the test process
(the house technique of tests/lifecycle/test_backup.py) SIGKILLs itself at its k-th file operation (os-level calls and the
builtin ``open``), for k = 1, 2, … until the call returns. After every kill the store must verify clean, be
format 3 or 5, hold the operation whole or not at all (format 3: not at all), and the operation run again must
finish and verify."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal

import pytest
from helpers import is_per_run

import objstore
from objstore.errors import Conflict
from objstore.runs import labels as L

OPS = ("open", "write", "pwrite", "writev", "rename", "replace", "fsync", "fdatasync", "unlink", "ftruncate", "mkdir",
       "makedirs", "link")
LABELS = {"thread_id": "T", "checkpoint_ns": ""}
FIELDS = [["a", "str", True, False], ["r", "id", False, True]]


def _version(root):
    with open(os.path.join(root, "OBJSTORE")) as f:
        return json.load(f)["version"]


def _base(root):
    """A format-3 store with one unlabelled run of three records (the source of fork_run)."""
    log = objstore.open_store(root)
    run = log.start_run("src")
    for i in range(3):
        log.record_attempt(run, i, 0, "succeeded", output=log.put_blob(b"out %d" % i))
    assert _version(root) == (6 if is_per_run(root) else 3)
    log.store.logs.close()


def _do(op, log):
    if op == "start_run":
        return log.start_run(labels=LABELS)
    if op == "register_kind":
        return log.register_kind("x.adv.k", FIELDS)
    if op == "append":
        return log.append("src", "attempt", {"step": 9, "attempt": 0, "state": "running"}, labels={"checkpoint_id": "C"})
    return log.fork_run("src", labels={"copy": "1"})


def _killed_at(k, root, op):
    """Run ``op`` in a forked child that SIGKILLs itself at its k-th file operation; True if it returned first."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            log = objstore.open_store(root)
            log.view("src")  # opened and caught up before counting: only the operation's own file operations count
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


def _effect(log, op):
    """Whether the operation's effect is in the store, checked whole (never half)."""
    if op == "start_run":
        run = L.run_id(LABELS)
        if run not in log.runs():
            assert log.find_run(**LABELS) is None and log.find_runs(thread_id="T") == []
            return False
        assert log.find_run(**LABELS) == run and log.find_runs(thread_id="T") == [run]
        assert log.run_labels(run) == LABELS and log.view(run).live == 0
        assert [r.kind for r in log.records(run)] == ["run_started"]
        return True
    if op == "register_kind":
        sid = log.store.read_ref("schema/x.adv.k")
        if sid is None:
            return False
        assert log.schema_of("x.adv.k") == (sid, FIELDS)
        return True
    if op == "append":
        got = log.find_records("src", checkpoint_id="C")
        lsns = [r.lsn for r in log.records("src")]
        assert lsns == list(range(4 + len(got)))  # appended whole or not at all
        assert all(r.kind == "attempt" and r.body["step"] == 9 for r in got)
        return bool(got)
    run = L.run_id({"copy": "1"})
    if run not in log.runs():
        return False
    lineage = [(r.run, r.lsn) for r in log.iter_lineage(log.view(run), 0)]
    assert lineage == [("src", 0), ("src", 1), ("src", 2), ("src", 3), (run, 0)]
    return True


@pytest.mark.parametrize("op", ["start_run", "register_kind", "fork_run", "append"])
def test_kill_9_at_every_file_operation_of_a_first_format_5_write(tmp_path, op):
    base, root = str(tmp_path / "base"), str(tmp_path / "s")
    _base(base)
    # One log: the operation moves the marker from 3 to 5 first. Format 6 has every kind of write from its start:
    # the marker stays 6, and what is checked is the operation whole or absent (run creation: catalog entry and log).
    per_run = is_per_run(base)
    marks, last = ((6,), 6) if per_run else ((3, 5), 5)
    k = 0
    seen = dict.fromkeys(marks, 0)
    while True:
        k += 1
        assert k < 200, f"{op} never finished"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        done = _killed_at(k, root, op)
        v = _version(root)
        assert v in marks, v
        log = objstore.open_store(root)
        for name in log.runs():  # no listing shows a half run (format 6: a catalog entry whose log the kill left empty)
            assert log.view(name).heads[0] is not None, (op, k, name)
        assert objstore.verify(log) == [], (op, k)
        there = _effect(log, op)
        assert done <= there, "the call returned but its effect is not in the store"
        if v == 3:
            assert not there, f"a format-5 write landed in a store still marked format 3 (killed at operation {k})"
        seen[v] += 1
        if done:
            break
        # the operation again, in this process: it finishes (or finds it done) and the store verifies
        try:
            _do(op, log)
        except Conflict:
            assert op in ("start_run", "fork_run") and there
        assert _effect(log, op) and _version(root) == last
        assert objstore.verify(objstore.open_store(root)) == []
        log.store.logs.close()
    print(f"{op}: killed at each of {k - 1} file operations; markers after them: {seen}")
    assert k > 5, f"only {k} file operations: the child did not count them"
    assert per_run or (seen[3] >= 1 and seen[5] >= 1), seen  # one log: killed both before and after the marker moved


def _gc_killed_at(k, root):
    """gc in a forked child that SIGKILLs itself at its k-th file operation; True if it finished first."""
    from objstore.lifecycle.gc import gc

    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            store = objstore.open_store(root).store
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
            gc(store)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, "gc failed in the child instead of finishing or being killed"
        return True
    assert os.WTERMSIG(status) == signal.SIGKILL
    return False


def _copy_reads(root, runs):
    log = objstore.open_store(root)
    out = {}
    for run in runs:
        view = log.view(run)
        out[run] = ([(r.run, r.lsn, r.body) for r in log.iter_lineage(view, 0)], log.refold(view, 0))
    return out


@pytest.mark.slow
def test_kill_9_at_every_file_operation_of_gc_on_a_store_of_copies_whose_source_was_deleted(tmp_path):
    """gc keeps what a live copy reaches of its deleted source: killed anywhere, the store verifies, every copy
    reads what it read before gc, and gc run again finishes."""
    from objstore.lifecycle import delete as D
    from objstore.lifecycle.gc import gc

    base, root = str(tmp_path / "base"), str(tmp_path / "s")
    log = objstore.open_store(base)
    src = log.start_run(labels={"thread_id": "src"})
    recs = [log.record_attempt(src, i, 0, "succeeded", output=log.put_blob(b"src %d" % i * 50)) for i in range(6)]
    cp = log.fork_run(src, record=recs[3].id, labels={"thread_id": "cp"})
    log.record_attempt(cp, 10, 0, "succeeded", output=log.put_blob(b"cp own" * 50))
    gone = log.fork_run(src, labels={"thread_id": "gone"})
    log.record_attempt(gone, 11, 0, "succeeded", output=log.put_blob(b"gone own" * 50))
    D.delete_run(log, gone, reason="adv18")
    D.delete_run(log, src, reason="adv18")
    log.store.logs.close()
    want = _copy_reads(base, [cp])
    k = 0
    while True:
        k += 1
        assert k < 400, "gc never finished"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        done = _gc_killed_at(k, root)
        assert objstore.verify(objstore.open_store(root), check_state=False) == [], k
        assert _copy_reads(root, [cp]) == want, k
        if done:
            break
        gc(objstore.open_store(root).store)  # run again: it finishes, and changes no answer
        assert _copy_reads(root, [cp]) == want and objstore.verify(objstore.open_store(root)) == []
    print(f"gc of a store of copies: killed at each of {k - 1} file operations")
    assert k > 20
    fresh = objstore.open_store(root)
    assert fresh.find_run(thread_id="cp") == cp and fresh.find_run(thread_id="gone") is None and fresh.find_runs(thread_id="src") == []
