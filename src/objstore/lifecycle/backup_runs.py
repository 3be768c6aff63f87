"""``objstore backup DEST`` of a store with a log per run (format 6): the store log, the catalog, then each run's log.

Each log is copied with the one-log backup's mechanics (``backup_copy._Copier``: its tail taken, the snapshot
copied up to it while writers write, every copied byte read back and chained, DEST's log opened at exactly that
position, incremental per log: kept segments checked, the active one appended to). DEST is a store of format 6
of the same layout (``storage.runlogs``).

Order, and why it keeps DEST readable at every instant (a ``kill -9`` anywhere leaves a store whose every log is
a checked prefix of SRC's, and the next backup finishes it):

0. the snapshot: the catalog listed, then each listed run's log tail taken, then the store log's tail — after
   every run's, so it holds every store-log position a copied run entry cites (``run/<R>/cite``);
1. the store log, up to its tail (the grants, owner key and schemas the runs' entries are read against are in
   DEST before any run entry);
2. the catalog: every entry SRC has when the copy starts, copied as it is (create-once: a name DEST has is kept,
   and an entry DEST holds with other bytes is another history, refused before anything is written), its order,
   label, subject and copy names and its deletion markers — before any run log's entries, so DEST never holds a
   run log with entries and no catalog entry; each run's log SRC has is made in DEST (empty) before its entry, so
   DEST never holds a catalog entry whose run's log is missing either (what SRC's writers keep too);
3. each catalogued run's log, a copy's source before the copy (the entry's ``copy_of``), each up to its tail
   taken in 0. A run whose log SRC no longer has and whose catalog entry is marked deleted loses
   its log in DEST too (its bodies are not kept in the backup); a run whose log is missing without a deletion
   marker is left as DEST has it.

Locks: SRC's ``gc.lock`` shared for the whole copy (gc waits); DEST's ``tmp/backup-runs.lock`` exclusively (a
second backup into DEST is ``LockTimeout``), and each DEST log's own lock while that log is copied (a writer of
that log in DEST is ``LockTimeout`` for the backup, or waits for it). Temporary files of a log's copy go in
``DEST/tmp/backup-logs/<run>/`` (the store log's: ``…/store``), cleared only under that log's lock.

"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from typing import cast

from ..errors import InvalidInput, ObjstoreError, StorageOSError
from ..runs.anchors import anchor_token
from ..storage import gclock
from ..storage.fileutil import FsyncPolicy
from ..storage.log.format import Position
from ..storage.log.local import LogEngine
from ..storage.runlogs.catalog import Catalog, CatalogEntry
from ..storage.runlogs.logs import CATALOG, STORE_LOG, RunLogs, create_layout, run_dir
from ..storage.store import Store
from ..storage.storedir import RUNLOGS_VERSION
from . import delete
from .backup_copy import BackupResult, Progress, _Copier, digests_path
from .backup_dest import check_log_history, create_dest, dest_lock, dest_version, remove_dead_stagings, src_lengths

LOCK = "backup-runs.lock"  # DEST/tmp/<this>: one backup into DEST at a time
LOG_TMP = "backup-logs"  # DEST/tmp/<this>/<run or store>/: a log's copy's temporary files


class _Sum:
    """The counts of every log's copy, added up."""

    def __init__(self, progress: Progress | None) -> None:
        self.copied = self.reused = self.removed = self.bytes = self.logs = 0
        self.recopied: list[int | str] = []
        self.progress = progress

    def add(self, r: BackupResult, run: str | None) -> None:
        self.copied += r.copied
        self.reused += r.reused
        self.removed += r.removed
        self.bytes += r.bytes_copied
        self.logs += 1
        self.recopied += [k if run is None else f"{k} of run {run}" for k in r.recopied]

    def bar(self) -> Progress | None:
        """A progress callback for one log's copy, counting the logs copied before it."""
        if self.progress is None:
            return None
        base, outer = self.bytes, self.progress
        return lambda done, total: outer(base + done, base + total)


