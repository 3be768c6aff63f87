"""push / clone between two stores with a log per run, on disk: a run's log copied entry for entry.

``copy_run_log(source, target, run)`` makes the target's log of ``run`` hold the source's entries as they are
(the same bytes: the same entry numbers and chain checksums, so the run's head — its anchor — is the same at
both ends), with the one-log backup's copier (``backup_copy._Copier``: the source's snapshot up to its tail,
appended to the target's log when that log is a prefix of it, every copied byte read back and chained, the
target's log opened at exactly the snapshot's position). The run's catalog entry is copied as it is, before
the log's first entry lands (as every writer of the target writes it). Only when the target's store log holds the
store-log position the run's entries cite (``run/<R>/cite``: the same entry, the same checksum): else ``None``.

``copy_store_log`` does the same for the store log, first, so that the positions the runs' entries cite are the
target's too. A copy that would replace a file of the target's log (a segment gc packed at the source, a swap of
the whole log) is made only into the caller's own new clone (``replace_ok``): any other process that has the target
open writes its next entry through the descriptor of its active segment, and would write into a file no longer in
the log. Into a live target such a log goes as refs and objects instead.

Fast-forward only, decided under the target log's own lock (its writers wait; nothing of any other log is
locked): the target's log must be empty or a prefix of the source's (its head entry is one of the source's,
with the same checksum). Anything else (a run the target wrote on its own, one pushed there from a store of
one log, re-chained, or a catalog entry with other contents) is ``None``: the caller copies objects and refs
instead (``transfer``), which fast-forwards or names a conflict. SRC's and the target's ``gc.lock`` are held
shared while a log is copied, so no sealed segment of either is replaced under the copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from ..errors import ObjstoreError
from ..storage import gclock, runrefs
from ..storage.log.engine import Engine
from ..storage.log.format import Position
from ..storage.log.local import LogEngine
from ..storage.runlogs.logs import STORE_LOG, RunLogs, run_dir
from ..storage.store import Store
from .backup import dest_lock, src_lengths
from .backup_copy import _Copier, digests_path
from .backup_io import _checksum_at
from .backup_runs import make_log

LOCK_WAIT = 30.0  # seconds a push waits for a writer of the target's run to finish its commit
TMP = "push-logs"  # <target>/tmp/<this>/run-<R>/: a run log's copy's temporary files (under that log's lock)


class Copied(NamedTuple):
    """What copying one run's log did: entries, objects and segment bytes the target gained (0: it had them)."""

    entries: int
    objects: int
    bytes: int


def copy_run_log(source: Store, target: Store, run: str, replace_ok: bool = False) -> Copied | None:
    """Copy run ``run``'s log from ``source`` to ``target`` as it is (see the module docstring); None when the
    target's log of the run is not a prefix of the source's (or either is not a store of logs on disk), or when the
    copy would replace a file of the target's log that a writer of it may hold open, unless ``replace_ok`` (the
    target is the caller's own new clone): see ``copy_store_log``."""
    slogs, tlogs = source.logs, target.logs
    if not (isinstance(slogs, RunLogs) and isinstance(tlogs, RunLogs)) or source.root is None or target.root is None:
        return None
    sengine = slogs.run_log(run)
    if not isinstance(sengine, LogEngine):
        return None  # the source has no log of this run
    entry = slogs.catalog.entry(run)
    if entry is not None:
        mine = tlogs.catalog.entry(run)
        if mine is not None and mine != entry:
            return None
    ddir = run_dir(target.root, run)

    def first(have: Position) -> None:
        if entry is not None:
            tlogs.catalog.add(entry)  # before the log's first entry, as a writer of the target writes it
        if slogs.catalog.is_deleted(run):
            tlogs.catalog.mark_deleted(run)

    got = _copy_as_is(source, target, sengine, ddir, f"run-{run}", first,
                      lambda pos: _cites_hold(sengine, pos, run, tlogs.store_log), replace_ok)
    if got is not None and got.entries:
        if replace_ok:
            tlogs.release(run)  # this process's engine of it may read a segment the copy replaced: opened afresh when next used
        else:
            tlogs.run_log(run).refresh()  # appended to: its descriptors still name the log's files
    return got


