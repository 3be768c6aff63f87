"""``ObjstoreSaver(..., on_concurrent="raise")``: two workers continuing one thread at once are told
(issue 14). By default both checkpoints are kept and the second is a fork (a visible branch, nobody
told: tests/integrations/test_langgraph_concurrency.py); with ``raise``, a put whose parent is no longer its
branch's newest checkpoint raises ``ParentSuperseded`` (a Conflict, exit 7) and writes nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from objstore import open_store, verify
from objstore.errors import Conflict, InvalidInput, ObjstoreError, ParentSuperseded
from objstore.integrations.langgraph import CHECKPOINT, AsyncObjstoreSaver, ObjstoreSaver

HERE = os.path.dirname(os.path.abspath(__file__))


def _cp(value):
    cp = empty_checkpoint()
    cp["channel_values"] = {"who": value}
    cp["channel_versions"] = {"who": 1}
    return cp


def _start(root):
    saver = ObjstoreSaver(root)
    cfg = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _cp("start"), {"source": "loop", "step": 0}, {"who": 1})
    return cfg["configurable"]["checkpoint_id"]


@pytest.mark.slow
def test_two_processes_continuing_one_checkpoint_the_second_is_told(tmp_path):
    root = str(tmp_path / "s")
    parent = _start(root)
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "lg_resume.py"), root, "t", parent, name, go, "raise"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in ("A", "B")]
    open(go, "w").close()
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 7], [o[1][-2000:] for o in outs]
    lost = next(o[0].decode() for p, o in zip(procs, outs, strict=True) if p.returncode == 7)
    assert lost.startswith(f"ParentSuperseded: parent superseded: checkpoint {parent} of thread 't'")
    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    assert sorted(log.view(run).heads) == [0]  # no fork
    assert len([r for r in log.records(run, all_branches=True) if r.kind == CHECKPOINT]) == 2
    assert verify(log) == []


def test_the_default_still_forks_and_time_travel_needs_it(tmp_path):
    root = str(tmp_path / "s")
    parent = _start(root)
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent}}
    ObjstoreSaver(root).put(conf, _cp("A"), {"step": 1}, {"who": 1})
    strict = ObjstoreSaver(root, on_concurrent="raise")
    with pytest.raises(ParentSuperseded) as e:
        strict.put(conf, _cp("B"), {"step": 1}, {"who": 1})
    assert isinstance(e.value, Conflict) and isinstance(e.value, ObjstoreError) and e.value.exit_code == 7
    log = open_store(root)
    run = log.find_run(thread_id="t", checkpoint_ns="")
    assert sorted(log.view(run).heads) == [0]
    ObjstoreSaver(root).put(conf, _cp("B"), {"step": 1}, {"who": 1})  # the default: a fork, as before
    assert sorted(open_store(root).view(run).heads) == [0, 1]
    with pytest.raises(InvalidInput, match="on_concurrent must be .fork. or .raise."):
        ObjstoreSaver(root, on_concurrent="merge")


def test_the_async_saver_raises_too(tmp_path):
    root = str(tmp_path / "s")
    parent = _start(root)
    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent}}

    async def main():
        a = AsyncObjstoreSaver(root, on_concurrent="raise")
        b = AsyncObjstoreSaver(root, on_concurrent="raise")
        first = await a.aput(conf, _cp("A"), {"step": 1}, {"who": 1})
        with pytest.raises(ParentSuperseded):
            await b.aput(conf, _cp("B"), {"step": 1}, {"who": 1})
        return await b.aput(first, _cp("B2"), {"step": 2}, {"who": 1})  # continuing the newest is fine

    asyncio.run(main())
    run = open_store(root).find_run(thread_id="t", checkpoint_ns="")
    assert sorted(open_store(root).view(run).heads) == [0]
