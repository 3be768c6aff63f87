"""The thread operations are native: ``copy_thread`` is a cross-run fork (the copy holds no record of
its own but its run_started, whose parent is a fork object naming the source), ``delete_for_runs``
and ``prune`` are recorded deletions (no record is appended: no tombstone), and after gc the deleted
checkpoints' bytes are gone while the kept ones read back."""

from __future__ import annotations

import os

import pytest
from helpers import raw_objects
from langgraph.checkpoint.base import empty_checkpoint
from test_erasure import found

from objstore import verify
from objstore.integrations.langgraph import CHECKPOINT, ObjstoreSaver
from objstore.lifecycle import gc as G
from objstore.storage import codec


def _chain(saver, thread, n, *, values, run_ids=None, ns=""):
    ids, parent = [], None
    for i in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = values(i)
        cp["channel_versions"] = {k: i + 1 for k in cp["channel_values"]}
        conf = {"thread_id": thread, "checkpoint_ns": ns} | ({"checkpoint_id": parent} if parent else {})
        md = {"source": "loop", "step": i} | ({"run_id": run_ids[i]} if run_ids else {})
        parent = saver.put({"configurable": conf}, cp, md, cp["channel_versions"])["configurable"]["checkpoint_id"]
        ids.append(parent)
    return ids


def _ids(saver, thread, ns=None):
    conf = {"thread_id": thread} | ({"checkpoint_ns": ns} if ns is not None else {})
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": conf})]