def copy_store_log(source: Store, target: Store, replace_ok: bool = False) -> Copied | None:
    """Copy the source's store log to the target as it is when the target's is empty or a prefix of it (a clone, a
    push into a clone): the store-log positions the runs' entries cite are then the same at both ends, so each
    run's log copies as it is too (its anchor the same). None otherwise: the store refs go as objects.

    Every process that has the target open holds its store log's active segment by a descriptor and writes its
    next entry there: a copy that replaced that file (a segment gc packed at the source, a swap of the log) would
    take such a writer's later commits into a file no longer in the log. So unless ``replace_ok`` (the target is
    the caller's own new clone), the copy is made only when it appends: new segments, and bytes added to the
    target's own files; else None."""
    slogs, tlogs = source.logs, target.logs
    if not (isinstance(slogs, RunLogs) and isinstance(tlogs, RunLogs)) or source.root is None or target.root is None:
        return None
    sengine = slogs.store_log
    if not isinstance(sengine, LogEngine):
        return None
    got = _copy_as_is(source, target, sengine, os.path.join(target.root, STORE_LOG), "store", None, None, replace_ok)
    if got is not None and got.entries:
        if replace_ok:
            target.engine = tlogs.reopen_store_log()  # as release does for a run's log (the store's engine is its store log)
        else:
            tlogs.store_log.refresh()
    return got


def _copy_as_is(source: Store, target: Store, sengine: LogEngine, ddir: str, tmpname: str,
                first: Callable[[Position], None] | None, ok: Callable[[Position], bool] | None,
                replace_ok: bool = True) -> Copied | None:
    """Append the source log's entries the target's log (at ``ddir``) lacks, as they are, under the target log's
    lock; None when the target's log is not a prefix of the source's or ``ok(source position)`` says no, or (not
    ``replace_ok``) when the copy would replace or remove a file of the target's log rather than append.
    ``first(target head)``: called under the lock before anything is copied."""
    with gclock.gc_lock(str(source.root), shared=True, what="push"), gclock.gc_lock(str(target.root), shared=True, what="push"):
        pos, seg, end = sengine.tail()
        lengths = src_lengths(sengine, seg, end)
        if ok is not None and not ok(pos):
            return None
        if not os.path.isdir(os.path.join(ddir, "log")):
            make_log(ddir, target.policy)
        with dest_lock(ddir, wait=LOCK_WAIT):
            have = _head(ddir, target)
            if have is None or have.entry > pos.entry or (have.entry and _checksum_at(sengine, seg, lengths, have.entry) != have.checksum):
                return None
            if have == pos:
                return Copied(0, 0, 0)
            tmp = os.path.join(str(target.root), "tmp", TMP, tmpname)
            digests = digests_path(str(source.root), ddir)
            if not replace_ok and _replaces(_Copier(sengine, ddir, target.policy, None, tmp=tmp, digests=digests), seg, lengths):
                return None
            if first is not None:
                first(have)
            got = _Copier(sengine, ddir, target.policy, None, tmp=tmp, digests=digests).run(pos, seg, lengths)
            try:
                os.rmdir(tmp)
            except OSError:
                pass
    objects = sum(len(e.objs) for e in sengine.entries() if have.entry < e.n <= pos.entry)
    return Copied(pos.entry - have.entry, objects, got.bytes_copied)


def _replaces(copier: _Copier, tail_seg: int, lengths: dict[int, int]) -> bool:
    """Whether the copy ``copier`` would make replaces or removes a file of the target's log (a segment it holds
    copied over, a packed segment landing by a swap of the whole log), rather than only appending to it."""
    present = {int(f[:-4]) for f in os.listdir(copier.dlog) if f.endswith(".seg") and f[:-4].isdigit()}
    plans, drop = copier._plan(tail_seg, lengths)
    return bool(drop) or copier._lands_packed(plans) or any(p.action == "copy" and p.seg in present for p in plans)


def _cites_hold(sengine: LogEngine, pos: Position, run: str, tstore: Engine) -> bool:
    """Whether the store-log position the run's entries cite (its newest cite: the chain holds the older ones) is an
    entry of the target's store log with the same checksum. Stores that wrote their store logs on their own differ
    there: a run's entries copied as they are would cite a position of another store (verify: bad-cite)."""
    cite = runrefs.parse_cite(sengine.refs_at("", pos).get(runrefs.cite_ref(run)))
    if cite is None or cite[0] == 0:
        return True
    n, checksum = cite
    tstore.refresh()
    try:
        return any(e.n == n and bytes(e.checksum) == checksum for e in tstore.entries())
    except ObjstoreError:
        return False


def _head(ddir: str, target: Store) -> Position | None:
    """The target's log's head (entry, checksum) read afresh under its lock; None if it does not read whole."""
    try:
        log = LogEngine(ddir, target.policy)
    except ObjstoreError:
        return None
    try:
        if log.damaged is not None:
            return None
        return log.refresh()
    except ObjstoreError:
        return None
    finally:
        log.close()


__all__ = ["Copied", "copy_run_log", "copy_store_log"]
