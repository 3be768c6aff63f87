"""What ``objstore show`` prints of a LangGraph checkpoint record beyond its stored fields: its
metadata and checkpoint decoded, and a summary of each channel value, all read through the saver's
serializer (``strict_serde``: LangGraph's safe types only, so nothing is constructed that is not
allowed; a value of any other type shows as the fields it was stored with). The CLI loads this
module only to show an ``x.langgraph.checkpoint`` record, and only when LangGraph is installed.

Parts are read through the store's normal read path: a part whose bytes were erased shows as
``(erased)``, never its body; a deleted checkpoint record has nothing to decode.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import Erased, ObjectNotFound
from ...runs import records as R
from ...runs import xsummary
from . import partree as T
from . import parts as P
from .saver import strict_serde

WIDTH = 100  # characters of a value's text shown per line


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= WIDTH else text[:WIDTH - 1] + "…"


def brief(value: Any) -> str:
    """One line for a channel value or a list element: a message as ``type: content`` (and the
    tools it calls), anything else as its short repr."""
    kind, content = getattr(value, "type", None), getattr(value, "content", None)
    if isinstance(kind, str) and content is not None:
        calls = [c.get("name") for c in getattr(value, "tool_calls", None) or [] if isinstance(c, dict)]
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        return _short(f"{kind}: {text!r}" + (f" calls {', '.join(map(str, calls))}" if calls else ""))
    return _short(repr(value))


def _part(log: Any, serde: Any, oid: bytes) -> str:
    try:
        return brief(P.decode(serde, log.get_blob(oid)))
    except (Erased, ObjectNotFound):
        return f"(erased) {bytes(oid).hex()[:12]}"


def _flat(log: Any, body: dict) -> list[bytes]:
    """Every element's part id of a checkpoint body, in layout order (its parts nodes read as records)."""
    return T.flatten(body.get("layout") or [], list(body.get("parts") or []), T.check_fanout(body.get("fanout")),
                     lambda oid: T.read_node(log.record, oid))


def channel_lines(log: Any, body: dict, serde: Any) -> list[str]:
    """``channel: summary`` lines (a list channel: its length, then one line per element)."""
    out: list[str] = []
    ids = _flat(log, body)
    i = 0
    for name, n in body.get("layout") or []:
        if n == P.SINGLE:
            out.append(f"  {name}: {_part(log, serde, ids[i])}")
            i += 1
            continue
        out.append(f"  {name}: list of {n}")
        out.extend(f"    [{k}] {_part(log, serde, oid)}" for k, oid in enumerate(ids[i:i + n]))
        i += n
    return out


def describe(log: Any, value: dict, serde: Any = None) -> list[str]:
    """The lines ``objstore show`` adds for an ``x.langgraph.checkpoint`` record object ``value``."""
    body = value.get("body") or {}
    if R.DELETED_FIELD in body:
        return []
    serde = strict_serde(serde)
    md = P.loads(serde, body["metadata_type"], body["metadata"])
    cp = P.loads(serde, body["checkpoint_type"], body["checkpoint"])
    lines = ["", f"LangGraph checkpoint {body['checkpoint_id']} (parent {body.get('parent_id') or '-'})",
             "metadata: " + json.dumps(md, default=str, sort_keys=True)]
    if isinstance(cp, dict):
        nodes = xsummary.newest_nodes(cp)
        lines.append(f"written by: {', '.join(nodes) or '-'}  at {cp.get('ts', '-')}")
        if cp.get("updated_channels") is not None:
            lines.append("updated channels: " + ", ".join(map(str, cp["updated_channels"])))
    lines.append("channel values:")
    return lines + channel_lines(log, body, serde)


def _channels(log: Any, body: dict) -> dict[str, tuple[int, list[bytes]]]:
    """channel -> (layout count, its part ids), from a checkpoint body (no part read; its nodes are)."""
    out: dict[str, tuple[int, list[bytes]]] = {}
    ids, i = _flat(log, body), 0
    for name, n in body.get("layout") or []:
        k = 1 if n == P.SINGLE else n
        out[str(name)] = (n, [bytes(x) for x in ids[i:i + k]])
        i += k
    return out


def differences(log: Any, a: dict, b: dict, serde: Any = None) -> list[dict]:
    """The channel values of two checkpoint bodies (of one thread or two) compared: per channel that
    differs, ``{"channel", "count_a", "count_b", "index", "a", "b"}`` with the first difference (a
    list channel: the first differing element's index, ``None`` for a single value; ``a``/``b`` its
    one-line summaries, a message as ``type: 'content'``). Parts are compared by id
    (content-addressed: equal ids, equal values), so only the differing elements are read."""
    serde = strict_serde(serde)
    ca, cb = _channels(log, a), _channels(log, b)
    out: list[dict] = []
    for name in sorted(set(ca) | set(cb)):
        (na, ia), (nb, ib) = ca.get(name, (0, [])), cb.get(name, (0, []))
        if ia == ib:
            continue
        if P.SINGLE in (na, nb):
            k = None
            left = _part(log, serde, ia[0]) if ia else "(absent)"
            right = _part(log, serde, ib[0]) if ib else "(absent)"
        else:
            k = next((j for j, (x, y) in enumerate(zip(ia, ib, strict=False)) if x != y), min(len(ia), len(ib)))
            left = _part(log, serde, ia[k]) if k < len(ia) else "(none)"
            right = _part(log, serde, ib[k]) if k < len(ib) else "(none)"
        out.append({"channel": name, "count_a": len(ia), "count_b": len(ib), "index": k, "a": left, "b": right})
    return out


def compare(log: Any, a: dict, b: dict, serde: Any = None) -> list[str]:
    """``differences`` as text lines, the first difference named per channel."""
    lines = []
    for d in differences(log, a, b, serde):
        if d["index"] is None:
            lines.append(f"  {d['channel']}: {d['a']}  |  {d['b']}")
        else:
            lines.append(f"  {d['channel']}: {d['count_a']} vs {d['count_b']} items, first difference at [{d['index']}]: "
                         f"{d['a']}  |  {d['b']}")
    return lines or ["  (the same channel values)"]
