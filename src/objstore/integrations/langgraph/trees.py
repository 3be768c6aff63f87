"""``PartTrees``: the savers' parts trees on a run log — the nodes a put appends, the nodes a read follows.

What it owns: the ``partree`` shape (pure) put to work on a ``RunLog``:

- ``tops`` appends the nodes a checkpoint needs, inside the put's batch, on the checkpoint's branch,
  just before it (one ``append_many`` per height, each with the branch head it expects), reusing the
  nodes of the checkpoint it continues when that one is of the same run and has a tree of the same
  fanout; a parent in another run (a copy's source) gives nothing to reuse, so every node a
  checkpoint names is on its own lineage (partree's invariant, which prune relies on);
- ``children`` reads a node as a record of its run (checked against its schema like any ``x.`` record;
  a deleted one raises Erased) and keeps it in a bounded memory: a record's id is the hash of its
  bytes, so a kept node is never stale. A node made by a put whose batch then failed stays in the
  memory under an id nothing committed names: never read, only evicted;
- ``flat`` gives a checkpoint body's element ids as the flat layout has them (both layouts);
- ``orphans`` names the nodes to delete with a set of checkpoints: those no remaining checkpoint
  names, so a live checkpoint never names a deleted node and gc erases the parts only deleted
  checkpoints held.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from ...runs import records as R
from ...runs.api import RunLog
from . import partree as T

CACHE = 8192  # nodes kept in memory (about 300 bytes each: 8 ids and a height)


class PartTrees:
    def __init__(self, log: RunLog) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._nodes: OrderedDict[bytes, tuple[int, tuple[bytes, ...]]] = OrderedDict()

    def children(self, oid: bytes) -> tuple[int, tuple[bytes, ...]]:
        """A node's (height, ids)."""
        with self._lock:
            hit = self._nodes.get(oid)
            if hit is not None:
                self._nodes.move_to_end(oid)
                return hit
        return self._keep(oid, *T.read_node(self.log.record, oid))

    def _keep(self, oid: bytes, height: int, ids: Sequence[bytes]) -> tuple[int, tuple[bytes, ...]]:
        got = (height, tuple(ids))
        with self._lock:
            self._nodes[bytes(oid)] = got
            if len(self._nodes) > CACHE:
                self._nodes.popitem(last=False)
        return got

    def flat(self, body: dict) -> list[bytes]:
        """A checkpoint body's element part ids, every channel in layout order (through its tree)."""
        return T.flatten(body["layout"], body["parts"], T.check_fanout(body.get("fanout")), self.children)

    def tops(self, run: str, branch: int | None, head: bytes | None, layout: list[list[Any]], ids: Sequence[bytes],
             parent: R.Record | None) -> tuple[list[bytes], bytes | None]:
        """A new checkpoint's ``parts`` (each list channel's tree top) from its flat part ``ids``, and the
        branch head after the nodes it needed (appended now: call inside the put's batch, before the
        checkpoint, which then expects that head). ``parent``: the checkpoint it continues, if known."""
        before: dict[str, tuple[list[bytes], int]] = {}
        if parent is not None and parent.run == run and T.check_fanout(parent.body.get("fanout")) == T.FANOUT:
            i = 0
            for name, n in parent.body["layout"]:
                k = T.top_size(n, T.FANOUT)
                if n != T.SINGLE:
                    before[name] = (parent.body["parts"][i:i + k], n)
                i += k
        cur = [head]

        def make(height: int, kids: list[list[bytes]]) -> list[bytes]:
            recs = self.log.append_many(run, T.NODE, [{"height": height, "ids": k} for k in kids], branch=branch,
                                        allow_retained=True, expect_head=cur[0])
            for r, k in zip(recs, kids, strict=True):
                self._keep(r.id, height, k)
            cur[0] = recs[-1].id
            return [r.id for r in recs]

        out: list[bytes] = []
        i = 0
        for name, n in layout:
            if n == T.SINGLE:
                out.append(ids[i])
                i += 1
                continue
            par = before.get(name)
            out += T.build(ids[i:i + n], T.FANOUT, make, (par[0], par[1], self.children) if par else None)
            i += n
        return out, cur[0]

    def nodes(self, recs: Iterable[R.Record]) -> set[bytes]:
        """Every node the checkpoint records ``recs`` name."""
        out: set[bytes] = set()
        for r in recs:
            b = r.body
            out |= T.tree_nodes(b["layout"], b["parts"], T.check_fanout(b.get("fanout")), self.children)
        return out

    def orphans(self, gone: Iterable[R.Record], kept: Iterable[R.Record], held: set[bytes] | frozenset[bytes] = frozenset()) -> list[bytes]:
        """The nodes of the checkpoints ``gone`` that no checkpoint ``kept`` names and ``held`` (what a live
        copy reaches) does not hold: to be deleted with ``gone``."""
        return sorted(self.nodes(gone) - self.nodes(kept) - held)
