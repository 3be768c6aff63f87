"""objstore.aio: AsyncRunLog's calls do not block the event loop, and a batch belongs to one task.

Real stores in tmp_path; the writer lock is held by another OS process (tests/runs/aio_holder.py);
commits are counted by the log's entry numbers; "nothing written" compares every file's bytes.
No timed assertions: the loop's liveness is counted in ticks of a ticker task while a call waits.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import threading

import pytest
from helpers import log_engine_of, raw_objects, snapshot_tree

import objstore.aio
from objstore import RunLog, Store
from objstore.aio import AsyncRunLog
from objstore.errors import InvalidInput, LockTimeout, RunNotFound
from objstore.lifecycle.delete import delete_run
from objstore.runs.query import episode
from objstore.storage import codec

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_780_000_000.0  # fixed record times: two stores written alike are byte-identical


class Boom(Exception):
    """Raised inside a batch on purpose."""


def _entries(store: Store, run: str) -> int:
    """The entries of run ``run``'s log (the store's one log before format 6)."""
    return log_engine_of(store, run).refresh().entry


def _batch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "objstore-aio-batch"]


def _join_batch_threads() -> None:
    for t in _batch_threads():
        t.join(timeout=60)
        assert not t.is_alive(), "a batch thread was not released"


def _holder(root: str, run: str) -> subprocess.Popen:
    """Another process holding run ``run``'s writer lock (the store's before format 6) in an open batch, until told
    to commit."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "aio_holder.py"), root, run],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


def _release(p: subprocess.Popen) -> int:
    """Let the holder commit; the entry number of its commit."""
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("go\n")
    p.stdin.flush()
    line = p.stdout.readline()
    assert p.wait(timeout=60) == 0
    word, entry = line.split()
    assert word == "committed"
    return int(entry)


def test_the_loop_keeps_running_while_another_process_holds_the_writer_lock(tmp_path):
    """A ticker task ticks while an append waits for the lock another process holds; the append
    lands right after that process's commit."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-block")
    alog = AsyncRunLog(log)
    holder = _holder(root, run)
    try:
        async def main():
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)

            tick = asyncio.create_task(ticker())
            append = asyncio.create_task(alog.record_attempt(run, 1, 0, "succeeded", context={"by": "the loop"}))
            read = await alog.records(run)  # readers never wait for the lock, nor does the loop
            start = ticks
            while ticks < start + 50:
                await asyncio.sleep(0.001)
            assert not append.done(), "the append finished while another process held the writer lock"
            entry = await asyncio.get_running_loop().run_in_executor(None, _release, holder)
            rec = await append
            tick.cancel()
            return rec, read, entry

        rec, read, held_entry = asyncio.run(main())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert [r.kind for r in read] == ["run_started"]
    assert log_engine_of(log.store, run).loc_entry(rec.id) == held_entry + 1
    assert [r.lsn for r in log.records(run)] == [0, 1, 2]


def test_two_tasks_each_in_its_own_batch_commit_separately(tmp_path):
    """A holds its batch across awaits; B opens its batch meanwhile (it waits for the lock, off the
    loop) and C writes without a batch. Three commits: A's records in one entry, B's in another,
    C's alone; nothing of B or C joined A's batch."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-two")
    alog = AsyncRunLog(log)
    before = _entries(log.store, run)

    async def main():
        a_in, others_started = asyncio.Event(), asyncio.Event()
        got: dict[str, list] = {"a": [], "b": [], "c": []}

        async def task_a():
            async with alog.batch():
                assert alog.in_batch()
                got["a"].append(await alog.record_attempt(run, 1, 0, "succeeded", context={"task": "A"}))
                a_in.set()
                await others_started.wait()
                for i in range(2):
                    await asyncio.sleep(0)
                    got["a"].append(await alog.record_attempt(run, 2 + i, 0, "succeeded", context={"task": "A"}))

        async def task_b():
            await a_in.wait()
            assert not alog.in_batch(), "task B sees task A's batch"
            async with alog.batch():
                blob = await alog.put_blob(b"B's prompt")
                for i in range(2):
                    got["b"].append(await alog.record_attempt(run, 10 + i, 0, "succeeded", prompt=blob, context={"task": "B"}))

        async def task_c():
            await a_in.wait()
            got["c"].append(await alog.record_attempt(run, 20, 0, "succeeded", context={"task": "C"}))

        ts = [asyncio.create_task(task_a()), asyncio.create_task(task_b()), asyncio.create_task(task_c())]
        await asyncio.sleep(0)
        await a_in.wait()
        others_started.set()
        await asyncio.wait_for(asyncio.gather(*ts), timeout=120)
        return got

    got = asyncio.run(main())
    assert _entries(log.store, run) == before + 3
    fresh = Store.open(root)
    ent = {k: {log_engine_of(fresh, run).loc_entry(r.id) for r in v} for k, v in got.items()}
    assert all(len(e) == 1 for e in ent.values()), ent
    assert len(ent["a"] | ent["b"] | ent["c"]) == 3, ent
    assert sorted(r.lsn for r in RunLog(fresh).records(run)) == list(range(7))
    assert objstore.verify(RunLog(fresh)) == []
    _join_batch_threads()