def test_copy_thread_is_a_cross_run_fork_copying_nothing(tmp_path):
    saver = ObjstoreSaver(str(tmp_path / "s"))
    ids = _chain(saver, "src", 4, values=lambda i: {"m": [f"msg {j}" for j in range(i + 1)]})
    saver.put_writes({"configurable": {"thread_id": "src", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}, [("m", "pending")], "t1")
    log = saver.log
    before = {oid for oid, _t, _d in raw_objects(log.store)}
    saver.copy_thread("src", "dst")
    added = sorted(t for oid, t, _d in raw_objects(log.store) if oid not in before)
    assert added == [codec.FORK, codec.RECORD]  # the cross-run fork object and the copy's run_started: nothing copied
    src, dst = log.find_run(thread_id="src", checkpoint_ns=""), log.find_run(thread_id="dst", checkpoint_ns="")
    assert [r.kind for r in log.records(dst)] == ["run_started"]
    otype, fk = log.store.get(log.run_started(dst).parent)
    assert otype == codec.FORK and fk["parent_run"] == src and fk["parent_record"] == log.view(src).heads[0]
    assert _ids(saver, "dst") == _ids(saver, "src") == ids[::-1]
    t = saver.get_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": ""}})
    assert t.checkpoint["channel_values"] == {"m": ["msg 0", "msg 1", "msg 2", "msg 3"]}
    assert [(w[1], w[2]) for w in t.pending_writes] == [("m", "pending")]
    # The copy goes on by itself: a new checkpoint on the copy is not in the source.
    new = _chain(saver, "dst", 1, values=lambda i: {"m": ["other"]})
    cfg = {"configurable": {"thread_id": "dst", "checkpoint_ns": "", "checkpoint_id": new[0]}}
    assert saver.get_tuple(cfg) is not None and new[0] not in _ids(saver, "src")
    assert verify(log) == []
    # Deleting the source thread takes nothing from the copy, gc included.
    saver.delete_thread("src")
    G.gc(log.store)
    fresh = ObjstoreSaver(log.store.root)
    assert _ids(fresh, "src") == [] and _ids(fresh, "dst") == [new[0]] + ids[::-1]
    t = fresh.get_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": "", "checkpoint_id": ids[-1]}})
    assert t.checkpoint["channel_values"] == {"m": ["msg 0", "msg 1", "msg 2", "msg 3"]}
    assert [(w[1], w[2]) for w in t.pending_writes] == [("m", "pending")]
    assert verify(fresh.log) == []


def test_delete_for_runs_and_prune_are_recorded_deletions_gone_after_gc(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    shared = [os.urandom(16).hex() for _ in range(5)]  # message j, in every checkpoint from j on
    own = [os.urandom(16).hex() for _ in range(5)]  # a value of checkpoint i alone
    ids = _chain(saver, "t", 5, values=lambda i: {"m": [f"{j}:{shared[j]}" for j in range(i + 1)], "own": own[i]},
                 run_ids=["r1", "r1", "r2", "r3", "r3"])
    log = saver.log
    run = log.find_run(thread_id="t", checkpoint_ns="")
    own_before = [r.id for r in log.records(run, all_branches=True)]
    assert all(found(root, s.encode()) for s in own)

    saver.delete_for_runs(["r2"])
    assert _ids(saver, "t") == [ids[4], ids[3], ids[1], ids[0]]
    saver.prune(["t"], strategy="keep_latest")
    assert _ids(saver, "t") == [ids[4]]
    assert [r.id for r in log.records(run, all_branches=True)] == own_before  # no record appended: no tombstone
    deleted = [r for r in log.records(run, all_branches=True) if r.kind == CHECKPOINT and "deleted" in r.body]
    assert len(deleted) == 4

    G.gc(log.store)
    # The kept checkpoint's list holds all five messages: those parts stay. The four deleted
    # checkpoints' own values were named by their records only: gone.
    assert [found(root, s.encode()) != [] for s in shared] == [True] * 5
    assert [found(root, s.encode()) != [] for s in own] == [False, False, False, False, True]
    fresh = ObjstoreSaver(root)
    t = fresh.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert t.checkpoint["channel_values"]["own"] == own[4] and len(t.checkpoint["channel_values"]["m"]) == 5
    assert verify(fresh.log) == []


def test_copy_thread_copies_the_branch_of_the_latest_checkpoint_not_the_live_one(tmp_path):
    """Time travel from c2 forks a live branch (c4); resuming c3, the old branch's newest, goes on
    that older branch (c5), which is then not live. The source's latest is c5: so is the copy's,
    with c5's pending write (was: the copy forked at the live head, its latest c4, c5 missing)."""
    saver = ObjstoreSaver(str(tmp_path / "s"))
    c1, c2, c3 = _chain(saver, "src", 3, values=lambda i: {"m": [f"msg {i}"]})

    def put(parent, value):
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"m": [value]}, {"m": 9}
        conf = {"thread_id": "src", "checkpoint_ns": "", "checkpoint_id": parent}
        return saver.put({"configurable": conf}, cp, {"source": "loop", "step": 9}, cp["channel_versions"])["configurable"]["checkpoint_id"]

    c4 = put(c2, "from c2")
    c5 = put(c3, "from c3")
    saver.put_writes({"configurable": {"thread_id": "src", "checkpoint_ns": "", "checkpoint_id": c5}}, [("m", "pending")], "t1")
    run = saver.log.find_run(thread_id="src", checkpoint_ns="")
    assert saver.log.view(run).live == 1 and saver.log.record(saver.log.view(run).heads[0]).kind != CHECKPOINT  # c5 on branch 0
    latest = saver.get_tuple({"configurable": {"thread_id": "src", "checkpoint_ns": ""}})
    assert latest.config["configurable"]["checkpoint_id"] == c5
    saver.copy_thread("src", "dst")
    t = saver.get_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": ""}})
    assert t.config["configurable"]["checkpoint_id"] == c5
    assert t.checkpoint["channel_values"] == {"m": ["from c3"]}
    assert [(w[1], w[2]) for w in t.pending_writes] == [("m", "pending")]
    assert _ids(saver, "dst") == [c5, c3, c2, c1] and c4 in _ids(saver, "src")
    assert verify(saver.log) == []


def test_listing_a_copy_walks_its_source_once_not_once_per_checkpoint(tmp_path):
    """``list`` of a copy reads each inherited checkpoint's writes from the source's lineage: one
    walk of it for the listing (was one per checkpoint: objects decoded grew with the square of
    the source's length). Twice the checkpoints, at most about twice the objects decoded."""
    from objstore.storage import codec

    saver = ObjstoreSaver(str(tmp_path / "s"))
    for thread, n in (("small", 30), ("big", 60)):
        ids = _chain(saver, thread, n, values=lambda i: {"x": i})
        for cid in ids:
            saver.put_writes({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}, [("x", "w")], "t")
        saver.copy_thread(thread, thread + "-copy")
    fresh = ObjstoreSaver(saver.log.store.root)
    decoded = {}
    for thread, n in (("small", 30), ("big", 60)):
        before = codec.STATS["objects_decoded"]
        got = list(fresh.list({"configurable": {"thread_id": thread + "-copy"}}))
        decoded[thread] = codec.STATS["objects_decoded"] - before
        assert len(got) == n and all([(w[1], w[2]) for w in t.pending_writes] == [("x", "w")] for t in got)
    assert decoded["big"] <= 2.5 * decoded["small"], decoded


def test_another_tools_run_naming_the_thread_is_not_one_of_its_namespaces(tmp_path):
    """Runs of other tools may carry ``thread_id=T`` (alone, or with labels of their own): the
    saver's namespaces are the runs labelled exactly thread_id and checkpoint_ns. list, copy_thread
    and delete_thread leave the others alone (was: list raised KeyError 'checkpoint_ns',
    copy_thread Conflict, delete_thread deleted them)."""
    saver = ObjstoreSaver(str(tmp_path / "s"))
    log = saver.log
    alone = log.start_run(labels={"thread_id": "T"})
    extra = log.start_run(labels={"thread_id": "T", "checkpoint_ns": "", "app": "other"})
    ids = _chain(saver, "T", 2, values=lambda i: {"x": i})
    assert _ids(saver, "T") == ids[::-1] and _ids(saver, "T", ns="") == ids[::-1]
    saver.copy_thread("T", "U")
    assert _ids(saver, "U") == ids[::-1]
    assert log.find_runs(thread_id="U") == [log.find_run(thread_id="U", checkpoint_ns="")]
    saver.delete_thread("T")
    assert _ids(saver, "T") == [] and sorted(log.find_runs(thread_id="T")) == sorted([alone, extra])
    assert verify(log) == []


def test_prune_of_a_source_leaves_its_copys_history(tmp_path):
    """A copy reads its history from the source; ``prune(source, keep_latest)`` deletes records,
    and gc removes their bodies from every reader, the copy's included: the copy's listing then
    raised BodyRemoved. Now the checkpoints a live copy inherits are kept (the copy, a thread of
    its own, reads back whole after gc); the source's others go."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    ids = _chain(saver, "src", 3, values=lambda i: {"x": i})
    saver.copy_thread("src", "dst")
    more = _chain(saver, "src", 1, values=lambda i: {"x": "side"})  # a root put after the copy: not the copy's
    cfg = {"configurable": {"thread_id": "src", "checkpoint_ns": "", "checkpoint_id": more[0]}}
    cp = empty_checkpoint()
    cp["channel_values"], cp["channel_versions"] = {"x": "last"}, {"x": 9}
    last = saver.put(cfg, cp, {"source": "loop", "step": 9}, cp["channel_versions"])["configurable"]["checkpoint_id"]
    assert _ids(saver, "dst") == ids[::-1]
    saver.prune(["src"], strategy="keep_latest")
    assert _ids(saver, "src") == [last, *ids[::-1]]  # more[0] went; the copy's three stay
    G.gc(saver.log.store)
    fresh = ObjstoreSaver(root)
    assert _ids(fresh, "dst") == ids[::-1]
    t = fresh.get_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": "", "checkpoint_id": ids[0]}})
    assert t.checkpoint["channel_values"] == {"x": 0}
    assert verify(fresh.log) == []


@pytest.mark.slow
def test_a_fresh_reader_of_a_copy_sees_its_sources_deleted_checkpoints_as_deleted(tmp_path):
    """``delete_for_runs`` deletes a source's checkpoints, and (as SqliteSaver's copied rows would
    be) the copy's inherited ones with them. A fresh process listing the copy before anything of
    the source listed them still (the core's walk applies only the deletions of runs this process
    has viewed), and after gc raised BodyRemoved."""
    import subprocess
    import sys

    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    ids = _chain(saver, "src", 4, values=lambda i: {"x": i}, run_ids=["r1", "r1", "r2", "r2"])
    saver.copy_thread("src", "dst")
    saver.delete_for_runs(["r1"])
    code = ("from objstore.integrations.langgraph import ObjstoreSaver\n"
            f"s = ObjstoreSaver({root!r})\n"
            "print([t.config['configurable']['checkpoint_id'] for t in s.list({'configurable': {'thread_id': 'dst'}})])")
    for when in ("before gc", "after gc"):
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert got.returncode == 0, (when, got.stderr[-400:])
        assert got.stdout.strip() == str([ids[3], ids[2]]), when
        G.gc(saver.log.store)


def test_list_by_checkpoint_id_is_a_label_lookup_not_a_scan(tmp_path):
    """``list({"configurable": {"thread_id": T, "checkpoint_id": C}})`` (SqliteSaver: WHERE
    checkpoint_id = ?) reads C's records, not every checkpoint of the thread (was: a scan that
    decoded each one, 60 checkpoints for one tuple)."""
    from objstore.storage import codec

    saver = ObjstoreSaver(str(tmp_path / "s"))
    ids = _chain(saver, "t", 60, values=lambda i: {"x": i})
    fresh = ObjstoreSaver(saver.log.store.root)
    fresh.log.find_run(thread_id="t", checkpoint_ns="")  # the open and the run's refs, not counted
    before = codec.STATS["objects_decoded"]
    got = list(fresh.list({"configurable": {"thread_id": "t", "checkpoint_id": ids[0]}}))
    decoded = codec.STATS["objects_decoded"] - before
    assert [t.checkpoint["channel_values"] for t in got] == [{"x": 0}]
    assert [t.config["configurable"]["checkpoint_id"] for t in got] == [ids[0]]
    assert decoded <= 10, decoded
    assert list(fresh.list({"configurable": {"thread_id": "t", "checkpoint_id": "no-such-id"}})) == []
