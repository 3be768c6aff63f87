"""Counted, not timed: fork, rewind, `log -n 10` and episode cost the same whatever the store holds.

What is counted is the lowest layer: log entries decoded (every path that parses an entry goes
through storage.log.parse.parse_entry / _parse_split), blocks read from segment files, and preads issued
(FileReadSpy). Each store is opened fresh, after its builder's last checkpoint, and the counts
are taken around the operation alone; opening itself is counted separately and bounded.
"""

import contextlib
import itertools

import pytest
from helpers import FileReadSpy, log_engine_of

from objstore import RunLog, Store
from objstore.runs import history
from objstore.runs.query import episode
from objstore.runs.verify import verify
from objstore.storage.log.format import STATS


def count(fn):
    """(entries decoded, blocks read, preads) while fn runs."""
    e0, b0 = STATS["entries_decoded"], STATS["blocks_read"]
    with FileReadSpy.__new__(FileReadSpy) as spy:
        spy.reads = []
        fn()
    return STATS["entries_decoded"] - e0, STATS["blocks_read"] - b0, len(spy.reads)


FileReadSpy.__enter__  # noqa: B018 - used bare above: no blob ranges needed, only the read count


def build_branch(root, n, intents_at=()):
    log = RunLog(Store.init(root, fsync="off"))
    run = log.start_run("long")
    with log.store.batch():
        for i in range(1, n + 1):
            if i in intents_at:
                log.record_intent(run, f"pay-{i}", step=i, effect="charge_card", idempotent=False)
                log.commit_intent(run, f"pay-{i}")
            else:
                log.record_attempt(run, step=i, attempt=0, state="succeeded", usage={"tokens": i})
    log_engine_of(log.store, run)._checkpoint()
    return run


@pytest.mark.slow
def test_fork_at_head_minus_3_costs_the_same_on_100_and_100000_records(tmp_path):
    got = {}
    for n in (100, 100_000):
        root = str(tmp_path / f"s{n}")
        run = build_branch(root, n)
        log = RunLog(Store.open(root))
        view = log.view(run)
        head_lsn = log.own_records(view, 0)[-1].lsn if n == 100 else n
        log = RunLog(Store.open(root))  # fresh: nothing cached from the walk above
        got[n] = count(lambda log=log, run=run, head_lsn=head_lsn: log.fork(run, 0, head_lsn - 3, reason="back 3")), log_engine_of(log.store, run)._seg - 1
        if n == 100_000:  # and the sealed segments' indexes are exactly what verify rebuilds
            assert verify(RunLog(Store.open(root)), check_state=False) == []
    (small, _), (big, sealed) = got[100], got[100_000]
    assert small[:2] == big[:2], got  # entries decoded, blocks read
    # preads: the same, plus at most one per sealed segment (its index is mapped on first use)
    assert small[2] <= big[2] <= small[2] + sealed, got


@pytest.mark.slow
def test_rewind_to_lsn_3_of_a_long_branch_reads_the_intents_after_it_and_a_constant(tmp_path):
    root = str(tmp_path / "s")
    intents = (50, 40_000, 90_000)
    run = build_branch(root, 100_000, intents_at=intents)
    log = RunLog(Store.open(root))
    entries, blocks, preads = count(lambda: log.rewind(run, 3, reason="far back"))
    fr = log.view(run)
    assert fr.live == 1
    fk = log.fork_object(fr, 1)
    assert [c["intent"] for c in fk["compensation"]] == [f"pay-{i}" for i in intents]
    # a constant: the head record, the record at LSN 3 and the fork it writes; intents come from
    # the log's chain index, with no record read for them
    assert entries <= 2 and blocks <= 2 + len(intents) and preads <= 4 + len(intents), (entries, blocks, preads)


def build_runs(root, runs, per_run):
    log = RunLog(Store.init(root, fsync="off"))
    # One log: one batch for every run. Format 6: a batch writes one run's log (MultiLogBatch otherwise), so a batch per run.
    each = log.store.batch if log.store.logs.per_run else contextlib.nullcontext
    with contextlib.nullcontext() if log.store.logs.per_run else log.store.batch():
        for r in range(runs):
            with each():
                run = log.start_run(f"run{r:05d}")
                for i in range(per_run):
                    log.record_attempt(run, step=i, attempt=0, state="failed" if i % 4 == 0 else "succeeded")
    target = log.start_run("target")
    for i in range(30):
        log.record_attempt(target, step=i, attempt=0, state="succeeded")
    log.rewind(target, 20, reason="r")
    log.record_attempt(target, step=21, attempt=1, state="succeeded")
    log.store.engine._checkpoint()  # the store's one log; format 6: the store log, and the target's below
    log_engine_of(log.store, target)._checkpoint()
    return target


@pytest.mark.slow
def test_log_fork_and_episode_cost_the_same_in_10_and_10000_runs(tmp_path):
    got = {}
    for runs in (10, 10_000):
        root = str(tmp_path / f"s{runs}")
        target = build_runs(root, runs, 3)
        e0 = STATS["entries_decoded"]
        log = RunLog(Store.open(root))
        opened = STATS["entries_decoded"] - e0
        assert opened == 0, f"opening after a checkpoint replays nothing, replayed {opened}"
        view = log.view(target)
        got[runs] = (
            count(lambda log=log, view=view: list(itertools.islice(history.entries(log, view), 10))),
            count(lambda log=log, target=target: log.fork(target, 0, 5, make_live=False)),
            count(lambda log=log, target=target: episode(log, target, source="refold")),
        )
    assert got[10] == got[10_000], got
