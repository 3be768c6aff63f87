"""Labels (issue 18): a run's labels determine its id; record labels are rows of the log's own index.

Checked on real stores: through the tail's tables, a checkpoint's active rows and sealed segments'
index files; from fresh processes' views (a reopened store); the uniqueness of a labelled run under
two OS processes; the format marker; what verify and a reader make of forged labels; and that a
lookup reads only what it returns (label rows are counted at the engine's index lookups, records at
the codec's decode)."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
from helpers import log_engine_of, run_log_root
from hypothesis import given, settings
from hypothesis import strategies as st

import objstore
from objstore.errors import Conflict, InvalidInput
from objstore.runs import labels as L
from objstore.storage import labels as SL
from objstore.storage.log import local_write
from objstore.storage.log.format import LABEL_ROW
from objstore.storage.log.local import LogEngine
from objstore.storage.log.tables import LogState


def _open(path):
    return objstore.open_store(str(path))




def test_labelled_run_id_is_the_labels_and_starting_twice_is_a_conflict(tmp_path):
    log = _open(tmp_path / "s")
    run = log.start_run(labels={"thread_id": "T", "checkpoint_ns": ""})
    assert run == L.run_id({"checkpoint_ns": "", "thread_id": "T"})
    assert run.startswith("l-") and len(run) == 50
    before = _log_bytes(tmp_path / "s")
    with pytest.raises(Conflict):
        log.start_run(labels={"checkpoint_ns": "", "thread_id": "T"})
    assert _log_bytes(tmp_path / "s") == before  # nothing written
    assert log.find_run(thread_id="T", checkpoint_ns="") == run
    assert log.find_run(thread_id="T") is None  # exact set only
    assert log.run_labels(run) == {"thread_id": "T", "checkpoint_ns": ""}
    with pytest.raises(InvalidInput):
        log.start_run("l-" + "0" * 48)  # the prefix is reserved for labelled runs
    with pytest.raises(InvalidInput):
        log.start_run("x", labels={"a": "b"})


def test_escaping_makes_any_string_a_label_and_sets_injective():
    a = L.run_id({"a": "b&c=d"})
    b = L.run_id({"a": "b", "c": "d"})
    c = L.run_id({"a=b": "c"})
    assert len({a, b, c}) == 3
    assert SL.set_text([["a", "b&c=d"]]) == "a=b%26c%3Dd"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), min_size=1, max_size=4),
       st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), min_size=1, max_size=4))
def test_run_ids_of_different_label_sets_differ(a, b):
    assert (L.run_id(a) == L.run_id(b)) == (a == b)


def _starter(path, q):
    log = objstore.open_store(path)
    try:
        q.put(("ok", log.start_run(labels={"thread_id": "race"})))
    except Conflict:
        q.put(("conflict", None))


def test_two_processes_starting_one_thread_get_one_run_and_one_conflict(tmp_path):
    path = str(tmp_path / "s")
    _open(path)
    ctx = mp.get_context("spawn")
    for _ in range(3):
        q = ctx.Queue()
        procs = [ctx.Process(target=_starter, args=(path, q)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        got = sorted(q.get(timeout=5)[0] for _ in procs)
        if got == ["conflict", "ok"]:
            break
        # both may also run one after the other: then the second is the conflict too; a later one must be
        assert got == ["conflict", "conflict"] or got == ["conflict", "ok"], got
    runs = [r for r in _open(path).store.run_names()]
    assert runs == [L.run_id({"thread_id": "race"})]


def test_a_labelled_run_created_between_the_look_up_and_the_claim_is_a_conflict(tmp_path, monkeypatch):
    """Another writer creates the run after start_run looked its labels up and before its batch holds the run's
    log (a log per run: a run with no log yet is read lock-free): still the Conflict the look-up gives (the
    LangGraph saver catches it and uses that run), never InvalidInput, and nothing more written."""
    path = str(tmp_path / "s")
    log, other = _open(path), _open(path)
    labels = {"thread_id": "T", "checkpoint_ns": ""}
    real = L.generations
    made = []

    def racing(store, want):
        got = real(store, want)
        if not made:
            made.append(None)  # (the other writer's own look-up goes straight through)
            made[0] = other.start_run(labels=labels)
        return got

    monkeypatch.setattr(L, "generations", racing)
    with pytest.raises(Conflict):
        log.start_run(labels=labels)
    assert made == [L.run_id(labels)] and _open(path).find_runs(thread_id="T") == made
    assert log_engine_of(_open(path).store, made[0]).refresh().entry == 1
    assert objstore.verify(_open(path)) == []


def _fill(log, n_threads, per_thread, pad=0):
    made = {}
    for i in range(n_threads):
        run = log.start_run(labels={"thread_id": f"t{i}", "checkpoint_ns": ""})
        ids = []
        for j in range(per_thread):
            with log.batch():
                blob = log.put_blob(os.urandom(pad)) if pad else None
                ids.append(log.record_attempt(run, j, 0, "succeeded", output=blob).id)
                log.append(run, "attempt", {"step": j, "attempt": 1, "state": "failed"}, labels={"checkpoint_id": f"c{i}-{j}", "kind": "w"})
            log.append(run, "attempt", {"step": j, "attempt": 2, "state": "succeeded"}, labels={"checkpoint_id": f"c{i}-{j}"})
        made[run] = ids
    return made


@pytest.mark.parametrize("where", ["tail", "sealed", "checkpoint"])
def test_find_by_label_across_tail_checkpoint_and_sealed_indexes(tmp_path, monkeypatch, where):
    log = _open(tmp_path / "s")
    per_run = log.store.logs.per_run
    if where == "sealed":  # format 6: a run's log holds its own 40 KB, so each run's log seals at a lower size
        monkeypatch.setattr(local_write, "SEAL_BYTES", (16 if per_run else 64) << 10)
    if where == "checkpoint":
        monkeypatch.setattr(local_write, "CHECKPOINT_ENTRIES", 7)
    made = _fill(log, 6, 5, pad=8000 if where == "sealed" else 0)
    if where == "sealed":  # one log: sealed more than 3 times; format 6: every run's log sealed at least once
        for run in made if per_run else [None]:
            d = os.path.join(run_log_root(tmp_path / "s", run) if run else tmp_path / "s", "log")
            assert len([f for f in os.listdir(d) if f.endswith(".seg")]) > (1 if per_run else 3), d
    if where == "checkpoint":
        for run in made:
            assert os.path.exists(os.path.join(run_log_root(tmp_path / "s", run), "log", "checkpoint"))
    for fresh in (log, _open(tmp_path / "s")):
        assert set(fresh.find_runs(checkpoint_ns="")) == set(made)
        assert fresh.find_runs(thread_id="t3") == [L.run_id({"thread_id": "t3", "checkpoint_ns": ""})]
        for i, run in enumerate(made):
            for j in range(5):
                recs = fresh.find_records(run, checkpoint_id=f"c{i}-{j}")
                assert [r.body["attempt"] for r in recs] == [2, 1]  # newest commit first
                assert fresh.find_record(run, checkpoint_id=f"c{i}-{j}", kind="w").body["attempt"] == 1
            assert fresh.find_record(run, checkpoint_id="nope") is None
            # another run's label is not this run's
            other = list(made)[(i + 1) % len(made)]
            assert fresh.find_records(other, checkpoint_id=f"c{i}-0") == []
    assert objstore.verify(_open(tmp_path / "s")) == []
    assert f'"version": {6 if per_run else 5}' in open(tmp_path / "s" / "OBJSTORE").read()


def test_an_unlabelled_store_stays_format_3(tmp_path):
    """One log: labels move a store from format 3 to 5. Format 6 has labels from its start and stays 6."""
    log = _open(tmp_path / "s")
    per_run = log.store.logs.per_run
    run = log.start_run()
    log.record_attempt(run, 0, 0, "succeeded")
    assert f'"version": {6 if per_run else 3}' in open(tmp_path / "s" / "OBJSTORE").read()
    log.append(run, "attempt", {"step": 1, "attempt": 0, "state": "running"}, labels={"checkpoint_id": "x"})
    assert f'"version": {6 if per_run else 5}' in open(tmp_path / "s" / "OBJSTORE").read()


def test_lookups_read_only_what_they_return(tmp_path, monkeypatch):
    """Records decoded by find_record / find_runs are the ones returned, whatever the store's size."""
    monkeypatch.setattr(local_write, "SEAL_BYTES", 64 << 10)
    log = _open(tmp_path / "s")
    _fill(log, 30, 4, pad=3000)
    fresh = _open(tmp_path / "s")
    decoded = []
    real = objstore.storage.codec.decode

    def counting(data, *a, **k):
        got = real(data, *a, **k)
        decoded.append(got[0])
        return got

    monkeypatch.setattr(objstore.storage.codec, "decode", counting)
    run = fresh.find_run(thread_id="t17", checkpoint_ns="")
    assert decoded.count("record") == 0  # computed, not searched
    got = fresh.find_records(run, checkpoint_id="c17-2")
    assert len(got) == 2 and decoded.count("record") == 2
    decoded.clear()
    assert fresh.find_runs(thread_id="t4") and decoded.count("record") == 1


