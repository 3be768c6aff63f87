"""Adversarial review of the parts trees (#19): what a user or a racing writer can do to a checkpoint's nodes.

Each test here failed on t-core at cea0a95 (the review's starting point):

- ``prune`` lists the thread's checkpoints, then deletes the nodes only the listed-and-doomed ones name. A put
  that lands between the two (another thread or process resuming an older checkpoint, as LangGraph's time
  travel and ``update_state`` do) reuses that checkpoint's nodes; prune then deletes them and the new live
  checkpoint never reads again (Deleted; after gc BodyRemoved), while verify reports nothing. Before the trees a
  checkpoint named its part blobs itself, so a deletion of its parent never reached it;
- ``delete_for_runs`` has the same window between its listing and its deletion;
- ``partree.expand`` refuses a node named twice inside one channel, but a checkpoint whose many channels each
  name the same (honest) high node is expanded once per channel: no writer shares a node across channels;
- a forged ``layout`` entry that is no [channel, n] pair raises ValueError (a traceback at the CLI)."""

from __future__ import annotations

import threading

import pytest
from helpers import run_cli
from langgraph.checkpoint.base import empty_checkpoint
from test_langgraph_partree import F, _get, _put

from objstore.errors import InvalidRecord
from objstore.integrations.langgraph import ObjstoreSaver
from objstore.integrations.langgraph.saver import CHECKPOINT
from objstore.lifecycle import gc as G


def _checkpoints(saver, thread="t"):
    run = saver.log.find_run(thread_id=thread, checkpoint_ns="")
    return [r for r in saver.log.iter_records(run, all_branches=True, kinds=[CHECKPOINT])]


def _meanwhile(deleter, put, delete) -> list[str]:
    """Run ``delete()`` (a prune or delete_for_runs of ``deleter``) with ``put()`` (another saver's put, in a thread)
    ordered between its listing and its deletion: the instance hook on ``deleter.trees.orphans`` starts the put and
    lets it finish first, unless the put waits on a lock the deletion holds (the fixed code), when the hook gives up
    after 3 s (an unlocked put takes milliseconds) and the put lands after. Returns the put's checkpoint id."""
    listed_then = deleter.trees.orphans
    resumed: list[str] = []
    put_done = threading.Event()

    def resume():
        try:
            resumed.append(put())
        finally:
            put_done.set()

    resumer = threading.Thread(target=resume)

    def put_meanwhile(*a, **k):
        if not resumer.is_alive() and not put_done.is_set():
            resumer.start()
            put_done.wait(3)
        return listed_then(*a, **k)

    deleter.trees.orphans = put_meanwhile
    delete()
    resumer.join()
    return resumed


def test_prune_while_a_writer_resumes_an_older_checkpoint_keeps_the_new_checkpoint_readable(tmp_path):
    """The race made deterministic: the writer (another thread) puts after prune has listed the checkpoints and
    before it deletes. The instance hook on ``trees.orphans`` only orders the two (both are the real code): it
    starts the writer and lets it finish first, unless the writer waits on a lock prune holds (a fixed prune),
    when the hook gives up waiting after a while and the put lands after prune."""
    root = str(tmp_path / "s")
    writer = ObjstoreSaver(root)
    base = [f"message {i}" for i in range(2 * F + 3)]
    b = _put(writer, {"messages": base})
    edited = list(base)
    edited[2] = "edited"  # the newest no longer names B's first node
    _put(writer, {"messages": edited}, b)
    pruner = ObjstoreSaver(root)
    resumed = _meanwhile(pruner, lambda: _put(writer, {"messages": base + ["after B"]}, b), lambda: pruner.prune(["t"]))  # reuses B's nodes
    assert _get(ObjstoreSaver(root), resumed[0]) == {"messages": base + ["after B"]}
    G.gc(pruner.log.store)
    assert _get(ObjstoreSaver(root), resumed[0]) == {"messages": base + ["after B"]}


