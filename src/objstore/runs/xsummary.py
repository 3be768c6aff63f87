"""One-line summaries of extension (``x.``) record kinds for ``log``, ``log --graph`` and the
pictures, read from a record's own body fields: a small registry by kind (``register``), so the
runs layer shows an integration's records without importing the integration.

The LangGraph saver's three kinds are built in, decoded here without LangGraph:

* ``x.langgraph.checkpoint``: ``step N (source) by NODES checkpoint ID``. Step and source are the
  checkpoint's metadata; the nodes are the ones whose writes made it, read from the checkpoint's
  ``versions_seen``: LangGraph gives every channel a step writes the same next version, so the
  nodes that ran in the newest step are those that saw the highest version (``__interrupt__``
  and ``__input__`` are bookkeeping, not nodes). A thread's input checkpoint has none.
* ``x.langgraph.writes``: ``NODE wrote CHANNELS to checkpoint ID`` (the node from the task path;
  ``input`` for LangGraph's writes of no task, a resume's value).
* ``x.langgraph.parts``: ``parts node of height H: N ids`` (a node of the tree a checkpoint names
  its list channels' parts through; integrations/langgraph/partree.py).

Both values are the saver's serde bytes; only its ``msgpack`` type is read, with plain msgpack:
an extension-typed value (what the serde writes for a class) becomes ``None``, so nothing is
constructed, whatever a writer named. A body this cannot read gets no summary (``None``).

``task_runs`` lists a LangGraph thread namespace's task runs, one row per try, for ``episode``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

Summarizer = Callable[[dict], str]
SUMMARIZERS: dict[str, Summarizer] = {}
_BOOKKEEPING = frozenset({"__interrupt__", "__input__"})
_plain = msgspec.msgpack.Decoder(ext_hook=lambda code, data: None)  # an ext value is left out, never built


def register(kind: str, fn: Summarizer) -> None:
    """Show records of ``kind`` as ``fn(body)`` says (a later registration replaces an earlier one)."""
    SUMMARIZERS[kind] = fn


def summarize(kind: str, body: dict) -> str | None:
    """The registered summary of a record of ``kind`` with ``body``; None when there is none or the
    body is not what its summarizer reads."""
    fn = SUMMARIZERS.get(kind)
    if fn is None:
        return None
    try:
        return fn(body)
    except (KeyError, TypeError, ValueError, AttributeError, msgspec.DecodeError):
        return None


def serde_value(t: Any, data: Any) -> Any:
    """A LangGraph serde value of type ``msgpack`` as plain data (ext values as None); None otherwise."""
    if t != "msgpack" or not isinstance(data, (bytes, bytearray, memoryview)):
        return None
    try:
        return _plain.decode(data)
    except msgspec.DecodeError:
        return None


def _version(v: Any) -> tuple[int, Any]:
    """A channel version's order: LangGraph's savers write ints or ``"<zero-padded int>.<...>"``."""
    if isinstance(v, (int, float)):
        return (0, v)
    head = str(v).split(".", 1)[0]
    return (0, int(head)) if head.isdigit() else (1, str(v))


def newest_nodes(checkpoint: Any) -> list[str]:
    """The nodes that ran in the step that made ``checkpoint`` (a dict), from its ``versions_seen``."""
    seen = checkpoint.get("versions_seen") if isinstance(checkpoint, dict) else None
    if not isinstance(seen, dict):
        return []
    best: dict[str, tuple[int, Any]] = {}
    for node, versions in seen.items():
        if node in _BOOKKEEPING or not isinstance(versions, dict) or not versions:
            continue
        best[str(node)] = max(_version(v) for v in versions.values())
    if not best:
        return []
    top = max(best.values())
    return sorted(n for n, v in best.items() if v == top)


def langgraph_checkpoint(body: dict) -> str:
    md = serde_value(body.get("metadata_type"), body.get("metadata"))
    md = md if isinstance(md, dict) else {}
    parts = []
    if "step" in md:
        parts.append(f"step {md['step']}")
    if md.get("source"):
        parts.append(f"({md['source']})")
    nodes = newest_nodes(serde_value(body.get("checkpoint_type"), body.get("checkpoint")))
    if nodes and md.get("source") != "input":
        parts.append("by " + ",".join(nodes))
    parts.append(f"checkpoint {body['checkpoint_id']}")
    return " ".join(parts)


def task_node(task_path: str) -> str:
    """A task's node from LangGraph's task path (``~__pregel_pull, NODE``); "" when it names none."""
    items = [p.strip() for p in str(task_path).split(",")]
    if len(items) >= 2 and items[0] == "~__pregel_pull":
        return items[1]
    return ""


NULL_TASK = "00000000-0000-0000-0000-000000000000"  # LangGraph's id for writes of no task (a resume's input)


def langgraph_writes(body: dict) -> str:
    tid = str(body["task_id"])
    node = task_node(body.get("task_path", "")) or ("input" if tid == NULL_TASK else f"task {tid[:8]}")
    channels = ",".join(str(c) for c in body.get("channels") or [])
    return f"{node} wrote {channels} to checkpoint {body['checkpoint_id']}"


def langgraph_parts(body: dict) -> str:
    height, ids = body["height"], body["ids"]
    what = "part blobs" if height == 1 else f"nodes of height {height - 1}"
    return f"parts node of height {int(height)}: {len(ids)} {what}"


register("x.langgraph.checkpoint", langgraph_checkpoint)
register("x.langgraph.writes", langgraph_writes)
register("x.langgraph.parts", langgraph_parts)


# -- LangGraph task runs (``objstore episode``) -------------------------------------------------------
ERROR_CHANNEL, INTERRUPT_CHANNEL = "__error__", "__interrupt__"


def _step_of(cp_body: dict | None) -> int | None:
    md = serde_value(cp_body.get("metadata_type"), cp_body.get("metadata")) if cp_body else None
    return md["step"] + 1 if isinstance(md, dict) and isinstance(md.get("step"), int) else None


def task_runs(records: Iterable[Any]) -> list[dict]:
    """Every task run of a LangGraph thread namespace's records (oldest first): one row per try.

    A task's ``x.langgraph.writes`` record is a try that ended (``succeeded``, ``failed`` when it
    wrote LangGraph's error channel, ``interrupted`` when it wrote an interrupt); an ``attempt``
    record ``attempt_recorder()`` wrote (no checkpoint id) is a failed try a RetryPolicy retried
    in-process, which reaches no checkpointer. The saver's own attempt records repeat what the
    writes say and are skipped. A row's ``retries`` is the ``attempts`` field of the checkpoint its
    step made (else of the checkpoint it ran from): ``recorded``, ``unrecorded`` (in-task retries
    not recorded), or ``unknown`` (written before that field)."""
    rows: list[dict] = []
    cps: dict[str, dict] = {}
    child: dict[str, dict] = {}
    tries: dict[str, list[dict]] = {}
    for r in records:
        b = r.body
        if "deleted" in b:
            continue
        if r.kind == "x.langgraph.checkpoint":
            cps[str(b["checkpoint_id"])] = b
            child.setdefault(str(b.get("parent_id") or ""), b)
        elif r.kind == "attempt" and not (b.get("context") or {}).get("checkpoint_id"):
            ctx = b.get("context") or {}
            row = {"step": b.get("step"), "node": str(ctx.get("node") or ""), "task_id": str(ctx.get("task_id") or ""),
                   "state": "failed", "error": b.get("error"), "checkpoint_id": "", "by_recorder": True}
            tries.setdefault(row["task_id"], []).append(row)
            rows.append(row)
        elif r.kind == "x.langgraph.writes" and str(b["task_id"]) != NULL_TASK:
            channels = [str(c) for c in b.get("channels") or []]
            state = "failed" if ERROR_CHANNEL in channels else "interrupted" if INTERRUPT_CHANNEL in channels else "succeeded"
            tid, cid = str(b["task_id"]), str(b["checkpoint_id"])
            prev = tries.get(tid, [])
            if state == "failed" and prev and prev[-1].get("by_recorder") and not prev[-1]["checkpoint_id"]:
                prev[-1]["checkpoint_id"] = cid  # the recorder's record of this very try (the last one the policy allowed)
                continue
            row = {"step": _step_of(cps.get(cid)), "node": task_node(b.get("task_path", "")) or (prev[-1]["node"] if prev else ""),
                   "task_id": tid, "state": state, "error": None, "checkpoint_id": cid, "by_recorder": False}
            tries.setdefault(tid, []).append(row)
            rows.append(row)
    for rs in tries.values():
        for i, row in enumerate(rs):
            row["attempt"] = i
    for row in rows:
        cid = row["checkpoint_id"]
        made = child.get(cid) or cps.get(cid) or {}
        row["retries"] = "recorded" if row["by_recorder"] else made.get("attempts") or "unknown"  # a recorder row: it was there
        if row["step"] is None and cid in cps:
            row["step"] = _step_of(cps[cid])
    # by step (stable: commit order within one), as LangGraph's writes may land after the next step's checkpoint
    return sorted(rows, key=lambda row: (row["step"] is None, row["step"] or 0))
