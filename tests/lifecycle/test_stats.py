"""``objstore stats`` against what docs/CLI.md says its figures are (issue 17).

``deleted_records``: "records partial deletions cover in runs that remain". stats sums the rows of
every ``run/<R>/deletions`` chain, also of a run deleted whole afterwards (its deletions ref stays).
"""

from __future__ import annotations

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.lifecycle import stats as S


def test_deleted_records_counts_only_runs_that_remain(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("A")
    log.start_run("B")
    for i in range(4):
        log.record_attempt("A", i, 0, "succeeded")
        log.record_attempt("B", i, 0, "succeeded")
    D.delete_records(log, "A", [log.store.indexed_record("A", 0, 2)], reason="one attempt")
    D.delete_run(log, "A", reason="then the whole run")
    st = S.stats(Store.open(root))
    assert (st["runs"], st["deleted_runs"]) == (1, 1)
    assert st["deleted_records"] == 0  # 1: run A's partial deletion, though A does not remain
