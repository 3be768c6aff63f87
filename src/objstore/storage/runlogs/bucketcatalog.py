"""The catalog of a store of logs on object storage (format 7): the local catalog's names as create-once keys.

Keys under ``<store prefix>/catalog/`` (docs/FORMAT.md "Format 7"), each written with ``If-None-Match: *`` and never
replaced, so two writers claiming one run agree on the first claim:

* ``ids/<run>`` — the run's entry (``CatalogEntry``, the bytes of the local ``ids/<xx>/<run>``). Not sharded: a
  bucket has no directories to keep small, and a run id prefix (``objstore log 3f2a``) is then one LIST;
* ``order/<key>-<run>`` — empty, named by the order key (creation time in µs, 14 hex digits): a listing is one LIST
  (oldest first, as the server sorts keys);
* ``newest/<inverse key>-<run>`` — empty, named by ``ffff… − key``: the newest run is the first key of one LIST
  (``latest``), which a server answers without reading the rest;
* ``labels/<key hex>/<key>-<run>``, ``subjects/<hash>/<key>-<run>`` — empty: a look-up by run label or subject is
  one LIST;
* ``deleted/<run>``, ``copies/<source>/<copy>``, ``grants/<key>/<run>`` — empty markers, as on disk.

Invariants (those of ``catalog``): an entry is never rewritten; every other key is a marker whose name holds all it
says; the catalog is a finding aid whose every answer the caller confirms against the run's log. The entry is
written before the order, label and subject keys, and a claim killed between them is finished by the next claim
of the run (``add`` writes the missing ones; a create-once PUT of a key that exists costs one refused request).
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import labels as L
from ..s3.bucket import Bucket
from .catalog import CatalogEntry, decode_entry, encode_entry, order_key, subject_key

CATALOG = "catalog/"
SUBJECTS = "subjects"  # (a directory of the catalog, as on disk; not the subject refs of runrefs)
_TOP = (1 << 56) - 1  # order keys are 14 hex digits


def newest_key(key: str) -> str:
    return f"{_TOP - int(key, 16):014x}"


class BucketCatalog:
    """The catalog keys of one store on object storage (``bucket``: the store's prefix)."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self.url = bucket.url.rstrip("/") + "/" + CATALOG.rstrip("/")

    # -- keys ---------------------------------------------------------------------------------
    @staticmethod
    def id_key(run: str) -> str:
        return f"{CATALOG}ids/{run}"

    @staticmethod
    def order_name(key: str, run: str) -> str:
        return f"{CATALOG}order/{key}-{run}"

    def id_path(self, run: str) -> str:
        """Where the run's entry is, as a line names it."""
        return self.where(self.id_key(run))

    def where(self, key: str) -> str:
        return f"{self.bucket.url.rstrip('/')}/{key}"

    # -- writing ------------------------------------------------------------------------------
    def add(self, entry: CatalogEntry) -> CatalogEntry:
        """Claim ``entry.run`` (see ``catalog.Catalog.add``): its entry once, then its other names."""
        if self.bucket.put_if_absent(self.id_key(entry.run), encode_entry(entry)) is None:
            entry = self.entry(entry.run) or entry
        key = order_key(entry.time_us)
        names = [self.order_name(key, entry.run), f"{CATALOG}newest/{newest_key(key)}-{entry.run}"]
        for k, v in entry.labels or ():
            names.append(f"{CATALOG}labels/{L.key(L.STORE_SCOPE, k, v).hex()}/{key}-{entry.run}")
        names.append(f"{CATALOG}{SUBJECTS}/{subject_key(entry.subject)}/{key}-{entry.run}")
        if entry.copy_of is not None:
            names.append(f"{CATALOG}copies/{entry.copy_of}/{entry.run}")
        for name in names:
            self.bucket.put_if_absent(name, b"")
        return entry

    def mark_grant(self, run: str, key: str) -> None:
        self.bucket.put_if_absent(f"{CATALOG}grants/{key[:64]}/{run}", b"")

    def granted(self, key: str) -> list[str]:
        return self._names(f"{CATALOG}grants/{key[:64]}/")

    def mark_deleted(self, run: str) -> None:
        self.bucket.put_if_absent(f"{CATALOG}deleted/{run}", b"")

    # -- reading ------------------------------------------------------------------------------
    def entry(self, run: str) -> CatalogEntry | None:
        got = self.bucket.get(self.id_key(run))
        return None if got is None else decode_entry(got.data, self.where(self.id_key(run)))

    def is_deleted(self, run: str) -> bool:
        return self.bucket.get(f"{CATALOG}deleted/{run}") is not None

    def copies(self, source: str) -> list[str]:
        return self._names(f"{CATALOG}copies/{source}/")

    def newest_first(self) -> Iterator[tuple[str, str]]:
        """(order key, run), newest first, a LIST page at a time: ``latest`` reads one."""
        cut = len(f"{CATALOG}newest/")
        for x in self.bucket.stream(f"{CATALOG}newest/"):
            inv, sep, run = x.key[cut:].partition("-")
            if sep and len(inv) == 14:
                yield newest_key(inv), run

    def oldest_first(self) -> Iterator[tuple[str, str]]:
        yield from self._keyed(f"{CATALOG}order/", reverse=False)

    def by_label(self, name: str, value: str) -> list[tuple[str, str]]:
        return self.by_label_key(L.key(L.STORE_SCOPE, name, value))

    def by_label_key(self, key: bytes) -> list[tuple[str, str]]:
        return list(self._keyed(f"{CATALOG}labels/{key.hex()}/", reverse=True))

    def by_subject(self, subject: str) -> list[tuple[str, str]]:
        return list(self._keyed(f"{CATALOG}{SUBJECTS}/{subject_key(subject)}/", reverse=True))

    def all_ids(self) -> Iterator[str]:
        yield from self._names(f"{CATALOG}ids/")

    def ids_with_prefix(self, text: str) -> list[str]:
        """Runs whose id starts with ``text`` (one LIST)."""
        return self._names(f"{CATALOG}ids/{text}", cut=len(f"{CATALOG}ids/"))

    def order_exists(self, entry: CatalogEntry) -> bool:
        return self.bucket.get(self.order_name(order_key(entry.time_us), entry.run)) is not None

    def _names(self, prefix: str, cut: int | None = None) -> list[str]:
        n = len(prefix) if cut is None else cut
        return sorted(x.key[n:] for x in self.bucket.list(prefix) if "/" not in x.key[n:])

    def _keyed(self, prefix: str, reverse: bool) -> Iterator[tuple[str, str]]:
        out = []
        for x in self.bucket.list(prefix):
            key, sep, run = x.key[len(prefix):].partition("-")
            if sep and len(key) == 14 and "/" not in run:
                out.append((key, run))
        out.sort(reverse=reverse)
        yield from out


__all__ = ["BucketCatalog"]
