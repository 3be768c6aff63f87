"""The backup's copier: each segment of the snapshot planned (reuse, append, copy), copied, read
back and checked, and landed in DEST in increasing order — or, when a packed segment arrives,
staged whole and exchanged with ``DEST/log`` in one ``renameat2(RENAME_EXCHANGE)`` — then DEST's
derived files (indexes, checkpoint, head witness) written and DEST opened at exactly the snapshot's
position. ``lifecycle.backup`` (the command, its contract and crash-safety argument in its docstring)
checks SRC and DEST before anything is written and runs this; nothing else does.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import secrets
import shutil
import sys
from collections.abc import Callable
from typing import NamedTuple

import blake3

from ..errors import CorruptLog, IntegrityError, InvalidInput, ObjstoreError, StorageOSError
from ..runs.anchors import anchor_token
from ..storage.fileutil import FsyncPolicy, atomic_file
from ..storage.log import packed
from ..storage.log.checkpoint import adoption
from ..storage.log.entry import LogEntry
from ..storage.log.format import (
    ENTRY_HEAD,
    ENTRY_MAGIC,
    ENTRY_TRAILER,
    MAX_META,
    SEG_HEADER,
    SEG_MAGIC,
    WITNESS,
    WITNESS_MAGIC,
    ZERO,
    Position,
)
from ..storage.log.local import LogEngine
from ..storage.log.segfile import _parse_split, _read_segment_header, entry_ending_at, packed_entries, seg_name
from ..storage.log.witness import read_witness
from ..storage.storedir import FORMAT_VERSION, mark_version
from .backup_io import MAGIC_LEN, TAIL_LEN, _checksum_at, _last_entry, _read_into, _ro, _write_all

CHUNK = 4 << 20  # bytes read, hashed and written at a time
BATCH_BYTES = 256 << 20  # segment copies written before they are synced and renamed together
TMP_PREFIX = "backup"  # DEST/tmp/backup.* are this module's temporary files (a crashed run's are removed)
STATE_FILES = ("state.db", "state.db-wal", "state.db-shm")  # DEST's state cache (runs.state), never copied
DIGESTS = "backup-digests"  # SRC/tmp/backup-digests/<BLAKE3 of DEST's path>: each DEST segment's size and BLAKE3 as the last backup checked it

Progress = Callable[[int, int], None]


class BackupResult(NamedTuple):
    """What a backup did: the snapshot's entry count and anchor token, the files written
    (segments copied or appended to, indexes, the checkpoint), the segment files kept as they were,
    the files removed from DEST, and the bytes copied."""

    dest: str
    entries: int
    anchor: str
    copied: int
    reused: int
    removed: int
    bytes_copied: int
    recopied: list[int | str] = []  # DEST segments found damaged (not the bytes they must be) and copied again ("K of run R")
    logs: int = 1  # logs copied (a store of format 6: the store log and each run's; ``entries``/``anchor``: the store log's)

    def to_json(self) -> dict:
        return {"entries": self.entries, "anchor": self.anchor, "copied": self.copied, "reused": self.reused,
                "removed": self.removed, "bytes_copied": self.bytes_copied, "recopied": list(self.recopied), "logs": self.logs}


class _Plan(NamedTuple):
    seg: int
    length: int  # bytes of SRC's segment in the snapshot
    action: str  # reuse | append | copy
    start: int = 0  # append: DEST's current size
    prev: bytes = ZERO  # append: the checksum of DEST's last entry
    n: int = 1  # append: the number of the entry after it


class _Copier:
    def __init__(self, engine: LogEngine, dest: str, policy: FsyncPolicy, progress: Progress | None,
                 tmp: str | None = None, digests: str | None = None) -> None:
        """``dest``: the directory holding DEST's ``log/`` (a store of one log, or one log of a store of logs);
        ``tmp``: where this copy's temporary files go (default ``dest/tmp``; on DEST's file system, used by
        nothing else while DEST's log lock is held); ``digests``: the file of the last backup's digests."""
        self.engine = engine
        self.dest = dest
        self.dlog = os.path.join(dest, "log")
        self.tmp = tmp or os.path.join(dest, "tmp")
        self.policy = policy
        self.progress = progress
        self.copied = self.reused = self.removed = self.bytes = 0
        self.total = 0
        self.buf = memoryview(bytearray(CHUNK))  # one buffer for every chunk read (no fresh 4 MiB per read)
        self.replaced = False  # a DEST segment is replaced or removed: its checkpoint may no longer be adoptable
        # segment -> (size, BLAKE3) the last backup checked. Kept beside SRC, not in DEST: whoever can edit a
        # DEST segment can edit a file in DEST to vouch for the edit, while these digests were made reading SRC
        self.digests = digests or digests_path(engine.root, dest)
        self.sums = _read_digests(self.digests)
        self.new_sums: dict[int, tuple[int, bytes]] = {}  # the same for this backup's DEST, written at the end
        self.prefix: dict[int, blake3.blake3] = {}  # append: the hash of DEST's checked bytes, continued by the copy
        self.recopied: list[int | str] = []

    def dpath(self, k: int) -> str:
        return os.path.join(self.dlog, seg_name(k))

    def run(self, pos: Position, tail_seg: int, lengths: dict[int, int], src_version: int = FORMAT_VERSION) -> BackupResult:
        try:
            plans, drop = self._plan(tail_seg, lengths)  # may still refuse DEST: nothing is written before it
            if src_version > FORMAT_VERSION:
                # DEST gets packed segments or labelled rows: it is SRC's format too, before the first lands
                mark_version(self.dest, src_version, self.policy)
            self._clear_tmp()
            if drop:
                self.replaced = True
            live = self.dlog
            swap = self._lands_packed(plans) and _exchange_works(self.tmp)
            if swap:
                # A packed segment may lack bodies that a deletion in a later segment justifies: the
                # new log is put together beside DEST's (kept files hard-linked) and exchanged with it
                # in one rename, so DEST never holds a packed segment without what justifies it.
                plans = [p if p.action == "reuse" else _Plan(p.seg, p.length, "copy") for p in plans]
                self.dlog = self._stage(live, plans, drop)
            else:
                ckpt = os.path.join(self.dlog, "checkpoint")
                if self.replaced and os.path.exists(ckpt):
                    os.unlink(ckpt)  # it may point into a segment about to be replaced: a reader (verify) must never find it stale
                    self.removed += 1
                else:
                    self._drop_stale_checkpoint()
                if drop:
                    self._remove(drop)
            self.total = sum(p.length - p.start for p in plans if p.action != "reuse")
            done = 0
            pending: list[tuple[_Plan, str]] = []  # whole copies written to DEST/tmp, not yet in place
            try:
                for p in plans:
                    if p.action == "reuse":
                        self.reused += 1
                        if p.seg < tail_seg:
                            self._copy_index(p.seg, copied=False)
                        continue
                    if p.action == "append":
                        self._land(pending, tail_seg)  # the segments before it first: DEST stays a prefix
                        self._append(p, done)
                        if p.seg < tail_seg:
                            self._copy_index(p.seg, copied=True)
                    else:
                        pending.append((p, self._write_tmp(p, done)))
                        if sum(q.length for q, _ in pending) >= BATCH_BYTES:
                            self._land(pending, tail_seg)
                    done += p.length - p.start
                self._land(pending, tail_seg)
            except BaseException:
                for _p, tmp in pending:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                raise
            self._check_links(tail_seg)
            if self.replaced:
                self._drop_state_cache()
            self._copy_checkpoint()
            if swap:
                self._swap(live)
            self._check_open(pos)
            self._write_digests()
            self._write_witness(pos)
        except OSError as e:
            raise StorageOSError(f"back up to {self.dest}", e.strerror or str(e)) from None
        return BackupResult(self.dest, pos.entry, anchor_token(pos.entry, pos.checksum), self.copied, self.reused,
                            self.removed, self.bytes, self.recopied)

    # -- deciding ----------------------------------------------------------------------------------------------
    def _plan(self, tail_seg: int, lengths: dict[int, int]) -> tuple[list[_Plan], list[int]]:
        """What to do with each segment, and which DEST segments to remove first (highest first)."""
        present = sorted(int(f[:-4]) for f in os.listdir(self.dlog) if f.endswith(".seg") and f[:-4].isdigit())
        drop = [k for k in present if k > tail_seg]
        plans = []
        diverged = None
        overwrite = False
        for k in range(1, tail_seg + 1):
            length = lengths[k]
            if k not in present or (diverged is not None):
                plans.append(_Plan(k, length, "copy"))
                continue
            p = self._compare(k, length, sealed=k < tail_seg)
            self.replaced |= p is None or p.action == "copy"
            if p is None:  # not even the same entries: this and every later DEST segment go first
                diverged = k
                p = _Plan(k, length, "copy")
            elif p.action == "copy" and k == tail_seg:
                overwrite = True  # DEST's last segment is not a prefix of SRC's: its entries may be SRC's or not
            plans.append(p)
        if diverged is not None:  # k itself is replaced atomically (segment 1 is never absent)
            drop += [k for k in present if diverged < k <= tail_seg]
        if drop or diverged is not None or overwrite:
            # About to remove or replace DEST entries that SRC may not have: fine for a copy of ours
            # torn by a crash, refused for another history (commits only DEST has). DEST's witness says
            # which: the last snapshot a backup finished names an entry SRC must hold.
            w = read_witness(os.path.join(self.dlog, "witness"))
            if w is not None and _checksum_at(self.engine, tail_seg, lengths, w[0]) != w[1]:
                raise InvalidInput(f"backup destination {self.dest} is a store of another history (its entry {w[0]} "
                                   "is not this store's)")
        return plans, sorted(set(drop), reverse=True)

    def _compare(self, k: int, length: int, sealed: bool) -> _Plan | None:
        """reuse / append / copy (a replacement with the same entries), or None when DEST's segment
        does not end with a checksum SRC has there (DEST diverged, or its file is damaged)."""
        sp, dp = self.engine.seg_path(k), self.dpath(k)
        with _ro(sp) as sfd, _ro(dp) as dfd:
            dsize = os.fstat(dfd).st_size
            dmagic, smagic = os.pread(dfd, MAGIC_LEN, 0), os.pread(sfd, MAGIC_LEN, 0)
            if dsize == length and dmagic == smagic:
                if os.pread(dfd, TAIL_LEN, dsize - TAIL_LEN) == os.pread(sfd, TAIL_LEN, length - TAIL_LEN):
                    # A packed segment gc packed again (a new deletion) ends with the same checksum and
                    # may, by chance, have the same size: a SRC file written after DEST's copy is copied
                    # again, so a body gc removed never stays in a backup. (Ordinary sealed segments
                    # never change.)
                    if smagic != packed.PK_MAGIC or os.fstat(sfd).st_mtime_ns <= os.fstat(dfd).st_mtime_ns:
                        if self._intact(k, sfd, dfd, dsize):
                            return _Plan(k, length, "reuse")
                        return _Plan(k, length, "copy")  # damaged: SRC's file in its place (same entries)
            if SEG_HEADER.size <= dsize < length and dmagic == smagic == SEG_MAGIC:
                got = _last_entry(dfd, dsize, k)
                if got is not None and os.pread(sfd, TAIL_LEN, dsize - TAIL_LEN) == got[0] and (
                        dsize > SEG_HEADER.size or os.pread(sfd, SEG_HEADER.size, 0) == os.pread(dfd, SEG_HEADER.size, 0)):
                    if self._intact(k, sfd, dfd, dsize):
                        return _Plan(k, length, "append", dsize, got[0], got[1])
                    return _Plan(k, length, "copy")  # its checked bytes are not SRC's: copied whole
            if sealed and dsize >= TAIL_LEN and os.pread(dfd, TAIL_LEN, dsize - TAIL_LEN) == os.pread(sfd, TAIL_LEN, length - TAIL_LEN):
                return _Plan(k, length, "copy")  # the same entries in another layout (gc rewrote one of them)
            if not sealed:
                return _Plan(k, length, "copy")  # DEST's last segment: nothing after it to keep consistent
        return None

    def _intact(self, k: int, sfd: int, dfd: int, size: int) -> bool:
        """Whether DEST's segment ``k`` holds exactly SRC's bytes ``[0, size)``: DEST's file is read and
        hashed (a flipped byte keeps size, magic and last 32 bytes), and the BLAKE3 compared with the
        digest the log names for a packed file, else the one the last backup recorded when it wrote and
        read back this file, else SRC's bytes hashed. A DEST segment that differs is named
        (``recopied``) and copied again; one that matches is recorded for the next backup."""
        h = self._hash(dfd, size)
        got = h.digest()
        ok = (got == self.engine.tables.packs.get(k) and size == os.fstat(sfd).st_size) or self.sums.get(k) == (size, got)
        if not ok:
            ok = self._hash(sfd, size).digest() == got
        if not ok:
            self.recopied.append(k)
            return False
        self.new_sums[k] = (size, got)
        self.prefix[k] = h
        return True

    def _hash(self, fd: int, size: int, start: int = 0) -> blake3.blake3:
        """BLAKE3 of bytes ``start`` .. ``size`` of ``fd`` (fewer if the file ends first: the digest then differs)."""
        h = blake3.blake3()
        off = start
        while off < size:
            data = _read_into(fd, self.buf, off, size - off)
            if not data:
                break
            h.update(data)
            off += len(data)
        return h

    def _write_digests(self) -> None:
        """SRC/tmp/backup-digests/<key>: each DEST segment's size and BLAKE3, all checked by this backup, so the next
        one compares DEST's files with them instead of reading SRC's again. Derived: a missing, stale or
        damaged one only makes the next backup hash SRC's files too (it never keeps a file that differs)."""
        if self.new_sums == self.sums:
            return
        rows = {str(k): [size, d.hex()] for k, (size, d) in sorted(self.new_sums.items())}
        try:  # best effort (SRC may be read-only): without it the next backup hashes SRC's files too
            os.makedirs(os.path.dirname(self.digests), exist_ok=True)
            with atomic_file(self.digests, os.path.dirname(self.digests), FsyncPolicy("off")) as f:
                f.write(json.dumps({"segments": rows}, sort_keys=True).encode())
        except OSError:
            pass

    # -- writing ----------------------------------------------------------------------------------------------
    def _clear_tmp(self) -> None:
        os.makedirs(self.tmp, exist_ok=True)
        for f in os.listdir(self.tmp):
            if f.startswith(TMP_PREFIX + "."):
                path = os.path.join(self.tmp, f)  # a killed backup's (DEST's lock is ours: none is running)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)  # a staged log, or the old one a swap left
                else:
                    os.unlink(path)

    def _lands_packed(self, plans: list[_Plan]) -> bool:
        """Whether this backup puts a packed segment (one gc rewrote, maybe without bodies a later
        deletion removed) into DEST: it then lands in one swap of DEST's log (``_stage``, ``_swap``)."""
        for p in plans:
            if p.action != "reuse":
                with _ro(self.engine.seg_path(p.seg)) as fd:
                    if os.pread(fd, MAGIC_LEN, 0) == packed.PK_MAGIC:
                        return True
        return False

    def _stage(self, live: str, plans: list[_Plan], drop: list[int]) -> str:
        """A new log directory in DEST/tmp holding, hard-linked, what DEST keeps of its log: the segments
        kept as they are, their indexes, and the head witness (``_plan`` checked that SRC holds the
        entry it names, within the snapshot). Every other segment is copied into it; the rest of DEST's
        log (segments SRC no longer has, replaced ones, the checkpoint) is left behind."""
        stage = self._tmp_name("log")
        os.mkdir(stage)
        keep = {p.seg for p in plans if p.action == "reuse"}
        gone = set(drop)
        for f in sorted(os.listdir(live)):
            k = int(f[:-4]) if f[-4:] in (".seg", ".idx") and f[:-4].isdigit() else None
            if f == "witness" or (k is not None and k in keep):
                os.link(os.path.join(live, f), os.path.join(stage, f))
            elif f == "checkpoint" or k in gone:
                self.removed += 1
        self.policy.dir(stage)
        return stage

    def _swap(self, live: str) -> None:
        """The staged log (checked: every copy read back, the segments chaining) takes the place of
        DEST's in one exchange of the two directories; the old one is then removed."""
        stage = self.dlog
        self.policy.dir(stage)
        _exchange(stage, live)
        self.policy.dir(self.tmp)
        self.policy.dir(self.dest)
        self.dlog = live
        shutil.rmtree(stage)  # DEST's old log now

    def _remove(self, segs: list[int]) -> None:
        """Remove DEST segments, highest first (so DEST is a prefix of the log at every step), after
        its witness, which may name an entry in them."""
        wit = os.path.join(self.dlog, "witness")
        if os.path.exists(wit):
            os.unlink(wit)
            self.policy.dir(self.dlog)
        for k in segs:
            for path in (self.dpath(k), os.path.join(self.dlog, f"{k:010d}.idx")):
                if os.path.exists(path):
                    os.unlink(path)
                    self.removed += 1
            self.policy.dir(self.dlog)

    def _write_tmp(self, p: _Plan, done: int) -> str:
        """SRC's segment ``[0, length)`` into DEST/tmp, read back and checked (``_land`` syncs it and
        renames it into place)."""
        tmp = self._tmp_name(f"seg{p.seg}")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with _ro(self.engine.seg_path(p.seg)) as sfd:
                digest = self._stream(sfd, fd, 0, p.length, done, self.engine.seg_path(p.seg))
            self._check_copy(fd, tmp, p.seg, 0, p.length, digest, ZERO, 0)
            self.new_sums[p.seg] = (p.length, digest)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _land(self, pending: list[tuple[_Plan, str]], tail_seg: int) -> None:
        """Put a batch of written segment copies in place: each fsynced first (all of them, so the disk
        writes them back together, as ``cp && sync`` lets it), then, in increasing order, each one
        renamed into place with a directory sync after it. A sealed segment's index is never beside the
        other version of its segment (verify names an index that does not match its entries, and a
        reader trusts the old one if the log still names it): the old one goes before the rename, the
        new one comes after."""
        for _p, tmp in pending:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                self.policy.file(fd)
            finally:
                os.close(fd)
        while pending:
            p, tmp = pending[0]
            idx = os.path.join(self.dlog, f"{p.seg:010d}.idx")
            if os.path.exists(idx):
                os.unlink(idx)
            os.rename(tmp, self.dpath(p.seg))
            pending.pop(0)
            self.policy.dir(self.dlog)
            self.copied += 1
            if p.seg < tail_seg:
                self._copy_index(p.seg, copied=True)

    def _append(self, p: _Plan, done: int) -> None:
        """SRC's bytes ``[start, length)`` appended to DEST's segment in place; on any failure DEST's
        file is truncated back to what it was (a torn tail either way: invisible, cut by a writer)."""
        path = self.dpath(p.seg)
        fd = os.open(path, os.O_RDWR)
        try:
            try:
                whole = self.prefix.pop(p.seg)  # DEST's bytes [0, start), checked by _intact
                with _ro(self.engine.seg_path(p.seg)) as sfd:
                    os.lseek(fd, p.start, os.SEEK_SET)
                    digest = self._stream(sfd, fd, p.start, p.length, done, self.engine.seg_path(p.seg), whole)
                self.policy.file(fd)
                self._check_copy(fd, path, p.seg, p.start, p.length, digest, p.prev, p.n)
                self.new_sums[p.seg] = (p.length, whole.digest())
            except BaseException:
                try:
                    os.ftruncate(fd, p.start)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)
        self.copied += 1

    def _stream(self, sfd: int, dfd: int, start: int, end: int, done: int, path: str, whole: blake3.blake3 | None = None) -> bytes:
        h = blake3.blake3()
        off = start
        while off < end:
            data = _read_into(sfd, self.buf, off, end - off)
            if not data:
                raise IntegrityError("?", path, f"segment ended at offset {off} while being copied")
            h.update(data)
            if whole is not None:
                whole.update(data)
            _write_all(dfd, data)
            off += len(data)
            self.bytes += len(data)  # segment bytes only: indexes and the checkpoint are counted as files
            if self.progress is not None:
                self.progress(done + off - start, self.total)
        return h.digest()

    def _check_copy(self, fd: int, path: str, seg: int, start: int, end: int, digest: bytes, prev: bytes, n: int) -> None:
        """Read the copied range back: its BLAKE3 must be what was read from SRC, and in an ordinary
        segment each copied entry's chain checksum must follow from its meta and the entry before."""
        if self._hash(fd, end, start).digest() != digest:
            raise IntegrityError("?", path, f"the bytes read back from offset {start} are not the bytes copied")
        magic = os.pread(fd, MAGIC_LEN, 0)
        if magic == packed.PK_MAGIC:  # a segment gc packed: every entry's checksum from the meta frame, chained
            problem = packed_entries(fd, seg).problem
            if problem is not None:
                raise IntegrityError("?", path, f"the packed segment in the copy: {problem}")
            return
        if magic != SEG_MAGIC:
            raise IntegrityError("?", path, "the copy is not a segment file (bad magic)")
        if start == 0:
            _, _, n, prev = SEG_HEADER.unpack(os.pread(fd, SEG_HEADER.size, 0))
            start = SEG_HEADER.size
        off = start
        while off < end:
            head = os.pread(fd, ENTRY_HEAD.size, off)
            if len(head) != ENTRY_HEAD.size or head[:4] != ENTRY_MAGIC:
                raise IntegrityError("?", path, f"entry {n} at offset {off}: bad entry header in the copy")
            _, mlen, dlen = ENTRY_HEAD.unpack(head)
            length = ENTRY_HEAD.size + mlen + dlen + ENTRY_TRAILER.size
            if mlen > MAX_META or off + length > end:
                raise IntegrityError("?", path, f"entry {n} at offset {off}: runs past the end of the copy")
            e = _parse_split(os.pread(fd, ENTRY_HEAD.size + mlen, off), os.pread(fd, ENTRY_TRAILER.size, off + length - ENTRY_TRAILER.size),
                             dlen, off, prev, seg, n)
            if isinstance(e, str):
                raise IntegrityError("?", path, f"entry {n} at offset {off} in the copy: {e}")
            prev, n, off = e.checksum, e.n + 1, off + length
            if e.seal:
                break  # what follows a seal entry is not the log (SRC has the same bytes)

    def _copy_index(self, seg: int, copied: bool) -> None:
        """A sealed segment's index beside its copy, if SRC's file is the one the log names (derived: a
        DEST reader checks it against its log anyway, and rebuilds it when absent)."""
        dp = os.path.join(self.dlog, f"{seg:010d}.idx")
        if not copied and os.path.exists(dp):
            return
        named = self.engine.tables.idx.get(seg)
        try:
            with open(os.path.join(self.engine.dir, f"{seg:010d}.idx"), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = None
        if data is None or named is None or blake3.blake3(data).digest() != named:
            if copied and os.path.exists(dp):
                os.unlink(dp)  # the old segment's index: a reader builds the new one
                self.removed += 1
            return
        self._put_file(dp, data)

    def _drop_state_cache(self) -> None:
        """A segment of DEST was replaced or removed (gc rewrote SRC's, maybe dropping deleted bodies):
        DEST's state cache, if a reader of DEST made one, may hold rows of what is gone. It is derived
        and rebuilt on first use; a backup never carries one that its log no longer backs."""
        for name in STATE_FILES:
            path = os.path.join(self.dest, name)
            if os.path.exists(path):
                os.unlink(path)
                self.removed += 1

    def _copy_checkpoint(self) -> None:
        """SRC's checkpoint, when DEST has none (or had one that a replaced segment made stale), if DEST's
        log commits to it (``_adoptable``). So the first open of a big backup costs the tail since SRC's
        checkpoint, not the whole log; otherwise DEST keeps its own, and its open replays only what this
        backup appended."""
        dp = os.path.join(self.dlog, "checkpoint")
        if os.path.exists(dp):
            return
        try:
            with open(os.path.join(self.engine.dir, "checkpoint"), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        if self._adoptable(data):
            self._put_file(dp, data)

    def _drop_stale_checkpoint(self) -> None:
        """DEST's checkpoint goes unless DEST's log commits to it: a reader of DEST between two runs
        may have left one a reader would not adopt (verify names it)."""
        dp = os.path.join(self.dlog, "checkpoint")
        try:
            with open(dp, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        if not self._adoptable(data):
            os.unlink(dp)
            self.removed += 1

    def _adoptable(self, data: bytes) -> bool:
        """Whether a reader of DEST would adopt checkpoint bytes ``data``: the readers' own rule
        (``checkpoint.adoption``) over DEST's segment files."""

        def entry_at(seg: int, off: int, n: int) -> LogEntry | None:
            if type(seg) is not int or type(off) is not int or not os.path.exists(self.dpath(seg)):
                return None
            with _ro(self.dpath(seg)) as fd:
                if os.pread(fd, MAGIC_LEN, 0) != SEG_MAGIC or not SEG_HEADER.size < off <= os.fstat(fd).st_size:
                    return None
                return entry_ending_at(fd, off, seg)

        got = adoption(data, entry_at)
        return not isinstance(got, str) and got[3] is not None

    def _put_file(self, path: str, data: bytes, count: bool = True) -> None:
        """A derived file (an index, the checkpoint, the witness) written aside and renamed into place,
        not fsynced, as the engine writes them: one lost to an OS crash is rebuilt from the log (or, for
        the witness, is no witness), and a kill leaves the old file or the new one, whole."""
        tmp = self._tmp_name(os.path.basename(path))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, data)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, path)
        self.copied += count and path != os.path.join(self.dlog, "witness")

    def _tmp_name(self, what: str) -> str:
        return os.path.join(self.tmp, f"{TMP_PREFIX}.{what}.{os.getpid()}.{secrets.token_hex(4)}")

    # -- checking DEST as a whole ------------------------------------------------------------------------------
    def _check_links(self, tail_seg: int) -> None:
        """Each ordinary segment header's previous checksum is the last 32 bytes of DEST's segment
        before it (its last entry's checksum): the copied and the kept segments chain."""
        before = None
        for k in range(1, tail_seg + 1):
            with _ro(self.dpath(k)) as fd:
                try:
                    _, hseg, _, prev = _read_segment_header(fd, self.dpath(k))  # ordinary or packed
                except CorruptLog as e:
                    raise IntegrityError("?", self.dpath(k), f"segment {k} of the backup: {e}") from None
                if hseg != k or (before is not None and prev != before):
                    raise IntegrityError("?", self.dpath(k), f"segment {k} of the backup does not chain to segment {k - 1}")
                before = os.pread(fd, TAIL_LEN, os.fstat(fd).st_size - TAIL_LEN)

    def _check_open(self, pos: Position) -> None:
        """DEST opens as a store and stands at exactly the snapshot."""
        try:
            d = LogEngine(self.dest, self.policy)
        except ObjstoreError as e:
            raise IntegrityError("?", self.dest, f"the backup does not open: {e}") from None
        try:
            got = d.position()
            if d.damaged is not None or d.torn is not None or got != pos:
                why = d.damaged or d.torn or f"it ends at entry {got.entry}, the snapshot at entry {pos.entry}"
                raise IntegrityError("?", self.dest, f"the backup does not read as the snapshot: {why}")
        finally:
            d.close()

    def _write_witness(self, pos: Position) -> None:
        """DEST's own head witness for the snapshot, last: every segment byte it covers is fsynced and
        checked by now, so it never leads DEST's log; then the directory is synced once more."""
        if pos.entry and read_witness(os.path.join(self.dlog, "witness")) != (pos.entry, pos.checksum):
            self._put_file(os.path.join(self.dlog, "witness"), WITNESS.pack(WITNESS_MAGIC, pos.entry, pos.checksum))
        self.policy.dir(self.dlog)


def digests_path(src_root: str, dest: str) -> str:
    """SRC's file of the digests of DEST's log at ``dest`` as the last backup checked them."""
    return os.path.join(src_root, "tmp", DIGESTS, blake3.blake3(os.path.realpath(dest).encode()).hexdigest())


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "i686": 353, "armv7l": 382, "ppc64le": 357, "s390x": 347, "riscv64": 276}


