"""Which sealed segments' index files were already hashed here: the hint file ``log/idx-verified``.

The log names each sealed segment's index by its BLAKE3 (the next segment's first entry), and a
reader uses an index file only once its bytes are known to hash to that digest (invariant 15).
Hashing every index a fresh reader touches costs the whole log's indexes: a label look-up, or the
location of an old object, binary-searches each sealed segment's index, so the first ``get_tuple``
of a long thread hashed hundreds of MB. This file remembers, per sealed segment, the identity of
an index file whose bytes a process hashed to the digest the log names —
``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` — with that digest. A reader that finds
the file's identity unchanged and the row's digest equal to the one the log names now maps the
file without hashing it; any other case hashes it as before (and records the row).

Kept here:

* **A hint, never a source.** A row is used only when its digest is the one the log names for the
  segment and the file's identity is the one it holds; a missing, torn or foreign file, a row for
  another file, another digest: the index is hashed. Verify never reads this file: it compares
  every index file with one built from its segment's entries.
* **Any change through the file system is seen.** Writing a file's bytes sets its ctime (which no
  call sets back), replacing it gives a new inode. The kernel's timestamps are coarse (a clock
  tick), so a row is written only for a file whose ctime and mtime were over ``RACY_NS`` older than
  the moment its hashing started: an edit after that moment has a later ctime than the row holds
  (as git treats a "racily clean" index entry).
* **Derived and best effort**: replaced atomically without fsync; two processes adding rows at
  once may lose one (it is hashed again next time); a read-only store writes none.

Beside each row, the index's chain fan-out (``SegmentIndex.chain_fan``, version 2 of the file): a
hint a label search uses to read the rows of a key's first byte at once; checked against the rows
around the range it names before it is used (``SegmentIndex._hinted``), so it decides nothing.
Version 1 files (no fan-outs) are still read; a reader that uses such a row adds one (``note_fan``).

Not covered, and said in docs/FORMAT.md: bytes that change without the file system's knowing (a
failing disk), or someone who edits an index and then rewrites this file to match: readers then
answer from that index until it changes again; ``objstore verify`` names the index either way.
"""

from __future__ import annotations

import os
import struct
from typing import cast

import blake3

from ..fileutil import write_derived

NAME = "idx-verified"
MAGIC_V1 = b"OSIV\x01\x00\x00\x00"
ROW_V1 = struct.Struct("<QQQQqq32s")  # segment, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, digest
MAGIC = b"OSIV\x02\x00\x00\x00"
ROW = struct.Struct("<QQQQqq32s1024s")  # ... and the index's chain fan-out (segindex.SegmentIndex.chain_fan; NO_FAN: none)
NO_FAN = b"\xff" * 1024  # no fan-out recorded (a real one ends with the index's chain row count, never 2**32 - 1)
RACY_NS = 200_000_000  # far above a clock tick (1-10 ms) and any skew between the coarse and the fine clock

Identity = tuple[int, int, int, int, int]


def identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


Row = tuple[Identity, bytes, bytes | None]  # identity, digest, chain fan-out (None: not recorded)


def _parse(data: bytes) -> dict[int, Row]:
    """The rows of the file's bytes (version 1: without chain fan-outs); none if they are torn,
    foreign or of another version. A row's fan-out is a view of ``data`` (nothing copied)."""
    view = memoryview(data)
    body = view[:-32]
    row, fans = (ROW, True) if data.startswith(MAGIC) else (ROW_V1, False) if data.startswith(MAGIC_V1) else (None, False)
    if (row is None or len(data) < len(MAGIC) + 32 or (len(body) - len(MAGIC)) % row.size
            or blake3.blake3(body).digest() != data[-32:]):
        return {}
    out: dict[int, Row] = {}
    unpack, size = ROW_V1.unpack_from, row.size
    for at in range(len(MAGIC), len(body), size):
        seg, dev, ino, fsize, mt, ct, digest = unpack(data, at)
        fan = body[at + ROW_V1.size : at + size] if fans else None
        # a fan-out is a view of the file's bytes: read like bytes (slices, int.from_bytes), never copied
        out[seg] = ((dev, ino, fsize, mt, ct), digest, None if fan is None or fan[-4:] == NO_FAN[-4:] else cast(bytes, fan))
    return out


def _dump(rows: dict[int, Row]) -> bytes:
    body = MAGIC + b"".join(ROW.pack(seg, *ident, digest, bytes(fan) if fan is not None else NO_FAN) for seg, (ident, digest, fan) in sorted(rows.items()))
    return body + blake3.blake3(body).digest()


class VerifiedIndexes:
    """The rows of ``<log dir>/idx-verified``, read once per process on first use."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, NAME)
        self._rows: dict[int, Row] | None = None

    def _read(self) -> dict[int, Row]:
        try:
            with open(self.path, "rb") as f:
                return _parse(f.read())
        except OSError:
            return {}

    def vouches(self, seg: int, st: os.stat_result, digest: bytes) -> bool:
        """Whether the index file of segment ``seg``, as ``st`` (its fstat) shows it, was hashed to
        ``digest`` (the one the log names now) and has not changed since."""
        if self._rows is None:
            self._rows = self._read()
        row = self._rows.get(seg)
        return row is not None and row[1] == digest and row[0] == identity(st)

    def row(self, seg: int) -> Row | None:
        """Segment ``seg``'s row as read (the caller compares its identity and digest, as ``vouches`` does)."""
        if self._rows is None:
            self._rows = self._read()
        return self._rows.get(seg)

    def chain_fan(self, seg: int) -> bytes | None:
        """The chain fan-out recorded with segment ``seg``'s row (a hint: ``SegmentIndex._hinted``
        checks it against the index's rows), or None."""
        row = (self._rows or {}).get(seg)
        return None if row is None else row[2]

    def note(self, seg: int, st: os.stat_result, digest: bytes, started_ns: int, fan: bytes | None = None) -> None:
        """Record that segment ``seg``'s index file, whose fstat ``st`` was taken after ``started_ns``
        (``time.time_ns()`` before the file was opened), hashed to ``digest``, the log's. Nothing is
        recorded for a file changed within ``RACY_NS`` of that moment (see the module's docstring).
        ``fan``: the index's chain fan-out, kept with the row as a hint."""
        if max(st.st_ctime_ns, st.st_mtime_ns) + RACY_NS >= started_ns:
            return
        rows = self._read()  # another process's rows since ours were read: kept
        rows[seg] = (identity(st), digest, fan)
        self._rows = rows
        try:
            write_derived(self.path, _dump(rows))
        except OSError:
            pass  # a read-only store: the next reader hashes the index again

    def note_fan(self, seg: int, st: os.stat_result, digest: bytes, fan: bytes) -> None:
        """Keep ``fan`` (segment ``seg``'s chain fan-out) with its row, if the row still vouches for that
        file (``st``) and digest: a row recorded before fan-outs were (version 1), or by a process that
        did not compute one."""
        rows = self._read()
        row = rows.get(seg)
        if row is None or row[1] != digest or row[0] != identity(st) or row[2] == fan:
            return
        rows[seg] = (row[0], digest, fan)
        self._rows = rows
        try:
            write_derived(self.path, _dump(rows))
        except OSError:
            pass
