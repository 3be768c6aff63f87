"""A process that touches many runs keeps a bounded number of files open (format 6).

Each run has its own log (a few descriptors while open) and its own state file (three); a process that
reads or writes thousands of runs — ``verify``, ``gc``, ``stats``, ``backup``, an agent loop over many
runs — keeps only some of them open (``storage.fdbudget``: a share of the soft ``RLIMIT_NOFILE``). Tested
at the lowest layer: the child's real limit is lowered with ``setrlimit`` (so going past it is
``EMFILE``, as on a default Linux limit of 1 024), and ``/proc/self/fd`` is counted. A run log let go by
the cache closes its descriptors at once, without a cyclic collection (the child disables ``gc``)."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

import pytest
from helpers import is_per_run

import objstore
from objstore.storage import fdbudget
from objstore.storage.runlogs import logs as runlogs

RUNS = 300
LIMIT = 128  # far below the runs' count: every command must keep to it


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fds") / "s")
    log = objstore.open_store(root, fsync="off")
    if not is_per_run(root):
        pytest.skip("one log per store: one set of descriptors whatever the runs")
    for i in range(RUNS):
        run = log.start_run(labels={"n": str(i)})
        log.record_attempt(run, 0, 0, "failed" if i % 7 == 0 else "succeeded", output=log.put_blob(b"out %d" % i))
    return root


def _child(code: str, root: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), root], capture_output=True, text=True,
                          preexec_fn=_limited, timeout=300)


def test_the_bound_follows_the_soft_limit():
    lo = fdbudget.bound(runlogs.FDS_PER_LOG, 8, runlogs.MAX_OPEN)
    soft = fdbudget.soft_limit()
    want = runlogs.MAX_OPEN if soft is None else max(8, min(runlogs.MAX_OPEN, soft // (fdbudget.SHARE * 2 * runlogs.FDS_PER_LOG)))
    assert lo == want
    if soft is not None:
        assert fdbudget.bound(runlogs.FDS_PER_LOG, 8, runlogs.MAX_OPEN) * runlogs.FDS_PER_LOG <= max(soft // (fdbudget.SHARE * 2), 8 * runlogs.FDS_PER_LOG)


def test_a_loop_over_every_run_keeps_to_a_low_limit_and_lets_logs_go_at_once(many_runs):
    got = _child("""
        import gc, os, sys
        gc.disable()  # a let-go run log must close its descriptors by reference counting alone
        import objstore
        log = objstore.open_store(sys.argv[1])
        runs = log.store.logs.run_ids()
        most = 0
        for i, run in enumerate(runs):
            log.record_attempt(run, 1, 0, "succeeded")
            assert [r.body.get("step") for r in log.records(run)] == [None, 0, 1]
            if i % 10 == 0:
                most = max(most, len(os.listdir("/proc/self/fd")))
        print(len(runs), log.store.logs.max_open, most)
    """, many_runs)
    assert got.returncode == 0, got.stderr[-3000:]
    runs, max_open, most = map(int, got.stdout.split())
    assert runs == RUNS and max_open == 8
    # the open logs, a state file per open run, the store log, Python's own: well under the limit
    assert most <= max_open * runlogs.FDS_PER_LOG + 40, most


@pytest.mark.parametrize("args", [["verify"], ["stats"], ["runs"], ["log", "latest"], ["gc"], ["backup", "{dest}"],
                                  ["gc", "--prune-unreferenced-older-than", "1s"]], ids=lambda a: " ".join(a))
def test_commands_over_every_run_keep_to_a_low_limit(many_runs, tmp_path, args):
    args = [a.format(dest=str(tmp_path / "bk")) for a in args]
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", many_runs, *args], capture_output=True, text=True,
                       preexec_fn=_limited, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Too many open files" not in p.stderr + p.stdout
    if args[0] == "verify":
        assert p.stderr.strip().splitlines()[-1].startswith("verify: ok ") and f" in {RUNS + 1} logs, " in p.stderr
