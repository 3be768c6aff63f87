"""``ObjstoreSaver``: a LangGraph checkpointer whose checkpoints are records of an objstore run.

What it owns: how LangGraph's checkpoints, pending writes and thread operations map onto the
public RunLog API (nothing here reaches below it but ``log.store.get`` of a copy's fork object and
``log.store.covered_records`` of its source, see ``_walk_back``):

- **One run per (thread_id, checkpoint_ns)**, labelled with both (``start_run(labels=...)``; its
  id is the labels' hash, so two processes starting one thread make one run and one Conflict,
  which means "use it"). Runs are found with ``find_run`` / ``find_runs``, never from memory.
- **A checkpoint is an ``x.langgraph.checkpoint`` record** labelled ``checkpoint_id=<id>`` (and ``run_id=<metadata
  run_id>`` when there is one): the checkpoint without its channel values and the metadata, each through the saver's
  serde, the channel values as content-addressed parts (``parts``: a list channel's elements one blob each, so what
  did not change is stored once), and ``attempts``: whether its invoke carried ``attempt_recorder()``.
- **Pending writes are ``x.langgraph.writes`` records**, one per ``put_writes`` call, labelled
  ``checkpoint_id`` (the checkpoint they belong to) and ``task_id``: ``get_tuple`` by id is one
  ``find_records`` lookup for both. A task whose writes carry LangGraph's ERROR channel is also an
  ``attempt`` record (state failed), and a later successful put of the same task is its next
  attempt (state succeeded), so ``objstore episode`` shows the failure and the retry.
- **Time travel is a fork.** A checkpoint goes on the branch of its parent's record when that record
  is still the newest checkpoint there (read from the log, appended with ``expect_head``);
  otherwise (an older checkpoint resumed, ``update_state`` on the past, a second process that lost
  the race) the branch is forked at the parent's record (``fork(at_record=...)``) and the
  checkpoint is the first record of the new branch: a fork object, nothing copied, the old branch
  byte for byte as it was. With ``on_concurrent="raise"`` such a put raises ``ParentSuperseded``
  instead (for workers that must be told another continued the thread first).
- **Deletion is recorded** (``objstore.lifecycle.delete``): ``delete_thread`` and ``prune(strategy="delete")``
  delete whole runs, ``delete_for_runs`` and ``prune("keep_latest")`` delete records; ``objstore gc`` drops their bytes.
  ``copy_thread`` is a cross-run fork (``fork_run``): the copy names the head of the source's branch holding its
  latest checkpoint and copies nothing.
- **Reading constructs only allow-listed types** (``strict_serde``): anyone who can commit can write a checkpoint
  naming any callable as a value's type, so the default serializer is LangGraph's in strict msgpack mode (its safe
  built-ins plus ``allowed_types``); pickle is never read.

- **One durable sync per super-step.** LangGraph (pregel ``_loop.py`` ``PregelLoop.put_writes``,
  ``_put_checkpoint``; ``main.py`` ``stream``) submits a task's ``put_writes`` to its background executor
  and never waits for it before the next step; with ``durability="sync"`` it waits for one thing per
  step, the ``put`` of the step's checkpoint (``loop._put_checkpoint_fut.result()``), and joins the
  rest only when the invoke ends (``BackgroundExecutor.__exit__``; a step's last writes may even land
  after its successor's put). What resume needs of a step's writes is that they are not lost while
  their checkpoint is the newest; once the next checkpoint is durable they are history. So a
  ``put_writes`` from a running graph's step loop (its config carries ``__pregel_durability`` "sync"
  or "async") of regular writes only (idx >= 0) is committed — written, visible, surviving the process
  — without waiting for its fdatasync, and the step's ``put``, appended after it to the same run's log
  file, makes both durable with one sync (``Txn.defer_sync``). Synced at once: writes that can end an
  invoke with no ``put`` after them (ERROR, INTERRUPT, RESUME, SCHEDULED: negative idx; the sync covers
  every deferred entry before it), calls from outside the loop (``update_state`` puts a Send's pushes
  after its checkpoint), durability "exit" (pending writes follow the last put), a caller's batch.
  Left open: a machine crash (not a process crash) before the next sync may lose a completed task's
  writes whose sibling then failed, so resume reruns that task (LangGraph's at-least-once, as with
  ``durability="async"``). ``sync_writes=True`` makes every ``put_writes`` durable on its own.
- **Each run's newest live checkpoint is remembered** (``newest.py``) with the view values it depends
  on, so ``put`` and ``put_writes`` skip the walk back only while a fresh view names the same head and
  deletions; a put still appends with ``expect_head``.

"Latest" and ``list`` order are the log's commit order, newest first, across every branch of the namespace's
run (checkpoint ids are uuid6, so within one writer the id order SqliteSaver sorts by). The async methods
run the sync ones in a worker thread (``asyncio.to_thread``), so the event loop is never blocked.
"""

from __future__ import annotations

import builtins
import functools
import heapq
import os
import random
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import ERROR

from ...errors import Conflict, Erased, InvalidInput, ObjectNotFound, ParentSuperseded, Refused, RunNotFound
from ...lifecycle import delete as D
from ...runs import records as R
from ...runs.api import RunLog
from ...storage import codec
from ...storage.store import Store
from . import partree as T
from . import parts as P
from .attempts import AttemptRecorder, records_attempts
from .newest import NewestMemory
from .parts import strict_serde
from .threaded import ThreadedAsync
from .trees import PartTrees

