"""``objstore backup DEST``: an online, incremental copy of a store that is itself a store.

``backup(store, dest)`` copies a consistent snapshot of the log while writers keep writing, and
never takes the writer lock (a commit never waits for a backup). It holds ``gc.lock`` shared for the
whole copy (``gc`` takes it exclusively, so no sealed segment is replaced under it), takes the log's
tail — the position, the active segment and the end offset of its last complete entry, together
(``LogEngine.tail``) — copies every sealed segment below the active one whole and the active one's
bytes ``[0, end)``: what writers append after ``end`` meanwhile is not copied.

Incremental. A sealed segment already in DEST with the same size, the same first 8 bytes (its magic)
and the same last 32 bytes (the chain checksum of its last entry) is kept, once checked: DEST's file is
read and its BLAKE3 compared with the file digest the log names (a packed segment), else with the one the
last backup recorded (in ``SRC/tmp/backup-digests/``, never in DEST: DEST cannot vouch for an edit of
itself) when it wrote and read back that file, else with SRC's
bytes hashed (``backup_copy``'s ``_intact``); a file that differs (bit rot keeps size, magic and last bytes) is copied
again and named (``recopied``). The same check covers the old bytes of a segment appended to.
A DEST segment that is a byte prefix of SRC's segment of that number (the last backup's active one:
DEST's last entry is whole and its checksum is SRC's at that offset — only those bytes are read)
gets only the new bytes, appended in place (a torn append is a torn tail, invisible to readers). A
DEST segment that no longer matches but ends with SRC's checksum (``gc`` rewrote SRC's: the same
entries) is replaced; one that does not (a copy torn by a crash) is replaced and every later DEST
segment removed first, so DEST stays a prefix of SRC's history at every instant — unless DEST's head
witness names an entry SRC does not have: DEST is then another history, refused. DEST segments beyond
SRC's tail are removed.

Checked: only what is copied is re-read. Each copied range is read back from DEST and its
BLAKE3 compared with the BLAKE3 of the bytes read from SRC; every copied entry's chain checksum is
recomputed from its meta and chained from the entry before (an ordinary segment's entries, or a
packed one's meta frame: ``engine.packed_entries``); each segment header (ordinary or packed) chains
to DEST's previous segment's last 32 bytes, its last entry's checksum; then DEST is opened
(its checkpoint — SRC's, copied, adopted only if DEST's log commits to it — plus a replay of the
rest) and must stand at exactly the snapshot's position. Only then is DEST's own head witness
written (atomically), so it never leads DEST's log.

Crash safety: DEST is created whole (staged next to it and renamed into place); whole segment copies
are written into ``DEST/tmp/``, fsynced (a batch at a time, so the disk writes them back together) and
renamed into place in increasing order (directory fsynced after each); a sealed segment's index is
never beside the other version of its segment; DEST's checkpoint goes before a segment it may point
into is replaced, and SRC's is copied only if DEST's log commits to it; the derived files (indexes,
checkpoint, witness) go through ``DEST/tmp/`` and a rename unsynced, as the engine writes its own.
Segments are copied in increasing order, so a ``kill -9`` at any point leaves DEST
a readable store of an older snapshot or the new one, and the next backup finishes. A backup that brings
a packed segment (one gc rewrote, which may lack bodies a deletion in a later segment justifies) builds
the new log whole in ``DEST/tmp/`` (kept files hard-linked) and exchanges it with ``DEST/log`` in one
``renameat2(RENAME_EXCHANGE)``, so DEST never holds a packed segment without the entries that explain it
(``backup_copy``'s ``_stage``, ``_swap``; where the file system cannot exchange directories they land in order). A full disk or
another OS error is ``StorageOSError`` (exit 10) with DEST as it was (the append truncated back, the
temporary file removed) or holding a longer prefix of the snapshot.

DEST must be absent (its parent must exist), an empty directory, or a store of the same history (its
first entry's checksum is SRC's, and so is the entry its witness names); anything else is ``InvalidInput`` (exit 5) with nothing written, as
is a DEST whose witness is ahead of SRC's head (a backup is never rolled back). DEST's writer lock is
held for the copy: a second backup into it, or a writer of it, is ``LockTimeout`` (exit 9).
"""

from __future__ import annotations

import os
from typing import cast

from ..errors import InvalidInput
from ..storage import gclock
from ..storage.log.local import LogEngine
from ..storage.store import Store
from ..storage.storedir import read_marker
from . import delete
from .backup_copy import BackupResult, Progress, _Copier
from .backup_dest import _check_dest, create_dest, dest_lock, src_lengths


def backup(store: Store, dest: str, *, progress: Progress | None = None) -> BackupResult:
    """Copy a consistent snapshot of ``store`` to ``dest`` (see the module docstring; a store with a
    log per run: ``backup_runs``)."""
    engine = store.engine
    store.require_local("backup copies", f"'objstore clone {store.url} DIR' copies it")
    if not engine.log_files or store.root is None:
        raise InvalidInput("only a store on disk can be backed up")
    engine = cast(LogEngine, engine)
    src = os.path.realpath(store.root)
    dest = os.path.abspath(dest)
    _check_apart(src, dest)
    if store.logs.per_run:
        from .backup_runs import backup_runs

        return backup_runs(store, src, dest, progress)
    with gclock.gc_lock(src, shared=True, what="backup"):
        pos, tail_seg, end = engine.tail()
        # DEST gets SRC's checkpoint too: one a forger's process wrote past a deletion no authorised
        # key made would hide it from DEST's readers as from SRC's (gc refuses it alike)
        delete.check_authority(store)
        lengths = src_lengths(engine, tail_seg, end)
        fresh = _check_dest(dest, engine, pos)  # nothing is written before this passes
        policy = store.policy
        if fresh:
            create_dest(dest, policy)
        with dest_lock(dest):
            return _Copier(engine, dest, policy, progress).run(pos, tail_seg, lengths, src_version=read_marker(src))


# -- checks before anything is written ----------------------------------------------------------------------
def _check_apart(src: str, dest: str) -> None:
    real = os.path.realpath(dest)
    if real == src or real.startswith(src + os.sep) or src.startswith(real + os.sep):
        raise InvalidInput(f"backup destination {dest} is the store itself, inside it or around it")


# -- DEST as a store -------------------------------------------------------------------------------------------


