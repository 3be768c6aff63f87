"""Labelled runs, declared kinds and labelled records made by many OS processes at once on one store (issue 18).

Forked children (real OS processes, each opening the store itself) are released together through one pipe and
race to start the same labelled run, copy into the same labelled run, and declare the same kind (one field list:
one schema object) or each its own field list (a clean chain of versions, none lost). Exactly one winner per
labelled run, every other process a ``Conflict``; verify clean after."""

from __future__ import annotations

import json
import os

from helpers import log_engine_of

import objstore
from objstore.errors import Conflict
from objstore.runs import labels as L

N = 6


def _race(root, job):
    """Run ``job(log, i)`` in N forked children released at once; their results (JSON), in child order."""
    r, w = os.pipe()
    pids = []
    for i in range(N):
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                os.close(w)
                log = objstore.open_store(root)
                log.view("src")  # opened and caught up before the start
                os.read(r, 1)  # blocks until the parent closes the pipe: every child starts together
                out = job(log, i)
                with open(os.path.join(root, "tmp", f"adv18-{i}"), "w") as f:
                    json.dump(out, f)
            except BaseException:
                code = 3
            os._exit(code)
        pids.append(pid)
    os.close(r)
    os.close(w)  # release them all
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "a child failed"
    out = []
    for i in range(N):
        with open(os.path.join(root, "tmp", f"adv18-{i}")) as f:
            out.append(json.load(f))
        os.unlink(os.path.join(root, "tmp", f"adv18-{i}"))
    return out


def _store(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    log.start_run("src")
    log.record_attempt("src", 0, 0, "succeeded")
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    return root, log


def _start(log, i):
    try:
        return ["ok", log.start_run(labels={"thread_id": "same", "checkpoint_ns": ""})]
    except Conflict:
        return ["conflict", None]


def _copy(log, i):
    try:
        return ["ok", log.fork_run("src", labels={"thread_id": "copy"})]
    except Conflict:
        return ["conflict", None]


def test_many_processes_starting_one_labelled_run_make_one_run_and_conflicts(tmp_path):
    root, log = _store(tmp_path)
    for job, labels in ((_start, {"thread_id": "same", "checkpoint_ns": ""}), (_copy, {"thread_id": "copy"})):
        got = _race(root, job)
        run = L.run_id(labels)
        assert sorted(g[0] for g in got) == ["conflict"] * (N - 1) + ["ok"], got
        assert [g[1] for g in got if g[0] == "ok"] == [run]
        fresh = objstore.open_store(root)
        assert fresh.find_run(**labels) == run and fresh.find_runs(thread_id=labels["thread_id"]) == [run]
        assert [r.kind for r in fresh.records(run)] == ["run_started"]
    fresh = objstore.open_store(root)
    assert sorted(fresh.runs()) == sorted(["src", L.run_id({"thread_id": "same", "checkpoint_ns": ""}), L.run_id({"thread_id": "copy"})])
    assert objstore.verify(fresh) == []


FIELDS = [["a", "str", True, False], ["r", "list", False, True]]


def test_many_processes_declaring_one_kind_make_one_schema_or_a_clean_chain(tmp_path):
    root, log = _store(tmp_path)
    same = _race(root, lambda log, i: log.register_kind("x.adv.same", FIELDS).hex())
    assert len(set(same)) == 1, same  # one field list: one schema object, whoever declared it first
    fresh = objstore.open_store(root)
    assert fresh.store.read_ref("schema/x.adv.same").hex() == same[0]
    assert fresh.store.get(bytes.fromhex(same[0]))[1]["previous"] is None

    # each process its own field list: every one a version, chained, none lost
    mine = _race(root, lambda log, i: log.register_kind("x.adv.own", FIELDS + [[f"f{i}", "int", False, False]]).hex())
    assert len(set(mine)) == N
    fresh = objstore.open_store(root)
    chain = []
    cur = fresh.store.read_ref("schema/x.adv.own")
    while cur is not None:
        otype, value = fresh.store.get(cur)
        assert otype == "schema" and value["kind"] == "x.adv.own"
        chain.append(cur.hex())
        cur = value["previous"]
    assert sorted(chain) == sorted(mine)
    # a record of the newest version, and verify clean
    newest = fresh.store.get(bytes.fromhex(chain[0]))[1]["fields"]
    body = {"a": "v", newest[-1][0]: 1}
    rec = fresh.append("src", "x.adv.own", body)
    assert fresh.record(rec.id).kind == "x.adv.own"
    assert objstore.verify(objstore.open_store(root)) == []


def test_many_processes_labelling_records_of_one_run_lose_none(tmp_path):
    """Each process appends records labelled with the same checkpoint id (and one of its own) to one labelled run,
    plain and in batches: every record is found by its labels afterwards, newest commit first, none twice."""
    root, log = _store(tmp_path)
    run = log.start_run(labels={"thread_id": "shared"})

    def job(log, i):
        ids = []
        for j in range(5):
            if j % 2:
                with log.batch():
                    ids.append(log.append(run, "attempt", {"step": i, "attempt": j, "state": "running"},
                                          labels={"checkpoint_id": "C", "who": str(i)}).id.hex())
                    ids.append(log.append(run, "attempt", {"step": i, "attempt": 10 + j, "state": "running"},
                                          labels={"who": str(i)}).id.hex())
            else:
                ids.append(log.append(run, "attempt", {"step": i, "attempt": j, "state": "running"},
                                      labels={"checkpoint_id": "C", "who": str(i)}).id.hex())
        return ids

    got = _race(root, job)
    fresh = objstore.open_store(root)
    shared = [r.id.hex() for r in fresh.find_records(run, checkpoint_id="C")]
    assert len(shared) == len(set(shared)) == N * 5
    for i, ids in enumerate(got):
        mine = [r.id.hex() for r in fresh.find_records(run, who=str(i))]
        assert sorted(mine) == sorted(ids) and len(ids) == 7
        assert {r.id.hex() for r in fresh.find_records(run, who=str(i), checkpoint_id="C")} == set(ids) & set(shared)
    entries = [log_engine_of(fresh.store, run).loc_entry(bytes.fromhex(h)) for h in shared]  # the run's log (the store's one before 6)
    assert entries == sorted(entries, reverse=True)  # newest commit first
    assert [r.lsn for r in fresh.records(run)] == list(range(1 + N * 7))
    assert objstore.verify(objstore.open_store(root)) == []
