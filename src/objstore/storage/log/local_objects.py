"""Reading objects out of the segment files, hash-checked.

Kept here: every object read is re-hashed against its id before it is returned, a block the block cache
(``blockcache``) holds included (one that fails is dropped and the file read again); a location whose
declared sizes cannot be true is refused before anything is read or allocated for it; a block that
would decompress to more than ``PRECHECK_RAW`` bytes (and every large blob) is hash-checked while it
streams, before it is held or written out; a read that fails because gc replaced a segment file
this process had open reads the file in place again, and a body gc removed meanwhile is a snapshot
gone, never the bytes of another object.
"""

from __future__ import annotations

import os
from typing import IO

import blake3
import zstandard

from ...errors import BodyRemoved, CorruptLog, IntegrityError, ObjectNotFound, ObjstoreError, SnapshotGone, StorageOSError
from .. import codec
from .format import COMP_GONE, COMP_RAW, COMP_ZSTD, LARGE_BLOB, STATS, Loc, _decompressor
from .local_state import LocalBase
from .segfile import stream_block
from .segrows import _NO_LOC

PRECHECK_RAW = 16 << 20  # a block declaring more raw bytes is hash-checked while streaming before it is held
CHECK_SIZE_ABOVE = 1 << 20  # a stored length above this is checked against the segment file's size before reading


