"""A checkpoint names its list channels' parts through a tree shared with its parent (partree.py).

The tree alone (no store): every list round-trips through ``build`` and ``expand`` whatever edits
lead to it, a put that appends one element makes exactly the nodes a base-F carry needs, and a node
of the wrong size or height is refused. On a store: a thread longer than one node reads back equal
after a fresh open, ``show``/``diff`` read through the nodes, ``prune`` deletes the nodes only pruned
checkpoints named so gc erases what only they held, gc keeps a node a deleted checkpoint alone named
while the node itself is live, a copy writes its own nodes, and verify follows the nodes' refs."""

from __future__ import annotations

import os
import threading

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from test_erasure import found

import objstore
from objstore import verify
from objstore.errors import InvalidRecord
from objstore.integrations.langgraph import ObjstoreSaver, present
from objstore.integrations.langgraph import partree as T
from objstore.integrations.langgraph.saver import CHECKPOINT
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G

F = T.FANOUT


class Nodes:
    """An in-memory node table: ids are not content hashes (as a record's id depends on its place)."""

    def __init__(self) -> None:
        self.table: dict[bytes, tuple[int, tuple[bytes, ...]]] = {}
        self.made = 0

    def make(self, height, kids):
        out = []
        for k in kids:
            assert len(k) == F and all(len(x) == 32 for x in k)
            oid = blake3.blake3(f"node {len(self.table)}".encode()).digest()
            self.table[oid] = (height, tuple(k))
            out.append(oid)
        self.made += len(kids)
        return out

    def children(self, oid):
        return self.table[oid]


def _ids(values):
    return [blake3.blake3(str(v).encode()).digest() for v in values]


def _reached(top, n, nodes):
    return T.nodes(top, n, F, nodes.children)


edits = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 40)),
    st.tuples(st.just("edit"), st.integers(0, 10_000)),
    st.tuples(st.just("drop"), st.integers(0, 10_000)),
    st.tuples(st.just("cut"), st.integers(0, 10_000)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(edits, min_size=1, max_size=12))
def test_any_list_round_trips_and_reuses_only_its_parents_nodes(ops):
    nodes = Nodes()
    values: list = []
    parent = None
    counter = 0
    for op, k in ops:
        if op == "append":
            values = values + [f"v{counter + i}" for i in range(k)]
            counter += k
        elif op == "edit" and values:
            values = values[:k % len(values)] + [f"e{counter}"] + values[k % len(values) + 1:]
            counter += 1
        elif op == "drop" and values:
            values = values[:k % len(values)] + values[k % len(values) + 1:]
        elif op == "cut" and values:
            values = values[:k % len(values)]
        ids = _ids(values)
        before = set(nodes.table)
        top = T.build(ids, F, nodes.make, parent)
        assert len(top) == len(T.shape(len(ids), F))
        assert T.expand(top, len(ids), F, nodes.children) == ids
        reached = _reached(top, len(ids), nodes)
        old = reached & before
        if parent is not None:
            assert old <= _reached(parent[0], parent[1], nodes)  # reused: only the parent's nodes
        else:
            assert old == set()
        parent = (top, len(ids), nodes.children)


def test_an_append_makes_exactly_the_nodes_a_carry_needs():
    nodes = Nodes()
    parent = None
    values: list = []
    for n in range(0, 3 * F ** 2 + 5):
        values.append(f"m{n}")
        made = nodes.made
        top = T.build(_ids(values), F, nodes.make, parent)
        carries, m = 0, n + 1  # n + 1 elements now: one node per trailing zero digit of n + 1 in base F
        while m % F == 0:
            carries += 1
            m //= F
        assert nodes.made - made == carries, n
        digits, m = 0, n + 1
        while m:
            m, d = divmod(m, F)
            digits += d
        assert len(top) == digits
        parent = (top, n + 1, nodes.children)


def test_a_node_of_the_wrong_size_or_height_is_refused():
    nodes = Nodes()
    ids = _ids(range(F * 2 + 1))
    top = T.build(ids, F, nodes.make)
    first = top[0]
    h, kids = nodes.table[first]
    nodes.table[first] = (h, kids[:-1])
    with pytest.raises(InvalidRecord, match="holds 7 ids of height 1"):
        T.expand(top, len(ids), F, nodes.children)
    nodes.table[first] = (2, kids)
    with pytest.raises(InvalidRecord, match="wants 8 of height 1"):
        T.expand(top, len(ids), F, nodes.children)
    with pytest.raises(InvalidRecord, match="has 3 top ids, the record lists 2"):
        T.expand(top[:2], len(ids), F, nodes.children)