@pytest.mark.slow
def test_prune_in_a_loop_beside_three_writer_threads_leaves_every_live_checkpoint_readable(tmp_path):
    """The same race, unforced: three threads of one saver continue their own chats from one checkpoint (so
    most puts fork) while a fourth prunes the thread in a loop. On t-core every run of this left the thread's
    surviving checkpoints unreadable (3 of 3 runs: all of them)."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    base = [f"open {i}" for i in range(2 * F + 3)]
    start = _put(saver, {"messages": base})
    done, errors = threading.Event(), []

    def chat(name):
        try:
            msgs, parent = base, start
            for i in range(25):
                msgs = msgs + [f"{name} {i}"]
                parent = _put(saver, {"messages": msgs}, parent)
        except Exception as e:  # reported below with its type
            errors.append((name, repr(e)))

    def prune():
        while not done.is_set():
            try:
                saver.prune(["t"])
            except Exception as e:
                errors.append(("prune", repr(e)))

    writers = [threading.Thread(target=chat, args=(n,)) for n in "ABC"]
    pruner = threading.Thread(target=prune)
    pruner.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.set()
    pruner.join()
    assert errors == []
    fresh = ObjstoreSaver(root)
    unreadable = []
    for r in _checkpoints(fresh):
        try:
            _get(fresh, r.body["checkpoint_id"])
        except Exception as e:
            unreadable.append((r.body["checkpoint_id"], type(e).__name__))
    assert unreadable == []


def test_a_checkpoint_whose_channels_share_one_node_is_refused(tmp_path):
    """One height-3 node (512 messages) named by every channel of a forged checkpoint: 1000 channels in a record
    of ~45 KB expand to 512,000 part ids (about 1 s and 20 MB here; a height-4 node makes that 4M ids), where a
    flat layout of that size names ~1400. ``expand``'s ``seen`` is per channel; a writer never shares a node
    between two channels (``PartTrees.tops`` reuses a parent's nodes by channel name), so one ``seen`` per
    checkpoint refuses this at the second channel."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    n = F ** 3
    cid = _put(saver, {"messages": [f"m{i}" for i in range(n)]})
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    rec = saver.log.find_records(run, checkpoint_id=cid)[0]
    (node,) = rec.body["parts"]
    body = dict(rec.body, checkpoint_id="shared", layout=[["a", n], ["b", n]], parts=[node, node])
    saver.log.append(run, CHECKPOINT, body, labels={"checkpoint_id": "shared"})
    with pytest.raises(InvalidRecord, match="twice"):
        _get(ObjstoreSaver(root), "shared")


def _put_in(saver, values, lg_run, parent=None):
    """``_put`` with a LangGraph run id in the metadata (what ``delete_for_runs`` selects by)."""
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    conf = {"thread_id": "t", "checkpoint_ns": ""} | ({"checkpoint_id": parent} if parent else {})
    md = {"source": "loop", "step": 0, "run_id": lg_run}
    return saver.put({"configurable": conf}, cp, md, cp["channel_versions"])["configurable"]["checkpoint_id"]


def test_delete_for_runs_while_a_writer_resumes_a_doomed_checkpoint_keeps_the_new_checkpoint_readable(tmp_path):
    """``delete_for_runs`` has the same window as prune: it lists the checkpoints that stay, then deletes the nodes
    only the doomed ones name. A put of another LangGraph run resuming a doomed checkpoint in between (ordered
    as in the prune test) reuses those nodes."""
    root = str(tmp_path / "s")
    writer = ObjstoreSaver(root)
    base = [f"message {i}" for i in range(2 * F + 3)]
    b = _put_in(writer, {"messages": base}, "run-1")
    deleter = ObjstoreSaver(root)
    resumed = _meanwhile(deleter, lambda: _put_in(writer, {"messages": base + ["after B"]}, "run-2", b),  # reuses B's nodes
                         lambda: deleter.delete_for_runs(["run-1"]))
    assert _get(ObjstoreSaver(root), resumed[0]) == {"messages": base + ["after B"]}


@pytest.mark.parametrize("entry", [["messages"], ["messages", 20, "extra"]])
def test_a_forged_layout_entry_that_is_no_pair_is_one_typed_error_at_read_show_and_diff(tmp_path, entry):
    """The schema checks ``layout`` is a list, not that each entry is a [channel, n] pair: ``partree.flatten``
    (and ``present.channel_lines`` after it) unpack each entry, so a forged entry raised ValueError — a
    traceback and exit 1 at ``objstore show`` and ``objstore diff RUN 0 1``, ValueError from ``get_tuple``."""
    root = str(tmp_path / "s")
    saver = ObjstoreSaver(root)
    base = [f"message {i}" for i in range(2 * F + 3)]
    b = _put(saver, {"messages": base, "turn": 1})
    fork = _put(saver, {"messages": base + ["forked"], "turn": 2}, b)
    fork = _put(saver, {"messages": base + ["again"], "turn": 3}, b)  # resumes b: branch 1
    run = saver.log.find_run(thread_id="t", checkpoint_ns="")
    rec = saver.log.find_records(run, checkpoint_id=fork)[0]
    assert rec.branch == 1
    layout = [entry if name == "messages" else [name, n] for name, n in rec.body["layout"]]
    forged = saver.log.append(run, CHECKPOINT, dict(rec.body, checkpoint_id="forged", layout=layout),
                              labels={"checkpoint_id": "forged"}, branch=1)
    with pytest.raises(InvalidRecord):
        _get(ObjstoreSaver(root), "forged")
    for args in (("show", forged.id.hex()), ("diff", run, "0", "1")):
        _, _, err = run_cli(*args, store=root, exit_code=5)
        assert "Traceback" not in err
