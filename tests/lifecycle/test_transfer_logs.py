"""push / clone between stores with a log per run (issue 16): a run's log copied entry for entry, so its head
(entry, checksum) — its anchor — is the same at both ends after a clone and after a push; the catalog entry
copied as it is; a target that wrote the run on its own gets refs and objects instead (fast-forward or a
conflict); a store of one log to a store of logs and back: objects and refs, one commit per run on the side of logs.

Each test makes the shapes it needs (``OBJSTORE_NEW_FORMAT`` set per store), so the file means the same with and
without ``OBJSTORE_NEW_FORMAT=3`` in the environment.
"""

from __future__ import annotations

import os

import pytest
from helpers import is_per_run, run_cli, run_log_root, snapshot_tree

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.lifecycle.gc import gc
from objstore.lifecycle.transfer import transfer
from objstore.runs.verify import verify
from objstore.storage import identity, runrefs


def make(root, fmt, monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", str(fmt))
    st = Store.init(str(root))
    monkeypatch.delenv("OBJSTORE_NEW_FORMAT")
    assert is_per_run(root) == (fmt == 6)
    return st


def world(store):
    """A: 4 attempts rewound to LSN 2 with one more; B: 4 attempts; C: a copy of B with one of its own; a labelled
    run (its id the one its labels give: ``LAB``)."""
    log = RunLog(store)
    lab = log.start_run(labels={"team": "x"})
    assert lab == LAB
    log.record_attempt(lab, 0, 0, "succeeded")
    for run in ("A", "B"):
        log.start_run(run)
        p = log.put_blob(f"prompt of {run}".encode())
        for i in range(4):
            log.record_attempt(run, i, 0, "succeeded", prompt=p, output=log.put_blob(f"out {run} {i}".encode()))
    log.rewind("A", 2, reason="again")
    log.record_attempt("A", 10, 0, "succeeded")
    log.fork_run("B", run="C")
    log.record_attempt("C", 20, 0, "succeeded")
    return log


LAB = RunLog(Store.memory()).start_run(labels={"team": "x"})
RUNS = sorted(["A", "B", "C", LAB])


def heads(store):
    return {r: store.logs.run_log(r).refresh() for r in store.logs.run_ids()}


def seg_files(root, run):
    d = os.path.join(run_log_root(root, run), "log")
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.endswith(".seg")}


