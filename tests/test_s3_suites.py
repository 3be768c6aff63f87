"""The run-log suites, the seeds' tests and the official LangGraph conformance suite, run again on S3.

A child pytest runs these modules with OBJSTORE_TEST_S3_BASE pointing at the session's SeaweedFS: every store
a test makes in a directory is then made on object storage instead (tests/conftest.py, helpers.s3_mapped), and
every ``run_cli(store=…)`` names the S3 store. The same tests, unchanged, on the other engine: T2.3 (rewind is a
fork, branch 0 byte-identical), T1.7 (episode from state = cold re-fold, no blob body read), copies and listing,
threads, ingest, the LangGraph savers (conformance at FULL level, a real StateGraph, the async saver, thread
operations).

The tests left out are named here with the reason; each reads local files or runs what S3 does not have yet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))

MODULES = ["test_rewind_fork.py", "test_episode_query_equivalence.py", "test_threads.py", "test_ingest.py",
           "test_copy_and_listing.py", "test_langgraph_conformance.py", "test_langgraph_graph.py",
           "test_langgraph_async.py", "test_langgraph_threads.py"]

LEFT_OUT = {
    "test_copy_and_listing.py::test_the_command_line_shows_a_copy": "runs bin/objstore on the directory path itself",
    "test_copy_and_listing.py::test_log_of_a_copy_whose_source_was_deleted_shows_the_kept_history": "the same",
    "test_copy_and_listing.py::test_verify_a_run_by_label": "the same",
    "test_copy_and_listing.py::test_a_copy_keeps_its_history_when_its_source_is_deleted_and_gc_runs": "gc (local only)",
    "test_langgraph_threads.py::test_copy_thread_is_a_cross_run_fork_copying_nothing": "gc (local only)",
    "test_langgraph_threads.py::test_delete_for_runs_and_prune_are_recorded_deletions_gone_after_gc": "gc (local only)",
    "test_langgraph_threads.py::test_prune_of_a_source_leaves_its_copys_history": "gc (local only)",
    "test_langgraph_threads.py::test_a_fresh_reader_of_a_copy_sees_its_sources_deleted_checkpoints_as_deleted":
        "a child python opens the directory path itself, and gc",
}


def test_the_suites_pass_on_s3(seaweed, tmp_path):
    env = dict(os.environ, OBJSTORE_TEST_S3_BASE=f"s3://{seaweed.bucket}/suite-{uuid.uuid4().hex[:8]}",
               OBJSTORE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTEST_ADDOPTS", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            *[os.path.join(HERE, m) for m in MODULES]]
    for node in LEFT_OUT:
        args += ["--deselect", "tests/" + node]
    got = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, cwd=os.path.dirname(HERE))
    tail = got.stdout[-4000:]
    assert got.returncode == 0, tail + got.stderr[-2000:]
    summary = re.search(r"(\d+) passed(?:, (\d+) deselected)?", tail)
    assert summary is not None, tail
    assert "failed" not in tail.splitlines()[-1] and "error" not in tail.splitlines()[-1], tail
    assert int(summary.group(2) or 0) == len(LEFT_OUT), tail
    assert int(summary.group(1)) >= 56, tail  # the modules' tests, less those left out, all ran
    print(tail.splitlines()[-1])
