"""Seed T2.3, rewind as fork: the nine Verify steps, literally, and the traps.

Branch 0 is inspected through the raw object store (ids walked from the ref,
bytes read from the backend and from the files on disk), never through the
query surface, which defaults to the live branch and would hide damage.
"""



import pytest
from helpers import FileReadSpy, assert_prefix_kept, log_engine_of, raw_objects, run_log_root, snapshot_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import objstore
from objstore import RunLog, Store
from objstore.demo import StubModel, run_step, six_step_run
from objstore.errors import InvalidInput, Refused, RetainedBranch
from objstore.runs.export import build_entry, export
from objstore.runs.fold import fold
from objstore.runs.verify import assert_refold_identical, verify
from objstore.storage import codec
from objstore.storage.log.format import STATS


def raw_chain(store, run, head):
    """[(id, canonical bytes)] from head back to the root, read from the run's log directly."""
    out = []
    oid = head
    engine = log_engine_of(store, run)
    while oid is not None:
        data = engine.read(oid)
        out.append((oid, data))
        otype, value = codec.decode(data, oid)
        if otype == codec.FORK:
            break
        oid = value["parent"]
    return out


def all_records(store):
    """Every record object stored, by scanning the backend (not by walking chains)."""
    recs = []
    for oid, _otype, data in raw_objects(store):
        t, v = codec.decode(data, oid)
        if t == codec.RECORD:
            recs.append((oid, v))
    return recs