class ObjectReads(LocalBase):
    """Objects by location: blocks, large blobs streamed out, the checks before each read."""

    def _block_key(self, loc: Loc) -> tuple:
        """The block cache's key of ``loc``'s block: the token of the descriptor it is read on (a file gc put
        in place under the same name is another descriptor, another token), its offset and its sizes."""
        return (self._fd_tok[self._fd(loc.seg)], loc.block_off, loc.comp, loc.stored_len, loc.block_raw)

    def _read_block(self, loc: Loc, hold: bool = True) -> bytes:
        """``loc``'s block decompressed: the one the block cache holds, else read from the file (and held,
        if ``hold`` and the block is worth holding: see ``_load_block``)."""
        fd = self._fd(loc.seg)
        if loc.length == loc.block_raw:  # the object alone in its block: never held (see _load_block)
            return self._load_block(loc, fd, (), False)
        key = (self._fd_tok[fd], loc.block_off, loc.comp, loc.stored_len, loc.block_raw)
        raw = self._blocks.get(key)
        return raw if raw is not None else self._load_block(loc, fd, key, hold)

    def _load_block(self, loc: Loc, fd: int, key: tuple, hold: bool = True) -> bytes:
        STATS["blocks_read"] += 1
        try:
            stored = os.pread(fd, loc.stored_len, loc.block_off)
        except OSError as e:
            raise StorageOSError(f"read {self.seg_path(loc.seg)}", e) from None
        if len(stored) != loc.stored_len:
            raise IntegrityError("?", self.seg_path(loc.seg), f"block at offset {loc.block_off} truncated")
        if loc.comp == COMP_ZSTD:
            try:
                raw = _decompressor().decompress(stored, max_output_size=loc.block_raw)
            except zstandard.ZstdError as e:
                raise IntegrityError("?", self.seg_path(loc.seg), f"zstd data corrupt: {e}") from None
            if len(raw) != loc.block_raw:
                raise IntegrityError("?", self.seg_path(loc.seg), "block decompresses to the wrong size")
        else:
            raw = stored
        # An object alone in its block (a one-record commit, a blob of its own) is not held: no neighbour will
        # be read from it, and its reader keeps a copy; a walk of such blocks then costs the cache nothing.
        if hold and loc.length != loc.block_raw:
            self._blocks.put(key, raw)
        return raw

    def _check_loc(self, oid: bytes, loc: Loc, prehash_above: int = PRECHECK_RAW) -> None:
        """Refuse a location whose declared sizes cannot be true before reading or allocating for it
        (a crafted entry or index row may declare gigabytes for a few stored bytes): the object must
        lie inside its block, the stored bytes inside the segment file, and a block that would
        decompress to more than PRECHECK_RAW bytes is hash-checked while it streams, before it is
        ever held whole."""
        if loc.comp == COMP_GONE:
            raise BodyRemoved(oid.hex())
        path = self.seg_path(loc.seg)
        if loc.off < 0 or loc.length < 0 or loc.off + loc.length > loc.block_raw or (loc.comp == COMP_RAW and loc.stored_len != loc.block_raw):
            raise IntegrityError(oid.hex(), path, f"its location is impossible (object {loc.off}+{loc.length} in a block of {loc.block_raw} bytes, {loc.stored_len} stored)")
        if loc.comp not in (COMP_RAW, COMP_ZSTD):
            raise IntegrityError(oid.hex(), path, f"unknown block compression {loc.comp}")
        if loc.stored_len > CHECK_SIZE_ABOVE and loc.block_off + loc.stored_len > os.fstat(self._fd(loc.seg)).st_size:
            raise IntegrityError(oid.hex(), path, f"block at offset {loc.block_off} ({loc.stored_len} bytes) lies past the end of the segment file")
        if loc.comp == COMP_ZSTD and loc.block_raw > prehash_above:
            try:
                problem = codec.check_stream(stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw),
                                             loc.block_raw, [(loc.off, loc.length, oid)])
            except IntegrityError as e:
                problem = e.args[2]
            if problem is not None:
                raise IntegrityError(oid.hex(), path, problem)

    def _read_loc(self, oid: bytes, loc: Loc) -> bytes:
        self._check_loc(oid, loc)
        try:
            fd = self._fd(loc.seg)
            key = (self._fd_tok[fd], loc.block_off, loc.comp, loc.stored_len, loc.block_raw)  # as _block_key, inline
            raw = self._blocks.get(key) if loc.length != loc.block_raw else None  # one alone in its block is never held
            held = raw is not None
            if raw is None:
                raw = self._load_block(loc, fd, key)
            data = raw[loc.off : loc.off + loc.length]
            ok = len(data) == loc.length and blake3.blake3(data).digest() == oid
            if not ok and held:
                # The cache holds bytes, not checked objects: the file decides.
                self._blocks.drop(key)
                data = self._load_block(loc, fd, key)[loc.off : loc.off + loc.length]
                ok = len(data) == loc.length and blake3.blake3(data).digest() == oid
        except CorruptLog:
            raise  # a missing or unreadable segment: named as it is
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), e.args[1], e.args[2]) from None
        if not ok:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id)")
        return data

    def read(self, oid: bytes) -> bytes:
        loc = self.loc(oid)
        if loc is None:
            self.refresh()
            loc = self.loc(oid)
            if loc is None and self._drop_frozen():
                loc = self.loc(oid)
            if loc is None:
                raise ObjectNotFound(oid.hex())
        try:
            return self._read_loc(oid, loc)
        except IntegrityError:
            # A checkpoint's row of the active segment points at the wrong bytes: take the rows
            # from the segment's entries instead, then try once more.
            if loc.seg == self._seg and self._drop_frozen():
                return self._read_loc(oid, self.loc(oid) or loc)
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                return self._read_loc(oid, self._relocated(oid))
            raise

    def _relocated(self, oid: bytes) -> Loc:
        """Where ``oid`` is after gc replaced the segment this process had it in: a body removed
        meanwhile is a snapshot gone (this reader knew it as live), never bytes of another object."""
        loc = self.loc(oid)
        if loc is None:
            raise ObjectNotFound(oid.hex())
        if loc.comp == COMP_GONE:
            raise SnapshotGone(f"object {oid.hex()} was removed by gc after a recorded deletion")
        return loc

    def _confirmed(self, run: str, branch: int, lsn: int, oid: bytes, parent: bytes | None | bool = False) -> bool:
        """Whether the record ``oid`` is what a checkpoint's chain row says: (run, branch, lsn), and
        the parent when given. Rows the log names (its entries, indexes it names) need no check."""
        try:
            v = codec.decode(self._read_loc(oid, self.loc(oid) or _NO_LOC), oid, False)[1]
            return (isinstance(v, dict) and v.get("run") == run and v.get("branch") == branch and v.get("lsn") == lsn
                    and (parent is False or v.get("parent") == parent))
        except (IntegrityError, ObjstoreError, ValueError, TypeError):
            return False

    def copy_blob(self, oid: bytes, out: IO[bytes]) -> int | None:
        """Stream a large blob's body to ``out``, hash-checked before the first byte is written (and
        again as it is written: the file could change in between); None if not large."""
        loc = self.loc(oid)
        if loc is None or loc.otype != codec.BLOB or loc.block_raw <= LARGE_BLOB or loc.comp != COMP_ZSTD:
            return None
        if loc.off != 0 or loc.length != loc.block_raw:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "a large blob's block holds other bytes than the blob")
        # Two passes: the body is hash-checked while it streams (nothing held, nothing written), then
        # written. A damaged or crafted blob (64 KiB that claims gigabytes) fails before one byte goes out.
        try:
            self._check_loc(oid, loc, prehash_above=0)
        except IntegrityError:
            if not (loc.seg < self._seg and self.forget_segment(loc.seg)):
                raise
            loc = self._relocated(oid)  # gc replaced the file this process had open: check it where it is now
            self._check_loc(oid, loc, prehash_above=0)
        h = blake3.blake3()
        skip = None
        n = 0
        try:
            for chunk in stream_block(self._fd(loc.seg), loc.block_off, loc.stored_len, loc.block_raw):
                h.update(chunk)
                if skip is None:  # the canonical header "blob <n>\0" is not the body
                    nul = chunk.find(b"\x00")
                    skip, chunk = nul + 1, chunk[nul + 1 :]
                out.write(chunk)
                n += len(chunk)
        except IntegrityError as e:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), e.args[2]) from None
        if h.digest() != oid:
            raise IntegrityError(oid.hex(), self.seg_path(loc.seg), "hash mismatch (content does not match id); the bytes already written are not that blob")
        return n

    def read_block_of(self, oid: bytes) -> tuple[bytes, Loc] | None:
        loc = self.loc(oid)
        if loc is None or loc.otype == codec.BLOB:
            return None
        self._check_loc(oid, loc)
        try:
            raw = self._read_block(loc)  # wrong bytes (gc replaced the file) fail the caller's hash: it reads again by read()
        except IntegrityError:
            if loc.seg < self._seg and self.forget_segment(loc.seg):
                loc = self._relocated(oid)
                self._check_loc(oid, loc)
                return self._read_block(loc), loc
            raise
        return raw, loc
