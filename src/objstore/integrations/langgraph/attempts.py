"""Failed node attempts LangGraph never shows a checkpointer, recorded as ``attempt`` records.

A node with a RetryPolicy is retried inside the task runner: the failed try's writes are cleared
and no checkpointer call sees it. LangChain's callbacks do see it (``on_chain_error`` for the
node's run, whose metadata names the thread, the namespace, the step and the node), so this
handler, passed in the graph's config (``"callbacks": [saver.attempt_recorder()]``), appends an
``attempt`` record (state ``failed``) to the thread's run for each. The saver then records the
task's successful put as its next attempt (state ``succeeded``): ``objstore episode`` shows the
failure and the retry. The last try's failure also reaches the saver, as an ERROR write; the saver
sees this handler's record of it (the newest attempt of the task, failed, with no checkpoint id) and
does not record it twice. LangChain calls the handler before the runner puts that ERROR write (sync
graphs inline, async ones awaiting it), which is the order this relies on.
"""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig


class AttemptRecorder(BaseCallbackHandler):
    """Records each failed try of a graph node (see the module docstring)."""

    raise_error = False  # a recording failure must not fail the graph run

    def __init__(self, saver: Any) -> None:  # an ObjstoreSaver (saver.py stands above this module)
        self.saver = saver
        self._lock = threading.Lock()
        self._runs: dict[UUID, dict[str, Any]] = {}  # a node's run -> its metadata, while it runs

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        md = metadata or {}
        if "langgraph_node" not in md or "thread_id" not in md:
            return
        with self._lock:
            if parent_run_id in self._runs:
                return  # a runnable inside the node: the node's own run is the attempt
            self._runs[run_id] = md

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            md = self._runs.pop(run_id, None)
        if md is None or type(error).__name__ in ("GraphInterrupt", "GraphBubbleUp", "ParentCommand"):
            return  # an interrupt or a command is how a node hands control back, not a failure
        task_ns = str(md.get("langgraph_checkpoint_ns") or "")
        ns, _, task = task_ns.rpartition("|")  # the task's own namespace is "<parent ns>|<node>:<task id>"
        task_id = task.partition(":")[2]
        saver = self.saver
        saver._kinds()
        run = saver._ensure_run(str(md["thread_id"]), ns)
        tried = [r for r in saver.log.find_records(run, task_id=task_id) if r.kind == "attempt"] if task_id else []
        ctx = {"task_id": task_id, "task_path": "", "checkpoint_id": "", "node": str(md["langgraph_node"])}
        saver.record_attempt(run, int(md.get("langgraph_step") or 0), len(tried), "failed", ctx,
                             f"{type(error).__name__}: {error}"[:2000], None, {"task_id": task_id} if task_id else {})


def records_attempts(config: RunnableConfig) -> bool:
    """Whether the graph's config carries this package's AttemptRecorder (a list of handlers, or a
    callback manager holding them): without it, tries a RetryPolicy retried reach no saver."""
    cbs = config.get("callbacks")
    handlers = getattr(cbs, "handlers", cbs) or []
    return isinstance(handlers, (list, tuple)) and any(isinstance(h, AttemptRecorder) for h in handlers)