def test_a_task_created_inside_a_batch_is_not_in_it(tmp_path):
    """``create_task`` copies the context, and so the parent's open batch: the child's write must
    still wait for the writer lock and commit on its own, after the parent's commit."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-child")
    alog = AsyncRunLog(log)
    before = _entries(log.store, run)

    async def main():
        started = asyncio.Event()

        async def child():
            seen_batch = alog.in_batch()
            started.set()
            return seen_batch, await alog.record_attempt(run, 9, 0, "succeeded", context={"task": "child"})

        async with alog.batch():
            mine = [await alog.record_attempt(run, 1, 0, "succeeded")]
            t = asyncio.create_task(child())
            await started.wait()  # the child's call was made (it waits for the lock in a shared thread)
            mine.append(await alog.record_attempt(run, 2, 0, "succeeded"))
            assert not t.done()
        return mine, await asyncio.wait_for(t, timeout=60)

    mine, (seen_batch, theirs) = asyncio.run(main())
    assert not seen_batch, "a child task sees its parent's batch"
    assert _entries(log.store, run) == before + 2
    assert {log_engine_of(log.store, run).loc_entry(r.id) for r in mine} == {before + 1}
    assert log_engine_of(log.store, run).loc_entry(theirs.id) == before + 2
    assert [r.id for r in log.records(run)[1:]] == [mine[0].id, mine[1].id, theirs.id]


def test_an_exception_in_the_block_writes_nothing_and_nested_blocks_join(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-boom")
    alog = AsyncRunLog(log)
    tree = snapshot_tree(root)

    async def boom():
        async with alog.batch():
            blob = await alog.put_blob(b"never committed")
            await alog.record_attempt(run, 1, 0, "succeeded", output=blob)
            async with alog.batch():  # nested: joins, and the error leaves both
                await alog.record_attempt(run, 2, 0, "succeeded")
                raise Boom()

    with pytest.raises(Boom):
        asyncio.run(boom())
    assert snapshot_tree(root) == tree, "a batch left by an exception wrote something"
    _join_batch_threads()

    before = _entries(log.store, run)

    async def nested():
        async with alog.batch():
            a = await alog.record_attempt(run, 1, 0, "succeeded")
            try:
                async with alog.batch():
                    b = await alog.record_attempt(run, 2, 0, "succeeded")
                    raise Boom()
            except Boom:
                pass  # caught between the blocks: the outer one commits, the inner's writes too (as sync batches)
            with pytest.raises(InvalidInput):  # an error of one call leaves the batch open
                await alog.record_attempt(run, -1, 0, "no such state")
            c = await alog.record_attempt(run, 3, 0, "succeeded")
        return a, b, c

    recs = asyncio.run(nested())
    assert _entries(log.store, run) == before + 1
    assert {log_engine_of(log.store, run).loc_entry(r.id) for r in recs} == {before + 1}
    assert [r.lsn for r in log.records(run)] == [0, 1, 2, 3]


def test_a_task_cancelled_in_its_batch_commits_nothing_and_releases_the_thread(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-cancel")
    alog = AsyncRunLog(log)
    tree = snapshot_tree(root)

    async def main():
        inside = asyncio.Event()

        async def writer():
            async with alog.batch():
                await alog.record_attempt(run, 1, 0, "succeeded", output=await alog.put_blob(b"cancelled"))
                inside.set()
                await asyncio.Event().wait()  # cancelled here, mid-batch

        t = asyncio.create_task(writer())
        await inside.wait()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    _join_batch_threads()
    assert snapshot_tree(root) == tree, "a cancelled batch wrote something"
    with log.batch(timeout=30):  # the writer lock is free again
        log.record_attempt(run, 1, 0, "succeeded")
    assert [r.lsn for r in log.records(run)] == [0, 1]


def test_a_task_cancelled_while_waiting_for_the_lock_commits_nothing(tmp_path):
    """The batch thread still waits for the lock when its task is cancelled: once another process
    lets the lock go, the thread takes it, commits nothing and ends."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-cancel-wait")
    alog = AsyncRunLog(log)
    per_run = log.store.logs.per_run
    holder = _holder(root, run)
    try:
        async def main():
            entered = False
            cancel_seen = asyncio.Event()

            async def writer():
                nonlocal entered
                async with alog.batch():
                    entered = True
                    try:
                        await alog.record_attempt(run, 1, 0, "succeeded")
                    except asyncio.CancelledError:
                        cancel_seen.set()  # the batch's __aexit__ (the abort) runs right after, in this same step
                        raise

            t = asyncio.create_task(writer())
            for _ in range(20):
                await asyncio.sleep(0.001)
            # Format 6: entering a batch binds no log yet; its first ref waits for its run's lock. One log: entering waits.
            assert not t.done() and entered is per_run
            t.cancel()
            held = None
            if per_run:
                # The cancelled task waits for its batch thread, which waits for the lock: let the holder commit
                # (from a worker thread, the loop stays free) once the cancellation reached the block — not after
                # the holder's own 60 s give-up, which is what this test used to wait out.
                await asyncio.wait_for(cancel_seen.wait(), timeout=60)  # the bound only turns a hang into a failure
                held = asyncio.get_running_loop().run_in_executor(None, _release, holder)
            with pytest.raises(asyncio.CancelledError):
                await t
            return entered, (await held if held is not None else None)

        entered, held_entry = asyncio.run(main())
        assert entered is per_run
        if held_entry is None:
            held_entry = _release(holder)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    _join_batch_threads()
    assert _entries(log.store, run) == held_entry  # nothing after the holder's commit
    assert [r.body["context"] for r in log.records(run)[1:]] == [{"by": "another process"}]