def _exchange(a: str, b: str) -> None:
    """Linux ``renameat2(RENAME_EXCHANGE)``: directories ``a`` and ``b`` trade places atomically."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    args = (ctypes.c_int(_AT_FDCWD), os.fsencode(a), ctypes.c_int(_AT_FDCWD), os.fsencode(b), ctypes.c_uint(_RENAME_EXCHANGE))
    if fn is not None:
        r = fn(*args)
    elif platform.machine() in _SYS_RENAMEAT2:
        r = libc.syscall(ctypes.c_long(_SYS_RENAMEAT2[platform.machine()]), *args)
    else:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if r != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _exchange_works(tmp: str) -> bool:
    """Whether DEST's file system exchanges two directories (Linux 3.15+, most local file systems).
    Where it does not, packed segments land one by one in increasing order as every other copy does,
    and a kill between two of them can leave one in DEST before the deletion that justifies it."""
    if not sys.platform.startswith("linux"):
        return False
    a, b = os.path.join(tmp, f"{TMP_PREFIX}.probe-a.{os.getpid()}"), os.path.join(tmp, f"{TMP_PREFIX}.probe-b.{os.getpid()}")
    try:
        os.mkdir(a)
        os.mkdir(b)
        _exchange(a, b)
        return True
    except OSError:
        return False
    finally:
        for d in (a, b):
            try:
                os.rmdir(d)
            except OSError:
                pass


def _read_digests(path: str) -> dict[int, tuple[int, bytes]]:
    """The digests file as the last backup to that DEST wrote it; {} if absent or not of its shape (derived)."""
    try:
        with open(path, "rb") as f:
            rows = json.loads(f.read())["segments"]
        return {int(k): (int(v[0]), bytes.fromhex(v[1])) for k, v in rows.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return {}
