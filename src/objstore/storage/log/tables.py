"""The tables: what the log says at a position, derived from entries' metas and nothing else.

The refs, the location of every object of the active segment, the chain index (per branch: LSN ->
record id), branch tips, intent facts, run starts, the digests of sealed segments' indexes and
packed files, the active segment's label rows — and the root accumulator over them (``root``).
``Rules.plan`` (``rules``) decides each entry; ``LogState.commit`` applies the plan. Invariants:

* the tables change only by ``commit`` of a plan, once per entry, in entry order;
* ``acc`` is always the accumulator of the tables as they stand (``recompute_root`` remakes it);
* a checkpoint (``dump``/``load``) holds the tables whole; adopting one is checked against the
  root the log names, and the deletions it carries are checked where first obeyed (``obey``).
"""

from __future__ import annotations

from typing import Any

import blake3

from .. import authority
from ..runrefs import RUN_PREFIX as _RUN_PREFIX
from ..runrefs import run_of as _run_of
from . import segindex
from .format import LABEL_ROW, ZERO, Position, _dec, _enc
from .root import _ROOT_MOD, element_hash, table_elements
from .rules import EntryEffect, Rules


class LogState(Rules):
    """What the log says at a position: refs, object locations, the chain index.

    Everything here is derived from entries' metas (``plan`` / ``commit``) and nothing else.
    Object locations and chain rows are held here for the active segment only; sealed segments
    have their persistent index files, each named by digest in the log (``idx``)."""

    def __init__(self) -> None:
        self.pos = Position(0, ZERO)
        self.last_time: float | None = None
        self.refs: dict[str, Any] = {}
        self.run_refs: dict[str, dict[str, Any]] = {}  # run -> {name: value}: one run's refs without the others'
        self.locs: dict[bytes, Any] = {}  # active segment: id -> Loc
        self.chain: dict[tuple, bytes] = {}  # active segment: (run, branch, lsn) -> record id
        # The active segment's label rows (storage.labels), packed LABEL_ROW after LABEL_ROW in commit
        # order, and searched in place (memmem): a checkpoint's are taken whole, never unpacked. They are in
        # the root (a sealed segment's are in its index, named by digest): ``lhash`` hashes the bytes, and
        # the root holds ["L", its digest] while there are any.
        self.label_rows_packed = bytearray()
        self.label_rows_hash: Any = blake3.blake3()
        self._lindex: dict[bytes, list] | None = None  # key -> [(entry, id)], built once lookups are many
        self._lscans = 0
        self.frozen: segindex.SegmentIndex | None = None  # the active segment's rows as of the checkpoint (over bytes)
        self.tips: dict[tuple, tuple[int, bytes]] = {}  # (run, branch) -> (LSN, id) of the chain's newest record
        self.intents: dict[str, list] = {}  # run -> [(branch, lsn, kind, facts, id)] of intent / intent_committed records
        self.starts: dict[str, int] = {}  # run -> entry number of its run_started record (for 'latest')
        self.idx: dict[int, bytes] = {}  # sealed segment -> BLAKE3 of its index file, as the log names it
        self.packs: dict[int, bytes] = {}  # segment gc rewrote -> BLAKE3 of its packed file, as the last rewrite entry names it
        self.root_sum = 0  # the tables' root accumulator (storage.log.root)
        self.run_tips: dict[str, dict[int, tuple[int, bytes]]] = {}  # run -> branch -> tips' (LSN, id)
        self.run_digests: dict[str, bytes] = {}  # run -> run_digest of its tables
        self.dgen = 0  # bumped by each entry that moves a deletion ref (storage.erased keys its cache by it)
        # LogState adopted from a checkpoint took in the deletions of entries up to ``adopted`` without
        # applying those entries (so without the authority rule): each is checked where a read first
        # obeys it (``obey``), by ``confirm`` (the engine's), and its id joins ``checked``.
        self.adopted = 0
        self.checked: set[bytes] = set()
        self.confirm: Any = None

    def set_ref(self, name: str, value: bytes | str | None) -> None:
        run = _run_of(name)
        if value is None:
            self.refs.pop(name, None)
            if run is not None:
                d = self.run_refs.get(run)
                if d is not None:
                    d.pop(name, None)
                    if not d:
                        del self.run_refs[run]
        else:
            self.refs[name] = value
            if run is not None:
                self.run_refs.setdefault(run, {})[name] = value

    def commit(self, p: EntryEffect, n: int, checksum: bytes, t: float) -> None:
        """Apply a plan (its rules already checked). Once per entry: a writer's own entry may have been
        taken in from the file already, by a reader thread of the same process between the write and
        the writer's apply — the tables are then as the entry leaves them (a label row added twice
        would be a row its segment's index does not hold)."""
        if n <= self.pos.entry:
            return
        self.tips.update(p.tips)
        for (run, branch), tip in p.tips.items():
            self.run_tips.setdefault(run, {})[branch] = tip
        for run, d in p.runs.items():
            if d is None:
                self.run_digests.pop(run, None)
            else:
                self.run_digests[run] = d
        for run, branch, lsn, oid in p.chain:
            self.chain[(run, branch, lsn)] = oid
        if p.idx is not None:
            self.label_rows_packed = bytearray()  # the sealed segment's label rows are its index's now
            self._lindex = None
        self.label_rows_packed += p.label_rows_packed
        if self._lindex is not None and p.label_rows_packed:
            for k, n_, oid in LABEL_ROW.iter_unpack(p.label_rows_packed):
                self._lindex.setdefault(k, []).append((n_, oid))
        if p.label_rows_hash is not None:
            self.label_rows_hash = p.label_rows_hash
        for run, fact in p.intents:
            self.intents.setdefault(run, []).append(fact)
        for run, entry in p.starts:
            self.starts[run] = entry
        for name, value in p.refs.items():
            self.set_ref(name, value)
        if p.refs and authority.moves_deletion(p.refs):  # a name check per moved ref: true only for rare entries
            self.dgen += 1
        if p.idx is not None:
            self.idx[p.idx[0]] = p.idx[1]
        if p.rw is not None:
            for seg, file_digest, idx_digest in p.rw:
                self.idx[seg] = idx_digest
                self.packs[seg] = file_digest
        self.root_sum = p.root_sum
        self.pos = Position(n, checksum)
        self.last_time = t

    def recompute_root(self) -> int:
        """The accumulator of the tables as they stand (a checkpoint's, to check it against the log);
        also remakes the per-run digests it is built from."""
        self.run_tips = {}
        for (run, branch), tip in self.tips.items():
            self.run_tips.setdefault(run, {})[branch] = tip
        root_sum = 0
        self.run_digests = {}
        for key in table_elements(self.refs, self.tips, self.intents, self.starts, self.idx, self.run_refs, self.packs):
            if key[0] == "R":
                self.run_digests[key[1]] = key[2]
            root_sum += element_hash(key)
        self.label_rows_hash = blake3.blake3(self.label_rows_packed)  # one pass in C, whatever the number of rows
        if self.label_rows_packed:
            root_sum += element_hash(["L", self.label_rows_hash.digest()])
        return root_sum & _ROOT_MOD

    def label_rows(self, key: bytes) -> list[tuple[int, bytes]]:
        """(entry, record id) of the active segment's label rows with this key: a search in C over the
        packed rows for the first few look-ups of a process (a fresh reader's get_tuple unpacks nothing),
        then a dict built once and kept up to date (a listing looks up one label per checkpoint)."""
        if self._lindex is None:
            self._lscans += 1
            if self._lscans > 8:
                index: dict[bytes, list] = {}
                for k, n, oid in LABEL_ROW.iter_unpack(self.label_rows_packed):
                    index.setdefault(k, []).append((n, oid))
                self._lindex = index
        if self._lindex is not None:
            return list(self._lindex.get(key, ()))
        rows, buf, size = [], self.label_rows_packed, LABEL_ROW.size
        at = buf.find(key)
        while at >= 0:
            if at % size == 0:
                _k, n, oid = LABEL_ROW.unpack_from(buf, at)
                rows.append((n, oid))
                at = buf.find(key, at + size)
            else:
                at = buf.find(key, at + 1)
        return rows

    # -- checkpoints ------------------------------------------------------------------
    def active_rows(self, labels: bool = True) -> tuple[list, list]:
        """(object rows, chain rows) of the active segment, in segindex.build's form (``labels``:
        with its label rows, as its sealed index holds them; a checkpoint keeps them apart)."""
        objects = [(oid, l.entry, l.block_off, l.stored_len, l.block_raw, l.off, l.length, l.comp, l.otype) for oid, l in self.locs.items()]
        chain: list[tuple] = [(r, b, lsn, oid) for (r, b, lsn), oid in self.chain.items()]
        if labels:
            chain.extend(LABEL_ROW.iter_unpack(self.label_rows_packed))
        if self.frozen is not None:
            objects.extend(self.frozen.object_rows())
            chain.extend(self.frozen.chain_rows())
        return objects, chain

    def dump(self, seg: int, off: int, first: int) -> bytes:
        """The checkpoint's MessagePack map (without the file's trailing BLAKE3): ``active`` first,
        ``labels`` second and ``zsum`` (the BLAKE3 of the pairs between them) last, so a reader takes
        every field but ``active`` with two reads of the file, without reading the active rows
        (``checkpoint.adoption_lazy``); the label rows are checked by the root, the rest by ``zsum``."""
        objects, chain = self.active_rows(labels=False)
        rest = _enc.encode({
            "v": 3, "seg": seg, "off": off, "entry": self.pos.entry, "checksum": self.pos.checksum, "time": self.last_time,
            "refs": [[k, v] for k, v in self.refs.items()],
            "tips": [[r, b, lsn, oid] for (r, b), (lsn, oid) in self.tips.items()],
            "intents": self.intents, "starts": self.starts, "idx": [[k, v] for k, v in self.idx.items()],
            "packs": [[k, v] for k, v in self.packs.items()],
        })
        n, pairs = _map_len(rest), rest[_map_header_len(rest):]
        # the active segment's rows in the index layout: looked up in place (read where a lookup asks), never unpacked
        active = _enc.encode({"active": segindex.build(seg, first, self.pos.entry, self.pos.checksum, objects, chain)})[1:]
        # the active segment's label rows: in the root (["L", digest of their set hash]), so adopted only as the log says
        labels = _enc.encode({"labels": bytes(self.label_rows_packed)})[1:]
        return _map_header(n + 3) + active + labels + pairs + ZSUM_PAIR + blake3.blake3(pairs).digest()

    @classmethod
    def load(cls, data: bytes) -> tuple[LogState, int, int]:
        m = _dec.decode(data)
        return cls.from_map(m, m["active"])

    @classmethod
    def from_map(cls, m: dict, active: Any) -> tuple[LogState, int, int]:
        """The tables of a decoded checkpoint map whose ``active`` rows are ``active`` (bytes, or the
        file's bytes read where a lookup asks: ``segindex.FileBytes``)."""
        if m.get("v") != 3:
            raise ValueError("checkpoint version")
        t = cls()
        t.pos = Position(m["entry"], m["checksum"])
        t.last_time = m["time"]
        t.refs = refs = dict(m["refs"])
        if len(refs) != len(m["refs"]):
            raise ValueError("a ref twice")
        run_refs = t.run_refs
        for k, v in refs.items():
            if k.startswith(_RUN_PREFIX):
                run = _run_of(k)
                if run is not None:
                    d = run_refs.get(run)
                    if d is None:
                        run_refs[run] = {k: v}
                    else:
                        d[k] = v
        t.tips = {(r, b): (lsn, oid) for r, b, lsn, oid in m["tips"]}
        t.intents = {r: [tuple(x) for x in v] for r, v in m["intents"].items()}
        t.starts = m["starts"]
        t.idx = {k: v for k, v in m["idx"]}
        t.packs = {k: v for k, v in m.get("packs", ())}
        rows = m.get("labels", b"")
        if type(rows) not in (bytes, bytearray) or len(rows) % LABEL_ROW.size:
            raise ValueError("label rows")
        t.label_rows_packed = rows if type(rows) is bytearray else bytearray(rows)
        t.root_sum = t.recompute_root()
        t.frozen = segindex.SegmentIndex(active, m["seg"])
        return t, m["seg"], m["off"]