def test_a_forged_run_label_is_refused_and_named_by_verify(tmp_path, monkeypatch):
    """A run_started whose labels do not give its id (written below the API) breaks a rule of applying
    its entry: the writer refuses it; written past the rule, verify names the entry (corrupt-entry)."""
    from objstore.errors import Refused

    def forge():
        store = _open(tmp_path / "s").store
        with store.batch():
            oid = store.put("record", {"run": "l-" + "ab" * 24, "branch": 0, "lsn": 0, "parent": None, "kind": "run_started",
                                       "time": 1.0, "body": {"subject": "default", "workflow_version": "1", "meta": None},
                                       "labels": {"thread_id": "other"}})
            store.set_ref("run/l-" + "ab" * 24 + "/branch/0", None, oid, "forged")

    with pytest.raises(Refused, match="its labels give run id"):
        forge()
    with monkeypatch.context() as m:
        m.setattr(LogState, "_birth_rule", lambda *a: None)
        forge()
    problems = objstore.verify(_open(tmp_path / "s"))
    assert [p.code for p in problems] == ["corrupt-entry"] and "its labels give run id" in problems[0].detail, problems


def _log_bytes(path):
    """The segments of every log of the store, and (format 6) every catalog file: what a refused write must not touch."""
    out = {}
    for d, _, files in os.walk(str(path)):
        for f in files:
            p = os.path.join(d, f)
            if f.endswith(".seg") or os.path.relpath(p, str(path)).startswith("catalog" + os.sep):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, str(path))] = fh.read()
    return out