CHECKPOINT = "x.langgraph.checkpoint"
WRITES = "x.langgraph.writes"
ERROR_SOURCE_NODE = "__error_source_node__"  # langgraph._internal._constants: the failed task's node name
DURABILITY = "__pregel_durability"  # langgraph._internal._constants.CONFIG_KEY_DURABILITY: set in a running graph's configs

# [name, type, required, is_ref] (the core's schema field lists)
CHECKPOINT_FIELDS: list[list[Any]] = [
    ["checkpoint_id", "str", True, False],
    ["parent_id", "str", False, False],  # the parent checkpoint's id ("" at a thread's root)
    ["checkpoint_type", "str", True, False],
    ["checkpoint", "bytes", True, False],  # the checkpoint without channel_values, through the serde
    ["metadata_type", "str", True, False],
    ["metadata", "bytes", True, False],
    ["layout", "list", True, False],  # [[channel, n], ...] (parts.py)
    ["parts", "list", True, True],  # per channel in layout order: its part blob ids (no fanout), or its tree's top (partree.py)
    ["attempts", "str", False, False],  # "recorded": its invoke carried attempt_recorder() (or update_state); "unrecorded"
    ["fanout", "int", False, False],  # present: list channels are named through x.langgraph.parts nodes (partree.py)
]
WRITES_FIELDS: list[list[Any]] = [
    ["checkpoint_id", "str", True, False],
    ["task_id", "str", True, False],
    ["task_path", "str", True, False],
    ["channels", "list", True, False],
    ["idx", "list", True, False],
    ["parts", "list", True, True],  # one blob per written value
]

ATTEMPTS = ("unrecorded", "recorded")  # a checkpoint's "attempts" field, by whether its invoke carried the recorder
RETRIES = 8  # a put that loses a race re-reads the branch and tries again (each try writes nothing until it wins)
_BLOB_CACHE = 4096  # part blobs kept in memory: content-addressed, so a cached body is never stale


def _conf(config: RunnableConfig) -> dict[str, Any]:
    return dict(config.get("configurable") or {})


def _ns(config: RunnableConfig) -> str:
    return str(_conf(config).get("checkpoint_ns") or "")