def backup_runs(store: Store, src: str, dest: str, progress: Progress | None) -> BackupResult:
    """Back up the store of format 6 at ``src`` (``store``) to ``dest`` (see the module docstring)."""
    logs = cast(RunLogs, store.logs)
    policy = store.policy
    slog = cast(LogEngine, logs.store_log)
    with gclock.gc_lock(src, shared=True, what="backup"):
        entries = _catalog_entries(logs.catalog)  # first: every run whose log the snapshot may hold
        opened = {os.path.realpath(e.root): e for e in logs.open_logs() if isinstance(e, LogEngine)}
        tails = {}
        for run in entries:  # each run's snapshot before the store log's: every position they cite is in it
            got = _tail(src, run, policy, opened)
            if got is not None:
                tails[run] = got
        pos, tail_seg, end = slog.tail()
        delete.check_authority(store)  # as the one-log backup: a forged deletion is not spread
        lengths = src_lengths(slog, tail_seg, end)
        fresh = _check_dest(dest, slog, pos)
        if not fresh:
            _check_catalog(dest, entries)
        if fresh:
            create_dest(dest, policy, RUNLOGS_VERSION, create_layout)
        total = _Sum(progress)
        with dest_lock(dest, path=os.path.join(dest, "tmp", LOCK)):
            sdest = os.path.join(dest, STORE_LOG)
            with dest_lock(sdest):
                r = _Copier(slog, sdest, policy, total.bar(), tmp=_log_tmp(dest, None),
                            digests=digests_path(src, sdest)).run(pos, tail_seg, lengths)
                _drop_tmp(_log_tmp(dest, None))
            total.add(r, None)
            dcat = Catalog(os.path.join(dest, CATALOG), policy, os.path.join(dest, "tmp"))
            for run, e in entries.items():
                if run in tails and not os.path.isdir(os.path.join(run_dir(dest, run), "log")):
                    make_log(run_dir(dest, run), policy)  # its log (empty) before its entry, as a writer makes them
                dcat.add(e)
                if logs.catalog.is_deleted(run):
                    dcat.mark_deleted(run)
            for run in _sources_first(entries):
                _copy_run(src, dest, run, policy, total, logs.catalog.is_deleted(run), opened, tails.get(run))
    return BackupResult(dest, pos.entry, anchor_token(pos.entry, pos.checksum), total.copied, total.reused,
                        total.removed, total.bytes, total.recopied, total.logs)


_Tail = tuple[Position, int, dict[int, int]]  # a log's snapshot: its position, active segment, segment -> bytes


def _open(src: str, run: str, policy: FsyncPolicy, opened: dict[str, LogEngine]) -> tuple[LogEngine, bool]:
    """Run ``run``'s log: as this process has it open, else opened here (True: the caller closes it; a backup
    of many runs does not keep every log open)."""
    sdir = run_dir(src, run)
    engine = opened.get(os.path.realpath(sdir))
    if engine is not None:
        return engine, False
    try:
        return LogEngine(sdir, policy), True
    except OSError as e:
        raise StorageOSError(f"open the log of run {run}", e) from None


def _tail(src: str, run: str, policy: FsyncPolicy, opened: dict[str, LogEngine]) -> _Tail | None:
    """SRC's snapshot of run ``run``'s log now (None: it has no log)."""
    if not os.path.isdir(os.path.join(run_dir(src, run), "log")):
        return None
    engine, mine = _open(src, run, policy, opened)
    try:
        rpos, rseg, rend = engine.tail()
        return rpos, rseg, src_lengths(engine, rseg, rend)
    finally:
        if mine:
            engine.close()


def _copy_run(src: str, dest: str, run: str, policy: FsyncPolicy, total: _Sum, deleted: bool,
              opened: dict[str, LogEngine], tail: _Tail | None) -> None:
    """Run ``run``'s log, SRC's snapshot of it ``tail``, into DEST (created empty first if DEST has none)."""
    sdir, ddir = run_dir(src, run), run_dir(dest, run)
    if tail is None:
        if deleted and not os.path.isdir(os.path.join(sdir, "log")) and os.path.isdir(os.path.join(ddir, "log")):
            _remove_log(dest, ddir, policy)
        return  # a start killed before the log was made (or made after the snapshot): the catalog entry alone
    rpos, rseg, lengths = tail
    engine, mine = _open(src, run, policy, opened)
    try:
        if os.path.isdir(os.path.join(ddir, "log")):
            check_log_history(ddir, engine, rpos, f"the log of run {run} in backup destination {dest}")
        else:
            make_log(ddir, policy)
        with dest_lock(ddir):
            r = _Copier(engine, ddir, policy, total.bar(), tmp=_log_tmp(dest, run),
                        digests=digests_path(src, ddir)).run(rpos, rseg, lengths)
            _drop_tmp(_log_tmp(dest, run))
        total.add(r, run)
    finally:
        if mine:
            engine.close()


