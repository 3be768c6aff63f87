"""Seed T1.7, episode query surface: state ≡ cold re-fold, failures included, no blob reads."""

import json
import os
import re

import pytest
from helpers import FileReadSpy, is_per_run, run_cli, state_db_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.runs.query import episode
from objstore.storage import codec

ATTEMPT_FIELDS = ["attempt", "context", "output", "prompt", "state", "step", "tools", "usage", "workflow_version"]


class BlobReadCounter:
    """Instrument BlobStore::get — the API call, and every read of a segment file that touches a
    block holding blob bodies (the lowest layer: os.pread/os.read of the log's files)."""

    def __init__(self, log):
        self.log = log
        self.api_calls = 0
        self.blob_ids = set()  # kept for callers; the file-level check covers every blob
        self._get_blob = log.store.get_blob

    @property
    def blob_reads(self):
        return len(self.spy.blob_reads())

    def __enter__(self):
        def get_blob(oid):
            self.api_calls += 1
            return self._get_blob(oid)

        self.log.store.get_blob = get_blob
        self.spy = FileReadSpy(self.log.store).__enter__()
        return self

    def __exit__(self, *exc):
        self.spy.__exit__(*exc)
        self.log.store.get_blob = self._get_blob


@pytest.fixture
def episode_run(tmp_path):
    """3 steps, step 2 failing twice then succeeding, then a rewind at step 2 and a second path."""
    log = RunLog(Store.init(str(tmp_path / "s")))
    run = log.start_run("t17", subject="grader", workflow_version="wf-7")
    blobs = []

    def attempt(step, n, state, text):
        p, o = log.put_blob(f"prompt {text}".encode()), log.put_blob(f"output {text}".encode())
        blobs.extend([p, o])
        return log.record_attempt(run, step=step, attempt=n, state=state, prompt=p, output=o,
                                  context={"ids": [step, n]}, tools={"calls": ["search"]}, usage={"tokens": 10 * step + n})

    attempt(1, 0, "succeeded", "s1")              # lsn 1
    attempt(2, 0, "failed", "s2 try 0")           # lsn 2
    attempt(2, 1, "failed", "s2 try 1")           # lsn 3
    r = attempt(2, 2, "succeeded", "s2 try 2")    # lsn 4
    attempt(3, 0, "succeeded", "s3")              # lsn 5
    log.rewind(run, r.lsn - 3, reason="rewind at step 2")  # fork at lsn 1: before step 2
    attempt(2, 0, "succeeded", "s2 other path")   # branch 1 lsn 0
    attempt(3, 0, "failed", "s3 other path")      # branch 1 lsn 1
    attempt(3, 1, "succeeded", "s3 other path 2")  # branch 1 lsn 2
    return log, run, blobs


def test_episode_equivalence_state_vs_cold_refold(episode_run):
    log, run, blobs = episode_run
    with BlobReadCounter(log) as counter:
        counter.blob_ids = set(blobs)
        view_a = episode(log, run, all_branches=True, source="state")
        bytes_a = view_a.to_json()
        # Drop the state tables; the query is then served by a cold re-fold.
        log.state.drop()
        assert log.state.cached(run) == {}
        view_b = episode(log, run, all_branches=True, source="refold")
        bytes_b = view_b.to_json()
        assert log.state.cached(run) == {}, "the cold path never touches the cache"
        live_a = episode(log, run, source="state").to_json()
        live_b = episode(log, run, source="refold").to_json()
    assert bytes_a == bytes_b
    assert live_a == live_b
    assert counter.api_calls == 0 and counter.blob_reads == 0, "the query itself reads no blob"

    doc = json.loads(bytes_a)
    b0, b1 = doc["branches"]
    # Count every attempt, failures included — not just "non-empty".
    assert [(a["step"], a["attempt"], a["state"]) for a in b0["attempts"]] == [
        (1, 0, "succeeded"), (2, 0, "failed"), (2, 1, "failed"), (2, 2, "succeeded"), (3, 0, "succeeded")]
    assert [(a["step"], a["attempt"], a["state"]) for a in b1["attempts"]] == [
        (2, 0, "succeeded"), (3, 0, "failed"), (3, 1, "succeeded")]
    assert sum(a["state"] == "failed" for a in b0["attempts"]) == 2
    assert (b0["failed_attempts"], b1["failed_attempts"]) == (2, 1)
    # Fork point read from the fork object.
    assert (b1["parent_branch"], b1["parent_lsn"]) == (0, 1) and b1["fork"] is not None
    # AttemptView has exactly the seed's fields; blob refs are ids, never bodies.
    for a in b0["attempts"] + b1["attempts"]:
        assert sorted(a) == ATTEMPT_FIELDS
        assert bytes.fromhex(a["prompt"]) in blobs and bytes.fromhex(a["output"]) in blobs
        assert a["workflow_version"] == "wf-7"
    assert b"prompt s2" not in bytes_a and b"output s3" not in bytes_a


