"""The async API: ``AsyncRunLog``, a ``RunLog`` whose calls do not block the event loop, with a batch per task.

This module owns running the synchronous library off the event loop's thread, and what a store
batch means for an asyncio task. Every public ``RunLog`` method has an ``async def`` of the same
name and signature here (and the lifecycle calls a checkpointer needs: ``delete_run(s)``,
``delete_records``, ``delete_branch_from``, ``redact``; and ``episode``, ``diff``, ``export``,
``verify``); each runs the synchronous call in a worker thread and never on the loop's thread::

    import objstore.aio
    alog = await objstore.aio.open_store(".objstore")   # opening reads files: off the loop too
    run = await alog.start_run(labels={"thread_id": "T"})
    async with alog.batch():                             # one commit for this task's writes
        blob = await alog.put_blob(b"prompt")
        await alog.record_attempt(run, 1, 0, "succeeded", prompt=blob)
    async for rec in alog.iter_own(await alog.view(run), 0):   # iterators: pulled in chunks, off the loop
        ...

Iterators (``iter_records``, ``iter_own``, ``walk`` …) are async iterators that pull ``chunk``
items (default 64) per trip to a worker thread: a lazy listing then reads up to that many ahead of
what the caller consumes (``limit=`` still bounds it; ``AsyncRunLog(log, chunk=1)`` reads only what
it yields). Leaving an ``async for`` early closes the synchronous iterator, off the loop too.

Batches. A store batch belongs to the thread that opened it (``Store.batch``: the writer lock is
held by that thread, and the batch counts only there), so ``async with alog.batch()`` starts a
dedicated worker thread for this task, opens the store batch in it, and sends every call *this
task* makes on this store to that thread until the block ends (a ``ContextVar`` names the open
batches of the task). Nested ``async with`` in the same task joins the outer batch, like the
synchronous one. Calls of other tasks — a task created inside the block too — are not in it:
they run in the shared worker threads and wait for the writer lock like any other writer (so a
task must not wait, inside its batch, for another task's write to the same store).

The block ends as the synchronous batch does: normally → one commit (one log entry, one
fdatasync); by an exception → nothing is written (the store batch is left by that exception).
Cancellation of the task is an exception like any other: nothing of the batch is committed and
the thread is released — if the task is cancelled while it still waits for the writer lock, the
thread leaves as soon as it gets the lock, committing nothing. A cancellation that arrives while
the commit itself is being written waits for it (a commit is whole or absent; the caller then
sees ``CancelledError`` after it stands). A call cancelled before its worker thread started it
does not run; one already running finishes (a write outside a batch is then committed whole).

Inside ``async with alog.batch()`` write through ``alog`` only: a synchronous ``log.append`` on the
loop's thread would wait for the writer lock that this task's batch thread holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import itertools
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .errors import InvalidInput
from .lifecycle import delete as _delete
from .runs import export as _export
from .runs import query as _query
from .runs import verify as _verify
from .runs.api import RunLog
from .storage.store import Store

__all__ = ["AsyncRunLog", "open_store"]

P = ParamSpec("P")
T = TypeVar("T")

CHUNK = 64  # records an async iterator pulls per trip to a worker thread (one hop per chunk, not per record)


class _Abort(Exception):
    """Raised inside the batch thread's ``with store.batch()`` to leave it without committing."""


