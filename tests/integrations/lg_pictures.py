"""The realistic LangGraph thread's pictures, made comparable (not a test module: imported by the picture tests).

``build(root)`` writes the thread of tests/integrations/test_langgraph_acceptance_reading.py into a fresh store:
``lg_graphs.agent_graph`` (a stub LLM, a tool failing once under RetryPolicy with ``attempt_recorder()``
attached, an interrupt and its resume, a subgraph), then ``update_state`` on the step-1 checkpoint (a
time-travel fork). It returns the thread's two runs: the root namespace's and the subgraph's.

Such a thread is not byte-reproducible: checkpoint ids are uuid6 (time and random bits), LangGraph's task ids
and interrupt ids derive from them, channel versions carry a random tail, records carry the clock, and so
every record id and the size of every checkpoint body differ from one build to the next. ``normal`` keeps
the structure and takes out exactly those: every ``time`` (and a checkpoint's ``ts``) dropped, every uuid
replaced by ``uuid-<n>``, a labelled run's name by ``run-<n>``, a trace id by ``trace-<n>``, and every object id (64 hex digits, or the 12- and 16-digit prefixes the page and
the span ids show) by ``id-<n>``, numbered in order of first appearance (so two names of one id stay one
name), a channel version's random tail cut, a body's ``size`` kept only as present or not. The saver's
serde bytes (``checkpoint``, ``metadata``: hex of msgpack) are decoded first, so what they say is compared.
Everything else — kinds, branches, LSNs, parents, summaries, fork reasons, attempts, errors, the diff, span
names, kinds, statuses, links and attribute values — is compared as is.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, NamedTuple

import lg_graphs as G
import ormsgpack
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from objstore.integrations.langgraph import ObjstoreSaver

THREAD = "T"
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
RUN = re.compile(r"\bl-[0-9a-f]{48}\b")  # a labelled run's name: the labels' hash, and the subgraph's namespace has a uuid
TRACE = re.compile(r"\b[0-9a-f]{32}\b")  # a span's trace id: a hash of the run's name
OID = re.compile(r"\b[0-9a-f]{64}\b")
PREFIX = re.compile(r"\b[0-9a-f]{12}(?:[0-9a-f]{4})?\b")  # a short id (page, log) or a span id (its first 8 bytes)
VERSION = re.compile(r"^(\d{32})\.\S+$")  # ObjstoreSaver.get_next_version: a counter and a random tail
SERDE = ("checkpoint", "metadata")  # the saver's body fields holding serde bytes (hex of msgpack)


class Thread(NamedTuple):
    """What ``build`` wrote: the two runs, and the checkpoint ids the fork joins."""

    main: str  # the root namespace's run
    sub: str  # the subgraph namespace's run
    step1: str  # the step-1 checkpoint, which update_state resumed
    forked: str  # the checkpoint update_state wrote: the first record of branch 1


def build(root: str) -> Thread:
    """Write the thread into a new store at ``root``.

    The steps are the acceptance test's; ``max_concurrency=1`` and ``durability="sync"`` only fix the order
    in which LangGraph hands the saver its calls: its background saves run on one worker thread in submission
    order, and each step's checkpoint is saved before the next step's task runs (so the tool's failed try,
    recorded from the task's own thread, cannot land among the previous step's saves). The records are
    those of the default settings; their LSNs are then the same in every build."""
    with ObjstoreSaver(root) as saver:
        graph = G.agent_graph(Counter()).compile(checkpointer=saver)
        config: dict[str, Any] = {"configurable": {"thread_id": THREAD}, "callbacks": [saver.attempt_recorder()],
                                  "max_concurrency": 1}
        graph.invoke({"messages": [HumanMessage("rome", id="h1")]}, config, durability="sync")
        graph.invoke(Command(resume="yes"), config, durability="sync")
        step1 = next(t for t in saver.list(config) if t.metadata["step"] == 1 and not t.config["configurable"]["checkpoint_ns"])
        forked = graph.update_state(step1.config, {"messages": [HumanMessage("paris", id="h2")]})
        main = saver._run(THREAD, "")
        sub = [r for r in saver._thread_runs(THREAD) if r != main]
    assert main is not None and len(sub) == 1, sub
    return Thread(main, sub[0], step1.config["configurable"]["checkpoint_id"], forked["configurable"]["checkpoint_id"])


def _decoded(value: Any) -> Any:
    """Hex of msgpack (a saver's serde field) as what it encodes; anything else as is."""
    if isinstance(value, str) and re.fullmatch(r"(?:[0-9a-f]{2})+", value):
        try:
            return {"msgpack": ormsgpack.unpackb(bytes.fromhex(value))}
        except ormsgpack.MsgpackDecodeError:
            return value
    return value


def _plain(value: Any, key: str | None = None) -> Any:
    """Times and random tails out, bodies (JSON text) and serde bytes opened; ids still as they are."""
    if key == "body" and isinstance(value, str) and value.startswith("{"):
        return _plain(json.loads(value))
    if key in SERDE:
        value = _decoded(value)
    if isinstance(value, dict):
        return {k: ("present" if k == "size" and v is not None else _plain(v, k)) for k, v in value.items()
                if k not in ("time", "ts", "startTimeUnixNano", "endTimeUnixNano", "version")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and (m := VERSION.match(value)):
        return f"{int(m[1])}.<random>"
    return value


def normal(value: Any) -> Any:
    """``value`` (a page's data, an OTLP/JSON document, or a DOM outline's text) in the comparable form the
    module docstring describes."""
    text = value if isinstance(value, str) else json.dumps(_plain(value), sort_keys=True, ensure_ascii=False)
    names: dict[str, str] = {}

    def name(prefix: str, token: str) -> str:
        return names.setdefault(token, f"{prefix}-{sum(v.startswith(prefix) for v in names.values()) + 1}")

    text = UUID.sub(lambda m: name("uuid", m[0]), text)
    text = RUN.sub(lambda m: name("run", m[0]), text)
    text = TRACE.sub(lambda m: name("trace", m[0]), text)
    full = OID.findall(text)
    for oid in full:
        name("id", oid)
    text = OID.sub(lambda m: names[m[0]], text)

    def short(m: re.Match) -> str:
        hits = {names[o] for o in full if o.startswith(m[0])}
        return hits.pop() if len(hits) == 1 else name("id", m[0])

    text = PREFIX.sub(short, text)
    return text if isinstance(value, str) else json.loads(text)
