"""One contract, every engine: the segment log (LogEngine), the in-memory engine and the S3 engine (over the
in-memory bucket, and over the session's real SeaweedFS) pass the same tests.

The contract: ``commit(objects, ref_moves, expectations) -> position`` is all or nothing and
compare-and-swap; ``snapshot()`` is a position; ``read_at(id, snapshot)`` re-checks hashes and
hides what came later; ``refs_at(prefix, snapshot)`` is the ref table at that position;
``anchor()`` is the head of the chain; the chain index answers LSN -> record id.
"""

import msgspec
import pytest

from objstore.errors import Conflict, IntegrityError, ObjectNotFound, Refused
from objstore.storage import codec
from objstore.storage.fileutil import FsyncPolicy
from objstore.storage.log.local import LogEngine
from objstore.storage.log.memory import MemoryEngine

_enc = msgspec.msgpack.Encoder(order="sorted")


@pytest.fixture(params=["log", "memory", "s3-fake", "s3"])
def eng(request, tmp_path):
    if request.param == "memory":
        return MemoryEngine()
    if request.param == "s3":  # the real SeaweedFS of the session (tests/conftest.py)
        from objstore.storage.s3.client import open_bucket
        from objstore.storage.s3.engine import S3Engine

        return S3Engine(open_bucket(request.getfixturevalue("s3_url")), str(tmp_path / "cache"))
    if request.param == "s3-fake":
        from objstore.storage.s3.bucket import MemoryBucket
        from objstore.storage.s3.engine import S3Engine

        return S3Engine(MemoryBucket(), str(tmp_path / "cache"))
    root = str(tmp_path / "s")
    import os

    os.makedirs(root)
    LogEngine.create(root, FsyncPolicy("off"))
    return LogEngine(root, FsyncPolicy("off"))


def obj(otype, value):
    data = codec.encode(otype, value)
    return codec.object_id(data), otype, data


def record(run, branch, lsn, parent, kind="attempt"):
    body = {"step": lsn, "attempt": 0, "state": "succeeded", "workflow_version": None, "context": None, "prompt": None,
            "output": None, "tools": None, "usage": None, "error": None}
    if kind == "run_started":
        body = {"subject": "s", "workflow_version": "1", "meta": None}
    return obj("record", {"run": run, "branch": branch, "lsn": lsn, "parent": parent, "kind": kind, "time": 1.0, "body": body})


def test_commit_is_all_or_nothing_and_cas(eng):
    blob = obj("blob", b"hello")
    p1 = eng.commit([blob], [("run/r/x", None, blob[0], "create")])
    assert p1.entry == 1 and eng.refs_at("run/") == {"run/r/x": blob[0]}
    before = eng.snapshot()
    other = obj("blob", b"other")
    with pytest.raises(Conflict):  # the second move's old value is wrong: nothing lands
        eng.commit([other], [("run/r/y", None, other[0], "ok"), ("run/r/x", None, other[0], "stale")])
    with pytest.raises(Conflict):  # a failed expectation writes nothing either
        eng.commit([other], [("run/r/y", None, other[0], "ok")], expectations=[("run/r/x", None)])
    assert eng.snapshot() == before
    assert not eng.has(other[0])
    assert eng.refs_at("") == {"run/r/x": blob[0]}


def test_reads_rehash_and_snapshots_hide_later_commits(eng):
    a = obj("blob", b"a" * 1000)
    s1 = eng.commit([a], [("run/r/a", None, a[0], "")])
    b = obj("blob", b"b" * 1000)
    eng.commit([b], [("run/r/a", a[0], b[0], "move")])
    assert eng.read_at(a[0], s1) == a[2]
    with pytest.raises(ObjectNotFound):
        eng.read_at(b[0], s1)
    assert eng.refs_at("run/r/", s1) == {"run/r/a": a[0]}
    assert eng.refs_at("run/r/") == {"run/r/a": b[0]}
    with pytest.raises(IntegrityError):
        eng.commit([(b"\x00" * 32, "blob", b"blob 1\x00x")])