def test_a_deleted_thread_is_found_no_more_and_its_labels_start_a_new_run(tmp_path):
    from objstore.lifecycle import delete, gc

    log = _open(tmp_path / "s")
    run = log.start_run(labels={"thread_id": "T"})
    log.append(run, "attempt", {"step": 0, "attempt": 0, "state": "running"}, labels={"checkpoint_id": "c"})
    delete.delete_run(log, run, reason="user asked")
    gc.gc(log.store)  # the run_started body is gone: its label row stays and names nothing readable
    fresh = _open(tmp_path / "s")
    assert fresh.find_runs(thread_id="T") == [] and fresh.find_run(thread_id="T") is None
    again = fresh.start_run(labels={"thread_id": "T"})
    assert again == run + "-1"
    assert fresh.find_runs(thread_id="T") == [again] == [fresh.find_run(thread_id="T")]
    assert objstore.verify(_open(tmp_path / "s")) == []


@pytest.mark.parametrize("mode", ["drop the newest row", "renumber a row", "retarget a row", "drop a store-scope row", "add a row"])
def test_a_forged_checkpoint_label_list_is_not_adopted_and_changes_no_answer(tmp_path, monkeypatch, mode):
    """The active segment's label rows ride in the checkpoint's ``labels`` list, covered by the root
    (element ["L", digest of their set hash]): any edit, BLAKE3 recomputed, makes the checkpoint's
    tables hash elsewhere than the log's root, so readers replay the log instead and answer the same."""
    import blake3
    import msgspec

    monkeypatch.setattr(local_write, "CHECKPOINT_ENTRIES", 5)
    root = str(tmp_path / "s")
    log = _open(root)
    run = log.start_run(labels={"thread_id": "T"})
    other = log.start_run(labels={"thread_id": "U"})
    old = log.append(run, "attempt", {"step": 0, "attempt": 0, "state": "failed"}, labels={"checkpoint_id": "c"})
    new = log.append(run, "attempt", {"step": 0, "attempt": 1, "state": "succeeded"}, labels={"checkpoint_id": "c"})
    # One log: entries of any run make the checkpoint, and its store-scope rows include U's. Format 6: the checkpoint
    # is of run's own log (its entries alone count), and the store-scope row there is run's own labels' (T).
    filler, scoped = (run, "T") if log.store.logs.per_run else (other, "U")
    for i in range(6):
        log.record_attempt(filler, i, 0, "succeeded")
    assert log_engine_of(_open(root).store, run).tables.frozen is not None  # the genuine checkpoint is adopted
    path = os.path.join(run_log_root(root, run), "log", "checkpoint")
    data = open(path, "rb").read()
    m = msgspec.msgpack.decode(data[:-32])
    rows = [list(r) for r in LABEL_ROW.iter_unpack(m["labels"])]  # packed rows, commit order
    assert rows, "the checkpoint holds the active segment's label rows apart"
    key_c = SL.key(run, "checkpoint_id", "c")
    mine = [r for r in rows if r[0] == key_c]
    assert sorted(r[2] for r in mine) == sorted([old.id, new.id])
    if mode == "drop the newest row":
        rows.remove(max(mine, key=lambda r: r[1]))
    elif mode == "renumber a row":
        next(r for r in mine if r[2] == old.id)[1] += 100
    elif mode == "retarget a row":
        next(r for r in mine if r[2] == new.id)[2] = old.id
    elif mode == "drop a store-scope row":
        rows.remove(next(r for r in rows if r[0] == SL.key("", "thread_id", scoped)))
    else:
        rows.append([SL.key(run, "checkpoint_id", "forged"), 1, old.id])
    m["labels"] = b"".join(LABEL_ROW.pack(*r) for r in rows)
    body = msgspec.msgpack.encode(m)
    open(path, "wb").write(body + blake3.blake3(body).digest())
    fresh = _open(root)
    assert log_engine_of(fresh.store, run).tables.frozen is None  # not adopted: replayed from the log
    assert fresh.find_record(run, checkpoint_id="c").id == new.id
    assert [r.id for r in fresh.find_records(run, checkpoint_id="c")] == [new.id, old.id]
    assert fresh.find_runs(thread_id="U") == [other] and fresh.find_runs(thread_id="T") == [run]
    assert fresh.find_record(run, checkpoint_id="forged") is None
    assert [p.code for p in objstore.verify(_open(root))] == ["damaged-checkpoint"]


