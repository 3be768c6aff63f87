"""The rules that decide an entry: what applying it changes in the tables (``EntryEffect``), or the rule it breaks.

One function (``Rules.plan``) decides every entry, wherever it is applied: by its writer before
the write, by every reader that takes it in, by verify. Invariants it keeps:

* a record extends its branch by exactly one LSN and names the branch's head as its parent, and
  the branch ref moves to it; a branch ref moves only to its chain's newest record or to a fork
  object of the same entry; a live ref names an existing branch of its run;
* a ref move is a compare-and-swap: its ``old`` is what the ref holds; forward-only chains and
  write-once keys keep their rules (``storage.refs``); schema refs name schemas of their kind;
* a deleted run is gone for good: nothing is appended to it, forked from it or moved in it, and a
  run is created under its labels' rule (``storage.labels.birth_problem``);
* a sealed segment's index is named once; a rewrite names only sealed segments with an index;
* the plan's root is the root of the tables after the entry (``storage.log.root``): a reader
  refuses an entry that names another (``plan_taken``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import blake3

from ...errors import ObjstoreError
from .. import codec, runrefs
from .. import labels as labels_mod
from ..refs import _NOT_A_CHAIN, check_move, forward_only
from ..runrefs import RUN_PREFIX as _RUN_PREFIX
from ..runrefs import run_of as _run_of
from .entry import LogEntry
from .format import INTENT_KINDS, LABEL_ROW, Position, _show
from .parse import _rw_shape_problem
from .root import _ROOT_MOD, element_hash, root_digest, run_digest, run_element

SYMREF = runrefs.SYMREF_PREFIX
_CHAIN_SUFFIXES = ("/" + runrefs.JOURNAL, "/" + runrefs.SEGMENTS, "/" + runrefs.DELETIONS, "/" + runrefs.DELETED)
# refs a deleted run may still move: its deletions, its deletion, and the store-log position they cite (format 6)
_DELETION_REFS = ("/" + runrefs.DELETIONS, "/" + runrefs.DELETED, "/" + runrefs.CITE)
KEYS_PREFIX = runrefs.KEYS_PREFIX
_branch_ref = runrefs.branch_ref
_live_ref = runrefs.live_ref


def _branch_num(run: str, name: str) -> int | None:
    """N if ``name`` is ``run/<run>/branch/<N>`` spelled canonically (no leading zeros), else None."""
    b = runrefs.branch_of(run, name)
    return b if b is not None and runrefs.branch_ref(run, b) == name else None


def _previous(oid: bytes, want: str, types: dict, facts: dict) -> object:
    """The ``previous`` of an object of this entry of type ``want``, from its index row."""
    if types.get(oid) != want:
        return _NOT_A_CHAIN
    f = facts.get(oid)
    if f is None or f[0] is False:
        return _NOT_A_CHAIN
    return f[0]


class EntryEffect(NamedTuple):
    """What applying one entry changes in the tables, worked out (and checked against the rules)
    before anything changes: writers plan the entry they are about to write, readers each entry
    they take in, with the same function (``LogState.plan``)."""

    tips: dict  # (run, branch) -> (lsn, id): the final tip of each chain the entry extends
    chain: list  # (run, branch, lsn, id)
    intents: list  # (run, (branch, lsn, kind, facts, id))
    starts: list  # (run, entry)
    refs: dict  # name -> new value (None: deleted)
    idx: tuple | None  # (segment, digest) the entry names
    root_sum: int
    root: bytes
    runs: dict = {}  # run -> its run_digest after the entry
    rw: list | None = None  # [(segment, file digest, index digest)] a rewrite entry names
    labels: list = []  # (label key, record id) of the entry's labelled records
    label_rows_packed: bytes = b""  # the entry's label rows, packed (LABEL_ROW), in order
    label_rows_hash: Any = None  # the hash of the active segment's label rows after the entry (None: unchanged)


class Rules:
    """The deciding half of the tables (``LogState`` holds the state it reads): ``plan`` and the rules
    it applies. The attributes below are the tables' (see ``LogState.__init__``)."""

    pos: Position
    refs: dict[str, Any]
    run_refs: dict[str, dict[str, Any]]
    tips: dict[tuple, tuple[int, bytes]]
    run_tips: dict[str, dict[int, tuple[int, bytes]]]
    run_digests: dict[str, bytes]
    starts: dict[str, int]
    idx: dict[int, bytes]
    packs: dict[int, bytes]
    root_sum: int
    label_rows_packed: bytearray
    label_rows_hash: Any
    adopted: int
    checked: set[bytes]
    confirm: Any
    # a run's log of format 6: whether another run is deleted, read in that run's own log (the birth rule of a
    # label set's next generation; None: this log holds every run's refs)
    elsewhere: Callable[[str], bool] | None = None

    def obey(self, name: str, value: Any) -> None:
        """Called by every read about to obey deletion ref ``name`` at ``value`` (hide a run or a
        record, withhold a body, refuse a write to a deleted run): CorruptLog, the line a replaying
        reader stops with, if it is a deletion these tables took in from a checkpoint and it breaks
        the authority rule. Checked once per process; otherwise a set-membership test."""
        if self.adopted and type(value) is bytes and value not in self.checked and self.confirm is not None:
            self.confirm(name, value)

    def plan(self, n: int, objs: list, facts: dict, moves: list, idx: list | tuple | None, rw: list | None = None) -> EntryEffect | str:
        """The changes entry ``n`` makes, or the rule it breaks (a string). ``objs``: [(id, type),
        …] of the entry's objects in order; ``facts``: id -> object_facts(...)."""
        types = {o[0]: o[1] for o in objs}
        got = self._plan_records(n, objs, facts, types, self.root_sum)
        if isinstance(got, str):
            return got
        tips, chain, intents, starts, labelled, root_sum = got
        moved = self._plan_moves(moves, types, facts, root_sum)
        if isinstance(moved, str):
            return moved
        refs, ref_run, root_sum = moved
        bad = self._heads_problem(tips, refs, ref_run, types)
        if bad is not None:
            return bad
        touched = {key[0] for key in tips}
        touched.update(r for r in ref_run.values() if r is not None)
        bad = self._deleted_problem(touched, tips, refs, ref_run)
        if bad is not None:
            return bad
        runs, root_sum = self._plan_runs(touched, tips, refs, ref_run, starts, root_sum)
        if starts:  # only an entry creating a run pays: its run_started row must give the run id
            bad = self._birth_rule(starts, chain, facts, refs)
            if bad is not None:
                return bad
        segs = self._plan_segments(idx, rw, root_sum)
        if isinstance(segs, str):
            return segs
        got_idx, got_rw, root_sum = segs
        label_rows_packed, label_rows_hash, root_sum = self._plan_labels(n, labelled, got_idx, root_sum)
        root_sum &= _ROOT_MOD
        return EntryEffect(tips, chain, intents, starts, refs, got_idx, root_sum, root_digest(root_sum), runs, got_rw, labelled, label_rows_packed, label_rows_hash)

    def _plan_records(self, n: int, objs: list, facts: dict, types: dict, root_sum: int) -> tuple | str:
        """(tips, chain, intents, starts, labelled, acc) of the entry's records, or the chain rule one breaks."""
        tips: dict = {}
        chain: list = []
        intents: list = []
        starts: list = []
        heads: dict = {}  # (run, branch) -> the value a record appended now must name as parent
        labelled: list = []  # (label key, record id): the entry's label rows (storage.labels)
        for oid, otype in objs:
            if otype != codec.RECORD:
                continue
            f = facts.get(oid)
            if f is None:
                return f"record {oid.hex()} has no index row"
            run, branch, lsn, parent, kind, _refs, ifacts = f[:7]
            key = (run, branch)
            tip = tips.get(key) or self.tips.get(key)
            want = tip[0] + 1 if tip is not None else 0
            if lsn != want:
                return f"record {oid.hex()} has LSN {lsn} on branch {branch} of run {run}, whose next LSN is {want}"
            cur = heads[key] if key in heads else self.refs.get(_branch_ref(run, branch))
            if lsn == 0 and (branch > 0 or kind == "run_started") and cur is None and types.get(parent) == codec.FORK:
                cur = parent  # forked (or, branch 0, copied) by this very entry: its first record follows the fork object
            if parent != cur:
                return (f"record {oid.hex()} (run {run} branch {branch} LSN {lsn}) names parent {_show(parent)}, "
                        f"but the branch's head is {_show(cur)}")
            heads[key] = oid
            tips[key] = (lsn, oid)
            chain.append((run, branch, lsn, oid))
            if len(f) > 7:
                labelled.extend((k, oid) for k in labels_mod.index_keys(run, branch, lsn, kind, f[7]))
            if kind == "run_started" and lsn == 0 and branch == 0 and run not in self.starts:
                starts.append((run, n))
            elif kind in INTENT_KINDS:
                fact = (branch, lsn, kind, ifacts, oid)
                intents.append((run, fact))
                root_sum += element_hash(["i", run, *fact])
        return tips, chain, intents, starts, labelled, root_sum

    def _plan_moves(self, moves: list, types: dict, facts: dict, root_sum: int) -> tuple | str:
        """(refs, ref_run, acc) of the entry's ref moves, or the rule one breaks."""
        refs: dict = {}
        ref_run: dict = {}  # name -> its run (None: a store-level ref), worked out once
        for m in moves:
            name, old, new = m[0], m[1], m[2]
            cur = refs[name] if name in refs else self.refs.get(name)
            if old != cur:
                return f"move of {name} from {_show(old)}, but the ref holds {_show(cur)}"
            run = ref_run[name] = _run_of(name) if name.startswith(_RUN_PREFIX) else None
            # only the namespaces that have rules pay for them: runs' chain refs and keys/
            if run is None or name.endswith(_CHAIN_SUFFIXES) or "/grant/" in name:
                bad = self._rule(name, old, new, types, facts)
                if bad is not None:
                    return bad
            refs[name] = new
            if run is None:
                if cur is not None:
                    root_sum -= element_hash(["r", name, cur])
                if new is not None:
                    root_sum += element_hash(["r", name, new])
        return refs, ref_run, root_sum

    def _heads_problem(self, tips: dict, refs: dict, ref_run: dict, types: dict) -> str | None:
        """What is wrong with where the entry leaves its runs' branch and live refs, or None."""
        for (run, branch), (_lsn, oid) in tips.items():
            name = _branch_ref(run, branch)
            if (refs[name] if name in refs else self.refs.get(name)) != oid:
                return f"record {oid.hex()} is appended to branch {branch} of run {run}, but {name} does not move to it"
        for name, new in refs.items():
            run = ref_run[name]
            if run is None:
                continue
            b = _branch_num(run, name)
            if b is not None:
                tip = tips.get((run, b))
                if tip is None and types.get(new) != codec.FORK and not (type(new) is bytes and self.tips.get((run, b), (0, None))[1] == new):
                    return f"{name} moves to {_show(new)}, which is neither its chain's newest record nor a fork object of this entry"
            elif name == _live_ref(run):
                target = new[len(SYMREF):] if type(new) is str and new.startswith(SYMREF) else None
                b = _branch_num(run, target) if target is not None else None
                if new is not None and (target is None or b is None or (refs[target] if target in refs else self.refs.get(target)) is None):
                    return f"{name} moves to {_show(new)}, which is not an existing branch of run {run}"
        return None

    def _deleted_problem(self, touched: set, tips: dict, refs: dict, ref_run: dict) -> str | None:
        """The entry's change to a deleted run (a deleted run is gone for good), or None."""
        for run in touched:
            # A deleted run is gone for good: nothing is appended to it, forked from it or moved in it.
            gone = runrefs.deleted_ref(run)
            if gone in self.refs or gone in refs:
                if gone in self.refs:
                    self.obey(gone, self.refs[gone])
                if any(r == run for r, _b in tips):
                    return f"run {run} is deleted: no record is appended to it"
                moved = [name for name, r in ref_run.items() if r == run and not name.endswith(_DELETION_REFS)]
                if moved:
                    return f"run {run} is deleted: its ref {moved[0]} does not move"
        return None

    def _plan_runs(self, touched: set, tips: dict, refs: dict, ref_run: dict, starts: list, root_sum: int) -> tuple[dict, int]:
        """(run -> its run_digest after the entry, acc) for every run the entry touches."""
        runs: dict = {}
        for run in touched:
            rr = dict(self.run_refs.get(run, ()))
            for name, value in refs.items():
                if ref_run[name] == run:
                    if value is None:
                        rr.pop(name, None)
                    else:
                        rr[name] = value
            rt = dict(self.run_tips.get(run, ()))
            for (r, b), tip in tips.items():
                if r == run:
                    rt[b] = tip
            start = self.starts.get(run)
            if start is None and starts:
                start = next((e for r, e in starts if r == run), None)
            new_d = run_digest(rr, rt, start)
            old_d = self.run_digests.get(run)
            if old_d != new_d:
                if old_d is not None:
                    root_sum -= run_element(run, old_d)
                if new_d is not None:
                    root_sum += run_element(run, new_d)
            runs[run] = new_d
        return runs, root_sum

    def _plan_segments(self, idx: list | tuple | None, rw: list | None, root_sum: int) -> tuple | str:
        """(the index the entry names, the segments it rewrites, acc), or the rule it breaks."""
        got_idx = None
        if idx is not None:
            seg, digest = idx[0], idx[1]
            if seg in self.idx:
                return f"the index of segment {seg} is named twice"
            got_idx = (seg, digest)
            root_sum += element_hash(["x", seg, digest])
        got_rw: list | None = None
        if rw is not None:
            # A rewrite entry (gc): a sealed segment's file and index are replaced by ones with the
            # same logical entries; the tables name the new digests instead of the old.
            bad = _rw_shape_problem(rw)  # readers refuse such a meta: a writer must not write one
            if bad is not None:
                return bad
            got_rw = []
            for seg, file_digest, idx_digest in rw:
                old = self.idx.get(seg)
                if old is None or (got_idx is not None and got_idx[0] == seg):
                    return f"a rewrite of segment {seg}, which is not a sealed segment with a named index"
                if any(r[0] == seg for r in got_rw):
                    return f"segment {seg} is rewritten twice in one entry"
                root_sum += element_hash(["x", seg, idx_digest]) - element_hash(["x", seg, old])
                prior = self.packs.get(seg)
                if prior is not None:
                    root_sum -= element_hash(["w", seg, prior])
                root_sum += element_hash(["w", seg, file_digest])
                got_rw.append((seg, file_digest, idx_digest))
        return got_idx, got_rw, root_sum

    def _plan_labels(self, n: int, labelled: list, got_idx: tuple | None, root_sum: int) -> tuple[bytes, Any, int]:
        """(the entry's label rows packed, the active segment's label hash after it or None, acc)."""
        label_rows_packed = b""
        label_rows_hash = None
        had = bool(self.label_rows_packed)
        if got_idx is not None and had:
            # the segment before is sealed: its label rows are in its index now, which the log names by digest
            root_sum -= element_hash(["L", self.label_rows_hash.digest()])
            label_rows_hash, had = blake3.blake3(), False
        if labelled:
            label_rows_packed = b"".join(LABEL_ROW.pack(k, n, oid) for k, oid in labelled)
            if had:
                root_sum -= element_hash(["L", self.label_rows_hash.digest()])
            label_rows_hash = (label_rows_hash or self.label_rows_hash).copy()
            label_rows_hash.update(label_rows_packed)
            root_sum += element_hash(["L", label_rows_hash.digest()])
        return label_rows_packed, label_rows_hash, root_sum

    def _rule(self, name: str, old: Any, new: Any, types: dict, facts: dict) -> str | None:
        """The one check of a ref move's rules (write-once keys, forward-only chains), wherever an
        entry is applied: by its writer, by every reader that takes it in, by verify."""
        if not forward_only(name):
            return None
        try:
            check_move(name, old, new, lambda oid, want: _previous(oid, want, types, facts), lambda oid: oid in types)
        except ObjstoreError as e:
            return str(e.args[0]) if e.args else str(e)
        if isinstance(new, bytes) and new not in types and not name.startswith(KEYS_PREFIX):
            return f"ref {name} moves only to an object stored in the same commit"
        if name.startswith(runrefs.SCHEMA_PREFIX):
            f = facts.get(new)
            declared = f[1] if f is not None and len(f) > 1 else None
            if declared != name[len(runrefs.SCHEMA_PREFIX):]:
                return f"ref {name} moves only to a schema of its own kind, not one declaring {declared!r}"
        return None

    def _birth_rule(self, starts: list, chain: list, facts: dict, refs: dict) -> str | None:
        """The rule of creating a run, judged from the ``run_started`` record's index row (its labels)
        wherever an entry is applied (``storage.labels.birth_problem``): a labelled run's id is the one
        its labels give, an ``l-`` id is a labelled run's, and generation g ≥ 1 of a label set is
        created only once generations 0 … g−1 are deleted runs (in the tables, or by this entry)."""
        def deleted(run: str) -> bool:
            name = runrefs.deleted_ref(run)
            if name in refs:
                return refs[name] is not None
            gone = self.refs.get(name)
            if gone is None and self.elsewhere is not None:
                return self.elsewhere(run)  # another run's deletion is in that run's log (format 6)
            if gone is not None:
                self.obey(name, gone)  # a generation born past a deletion: only one that holds
            return gone is not None

        for run, _n in starts:
            oid = next(o for r, b, lsn, o in chain if r == run and b == 0 and lsn == 0)
            f = facts[oid]
            bad = labels_mod.birth_problem(run, f[7] if len(f) > 7 else None, deleted)
            if bad is not None:
                return f"run_started record {oid.hex()} of run {run}: {bad}"
        return None


def plan_taken(t: Rules, e: LogEntry) -> EntryEffect | str:
    """The plan of an entry a reader takes in, from its meta alone (its index rows are the facts),
    checked against the rules and against the root the entry names; or what is wrong with it."""
    facts: dict = {}
    objs = e.objs
    for r in e.recs:
        facts[objs[r[0]][0]] = r[1:]
    for r in e.prevs:
        facts[objs[r[0]][0]] = r[1:]
    got = t.plan(e.n, [(o[0], o[1]) for o in objs], facts, e.moves, e.idx, e.rw)
    if isinstance(got, str):
        return got
    if got.root != e.root:
        return f"the root of the tables after it is {got.root.hex()}, the entry names {e.root.hex()}"
    return got