def make_log(d: str, policy: FsyncPolicy) -> None:
    """An empty log at ``d`` (``d/log/``, ``d/lock``), staged beside it and renamed into place: whole or absent."""
    parent = os.path.dirname(d)
    prefix = f".{os.path.basename(d)}.new-"
    staging = os.path.join(parent, f"{prefix}{os.getpid()}-{threading.get_ident()}")
    try:
        os.makedirs(parent, exist_ok=True)
        remove_dead_stagings(parent, prefix)  # a copy killed while making it left one
        LogEngine.create(staging, policy)
        try:
            os.rename(staging, d)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not os.path.isdir(os.path.join(d, "log")):
                raise
        policy.dir(parent)
    except OSError as e:
        raise StorageOSError(f"create the log {d}", e.strerror) from None


def _remove_log(dest: str, ddir: str, policy: FsyncPolicy) -> None:
    """A deleted run's log SRC no longer has leaves DEST: renamed out of the layout at once (under its
    lock), then removed."""
    with dest_lock(ddir):
        gone = os.path.join(dest, "tmp", f"{LOG_TMP}.gone-{os.getpid()}-{os.path.basename(ddir)}")
        os.rename(ddir, gone)
        policy.dir(os.path.dirname(ddir))
    shutil.rmtree(gone, ignore_errors=True)


def _log_tmp(dest: str, run: str | None) -> str:
    return os.path.join(dest, "tmp", LOG_TMP, STORE_LOG if run is None else f"run-{run}")


def _drop_tmp(tmp: str) -> None:
    """A log's temporary directory, once its copy is done (empty then: a copy removes what it wrote)."""
    try:
        os.rmdir(tmp)
    except OSError:
        pass


def _catalog_entries(cat: Catalog) -> dict[str, CatalogEntry]:
    out = {}
    for run in cat.all_ids():
        e = cat.entry(run)
        if e is not None:
            out[run] = e
    return out


def _sources_first(entries: dict[str, CatalogEntry]) -> Iterator[str]:
    """Every catalogued run, each copy after the run it copies (catalog order otherwise)."""
    done: set[str] = set()
    order = sorted(entries, key=lambda r: (entries[r].time_us, r))
    for run in order:
        chain = []
        r: str | None = run
        while r is not None and r not in done and r in entries and r not in chain:
            chain.append(r)
            r = entries[r].copy_of
        for r in reversed(chain):
            done.add(r)
            yield r


# -- DEST ------------------------------------------------------------------------------------------------------
def _check_dest(dest: str, slog: LogEngine, pos: Position) -> bool:
    """True if DEST is to be created; InvalidInput (writing nothing) unless DEST is absent with an existing
    parent, an empty directory, or a store of format 6 whose store log is a copy of SRC's not ahead of it."""
    version = dest_version(dest)
    if version is None:
        return True
    if version != RUNLOGS_VERSION:
        raise InvalidInput(f"backup destination {dest} is a format-{version} store; a backup of this store is format {RUNLOGS_VERSION}")
    check_log_history(os.path.join(dest, STORE_LOG), slog, pos, f"backup destination {dest}")
    return False


def _check_catalog(dest: str, entries: dict[str, CatalogEntry]) -> None:
    """InvalidInput if DEST's catalog holds a run SRC's does not (a catalog entry is never removed: DEST is a
    backup of another store), or an entry of one of SRC's runs with other contents (another history)."""
    dcat = Catalog(os.path.join(dest, CATALOG), FsyncPolicy("off"), os.path.join(dest, "tmp"))
    extra = next((run for run in dcat.all_ids() if run not in entries), None)
    if extra is not None:
        raise InvalidInput(f"backup destination {dest} is a store of another history (it holds run {extra}, which this store "
                           "never had)")
    for run, e in entries.items():
        try:
            mine = dcat.entry(run)
        except ObjstoreError as err:
            raise InvalidInput(f"backup destination {dest}: the catalog entry of run {run}: {err}") from None
        if mine is not None and mine != e:
            raise InvalidInput(f"backup destination {dest} is a store of another history (its catalog entry of run {run} "
                               "is not this store's)")