def test_a_forged_tree_that_shares_a_node_or_names_a_negative_length_is_refused_at_once():
    """A writer may forge a checkpoint: one node named eight times under another would make a reader expand 8^h
    ids from h + 1 records, and a negative length never ends a base-8 count. Both are refused before any work."""
    nodes = Nodes()
    [leaf] = nodes.make(1, [_ids(range(F))])
    [mid] = nodes.make(2, [[leaf] * F])
    with pytest.raises(InvalidRecord, match=f"names node {leaf.hex()} twice"):
        T.expand([mid], F * F, F, nodes.children)
    outcome: list = []

    def forged() -> None:
        try:
            T.flatten([["messages", -5]], [leaf], F, nodes.children)
        except InvalidRecord as e:
            outcome.append(str(e))

    t = threading.Thread(target=forged, daemon=True)
    t.start()
    t.join(10)
    assert outcome == ["invalid record: a LangGraph list channel's length must be a count, got -5"]


# -- on a store ---------------------------------------------------------------------------------


def _put(saver, values, parent=None, thread="t"):
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    conf = {"thread_id": thread, "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
    return saver.put({"configurable": conf}, cp, {"source": "loop", "step": 0}, cp["channel_versions"])["configurable"]["checkpoint_id"]


def _get(saver, cid, thread="t"):
    t = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}})
    return t.checkpoint["channel_values"]


def _records(log, kind, thread="t"):
    """The live records of ``kind`` of the thread's run, newest first."""
    run = log.find_run(thread_id=thread, checkpoint_ns="")
    return [r for r in log.iter_records(run, all_branches=True) if r.kind == kind]


def _chat(saver, turns, thread="t", start=None):
    """A chat growing one message per turn; [(checkpoint id, values)] in order."""
    out, parent, msgs = [], start, []
    for i in range(turns):
        msgs = msgs + [f"{thread} message {i}"]
        values = {"messages": msgs, "turn": i}
        parent = _put(saver, values, parent, thread)
        out.append((parent, values))
    return out


