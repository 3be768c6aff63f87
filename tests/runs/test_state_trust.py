"""The state cache decides nothing (issue 15, invariant 15): rows of ``state.db`` edited with sqlite3,
as an attacker would, in a real store on disk, change no answer of ``episode`` — text and --json, CLI
and API, streamed or not — and ``verify`` names them with one exact ``state-diverged`` line (exit 1).

Each damage leaves the rows decodable (the types this code writes), so only the confirmation against
the log (``StateCache.confirm``: tip, fork object; then each cached record's bytes re-hashed against
the id the log's chain index holds at its LSN) can tell; a cache that trusted its rows would serve
the damage.
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from helpers import run_cli, state_db_path

from objstore import RunLog, Store
from objstore.runs.query import episode, iter_episode, iter_episode_json
from objstore.runs.verify import verify


def _store(tmp_path):
    """Run r1: failed attempts and a committed non-idempotent intent on branch 0, a rewind past it
    (branch 1, COMPENSATION REQUIRED, live) and a fork of branch 1 (branch 2, no flag)."""
    path = str(tmp_path / "s")
    log = RunLog(Store.open(path, create=True))
    run = log.start_run("r1", subject="alice")
    log.record_attempt(run, step=1, attempt=1, state="failed", error="boom")  # LSN 1
    log.record_attempt(run, step=1, attempt=2, state="failed", error="boom")  # LSN 2
    log.record_intent(run, "pay", step=1, effect="charge card", idempotent=False)  # LSN 3
    log.commit_intent(run, "pay")  # LSN 4
    log.record_attempt(run, step=1, attempt=3, state="succeeded")  # LSN 5
    log.record_attempt(run, step=2, attempt=1, state="failed", error="late")  # LSN 6
    fr = log.rewind(run, 2, reason="retry")
    assert fr.compensation_required
    log.record_attempt(run, step=1, attempt=9, state="succeeded")
    log.fork(run, 1, 0, reason="side", make_live=False)
    log.record_attempt(run, step=1, attempt=5, state="failed", branch=2, allow_retained=True, error="x")
    return path, run


def _api(path, run):
    """Every API form of the answer, each from a fresh process's view of the store."""
    out = {}
    for allb in (False, True):
        for source in ("state", "refold"):
            log = RunLog(Store.open(path))
            out[f"episode {allb} {source}"] = episode(log, run, all_branches=allb, source=source).to_json()
            out[f"stream {allb} {source}"] = b"".join(iter_episode_json(RunLog(Store.open(path)), run, all_branches=allb, source=source))
        ev = episode(RunLog(Store.open(path)), run, all_branches=allb, source="refold")
        got = [(bv.branch, bv.compensation_required, bv.failed_attempts, list(bv.attempts))
               for bv in iter_episode(RunLog(Store.open(path)), run, all_branches=allb)]
        assert got == [(bv.branch, bv.compensation_required, bv.failed_attempts, ev.attempts(bv.branch)) for bv in ev.branches]
        out[f"iter {allb}"] = repr(got).encode()
    return out


def _cli(path, run):
    out = {}
    for args in (["--all-branches"], ["--all-branches", "--json"], ["--json"], ["--all-branches", "--json", "--source", "refold"]):
        out[" ".join(args)] = run_cli("episode", run, *args, store=path, exit_code=0)[1]
    return out


def _answers(path, run):
    return _api(path, run), _cli(path, run)


def _edit(path, sql, params=()):
    """Run the damage (to run r1's rows): SQL with its parameters, or a callable given the open database."""
    db = sqlite3.connect(state_db_path(path, "r1"))
    if callable(sql):
        sql(db, *params)
    else:
        db.execute(sql, params)
    db.commit()
    assert db.total_changes > 0, f"the damage {sql!r} changed nothing"
    db.close()


def _records_edit(fn):
    """A damage to the canonical record bytes branch 0's record rows hold (decompressed, edited by
    ``fn(list of (LSN, canonical bytes))``, compressed again, as an attacker with sqlite3 would)."""
    import msgspec
    import zstandard

    from objstore.storage import codec

    def edit(db):
        zd, zc = zstandard.ZstdDecompressor(), zstandard.ZstdCompressor(level=3)
        for first, data in db.execute("SELECT lsn, data FROM recs WHERE run='r1' AND branch=0").fetchall():
            objs = [(codec.decode(o)[1]["lsn"], o) for o in msgspec.msgpack.decode(zd.decompress(data, max_output_size=1 << 28))]
            db.execute("UPDATE recs SET data=? WHERE run='r1' AND branch=0 AND lsn=?",
                       (zc.compress(msgspec.msgpack.encode([o for _, o in fn(objs)])), first))
    return edit