# -- the checkpoint's layout: a MessagePack map {active, labels, ..., zsum} -----------------------------
ZSUM_PAIR = b"\xa4zsum\xc4\x20"  # the map's last key and the bin8 header of its 32-byte value
ZSUM_LEN = len(ZSUM_PAIR) + 32


def _map_header_len(enc: bytes) -> int:
    b = enc[0]
    return 1 if 0x80 <= b <= 0x8F else 3 if b == 0xDE else 5


def _map_len(enc: bytes) -> int:
    b = enc[0]
    return b & 0x0F if 0x80 <= b <= 0x8F else int.from_bytes(enc[1:3], "big") if b == 0xDE else int.from_bytes(enc[1:5], "big")


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n <= 15 else b"\xde" + n.to_bytes(2, "big")


def bin_field(buf: bytes, p: int, key: bytes) -> tuple[int, int] | None:
    """A map pair at ``buf[p:]`` whose key is the short string ``key`` and whose value is a bin:
    (offset of the value's bytes from ``p``, their length), or None."""
    k = bytes([0xA0 | len(key)]) + key
    if buf[p : p + len(k)] != k:
        return None
    p0, p = p, p + len(k)
    if len(buf) < p + 5:
        return None
    t = buf[p]
    if t == 0xC4:
        return p + 2 - p0, buf[p + 1]
    if t == 0xC5:
        return p + 3 - p0, int.from_bytes(buf[p + 1 : p + 3], "big")
    if t == 0xC6:
        return p + 5 - p0, int.from_bytes(buf[p + 1 : p + 5], "big")
    return None


def map_start(head: bytes) -> tuple[int, int] | None:
    """(number of keys, offset of the first key) of the MessagePack map opening ``head``, or None."""
    if not head:
        return None
    b = head[0]
    if 0x80 <= b <= 0x8F:
        return b & 0x0F, 1
    if b == 0xDE and len(head) >= 3:
        return int.from_bytes(head[1:3], "big"), 3
    return None
