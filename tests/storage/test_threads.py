"""Threads (and asyncio tasks) sharing one Store object.

Acceptance: 8 threads sharing one store append to one run, some batches failing on
purpose: every acknowledged record is present once, none of a failed batch is.
A batch belongs to its contextvars context (a thread, an asyncio task): another
thread's writes wait for the writer lock and never join it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from helpers import log_engine_of, raw_objects

from objstore import RunLog, Store
from objstore.errors import LockTimeout
from objstore.runs.verify import verify
from objstore.storage import codec

THREADS = 8
OPS = 60


class Boom(Exception):
    """Raised inside a batch on purpose."""


def _walk(store, run, head):
    """Ids of the chain behind head, oldest first, read through the run's log's engine.read (raw bytes)."""
    out = []
    oid = head
    engine = log_engine_of(store, run)
    while oid is not None:
        otype, p = codec.decode(engine.read(oid), oid)
        assert otype == codec.RECORD
        out.append((oid, p))
        oid = p["parent"]
    out.reverse()
    return out


def test_eight_threads_one_store_failed_batches_leave_nothing(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    store = log.store
    run = log.start_run("threads")
    acked: list[list[tuple[bytes, tuple]]] = [[] for _ in range(THREADS)]  # per thread, in ack order
    failed: list[set[bytes]] = [set() for _ in range(THREADS)]
    failed_blobs: list[set[bytes]] = [set() for _ in range(THREADS)]
    batches: list[list[bytes]] = []  # the ids of each successful batch (one commit each)
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        rnd = random.Random(t)
        seq = 0
        try:
            barrier.wait()
            for _ in range(OPS):
                time.sleep(rnd.uniform(0, 0.002))  # think time: threads arrive while others' batches are open
                choice = rnd.random()
                if choice < 0.4:  # one append, one commit
                    rec = log.record_attempt(run, step=seq, attempt=0, state="succeeded", context={"thread": t, "seq": seq})
                    acked[t].append((rec.id, (t, seq)))
                    seq += 1
                elif choice < 0.7:  # a batch that commits
                    pending = []
                    with store.batch():
                        for _ in range(rnd.randint(2, 6)):
                            rec = log.record_attempt(run, step=seq, attempt=0, state="succeeded", context={"thread": t, "seq": seq})
                            pending.append((rec.id, (t, seq)))
                            seq += 1
                            time.sleep(0.0005)  # work inside the batch: other threads run meanwhile
                    acked[t].extend(pending)  # acknowledged only now: the batch committed
                    batches.append([i for i, _ in pending])
                else:  # a batch that fails midway, after a few appends and a blob
                    made = []
                    with pytest.raises(Boom):
                        with store.batch():
                            for _ in range(rnd.randint(1, 4)):
                                blob = store.put_blob(b"failed batch %d %d" % (t, seq))
                                failed_blobs[t].add(blob)
                                rec = log.record_attempt(run, step=seq, attempt=0, state="failed", output=blob,
                                                         context={"thread": t, "seq": seq, "doomed": True})
                                made.append(rec.id)
                                seq += 1
                                time.sleep(0.0005)
                            raise Boom()
                    failed[t].update(made)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            raise

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
        assert not th.is_alive(), "a thread hangs (deadlock?)"
    assert not errors, repr(errors[0])

    all_acked = {oid: key for lst in acked for oid, key in lst}
    all_failed = set().union(*failed)
    all_failed_blobs = set().union(*failed_blobs)
    assert len(all_acked) == sum(len(x) for x in acked), "two acknowledgements share an id"
    assert all_failed and batches, "the random mix should contain failed and committed batches"
    assert not (all_failed & set(all_acked))

    # A fresh open of the store, read from the segment files.
    fresh = Store.open(root)
    raw = raw_objects(fresh)
    raw_ids = [oid for oid, _, _ in raw]
    assert len(raw_ids) == len(set(raw_ids)), "an object was written twice"
    raw_set = set(raw_ids)
    assert not (all_failed & raw_set), "a record of a failed batch reached the log"
    assert not (all_failed_blobs & raw_set), "a blob of a failed batch reached the log"
    for oid in all_failed | all_failed_blobs:
        assert not fresh.has(oid)
    for oid, otype, data in raw:
        if otype == codec.RECORD:
            ctx = codec.decode(data, oid)[1]["body"].get("context") or {}
            assert not ctx.get("doomed"), f"record {oid.hex()} of a failed batch reached the log"

    # Every acknowledged record is on the chain exactly once; the chain is nothing else.
    chain = _walk(fresh, run, fresh.read_ref(f"run/{run}/branch/0"))
    assert [p["lsn"] for _, p in chain] == list(range(len(chain))), "LSNs are not contiguous"
    chain_ids = [oid for oid, _ in chain]
    assert len(chain_ids) == len(set(chain_ids))
    assert set(chain_ids[1:]) == set(all_acked), "chain != acknowledged records"
    for oid, p in chain[1:]:
        ctx = p["body"]["context"]
        assert all_acked[oid] == (ctx["thread"], ctx["seq"])
    # each thread's records in its own order; each batch contiguous and in one entry
    pos = {oid: i for i, oid in enumerate(chain_ids)}
    for t in range(THREADS):
        idx = [pos[oid] for oid, _ in acked[t]]
        assert idx == sorted(idx), f"thread {t}'s records are out of its order"
    for ids in batches:
        idx = [pos[i] for i in ids]
        assert idx == list(range(idx[0], idx[0] + len(ids))), "a batch was interleaved with another thread's writes"
        assert len({log_engine_of(fresh, run).loc_entry(i) for i in ids}) == 1

    assert verify(RunLog(fresh)) == []
    assert verify(log) == []


def test_asyncio_tasks_do_not_join_each_others_batch(tmp_path):
    """Two tasks in one thread. Task A holds a batch across an ``await``; task B, created
    outside it, writes meanwhile. B must not join A's batch. B cannot wait for the writer
    lock either — A can only release it when the loop runs A again, and B's wait blocks
    the loop's only thread — so B uses ``batch(timeout=…)`` and gets ``LockTimeout``
    (a plain blocking write from B would deadlock the loop: that is why B never makes one
    while A's batch is open). After A commits, B writes normally."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    store = log.store
    run = log.start_run("aio")
    got = {}

    async def task_a(inside: asyncio.Event, b_done: asyncio.Event):
        with store.batch():
            got["a1"] = log.record_attempt(run, step=1, attempt=0, state="succeeded", context={"task": "A"}).id
            inside.set()
            await b_done.wait()  # B runs while A's batch is open
            got["a2"] = log.record_attempt(run, step=2, attempt=0, state="succeeded", context={"task": "A"}).id
        got["a_committed"] = True

    async def task_b(inside: asyncio.Event, b_done: asyncio.Event):
        await inside.wait()
        assert not store.in_batch(), "task B sees task A's batch"
        try:
            with pytest.raises(LockTimeout):
                with store.batch(timeout=0.2):
                    got["b_inside"] = log.record_attempt(run, step=9, attempt=0, state="succeeded", context={"task": "B"}).id
        finally:
            b_done.set()

    async def main():
        inside, b_done = asyncio.Event(), asyncio.Event()
        await asyncio.wait_for(asyncio.gather(task_a(inside, b_done), task_b(inside, b_done)), timeout=30)
        # After A's commit B writes normally, in a batch of its own.
        with store.batch():
            got["b_after"] = log.record_attempt(run, step=3, attempt=0, state="succeeded", context={"task": "B"}).id

    asyncio.run(main())
    assert "b_inside" not in got and got["a_committed"]
    fresh = Store.open(root)
    chain = _walk(fresh, run, fresh.read_ref(f"run/{run}/branch/0"))
    assert [oid for oid, _ in chain[1:]] == [got["a1"], got["a2"], got["b_after"]]
    assert log_engine_of(fresh, run).loc_entry(got["a1"]) == log_engine_of(fresh, run).loc_entry(got["a2"])  # A's batch: one commit
    assert log_engine_of(fresh, run).loc_entry(got["b_after"]) != log_engine_of(fresh, run).loc_entry(got["a1"])
    assert verify(RunLog(fresh)) == []


def test_task_created_inside_a_batch_that_writes_after_it_ended_is_not_lost(tmp_path):
    """``asyncio.create_task`` copies the context, batch included. A task started inside a
    batch that writes once the batch has ended must commit on its own: its record was
    acknowledged (returned), so it must be in the log, not dropped into a finished commit."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    store = log.store
    run = log.start_run("aio-child")
    got = {}

    async def child(go: asyncio.Event):
        await go.wait()
        assert not store.in_batch()
        got["child"] = log.record_attempt(run, step=5, attempt=0, state="succeeded", context={"task": "child"}).id

    async def main():
        go = asyncio.Event()
        with store.batch():
            got["parent"] = log.record_attempt(run, step=1, attempt=0, state="succeeded", context={"task": "parent"}).id
            t = asyncio.create_task(child(go))
        go.set()  # the child writes only after the parent's batch has committed
        await asyncio.wait_for(t, timeout=30)

    asyncio.run(main())
    fresh = Store.open(root)
    chain = _walk(fresh, run, fresh.read_ref(f"run/{run}/branch/0"))
    assert [oid for oid, _ in chain[1:]] == [got["parent"], got["child"]], "the child's acknowledged record was lost"
    assert log_engine_of(fresh, run).loc_entry(got["child"]) != log_engine_of(fresh, run).loc_entry(got["parent"])
    assert verify(RunLog(fresh)) == []


def test_thread_with_a_copied_context_waits_for_the_lock_and_never_joins(tmp_path):
    """``asyncio.to_thread`` copies the context into another thread. That thread must not join
    the batch open in the loop's thread (no unlocked writes into someone else's commit, and
    nothing lost once it has ended): it waits for the writer lock like any other thread."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    store = log.store
    run = log.start_run("aio-thread")
    got = {}
    started = threading.Event()

    def in_thread(key: str, delay: float):
        started.set()
        threading.Event().wait(delay)
        got[key] = log.record_attempt(run, step=7, attempt=0, state="succeeded", context={"thread": key}).id

    async def main():
        with store.batch():
            got["a1"] = log.record_attempt(run, step=1, attempt=0, state="succeeded", context={"task": "A"}).id
            # t1 writes while the batch is still open (A is sleeping inside it): it must wait.
            t1 = asyncio.ensure_future(asyncio.to_thread(in_thread, "t1", 0.0))
            await asyncio.sleep(0.3)
            got["a2"] = log.record_attempt(run, step=2, attempt=0, state="succeeded", context={"task": "A"}).id
            # t2 writes after the batch has ended.
            t2 = asyncio.ensure_future(asyncio.to_thread(in_thread, "t2", 0.3))
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(t1, t2), timeout=30)

    asyncio.run(main())
    assert started.is_set()
    fresh = Store.open(root)
    chain = [oid for oid, _ in _walk(fresh, run, fresh.read_ref(f"run/{run}/branch/0"))[1:]]
    assert chain == [got["a1"], got["a2"], got["t1"], got["t2"]], "a thread joined the batch or its record was lost"
    entries = [log_engine_of(fresh, run).loc_entry(i) for i in chain]
    assert entries[0] == entries[1] and len(set(entries)) == 3, entries
    assert verify(RunLog(fresh)) == []