class _BatchThread:
    """One open store batch and the single thread that holds it: jobs run there one at a time,
    inside the batch, until ``close`` asks for the commit or the abort."""

    _COMMIT = object()
    _ABORT = object()

    def __init__(self, store: Store, timeout: float | None, owner: asyncio.Task[Any] | None) -> None:
        self.store = store
        self.owner = owner  # the task whose calls join this batch; no other task's do
        self.joinable = True  # False once close was asked: no job is accepted after it
        self.opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.closed: concurrent.futures.Future[None] = concurrent.futures.Future()
        # running from the start: asyncio.wrap_future cancels a pending source when its waiter is
        # cancelled, and then this thread could not report the batch's outcome
        self.opened.set_running_or_notify_cancel()
        self.closed.set_running_or_notify_cancel()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, args=(timeout,), name="objstore-aio-batch", daemon=True)
        self._thread.start()

    def _main(self, timeout: float | None) -> None:
        try:
            with self.store.batch(timeout):
                self.opened.set_result(None)
                while True:
                    job = self._jobs.get()
                    if job is self._COMMIT:
                        break
                    if job is self._ABORT:
                        raise _Abort()
                    fut, fn = job
                    if not fut.set_running_or_notify_cancel():
                        continue  # its caller was cancelled before it started: it does not run
                    try:
                        result = fn()
                    except BaseException as e:  # noqa: BLE001 - handed to the awaiting caller, the batch goes on (as a caught error in a sync batch)
                        fut.set_exception(e)
                    else:
                        fut.set_result(result)
        except _Abort:
            self.closed.set_result(None)
        except BaseException as e:  # noqa: BLE001 - the open (LockTimeout …) or the commit failed: the awaiting task raises it
            if not self.opened.done():
                self.opened.set_exception(e)
            self.closed.set_exception(e)
        else:
            self.closed.set_result(None)

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        if not self.joinable:
            raise InvalidInput("this task's batch has ended; the call was not made")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fut, fn))
        return fut

    def close(self, commit: bool) -> None:
        """Ask the thread to commit or abort; it then ends (the queue is read in order, so every
        job submitted before runs first)."""
        self.joinable = False
        self._jobs.put(self._COMMIT if commit else self._ABORT)


# The batches open in this task's context (one per store at most); a tuple, so a context copied
# into a child task cannot change the parent's.
_batches: contextvars.ContextVar[tuple[_BatchThread, ...]] = contextvars.ContextVar("objstore-aio-batches", default=())


def _own_batch(store: Store) -> _BatchThread | None:
    """The batch on ``store`` that the current task opened and that is still open."""
    open_ = _batches.get()
    if not open_:
        return None
    me = asyncio.current_task()
    for b in open_:
        if b.store is store and b.owner is me and b.joinable:
            return b
    return None


async def _wait(fut: concurrent.futures.Future[T]) -> T:
    """Await a thread's future; a cancellation still waits for it to finish (it is an open or a
    commit, which is whole or absent), then raises ``CancelledError``."""
    waiter = asyncio.wrap_future(fut)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                result = waiter.result()  # finished in the same loop iteration as the cancel
                break
            cancelled = True
            continue
        break
    if cancelled:
        raise asyncio.CancelledError()
    return result


class _AsyncBatch:
    """``async with alog.batch():`` — see the module docstring."""

    def __init__(self, store: Store, timeout: float | None) -> None:
        self._store = store
        self._timeout = timeout
        self._thread: _BatchThread | None = None
        self._token: contextvars.Token[tuple[_BatchThread, ...]] | None = None

    async def __aenter__(self) -> None:
        if _own_batch(self._store) is not None:
            return  # nested: joins the outer batch of this task
        if self._store.in_batch():  # a sync batch on the loop's thread holds the lock our thread would wait for: never
            raise InvalidInput("a synchronous batch is open on the event loop's thread; write through it, or close it before 'async with alog.batch()'")
        bt = _BatchThread(self._store, self._timeout, asyncio.current_task())
        try:
            await asyncio.wrap_future(bt.opened)
        except asyncio.CancelledError:
            bt.close(commit=False)  # the thread leaves, committing nothing, once it holds the lock
            raise
        except BaseException:
            bt.close(commit=False)
            raise
        self._thread = bt
        self._token = _batches.set(_batches.get() + (bt,))

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        bt, token = self._thread, self._token
        if bt is None or token is None:
            return  # a joined (nested) block: the outer one commits or not
        self._thread = self._token = None
        _batches.reset(token)
        bt.close(commit=et is None)
        await _wait(bt.closed)  # the commit's error (StorageOSError …) is raised here


