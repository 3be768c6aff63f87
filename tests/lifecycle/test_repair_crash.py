"""A ``repair`` killed with SIGKILL at any file operation never wedges the store (issue 13, item 10).

The store is damaged on disk the way ``tests/lifecycle/test_repair.py`` damages it: a flipped byte in the
newest entry, which the head witness says was made durable, so every writer refuses until
``repair --cut-after N``. A forked child runs that repair and SIGKILLs itself at its k-th file
operation (every open, write, pwrite, rename, fsync, unlink, ftruncate… it makes), for each k until
one finishes. After each kill the store is either as it was before the repair (the repair's entry
is not in the log: the same repair command, run again, finishes) or repaired (its entry is in the
log, whatever became of the head witness after it); either way verify is then clean and a writer
commits. The kill between the repair's entry and the head witness is the one that used to wedge
the store: every writer refused (``log-truncated``), the same repair was refused, and only
``--cut-after N+1`` helped.
"""

import os
import shutil
import signal

import pytest
from helpers import log_engine_of

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.lifecycle.repair import REPAIRS_REF, repair
from objstore.runs.verify import verify

OPS = ("open", "write", "pwrite", "rename", "replace", "fsync", "fdatasync", "unlink", "ftruncate", "mkdir", "link")


def _eng(store):
    """The log the damage is in: run r1's (a store of a log per run), else the store's one log."""
    return log_engine_of(store, "r1" if store.logs.per_run else None)


def _repair(store, cut_after, reason):
    return repair(store, cut_after, reason, run="r1" if store.logs.per_run else None)


def damaged_store(root, how):
    """Records, then damage the head witness sees: ``flip``, a flipped byte in the last entry's
    trailer (the witness names that entry: ``witness-mismatch`` after the repair's entry); ``lost``,
    the last two entries gone (the witness is ahead of the repair's entry: ``log-truncated``).
    Returns the number of the last good entry."""
    log = RunLog(Store.open(root, create=True))
    run = log.start_run("r1")
    for i in range(4):
        log.record_attempt(run, 1, i, "failed", error="e" * 30)
    eng = _eng(log.store)  # the run's own log (a log per run), else the store's one log
    good = eng.position().entry
    seg = eng.seg_path(eng._seg)
    end = os.path.getsize(seg)
    log.record_attempt(run, 1, 8, "failed", error="y" * 40)
    log.record_attempt(run, 1, 9, "succeeded", error="x" * 40)
    assert eng.witness()[0] == good + 2
    eng.close()
    if how == "lost":
        os.truncate(seg, end)
        return good
    os.truncate(seg, os.path.getsize(seg))
    with open(seg, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x04]))
    return good + 1


def repair_killed_at(k, root, cut_after):
    """``repair`` in a forked child that SIGKILLs itself at its k-th file operation; True if it finished."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            count = [0]
            for name in OPS:
                real = getattr(os, name)

                def op(*a, _real=real, **kw):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return _real(*a, **kw)

                setattr(os, name, op)
            _repair(Store.open(root), cut_after, "bit rot, no backup")
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, "the repair failed instead of finishing or being killed"
        return True
    assert os.WTERMSIG(status) == signal.SIGKILL
    return False


def writable_and_clean(root):
    """verify is clean, and a writer of another handle commits (then verify is still clean)."""
    s = Store.open(root)
    assert verify(RunLog(s), jobs=1) == []
    s.logs.close()
    log = RunLog(Store.open(root))
    log.record_attempt("r1", 2, 0, "succeeded")
    log.store.logs.close()
    assert verify(RunLog(Store.open(root)), jobs=1) == []


@pytest.mark.parametrize("how", ["flip", "lost"])
def test_kill_9_at_every_file_operation_of_repair(tmp_path, how):
    base, root = str(tmp_path / "base"), str(tmp_path / "s")
    good = damaged_store(base, how)
    shutil.copytree(base, root)
    with pytest.raises(CorruptLog):  # the damage the repair is for: every writer refuses
        RunLog(Store.open(root)).record_attempt("r1", 2, 0, "failed")
    k = 0
    between = 0  # kills that left the repair's entry in the log and the old head witness beside it
    while True:
        k += 1
        assert k < 300, "the repair never finished"
        shutil.rmtree(root)
        shutil.copytree(base, root)
        if repair_killed_at(k, root, good):
            writable_and_clean(root)
            break
        s = Store.open(root, readable_prefix=True)
        eng = _eng(s)
        repaired = eng.position().entry > good and eng.tables.refs.get(REPAIRS_REF) is not None
        w, pos = eng.witness(), eng.position()
        between += repaired and (w[0] > pos.entry or (w[0] == pos.entry and w[1] != pos.checksum))
        s.logs.close()
        if not repaired:  # killed before its entry was durable: the same repair finishes
            _repair(Store.open(root), good, "bit rot, no backup, again")
        writable_and_clean(root)
    assert k > 5, f"only {k} file operations: the child did not count them"
    assert between, "no kill fell between the repair's entry and its head witness"
    print(f"repair ({how}): killed at each of {k - 1} file operations")
