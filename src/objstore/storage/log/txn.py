"""A commit in the making (``Txn``): the objects and ref moves one commit applies together or not at all.

Invariants kept here:

* a ref move is checked as it is made (compare-and-swap against the refs as this commit sees
  them, forward-only and write-once rules), and again by the tables' rules when the entry is planned;
* an object already stored (with its body) is not stored again; a record is looked for in the
  active segment only (a new record is new: it names its parent and LSN);
* each record's and chained object's index row (the record facts, ``facts``) is worked out once, at ``put``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ...errors import Conflict
from .. import codec
from ..refs import _NOT_A_CHAIN, check_move, forward_only
from .entry import LargeBlob, RemovedBody
from .facts import object_facts
from .format import CHAIN_TYPES, _show
from .tables import LogState


class TxnHost(Protocol):
    """What a transaction needs of its engine (``Engine`` has it all)."""

    tables: LogState

    def has(self, oid: bytes) -> bool: ...

    def has_body(self, oid: bytes) -> bool: ...

    def read(self, oid: bytes) -> bytes: ...


class Txn:
    """A commit in the making: objects and ref moves, applied together or not at all."""

    def __init__(self, engine: TxnHost) -> None:
        self.engine = engine
        self.objects: dict[bytes, tuple[str, bytes | LargeBlob | RemovedBody]] = {}  # id -> (type, canonical bytes or a LargeBlob)
        self.decoded: dict[bytes, dict] = {}  # structured objects' values, to index without decoding again
        self.facts: dict[bytes, list] = {}  # id -> the index facts its entry's meta carries (object_facts)
        self.moves: dict[str, list] = {}  # name -> [old at first touch, new, reason]
        self.when: float | None = None  # the entry's time (None: now); upgrade keeps format-1 times
        self.spills: list = []  # LargeBlob spill files to remove when the commit ends, whatever happens
        self.replay = False  # upgrade replays format-1 ref moves as they were (forward-only rules off)
        # The commit returns once its entry is written, not synced: the next synced commit of this log (an
        # fdatasync of the same file) makes it durable. For a caller whose next commit always follows (the
        # LangGraph saver's put_writes: the step's put syncs both); a seal still syncs.
        self.defer_sync = False

    def hold_log(self, timeout: float | None) -> None:
        """Keep every other process's commit to this log out until this one ends, before the batch reads what it
        decides on (a batch in a caller's hands: it cannot be re-run on ``StaleBase``). A log on disk holds its
        writer lock for the whole transaction already: nothing to do; object storage takes the log's lease."""

    def put(self, oid: bytes, otype: str, canonical: bytes | LargeBlob, value: dict | None = None, facts: list | None = None) -> None:
        """Add an object (``value``: its decoded payload, if the caller has it; ``facts``: its index row, if the
        writer built it with the record — what ``object_facts`` gives for it, found without a walk of its body)."""
        if oid in self.objects:
            return
        # A record names its parent and LSN, so a new one is new: only the active segment is
        # checked for it, while other objects are looked up everywhere (which may search every
        # sealed segment's index). Were a record ever stored twice, both copies are the same bytes
        # and the chain index keeps the first.
        # A body gc removed (a deletion named it) does not count: committed again, it is stored again,
        # and the newer location is the one every reader finds (sealed segments are searched newest first).
        if self.engine.has_body(oid) if otype != codec.RECORD else oid in self.engine.tables.locs:
            return
        self.objects[oid] = (otype, canonical)
        if value is not None:
            self.decoded[oid] = value
        if facts is not None:
            self.facts[oid] = facts
        elif otype == codec.RECORD or otype in CHAIN_TYPES:
            f = object_facts(otype, canonical if isinstance(canonical, bytes) else b"", value, oid)
            if f is not None:
                self.facts[oid] = f

    def put_removed(self, oid: bytes, otype: str, length: int, facts: list | None) -> None:
        """An object whose body gc removed before ``objstore upgrade`` replays it: its row without a body (block
        ``REMOVED``) and the index facts its old entry carried (``facts``: the row minus its object index)."""
        if oid in self.objects or oid in self.engine.tables.locs:
            return
        self.objects[oid] = (otype, RemovedBody(length))
        if facts is not None:
            self.facts[oid] = list(facts)

    def has(self, oid: bytes) -> bool:
        return oid in self.objects or self.engine.has(oid)

    def read_ref(self, name: str) -> bytes | str | None:
        m = self.moves.get(name)
        if m is not None:
            return m[1]
        return self.engine.tables.refs.get(name)

    def set_ref(self, name: str, old: bytes | str | None, new: bytes | str | None, reason: str) -> None:
        cur = self.read_ref(name)
        if cur != old:
            raise Conflict(name, _show(old), _show(cur))
        if not self.replay and forward_only(name):
            check_move(name, old, new, self._previous_of, lambda oid: oid in self.objects)
        m = self.moves.get(name)
        if m is None:
            self.moves[name] = [cur, new, reason]
        else:
            m[1], m[2] = new, reason

    def _previous_of(self, oid: bytes, otype: str | None = None) -> object:
        """The ``previous`` field of an object of type ``otype`` (any type if None), else _NOT_A_CHAIN."""
        ent = self.objects.get(oid)
        try:
            if ent is not None:
                t, v = ent[0], self.decoded.get(oid)
                if v is None:
                    if isinstance(ent[1], (LargeBlob, RemovedBody)):
                        return _NOT_A_CHAIN
                    v = codec.decode(bytes(ent[1]), oid)[1]
            elif self.engine.has(oid):
                t, v = codec.decode(self.engine.read(oid), oid)
            else:
                return _NOT_A_CHAIN
        except Exception:
            return _NOT_A_CHAIN
        if (otype is not None and t != otype) or not isinstance(v, dict) or "previous" not in v:
            return _NOT_A_CHAIN
        return v["previous"]

    def expect(self, name: str, value: bytes | str | None) -> None:
        """Raise Conflict unless ``name`` currently holds ``value``; writes nothing."""
        cur = self.read_ref(name)
        if cur != value:
            raise Conflict(name, _show(value), _show(cur))

    def watch(self, name: str, value: Any, prefix: bool = False) -> None:
        """Add a ref (with ``prefix``: every ref under a prefix, {name: value}) this commit's decision
        was taken on to its read set. A commit under the writer lock has none: nothing to do (an
        optimistic commit, object storage's, re-runs when one changed)."""

    def ref_moves(self) -> list:
        return [[n, o, v, r] for n, (o, v, r) in self.moves.items() if o != v]