def test_a_reader_thread_taking_in_the_writers_entry_first_adds_no_label_row_twice(tmp_path, monkeypatch):
    """A writer's own entry can be read from the file by another thread of its process (a reader's
    refresh) between the write and the writer's apply. The tables then take the entry once: a label
    row counted twice made the sealed segment's index differ from its entries (verify: damaged-index,
    and the next segment's first entry named a wrong digest). Forced here: every write is followed by a
    refresh from another thread before the writer applies its entry."""
    import threading

    log = _open(tmp_path / "s")
    per_run = log.store.logs.per_run
    # One log: 40 runs' 2 KB batches seal it at 48 KB. Format 6: each run's log holds one batch, so each seals at 2 KB
    # (its batch's entry passes it), each with the race.
    monkeypatch.setattr(local_write, "SEAL_BYTES", (2 if per_run else 48) << 10)
    runs = []
    real = LogEngine._write_entry

    def write_then_read(self, wfd, raw, off, sync=True):
        real(self, wfd, raw, off, sync)
        t = threading.Thread(target=self.refresh)
        t.start()
        t.join()

    monkeypatch.setattr(LogEngine, "_write_entry", write_then_read)
    for i in range(40):
        run = log.start_run(labels={"thread_id": f"t{i}"})
        with log.batch():
            blob = log.put_blob(os.urandom(2000))
            log.record_attempt(run, 0, 0, "succeeded", output=blob)
            log.append(run, "attempt", {"step": 1, "attempt": 0, "state": "running"}, labels={"checkpoint_id": f"c{i}"})
        runs.append(run)
    for run in runs if per_run else runs[:1]:
        assert log_engine_of(log.store, run)._seg > 1  # sealed at least once, with the race at every commit
    monkeypatch.undo()
    assert objstore.verify(_open(tmp_path / "s")) == []
    fresh = _open(tmp_path / "s")
    assert all(len(fresh.find_records(fresh.find_run(thread_id=f"t{i}"), checkpoint_id=f"c{i}")) == 1 for i in range(40))