def _method(fn: Callable[Concatenate[RunLog, P], T]) -> Callable[Concatenate[AsyncRunLog, P], Coroutine[Any, Any, T]]:
    """``async def name(self, ...)``: ``self.log.name(...)`` in a worker thread (this task's batch
    thread if open). Looked up by name at each call, so a subclass of RunLog is honoured."""
    name = fn.__name__

    async def method(self: AsyncRunLog, /, *args: P.args, **kwargs: P.kwargs) -> T:
        bound: Callable[P, T] = getattr(self.log, name)
        return await self.call(bound, *args, **kwargs)

    functools.update_wrapper(method, fn)
    return method


def _function(fn: Callable[Concatenate[RunLog, P], T]) -> Callable[Concatenate[AsyncRunLog, P], Coroutine[Any, Any, T]]:
    """``async def name(self, ...)``: the library function ``fn(self.log, ...)`` in a worker thread."""

    async def method(self: AsyncRunLog, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.call(fn, self.log, *args, **kwargs)

    functools.update_wrapper(method, fn)
    return method


def _iterator(fn: Callable[Concatenate[RunLog, P], Iterator[T]]) -> Callable[Concatenate[AsyncRunLog, P], AsyncIterator[T]]:
    """An async iterator over ``self.log.name(...)``, pulled ``chunk`` items at a time in a worker thread."""
    name = fn.__name__

    async def method(self: AsyncRunLog, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        made: Callable[P, Iterator[T]] = getattr(self.log, name)
        it = await self.call(lambda: iter(made(*args, **kwargs)))
        size = self.chunk
        try:
            while True:
                part = await self.call(lambda: list(itertools.islice(it, size)))
                for x in part:
                    yield x
                if len(part) < size:
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:  # a generator left early: its finally blocks run, off the loop too
                await self.call(close)

    functools.update_wrapper(method, fn)
    return method


class AsyncRunLog:
    """A ``RunLog`` for asyncio: the same methods as coroutines, run in worker threads, and
    ``async with batch()`` per task (module docstring)."""

    def __init__(self, log: RunLog, *, executor: concurrent.futures.Executor | None = None, chunk: int = CHUNK) -> None:
        if not isinstance(log, RunLog):
            raise InvalidInput(f"AsyncRunLog wraps a RunLog, got {type(log).__name__}")
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise InvalidInput(f"chunk must be a positive number of records, got {chunk!r}")
        self.log = log
        self.chunk = chunk
        self._executor = executor  # None: the loop's default executor

    @property
    def store(self) -> Store:
        return self.log.store

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in a worker thread: this task's batch thread while its batch on
        this store is open, else a shared one (for any synchronous call: ``gc``, ``stats`` …)."""
        job = functools.partial(fn, *args, **kwargs)
        bt = _own_batch(self.log.store)
        if bt is not None:
            return await asyncio.wrap_future(bt.submit(job))
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()  # as asyncio.to_thread: the caller's context variables
        return await loop.run_in_executor(self._executor, functools.partial(ctx.run, job))

    def batch(self, timeout: float | None = None) -> _AsyncBatch:
        """``async with alog.batch():`` one commit for this task's writes inside, or none if the
        block raises or the task is cancelled; ``timeout`` bounds the wait for the writer lock
        (``LockTimeout``), as ``RunLog.batch``."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0):
            raise InvalidInput(f"batch timeout must be a non-negative number of seconds, got {timeout!r}")
        return _AsyncBatch(self.log.store, timeout)

    def in_batch(self) -> bool:
        """Whether this task has a batch open on this store."""
        return _own_batch(self.log.store) is not None

    # -- writing (RunLog) ------------------------------------------------------------------
    start_run = _method(RunLog.start_run)
    append = _method(RunLog.append)
    append_many = _method(RunLog.append_many)
    record_attempt = _method(RunLog.record_attempt)
    record_attempts = _method(RunLog.record_attempts)
    record_intent = _method(RunLog.record_intent)
    commit_intent = _method(RunLog.commit_intent)
    finish_run = _method(RunLog.finish_run)
    put_blob = _method(RunLog.put_blob)
    fork = _method(RunLog.fork)
    rewind = _method(RunLog.rewind)
    set_live = _method(RunLog.set_live)
    fork_run = _method(RunLog.fork_run)
    register_kind = _method(RunLog.register_kind)

    # -- reading (ChainReader) ---------------------------------------------------------------
    get_blob = _method(RunLog.get_blob)
    view = _method(RunLog.view)
    pin = _method(RunLog.pin)
    view_from = _method(RunLog.view_from)
    view_of_any = _method(RunLog.view_of_any)
    live_branch = _method(RunLog.live_branch)
    runs = _method(RunLog.runs)
    records = _method(RunLog.records)
    record = _method(RunLog.record)
    record_at = _method(RunLog.record_at)
    run_started = _method(RunLog.run_started)
    subject = _method(RunLog.subject)
    branches = _method(RunLog.branches)
    history = _method(RunLog.history)
    chain = _method(RunLog.chain)
    groups_from = _method(RunLog.groups_from)
    own_records = _method(RunLog.own_records)
    lineage = _method(RunLog.lineage)
    lineage_from = _method(RunLog.lineage_from)
    lineage_parts = _method(RunLog.lineage_parts)
    refold = _method(RunLog.refold)
    fork_object = _method(RunLog.fork_object)
    next_of = _method(RunLog.next_of)
    compensation = _method(RunLog.compensation)
    parent_view = _method(RunLog.parent_view)
    state_deletions = _method(RunLog.state_deletions)
    schema_of = _method(RunLog.schema_of)
    schema_fields = _method(RunLog.schema_fields)
    run_fields = _method(RunLog.run_fields)
    served_record = _method(RunLog.served_record)
    check_ext = _method(RunLog.check_ext)
    check_fork_place = _method(RunLog.check_fork_place)
    check_object = _method(RunLog.check_object)
    iter_records = _iterator(RunLog.iter_records)  # the lazy newest-first listing (runs.listing)
    walk = _iterator(RunLog.walk)
    iter_own = _iterator(RunLog.iter_own)
    iter_lineage = _iterator(RunLog.iter_lineage)
    fork_base = _iterator(RunLog.fork_base)

    # -- labels ----------------------------------------------------------------------------
    find_run = _method(RunLog.find_run)
    find_runs = _method(RunLog.find_runs)
    find_record = _method(RunLog.find_record)
    find_records = _method(RunLog.find_records)
    run_labels = _method(RunLog.run_labels)
    record_labels = _method(RunLog.record_labels)

    # -- lifecycle (objstore.lifecycle.delete) and queries ------------------------------------
    delete_run = _function(_delete.delete_run)
    delete_runs = _function(_delete.delete_runs)
    delete_records = _function(_delete.delete_records)
    delete_branch_from = _function(_delete.delete_branch_from)
    redact = _function(_delete.redact)
    episode = _function(_query.episode)
    diff = _function(_query.diff)
    export = _function(_export.export)
    verify = _function(_verify.verify)


async def open_store(path: str | None = None, *, create: bool = True, fsync: str | None = None,
                     executor: concurrent.futures.Executor | None = None) -> AsyncRunLog:
    """``objstore.open_store`` for asyncio (``await objstore.aio.open_store(path)``): the store is
    opened (and by default created) in a worker thread."""
    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(executor, functools.partial(Store.open, path, fsync=fsync, create=create))
    return AsyncRunLog(RunLog(store), executor=executor)