def test_objects_are_written_once_and_the_chain_advances(eng):
    a = obj("blob", b"same")
    p1 = eng.commit([a])
    p2 = eng.commit([a])  # nothing new: no entry
    assert p1 == p2 == eng.anchor()
    p3 = eng.commit([], [("run/r/z", None, "ref: run/r/q", "symbolic")])
    assert p3.entry == p1.entry + 1 and p3.checksum != p1.checksum
    assert eng.refs_at("run/r/") == {"run/r/z": "ref: run/r/q"}


def test_chain_index(eng):
    r0 = record("r", 0, 0, None, "run_started")
    r1 = record("r", 0, 1, r0[0])
    r2 = record("r", 0, 2, r1[0])
    eng.commit([r0], [("run/r/branch/0", None, r0[0], "start")])
    eng.commit([r1, r2], [("run/r/branch/0", r0[0], r2[0], "append")])
    assert [eng.record_at("r", 0, i) for i in range(3)] == [r0[0], r1[0], r2[0]]
    assert eng.record_at("r", 0, 3) is None and eng.record_at("r", 1, 0) is None
    assert list(eng.iter_chain("r", 0, 1)) == [(1, r1[0]), (2, r2[0])]
    # A record that does not extend its chain breaks a rule of the log: the commit is refused and
    # nothing is written (format 3: the rules hold wherever an entry is applied, the writer first).
    before = eng.position()
    for stray, moves in ((record("r", 0, 7, r2[0]), [("run/r/branch/0", r2[0], None, "x")]),
                         (record("r", 0, 3, r1[0]), []),
                         (record("r", 0, 3, r2[0]), [])):
        if moves:
            moves = [("run/r/branch/0", r2[0], stray[0], "append")]
        with pytest.raises(Refused):
            eng.commit([stray], moves)
        assert eng.position() == before
    assert eng.record_at("r", 0, 7) is None and eng.record_at("r", 0, 3) is None


# -- every other method Store calls ---------------------------------------------------------------


def _run_of_three(eng):
    r0 = record("r", 0, 0, None, "run_started")
    r1 = record("r", 0, 1, r0[0])
    intent = obj("record", {"run": "r", "branch": 0, "lsn": 2, "parent": r1[0], "kind": "intent", "time": 1.0,
                            "body": {"intent": "pay", "step": 2, "effect": "charge", "idempotent": False}})
    blob = obj("blob", b"body of a prompt")
    eng.commit([r0], [("run/r/branch/0", None, r0[0], "start"), ("run/r/live", None, "ref: run/r/branch/0", "live")])
    eng.commit([blob, r1, intent], [("run/r/branch/0", r0[0], intent[0], "append")])
    return r0, r1, intent, blob


def test_entries_refresh_and_ids(eng):
    r0, r1, intent, blob = _run_of_three(eng)
    pos = eng.refresh()
    assert pos == eng.position() == eng.snapshot() and pos.entry == 2
    es = list(eng.entries())
    assert [e.n for e in es] == [1, 2] and es[-1].checksum == pos.checksum
    assert es[0].moves == [["run/r/branch/0", None, r0[0], "start"], ["run/r/live", None, "ref: run/r/branch/0", "live"]]
    assert sorted(o[0] for o in es[1].objs) == sorted([blob[0], r1[0], intent[0]])
    # each entry carries its records' index rows (format 3), in any engine
    rows = {es[1].objs[r[0]][0]: r[1:6] for r in es[1].recs}
    assert rows == {r1[0]: ["r", 0, 1, r0[0], "attempt"], intent[0]: ["r", 0, 2, r1[0], "intent"]}
    assert set(eng.iter_ids()) == {r0[0], r1[0], intent[0], blob[0]}
    assert eng.read(blob[0]) == blob[2] and eng.has(r1[0]) and not eng.has(b"\x07" * 32)
    with pytest.raises(ObjectNotFound):
        eng.read(b"\x07" * 32)