def test_a_long_thread_reads_back_through_its_nodes_after_a_fresh_open(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(objstore.open_store(root, fsync="off"))
    puts = _chat(saver, 3 * F * F + 3)  # three height-2 nodes on top at the end
    fresh = ObjstoreSaver(root)
    for cid, values in puts[::17] + puts[-2:]:
        assert _get(fresh, cid) == values
    last = _records(fresh.log, CHECKPOINT)[0]
    assert last.body["fanout"] == F and len(last.body["parts"]) == 3 + 3 + 1  # [3, 0, 3] in base 8 for 195 messages, + turn
    nodes = _records(fresh.log, T.NODE)
    assert len(nodes) == 195 // F + 195 // F ** 2  # every node made once, never again
    assert verify(fresh.log) == []


def test_show_and_diff_read_through_the_nodes(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(objstore.open_store(root, fsync="off"))
    (a, va), = _chat(saver, 20)[-1:]
    edited = list(va["messages"])
    edited[13] = "an edited message"
    b = _put(saver, {"messages": edited, "turn": 20}, a)
    ra, rb = (saver.log.find_records(saver.log.find_run(thread_id="t", checkpoint_ns=""), checkpoint_id=c)[0] for c in (a, b))
    lines = present.channel_lines(saver.log, ra.body, saver.serde)
    assert "  messages: list of 20" in lines and any(x.endswith("'t message 19'") for x in lines), lines
    d = present.differences(saver.log, ra.body, rb.body)
    assert [(x["channel"], x["index"]) for x in d] == [("messages", 13), ("turn", None)], d
    assert "an edited message" in d[0]["b"]


def test_prune_deletes_the_nodes_only_pruned_checkpoints_named_and_gc_erases_their_parts(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    secret = os.urandom(24).hex()
    puts = _chat(saver, 2 * F + 3)
    msgs = list(puts[-1][1]["messages"])
    msgs[2] = f"my card is {secret}"  # only the middle checkpoint names it (through a node of its own)
    mid = _put(saver, {"messages": msgs, "turn": 99}, puts[-1][0])
    msgs[2] = "redacted by the user"
    last = _put(saver, {"messages": msgs, "turn": 100}, mid)
    assert found(root, secret.encode()) != []
    nodes_before = {r.id for r in _records(saver.log, T.NODE)}

    saver.prune(["t"])
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    covered = set(saver.log.store.covered_records(run))
    latest, = _records(saver.log, CHECKPOINT)  # the one prune keeps
    kept = T.tree_nodes(latest.body["layout"], latest.body["parts"], F, saver.trees.children)
    assert covered & nodes_before == nodes_before - kept  # exactly the nodes the latest does not name
    assert nodes_before - kept  # and there were some (the secret's node, the nodes the edit replaced)
    G.gc(saver.log.store)
    assert found(root, secret.encode()) == []
    fresh = ObjstoreSaver(root)
    assert _get(fresh, last) == {"messages": msgs, "turn": 100}
    assert verify(fresh.log) == []


def test_gc_keeps_a_live_node_that_only_a_deleted_checkpoint_named(tmp_path):
    """A user deletes checkpoint records by hand (not through the saver): the node only they named is
    a live record still, so gc must not strip it as it strips the blobs only deleted records name."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    puts = _chat(saver, F + 1)
    msgs = list(puts[-1][1]["messages"])
    msgs[0] = "edited"
    edited = _put(saver, {"messages": msgs, "turn": 50}, puts[-1][0])
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    rec = saver.log.find_records(run, checkpoint_id=edited)[0]
    own = T.tree_nodes(rec.body["layout"], rec.body["parts"], F, saver.trees.children)
    D.delete_records(saver.log, run, [rec.id], reason="by hand")
    G.gc(saver.log.store)
    fresh = ObjstoreSaver(root)
    for oid in own:
        assert T.node_of(fresh.log.record(oid))[0] == 1  # its body is still there
    assert verify(fresh.log) == []
    assert _get(fresh, puts[-1][0]) == puts[-1][1]


def test_a_copy_writes_its_own_nodes_and_outlives_the_sources_prune(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    puts = _chat(saver, F + 2, thread="src")
    saver.copy_thread("src", "dst")
    more = _chat(saver, F + 1, thread="dst", start=puts[-1][0])
    saver.prune(["src"])
    G.gc(saver.log.store)
    fresh = ObjstoreSaver(root)
    for cid, values in more:
        assert _get(fresh, cid, "dst") == values
    dst = fresh.log.find_run(thread_id="dst", checkpoint_ns="")
    first = [r for r in fresh.log.iter_records(dst) if r.run == dst and r.kind == CHECKPOINT][0]
    for oid in T.tree_nodes(first.body["layout"], first.body["parts"], F, fresh.trees.children):
        assert fresh.log.record(oid).run == dst  # not a node of the source's log
    assert verify(fresh.log) == []


def test_a_checkpoint_naming_a_missing_or_wrong_node_is_refused_and_verify_names_it(tmp_path):
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(objstore.open_store(root, fsync="off"))
    (cid, _), = _chat(saver, F)[-1:]
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    rec = saver.log.find_records(run, checkpoint_id=cid)[0]
    writes_like = _records(saver.log, CHECKPOINT)[0].id  # a record that is no node
    missing = blake3.blake3(b"no such node").digest()
    blob = saver.log.put_blob(b"not a node")
    for bad, forged in ((writes_like, "x1"), (missing, "x2"), (blob, "x3")):
        body = dict(rec.body, checkpoint_id=forged, parts=[bad, *rec.body["parts"][1:]])
        saver.log.append(run, CHECKPOINT, body, labels={"checkpoint_id": forged})
    fresh = ObjstoreSaver(root)
    with pytest.raises(InvalidRecord, match="as a parts node; it is a x.langgraph.checkpoint record"):
        _get(fresh, "x1")
    with pytest.raises(objstore.errors.ObjectNotFound):
        _get(fresh, "x2")
    with pytest.raises(InvalidRecord, match=f"names {blob.hex()} as a parts node; object {blob.hex()} is a blob, not a record"):
        _get(fresh, "x3")
    problems = verify(fresh.log)
    assert [(p.code, p.subject) for p in problems] == [("missing-object", missing.hex())], problems


def test_a_fork_reuses_only_nodes_of_its_own_lineage(tmp_path):
    """Time travel to a checkpoint before a node was made, then the same messages again: the fork's
    checkpoint names a node of its own branch, never the equal one the other branch made after the
    fork point (prune keeps nodes by lineage)."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(objstore.open_store(root, fsync="off"))
    puts = _chat(saver, 2 * F)  # the node of messages 8..15 is made by the last put
    back, values = puts[F + 2]
    again = _put(saver, puts[-1][1], back)  # resumes an older checkpoint: a fork, with the newest's values
    fresh = ObjstoreSaver(root)
    assert _get(fresh, again) == puts[-1][1] and _get(fresh, back) == values
    run = fresh.log.find_run(thread_id="t", checkpoint_ns="")
    rec = fresh.log.find_records(run, checkpoint_id=again)[0]
    assert rec.branch == 1
    lineage = {x.id for x in fresh._walk_back(rec.id)}
    named = fresh.trees.nodes([rec])
    assert len(named) == 2 and named <= lineage
    assert verify(fresh.log) == []
