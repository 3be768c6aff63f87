"""The saver's commit costs (issue 17): one durable sync per super-step, and the remembered newest checkpoint.

Counted, not timed: fdatasync calls (``os.fdatasync`` wrapped), objects decoded (``codec.STATS``) and
the saver's memory hits. A stale memory (another saver object, another process, a deletion) must
never place a checkpoint: those tests check where the checkpoints went and that the store verifies."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from objstore import open_store, verify
from objstore.errors import Conflict
from objstore.integrations.langgraph import CHECKPOINT, WRITES, ObjstoreSaver
from objstore.integrations.langgraph import newest as NW
from objstore.storage import codec

HERE = os.path.dirname(os.path.abspath(__file__))


class S(TypedDict):
    n: int


def _loop(steps: int):
    """a -> b -> a ... : one task per super-step, ``steps`` super-steps after the input."""
    g = StateGraph(S)
    g.add_node("a", lambda s: {"n": s["n"] + 1})
    g.add_node("b", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_conditional_edges("b", lambda s: END if s["n"] >= steps else "a")
    return g


def _saver(root: str, **kw) -> ObjstoreSaver:
    return ObjstoreSaver(open_store(root, fsync="full"), **kw)


@pytest.fixture
def syncs(monkeypatch):
    """Every fdatasync of this process, counted."""
    n = [0]
    real = os.fdatasync

    def counted(fd: int) -> None:
        n[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    return n


def _run(saver: ObjstoreSaver, thread: str, steps: int, syncs: list[int]) -> int:
    app = _loop(steps).compile(checkpointer=saver)
    before = syncs[0]
    out = app.invoke({"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
    assert out["n"] == steps
    return syncs[0] - before


@pytest.mark.parametrize("sync_writes", [False, True])
def test_a_durable_loop_syncs_once_per_super_step(tmp_path, syncs, sync_writes):
    """durability="sync": each super-step's put_writes (one task's regular writes) and put were two
    fdatasyncs; the put's now covers both, exactly one per step (nothing else syncs). sync_writes=True
    keeps one per call (two threads' commits that meet share one: group commit)."""
    saver = _saver(str(tmp_path / "s"), sync_writes=sync_writes)
    _run(saver, "warm", 4, syncs)  # the kinds, the store's first entries
    short, long = _run(saver, "t1", 10, syncs), _run(saver, "t2", 30, syncs)
    if sync_writes:
        assert long - short > 20, (short, long)
    else:
        assert long - short == 20, (short, long)
    # and every write is there: the latest checkpoint's parent holds the last task's writes
    log = saver.log
    run = log.find_run(thread_id="t2", checkpoint_ns="")
    recs = list(log.records(run, all_branches=True))
    assert sum(r.kind == CHECKPOINT for r in recs) == 32 and sum(r.kind == WRITES for r in recs) == 31
    assert verify(log) == []


def test_special_writes_sync_at_once_and_cover_the_deferred(tmp_path, syncs):
    """In a running graph's step (its config names the durability), a task's regular writes wait for
    the step's put; an ERROR write (it may end the invoke: no put follows) syncs at once, and its sync
    covers the deferred entry before it."""
    saver = _saver(str(tmp_path / "s"))
    cp = empty_checkpoint()
    cp["channel_values"], cp["channel_versions"] = {"x": 1}, {"x": 1}
    cfg = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"step": 0}, {"x": 1})
    cfg = {"configurable": {**cfg["configurable"], "__pregel_durability": "sync"}}
    n = syncs[0]
    saver.put_writes(cfg, [("x", 2)], "task-a")
    assert syncs[0] == n
    saver.put_writes(cfg, [("__error__", ValueError("boom"))], "task-b")
    assert syncs[0] == n + 1
    eng = saver.log.store.logs.run_log(saver.log.find_run(thread_id="t", checkpoint_ns=""))
    assert eng._durable == eng.tables.pos.entry  # the writer's own account: nothing left unsynced
    got = saver.get_tuple(cfg)
    assert got is not None and {(w[0], w[1]) for w in got.pending_writes} == {("task-a", "x"), ("task-b", "__error__")}


@pytest.mark.parametrize("durability", [None, "exit"])
def test_writes_from_outside_a_step_loop_sync_at_once(tmp_path, syncs, durability):
    """A direct call, update_state's (no durability in its config: its Send pushes follow its put) and
    durability="exit"'s (the pending writes follow the last put): nothing put after them, so each syncs."""
    saver = _saver(str(tmp_path / "s"))
    cp = empty_checkpoint()
    cfg = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"step": 0}, {})
    if durability:
        cfg = {"configurable": {**cfg["configurable"], "__pregel_durability": durability}}
    n = syncs[0]
    saver.put_writes(cfg, [("x", 2)], "task-a")
    assert syncs[0] == n + 1


def test_a_put_inside_the_callers_batch_is_not_deferred(tmp_path, syncs):
    """put_writes inside the caller's own batch leaves that batch's commit alone (it syncs as always)."""
    saver = _saver(str(tmp_path / "s"))
    cp = empty_checkpoint()
    cfg = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"step": 0}, {})
    cfg = {"configurable": {**cfg["configurable"], "__pregel_durability": "sync"}}
    n = syncs[0]
    with saver.log.batch():
        saver.put_writes(cfg, [("x", 2)], "task-a")
    assert syncs[0] == n + 1


