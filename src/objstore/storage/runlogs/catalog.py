"""The catalog of a store of format 6: one create-once entry per run, and the keys runs are found by.

Layout under ``<store>/catalog/`` (docs/FORMAT.md "Catalog"):

* ``ids/<xx>/<run>`` — the run's entry (``CatalogEntry``, msgpack), where ``xx`` is ``shard(run)``. Written
  whole or not at all, and never replaced (link(2) onto the name: a second writer gets EEXIST), before the run's
  log holds its first entry. It names the run, its creation time, subject, labels and the run it copies.
* ``order/<k0>/<k1>/<k2>/<key>-<run>`` — the same file linked under its order key ``key`` (the creation time in
  µs, 14 hex digits, split 4/3/3 so a directory holds at most 4 096 names): the catalog order. ``latest`` walks
  the newest names down the trie (three short listings), a listing walks it all.
* ``labels/<key hex>/<key>-<run>``, ``subjects/<hash>/<key>-<run>`` — the same file linked under each of its run
  labels' index keys (``storage.labels.key``) and under its subject: a look-up lists one directory.
* ``deleted/<xx>/<run>``, ``copies/<xx>/<source>/<copy>`` and ``grants/<key>/<run>`` — create-once markers: a
  run deletion, a copy of ``source`` (so gc of a source finds its copies without reading every log), a grant
  chain about a key in a run's log (so the Host finds where else a key was granted).

Invariants: an entry is never rewritten (a second claim of a run id finds the first and keeps it); every other
name is a link to an entry or an empty marker, so the catalog holds no fact the entry does not. The catalog is
a finding aid: every answer it gives is confirmed against the run's log by the caller (a name without a log is a
run whose start was killed: listings skip it and verify notes it).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import Any

import blake3
import msgspec

from ...errors import CorruptLog, StorageOSError
from .. import labels as L
from ..fileutil import FsyncPolicy, atomic_file

ENTRY_FMT = "objstore-catalog-1"


class CatalogEntry(msgspec.Struct, array_like=True, frozen=True):
    """One run's catalog entry: format tag, run id, creation time (µs since the epoch), subject, canonical
    run labels ([[name, value], …]) or None, and the run it is a copy of (None: not a copy)."""

    fmt: str
    run: str
    time_us: int
    subject: str
    labels: list | None = None
    copy_of: str | None = None


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(CatalogEntry)


def shard(run: str) -> str:
    """Two hex digits spreading runs over 256 directories (BLAKE3 of the id: ids sharing a prefix spread too)."""
    return blake3.blake3(run.encode()).hexdigest()[:2]


def order_key(time_us: int) -> str:
    return f"{max(0, time_us):014x}"[-14:]


def encode_entry(e: CatalogEntry) -> bytes:
    return _enc.encode(e)


def decode_entry(data: bytes, where: str) -> CatalogEntry:
    try:
        e = _dec.decode(data)
    except msgspec.DecodeError as err:
        raise CorruptLog(where, f"not a catalog entry ({err})") from None
    if e.fmt != ENTRY_FMT:
        raise CorruptLog(where, f"catalog entry format {e.fmt!r}, this objstore reads {ENTRY_FMT!r}")
    return e


def subject_key(subject: str) -> str:
    return blake3.blake3(b"S\0" + subject.encode()).hexdigest()[:32]


class Catalog:
    """The catalog directory of one store."""

    def __init__(self, root: str, policy: FsyncPolicy, tmpdir: str) -> None:
        self.root = root
        self.policy = policy
        self.tmp = tmpdir

    # -- paths -----------------------------------------------------------------------------------
    def id_path(self, run: str) -> str:
        return os.path.join(self.root, "ids", shard(run), run)

    def _order_path(self, key: str, run: str) -> str:
        return os.path.join(self.root, "order", key[:4], key[4:7], key[7:10], f"{key}-{run}")

    def deleted_path(self, run: str) -> str:
        return os.path.join(self.root, "deleted", shard(run), run)

    def copies_dir(self, source: str) -> str:
        return os.path.join(self.root, "copies", shard(source), source)

    # -- writing ----------------------------------------------------------------------------------
    def add(self, entry: CatalogEntry) -> CatalogEntry:
        """Claim ``entry.run``: write its entry once, then its order, label, subject and copy names. A run
        claimed already keeps its first entry (returned); its missing names are added (a claim killed midway
        is finished by the next one)."""
        path = self.id_path(entry.run)
        try:
            self._create(path, encode_entry(entry))
        except FileExistsError:
            entry = self.entry(entry.run) or entry
        key = order_key(entry.time_us)
        names = [self._order_path(key, entry.run)]
        for k, v in entry.labels or ():
            names.append(os.path.join(self.root, "labels", L.key(L.STORE_SCOPE, k, v).hex(), f"{key}-{entry.run}"))
        names.append(os.path.join(self.root, "subjects", subject_key(entry.subject), f"{key}-{entry.run}"))
        for name in names:
            self._link(path, name)
        if entry.copy_of is not None:
            self._marker(os.path.join(self.copies_dir(entry.copy_of), entry.run))
        return entry

    def mark_grant(self, run: str, key: str) -> None:
        """The create-once marker that run ``run``'s log holds a grant chain about public key ``key`` (so "where else
        was this key granted" lists one directory, not every run's refs)."""
        self._marker(os.path.join(self.root, "grants", key[:64], run))

    def granted(self, key: str) -> list[str]:
        return sorted(_listdir(os.path.join(self.root, "grants", key[:64])))

    def mark_deleted(self, run: str) -> None:
        """The create-once marker of a run deletion (the deletion itself is the run log's ``deleted`` ref)."""
        self._marker(self.deleted_path(run))

    def _create(self, path: str, data: bytes) -> None:
        d = os.path.dirname(path)
        try:
            os.makedirs(d, exist_ok=True)
            with atomic_file(path, self.tmp, self.policy, replace=False) as f:
                f.write(data)
        except FileExistsError:
            raise
        except OSError as e:
            raise StorageOSError(f"write the catalog entry {path}", e) from None

    def _link(self, src: str, name: str) -> None:
        d = os.path.dirname(name)
        try:
            os.makedirs(d, exist_ok=True)
            os.link(src, name)
        except FileExistsError:
            return
        except OSError as e:
            raise StorageOSError(f"link the catalog name {name}", e) from None
        self.policy.dir(d)

    def _marker(self, path: str) -> None:
        d = os.path.dirname(path)
        try:
            os.makedirs(d, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        except OSError as e:
            raise StorageOSError(f"write the catalog marker {path}", e) from None
        os.close(fd)
        self.policy.dir(d)

    # -- reading ----------------------------------------------------------------------------------
    def entry(self, run: str) -> CatalogEntry | None:
        path = self.id_path(run)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageOSError(f"read the catalog entry {path}", e) from None
        return decode_entry(data, path)

    def is_deleted(self, run: str) -> bool:
        return os.path.exists(self.deleted_path(run))

    def copies(self, source: str) -> list[str]:
        try:
            return sorted(os.listdir(self.copies_dir(source)))
        except FileNotFoundError:
            return []

    def newest_first(self) -> Iterator[tuple[str, str]]:
        """(order key, run) of every catalogued run, newest first, reading one trie directory at a time."""
        yield from self._walk(os.path.join(self.root, "order"), 3, reverse=True)

    def oldest_first(self) -> Iterator[tuple[str, str]]:
        yield from self._walk(os.path.join(self.root, "order"), 3, reverse=False)

    def _walk(self, d: str, depth: int, reverse: bool) -> Iterator[tuple[str, str]]:
        names = _listdir(d)
        names.sort(reverse=reverse)
        if depth == 0:
            for n in names:
                key, sep, run = n.partition("-")
                if sep and len(key) == 14:
                    yield key, run
            return
        for n in names:
            yield from self._walk(os.path.join(d, n), depth - 1, reverse)

    def by_label(self, name: str, value: str) -> list[tuple[str, str]]:
        """(order key, run) of the runs catalogued with this run label, newest first."""
        return _keyed(os.path.join(self.root, "labels", L.key(L.STORE_SCOPE, name, value).hex()))

    def by_label_key(self, key: bytes) -> list[tuple[str, str]]:
        return _keyed(os.path.join(self.root, "labels", key.hex()))

    def by_subject(self, subject: str) -> list[tuple[str, str]]:
        return _keyed(os.path.join(self.root, "subjects", subject_key(subject)))

    def all_ids(self) -> Iterator[str]:
        """Every run with an entry (claimed), in no particular order: what verify and backup walk."""
        base = os.path.join(self.root, "ids")
        for s in sorted(_listdir(base)):
            yield from sorted(_listdir(os.path.join(base, s)))


def _keyed(d: str) -> list[tuple[str, str]]:
    out = []
    for n in _listdir(d):
        key, sep, run = n.partition("-")
        if sep and len(key) == 14:
            out.append((key, run))
    out.sort(reverse=True)
    return out


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return []
    except OSError as e:
        if e.errno == errno.ENOENT:
            return []
        raise StorageOSError(f"list {d}", e) from None


def entry_of(run: str, time_us: int, subject: str, labels: Any, copy_of: str | None) -> CatalogEntry:
    rows = L.canonical(labels) if labels is not None else None
    return CatalogEntry(ENTRY_FMT, run, int(time_us), subject, rows, copy_of)


__all__ = ["Catalog", "CatalogEntry", "entry_of", "shard"]
