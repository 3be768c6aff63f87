"""The checkpoint ``log/checkpoint``: the tables at a position, so an open replays only the log after it.

A checkpoint is derived data (its BLAKE3 is recomputable by anyone), so it is adopted only where the
log commits to it: the entry ending where it says has the checksum it names, and its tables hash to
the root that entry names (``adoption``: the one copy of that rule, used by the engine, by backup for
DEST's checkpoint and by verify). Rows of the active segment it carries are not covered by the root:
they are checked against the records they point at when used, and read from the file where a look-up
asks (``adoption_lazy``: a reader adopts a checkpoint for the cost of its fields and label rows, not of
the active segment's rows). Deletions it took in are checked
against the authority rule as of their own entries (``_confirm_adopted``). Written without fsync
(a lost checkpoint means a longer replay), after the entry it names is durable, and never at the
end of a packed segment (no offset there to name).
"""

from __future__ import annotations

import os
import struct
import weakref
from collections.abc import Callable

import blake3
import msgspec

from ...errors import CorruptLog
from .. import authority
from ..fileutil import write_derived
from . import segindex
from .entry import LogEntry
from .format import LABEL_ROW, _dec
from .local_state import LocalBase
from .root import root_digest
from .segfile import _read_segment_header, entry_ending_at
from .tables import ZSUM_LEN, ZSUM_PAIR, LogState, _map_header, bin_field, map_start


def adoption(data: bytes, entry_at: Callable[[int, int, int], LogEntry | None]) -> tuple[LogState, int, int, LogEntry | None] | str:
    """Whether a reader adopts the checkpoint bytes ``data``: (its tables, segment, offset, and the entry
    it follows, None at entry 0) if the log commits to it, else why not. ``entry_at(segment, offset,
    entry number)`` is the entry ending at that offset (None: no such entry); what it raises goes
    to the caller."""
    if len(data) < 32 or blake3.blake3(data[:-32]).digest() != data[-32:]:
        return "its checksum does not match its bytes"
    try:
        t, seg, off = LogState.load(data[:-32])
    except Exception as err:  # noqa: BLE001 - derived bytes of any shape: not adopted, nothing more
        return f"unreadable ({err})"
    return _committed(t, seg, off, entry_at)


def _committed(t: LogState, seg: int, off: int, entry_at: Callable[[int, int, int], LogEntry | None]) -> tuple[LogState, int, int, LogEntry | None] | str:
    """The one rule: the tables are adopted only if the entry ending at (seg, off) is the one they
    name and its root is theirs."""
    if t.pos.entry <= 0:
        return t, seg, off, None
    e = entry_at(seg, off, t.pos.entry)
    if e is None or e.n != t.pos.entry or e.checksum != t.pos.checksum:
        return f"entry {t.pos.entry} is not at segment {seg} offset {off}"
    if root_digest(t.root_sum) != e.root:
        return f"its tables do not hash to the root of entry {t.pos.entry}"
    return t, seg, off, e


