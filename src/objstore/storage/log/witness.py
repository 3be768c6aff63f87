"""The head witness ``log/witness``: the newest entry a writer made durable, and its chain checksum.

Written after the entry's fdatasync and before its commit returns, never synced itself: it may lag
the log (a crash between the two) but never lead it. So a log shorter than the witness says is
``log-truncated``, and a checksum the log does not hold at the witness's entry is
``witness-mismatch``: writers refuse such a log, readers warn. A witness left behind by a repair
killed before it wrote its own is explained by the repair's note (``repair_explains``). No witness,
or an unreadable one, is less protection, never damage.
"""

from __future__ import annotations

import os

import msgspec

from ...errors import ObjstoreError
from .. import codec
from .format import WITNESS, WITNESS_MAGIC
from .local_state import LocalBase

REPAIRS_REF = "log/repairs"  # the ref naming the newest repair's note (lifecycle.repair writes it)


def read_witness(path: str) -> tuple[int, bytes] | None:
    """(entry, checksum) a head witness file names; None if it is absent, short or unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(WITNESS.size + 1)
    except OSError:
        return None
    if len(raw) != WITNESS.size or raw[:4] != WITNESS_MAGIC:
        return None
    _, entry, checksum = WITNESS.unpack(raw)
    return entry, checksum


def witness_disagreement(w: tuple[int, bytes], end: int, checksum_at_w: bytes | None) -> tuple[str, str] | None:
    """(code, detail) where the head witness ``w`` (entry, checksum) disagrees with a log that ends
    at entry ``end`` and holds ``checksum_at_w`` at the witness's entry (None: not known); else None."""
    if w[0] > end:
        return "log-truncated", f"the log ends at entry {end}, but the head witness says entry {w[0]} was made durable"
    if checksum_at_w is not None and checksum_at_w != w[1]:
        return "witness-mismatch", f"the head witness names entry {w[0]} with checksum {w[1].hex()}, the log has {checksum_at_w.hex()}"
    return None


class Witness(LocalBase):
    """The head witness of one local log: read at open, checked, written after each sync."""

    def witness(self) -> tuple[int, bytes] | None:
        """(entry, checksum) the newest writer made durable, from ``log/witness``; None if the file
        is absent, short or unreadable (no witness, not damage)."""
        return read_witness(self._wit_path)

    def _check_witness(self) -> None:
        """Compare the log with the witness read at open: shorter is ``log-truncated``; a checksum
        the log does not have at that entry is ``witness-mismatch`` (writers refuse; readers warn)."""
        w = self._wit
        if w is None:
            return
        if self.witness_problem is None:
            pos = self.tables.pos
            self.witness_problem = witness_disagreement(w, pos.entry, pos.checksum if w[0] == pos.entry else None)
        if self.witness_problem is not None and self.repair_explains(w):
            self.witness_problem = None

    def repair_explains(self, w: tuple[int, bytes]) -> bool:
        """Whether the newest repair's note (the blob ``log/repairs`` names) records head witness
        ``w`` as the one it found: a repair killed after its entry and before it wrote the witness
        leaves that witness behind, which its own recorded cut explains (the store stays writable;
        the next commit writes a witness of the repaired log). Read only when the witness disagrees."""
        oid = self.tables.refs.get(REPAIRS_REF)
        if not isinstance(oid, bytes):
            return False
        try:
            otype, body = codec.decode(self.read(oid))
            note = msgspec.json.decode(body) if otype == codec.BLOB and isinstance(body, bytes) else None
        except (ObjstoreError, msgspec.DecodeError, ValueError):
            return False
        return isinstance(note, dict) and note.get("witness") == [w[0], w[1].hex()]

    def _write_witness(self, entry: int, checksum: bytes) -> None:
        """After the entry's fdatasync, before the commit returns; never synced itself: it may lag
        the log (a crash before it) but never lead it."""
        try:
            if self._wit_fd is None:
                self._wit_fd = os.open(self._wit_path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._wit_fd, WITNESS.pack(WITNESS_MAGIC, entry, checksum), 0)
        except OSError:
            pass  # no witness is only less protection, never a failed commit
        self._wit = (entry, checksum)
