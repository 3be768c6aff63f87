"""A list channel's part ids as a tree shared with the checkpoints before it: what keeps a thread linear as written.

A chat's ``messages`` channel holds the whole conversation, so a checkpoint that listed every
element's part id (layout 1, a flat list) grew by one id per turn and a thread of N turns wrote
N²/2 ids. Since the checkpoint body field ``fanout`` (F, 8 when written by this module) a list
channel of n elements is named by a *counter tree*:

- a **node** is an ``x.langgraph.parts`` record ``{"height": h, "ids": [F ids]}`` covering F^h
  consecutive elements, aligned at a multiple of F^h: height 1 names F part blobs, height h > 1
  names F nodes of height h - 1. Its ``ids`` is a ref field, so verify follows it and gc keeps what
  it names while the node is live;
- the checkpoint's ``parts`` lists, per channel in layout order, n written in base F: d_k nodes of
  height k for each digit from the highest down, the last digit's d_0 ids being part blobs — the
  *top* of the channel. A single value (layout count -1) is one blob id, as in layout 1.

The shape is a function of n and F alone (``shape``), so a reader needs no other field, and a
checkpoint that appends one element to its parent's list reuses every node of the parent but at
most a few: it writes its new blob, a node when a digit carries (every F turns, every F² turns one
more level...) and a top of at most (F - 1) ids per digit — O(log n) ids per turn, not O(n). Any
other change (an edited or removed element) reuses every node whose elements are unchanged and at
the same place (``build``).

Invariants (what readers and prune rely on):

- a node is appended before the checkpoint that first names it, on that checkpoint's branch, in
  the same commit; a checkpoint reuses only nodes of its parent checkpoint of the same run, so every
  node a checkpoint names is on its own lineage (a copy, whose parent is in another run, writes its
  nodes again);
- a node holds exactly F ids and the height its place says: anything else is refused on read
  (``InvalidRecord``), never served as a shorter list.

This module is pure: the savers append the nodes and read them (``children`` callables).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...errors import Erased, InvalidInput, InvalidRecord
from ...runs.records import DELETED_FIELD

NODE = "x.langgraph.parts"
# [name, type, required, is_ref] (the core's schema field lists)
NODE_FIELDS: list[list[Any]] = [
    ["height", "int", True, False],  # 1: ids are part blobs; h > 1: ids are nodes of height h - 1
    ["ids", "list", True, True],  # exactly the tree's fanout of them
]
FANOUT = 8  # what this saver writes: 8 keeps a 200-turn chat's checkpoint at ~10 ids (n in base 8) and a node at 256 bytes of ids
SINGLE = -1  # layout count of a channel stored as one part (parts.SINGLE)

Children = Callable[[bytes], tuple[int, Sequence[bytes]]]  # node id -> (height, ids), as stored


def node_of(rec: Any) -> tuple[int, tuple[bytes, ...]]:
    """(height, ids) of a record a tree names as a node (``runs.records.Record``): refused when it is
    another kind's, Erased when a deletion left only its place."""
    if rec.kind != NODE:
        raise InvalidRecord(f"a LangGraph checkpoint names {bytes(rec.id).hex()} as a parts node; it is a {rec.kind} record")
    if DELETED_FIELD in rec.body:
        raise Erased(f"LangGraph parts node {bytes(rec.id).hex()} was deleted: the checkpoints naming it do not read")
    return rec.body["height"], tuple(bytes(x) for x in rec.body["ids"])


def read_node(record: Callable[[bytes], Any], oid: bytes) -> tuple[int, tuple[bytes, ...]]:
    """``node_of`` what ``record(oid)`` (``RunLog.record``) reads: an object that is no record (a blob) is refused as
    the store's data, like a record of another kind, not as the caller's input."""
    try:
        rec = record(oid)
    except InvalidInput as e:
        raise InvalidRecord(f"a LangGraph checkpoint names {bytes(oid).hex()} as a parts node; "
                            f"{e.args[0] if e.args else e}") from None
    return node_of(rec)


