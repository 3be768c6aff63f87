"""A deleted run's fork object goes at gc however its branch's ref moved (issue 13, item 11).

gc finds the fork object of a deleted run's branch from the chain: the parent of the branch's LSN-0
record. verify used to accept that removal only when a ref of the run had once named the fork object
(the entry of a plain ``fork`` moves the branch ref to it). A re-chained copy (``clone``, ``push``)
lands a run in one entry whose branch refs move straight to their newest records, and so does a fork
made in one batch with its first records: after ``delete`` and ``gc`` verify reported the branch's
LSN 0 off its fork object, an LSN gap for every record after it, and the fork's body missing, while
the same steps on a store whose fork had its own entry verified clean. verify now places the fork
object as gc does. Real ``objstore`` processes throughout."""

from helpers import run_cli

from objstore.runs.api import RunLog
from objstore.storage.store import Store


def _forked_run(log, *, one_batch=False):
    """A run of five records, forked at LSN 2 with two records on the new branch; its fork object's id."""
    run = log.start_run("forked")
    for i in range(5):
        log.record_attempt(run, i, 0, "succeeded", output=log.put_blob(f"out {i}".encode()))
    if one_batch:
        with log.store.batch():
            fork = log.fork(run, 0, 2, reason="retry from step 2")
            log.record_attempt(run, 9, 0, "succeeded", output=log.put_blob(b"on the fork"))
            log.record_attempt(run, 10, 0, "succeeded")
    else:
        fork = log.fork(run, 0, 2, reason="retry from step 2")
        log.record_attempt(run, 9, 0, "succeeded", output=log.put_blob(b"on the fork"))
        log.record_attempt(run, 10, 0, "succeeded")
    keep = log.start_run("kept")
    log.record_attempt(keep, 0, 0, "succeeded", output=log.put_blob(b"a live run's blob"))
    return run, fork.fork_id


def _delete_gc_verify(store, run, fork_id):
    run_cli("delete", run, "--reason", "gone", store=store, exit_code=0)
    run_cli("gc", store=store, exit_code=0)
    run_cli("verify", store=store, exit_code=0)
    _, _, err = run_cli("cat", fork_id.hex(), store=store, exit_code=12)  # its body went (withheld at once, removed by gc)
    assert "Traceback" not in err


def test_a_clone_of_a_forked_run_deleted_and_collected_verifies_clean(tmp_path):
    src, copy = str(tmp_path / "src"), str(tmp_path / "copy")
    run, fork_id = _forked_run(RunLog(Store.init(src)))
    run_cli("clone", src, copy, exit_code=0)
    _delete_gc_verify(copy, run, fork_id)
    _delete_gc_verify(src, run, fork_id)


def test_a_fork_made_in_one_batch_with_its_records_deleted_and_collected_verifies_clean(tmp_path):
    root = str(tmp_path / "s")
    run, fork_id = _forked_run(RunLog(Store.init(root)), one_batch=True)
    _delete_gc_verify(root, run, fork_id)


def test_a_push_to_s3_of_a_forked_run_deleted_and_collected_verifies_clean(tmp_path, s3_url):
    src = str(tmp_path / "src")
    run, fork_id = _forked_run(RunLog(Store.init(src)))
    run_cli("push", s3_url, store=src, exit_code=0)
    _delete_gc_verify(s3_url, run, fork_id)