def test_the_remembered_newest_spares_the_walk(tmp_path, monkeypatch):
    """Each put and put_writes used to walk back from the branch head, decoding at least one record
    each; with the memory, a loop of N steps decodes at least 2N objects fewer. (How many calls the
    memory answers depends on which of a step's put_writes and put takes the lock first: LangGraph
    runs them in two threads, so only a floor is asserted.)"""
    def decoded(steps: int, thread: str, root: str) -> tuple[int, int]:
        saver = ObjstoreSaver(open_store(root, fsync="off"))
        _loop(2).compile(checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": "warm"}}, durability="sync")
        app = _loop(steps).compile(checkpointer=saver)
        before = codec.STATS["objects_decoded"]
        app.invoke({"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
        return codec.STATS["objects_decoded"] - before, saver._newest_mem.hits

    with_mem, hits = decoded(20, "t", str(tmp_path / "a"))
    assert hits >= 20
    monkeypatch.setattr(NW.NewestMemory, "get", lambda self, view: None)
    without, _ = decoded(20, "t", str(tmp_path / "b"))
    assert with_mem + 2 * 20 <= without, (with_mem, without)


def _put(saver: ObjstoreSaver, parent: str | None, who: str) -> str:
    cp = empty_checkpoint()
    cp["channel_values"], cp["channel_versions"] = {"who": who}, {"who": 1}
    conf = {"thread_id": "t", "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
    return saver.put({"configurable": conf}, cp, {"source": "loop", "writer": who}, {"who": 1})["configurable"]["checkpoint_id"]


def _branches(log, run) -> dict[str, int]:
    return {r.body["checkpoint_id"]: r.branch for r in log.records(run, all_branches=True) if r.kind == CHECKPOINT and "checkpoint_id" in r.body}


def _forks_beside(a, root, c1, c2, c3b):
    """Saver A's put from C2 once another writer continued from it with C3b: not placed from A's memory (no hit), a
    fork beside C3b, which stays on branch 0. The store, opened afresh."""
    hits = a._newest_mem.hits
    c3a = _put(a, c2, "a")
    assert a._newest_mem.hits == hits
    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    assert _branches(log, run) == {c1: 0, c2: 0, c3b: 0, c3a: 1}
    return log


def test_another_saver_continuing_the_thread_makes_the_memory_unused(tmp_path):
    """Saver A remembers C2 as the newest; saver B (its own store object: another writer) continues
    from C2. A's put from C2 again is not placed from memory: it forks, B's checkpoint stays."""
    root = str(tmp_path / "s")
    a, b = _saver(root), _saver(root)
    c1 = _put(a, None, "a")
    c2 = _put(a, c1, "a")
    c3b = _put(b, c2, "b")
    log = _forks_beside(a, root, c1, c2, c3b)
    assert verify(log) == []


def test_a_stale_memory_is_caught_by_expect_head(tmp_path, monkeypatch):
    """Were the memory trusted without the view check, it would name C2's record as the head while
    B's C3 is there: the put appends with that remembered head as expect_head, so it is a Conflict,
    the memory is forgotten and the retry reads the log and forks. Nothing is placed after C3."""
    root = str(tmp_path / "s")
    a, b = _saver(root), _saver(root)
    c1 = _put(a, None, "a")
    c2 = _put(a, c1, "a")
    c3b = _put(b, c2, "b")

    def blind(self, view):  # noqa: ANN001, ANN202 - the view check removed
        m = self._runs.get(view.run)
        if m is not None:
            self.hits += 1
        return m

    conflicts = [0]
    real_append = type(a.log).append

    def counted_append(self, *args, **kw):  # noqa: ANN001, ANN202
        try:
            return real_append(self, *args, **kw)
        except Conflict:
            conflicts[0] += 1
            raise

    monkeypatch.setattr(NW.NewestMemory, "get", blind)
    monkeypatch.setattr(type(a.log), "append", counted_append)
    hits = a._newest_mem.hits
    c3a = _put(a, c2, "a")
    assert a._newest_mem.hits == hits + 1 and conflicts[0] == 1
    monkeypatch.undo()
    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    assert _branches(log, run) == {c1: 0, c2: 0, c3b: 0, c3a: 1}
    assert verify(log) == []


def test_a_deletion_by_another_saver_makes_the_memory_unused(tmp_path):
    """A records deletion moves no branch head: the memory names the deletions head too, so a prune
    by another saver is seen (the walk runs again) and the next put still goes on after C3."""
    root = str(tmp_path / "s")
    a, b = _saver(root), _saver(root)
    c1 = _put(a, None, "a")
    c2 = _put(a, c1, "a")
    c3 = _put(a, c2, "a")
    b.prune(["t"], strategy="keep_latest")
    hits = a._newest_mem.hits
    c4 = _put(a, c3, "a")
    assert a._newest_mem.hits == hits
    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    assert _branches(log, run)[c4] == 0
    assert [t.config["configurable"]["checkpoint_id"] for t in a.list({"configurable": {"thread_id": "t"}})] == [c4, c3]
    assert verify(log) == []


@pytest.mark.slow
def test_another_process_continuing_the_thread_makes_the_memory_unused(tmp_path):
    """As above with an OS process (tests/integrations/lg_resume.py) as the other writer."""
    root = str(tmp_path / "s")
    a = _saver(root)
    c1 = _put(a, None, "a")
    c2 = _put(a, c1, "a")
    go = str(tmp_path / "go")
    open(go, "w").close()
    p = subprocess.run([sys.executable, os.path.join(HERE, "lg_resume.py"), root, "t", c2, "B", go],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    c3b = p.stdout.decode().strip()
    log = _forks_beside(a, root, c1, c2, c3b)
    t = ObjstoreSaver(root).get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": c3b}})
    assert t is not None and [(w[0], w[2]) for w in t.pending_writes] == [("task-B", "next after B")]
    assert verify(log) == []