def test_an_async_batch_inside_a_sync_batch_of_the_loop_thread_is_refused(tmp_path):
    """The loop's thread holds the writer lock; the batch thread would wait for it forever."""
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    run = log.start_run("aio-sync-batch")
    alog = AsyncRunLog(log)

    async def enter():
        async with alog.batch():
            raise AssertionError("entered")

    async def main():
        with log.batch():
            with pytest.raises(InvalidInput, match="synchronous batch"):
                await asyncio.wait_for(enter(), timeout=20)  # the bound only turns a deadlock into a failure
            log.record_attempt(run, 1, 0, "succeeded")

    asyncio.run(main())
    assert [r.lsn for r in log.records(run)] == [0, 1]
    assert not _batch_threads()


def test_lock_timeout_in_batch(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("aio-timeout")
    alog = AsyncRunLog(log)
    per_run = log.store.logs.per_run
    holder = _holder(root, run)
    try:
        async def main():
            with pytest.raises(LockTimeout):
                async with alog.batch(timeout=0.05):
                    if per_run:  # format 6: a batch takes its run's lock at the first ref it touches, not on entry
                        await alog.record_attempt(run, 1, 0, "succeeded")
                    raise AssertionError("entered a batch whose lock another process holds")
            with pytest.raises(InvalidInput):
                alog.batch(timeout=-1)

        asyncio.run(main())
        _release(holder)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    _join_batch_threads()


# The same history through either API (fixed ids and times): (method, args, kwargs).
STEPS = [
        ("start_run", ("same",), {"when": T0, "meta": {"k": 1}}),
        ("put_blob", (b"prompt",), {}),
        ("record_attempt", ("same", 1, 0, "failed"), {"error": "boom", "when": T0 + 1}),
        ("record_attempt", ("same", 1, 1, "succeeded"), {"when": T0 + 2}),
        ("record_intent", ("same", "pay", 2, "payment", False), {"when": T0 + 3}),
        ("commit_intent", ("same", "pay"), {"when": T0 + 4}),
        ("rewind", ("same", 1), {"reason": "retry", "when": T0 + 5}),
        ("record_attempt", ("same", 2, 0, "succeeded"), {"when": T0 + 6}),
        ("fork", ("same", 0, 2), {"reason": "try", "make_live": False, "when": T0 + 7}),
        ("set_live", ("same", 1), {}),
        ("finish_run", ("same",), {"when": T0 + 8}),
]


def test_results_equal_the_sync_api(tmp_path):
    sync_root, async_root = str(tmp_path / "sync"), str(tmp_path / "async")
    slog = RunLog(Store.init(sync_root, fsync="off"))
    sync_results = [getattr(slog, name)(*a, **k) for name, a, k in STEPS]

    async def main():
        alog = await objstore.aio.open_store(async_root, fsync="off")
        out = [await getattr(alog, name)(*a, **k) for name, a, k in STEPS]
        view = await alog.view("same")
        reads = {
            "view": view,
            "records": await alog.records("same", all_branches=True),
            "branches": await alog.branches(view),
            "history": await alog.history(view, all_branches=True),
            "episode": (await alog.episode("same", all_branches=True)),
            "export": await alog.export("same"),
            "iter_own": [r async for r in alog.iter_own(view, 0)],
            "iter_lineage": [r async for r in alog.iter_lineage(view, 1)],
            "walk": [r async for r in alog.walk(view.head(1))],
            "refold": await alog.refold(view, 1),
            "blob": await alog.get_blob(out[1]),
            "runs": await alog.runs(),
            "verify": await alog.verify(),
        }
        with pytest.raises(RunNotFound):
            await alog.view("nope")
        return alog, out, reads

    alog, async_results, reads = asyncio.run(main())
    assert async_results == sync_results
    view = slog.view("same")
    assert reads == {
        "view": view,
        "records": slog.records("same", all_branches=True),
        "branches": slog.branches(view),
        "history": slog.history(view, all_branches=True),
        "episode": episode(slog, "same", all_branches=True),
        "export": objstore.export(slog, "same"),
        "iter_own": list(slog.iter_own(view, 0)),
        "iter_lineage": list(slog.iter_lineage(view, 1)),
        "walk": list(slog.walk(view.head(1))),
        "refold": slog.refold(view, 1),
        "blob": b"prompt",
        "runs": ["same"],
        "verify": [],
    }
    # the stores themselves: the same objects in the same order, byte for byte
    # Format 6: the blob put outside a batch, which no record names, is held by the process and stored nowhere.
    stored = 9 if slog.store.logs.per_run else 10
    assert raw_objects(alog.store) == raw_objects(slog.store) and len(raw_objects(slog.store)) == stored

    async def delete():
        return await alog.delete_run("same", reason="done")

    did = asyncio.run(delete())
    sid = delete_run(slog, "same", reason="done")

    def deletion(store, oid):
        otype, payload = codec.decode(log_engine_of(store, "same").read(oid), oid)
        return otype, {k: v for k, v in payload.items() if k != "time"}  # the time of deletion is now

    assert deletion(alog.store, did) == deletion(slog.store, sid) and deletion(slog.store, sid)[0] == "deletion"


def test_labels_kinds_copies_and_listing_through_the_async_api(tmp_path):
    slog = RunLog(Store.init(str(tmp_path / "sync"), fsync="off"))
    sync: list = []
    for name, a, k in _LABELLED_CALLS:
        sync.append(getattr(slog, name)(*a(sync), **k(sync)))
    alog = AsyncRunLog(RunLog(Store.init(str(tmp_path / "async"), fsync="off")), chunk=2)

    async def main():
        results: list = []
        for name, a, k in _LABELLED_CALLS:
            results.append(await getattr(alog, name)(*a(results), **k(results)))
        run = results[0]
        recs = results[3:8]
        listing = [r async for r in alog.iter_records(run, all_branches=True)]
        limited = [r async for r in alog.iter_records(run, all_branches=True, limit=3, before=recs[4].id)]
        early = []
        async for r in alog.iter_records(run, all_branches=True):
            early.append(r)
            break  # left early: the sync generator is closed, off the loop
        reads = {
            "find_run": await alog.find_run(thread_id="T", checkpoint_ns=""),
            "find_runs": await alog.find_runs(checkpoint_ns=""),
            "find_record": await alog.find_record(run, checkpoint_id="C2"),
            "find_records": await alog.find_records(run, checkpoint_id="C2"),
            "run_labels": await alog.run_labels(run),
            "record_labels": await alog.record_labels(recs[0].id),
            "schema_of": await alog.schema_of("x.test.note"),
            "copy_records": await alog.records(results[-1], all_branches=True),
        }
        return results, listing, limited, early, reads

    results, listing, limited, early, reads = asyncio.run(main())
    assert results == sync
    run, recs, copy = sync[0], sync[3:8], sync[-1]
    assert raw_objects(alog.store) == raw_objects(slog.store)
    assert listing == list(slog.iter_records(run, all_branches=True)) and len(listing) == 6
    assert limited == list(slog.iter_records(run, all_branches=True, limit=3, before=recs[4].id)) and len(limited) == 3
    assert early == listing[:1]
    assert reads == {
        "find_run": run, "find_runs": slog.find_runs(checkpoint_ns=""), "find_record": recs[1], "find_records": [recs[1]],
        "run_labels": {"thread_id": "T", "checkpoint_ns": ""}, "record_labels": {"checkpoint_id": "C1"},
        "schema_of": slog.schema_of("x.test.note"), "copy_records": slog.records(copy, all_branches=True),
    }
    assert sorted(reads["find_runs"]) == sorted([run, copy])


# Labels, a declared kind, a fork at a record id and a copy, as data: (name, args and kwargs from the earlier results)
_LABELLED_CALLS = [
    ("start_run", lambda r: (), lambda r: {"labels": {"thread_id": "T", "checkpoint_ns": ""}, "when": T0}),
    ("register_kind", lambda r: ("x.test.note", [["text", "str", True, False], ["refs", "list", False, True]]), lambda r: {"when": T0}),
    ("put_blob", lambda r: (b"part",), lambda r: {}),
    *[("append", lambda r, i=i: (r[0], "x.test.note", {"text": f"n{i}", "refs": [r[2]]}),
       lambda r, i=i: {"labels": {"checkpoint_id": f"C{i}"}, "when": T0 + i}) for i in range(1, 6)],
    ("fork", lambda r: (r[0], None), lambda r: {"at_record": r[4].id, "reason": "time travel", "when": T0 + 10}),
    ("fork_run", lambda r: (r[0],), lambda r: {"record": r[5].id, "labels": {"thread_id": "T2", "checkpoint_ns": ""}, "when": T0 + 11}),
]


def test_no_call_runs_on_the_loop_thread(tmp_path, monkeypatch):
    """Every RunLog method the async API reaches is called in a worker thread, never the loop's."""
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    seen: list[tuple[str, int]] = []
    for name in ("start_run", "append", "record_attempt", "put_blob", "get_blob", "view", "records", "iter_own", "runs"):
        original = getattr(RunLog, name)

        def spy(self, *a, _name=name, _f=original, **k):
            seen.append((_name, threading.get_ident()))
            return _f(self, *a, **k)

        monkeypatch.setattr(RunLog, name, spy)
    alog = AsyncRunLog(log, chunk=1)

    async def main():
        loop_thread = threading.get_ident()
        run = await alog.start_run("t")
        async with alog.batch():
            await alog.record_attempt(run, 1, 0, "succeeded", output=await alog.put_blob(b"x"))
            in_batch = [n for n, _ in seen]
        await alog.get_blob(await alog.put_blob(b"y"))
        view = await alog.view(run)
        await alog.records(run)
        assert len([r async for r in alog.iter_own(view, 0)]) == 2
        await alog.runs()
        return loop_thread, in_batch

    loop_thread, in_batch = asyncio.run(main())
    assert {n for n, _ in seen} == {"start_run", "append", "record_attempt", "put_blob", "get_blob", "view", "records", "iter_own", "runs"}
    assert loop_thread not in {t for _, t in seen}
    assert in_batch == ["start_run", "put_blob", "record_attempt", "append"]


def test_every_public_runlog_method_has_an_async_twin():
    """A RunLog method added later and forgotten here fails this test."""
    public = {n for n in dir(RunLog) if not n.startswith("_") and callable(getattr(RunLog, n))}
    missing = {n for n in public if not hasattr(AsyncRunLog, n)}
    assert not missing, f"RunLog methods without an async twin: {sorted(missing)}"
    for n in public - {"batch"}:
        f = getattr(AsyncRunLog, n)
        assert inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f), n
        sync_params = list(inspect.signature(getattr(RunLog, n)).parameters)
        assert list(inspect.signature(f).parameters) == sync_params, n  # same names, self first
    for n in ("delete_run", "delete_runs", "delete_records", "delete_branch_from", "redact", "episode", "verify"):
        assert inspect.iscoroutinefunction(getattr(AsyncRunLog, n)), n
    with pytest.raises(InvalidInput):
        AsyncRunLog("not a log")  # type: ignore[arg-type]