@pytest.fixture
def rewound(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    model = StubModel(failures={("A", 6, 0): "tool timeout"})
    run = log.start_run("t23", subject="grader", workflow_version="wf-1")
    # Step 1: six steps to a failure at step 6 (LSN 1..6), plus a committed non-idempotent intent later on.
    for step in range(1, 7):
        run_step(log, run, model, "A", step, f"task {step}", max_attempts=1)
    b0_head = log.view(run).heads[0]
    snapshot = raw_chain(log.store, run, b0_head)
    files_before = {k: v for k, v in snapshot_tree(run_log_root(root, run)).items() if k.startswith("log")}
    # Step 2: rewind to step 3 (LSN 3), run a different path on branch 1.
    fr = log.rewind(run, 3, reason="step 6 failed")
    for step in (4, 5):
        run_step(log, run, model, "B", step, f"other task {step}")
    return log, run, fr, b0_head, snapshot, files_before, root


def test_step3_branch0_byte_identical_raw(rewound):
    log, run, fr, b0_head, snapshot, files_before, root = rewound
    assert log.store.read_ref(f"run/{run}/branch/0") == b0_head, "branch 0 ref unchanged"
    assert raw_chain(log.store, run, b0_head) == snapshot, "every record of branch 0 byte-identical"
    assert [codec.decode(d, i)[1]["lsn"] for i, d in snapshot] == [6, 5, 4, 3, 2, 1, 0], "nothing truncated"
    assert_prefix_kept(files_before, snapshot_tree(run_log_root(root, run)))


def test_step4_lsns_from_zero_and_fork_point_is_data(rewound):
    log, run, fr, *_ = rewound
    head1 = log.store.read_ref(f"run/{run}/branch/1")
    chain = raw_chain(log.store, run, head1)
    fork_id, fork_raw = chain[-1]
    otype, fk = codec.decode(fork_raw, fork_id)
    assert otype == "fork"
    assert (fk["parent_branch"], fk["parent_lsn"]) == (0, 3)
    assert fk["branch"] == 1 and fk["run"] == run
    # parent_record is the record at LSN 3 of branch 0, as stored, not inferred.
    t, prec = codec.decode(log_engine_of(log.store, run).read(fk["parent_record"]), fk["parent_record"])
    assert (t, prec["branch"], prec["lsn"]) == ("record", 0, 3)
    lsns = [codec.decode(d, i)[1]["lsn"] for i, d in reversed(chain[:-1])]
    assert lsns == [0, 1], "branch 1 starts at LSN 0 and is contiguous"
    assert codec.decode(chain[-2][1], chain[-2][0])[1]["parent"] == fork_id
    assert fr.fork_id == fork_id and (fr.parent_branch, fr.parent_lsn) == (0, 3)


def test_step5_default_query_live_only_all_branches_both(rewound):
    log, run, *_ = rewound
    live = log.records(run)
    assert [(r.branch, r.lsn, r.body["step"]) for r in live] == [(1, 0, 4), (1, 1, 5)]
    both = log.records(run, all_branches=True)
    assert [(r.branch, r.lsn) for r in both] == [(0, i) for i in range(7)] + [(1, 0), (1, 1)]
    assert {r.body.get("context", {}).get("path") for r in live} == {"B"}


def test_step6_no_copies_exact_counts(rewound):
    log, run, *_ = rewound
    recs = all_records(log.store)
    per_branch = {}
    for _oid, v in recs:
        per_branch[v["branch"]] = per_branch.get(v["branch"], 0) + 1
    assert per_branch == {0: 7, 1: 2}, "branch 1 holds only its own two records"
    assert len(log.own_records(log.view(run), 1)) == 2
    # No record on branch 1 repeats a branch-0 body.
    b0 = [v["body"] for _, v in recs if v["branch"] == 0]
    assert not any(v["body"] in b0 for _, v in recs if v["branch"] == 1)


def test_step7_export_only_live_branch(rewound):
    log, run, fr, *_ = rewound
    entries = export(log, run)
    assert {e["branch"] for e in entries} == {1}
    assert [e["kind"] for e in entries] == ["fork", "attempt", "attempt"]
    assert entries[0]["id"] == fr.fork_id.hex()
    assert export(log, run) == entries, "entries are stable: the same ids every time"
    # The rule is enforced where the entry is built, not by a filter at the relay.
    view = log.view(run)
    b0_rec = log.own_records(view, 0)[2]
    with pytest.raises(Refused, match="only the live branch"):
        build_entry(view, b0_rec)


def test_step8_compensation_flag_and_rewind_proceeds(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    res = six_step_run(log, run="comp")
    fr = res["fork"]
    # Raw fork object carries the flag.
    t, fk = codec.decode(log_engine_of(log.store, "comp").read(fr.fork_id), fr.fork_id)
    assert t == "fork"
    assert [(c["intent"], c["effect"], c["committed_lsn"]) for c in fk["compensation"]] == [("refund-1234", "issue_refund", 5)]
    assert fr.compensation_required
    # The rewind still happened: branch 1 is live and continued.
    view = log.view("comp")
    assert view.live == 1 and len(log.own_records(view, 1)) == 4
    # Not past the commit, or an idempotent effect: no flag.
    fr2 = log.fork("comp", 0, 6, reason="after the commit", make_live=False)
    assert fr2.compensation == []
    run = log.start_run("idem")
    log.record_intent(run, "cache-put", step=1, effect="cache_write", idempotent=True)
    log.commit_intent(run, "cache-put")
    assert log.rewind(run, 0).compensation == []


def test_step9_refold_identical_both_branches(rewound):
    log, run, *_ = rewound
    assert_refold_identical(log, run)
    view = log.view(run)
    cached = log.state.cached(run)
    assert set(cached) == {0, 1}
    assert cached[0][0] == view.heads[0] and cached[1][0] == view.heads[1]
    # State of branch 1 = fold(branch 0 up to LSN 3) + branch 1's own records.
    b0 = log.own_records(view, 0)
    expect = fold([r for r in b0 if r.lsn <= 3] + log.own_records(view, 1))
    assert cached[1][2] == expect
    assert verify(log) == []


def test_retained_branch_append_refused_unless_explicit(rewound):
    log, run, *_ = rewound
    with pytest.raises(RetainedBranch):
        log.record_attempt(run, step=9, attempt=0, state="running", branch=0)
    rec = log.record_attempt(run, step=9, attempt=0, state="running", branch=0, allow_retained=True)
    assert (rec.branch, rec.lsn) == (0, 7)


def test_rewind_of_rewind_folds_across_two_fork_points(rewound):
    log, run, fr, *_ = rewound
    fr2 = log.rewind(run, 0, reason="again")  # branch 2 from branch 1 at LSN 0
    assert (fr2.branch, fr2.parent_branch, fr2.parent_lsn) == (2, 1, 0)
    log.record_attempt(run, step=5, attempt=0, state="succeeded")
    view = log.view(run)
    b0, b1, b2 = (log.own_records(view, b) for b in (0, 1, 2))
    expect = fold([r for r in b0 if r.lsn <= 3] + [r for r in b1 if r.lsn <= 0] + b2)
    assert log.refold(view, 2) == expect
    assert log.state.state(log, view, 2) == expect
    assert [r.id for r in log.lineage(view, 2)] == [r.id for r in b0[:4] + b1[:1] + b2]
    assert_refold_identical(log, run)
    assert verify(log) == []


def test_verify_catches_lying_fork_object(rewound):
    log, run, fr, *_ = rewound
    view = log.view(run)
    b0 = log.own_records(view, 0)
    # A fork that claims parent LSN 5 but names the record at LSN 3.
    lie = {"run": run, "branch": 3, "parent_branch": 0, "parent_lsn": 5, "parent_record": b0[3].id,
           "parent_head": view.heads[0], "reason": "forged", "compensation": [], "time": 0.0}
    with log.store.batch():  # format 3: a branch ref moves to a fork object of the same commit
        fid = log.store.put("fork", lie)
        log.store.set_ref(f"run/{run}/branch/3", None, fid, "forged")
    assert [p.line() for p in verify(log)] == [
        f"bad-fork {fid.hex()}: fork says parent branch 0 LSN 5, but its parent record is {run} branch 0 LSN 3 [run/{run}/branch/3]"
    ]


def test_verify_catches_fork_not_on_parent_head(rewound):
    log, run, fr, *_ = rewound
    view = log.view(run)
    b0, b1 = log.own_records(view, 0), log.own_records(view, 1)
    # Parent record really is branch 0 LSN 3, but the claimed parent head is on another branch.
    lie = {"run": run, "branch": 3, "parent_branch": 0, "parent_lsn": 3, "parent_record": b0[3].id,
           "parent_head": b1[-1].id, "reason": "forged", "compensation": [], "time": 0.0}
    with log.store.batch():  # format 3: a branch ref moves to a fork object of the same commit
        fid = log.store.put("fork", lie)
        log.store.set_ref(f"run/{run}/branch/3", None, fid, "forged")
    assert [p.line() for p in verify(log)] == [
        f"bad-fork {fid.hex()}: parent record (branch 0 LSN 3) is not an ancestor of the recorded parent head [run/{run}/branch/3]"
    ]


def test_verify_catches_lsn_gap_and_foreign_record(rewound):
    log, run, fr, *_ = rewound
    view = log.view(run)
    head = view.heads[1]
    gap = {"run": run, "branch": 1, "lsn": 5, "parent": head, "kind": "intent_committed", "time": 0.0, "body": {"intent": "x"}}
    before = log_engine_of(log.store, run).position()
    # Format 3: the rules of the log hold where an entry is applied, its writer first: a record
    # that does not extend its chain is refused and nothing is written.
    with pytest.raises(Refused, match="LSN 5 on branch 1"):
        with log.store.batch():
            gid = log.store.put("record", gap)
            log.store.set_ref(f"run/{run}/branch/1", head, gid, "forged gap")
    assert log_engine_of(log.store, run).position() == before
    assert verify(log) == []


def test_verify_catches_state_cache_that_lies(rewound):
    log, run, *_ = rewound
    view = log.view(run)
    log.state.refresh(log, view)
    import msgspec

    state = log.state.cached(run)[1][2]
    state["attempts"] += 1
    log.state.db_of(run).execute("UPDATE branch SET state=? WHERE run=? AND branch=1", (msgspec.msgpack.Encoder(order="sorted").encode(state), run))
    assert [p.line() for p in verify(log)] == [f"state-diverged {run}/1: cached folded state differs from the cold re-fold [{log.state.path_of(run)}]"]
    # A cache that is merely behind is a miss, not corruption.
    log.state.drop(run)
    log.state.refresh(log, view)
    log.record_attempt(run, step=7, attempt=0, state="succeeded")
    assert verify(log) == []


def test_fork_is_constant_work_in_branch_length(tmp_path):
    """Fork reads the log's chain index, never the parent chain: count file reads, entries and objects decoded."""
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    counts = {}
    for n in (10, 1000):
        run = log.start_run(f"len{n}")
        with log.store.batch():
            for i in range(n):
                log.record_attempt(run, step=i, attempt=0, state="succeeded")
        with FileReadSpy(log.store) as spy:
            before, dec0 = dict(STATS), codec.STATS["objects_decoded"]
            log.fork(run, 0, n // 2)
        counts[n] = (len(spy.reads), {k: STATS[k] - before[k] for k in before}, codec.STATS["objects_decoded"] - dec0)
    assert counts[10] == counts[1000], counts


# -- property: random runs with retries and forks ---------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("attempt"), st.integers(0, 4), st.sampled_from(["succeeded", "failed"])),
        st.tuples(st.just("intent"), st.integers(0, 4), st.booleans()),
        st.tuples(st.just("fork"), st.integers(0, 10), st.integers(0, 30)),
        st.tuples(st.just("live"), st.integers(0, 10), st.just(None)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_property_state_equals_refold_and_heads_stay_identical(tmp_path_factory, seq):
    log = RunLog(Store.init(str(tmp_path_factory.mktemp("p") / "s"), fsync="off"))
    run = log.start_run("p")
    seen_heads = {}  # every head id ever observed -> its raw chain bytes at the time
    attempts = {}
    n_int = 0
    for op, a, b in seq:
        view = log.view(run)
        if op == "attempt":
            k = attempts.get((view.live, a), 0)
            attempts[(view.live, a)] = k + 1
            log.record_attempt(run, step=a, attempt=k, state=b)
        elif op == "intent":
            n_int += 1
            log.record_intent(run, f"i{n_int}", step=a, effect="e", idempotent=b)
            log.commit_intent(run, f"i{n_int}")
        elif op == "fork":
            src = a % len(view.heads)
            tip = len(log.own_records(view, src)) - 1
            if tip >= 0:
                log.fork(run, src, b % (tip + 1), reason="prop")
        else:
            log.set_live(run, a % len(view.heads))
        view = log.view(run)
        for h in view.heads.values():
            seen_heads.setdefault(h, raw_chain(log.store, run, h))
        if len(seen_heads) % 5 == 0:
            assert_refold_identical(log, run)
    assert_refold_identical(log, run)
    for h, chain in seen_heads.items():
        assert raw_chain(log.store, run, h) == chain
    assert verify(log) == []


def test_start_interrupted_between_its_two_ref_writes_is_a_valid_run(tmp_path):
    """start_run writes branch 0, then the live ref: a crash between them must leave a store that
    verifies clean and a run that reads (branch 0 live) and cannot be started twice."""
    log = RunLog(Store.init(str(tmp_path / "s")))
    run = log.start_run("half")
    log.store.set_ref(f"run/{run}/live", f"ref: run/{run}/branch/0", None, "simulate a format-1 crash window")
    assert verify(log) == []
    assert log.runs() == ["half"] and log.view(run).live == 0
    log.record_attempt(run, step=1, attempt=0, state="succeeded")
    with pytest.raises(InvalidInput, match="run half already exists"):
        log.start_run("half")
    fr = log.rewind(run, 0)
    assert log.view(run).live == fr.branch == 1
    assert verify(log) == []


# Issue 16's library fixes, each pinned where a Python caller meets it.
def test_rewinding_a_branch_with_no_records_says_so(tmp_path):
    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("r1")
    log.record_attempt(run, step=1, attempt=0, state="succeeded")
    log.rewind(run, to_lsn=1)  # branch 1 is live and has no records of its own yet
    with pytest.raises(InvalidInput) as e:
        log.rewind(run, to_lsn=0)
    assert str(e.value) == "invalid input: branch 1 of run r1 has no records yet; there is nothing to fork at LSN 0"


def test_a_fresh_fork_inherits_the_attempts_before_its_fork_point(tmp_path):
    from objstore.runs.query import inherited_attempts

    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("r1")
    for step in range(5):
        log.record_attempt(run, step=step, attempt=0, state="failed" if step == 2 else "succeeded")
    log.rewind(run, to_lsn=3)  # keeps LSNs 0..3: run_started and the attempts of steps 0..2
    view = log.view(run)
    got = inherited_attempts(log, view, 1)
    assert [(b, lsn, a["step"], a["state"]) for b, lsn, a in got] == [(0, 1, 0, "succeeded"), (0, 2, 1, "succeeded"), (0, 3, 2, "failed")]
    assert inherited_attempts(log, view, 0) == []
    ep = objstore.episode(log, run, all_branches=True)
    assert ep.attempts(1) == [] and ep.branches[1].attempts_total == 3  # the episode JSON is unchanged (seed T1.7)
