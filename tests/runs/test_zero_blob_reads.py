"""Invariant 10 at the file layer: log, episode (state and re-fold), diff and fork read no byte of a
block holding blob bodies, on a batched store where records and their blobs were committed together.

Instrumented at the lowest layer — every os.pread / os.read of a segment file (FileReadSpy) — so no
path can bypass it; the blob block ranges come from re-reading the entries' metadata.
"""

import itertools

from helpers import FileReadSpy

from objstore import RunLog, Store
from objstore.runs import history
from objstore.runs.query import diff, episode


def build(root):
    log = RunLog(Store.init(root, fsync="off"))
    run = log.start_run("blobs")
    with log.store.batch():
        for i in range(1, 300):
            p = log.put_blob(b"prompt %d " % i * 100)
            o = log.put_blob(b"output %d " % i * 150)
            log.record_attempt(run, step=i, attempt=0, state="failed" if i % 5 == 0 else "succeeded", prompt=p, output=o)
    log.rewind(run, 100, reason="try again")
    with log.store.batch():
        for i in range(101, 200):
            log.record_attempt(run, step=i, attempt=1, state="succeeded", prompt=log.put_blob(b"second path %d" % i * 80))
    return run


def test_no_blob_block_is_read(tmp_path):
    root = str(tmp_path / "s")
    run = build(root)
    log = RunLog(Store.open(root))
    spy = FileReadSpy(log.store)
    assert spy.blob_ranges, "the store has blob blocks"
    with spy:
        view = log.view(run)
        assert len(list(itertools.islice(history.entries(log, view), 10))) == 10
        list(history.entries(log, view, all_branches=True))
        episode(log, run, all_branches=True, source="refold")
        episode(log, run, all_branches=True, source="state")
        episode(log, run, all_branches=True, source="state")  # from the cache, caught up
        d = diff(log, run, 0, 1)
        log.fork(run, 0, 150, reason="another", make_live=False)
        log.rewind(run, 10)
    assert len(d["only_a"]) > 0
    assert spy.reads, "the spy saw the reads"
    assert spy.blob_reads() == []
    # and the spy can see a blob read when there is one
    with spy:
        log.get_blob(log.own_records(log.view(run), 0)[5].body["prompt"])
    assert spy.blob_reads()
