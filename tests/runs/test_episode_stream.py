"""Streaming reads (issue 15): ``iter_episode_json`` gives the bytes of ``episode(...).to_json()``,
``iter_episode`` the same branches and attempts, ``episode --json`` streams those bytes, and the
state cache's chunked rows (``RCHUNK`` records a row) answer like a re-fold across chunk boundaries,
incremental refreshes and attempts numbered out of order. After ``rebuild`` the
cache's WAL is truncated and the cache is a fraction of the log."""

from __future__ import annotations

import os

import pytest
from helpers import run_cli, run_log_root, state_db_path

from objstore import RunLog, Store
from objstore.runs import refold as RF
from objstore.runs import state as S
from objstore.runs.query import episode, iter_episode, iter_episode_json


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so a small store crosses every chunk boundary (and re-folds spill)."""
    monkeypatch.setattr(S, "RCHUNK", 4)
    monkeypatch.setattr(RF, "_SPILL", 4)  # folds sort on disk past 4 views


def _all_forms(log, run):
    """Every answer form, state and refold, live and all branches; asserts they agree, returns one."""
    for allb in (False, True):
        want = episode(log, run, all_branches=allb, source="refold").to_json()
        assert episode(log, run, all_branches=allb).to_json() == want
        assert b"".join(iter_episode_json(log, run, all_branches=allb)) == want
        assert b"".join(iter_episode_json(log, run, all_branches=allb, source="refold")) == want
        ev = episode(log, run, all_branches=allb, source="refold")
        for b in ev.branches:  # the in-memory oracle, sorted in memory
            assert RF.refold_branch(log, log.view(run), b.branch)[2] == ev.attempts(b.branch)
        got = [(bv.branch, bv.status, bv.attempts_total, list(bv.attempts)) for bv in iter_episode(log, run, all_branches=allb)]
        assert got == [(b.branch, b.status, b.attempts_total, ev.attempts(b.branch)) for b in ev.branches]
    return want


def test_chunked_cache_answers_like_a_refold_through_every_change(tmp_path, small_chunks):
    log = RunLog(Store.open(str(tmp_path / "s"), create=True))
    run = log.start_run("r1", subject="s", workflow_version="w1")
    blob = log.put_blob(b"prompt")
    # attempts out of order within a step (9 before 2) and steps interleaved
    for step, attempt in [(2, 1), (1, 1), (1, 9), (3, 0), (1, 2), (2, 0), (1, 3), (2, 5), (1, 4), (3, 1), (1, 0)]:
        log.record_attempt(run, step=step, attempt=attempt, state="failed" if attempt % 2 else "succeeded", prompt=blob)
        _all_forms(log, run)  # an incremental refresh after each record: partial chunks are extended
    log.record_intent(run, "i", step=1, effect="e", idempotent=True)
    log.rewind(run, 5, reason="again")
    for i in range(7):
        log.record_attempt(run, step=i % 2, attempt=7 - i, state="succeeded")
    with log.store.batch():  # more than a row of records in one refresh
        for i in range(12):
            log.record_attempt(run, step=i % 3, attempt=100 + i, state="failed")
    _all_forms(log, run)
    rows = log.state.db_of(run).execute("SELECT COUNT(*), MAX(n) FROM recs WHERE run=?", (run,)).fetchone()
    assert rows[0] > 3 and rows[1] == 4  # records really are spread over chunks
    from objstore.runs.verify import verify

    assert verify(log) == []
    fresh = RunLog(Store.open(log.store.root))
    fresh.state.rebuild(fresh)
    assert _all_forms(fresh, run) == _all_forms(log, run)


def test_cli_episode_json_streams_the_api_bytes(tmp_path):
    path = str(tmp_path / "s")
    log = RunLog(Store.open(path, create=True))
    run = log.start_run("r1")
    for i in range(40):
        log.record_attempt(run, step=i % 5, attempt=i, state="failed" if i % 3 else "succeeded", usage={"t": i})
    log.rewind(run, 20)
    log.record_attempt(run, step=0, attempt=99, state="succeeded")
    for args in ([], ["--all-branches"]):
        want = episode(log, run, all_branches=bool(args), source="refold").to_json()
        for source in ("state", "refold"):
            out = run_cli("episode", run, *args, "--json", "--source", source, store=path, exit_code=0)[1]
            assert out.encode() == want + b"\n"


def test_the_json_stream_comes_in_pieces(tmp_path):
    """A long branch's attempts are yielded in bounded pieces, not one buffer of the whole answer."""
    log = RunLog(Store.open(str(tmp_path / "s"), create=True, fsync="off"))
    run = log.start_run("r1")
    with log.store.batch():
        for i in range(1500):
            log.record_attempt(run, step=i % 7, attempt=i, state="succeeded", context={"pad": "x" * 100})
    pieces = list(iter_episode_json(log, run))
    assert b"".join(pieces) == episode(log, run, source="refold").to_json()
    total = sum(map(len, pieces))
    assert total > 4 * (1 << 16)
    assert max(map(len, pieces)) < (1 << 16) + 1000  # one piece: 64 KiB of views and the one that crossed it


def test_rebuild_truncates_the_wal_and_the_cache_is_a_fraction_of_the_log(tmp_path):
    path = str(tmp_path / "s")
    log = RunLog(Store.open(path, create=True, fsync="off"))
    run = log.start_run("r1")
    p = log.put_blob(b"p" * 64)
    with log.store.batch():
        for k in range(3000):
            out = log.put_blob(b"o%d" % k) if k % 3 == 0 else None
            log.record_attempt(run, step=k % 50, attempt=k // 50, state="failed" if k % 7 == 0 else "succeeded",
                               prompt=p, output=out, usage={"in": k % 1000, "out": 17})
    log.rewind(run, 1500)
    with log.store.batch():
        for k in range(1500):
            log.record_attempt(run, step=k % 50, attempt=1000 + k, state="succeeded", prompt=p)
    episode(log, run, all_branches=True)  # the cache, built by a query: its WAL may be large
    run_cli("rebuild", store=path, exit_code=0)
    wal = state_db_path(path, run) + "-wal"
    assert not os.path.exists(wal) or os.path.getsize(wal) == 0
    logdir = os.path.join(run_log_root(path, run), "log")
    seg = sum(os.path.getsize(os.path.join(logdir, f)) for f in os.listdir(logdir) if f.endswith(".seg"))
    assert os.path.getsize(state_db_path(path, run)) <= 0.5 * seg
    assert run_cli("verify", store=path, exit_code=0)


def test_an_abandoned_stream_ends_its_snapshot(tmp_path):
    """Views read in the snapshot that confirmed them: a stream dropped early (never started, half
    read, or skipped for the next branch) ends that read transaction, so the cache can move on."""
    log = RunLog(Store.open(str(tmp_path / "s"), create=True))
    run = log.start_run("r1")
    for i in range(5):
        log.record_attempt(run, step=1, attempt=i, state="failed")
    log.rewind(run, 2)
    log.record_attempt(run, step=1, attempt=9, state="succeeded")
    summary, views = log.state.open_branch(log, log.view(run), 0)
    views.close()  # never started
    log.state.db_of(run).execute("BEGIN IMMEDIATE")  # would fail inside an open read transaction
    log.state.db_of(run).execute("COMMIT")
    it = iter_episode(log, run, all_branches=True)
    first = next(it)
    next(first.attempts)  # half read
    second = next(it)  # the first branch's stream is closed for us
    assert second.branch == 1
    it.close()
    log.record_attempt(run, step=2, attempt=0, state="succeeded")
    assert _all_forms(log, run)