def shape(n: int, fanout: int) -> list[int]:
    """The heights of a list channel's top entries, highest first: ``n`` written in base ``fanout``
    (digit d_k gives d_k entries of height k)."""
    if type(n) is not int or n < 0:
        raise InvalidRecord(f"a LangGraph list channel's length must be a count, got {n!r}")
    digits: list[int] = []
    while n:
        n, d = divmod(n, fanout)
        digits.append(d)
    return [h for h in range(len(digits) - 1, -1, -1) for _ in range(digits[h])]


def top_size(n: int, fanout: int | None) -> int:
    """How many of a checkpoint's ``parts`` ids a channel of layout count ``n`` takes."""
    if type(n) is not int or n < SINGLE:
        raise InvalidRecord(f"a LangGraph list channel's length must be a count, got {n!r}")
    if n == SINGLE:
        return 1
    return n if not fanout else len(shape(n, fanout))


def check_fanout(fanout: Any) -> int | None:
    """A checkpoint body's ``fanout`` (None: layout 1, flat), refused when it cannot be a tree's."""
    if fanout is None:
        return None
    if type(fanout) is not int or fanout < 2:
        raise InvalidRecord(f"a LangGraph checkpoint's fanout must be an integer of at least 2, got {fanout!r}")
    return fanout


def _node(children: Children, oid: bytes, height: int, fanout: int) -> Sequence[bytes]:
    h, ids = children(oid)
    if h != height or len(ids) != fanout:
        raise InvalidRecord(f"LangGraph parts node {bytes(oid).hex()} holds {len(ids)} ids of height {h}; "
                            f"its place in the tree wants {fanout} of height {height}")
    return ids


def expand(top: Sequence[bytes], n: int, fanout: int, children: Children, seen: set[bytes] | None = None) -> list[bytes]:
    """The ``n`` element part ids a channel's ``top`` names (its nodes read with ``children``).

    A node named twice is refused: ``build`` makes a node per place, so a tree holds each once, and a forged
    checkpoint sharing one node under itself (a height-20 node whose ids are one node eight times, and so on
    down) would otherwise make a reader expand 8^20 ids from 21 records. ``seen``: the nodes the checkpoint's
    other channels named (one node under many channels is the same amplification)."""
    heights = shape(n, fanout)
    if len(heights) != len(top):
        raise InvalidRecord(f"a LangGraph list of {n} elements in a tree of fanout {fanout} has {len(heights)} top ids, "
                            f"the record lists {len(top)}")
    out: list[bytes] = []
    seen = set() if seen is None else seen
    for h, oid in zip(heights, top, strict=True):
        _leaves(children, oid, h, fanout, out, seen)
    return out


def _leaves(children: Children, oid: bytes, height: int, fanout: int, out: list[bytes], seen: set[bytes]) -> None:
    if height == 0:
        out.append(bytes(oid))
        return
    stack = [(oid, height)]  # iterative, left to right
    while stack:
        cur, h = stack.pop()
        if cur in seen:
            raise InvalidRecord(f"a LangGraph parts tree names node {bytes(cur).hex()} twice")
        seen.add(cur)
        ids = _node(children, cur, h, fanout)
        if h == 1:
            out.extend(bytes(x) for x in ids)
        else:
            stack.extend((x, h - 1) for x in reversed(ids))


def nodes(top: Sequence[bytes], n: int, fanout: int, children: Children) -> set[bytes]:
    """Every node id a channel's tree holds (what prune must keep while a checkpoint naming it lives)."""
    out: set[bytes] = set()
    stack = [(oid, h) for h, oid in zip(shape(n, fanout), top, strict=True) if h > 0]
    while stack:
        cur, h = stack.pop()
        if cur in out:
            continue
        out.add(cur)
        if h > 1:
            stack.extend((x, h - 1) for x in _node(children, cur, h, fanout))
    return out