def test_live_by_default_all_branches_explicit(episode_run):
    log, run, _ = episode_run
    live = episode(log, run)
    assert [b.branch for b in live.branches] == [1] and live.live_branch == 1 and not live.all_branches
    both = episode(log, run, all_branches=True)
    assert [b.branch for b in both.branches] == [0, 1]
    assert len(live.attempts()) == 3 and len(both.attempts()) == 8


def test_canonical_serialization_is_stable(episode_run):
    log, run, _ = episode_run
    a = episode(log, run, all_branches=True).to_json()
    b = episode(log, run, all_branches=True).to_json()
    assert a == b
    assert a == codec.canonical_json(json.loads(a)), "sorted keys, compact: re-encoding changes nothing"


def test_state_answer_after_new_records_matches_refold(episode_run):
    log, run, _ = episode_run
    episode(log, run, all_branches=True)  # cache now current
    log.record_attempt(run, step=4, attempt=0, state="failed")
    assert episode(log, run, all_branches=True).to_json() == episode(log, run, all_branches=True, source="refold").to_json()


def test_cli_episode_json_and_table(episode_run):
    log, run, _ = episode_run
    root = log.store.root
    rc, out, err = run_cli("episode", run, "--all-branches", "--json", store=root, exit_code=0)
    assert rc == 0, err
    assert out.strip().encode() == episode(log, run, all_branches=True, source="refold").to_json()
    rc, out, err = run_cli("episode", run, store=root, exit_code=0)
    assert rc == 0 and "failed" in out and "branch 1 (live)" in out


def test_get_blob_by_ref_is_the_callers_choice(episode_run):
    log, run, _ = episode_run
    a = episode(log, run).attempts()[0]
    assert log.get_blob(bytes.fromhex(a["prompt"])) == b"prompt s2 other path"


ops = st.lists(
    st.one_of(
        st.tuples(st.just("attempt"), st.integers(0, 3), st.sampled_from(["succeeded", "failed", "running"])),
        st.tuples(st.just("rewind"), st.integers(0, 12), st.none()),
        st.tuples(st.just("live"), st.integers(0, 5), st.none()),
        st.tuples(st.just("query"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_property_state_view_equals_refold_view(tmp_path_factory, seq):
    log = RunLog(Store.init(str(tmp_path_factory.mktemp("q") / "s"), fsync="off"))
    run = log.start_run("q", workflow_version="w")
    tries = {}
    for op, a, b in seq:
        view = log.view(run)
        if op == "attempt":
            n = tries.get((view.live, a), 0)
            tries[(view.live, a)] = n + 1
            log.record_attempt(run, step=a, attempt=n, state=b, prompt=log.put_blob(b"p%d" % a),
                               usage={"t": n}, workflow_version="w2" if n % 2 else None)
        elif op == "rewind":
            tip = len(log.own_records(view, view.live)) - 1
            if tip >= 0:
                log.rewind(run, a % (tip + 1))
        elif op == "live":
            log.set_live(run, a % len(view.heads))
        else:
            episode(log, run, all_branches=True)  # advance the cache part-way
    for all_b in (False, True):
        s = episode(log, run, all_branches=all_b, source="state").to_json()
        r = episode(log, run, all_branches=all_b, source="refold").to_json()
        assert s == r
    total = sum(1 for _ in log.records(run, all_branches=True) if _.kind == "attempt")
    assert len(episode(log, run, all_branches=True).attempts()) == total


def test_unreadable_state_cache_is_set_aside_and_rebuilt(episode_run):
    log, run, _ = episode_run
    want = episode(log, run, all_branches=True, source="refold").to_json()
    root = log.store.root
    log.state.close()
    db = state_db_path(root, run)
    with open(db, "wb") as f:
        f.write(b"this is not a database" * 100)
    for extra in ("-wal", "-shm"):
        if os.path.exists(db + extra):
            os.unlink(db + extra)
    fresh = RunLog(Store.open(root))
    assert episode(fresh, run, all_branches=True).to_json() == want
    assert len([n for n in os.listdir(os.path.dirname(db)) if re.fullmatch(r"state\.db\.corrupt-\d+", n)]) == 1  # set aside, once
    rc, out, err = run_cli("verify", store=root, exit_code=0)
    counts = "10 entries in 2 logs" if is_per_run(root) else "26 entries"  # a log per run: the store log and the run's
    assert (out, err) == ("", f"verify: ok ({counts}, 26 objects)\n")  # the logs are whole; the cache is not verify's problem
