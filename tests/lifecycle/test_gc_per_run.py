"""Deletion and gc on a store of a log per run (format 6): each run's deletion is a commit to its own log, gc
collects one log at a time, ``gc --run RUN`` reads and writes no other run's log, and stats gives each log's
figures. Files are read and compared byte for byte (``helpers.log_files``)."""

import json
import os

import pytest
from helpers import is_per_run, log_engine_of, log_files, run_cli, run_log_root

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.storage.log.format import COMP_GONE


@pytest.fixture
def three(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    if not is_per_run(root):
        pytest.skip("a store of one log (OBJSTORE_NEW_FORMAT=3): gc and delete of one log are test_gc.py's")
    outputs = {}
    for run in ("A", "B", "C"):
        log.start_run(run)
        for i in range(5):
            outputs[run, i] = log.put_blob(f"{run} output {i}".encode())
            log.record_attempt(run, i, 0, "succeeded", output=outputs[run, i])
    log.outputs = outputs
    return root, log


def _changed(before, after):
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _under(root, run):
    return os.path.relpath(run_log_root(root, run), root) + os.sep


def test_deleting_runs_writes_each_runs_own_log_and_marks_the_catalog(three):
    root, log = three
    before = log_files(root)
    D.delete_runs(log, ["A", "B"], reason="retention")
    changed = _changed(before, log_files(root))
    catalog = [c for c in changed if c.startswith("catalog" + os.sep)]
    assert catalog and all(c.startswith(os.path.join("catalog", "deleted") + os.sep) for c in catalog)
    logs = {c for c in changed if c not in catalog}
    assert logs and all(c.startswith((_under(root, "A"), _under(root, "B"))) for c in logs), logs  # not C's, not the store log's
    assert {c.split(os.sep)[-1] for c in catalog} == {"A", "B"}
    assert set(D.deleted_runs(Store.open(root))) == {"A", "B"}


def test_gc_of_one_run_touches_only_that_runs_log(three):
    root, log = three
    D.delete_run(log, "B", reason="gone")
    before = log_files(root)
    _, out, _ = run_cli("gc", "--run", "B", "--json", store=root, exit_code=0)
    res = json.loads(out)
    assert res["removed_records"] == 6 and res["removed_blobs"] == 5  # run_started and five attempts; five outputs
    assert res["rewritten"] and all(r.startswith("B:") for r in res["rewritten"])
    changed = _changed(before, log_files(root))
    assert changed and all(c.startswith(_under(root, "B")) for c in changed), changed
    # the other runs read as before, and the whole-store gc after it finds nothing more in B
    s = RunLog(Store.open(root))
    for run in ("A", "C"):
        assert [s.store.get_blob(log.outputs[run, i]) for i in range(5)] == [f"{run} output {i}".encode() for i in range(5)]
        assert len(s.records(run)) == 6
    assert log_engine_of(s.store, "B").loc(log.outputs["B", 0]).comp == COMP_GONE  # the body left B's files
    res2 = G.gc(Store.open(root))
    assert res2.removed_records == res2.removed_blobs == 0
    assert not [r for r in res2.rewritten if r.startswith("B:")]


def test_gc_of_the_store_goes_log_by_log_and_a_second_gc_writes_nothing(three):
    root, log = three
    D.delete_run(log, "C", reason="gone")
    res = G.gc(Store.open(root))
    assert {r.split(":")[0] for r in res.rewritten} == {"A", "B", "C"}
    assert res.removed_records == 6 and res.removed_blobs == 5
    before = log_files(root)
    res2 = G.gc(Store.open(root))
    assert res2.rewritten == [] and res2.removed_records == res2.removed_blobs == 0
    assert log_files(root) == before


def test_gc_of_a_run_that_is_not_there_is_run_not_found(three):
    root, _log = three
    before = log_files(root)
    _, _, err = run_cli("gc", "--run", "Z", store=root, exit_code=4)
    assert "Z" in err and log_files(root) == before


def test_stats_gives_every_logs_figures(three):
    root, log = three
    D.delete_run(log, "B", reason="gone")
    _, out, _ = run_cli("stats", "--json", store=root, exit_code=0)
    st = json.loads(out)
    assert [x["log"] for x in st["logs"]] == ["store", "A", "B", "C"]
    assert (st["runs"], st["deleted_runs"]) == (2, 1)
    assert st["records"] == sum(x["records"] for x in st["logs"]) == 3 * 6
    assert st["segments"]["count"] == len(st["segments"]["files"]) >= 4


def test_a_redacted_blob_two_runs_name_leaves_both_runs_logs(three):
    """A body two runs' records name is stored in each run's log; its redaction is the store log's, and gc
    drops the body from every log that holds it."""
    import secrets

    from test_erasure import found

    root, log = three
    needle = secrets.token_hex(16).encode()
    shared = log.put_blob(b"leaked " + needle)
    for run in ("A", "C"):
        log.record_attempt(run, 9, 0, "succeeded", output=shared)
    holders = {run for run in ("A", "B", "C") if log_engine_of(log.store, run).loc(shared) is not None}
    assert holders == {"A", "C"}
    assert {f.split(os.sep)[1] for f in found(os.path.join(root, "runs"), needle)} == {"A", "C"}
    D.redact(log, shared, reason="leak")
    assert log_engine_of(log.store, None).tables.refs.get(f"redacted/{shared.hex()}") is not None  # the store log's
    G.gc(Store.open(root))
    assert found(root, needle) == []
    s = Store.open(root)
    assert all(log_engine_of(s, run).loc(shared).comp == COMP_GONE for run in ("A", "C"))