def build(ids: Sequence[bytes], fanout: int, make: Callable[[int, list[list[bytes]]], list[bytes]],
          parent: tuple[Sequence[bytes], int, Children] | None = None) -> list[bytes]:
    """The top of a list channel whose element part ids are ``ids``: nodes of ``parent`` (its top,
    its element count and how to read its nodes) covering the same elements at the same place are
    reused; the others are made by ``make(height, [ids of each new node])`` -> their ids, called
    once per height, lowest first (a node's children exist before it)."""
    n = len(ids)
    span = [1]
    while span[-1] <= max(n, 1):
        span.append(span[-1] * fanout)
    reuse: dict[tuple[int, int], bytes] = {}
    if parent is not None:
        ptop, pn, children = parent
        pflat = expand(ptop, pn, fanout, children)
        ids = list(ids)
        stack: list[tuple[int, int, bytes]] = []
        start = 0
        for h, oid in zip(shape(pn, fanout), ptop, strict=True):
            if h:
                stack.append((h, start, oid))
            start += fanout ** h
        while stack:  # top down: a node whose elements all stand unchanged is kept whole, else its children are tried
            h, s, oid = stack.pop()
            e = s + fanout ** h
            if e <= n and ids[s:e] == pflat[s:e]:
                reuse[(h, s)] = oid
            elif h > 1 and s < n:
                kids = _node(children, oid, h, fanout)
                stack.extend((h - 1, s + i * fanout ** (h - 1), x) for i, x in enumerate(kids))
    # which nodes the new shape needs and does not reuse, top down
    need: dict[int, list[int]] = {}
    todo: list[tuple[int, int]] = []
    start = 0
    top_places: list[tuple[int, int]] = []
    for h in shape(n, fanout):
        top_places.append((h, start))
        if h:
            todo.append((h, start))
        start += span[h]
    while todo:
        h, s = todo.pop()
        if (h, s) in reuse:
            continue
        need.setdefault(h, []).append(s)
        if h > 1:
            todo.extend((h - 1, s + i * span[h - 1]) for i in range(fanout))
    made: dict[tuple[int, int], bytes] = {}

    def at(h: int, s: int) -> bytes:
        return bytes(ids[s]) if h == 0 else reuse.get((h, s)) or made[(h, s)]

    for h in sorted(need):
        starts = sorted(need[h])
        got = make(h, [[at(h - 1, s + i * span[h - 1]) for i in range(fanout)] for s in starts])
        made.update(zip(((h, s) for s in starts), got, strict=True))
    return [at(h, s) for h, s in top_places]


def counts(layout: Iterable[Any]) -> Iterable[Any]:
    """Each layout entry's count, an entry that is no ``[channel, count]`` pair refused."""
    for entry in layout:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise InvalidRecord(f"a LangGraph layout entry is [channel, count], got {entry!r:.80}")
        yield entry[1]


def flatten(layout: Iterable[Sequence[Any]], parts: Sequence[bytes], fanout: int | None, children: Children) -> list[bytes]:
    """A checkpoint's ``parts`` as layout 1 has them (every element's part id, in layout order); a layout entry
    that is no ``[channel, count]`` pair, or counts that do not add up to the ids, are refused (either layout)."""
    out: list[bytes] = []
    seen: set[bytes] = set()  # the nodes of every channel: a node under two channels is refused too
    i = 0
    for n in counts(layout):
        k = top_size(n, fanout)  # refuses a length that is no count
        top = parts[i:i + k]
        if len(top) != k:
            raise InvalidRecord(f"a LangGraph layout names more parts than the record's {len(parts)}")
        out.extend([bytes(x) for x in top] if n == SINGLE or not fanout else expand(top, n, fanout, children, seen))
        i += k
    if i != len(parts):
        raise InvalidRecord(f"a LangGraph layout names {i} parts, the record lists {len(parts)}")
    return out


def tree_nodes(layout: Iterable[Sequence[Any]], parts: Sequence[bytes], fanout: int | None, children: Children) -> set[bytes]:
    """Every node a checkpoint's channels name (none in layout 1)."""
    out: set[bytes] = set()
    if not fanout:
        return out
    i = 0
    for n in counts(layout):
        k = top_size(n, fanout)
        if n != SINGLE:
            out |= nodes(parts[i:i + k], n, fanout, children)
        i += k
    return out