def _recoded(lsn, change):
    """``fn`` for ``_records_edit``: the record at ``lsn`` with ``change(payload)`` applied, encoded canonically."""
    from objstore.storage import codec

    def fn(objs):
        out = []
        for at, o in objs:
            if at == lsn:
                p = codec.decode(o)[1]
                change(p)
                o = codec.encode("record", p)
            out.append((at, o))
        return out
    return fn


def _without_step_1(objs):
    from objstore.storage import codec

    return [(at, o) for at, o in objs if not (codec.decode(o)[1]["kind"] == "attempt" and codec.decode(o)[1]["body"]["step"] == 1)]


def _ids(path, run):
    log = RunLog(Store.open(path))
    view = log.view(run)
    return {"fork1": log.fork_object(view, 1)["id"], "fork2": log.fork_object(view, 2)["id"],
            "lsn1": log.record_at(view, 0, 1), "lsn2": log.record_at(view, 0, 2), "tip0": len(log.own_records(view, 0)) - 1}


# damage -> (SQL, its parameters from the store's ids, the detail of the verify line)
DAMAGE = {
    # (1) the compensation flag: branch 1's row names branch 2's fork object (a real one, with no flag)
    "fork row swapped": ("UPDATE branch SET fork=? WHERE run='r1' AND branch=1", lambda i: (i["fork2"],),
                         lambda i: f"cached fork object {i['fork2'].hex()}, the branch's fork object is {i['fork1'].hex()}", 1),
    "fork row cleared": ("UPDATE branch SET fork=NULL WHERE run='r1' AND branch=1", lambda i: (),
                         lambda i: f"cached fork object (none), the branch's fork object is {i['fork1'].hex()}", 1),
    # (2) deleted attempt rows: the failed attempts of step 1, and a whole step
    "attempt rows deleted": (_records_edit(_without_step_1), lambda i: (),
                             lambda i: f"cached record at LSN 1 is not the log's record {i['lsn1'].hex()} there", 0),
    "record rows deleted": ("DELETE FROM recs WHERE run='r1' AND branch=0", lambda i: (),
                            lambda i: f"cached record rows cover 0 LSNs, the branch has {i['tip0'] + 1}", 0),
    "tip moved back": ("UPDATE branch SET tip_lsn=tip_lsn-1 WHERE run='r1' AND branch=0", lambda i: (),
                       lambda i: f"cached tip LSN {i['tip0'] - 1}, the branch head is at LSN {i['tip0']}", 0),
    # (3) a row whose record id is not the log's record at that LSN
    "record id replaced": (_records_edit(_recoded(2, lambda p: p["body"].update(error="forged"))),
                           lambda i: (), lambda i: f"cached record at LSN 2 is not the log's record {i['lsn2'].hex()} there", 0),
    "attempt marked as another kind": (_records_edit(_recoded(1, lambda p: p.update(kind="turn", body={}))), lambda i: (),
                                       lambda i: f"cached record at LSN 1 is not the log's record {i['lsn1'].hex()} there", 0),
}


def _misses(path, run):
    """The branches an all-branches ``episode`` from the state cache had to re-fold."""
    from objstore.runs import query

    refolded = []
    real = query.refold_stream

    def spy(chains, view, b):
        refolded.append(b)
        return real(chains, view, b)

    query.refold_stream = spy
    try:
        episode(RunLog(Store.open(path)), run, all_branches=True)
    finally:
        query.refold_stream = real
    return refolded


