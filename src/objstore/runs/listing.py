"""Lazy, newest-first listing of a run's records: ``RunLog.iter_records``.

Records come newest commit first, read one at a time as the caller pulls them: ``limit=10``
reads the ten newest (and the blocks that hold them), never the run. Each branch is walked from
its head back along the parent links (its own records only: what a fork inherits belongs to its
parent branch); with ``all_branches`` the walks are merged by log position (entry number, then
LSN). ``before`` (a record id, exclusive) starts below that record's position.

What a filter costs: ``labels`` are looked up in the log's index (``runs.labels``), so a label
filter reads only the records it returns. ``kinds`` and any other filter on what a record says
read each record back to the last match — a filter on unlabelled metadata is a scan of the
branch, newest first, stopped by ``limit``. Records a recorded deletion covers are left out
unless ``deleted=True`` (then they come header-only, as every reader sees them).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from ..errors import Erased, InvalidInput
from . import labels as L
from . import records as R
from .chain import ChainReader, View


def _entry_of(log: ChainReader, oid: bytes) -> int:
    return log.store.logs.locate(oid).loc_entry(oid) or 0


def _position(log: ChainReader, rec: R.Record) -> tuple[int, int, int]:
    """Where a record is in the log: (entry, branch, LSN) — commit order; within one entry, by branch."""
    return (_entry_of(log, rec.id), rec.branch, rec.lsn)


def _below(log: ChainReader, view: View, b: int, cut: tuple[int, int, int] | None) -> bytes | None:
    """The newest record of branch ``b`` below ``cut`` (None: none), found by binary search on the
    log's chain index — index rows and locations, no record decoded — so a listing paged by
    ``before`` reads nothing newer than its cut. The head when there is no cut or nothing indexed to search."""
    head = view.head(b)
    tip = log.store.logs.run_log(view.run).tables.tips.get((view.run, b))
    if cut is None or tip is None or tip[1] != head:
        return head  # (an open batch's records, or a branch that is only its fork object: the walk decides)

    def at(lsn: int) -> tuple[tuple[int, int, int], bytes | None]:
        oid = log.store.indexed_record(view.run, b, lsn)
        return ((_entry_of(log, oid), b, lsn) if oid is not None else (0, b, lsn)), oid

    if at(tip[0])[0] < cut:
        return head
    if at(0)[0] >= cut:
        return None
    lo, hi = 0, tip[0]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(mid)[0] < cut:
            lo = mid
        else:
            hi = mid - 1
    return at(lo)[1]


def _own_newest_first(log: ChainReader, view: View, branch: int, start: bytes | None = None) -> Iterator[R.Record]:
    """The branch's own records from its head (or from ``start``, one of them) back."""
    if start is None:
        start = view.head(branch)
    for item in log.walk(start):
        if isinstance(item, dict):
            return  # the branch's fork object: what lies behind it is the parent's
        if item.run != view.run:
            return  # a copy's run_started names its source through the cross-run fork: not this run's record
        yield item


def iter_records(log: ChainReader, run: str, *, branch: int | None = None, all_branches: bool = False,
                 kinds: Iterable[str] | None = None, before: bytes | None = None, limit: int | None = None,
                 labels: dict[str, str] | None = None, deleted: bool = False) -> Iterator[R.Record]:
    """A run's records, newest first, lazily (see the module docstring)."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidInput(f"limit must be a non-negative integer, got {limit!r}")
    if before is not None and (type(before) is not bytes or len(before) != 32):
        if not (isinstance(before, bytes) and len(before) == 32):
            raise InvalidInput("before must be a 32-byte record id")
        before = bytes(before)  # an Id (codec.Id): the plain bytes it is
    if isinstance(kinds, str):
        kinds = (kinds,)  # one kind, not a set of letters
    if kinds is not None:
        try:
            kinds = tuple(kinds)
        except TypeError:
            raise InvalidInput(f"kinds must be a kind or a list of kinds, got {type(kinds).__name__}") from None
        if not all(isinstance(k, str) for k in kinds):
            raise InvalidInput("kinds must be strings")
    want_kinds = frozenset(kinds) if kinds is not None else None
    view = log.view(run)
    if all_branches and branch is not None:
        raise InvalidInput("pass a branch or all_branches, not both")
    branches = sorted(view.heads) if all_branches else [view.live if branch is None else branch]
    for b in branches:
        view.head(b)  # BranchNotFound for a branch the run does not have
    cut: tuple[int, int, int] | None = None
    start: bytes | None = None
    if before is not None:
        try:
            b_rec = log.record(before)
        except Erased:
            hit = log.store.erased_records.get(before)  # a deleted record keeps its place: the listing goes on below it
            if hit is None:
                raise
            b_rec = log._header_only(before, hit)
        cut = _position(log, b_rec)
        if len(branches) == 1:
            if b_rec.run == run and b_rec.branch == branches[0]:
                start = b_rec.parent  # on the branch listed: its walk starts right below it (nothing newer is read)
            else:
                start = _below(log, view, branches[0], cut)
            if start is None:
                return iter(())
    if labels is not None:
        source: Iterator[R.Record] = iter([log.served_record(oid, p) for oid, p in L.find_records(log.store, run, labels)
                                           if p.get("branch") in branches])
    elif len(branches) == 1:
        source = _own_newest_first(log, view, branches[0], start)
    else:
        source = _merged(log, view, branches, cut)
    return _filtered(log, source, want_kinds, cut, limit, deleted)


def _merged(log: ChainReader, view: View, branches: list[int], cut: tuple[int, int, int] | None) -> Iterator[R.Record]:
    """The branches' own records merged newest first. A branch's next record is ordered by its id's
    log position before it is read (the parent link of the record read last), so each record is
    decoded only when it is the next one returned: ``limit=1`` over 40 branches reads one record."""
    heap: list = []
    for b in branches:
        start = _below(log, view, b, cut)
        if start is not None:
            heap.append(((-_entry_of(log, start), -b), b, start, None))
    heapq.heapify(heap)
    while heap:
        _key, b, oid, it = heapq.heappop(heap)
        if it is None:
            it = _own_newest_first(log, view, b, oid)
        rec = next(it, None)
        if rec is None:
            continue
        yield rec
        if rec.parent is not None:
            heapq.heappush(heap, ((-_entry_of(log, rec.parent), -b), b, rec.parent, it))


def _filtered(log: ChainReader, source: Iterator[R.Record], kinds: frozenset[str] | None, cut: tuple | None, limit: int | None,
              deleted: bool) -> Iterator[R.Record]:
    if limit == 0:
        return
    n = 0
    try:
        for rec in source:
            if cut is not None and _position(log, rec) >= cut:
                continue
            if not deleted and R.DELETED_FIELD in rec.body and len(rec.body) == 1:
                continue
            if kinds is not None and rec.kind not in kinds:
                continue
            yield rec
            n += 1
            if limit is not None and n >= limit:
                return
    finally:
        log.store.forget_decoded()