def adoption_lazy(fd: int, entry_at: Callable[[int, int, int], LogEntry | None]) -> tuple[LogState, int, int, LogEntry | None] | str | None:
    """``adoption`` of the checkpoint file open at ``fd`` without reading its ``active`` rows. The map
    opens with ``active`` and ``labels`` and ends with ``zsum`` (``LogState.dump``): every field but
    ``active`` is read (the label rows straight into the buffer the tables keep; the root covers
    them) and the others are checked by ``zsum``, the BLAKE3 of the map's bytes after ``labels`` up
    to ``zsum``; the rule is the same
    (``_committed``), and the tables' ``frozen`` rows are the file's bytes, read where a lookup asks
    (``segindex.FileBytes``: they were never covered by the root, and each is checked against the
    record it points at when used). The descriptor then belongs to those rows. None: the file is
    not of that shape (written before it) or ``zsum`` does not match: the caller reads the file
    whole (``adoption``), and ``fd`` is not taken."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, 32, 0)
    got = map_start(head)
    if got is None or got[0] < 3:
        return None
    n, p = got
    act = bin_field(head, p, b"active")
    if act is None:
        return None
    at = p + act[0]
    end = at + act[1]
    lhead = os.pread(fd, 16, end)
    lab = bin_field(lhead, 0, b"labels")
    if lab is None:
        return None
    lstart, llen = end + lab[0], lab[1]
    tail = size - 32 - (lstart + llen)
    if llen % LABEL_ROW.size or tail < ZSUM_LEN:
        return None
    labels = bytearray(llen)
    if llen and os.preadv(fd, [labels], lstart) != llen:
        return None
    small = os.pread(fd, tail, lstart + llen)
    if len(small) != tail or small[-ZSUM_LEN:-32] != ZSUM_PAIR:
        return None
    if blake3.blake3(memoryview(small)[:-ZSUM_LEN]).digest() != small[-32:]:
        return None
    rows = segindex.FileBytes(fd, act[1], at)
    try:
        try:
            m = _dec.decode(_map_header(n - 2) + small)
            m["labels"] = labels
            t, seg, off = LogState.from_map(m, rows)
        except Exception as err:  # noqa: BLE001 - derived bytes of any shape: not adopted, nothing more
            got_: tuple[LogState, int, int, LogEntry | None] | str = f"unreadable ({err})"
        else:
            got_ = _committed(t, seg, off, entry_at)
    except BaseException:
        rows.fd = -1  # the caller keeps (and closes) its descriptor
        raise
    if isinstance(got_, str):
        rows.fd = -1
    return got_


class Checkpoints(LocalBase):
    """Loading (adopting) and writing the checkpoint of one local log."""

    def _load_checkpoint(self) -> None:
        """Start from the checkpoint if the log commits to it: the entry it claims to follow is
        where it says, with its checksum, and the checkpoint's tables hash to the root that entry
        names. Otherwise replay from the first segment. Either way ``refresh`` takes in the rest.

        Whoever wrote the checkpoint (its BLAKE3 is recomputable), an edited ref, tip, intent or
        start changes the root; its rows of the active segment are checked against the records
        they point at when used (``_confirmed``, ``_drop_frozen``)."""
        path = os.path.join(self.dir, "checkpoint")
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        kept = False
        try:
            got = adoption_lazy(fd, self._entry_ending_at)
            if got is None:  # written without zsum (or damaged): read whole, as before
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read()
                self._ckpt_whole = len(data)
                got = adoption(data, self._entry_ending_at)
            else:
                kept = not isinstance(got, str)  # its frozen rows read the file through fd
            if isinstance(got, str):
                raise ValueError(got)
            t, seg, off, e = got
            sealed = e is not None and e.seal
        except (OSError, ValueError, KeyError, TypeError, IndexError, msgspec.DecodeError, CorruptLog, segindex.IndexError_, struct.error):
            return  # derived data that does not match (or was crafted): replay the log instead
        finally:
            if not kept:
                os.close(fd)
        self.tables, self._seg, self._off, self._sealed = t, seg, off, sealed
        self._ckpt_at = (t.pos.entry, off)
        # Through a weak reference: the tables naming the engine that holds them would be a cycle, and an
        # engine let go (a run log evicted from its cache) would keep its descriptors until a collection.
        engine = weakref.ref(self)

        def confirm(name: str, value: bytes) -> None:
            e = engine()
            if e is not None:
                e._confirm_adopted(name, value)

        t.adopted, t.confirm = t.pos.entry, confirm

    def _confirm_adopted(self, name: str, value: bytes) -> None:
        """The authority rule over the deletions behind ``name`` (at ``value``) that the adopted
        checkpoint took in, as of their own entries (``LogState.obey``): each one that keeps it is
        remembered; one that breaks it is damage at its entry, as a replaying reader finds it."""
        with self._mu:
            t = self.tables
            factory = self.entry_view
            view = authority.EntryView(self, 0, [], {}, lambda oid: None) if factory is None else \
                factory(self, 0, [], {}, lambda oid: None, [])
            got = authority.ref_problem(view, name, value, t.adopted, t.checked)
            if got is None:
                return
            did, n, bad = got
            loc = self.loc(did)
            seg, off = (loc.seg, 0) if loc is not None else (1, 0)
            if os.path.exists(self.seg_path(seg)):
                hdr = _read_segment_header(self._fd(seg), self.seg_path(seg))
                off = next((e.offset for e in self._segment_entries(seg, hdr[3], hdr[2]) if e.n == n), 0)
            self.torn, self.damaged, self.breach = None, (seg, off, f"entry {n}: {bad}"), True
            raise CorruptLog(self.seg_path(seg), f"damaged entry at offset {off} (entry {n}: {bad}); the log is readable "
                             "only up to it (run 'objstore verify')")

    def _entry_ending_at(self, seg: int, off: int, n: int) -> LogEntry:
        """The entry whose trailer ends at ``off`` in segment ``seg``, its checksum recomputed from its
        meta and the entry before it (``segfile.entry_ending_at``); ValueError if it is not entry ``n``."""
        got = entry_ending_at(self._fd(seg), off, seg)
        if got is None:
            raise ValueError("no entry there")
        if got.n != n:
            raise ValueError("not the entry the checkpoint names")
        return got

    def _checkpoint(self) -> None:
        """Write the tables at the current position (no fsync: a lost checkpoint means a longer replay)."""
        path = os.path.join(self.dir, "checkpoint")
        if self._ckpt_busy or not self._use_checkpoint:
            return  # another thread of this process is writing one
        if self._packed(self._seg) is not None:
            return  # the log ends in a packed segment (a copy caught between two files): no offset there to name
        self._ckpt_busy = True
        try:
            with self._mu:
                first = _read_segment_header(self._fd(self._seg), self.seg_path(self._seg))[2]
                data = self.tables.dump(self._seg, self._off, first)
                at = (self.tables.pos.entry, self._off)
            write_derived(path, data + blake3.blake3(data).digest())
        except OSError:
            return
        finally:
            self._ckpt_busy = False
        self._ckpt_at = at
