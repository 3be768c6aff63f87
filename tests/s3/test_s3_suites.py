"""The run-log suites, the seeds' tests and the official LangGraph conformance suite, run again on S3.

A child pytest runs these modules with OBJSTORE_TEST_S3_BASE pointing at the session's SeaweedFS: every store
a test makes in a directory is then made on object storage instead (helpers.install_s3_redirect, in the child
pytest and — through tests/s3/s3redirect/sitecustomize.py on PYTHONPATH — in every Python process it starts: CLI
commands, writer scripts, the journal Host backend). The same tests, unchanged, on the other engine: T2.3 (rewind is a
fork, branch 0 byte-identical), T1.7 (episode from state = cold re-fold, no blob body read), copies and listing,
threads, ingest, the LangGraph savers (conformance at FULL level, a real StateGraph, the async saver, thread
operations, deletion), T-745 journal compaction (local and Backend Hosts, grants, revocation, restore), the log
and label commands.

The tests left out are named here with the reason; each reads local files or runs what S3 does not have yet.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)

MODULES = ["runs/test_rewind_fork.py", "runs/test_episode_query_equivalence.py", "storage/test_threads.py",
           "runs/test_ingest.py", "runs/test_copy_and_listing.py", "integrations/test_langgraph_conformance.py",
           "integrations/test_langgraph_graph.py", "integrations/test_langgraph_async.py",
           "integrations/test_langgraph_threads.py", "integrations/test_langgraph_delete.py",
           "integrations/test_langgraph_partree.py",
           "journal/test_journal_compaction.py", "journal/test_journal_cli.py", "journal/test_host_snapshot.py",
           "cli/test_cli_log.py", "cli/test_cli_labels.py"]

FILES = "reads the store's local files, which on S3 are only its cache"
LEFT_OUT = {
    "integrations/test_langgraph_conformance.py::test_the_official_suite_passes_at_full_level[AsyncObjstoreSaver]":
        "the suite on S3 for ObjstoreSaver only, as the issue sets it (time); the async saver is the same store calls",
    "integrations/test_langgraph_threads.py::test_delete_for_runs_and_prune_are_recorded_deletions_gone_after_gc": FILES,
    "integrations/test_langgraph_delete.py::test_delete_thread_then_gc_leaves_no_trace_of_a_planted_secret":
        FILES + " (tests/s3/test_s3_cli.py searches the bucket for a deleted secret instead)",
    "integrations/test_langgraph_partree.py::test_prune_deletes_the_nodes_only_pruned_checkpoints_named_and_gc_erases_their_parts":
        FILES + " (the nodes it deletes are checked on S3 by the others: a copy outliving a prune, gc keeping a live node)",
    "journal/test_journal_compaction.py::test_c4_signed_backend_read_needs_no_runtime_nor_idle_and_rejects_jobs":
        "asserts a read leaves the store directory unchanged; on S3 that directory is the cache a read refreshes",
    "journal/test_journal_cli.py::test_init_creates_owner_key_outside_the_store": "asserts init prints the directory path",
    "journal/test_journal_cli.py::test_journal_serve_needs_a_store": "asserts the message names the directory path",
    "journal/test_host_snapshot.py::test_update_is_decided_under_the_writer_lock":
        "asserts the writer lock's order (version, then revocation); S3 has no lock: the revocation lands first and "
        "the update is refused (tests/s3/test_s3_journal.py)",
}


@pytest.mark.langgraph  # imports LangGraph (or runs a process that does): left out without it
def test_the_suites_pass_on_s3(seaweed, tmp_path):
    env = dict(os.environ, OBJSTORE_TEST_S3_BASE=f"s3://{seaweed.bucket}/suite-{uuid.uuid4().hex[:8]}",
               OBJSTORE_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.path.join(HERE, "s3redirect"))  # the processes the tests start are redirected too
    env.pop("PYTEST_ADDOPTS", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            *[os.path.join(TESTS, m) for m in MODULES]]
    for node in LEFT_OUT:
        args += ["--deselect", "tests/" + node]
    got = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, cwd=os.path.dirname(TESTS))
    tail = got.stdout[-4000:]
    assert got.returncode == 0, tail + got.stderr[-2000:]
    summary = re.search(r"(\d+) passed(?:, (\d+) deselected)?", tail)
    assert summary is not None, tail
    assert "failed" not in tail.splitlines()[-1] and "error" not in tail.splitlines()[-1], tail
    assert int(summary.group(2) or 0) == len(LEFT_OUT), tail
    assert int(summary.group(1)) >= 130, tail  # the modules' tests, less those left out, all ran
    print(tail.splitlines()[-1])