class ObjstoreSaver(ThreadedAsync, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on an objstore store: ``ObjstoreSaver("path/to/store")`` (created if
    absent) or ``ObjstoreSaver(open_store(path))``; use it where ``SqliteSaver`` was used.

    ``allowed_types``: classes (or ``(module, name)`` pairs) a checkpoint may be read back as, beyond
    LangGraph's safe built-ins (``strict_serde``). ``on_concurrent``: ``"fork"`` (default) keeps a
    put whose parent is no longer its branch's newest checkpoint as a fork; ``"raise"`` refuses it
    with ``ParentSuperseded``. ``sync_writes``: every ``put_writes`` durable when it returns (default:
    a task's regular writes are made durable by the step's ``put``; the module docstring says why)."""

    def __init__(self, log_or_path: RunLog | str | os.PathLike[str], *, serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[type | tuple[str, ...]] = (), on_concurrent: str = "fork", sync_writes: bool = False) -> None:
        super().__init__(serde=strict_serde(serde, allowed_types))
        self.sync_writes = sync_writes
        if on_concurrent not in ("fork", "raise"):
            raise InvalidInput(f"on_concurrent must be 'fork' or 'raise', got {on_concurrent!r}")
        self.on_concurrent = on_concurrent
        self.log: RunLog = log_or_path if isinstance(log_or_path, RunLog) else RunLog(Store.open(os.fspath(log_or_path), create=True))
        self._kinds_ready = False
        self._lock = threading.Lock()  # guards the caches below (the store has its own locks)
        self._blobs: OrderedDict[bytes, bytes] = OrderedDict()
        self.trees = PartTrees(self.log)  # list channels' parts trees: their nodes, written and read (trees.py)
        self._sources: dict[str, tuple[str, bytes] | None] = {}  # run -> the run and record it is a copy of
        self._write_runs: dict[tuple[str, str], str] = {}  # (thread, ns) -> run, for writes (see _ensure_run)
        # (run, checkpoint id) -> {task: (writes, task_path)}: attempts waiting for their checkpoint (_await_checkpoint)
        self._early: dict[tuple[str, str], dict[str, tuple[builtins.list[tuple[str, Any]], str]]] = {}
        self._unrecorded: set[str] = set()  # runs this saver has labelled UNRECORDED_ATTEMPTS (see put)
        self._newest_mem = NewestMemory()  # each run's newest live checkpoint, valid only for the view it names

    # -- context manager (like the other savers) --------------------------------------------------
    def __enter__(self) -> ObjstoreSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> ObjstoreSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    # -- the store ---------------------------------------------------------------------------------
    def _kinds(self) -> None:
        """Register the two record kinds once per saver (a no-op commit-free call when the store has them)."""
        if not self._kinds_ready:
            self.log.register_kind(CHECKPOINT, CHECKPOINT_FIELDS)
            self.log.register_kind(WRITES, WRITES_FIELDS)
            self.log.register_kind(T.NODE, T.NODE_FIELDS)
            self._kinds_ready = True

    def _run(self, thread_id: str, ns: str) -> str | None:
        return self.log.find_run(thread_id=str(thread_id), checkpoint_ns=ns)

    def _ensure_run(self, thread_id: str, ns: str, fresh: bool = False) -> str:
        """The thread namespace's run for a write, created if absent. The id is remembered for
        writes only (a write to a run another process deleted meanwhile fails with Deleted and is
        retried with ``fresh``); reads always ask the log."""
        key = (str(thread_id), ns)
        with self._lock:
            run = None if fresh else self._write_runs.get(key)
        if run is None:
            run = self._ensure_run_now(thread_id, ns)
            with self._lock:
                self._write_runs[key] = run
        return run

    def _ensure_run_now(self, thread_id: str, ns: str) -> str:
        run = self._run(thread_id, ns)
        if run is not None:
            return run
        try:
            return self.log.start_run(labels={"thread_id": str(thread_id), "checkpoint_ns": ns}, subject="langgraph",
                                      meta={"thread_id": str(thread_id), "checkpoint_ns": ns})
        except Conflict:  # another process created it between the two calls: it is ours too
            run = self._run(thread_id, ns)
            if run is None:
                raise
            return run

    @staticmethod
    def _ours(labels: dict[str, str]) -> bool:
        """Whether a run's labels are a LangGraph thread namespace's, as this saver makes them:
        exactly ``thread_id`` and ``checkpoint_ns``. Another tool's run may carry ``thread_id=T``
        too (with other labels, or without a namespace): not a namespace of the thread, so never
        listed, copied or deleted as one (was: KeyError in list, and delete_thread deleted it)."""
        return labels.keys() == {"thread_id", "checkpoint_ns"}

    def _thread_runs(self, thread_id: str) -> list[str]:
        return [run for run in self.log.find_runs(thread_id=str(thread_id)) if self._ours(self.log.run_labels(run))]

    def _all_runs(self) -> list[str]:
        """Every live run a LangGraph saver made (labelled with a thread id and a namespace)."""
        out = []
        for run in self.log.runs():
            if not run.startswith("l-"):
                continue
            try:
                labels = self.log.run_labels(run)
            except (Erased, RunNotFound, ObjectNotFound):
                continue
            if self._ours(labels) and self.log.find_run(**labels) == run:
                out.append(run)
        return out

    def _blob(self, oid: bytes) -> bytes:
        with self._lock:
            hit = self._blobs.get(oid)
            if hit is not None:
                self._blobs.move_to_end(oid)
                return hit
        data = self.log.get_blob(oid)
        with self._lock:
            self._blobs[oid] = data
            if len(self._blobs) > _BLOB_CACHE:
                self._blobs.popitem(last=False)
        return data

    # -- records -----------------------------------------------------------------------------------
    @staticmethod
    def _live(rec: R.Record) -> bool:
        return R.DELETED_FIELD not in rec.body

    def _source(self, run: str) -> tuple[str, bytes] | None:
        """(source run, record) a copied run (``fork_run``) goes on into, or None: its run_started's
        parent is a cross-run fork object. A run's run_started never changes: cached."""
        with self._lock:
            if run in self._sources:
                return self._sources[run]
        started = self.log.run_started(run)
        src = None
        if started.parent is not None:
            otype, fk = self.log.store.get(started.parent)
            if otype == codec.FORK and isinstance(fk.get("parent_run"), str):
                src = (fk["parent_run"], fk["parent_record"])
        with self._lock:
            self._sources[run] = src
        return src

    def _walk_back(self, head: bytes) -> Iterator[R.Record]:
        """The records a head folds over, newest first, through fork objects (inclusive of their
        parent records) — the history a copy or a fork branch sees."""
        oid: bytes | None = head
        while oid is not None:
            nxt = None
            for item in self.log.walk(oid):
                if isinstance(item, dict):
                    nxt = item["parent_record"]
                    if isinstance(item.get("parent_run"), str):
                        # Into a copy's source: fold that run's records deletions first. The core's
                        # walk applies only the deletions of runs this process has viewed, so a fresh
                        # process saw the source's deleted records live, and after gc BodyRemoved.
                        self.log.store.covered_records(item["parent_run"])
                else:
                    yield item
            oid = nxt

    def _inherited(self, run: str, memo: dict[str, Any] | None = None) -> tuple[str, list[R.Record]] | None:
        """A copied run's inherited checkpoint and writes records (the source's lineage up to the
        copy point), newest first; None for a run that is not a copy. ``memo``: one reader call's
        cache (a ``list`` or ``get_tuple``), so the lineage is walked once per call, not once per
        checkpoint read (was quadratic: each inherited tuple's writes walked it again)."""
        if memo is not None and run in memo:
            hit: tuple[str, list[R.Record]] | None = memo[run]
            return hit
        src = self._source(run)
        got = None
        if src is not None:
            src_run, rid = src
            self.log.store.covered_records(src_run)  # its records deletions first (see _walk_back)
            got = src_run, [r for r in self._walk_back(rid) if r.kind in (CHECKPOINT, WRITES) and self._live(r)]
        if memo is not None:
            memo[run] = got
        return got

    def _find_checkpoint(self, run: str, checkpoint_id: str, memo: dict[str, Any] | None = None) -> R.Record | None:
        for rec in self.log.find_records(run, checkpoint_id=checkpoint_id):
            if rec.kind == CHECKPOINT and self._live(rec):
                return rec
        inh = self._inherited(run, memo)
        if inh is not None:
            for rec in inh[1]:
                if rec.kind == CHECKPOINT and rec.body["checkpoint_id"] == checkpoint_id:
                    return rec
        return None

    def _writes_of(self, run: str, rec: R.Record, memo: dict[str, Any] | None = None) -> list[R.Record]:
        """The writes records of checkpoint record ``rec``, oldest first: its own run's, and for a
        checkpoint a copy inherits, the source's writes on the copy's lineage (read from that
        lineage: the source run may be deleted since) plus the copy's own."""
        cid = rec.body["checkpoint_id"]
        own = [r for r in self.log.find_records(run, checkpoint_id=cid) if r.kind == WRITES and self._live(r)]
        if rec.run == run:
            found = own
        else:
            inh = self._inherited(run, memo)
            found = [r for r in (inh[1] if inh else []) if r.kind == WRITES and r.body["checkpoint_id"] == cid] + own
        found.sort(key=lambda r: (r.run != rec.run, r.branch, r.lsn))
        return found

    def _pending(self, writes: list[R.Record]) -> list[tuple[str, str, Any]]:
        """Pending writes as LangGraph wants them: a (task, idx) written twice keeps its first value
        (a retried put_writes), a special write (negative idx) its last; in writes_sort_key order."""
        kept: dict[tuple[str, int], tuple[str, str, str, bytes]] = {}
        for w in writes:
            b = w.body
            for ch, idx, oid in zip(b["channels"], b["idx"], b["parts"], strict=True):
                key = (b["task_id"], idx)
                if idx >= 0 and key in kept:
                    continue
                kept[key] = (b["task_path"], b["task_id"], ch, oid)
        order = sorted(kept, key=lambda k: writes_sort_key(kept[k][0], k[0], k[1]))
        return [(kept[k][1], kept[k][2], P.decode(self.serde, self._blob(kept[k][3]))) for k in order]

    def _tuple(self, run: str, thread_id: str, ns: str, rec: R.Record, metadata: Any = None,
               memo: dict[str, Any] | None = None) -> CheckpointTuple:
        b = rec.body
        checkpoint = P.loads(self.serde, b["checkpoint_type"], b["checkpoint"])
        checkpoint["channel_values"] = P.join(self.serde, b["layout"], self.trees.flat(b), self._blob)
        if metadata is None:
            metadata = P.loads(self.serde, b["metadata_type"], b["metadata"])
        parent = b.get("parent_id") or None
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": b["checkpoint_id"]}},
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            pending_writes=self._pending(self._writes_of(run, rec, memo)),
        )

    def _checkpoints(self, run: str, before: str | None = None, memo: dict[str, Any] | None = None) -> Iterator[R.Record]:
        """The run's checkpoint records, newest first, across all branches, then (a copy) the
        inherited ones. ``before``: only those put before that checkpoint (the listing starts at
        its record); a checkpoint id the run does not hold compares as SqliteSaver does, by id."""
        rid = None
        if before is not None:
            hit = next((r for r in self.log.find_records(run, checkpoint_id=before) if r.kind == CHECKPOINT), None)
            rid = hit.id if hit is not None else None
        for rec in self.log.iter_records(run, all_branches=True, kinds=[CHECKPOINT], before=rid):
            if self._live(rec) and (before is None or rid is not None or rec.body["checkpoint_id"] < before):
                yield rec
        inh = self._inherited(run, memo)
        if inh is not None:
            for rec in inh[1]:
                if rec.kind == CHECKPOINT and (before is None or rec.body["checkpoint_id"] < before):
                    yield rec

    # -- reading -----------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _conf(config)
        thread_id, ns = str(conf["thread_id"]), _ns(config)
        run = self._run(thread_id, ns)
        if run is None:
            return None
        cid = get_checkpoint_id(config)
        memo: dict[str, Any] = {}
        rec = self._find_checkpoint(run, cid, memo) if cid else next(self._checkpoints(run, memo=memo), None)
        return None if rec is None else self._tuple(run, thread_id, ns, rec, memo=memo)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Newest first (namespaces merged by checkpoint id, as SqliteSaver orders them). A metadata
        ``filter`` is checked on each checkpoint's metadata as it is read (metadata is not a label):
        a rare match reads back to the last one."""
        if limit is not None and limit <= 0:
            return
        conf = _conf(config) if config else {}
        tid = conf.get("thread_id")
        want_ns = conf.get("checkpoint_ns") if config else None
        if tid is not None and want_ns is not None:
            one = self._run(str(tid), str(want_ns))
            runs = [one] if one is not None else []
        else:
            runs = self._thread_runs(str(tid)) if tid is not None else self._all_runs()
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        streams = []
        memo: dict[str, Any] = {}  # each copy's inherited lineage, walked once for this listing
        for run in runs:
            labels = self.log.run_labels(run)
            if want_ns is None or labels["checkpoint_ns"] == want_ns:
                streams.append(self._stream(run, labels["thread_id"], labels["checkpoint_ns"], before_id, memo, want_id))
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda x: x[0], reverse=True)
        n = 0
        for _cid, run, thread_id, ns, rec in merged:
            if want_id and rec.body["checkpoint_id"] != want_id:
                continue
            md = P.loads(self.serde, rec.body["metadata_type"], rec.body["metadata"])
            if filter and not all(md.get(k) == v for k, v in filter.items()):
                continue
            yield self._tuple(run, thread_id, ns, rec, md, memo)
            n += 1
            if limit is not None and n >= limit:
                return

    def _stream(self, run: str, thread_id: str, ns: str, before: str | None,
                memo: dict[str, Any], want_id: str | None = None) -> Iterator[tuple[str, str, str, str, R.Record]]:
        if want_id and before is None:  # one checkpoint id: its label, not a scan of the run (SqliteSaver: WHERE checkpoint_id = ?)
            hit = self._find_checkpoint(run, str(want_id), memo)
            if hit is not None:
                yield hit.body["checkpoint_id"], run, thread_id, ns, hit
            return
        for rec in self._checkpoints(run, before, memo):
            yield rec.body["checkpoint_id"], run, thread_id, ns, rec

    # -- writing -----------------------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self._kinds()
        conf = _conf(config)
        thread_id, ns = str(conf["thread_id"]), _ns(config)
        parent_id = conf.get("checkpoint_id")
        c = dict(checkpoint)
        values: dict[str, Any] = checkpoint.get("channel_values") or {}
        c.pop("channel_values", None)
        versions = checkpoint.get("channel_versions") or {}
        blobs, layout = P.split(self.serde, values, [k for k in sorted(values) if k in versions])
        ctype, cbytes = self.serde.dumps_typed(c)
        md = get_checkpoint_metadata(config, metadata)
        mtype, mbytes = self.serde.dumps_typed(md)
        labels = {"checkpoint_id": checkpoint["id"]}
        if isinstance(md.get("run_id"), str) and md["run_id"]:
            labels["run_id"] = md["run_id"]
        log = self.log
        run = self._ensure_run(thread_id, ns)
        recorded = records_attempts(config) or md.get("source") == "update"  # update_state runs no task, retries none
        unseen = run not in self._unrecorded and not recorded
        if unseen:  # once per run and saver: episode says the retried failures are missing (R.UNRECORDED_ATTEMPTS)
            labels[R.UNRECORDED_ATTEMPTS[0]] = R.UNRECORDED_ATTEMPTS[1]
        for attempt in range(RETRIES):
            try:
                with log.batch():
                    ids = [log.put_blob(b) for b in blobs]
                    branch, head, view, parent = self._placed(run, parent_id, f"checkpoint {checkpoint['id']}")
                    tops, head = self.trees.tops(run, branch, head, layout, ids, parent)
                    body = {"checkpoint_id": checkpoint["id"], "parent_id": parent_id or "", "checkpoint_type": ctype, "checkpoint": cbytes,
                            "metadata_type": mtype, "metadata": mbytes, "layout": layout, "parts": tops, "attempts": ATTEMPTS[recorded],
                            "fanout": T.FANOUT}
                    rec = log.append(run, CHECKPOINT, body, labels=labels, branch=branch, allow_retained=True, expect_head=head)
                self._newest_mem.put(view, rec, rec, ())
                break
            except ParentSuperseded:
                raise  # on_concurrent="raise": the caller is told, never retried into a fork
            except Conflict:
                self._newest_mem.forget(run)  # whatever was remembered, the retry reads the log
                if attempt == RETRIES - 1:
                    raise
            except (Erased, Refused, RunNotFound):  # the remembered run was deleted by another process: ask the log again
                if attempt == RETRIES - 1:
                    raise
                run = self._ensure_run(thread_id, ns, fresh=True)
        if unseen:
            with self._lock:
                self._unrecorded.add(run)
        if self._early:  # rare: a task's writes came before this checkpoint (async durability)
            self._settle(run, checkpoint["id"])
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _place(self, run: str, parent_id: str | None) -> tuple[int | None, bytes | None, R.Record | None, Any, R.Record | None]:
        """Where a checkpoint whose parent is ``parent_id`` goes: (branch, its head now, None) to
        append there, or (None, None, the parent's record) to fork there first; and the view read. A
        branch is taken when the parent is the newest checkpoint it folds over: the parent's own
        branch, else the live one (a branch forked at the parent that has no checkpoint of its own
        yet). Read from the log under the writer lock (inside the caller's batch): each check walks
        back from a branch head past writes and attempts (a few records, not the branch), but for the
        live branch's newest as this saver left it (``newest.py``: used only while the view names the
        head and deletions it was taken at). Last, the parent's record when found (its parts nodes are reused)."""
        view = self.log.view(run)
        live = view.live
        if parent_id:  # the common case first: the parent is the live branch's newest checkpoint (no label lookup)
            newest, _, head = self._newest_live(view)
            if newest is not None and newest.body["checkpoint_id"] == parent_id:
                return live, head, None, view, newest
        prec = self._find_checkpoint(run, parent_id) if parent_id else None
        if prec is None:  # a thread's first checkpoint, or a root put on a thread: the live branch goes on
            return live, view.head(live), None, view, None
        own = prec.branch if prec.run == run else 0  # an inherited checkpoint (a copy) is on the copy's branch 0
        if own != live:
            head = view.head(own)
            newest, _ = self._newest(head)
            if newest is not None and newest.id == prec.id:
                return own, head, None, view, prec
        if prec.run != run:
            # An older checkpoint of the source of a copy: a fork is of a record of the run itself,
            # so the record goes on the live branch (a checkpoint's parent_id still names its parent).
            return live, view.head(live), None, view, prec
        return None, None, prec, view, prec

    def _newest(self, head: bytes) -> tuple[R.Record | None, builtins.list[R.Record]]:
        """(the newest live checkpoint ``head`` folds over, the records after it), walking back."""
        after: builtins.list[R.Record] = []
        for r in self._walk_back(head):
            if r.kind == CHECKPOINT and self._live(r):
                return r, after
            after.append(r)
        return None, after

    def _newest_live(self, view: Any) -> tuple[R.Record | None, builtins.list[R.Record], bytes]:
        """``_newest`` of the live branch's head of ``view``, and that head: remembered while the view
        still names what this saver last wrote there (``newest.py``), else walked. The head is the
        one the answer is for: a put appends with it as ``expect_head``."""
        m = self._newest_mem.get(view)
        if m is not None:
            return m.checkpoint, builtins.list(m.after), m.head
        head = view.head(view.live)
        return *self._newest(head), head

    def _placed(self, run: str, parent_id: str | None, why: str) -> tuple[int | None, bytes | None, Any, R.Record | None]:
        """``_place``, forking when it says so: (branch, head) to append on, the view read, the parent's record."""
        branch, head, fork_at, view, parent = self._place(run, parent_id)
        if fork_at is not None and self.on_concurrent == "raise":
            labels = self.log.run_labels(run)
            raise ParentSuperseded(f"checkpoint {parent_id} of thread {labels.get('thread_id')!r} namespace {labels.get('checkpoint_ns')!r} "
                                   f"is no longer its branch's newest (another writer continued it); {why} was not stored")
        if fork_at is not None:
            fr = self.log.fork(run, None, at_record=fork_at.id, reason=f"langgraph: {why} resumes checkpoint {parent_id}, which is not its branch's newest")
            branch, head = fr.branch, fr.fork_id
        return branch, head, view, parent

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        if not writes:
            return
        self._kinds()
        conf = _conf(config)
        thread_id, ns, cid = str(conf["thread_id"]), _ns(config), str(conf["checkpoint_id"])
        channels = [c for c, _ in writes]
        idx = [WRITES_IDX_MAP.get(c, i) for i, (c, _) in enumerate(writes)]
        blobs = [P.encode(self.serde, v) for _, v in writes]
        # One durable sync per super-step (the module docstring): a running graph's task's regular writes
        # are committed without waiting for their fdatasync, the step's put syncs them with its checkpoint.
        # At once: writes that may end an invoke with no put after them (ERROR, INTERRUPT, ...: negative
        # idx), a call from outside a graph's step loop (update_state's pushes follow its put; a direct
        # call), durability "exit" (its pending writes follow the last put), the caller's own batch.
        defer = (not self.sync_writes and conf.get(DURABILITY) in ("sync", "async") and all(i >= 0 for i in idx)
                 and not self.log.store.in_batch())
        run = self._ensure_run(thread_id, ns)
        try:
            self._put_writes_in(run, cid, writes, channels, idx, blobs, str(task_id), str(task_path), defer)
        except (Erased, Refused, RunNotFound):  # the remembered run was deleted by another process: ask the log again
            self._put_writes_in(self._ensure_run(thread_id, ns, fresh=True), cid, writes, channels, idx, blobs, str(task_id), str(task_path), defer)

    def _put_writes_in(self, run: str, cid: str, writes: Sequence[tuple[str, Any]], channels: builtins.list[str],
                       idx: builtins.list[int], blobs: builtins.list[bytes], task_id: str, task_path: str, defer: bool = False) -> None:
        log = self.log

        # one self-contained commit: on object storage (no writer lock) one that another process's write to this
        # thread made stale is run again on the new head (Store.atomically) instead of raising StaleBase
        def commit() -> None:
            if defer:
                txn = log.store.current_batch()
                assert txn is not None  # atomically's own batch
                txn.defer_sync = True
            view = log.view(run)  # Deleted if the remembered run was deleted meanwhile
            newest, after, _head = self._newest_live(view)
            common = newest is not None and newest.body["checkpoint_id"] == cid and newest.branch == view.live and newest.run == run
            if newest is not None and common:
                found = [newest, *after]  # the common case: its writes are all after it on the live branch
            else:
                found = [r for r in log.find_records(run, checkpoint_id=cid) if self._live(r)]  # one lookup: the checkpoint and its writes
            earlier = [r for r in found if r.kind == WRITES and self._live(r) and r.body["checkpoint_id"] == cid and r.body["task_id"] == task_id]
            have = {i for r in earlier for i in r.body["idx"]}
            if all(i >= 0 and i in have for i in idx):
                return  # a retried put_writes: every regular write is stored already (LangGraph keeps the first)
            prec = next((r for r in found if r.kind == CHECKPOINT), None) or self._find_checkpoint(run, cid)
            # On the branch of their checkpoint, wherever its head is now: with durability="async"
            # LangGraph may put the next checkpoint before these writes land, so "not the newest"
            # is no time travel here (and writes are found by their label, not their place).
            branch = prec.branch if prec is not None and prec.run == run else None
            ids = [log.put_blob(b) for b in blobs]
            body = {"checkpoint_id": cid, "task_id": task_id, "task_path": task_path, "channels": channels,
                    "idx": idx, "parts": ids}
            labels = {"checkpoint_id": cid, "task_id": task_id}
            rec = log.append(run, WRITES, body, labels=labels, branch=branch, allow_retained=True)
            waiting[0] = not self._attempt(run, branch, prec, writes, task_id, task_path, labels)
            if common:
                done[0] = (view, rec, newest, (rec, *after))

        waiting = [False]
        done: builtins.list[Any] = [None]  # what the live branch is after the commit, for _newest_mem
        log.store.atomically(commit)
        if done[0] is not None:
            self._newest_mem.put(*done[0])
        if waiting[0]:
            self._await_checkpoint(run, cid, writes, task_id, task_path)

    def _await_checkpoint(self, run: str, cid: str, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> None:
        """A task's attempt whose step only its checkpoint can tell, and that checkpoint is not
        stored yet: with LangGraph's default durability ("async") the checkpoint's ``put`` runs in
        the background while the step's tasks run, so their writes can arrive first. The attempt is
        recorded by whichever comes second: ``put`` of that checkpoint (``_settle``), or this call,
        which looks again after registering it (the put may have landed in between, seeing nothing)."""
        with self._lock:
            self._early.setdefault((run, cid), {})[task_id] = (list(writes), task_path)
        if self._find_checkpoint(run, cid) is not None:
            self._settle(run, cid)

    def _settle(self, run: str, cid: str) -> None:
        """Record the attempts that waited for checkpoint ``cid`` (``_await_checkpoint``), once."""
        with self._lock:
            waiting = self._early.pop((run, cid), None)
        if not waiting:
            return
        prec = self._find_checkpoint(run, cid)
        if prec is None:  # cannot happen after its put; kept waiting rather than filed under a guessed step
            with self._lock:
                self._early.setdefault((run, cid), {}).update(waiting)
            return
        branch = prec.branch if prec.run == run else None
        for task_id, (writes, task_path) in waiting.items():
            def commit(t: str = task_id, w: builtins.list[tuple[str, Any]] = writes, p: str = task_path) -> None:
                self._attempt(run, branch, prec, w, t, p, {"checkpoint_id": cid, "task_id": t})
            self.log.store.atomically(commit)

    def _attempt(self, run: str, branch: int | None, prec: R.Record | None, writes: Sequence[tuple[str, Any]], task_id: str,
                 task_path: str, labels: dict[str, str]) -> bool:
        """An ``attempt`` record for a failed task (an ERROR write) and for the next put of a task
        that failed before (its retry: the earlier failure came as an ERROR write or from
        ``attempt_recorder``), so ``episode`` shows both; other tasks write none. False (nothing
        written) when the step is not known yet: see ``_await_checkpoint``."""
        errors = [v for c, v in writes if c == ERROR]
        tried = [r for r in self.log.find_records(run, task_id=str(task_id)) if r.kind == R.ATTEMPT]
        if not errors and not tried:
            return True
        last = tried[0].body if tried else None  # newest first
        if errors and last is not None and last["state"] == "failed" and not (last.get("context") or {}).get("checkpoint_id"):
            return True  # attempt_recorder recorded this very failure (the retry budget's last try)
        node = next((str(v) for c, v in writes if c == ERROR_SOURCE_NODE), None)
        node = node or next((str((r.body.get("context") or {}).get("node")) for r in tried if (r.body.get("context") or {}).get("node")), None)
        # The step: the tasks of a checkpoint's step s run in step s+1 (its metadata says s); else an
        # earlier attempt of this task (a task id names one step of one checkpoint); else unknown yet.
        if prec is not None:
            md = P.loads(self.serde, prec.body["metadata_type"], prec.body["metadata"])
            step = max(0, int(md.get("step", -1)) + 1)
        elif tried:
            step = int(tried[0].body["step"])
        else:
            return False
        ctx = {"task_id": str(task_id), "task_path": str(task_path), "checkpoint_id": labels["checkpoint_id"], "node": node or ""}
        error = f"{type(errors[0]).__name__}: {errors[0]}"[:2000] if errors else None
        self.record_attempt(run, step, len(tried), "failed" if errors else "succeeded", ctx, error, branch, labels)
        return True

    def record_attempt(self, run: str, step: int, attempt: int, state: str, context: dict[str, Any], error: str | None,
                       branch: int | None, labels: dict[str, str]) -> None:
        if error is not None:
            context = {**context, "error": error}  # episode shows an attempt's context, not its error field
        body = {"step": step, "attempt": attempt, "state": state, "workflow_version": None, "context": context,
                "prompt": None, "output": None, "tools": None, "usage": None, "error": error}
        self.log.append(run, R.ATTEMPT, body, branch=branch, allow_retained=True, labels=labels or None)

    def attempt_recorder(self) -> Any:
        """A LangChain callback handler that records every failed attempt of a node as an ``attempt``
        record, retries inside a RetryPolicy included (LangGraph retries those in-process and tells
        no checkpointer): ``graph.invoke(x, {"configurable": {...}, "callbacks": [saver.attempt_recorder()]})``."""
        return AttemptRecorder(self)

    # -- thread operations -------------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        runs = self._thread_runs(str(thread_id))
        if runs:
            D.delete_runs(self.log, runs, reason=f"langgraph delete_thread {thread_id}")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is listed, and their writes (records:
        each namespace's run stays; one recorded deletion per run touched)."""
        wanted = [str(r) for r in run_ids]
        if not wanted:
            return
        for run in self._all_runs():
            self.log.store.atomically(functools.partial(self._delete_for_runs_in, run, wanted))

    def _delete_for_runs_in(self, run: str, wanted: builtins.list[str]) -> None:
        """``delete_for_runs`` of one namespace's run, as one commit: listed, the orphan nodes worked out and deleted
        under the run's writer lock (on object storage: run again if another writer's entry made it stale), so a put
        that resumes a doomed checkpoint, reusing its parts nodes, lands before it (and keeps them) or after it (and
        finds its parent deleted), never in between."""
        doomed: list[bytes] = []
        gone: list[R.Record] = []
        for lg_run in wanted:
            for rec in self.log.find_records(run, run_id=lg_run):
                if rec.kind == CHECKPOINT and self._live(rec):
                    gone.append(rec)
                    doomed.append(rec.id)
                    doomed += [r.id for r in self.log.find_records(run, checkpoint_id=rec.body["checkpoint_id"])
                               if r.kind != CHECKPOINT and self._live(r)]
        if doomed:
            ids = {r.id for r in gone}
            kept = [r for r in self.log.iter_records(run, all_branches=True, kinds=[CHECKPOINT]) if self._live(r) and r.id not in ids]
            doomed += self.trees.orphans(gone, kept)
            D.delete_records(self.log, run, list(dict.fromkeys(doomed)), reason="langgraph delete_for_runs")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: per namespace, every checkpoint but the newest is deleted with its writes;
        the newest keeps its pending writes, so a resume re-runs no task that completed. Checkpoints
        a live copy of the thread inherits are kept (``_reached_by_copies``).
        ``delete``: the thread's runs are deleted whole."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"prune strategy must be keep_latest or delete, got {strategy!r}")
        for tid in thread_ids:
            runs = self._thread_runs(str(tid))
            if strategy == "delete":
                if runs:
                    D.delete_runs(self.log, runs, reason=f"langgraph prune {tid}")
                continue
            for run in runs:
                self.log.store.atomically(functools.partial(self._keep_latest_in, run, str(tid)))

    def _keep_latest_in(self, run: str, tid: str) -> None:
        """``prune("keep_latest")`` of one namespace's run, as one commit (see ``_delete_for_runs_in``: a put that
        resumes an older checkpoint reuses its parts nodes, which must not be deleted as orphans meanwhile)."""
        recs = [r for r in self.log.iter_records(run, all_branches=True, kinds=[CHECKPOINT, WRITES]) if self._live(r)]
        latest = next((r for r in recs if r.kind == CHECKPOINT), None)
        if latest is None:
            return
        keep = latest.body["checkpoint_id"]
        doomed = [r.id for r in recs if r.body.get("checkpoint_id") != keep]
        if not doomed:
            return
        held = self._reached_by_copies(run)  # a copy's history is its own: not pruned with the source
        doomed = [oid for oid in doomed if oid not in held]
        if doomed:
            ids = set(doomed)
            cps = [r for r in recs if r.kind == CHECKPOINT]
            nodes = self.trees.orphans([r for r in cps if r.id in ids], [r for r in cps if r.id not in ids], held)
            D.delete_records(self.log, run, [*doomed, *nodes], reason=f"langgraph prune {tid} keep_latest")

    def _reached_by_copies(self, run: str) -> set[bytes]:
        """The records of ``run`` that a live copy (``copy_thread``, or a copy of a copy) folds over.

        A copy reads them from the source (nothing was copied), and a records deletion in the
        source reaches every copy: gc removes the bodies, after which the copy's listing raised
        BodyRemoved. LangGraph's copies are independent threads, so ``prune`` of the source leaves
        these. Reads each saver run's run_started (cached) and the source's lineage from each copy
        point: ``prune`` is occasional."""
        points: list[bytes] = []
        for other in self._all_runs():
            cur, seen = other, set()
            while cur not in seen:
                seen.add(cur)
                try:
                    src = self._source(cur)
                except (Erased, RunNotFound, ObjectNotFound):
                    break
                if src is None:
                    break
                if src[0] == run:
                    points.append(src[1])
                    break
                cur = src[0]
        held: set[bytes] = set()
        if points:
            self.log.store.covered_records(run)  # its records deletions first (see _walk_back)
        for rid in points:
            for r in self._walk_back(rid):
                if r.run != run:
                    continue
                if r.id in held:
                    break  # walked from here back already (another copy's point lies below)
                held.add(r.id)
        return held

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every namespace of the source becomes a run of the target forked from the head of the
        branch holding the source's latest checkpoint (``fork_run``: nothing copied or replayed),
        so the copy's latest is the source's. That branch need not be the live one: a checkpoint
        continuing an older branch's newest goes on that branch and leaves the live one as it was."""
        for run in self._thread_runs(str(source_thread_id)):
            ns = self.log.run_labels(run)["checkpoint_ns"]
            latest = next(self._checkpoints(run), None)
            record = None  # no checkpoint of its own (empty, or a copy not written to): the live head
            if latest is not None and latest.run == run:
                # the branch's newest record: the latest checkpoint and the pending writes after it
                record = next(self._walk_back(self.log.view(run).head(latest.branch))).id
            self.log.fork_run(run, record=record, labels={"thread_id": str(target_thread_id), "checkpoint_ns": ns},
                              reason="langgraph copy_thread")

    # -- versions ----------------------------------------------------------------------------------
    def get_next_version(self, current: str | None, channel: None) -> str:
        """Like InMemorySaver's: a zero-padded counter (string order is numeric order) and a random tail."""
        if current is None:
            v = 0
        elif isinstance(current, int):
            v = current
        else:
            v = int(str(current).split(".")[0])
        return f"{v + 1:032}.{random.random():016}"  # (os.urandom is a syscall per call: measurable per step)
