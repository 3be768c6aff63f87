"""``objstore upgrade``: convert a format-1 or format-2 store in place to format 3.

Format 2 goes to format 3 entry by entry (``_upgrade2``, same objects, moves, reasons and times;
the old store is kept as ``PATH.format2``). Format 1 goes through the steps below (the old store
is kept as ``PATH.format1``); "format 2" in them stands for the current log format.

``upgrade(path)`` builds a complete format-2 store next to the old one, in
``PATH.upgrade-tmp``, through the ordinary Store API, and proves it before
anything else changes:

1. **Plan** (from the format-1 store alone, so it can be recomputed): the ref log
   lines of every ref, merged in time order (``format1.merge``), become one
   commit entry each, with the line's original time and reason. Format 1 logged
   a move before applying it, so a crash could leave a line whose move never
   happened: followed by the ``recovery:`` line the ref's next mover wrote, or
   last in its file with the ref file still at its ``old``. Such lines (and
   their recovery lines) describe no move and are left out (``unapplied``). A
   line with ``old == new`` moves nothing and has no entry (``skipped``). Should
   the log still disagree with itself (a line's ``old`` is not what the ref holds
   then: lost or edited lines), an entry moving the ref there at that line's
   time, reason ``upgrade: reconcile``, goes first; and one final entry (same
   reason, the upgrade's own time) sets every ref that differs from its
   format-1 ref file to that file's value (``reconciled`` counts both kinds).
2. **Build**: each entry carries, besides its moves, every object its new values
   reach that no earlier entry holds (parents before children, so chains arrive
   in LSN order), copied as the exact canonical bytes (same id; the hash is
   checked on reading). Objects no ref ever reached come last: blobs are copied
   (a blob may be stored on its own); structured objects (records, forks, ...)
   that no ref ever reached are leftovers of format-1 commits that never
   completed — format 2 cannot hold them (every record must extend its chain) —
   so they are *not* copied, counted as ``dropped``, and stay in
   ``PATH.format1``. ``state.db`` is not copied: it is a cache, rebuilt.
   The staging store is written without an fsync per entry and synced once,
   whole, when built (a crash before the swap only means building it again).
3. **Verify** (a fresh open of the new store): every format-1 object is in it
   with identical bytes, except the dropped ones, none of which any ref value
   reaches; nothing else is in it; refs equal the format-1 ref files; the ref
   log (``Store.ref_log``) equals the planned moves, times and reasons included
   (the final reconcile's time is the upgrade's own). The format-1 store is
   then read again: if a format-1 writer moved a ref meanwhile, ``Conflict``.
4. **Swap**: rename ``PATH`` to ``PATH.format1``, then ``PATH.upgrade-tmp`` to
   ``PATH``, fsyncing the parent directory after each.

Interruptions: before the first rename the format-1 store has not been written
at all (an exception also removes the staging directory; a crash leaves it, and
the next run removes it first). If the second rename fails the first is undone.
A crash between the two renames leaves ``PATH`` missing, ``PATH.format1``
intact and the verified ``PATH.upgrade-tmp``: running ``upgrade`` again
verifies that staging directory against ``PATH.format1`` once more and finishes
the swap (``status=finished``); or ``mv PATH.format1 PATH`` restores format 1.

Refusals, before anything is written: ``PATH.format1`` exists
(``InvalidInput``); another upgrade of the same store is running (``Refused``;
an ``flock`` on the store directory). A store already in format 2 is a no-op.
Format-1 writers (older objstore versions) must be stopped for the upgrade.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple, NoReturn

from ..errors import Conflict, IntegrityError, InvalidInput, Refused, StorageOSError, StoreFormatError, StoreNotFound
from ..runs import records as R
from ..storage import codec
from ..storage.fileutil import FsyncPolicy, fsync_dir
from ..storage.log.local import LogEngine
from ..storage.store import Store
from ..storage.storedir import FORMAT_VERSION, ONE_LOG_VERSIONS, RUNLOGS_VERSION, is_remote, read_marker
from . import runlogs
from .format1 import Format1Reader, Move, merge
from .format2 import Format2Reader

RECONCILE = "upgrade: reconcile"
ENTRY_BYTES = 64 << 20  # objects of one entry beyond this go ahead in entries of their own
BACKUP_SUFFIX = ".format1"
BACKUP2_SUFFIX = ".format2"
STAGING_SUFFIX = ".upgrade-tmp"


class UpgradeMismatch(IntegrityError):
    """The new store does not reproduce the format-1 store (nothing has been swapped)."""

    msg = "upgrade of {}: the format-2 copy disagrees with the format-1 store: {}"


def _checkpoint(step: str) -> None:
    """Named points of the upgrade (tests inject failures here); does nothing."""


class Plan(NamedTuple):
    groups: list  # [(time or None, [Move])]: one commit entry each, in order
    replayed: int  # format-1 ref log lines that became moves
    skipped: int  # lines with old == new
    unapplied: int  # lines of moves a crash never applied, and the recovery lines naming them
    reconciled: list  # the reconcile moves

    def moves(self) -> list[Move]:
        return [m for _, ms in self.groups for m in ms]


def applied(lines: list[Move], final: bytes | str | None) -> tuple[list[Move], int]:
    """The lines of one ref's format-1 log that moved it, and how many did not.

    Format 1 appended the log line, then renamed the ref file; a crash in between left a line
    whose move never happened. The ref's next mover appended a recovery line undoing it on
    paper (``recovery: ...``, old = that line's new, new = its old); with no next move the
    unapplied line is the last and the ref file still holds its ``old``."""
    out: list[Move] = []
    dropped = 0
    for m in lines:
        if out and m.reason.startswith("recovery:") and m.old == out[-1].new and m.new == out[-1].old:
            out.pop()
            dropped += 2
        else:
            out.append(m)
    if out and out[-1].new != final and out[-1].old == final:
        out.pop()
        dropped += 1
    return out, dropped


def plan(reader: Format1Reader) -> Plan:
    """The commit entries that replay the format-1 ref log and end at its ref files."""
    final = reader.refs()
    logs, unapplied = {}, 0
    for name, lines in reader.ref_logs().items():
        logs[name], n = applied(lines, final.get(name))
        unapplied += n
    groups, reconciled = [], []
    cur: dict = {}
    replayed = skipped = 0
    for m in merge(logs):
        have = cur.get(m.name)
        if have != m.old:
            fix = Move(m.name, have, m.old, m.time, RECONCILE)
            groups.append((m.time, [fix]))
            reconciled.append(fix)
            _set(cur, m.name, m.old)
        if m.old == m.new:
            skipped += 1
            continue
        groups.append((m.time, [m]))
        _set(cur, m.name, m.new)
        replayed += 1
    fixes = [Move(n, cur.get(n), final.get(n), None, RECONCILE) for n in sorted(set(cur) | set(final)) if cur.get(n) != final.get(n)]
    if fixes:
        groups.append((None, fixes))
        reconciled += fixes
    return Plan(groups, replayed, skipped, unapplied, reconciled)


def _set(cur: dict, name: str, value: bytes | str | None) -> None:
    if value is None:
        cur.pop(name, None)
    else:
        cur[name] = value


# -- the public entry point ------------------------------------------------------------------


def upgrade_all(path: str, *, fsync: str | None = None) -> list[dict]:
    """``upgrade`` step by step until the store is of the newest format (1 or 2 -> 3 -> 6): each step's summary."""
    steps = []
    while True:
        got = upgrade(path, fsync=fsync)
        steps.append(got)
        if got["status"] not in ("upgraded", "finished"):
            return steps


def upgrade(path: str, *, fsync: str | None = None) -> dict:
    """One step of the upgrade of the store at ``path``, in place: format 1 or 2 to 3 (see the module docstring),
    or a store of one log (3, 4, 5) to format 6 (``legacy.runlogs``); ``upgrade_all`` takes every step.

    Returns a summary: ``status`` (``upgraded``, ``finished``, ``already-format-2``), and for a
    conversion ``objects`` copied, ``dropped`` (structured objects no ref ever reached),
    ``refs``, ``moves`` (ref log lines replayed), ``unapplied``, ``reconciled``, ``skipped``,
    ``entries`` and ``backup`` (where the format-1 store now is)."""
    if is_remote(path):  # a store of one HEAD (3, 4, 5) to a HEAD per run (7)
        from .bucket import upgrade_bucket

        return upgrade_bucket(path)
    path = os.path.abspath(path)
    backup, staging = path + BACKUP_SUFFIX, path + STAGING_SUFFIX
    policy = FsyncPolicy(fsync)
    if not os.path.lexists(path):
        return _finish(path, staging, backup, policy, fsync)
    if not os.path.isdir(path):
        raise StoreNotFound(path)
    with _dir_lock(path):
        version = read_marker(path)
        if version == RUNLOGS_VERSION:
            return {"status": f"already-format-{version}", "path": path}
        if version in ONE_LOG_VERSIONS:
            return _upgrade_runlogs(path, version, staging, policy, fsync)
        if version == 2:
            return _upgrade2(path, staging, policy, fsync)
        if version != 1:
            raise StoreFormatError(path, f"format version {version!r}; upgrade converts format 1 to {FORMAT_VERSION}")
        if os.path.lexists(backup):
            raise InvalidInput(f"{backup} already exists (an earlier upgrade's format-1 copy?); move it away, then run upgrade again")
        _rmtree(staging)
        try:
            reader = Format1Reader(path)
            p = plan(reader)
            _checkpoint("planned")
            _build(reader, p, staging)
            if policy.enabled:
                _sync_tree(staging)
            _checkpoint("built")
            summary = _verify(Format1Reader(path), p, staging, fsync)
            _checkpoint("verified")
            _unchanged(Format1Reader(path), p)
            if os.path.lexists(backup):
                raise InvalidInput(f"{backup} appeared during the upgrade; move it away, then run upgrade again")
            _checkpoint("swap")
        except BaseException:
            _rmtree(staging)
            raise
        _swap(path, staging, backup, policy)
    return {"status": "upgraded", "path": path, **summary, "backup": backup}


# -- formats 3 to 5 -> 6 ---------------------------------------------------------------------------


def _upgrade_runlogs(path: str, version: int, staging: str, policy: FsyncPolicy, fsync: str | None) -> dict:
    """A store of one log (format ``version``: 3, 4 or 5) to format 6 (legacy.runlogs); the old store is kept as
    ``PATH.format<version>``."""
    backup = f"{path}.format{version}"
    if os.path.lexists(backup):
        raise InvalidInput(f"{backup} already exists (an earlier upgrade's format-{version} copy?); move it away, then run upgrade again")
    _rmtree(staging)
    try:
        old = _open_as_found(path)
        try:
            built = runlogs.build(old, staging)
            if policy.enabled:
                _sync_tree(staging)
            _checkpoint("built")
            summary = runlogs.check(old, staging)
        finally:
            old.logs.close()
        _checkpoint("verified")
        if os.path.lexists(backup):
            raise InvalidInput(f"{backup} appeared during the upgrade; move it away, then run upgrade again")
        _checkpoint("swap")
    except BaseException:
        _rmtree(staging)
        raise
    _swap(path, staging, backup, policy)
    return {"status": "upgraded", "path": path, "from": version, "to": RUNLOGS_VERSION, **built, **summary, "backup": backup}


def _finish(path: str, staging: str, backup: str, policy: FsyncPolicy, fsync: str | None) -> dict:
    """``path`` is missing: finish an upgrade that stopped between its two renames (of a format-1
    store, kept as ``backup``, or of a format-2 one, kept as ``PATH.format2``)."""
    one_log = [v for v in ONE_LOG_VERSIONS if os.path.isdir(f"{path}.format{v}")]
    if one_log and runlogs.staged_ok(staging):  # stopped between the renames of a format 3-5 -> 6 upgrade
        return _finish_runlogs(path, staging, f"{path}.format{one_log[-1]}", policy)
    if not os.path.isdir(backup) and os.path.isdir(path + BACKUP2_SUFFIX):
        backup, version = path + BACKUP2_SUFFIX, 2
    else:
        version = 1
    if not os.path.isdir(backup):
        raise StoreNotFound(path)
    if read_marker(backup) != version:
        raise StoreFormatError(backup, f"not a format-{version} store")
    if not os.path.isdir(staging):
        raise InvalidInput(f"{path} is missing and {backup} holds its format-{version} store, but there is no {staging} to finish "
                           f"an upgrade with; 'mv {backup} {path}' puts the format-{version} store back, then run upgrade again")
    with _dir_lock(backup):
        if os.path.lexists(path):
            raise Refused(f"{path} appeared while finishing the upgrade; run upgrade again")
        if version == 2:
            summary = _verify2(Format2Reader(backup), staging, fsync)
        else:
            summary = _verify(Format1Reader(backup), plan(Format1Reader(backup)), staging, fsync)
        os.rename(staging, path)
        policy.dir(os.path.dirname(path))
    return {"status": "finished", "path": path, **summary, "backup": backup}


def _open_as_found(path: str) -> Store:
    """A store of one log read as it stands: no checkpoint adopted or written. The upgrade keeps it as
    ``PATH.format<N>`` byte for byte, and the open of a long log would otherwise leave a derived ``log/checkpoint``
    in it (it replays every entry anyway: it copies them all)."""
    policy = FsyncPolicy(None)
    try:
        engine = LogEngine(path, policy, checkpoint=False)
    except OSError as e:
        raise StorageOSError(f"open the log of {path}", e) from None
    return Store(engine, root=path, policy=policy)


def _finish_runlogs(path: str, staging: str, backup: str, policy: FsyncPolicy) -> dict:
    """``path`` is missing, ``backup`` holds its store of one log and ``staging`` the format-6 store built from it:
    check it again, then finish the swap."""
    with _dir_lock(backup):
        if os.path.lexists(path):
            raise Refused(f"{path} appeared while finishing the upgrade; run upgrade again")
        old = _open_as_found(backup)
        try:
            summary = runlogs.check(old, staging)
        finally:
            old.logs.close()
        os.rename(staging, path)
        policy.dir(os.path.dirname(path))
    return {"status": "finished", "path": path, **summary, "backup": backup}


# -- format 2 -> 3 -------------------------------------------------------------------------------


def _upgrade2(path: str, staging: str, policy: FsyncPolicy, fsync: str | None) -> dict:
    """Format 2 to format 3: each format-2 entry becomes one format-3 entry with the same objects
    (exact canonical bytes, so the same ids), ref moves, reasons and time; format 3 adds the index
    rows, the tables' root and the index digests. Chain checksums change (they now cover the rows),
    so anchors taken on format 2 name entries of ``PATH.format2``, not of the new log."""
    backup = path + BACKUP2_SUFFIX
    if os.path.lexists(backup):
        raise InvalidInput(f"{backup} already exists (an earlier upgrade's format-2 copy?); move it away, then run upgrade again")
    _rmtree(staging)
    try:
        store = Store.init(staging, fsync="off", format=3)
        assert store.engine.log_files  # a store on disk
        try:
            for e in Format2Reader(path).entries():
                with store.batch() as txn:
                    txn.when = e.time
                    txn.replay = True  # the format-2 moves as they were; format 3's rules still apply to every entry
                    for oid, otype, canon in e.objects:
                        value = None if otype == codec.BLOB else codec.decode(canon, oid, strict=False)[1]
                        txn.put(oid, otype, canon, value)
                    for name, old, new, reason in e.moves:
                        store.set_ref(name, old, new, reason)
        finally:
            store.engine.close()
        if policy.enabled:
            _sync_tree(staging)
        _checkpoint("built")
        summary = _verify2(Format2Reader(path), staging, fsync)
        _checkpoint("verified")
        if os.path.lexists(backup):
            raise InvalidInput(f"{backup} appeared during the upgrade; move it away, then run upgrade again")
        _checkpoint("swap")
    except BaseException:
        _rmtree(staging)
        raise
    _swap(path, staging, backup, policy)
    return {"status": "upgraded", "path": path, "from": 2, **summary, "backup": backup}


def _verify2(reader: Format2Reader, staging: str, fsync: str | None) -> dict:
    """Prove the format-3 store at ``staging`` holds exactly the format-2 store's objects (same
    bytes), refs and ref moves."""
    store = Store.open(staging, fsync=fsync)
    assert store.engine.log_files  # a store on disk
    try:
        refs: dict = {}
        moves = objects = entries = 0
        for e in reader.entries():
            entries += 1
            for oid, _otype, canon in e.objects:
                objects += 1
                if store.get_raw(oid) != canon:
                    raise UpgradeMismatch(reader.root, f"object {oid.hex()} differs")
            for name, _old, new, _reason in e.moves:
                moves += 1
                if new is None:
                    refs.pop(name, None)
                else:
                    refs[name] = new
        if dict(store.list_refs()) != refs:
            raise UpgradeMismatch(reader.root, "refs differ")
        got = sum(1 for _ in store.ref_log())
        if got != moves:
            raise UpgradeMismatch(reader.root, f"ref log has {got} moves, expected {moves}")
    finally:
        store.engine.close()
    return {"objects": objects, "refs": len(refs), "moves": moves, "entries": entries}


# -- build -------------------------------------------------------------------------------------


def _build(reader: Format1Reader, p: Plan, staging: str) -> None:
    # No fsync per entry: until the swap nothing depends on the staging store, and a crash
    # only means building it again. It is synced once, whole, before anything is swapped.
    store = Store.init(staging, fsync="off", format=3)
    assert store.engine.log_files  # a store on disk
    try:
        pending = set(reader.index())
        for when, moves in p.groups:
            objs, size = [], 0
            for obj in _closure(reader, [m.new for m in moves if isinstance(m.new, bytes)], pending):
                objs.append(obj)
                if obj[1] == codec.BLOB:
                    size += len(obj[2])
                if size >= ENTRY_BYTES:  # blobs may go ahead; records and chains land with their ref moves (format 3's rules)
                    _commit(store, when, [o for o in objs if o[1] == codec.BLOB], [])
                    objs, size = [o for o in objs if o[1] != codec.BLOB], 0
            _commit(store, when, objs, moves)
        objs, size = [], 0
        for oid in sorted(pending):
            canon = reader.read(oid)
            if codec.split_header(canon, oid)[0] == codec.BLOB:
                objs.append((oid, codec.BLOB, canon, None))
                size += len(canon)
                if size >= ENTRY_BYTES:
                    _commit(store, None, objs, [])
                    objs, size = [], 0
        _commit(store, None, objs, [])
    finally:
        store.engine.close()


def _closure(reader: Format1Reader, roots: list, pending: set) -> Iterator[tuple]:
    """(id, type, canonical, value) of every pending object the roots reach, each object after
    everything it names (post-order, iterative: chains can be long). Taken out of ``pending``."""
    stack: list[tuple[bytes, tuple | None]] = [(r, None) for r in reversed(roots)]
    while stack:
        oid, done = stack.pop()
        if done is not None:
            yield done
            continue
        if oid not in pending:
            continue
        pending.discard(oid)
        canon = reader.read(oid)
        otype, _ = codec.split_header(canon, oid)
        value = None if otype == codec.BLOB else codec.decode(canon, oid, strict=False)[1]
        stack.append((oid, (oid, otype, canon, value)))
        if value is not None:
            for _, ref in reversed(R.object_refs(otype, value)):
                if ref in pending:
                    stack.append((ref, None))


def _commit(store: Store, when: float | None, objs: list, moves: list) -> None:
    if not objs and not moves:
        return
    with store.batch() as txn:
        txn.when = when
        txn.replay = True  # format-1 moves as they were, reconcile moves included
        for oid, otype, canon, value in objs:
            txn.put(oid, otype, canon, value if otype == codec.RECORD else None)
        for m in moves:
            store.set_ref(m.name, m.old, m.new, m.reason)


# -- verify ------------------------------------------------------------------------------------


def _verify(reader: Format1Reader, p: Plan, staging: str, fsync: str | None) -> dict:
    """Prove the store at ``staging`` reproduces ``reader``'s store; returns the summary counts."""

    def fail(detail: str) -> NoReturn:
        raise UpgradeMismatch(reader.root, detail)

    store = Store.open(staging, fsync=fsync)
    assert store.engine.log_files  # a store on disk
    try:
        new: dict[bytes, str] = {}
        entries = 0
        for e in store.engine.entries():
            entries = e.n
            for o in e.objs:
                if o[0] in new:
                    fail(f"object {o[0].hex()} stored twice")
                new[o[0]] = o[1]
        links: dict[bytes, list] = {}
        absent: set[bytes] = set()
        seen = 0
        for oid, canon in reader.iter_objects():
            seen += 1
            otype, _ = codec.split_header(canon, oid)
            if otype != codec.BLOB:
                links[oid] = [ref for _, ref in R.object_refs(otype, codec.decode(canon, oid, strict=False)[1])]
            if oid not in new:
                if otype == codec.BLOB:
                    fail(f"blob {oid.hex()} was not copied")
                absent.add(oid)
            elif new[oid] != otype or store.get_raw(oid) != canon:
                fail(f"object {oid.hex()} differs")
        if len(new) != seen - len(absent):
            extra = next(iter(set(new) - set(reader.index())))
            fail(f"object {extra.hex()} is not in the format-1 store")
        moves = p.moves()
        todo = [m.new for m in moves if isinstance(m.new, bytes)]
        reached: set[bytes] = set()
        while todo:
            oid = todo.pop()
            if oid in reached:
                continue
            reached.add(oid)
            if oid in absent:
                fail(f"object {oid.hex()} is reachable from a ref but was not copied")
            todo.extend(links.get(oid, ()))
        refs = dict(store.list_refs())
        if refs != reader.refs():
            fail("refs differ")
        got = list(store.ref_log())
        if len(got) != len(moves):
            fail(f"ref log has {len(got)} moves, expected {len(moves)}")
        for i, (g, m) in enumerate(zip(got, moves, strict=False)):
            want = {"name": m.name, "old": _show(m.old), "new": _show(m.new), "reason": m.reason}
            if {k: g[k] for k in want} != want or (m.time is not None and g["time"] != m.time):
                fail(f"ref log move {i + 1} is {g}, expected {want} at time {m.time}")
    finally:
        store.engine.close()
    return {"objects": len(new), "dropped": len(absent), "refs": len(refs), "moves": p.replayed,
            "unapplied": p.unapplied, "reconciled": len(p.reconciled), "skipped": p.skipped, "entries": entries}


def _unchanged(reader: Format1Reader, p: Plan) -> None:
    """Conflict if the format-1 refs or ref log changed since ``p`` was planned."""
    again = plan(reader)
    if again.moves() != p.moves():
        old, new = p.moves(), again.moves()
        i = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        name = (new[i] if i < len(new) else old[i]).name
        raise Conflict(name, "the value the upgrade copied", "a newer one: a format-1 writer is running; stop it, then run upgrade again")


def _show(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.hex() if isinstance(v, bytes) else v


# -- files -------------------------------------------------------------------------------------


def _swap(path: str, staging: str, backup: str, policy: FsyncPolicy) -> None:
    parent = os.path.dirname(path)
    os.rename(path, backup)
    policy.dir(parent)
    try:
        _checkpoint("between-renames")
        os.rename(staging, path)
    except BaseException:
        if not os.path.lexists(path):
            os.rename(backup, path)  # undo: the format-1 store is back where it was
            policy.dir(parent)
            _rmtree(staging)
        raise
    policy.dir(parent)


def _sync_tree(root: str) -> None:
    """fsync every file and directory under ``root`` (and ``root`` itself)."""
    for dirpath, _, files in os.walk(root):
        for fn in files:
            fd = os.open(os.path.join(dirpath, fn), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


@contextmanager
def _dir_lock(path: str) -> Iterator[None]:
    """An exclusive flock on the store directory for the whole upgrade (follows the directory
    through its rename, so a second upgrade waits for nothing and is refused)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another upgrade of {path} is running") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            raise Refused(f"{path} was replaced while starting the upgrade; run upgrade again")
        yield
    finally:
        os.close(fd)


def _rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
