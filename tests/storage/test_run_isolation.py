"""A log per run (format 6, invariant 19): writers of different runs share nothing, seen at the OS.

A process committing 100 records to run A, while another process writes run B, is traced with strace: it opens,
writes and locks nothing under B's log directory, and writes nothing of the store log or the catalog (it may
read them). A process holding A's lock in an open batch, indefinitely, does not delay a commit to B.
"""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from helpers import run_log_root, store_log_root

from objstore import RunLog, Store

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "isolation_writer.py")
pytestmark = pytest.mark.skipif(shutil.which("strace") is None and os.environ.get("CI") != "true",
                                reason="strace is not installed (apt install strace; .ci/run installs it)")


def _store(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    a, b = log.start_run(), log.start_run()
    for i in range(3):
        log.record_attempt(b, i, 0, "succeeded")
    return root, log, a, b


_CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|\?)")


def _trace(lines):
    """(syscall, args, result, path) of each traced call, the path of a descriptor call from the openat that made it."""
    fds, out = {}, []
    for line in lines:
        m = _CALL.match(line)
        if m is None:
            continue
        pid, call, args, res = m.groups()
        path = None
        if call in ("openat", "open", "mkdir", "mkdirat", "unlink", "unlinkat", "rename", "renameat", "renameat2",
                    "link", "linkat", "creat", "truncate"):
            path = " ".join(re.findall(r'"([^"]*)"', args))
            if call in ("openat", "open", "creat") and res.isdigit():
                fds[(pid, int(res))] = re.findall(r'"([^"]*)"', args)[0]
        else:
            fd = re.match(r"(\d+)", args)
            if fd is not None:
                path = fds.get((pid, int(fd.group(1))))
        out.append((call, args, res, path))
    return out


def test_a_writer_of_one_run_touches_nothing_of_another_run_nor_writes_the_store_log(tmp_path):
    root, _log, a, b = _store(tmp_path)
    b_dir = os.path.realpath(run_log_root(root, b))
    assert b_dir != os.path.realpath(root), "a store of one log: this test is about format 6"
    trace = str(tmp_path / "trace")
    other = subprocess.Popen([sys.executable, WRITER, root, b, "100"], stdout=subprocess.PIPE)
    got = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat,open,creat,write,pwrite64,writev,flock,fcntl,"
                          "ftruncate,fallocate,fsync,fdatasync,rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat",
                          "-o", trace, sys.executable, WRITER, root, a, "100"], capture_output=True, timeout=600)
    assert got.returncode == 0, got.stderr.decode()[-2000:]
    assert other.wait(timeout=600) == 0
    calls = _trace(open(trace).read().splitlines())
    store_log = os.path.realpath(store_log_root(root))
    catalog = os.path.realpath(os.path.join(root, "catalog"))
    writes = ("write", "pwrite64", "writev", "ftruncate", "fallocate", "fsync", "fdatasync", "rename", "renameat",
              "renameat2", "link", "linkat", "unlink", "unlinkat", "mkdir", "mkdirat", "creat")
    of_b, wrote_shared, locked_shared = [], [], []
    for call, args, _res, path in calls:
        if path is None:
            continue
        real = os.path.realpath(path)
        if real.startswith(b_dir + os.sep) or real == b_dir:
            of_b.append((call, args))
        shared = real.startswith(store_log + os.sep) or real.startswith(catalog + os.sep)
        if shared and (call in writes or (call in ("openat", "open") and ("O_WRONLY" in args or "O_RDWR" in args or "O_CREAT" in args))):
            wrote_shared.append((call, args))
        if shared and call in ("flock", "fcntl") and ("LOCK_" in args or "F_SETLK" in args or "F_OFD_SETLK" in args):
            locked_shared.append((call, args))
    assert of_b == [], f"the writer of run A touched run B's log: {of_b[:5]}"
    assert wrote_shared == [], f"the writer of run A wrote the store log or the catalog: {wrote_shared[:5]}"
    assert locked_shared == [], f"the writer of run A locked the store log or the catalog: {locked_shared[:5]}"
    # and it did commit: 100 records of A, each one entry of A's log
    fresh = RunLog(Store.open(root))
    assert len(fresh.records(a)) == 101 and len(fresh.records(b)) == 104
    assert fresh.store.logs.run_log(a).position().entry == 101


def test_holding_one_runs_lock_does_not_delay_a_commit_to_another_run(tmp_path):
    root, _log, a, b = _store(tmp_path)
    holder = subprocess.Popen([sys.executable, WRITER, root, a, "0", "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t = time.monotonic()
        got = subprocess.run([sys.executable, WRITER, root, b, "5"], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t
        assert got.returncode == 0 and got.stdout == "done\n", got.stderr[-2000:]
        assert holder.poll() is None, "the holder ended early: the test proves nothing"
        # (not a timing assertion: the commit to B finished while A's lock was still held; the bound only says so)
        assert took < 120
        fresh = RunLog(Store.open(root))
        assert len(fresh.records(b)) == 4 + 5
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert len(RunLog(Store.open(root)).records(a)) == 2