# the three, checked through the command line as well; the others through the library
THROUGH_CLI = ("fork row swapped", "attempt rows deleted", "record id replaced")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One store, its cache filled, and every answer before any damage (each test damages a copy)."""
    path, run = _store(tmp_path_factory.mktemp("template"))
    before_api, before_cli = _answers(path, run)
    assert before_api["episode True state"] == before_api["episode True refold"]
    assert "COMPENSATION REQUIRED" in before_cli["--all-branches"]
    return path, run, before_api, before_cli


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_edited_state_rows_change_no_answer_and_verify_names_them(tmp_path, template, damage):
    sql, params, detail, branch = DAMAGE[damage]
    src, run, before_api, before_cli = template
    path = str(tmp_path / "s")
    shutil.copytree(src, path)
    ids = _ids(path, run)
    _edit(path, sql, params(ids))
    db = state_db_path(path, run)
    line = f"state-diverged {run}/{branch}: cached rows disagree with the log: {detail(ids)} [{db}]"
    cli = damage in THROUGH_CLI

    def verify_lines():
        if cli:
            return run_cli("verify", store=path, exit_code=1)[1].splitlines()
        return [p.line() for p in verify(RunLog(Store.open(path)))]

    # verify names it, before and after the reads (a diverged cache is left as it is, for verify)
    assert verify_lines() == [line]
    assert _misses(path, run) == [branch]  # a cache miss: that branch, and only it, is re-folded
    assert _api(path, run) == before_api
    if cli:
        after_cli = _cli(path, run)
        assert after_cli == before_cli
        assert after_cli["--all-branches --json"] == after_cli["--all-branches --json --source refold"]
        assert "COMPENSATION REQUIRED" in after_cli["--all-branches"]
    assert verify_lines() == [line]
    if cli:
        run_cli("rebuild", store=path, exit_code=0)
        run_cli("verify", store=path, exit_code=0)
    else:
        log = RunLog(Store.open(path))
        log.state.rebuild(log)
        assert verify(log) == []
    assert _api(path, run) == before_api


def test_a_diverged_branch_is_refolded_and_the_others_still_come_from_the_cache(tmp_path):
    """A miss is per branch: branch 0's damage re-folds branch 0 only; an undamaged cache re-folds nothing."""
    path, run = _store(tmp_path)
    want = episode(RunLog(Store.open(path)), run, all_branches=True, source="refold").to_json()
    assert episode(RunLog(Store.open(path)), run, all_branches=True).to_json() == want  # fills the cache
    assert _misses(path, run) == []
    _edit(path, _records_edit(_without_step_1))
    assert _misses(path, run) == [0]
    assert episode(RunLog(Store.open(path)), run, all_branches=True).to_json() == want


def test_compensation_comes_from_the_fork_object_even_unconfirmed(tmp_path, monkeypatch):
    """Fork point and compensation are never read from the cache: with the confirmation switched
    off, a swapped fork column is served for everything else, but not for the fork."""
    from objstore.runs.state import StateCache

    path, run = _store(tmp_path)
    want = episode(RunLog(Store.open(path)), run, all_branches=True, source="refold")
    assert episode(RunLog(Store.open(path)), run, all_branches=True).to_json() == want.to_json()  # fills the cache
    ids = _ids(path, run)
    _edit(path, "UPDATE branch SET fork=? WHERE run='r1' AND branch=1", (ids["fork2"],))
    monkeypatch.setattr(StateCache, "confirm", lambda *a: None)
    got = episode(RunLog(Store.open(path)), run, all_branches=True)
    assert [(b.fork, b.parent_branch, b.parent_lsn, b.compensation_required, b.compensation) for b in got.branches] == \
        [(b.fork, b.parent_branch, b.parent_lsn, b.compensation_required, b.compensation) for b in want.branches]
    assert [b.compensation_required for b in got.branches] == [False, True, False]


def test_cached_state_and_summary_are_confirmed_too(tmp_path):
    """``StateCache.state``/``summary`` answer from the log when the branch's rows do not confirm."""
    import msgspec

    from objstore.runs.refold import refold_branch
    from objstore.runs.state import summary_of

    path, run = _store(tmp_path)
    log = RunLog(Store.open(path))
    view = log.view(run)
    cold = {b: refold_branch(log, view, b)[0] for b in view.heads}
    assert {b: log.state.state(log, view, b) for b in view.heads} == cold
    forged = dict(cold[0], attempts=cold[0]["attempts"] + 5)
    enc = msgspec.msgpack.Encoder(order="sorted").encode
    _edit(path, "UPDATE branch SET state=?, summary=?, tip_lsn=tip_lsn-1 WHERE run='r1' AND branch=0",
          (enc(forged), enc(summary_of(forged))))
    fresh = RunLog(Store.open(path))
    assert fresh.state.state(fresh, view, 0) == cold[0]
    assert fresh.state.summary(fresh, view, 0) == summary_of(cold[0])