def test_the_tables_store_reads(eng):
    r0, r1, intent, blob = _run_of_three(eng)
    t = eng.tables
    assert t.refs == {"run/r/branch/0": intent[0], "run/r/live": "ref: run/r/branch/0"}
    assert t.run_refs == {"r": t.refs}
    assert t.starts == {"r": 1} and t.tips == {("r", 0): (2, intent[0])}
    assert t.intents == {"r": [(0, 2, "intent", {"intent": "pay", "step": 2, "effect": "charge", "idempotent": False}, intent[0])]}
    got = eng.read_block_of(r1[0])
    assert got is None or r1[2] in got[0]  # the memory engine keeps no blocks
    assert eng.read_block_of(blob[0]) is None  # never a block of blob bodies
    assert eng.prefix_ok is False and eng.witness_problem is None


def test_a_transaction_that_raises_writes_nothing(eng):
    _run_of_three(eng)
    before = eng.position()
    other = obj("blob", b"never")
    with pytest.raises(RuntimeError):
        with eng.transaction() as txn:
            txn.put(other[0], other[1], other[2])
            txn.set_ref("run/r/note", None, other[0], "n")
            raise RuntimeError("the caller changed its mind")
    assert eng.position() == before and not eng.has(other[0]) and "run/r/note" not in eng.tables.refs


# -- the tables' root: incremental == recomputed ---------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OPS = st.lists(st.tuples(st.sampled_from(["start", "append", "intent", "commit", "rewind", "live", "ref", "batch"]),
                          st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_the_root_kept_per_commit_is_the_root_of_the_tables(ops):
    """Every commit updates the tables' root by the elements it changes (never a pass over the
    tables); at every step that must equal the root recomputed from the whole tables, as a reader
    adopting a checkpoint computes it. Breaks if any kind of change is left out of plan's accounting."""
    import copy

    from objstore import RunLog, Store
    from objstore.storage.log.root import root_digest
    from objstore.storage.log.tables import LogState

    log = RunLog(Store.memory())
    t = log.store.engine.tables
    runs: list[str] = []
    for op, a, b in ops:
        if op == "start" or not runs:
            runs.append(log.start_run(f"r{len(runs)}"))
            continue
        run = runs[a % len(runs)]
        view = log.view(run)
        if op == "append":
            log.record_attempt(run, b, 0, "succeeded")
        elif op == "intent":
            log.record_intent(run, f"i{b}", step=b, effect="e", idempotent=bool(a % 2))
        elif op == "commit":
            try:
                log.commit_intent(run, f"i{b}")
            except Exception:
                pass  # not declared on this branch: refused, nothing written
        elif op == "rewind":
            top = log.next_of(view.heads[view.live])[0] - 1
            if top >= 0:
                log.rewind(run, to_lsn=min(b, top))
        elif op == "live":
            log.set_live(run, b % len(view.heads))
        elif op == "ref":
            name = f"tags/t{b}"
            log.store.set_ref(name, log.store.read_ref(name), log.store.put_blob(b"%d" % a), "tag")
        elif op == "batch":
            with log.store.batch():
                log.record_attempt(run, b, 1, "failed")
                log.store.set_ref(f"run/{run}/note", log.store.read_ref(f"run/{run}/note"), log.store.put_blob(b"n%d" % b), "note")
        assert root_digest(t.root_sum) == root_digest(copy.copy(t).recompute_root()), (op, a, b)
    fresh = LogState()  # what a reader adopting a checkpoint of these tables computes
    for name, value in t.refs.items():
        fresh.set_ref(name, value)
    fresh.tips, fresh.intents, fresh.starts, fresh.idx = dict(t.tips), dict(t.intents), dict(t.starts), dict(t.idx)
    assert root_digest(fresh.recompute_root()) == root_digest(t.root_sum)