def test_clone_and_push_between_stores_of_logs_keep_each_runs_head(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    log = world(make(a, 6, monkeypatch))
    target = make(b, 6, monkeypatch)
    rep = transfer(log.store, target)
    assert rep.landed == RUNS and rep.conflicts == [] and rep.entries == sum(p.entry for p in heads(log.store).values())
    assert heads(target) == heads(log.store)  # the same entries: each run's (entry, checksum) head, its anchor
    for run in RUNS:
        assert seg_files(b, run) == seg_files(a, run)
        assert target.logs.catalog.entry(run) == log.store.logs.catalog.entry(run)  # the catalog entry as it is
        assert target.run_refs(run) == log.store.run_refs(run)
    assert target.logs.catalog.copies("B") == ["C"]
    assert RunLog(target).find_run(team="x") == LAB
    assert verify(RunLog(target)) == []
    # a push of more: only the new entries, appended; a second push writes nothing
    log.record_attempt("A", 30, 0, "succeeded", output=log.put_blob(b"late"))
    log.rewind("B", 1, reason="back")
    before_c = snapshot_tree(run_log_root(b, "C"))
    rep = transfer(log.store, target)
    assert (rep.landed, rep.already, rep.entries) == (["A", "B"], sorted(["C", LAB]), 2)
    assert heads(target) == heads(log.store)
    assert snapshot_tree(run_log_root(b, "C")) == before_c  # a run with nothing new: its log untouched
    rep = transfer(log.store, target)
    assert (rep.landed, rep.entries, rep.objects) == ([], 0, 0)
    assert verify(RunLog(target)) == []
    # the CLI: clone DIR of a store of logs is one too, with the same heads
    run_cli("clone", str(a), str(tmp_path / "c"), exit_code=0)
    assert heads(Store.open(str(tmp_path / "c"))) == heads(log.store)


def store_head(store):
    return store.logs.store_log.refresh()


def test_a_clone_copies_the_store_log_as_it_is_so_runs_citing_it_and_gcd_keep_their_heads(tmp_path, monkeypatch):
    """A run whose entries cite the store log (a signed partial deletion) and whose log gc packed since: its entries
    go as they are only if the target's store log holds the positions they cite, so a clone copies the store log as
    it is first (its heads equal at both ends); a run copied as objects instead could not send the body gc removed.
    The clone's own engine of its store log, whose segment the copy replaced, is opened afresh. A later push
    appends to the target's store log as it is; one that would replace a file of it (the source's gc packed it)
    sends the store refs as objects instead: a writer that holds the target's store log open (another process, here
    a second Store) then loses nothing it commits after the push."""
    a, b = tmp_path / "a", tmp_path / "b"
    src = make(a, 6, monkeypatch)
    log = RunLog(src)
    owner, _ = identity.ensure_owner_key(src)
    log.start_run("R", subject="bob")
    for i in range(3):
        log.record_attempt("R", i, 0, "succeeded", output=log.put_blob(f"out {i}".encode()))
    D.delete_records(log, "R", [log.records("R")[-1].id], reason="pii", key=owner)
    gc(src)
    target = make(b, 6, monkeypatch)
    rep = transfer(src, target, fresh=True)  # as clone does: the target is its own new store
    assert (rep.landed, rep.erased, rep.conflicts) == (["R"], [], [])
    assert store_head(target) == store_head(src) and heads(target) == heads(src)
    assert seg_files(b, "R") == seg_files(a, "R")
    tlog = RunLog(target)  # the same target Store object: its store log engine is the reopened one
    # the source's store log grows: a push appends its new entries as they are
    log.register_kind("x.t.note", [["text", "str", True, False]])
    rep = transfer(src, target)
    assert rep.conflicts == [] and store_head(target) == store_head(src)
    # the source's gc packs its store log: a push would replace the target's segment under every open engine
    log.register_kind("x.t.more", [["text", "str", True, False]])
    gc(src)
    other = Store.open(str(b))  # another writer of the target, its store log open across the push
    RunLog(other).store.logs.store_log.refresh()
    rep = transfer(src, target)
    assert rep.conflicts == [] and rep.store_refs == "landed"
    assert {k for k, _v in target.list_refs() if k.startswith("schema/")} == {"schema/x.t.note", "schema/x.t.more"}
    RunLog(other).register_kind("x.t.other", [["text", "str", True, False]])  # committed after the push
    tlog.register_kind("x.t.mine", [["text", "str", True, False]])
    tlog.append("R", "x.t.note", {"text": "written at the far end"})
    fresh = Store.open(str(b))
    assert {k for k, _v in fresh.list_refs() if k.startswith("schema/")} == {
        "schema/x.t.note", "schema/x.t.more", "schema/x.t.other", "schema/x.t.mine"}  # nothing lost
    assert verify(RunLog(fresh)) == []
    assert RunLog(Store.open(str(b))).records("R")[-1].kind == "x.t.note"
    # the CLI's clone is such a fresh copy too: the store log's and each run's heads as at the source
    run_cli("clone", str(a), str(tmp_path / "c"), exit_code=0)
    cloned = Store.open(str(tmp_path / "c"))
    assert store_head(cloned) == store_head(src) and heads(cloned) == heads(src)


def test_a_run_the_target_wrote_on_its_own_gets_refs_and_objects(tmp_path, monkeypatch):
    """Not a prefix of the source's log: refs and objects (one commit per run), fast-forward or a conflict."""
    log = world(make(tmp_path / "a", 6, monkeypatch))
    target = make(tmp_path / "b", 6, monkeypatch)
    transfer(log.store, target)
    RunLog(target).record_attempt("A", 40, 0, "succeeded")  # written on the far end only
    log.record_attempt("A", 41, 0, "succeeded")
    log.record_attempt("B", 42, 0, "succeeded")
    before = target.logs.run_log("A").refresh()
    rep = transfer(log.store, target)
    assert [(r, ref) for r, ref, _d in rep.conflicts] == [("A", runrefs.branch_ref("A", 1))]
    assert rep.landed == ["B"] and heads(target)["B"] == heads(log.store)["B"]
    assert target.logs.run_log("A").refresh() == before  # nothing of A written
    assert verify(RunLog(target)) == []


def test_between_a_store_of_one_log_and_a_store_of_logs_both_ways(tmp_path, monkeypatch):
    one = world(make(tmp_path / "one", 3, monkeypatch))
    logs = make(tmp_path / "logs", 6, monkeypatch)
    rep = transfer(one.store, logs)
    assert rep.landed == RUNS
    assert {r: p.entry for r, p in heads(logs).items()} == dict.fromkeys(RUNS, 1)  # one commit per run, its own log
    assert RunLog(logs).find_run(team="x") == LAB
    for run in RUNS:
        assert logs.run_refs(run) == one.store.run_refs(run)
        assert [r.id for r in RunLog(logs).records(run, all_branches=True)] == [r.id for r in one.records(run, all_branches=True)]
    assert logs.logs.catalog.copies("B") == ["C"]
    assert verify(RunLog(logs)) == []
    back = make(tmp_path / "back", 3, monkeypatch)
    rep = transfer(logs, back)
    assert rep.landed == RUNS and back.engine.refresh().entry == 4
    for run in RUNS:
        assert back.run_refs(run) == one.store.run_refs(run)
    assert verify(RunLog(back)) == []
    assert transfer(logs, back).entries == 0 and transfer(one.store, logs).entries == 0


# -- kill -9 at every file operation of a push between stores of logs ---------------------------------------------
OPS = ("open", "write", "pwrite", "rename", "replace", "fsync", "fdatasync", "unlink", "ftruncate", "mkdir", "link", "rmdir")
CHANGES = {"write", "pwrite", "rename", "replace", "unlink", "ftruncate", "mkdir", "link", "rmdir", "open-create"}


def push_killed_at(k, src, dst, trace=None):
    """A push from ``src`` to ``dst`` in a forked child that SIGKILLs itself at its k-th file operation; True if it
    finished first. With ``trace``, the child writes there the kind of each of its file operations."""
    import json
    import signal

    pid = os.fork()
    if pid == 0:
        try:
            count, kinds = [0], []
            for name in OPS:
                real = getattr(os, name)

                def op(*a, _real=real, _name=name, **kw):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    flags = a[1] if len(a) > 1 else kw.get("flags", 0)
                    kinds.append("open-create" if _name == "open" and flags & (os.O_CREAT | os.O_TRUNC) else _name)
                    return _real(*a, **kw)

                setattr(os, name, op)
            rep = transfer(Store.open(src), Store.open(dst))
            assert rep.conflicts == [] and rep.erased == []
            if trace is not None:
                with open(trace, "w") as f:
                    json.dump(kinds, f)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, "the push failed instead of finishing or being killed"
        return True
    assert os.WTERMSIG(status) == signal.SIGKILL
    return False


@pytest.mark.slow
def test_a_push_killed_at_every_file_operation_leaves_each_run_log_a_prefix(tmp_path, monkeypatch):
    """A push (a clone of one run, then a push of more) killed at each file operation that can leave the target
    different: every run log the target has is a prefix of the source's (its head an entry of the source's run,
    same checksum), no run log has entries without its catalog entry, the target verifies, and the next push ends
    with every run's head the source's."""
    import json
    import shutil

    a, b, base = tmp_path / "a", tmp_path / "b", tmp_path / "base"
    log = world(make(a, 6, monkeypatch))
    make(base, 6, monkeypatch)
    transfer(log.store, Store.open(str(base)), ["A"])
    log.record_attempt("A", 50, 0, "succeeded", output=log.put_blob(b"after the base"))
    src_heads = heads(Store.open(str(a)))
    trace = str(tmp_path / "ops.json")
    shutil.copytree(base, b)
    assert push_killed_at(0, str(a), str(b), trace)
    kinds = json.load(open(trace))
    os.unlink(trace)
    points = {1} | {i + 2 for i, kind in enumerate(kinds[:-1]) if kind in CHANGES} | {kinds.index(x) + 1 for x in set(kinds)}
    assert len(kinds) > 20 and {"open-create", "write", "rename"} <= set(kinds)
    for k in sorted(points):
        shutil.rmtree(b)
        shutil.copytree(base, b)
        push_killed_at(k, str(a), str(b))
        t = Store.open(str(b))
        for run in t.logs.run_ids():
            got = t.logs.run_log(run).refresh()
            assert got.entry <= src_heads[run].entry
            if got.entry:
                assert t.logs.catalog.entry(run) == log.store.logs.catalog.entry(run)
                src_at = [e.checksum for e in Store.open(str(a)).logs.run_log(run).entries() if e.n == got.entry]
                assert src_at == [got.checksum], (k, run)
        assert verify(RunLog(t)) == [], k
        rep = transfer(Store.open(str(a)), Store.open(str(b)))
        assert rep.conflicts == [] and heads(Store.open(str(b))) == src_heads, k
