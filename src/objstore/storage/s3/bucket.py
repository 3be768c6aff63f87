"""One bucket and key prefix of S3-compatible object storage, as the S3 engine sees it.

``Bucket`` is the small surface the engine needs: read a key (optionally only if its ETag changed),
write one plainly, create one only if absent (``If-None-Match: *``), replace one only if its ETag is
still the one read (``If-Match``), delete, list. Keys are relative to the store's prefix. A missing
key is ``None``, a failed precondition is ``None`` from the conditional writes (never an exception),
so the engine decides every race by content; transport and server failures raise ``RemoteError``.

``MemoryBucket`` is the same contract over a dict, for tests that must make a server misbehave in a
way a real one does only sometimes (a 412 after our own write landed, a false 412, a 404 for
``If-Match`` on a missing key, ETags accepted in one form only). ``requests`` counts every call by
kind on both, which is what the benchmarks and the request-count tests read.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

import blake3

from ...errors import ObjstoreError, StoreNotFound


class RemoteError(ObjstoreError):
    """The object store could not be reached or answered with an error other than a precondition."""

    exit_code = 10
    msg = "object storage: {}: {}"


class BucketNotFound(StoreNotFound):
    """The bucket an ``s3://bucket/prefix`` names does not exist at the endpoint: no store can be there (exit 3, as
    for a directory that is not a store), and the one line says how to make it."""

    msg = "object storage: bucket {} does not exist at {} (create it with 'objstore --store {} init --create-bucket')"


class Requests(Counter):
    """Requests by kind (GET, PUT, LIST, DELETE), counted safely from several threads at once."""

    def __init__(self, counts: dict | None = None) -> None:
        super().__init__(counts or {})
        self._lock = threading.Lock()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self[kind] += n


class Got(NamedTuple):
    data: bytes
    etag: str


class Listed(NamedTuple):
    key: str
    size: int
    modified: float  # seconds since the epoch


NOT_MODIFIED = Got(b"", "")  # what get_if_changed returns on a 304 (compare with ``is``)


def plain_etag(etag: str) -> str:
    """An ETag in the one form this package keeps and sends: without quotes and without ``W/``."""
    e = etag.strip()
    if e.startswith("W/"):
        e = e[2:]
    return e.strip('"')


class Bucket:
    """The interface; ``url`` is ``s3://bucket/prefix`` (what a user passes as ``--store``)."""

    url: str = ""
    requests: Requests

    def get(self, key: str) -> Got | None:
        raise NotImplementedError

    def get_if_changed(self, key: str, etag: str) -> Got | None:
        """The key's bytes unless its ETag is still ``etag`` (then ``NOT_MODIFIED``); None if absent."""
        raise NotImplementedError

    def put(self, key: str, data: bytes) -> str:
        raise NotImplementedError

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        """Create ``key``; None if it exists (412 or 409)."""
        raise NotImplementedError

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        """Replace ``key`` if its ETag is ``etag``; None on 412, and on 404 (AWS answers a missing key so)."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def list(self, prefix: str = "") -> Iterator[Listed]:
        raise NotImplementedError

    def stream(self, prefix: str = "") -> Iterator[Listed]:
        """The keys starting with ``prefix`` in key order, read a page at a time as the caller walks them: a caller
        that stops after the first keys pays one request (``latest``: the newest run's catalog key)."""
        return self.list(prefix)

    def close(self) -> None:
        return None


class SubBucket(Bucket):
    """The keys under ``prefix`` of ``bucket``, as a bucket of their own: one log of a store of logs
    (``runs/<xx>/<run>/``, ``store/``). Requests go to, and are counted by, the bucket it views; closing it
    closes nothing (the store closes the bucket once)."""

    def __init__(self, bucket: Bucket, prefix: str) -> None:
        self.base = bucket
        self.prefix = prefix
        self.url = bucket.url.rstrip("/") + "/" + prefix.rstrip("/")

    @property
    def requests(self) -> Requests:  # type: ignore[override]  # the viewed bucket's counter, even if a benchmark replaced it
        return self.base.requests

    def get(self, key: str) -> Got | None:
        return self.base.get(self.prefix + key)

    def get_if_changed(self, key: str, etag: str) -> Got | None:
        return self.base.get_if_changed(self.prefix + key, etag)

    def put(self, key: str, data: bytes) -> str:
        return self.base.put(self.prefix + key, data)

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        return self.base.put_if_absent(self.prefix + key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        return self.base.put_if_match(self.prefix + key, data, etag)

    def delete(self, key: str) -> None:
        self.base.delete(self.prefix + key)

    def list(self, prefix: str = "") -> Iterator[Listed]:
        cut = len(self.prefix)
        for x in self.base.list(self.prefix + prefix):
            yield Listed(x.key[cut:], x.size, x.modified)

    def stream(self, prefix: str = "") -> Iterator[Listed]:
        cut = len(self.prefix)
        for x in self.base.stream(self.prefix + prefix):
            yield Listed(x.key[cut:], x.size, x.modified)


class MemoryBucket(Bucket):
    """The contract over a dict (thread-safe). ``etag_form``: ``"quoted"`` or ``"plain"`` makes
    ``If-Match`` accept only that form, as some servers do; ``None`` accepts both, like SeaweedFS."""

    def __init__(self, url: str = "s3://memory/store", etag_form: str | None = None, missing_if_match: int = 412) -> None:
        self.url = url
        self.requests = Requests()
        self._data: dict[str, tuple[bytes, str, float]] = {}
        self._mu = threading.Lock()
        self.etag_form = etag_form
        self.missing_if_match = missing_if_match  # 412 (SeaweedFS) or 404 (AWS): both end as None
        self.before_put_if_match: list = []  # hooks: f(bucket, key, data, etag) -> "412" | None, run once each

    @staticmethod
    def _etag(data: bytes) -> str:
        return '"' + blake3.blake3(data).hexdigest()[:32] + '"'

    def _form_ok(self, etag: str) -> bool:
        if self.etag_form == "quoted":
            return etag.startswith('"')
        if self.etag_form == "plain":
            return not etag.startswith('"')
        return True

    def get(self, key: str) -> Got | None:
        self.requests.add("GET")
        with self._mu:
            got = self._data.get(key)
        return None if got is None else Got(got[0], plain_etag(got[1]))

    def get_if_changed(self, key: str, etag: str) -> Got | None:
        self.requests.add("GET")
        with self._mu:
            got = self._data.get(key)
        if got is None:
            return None
        if plain_etag(got[1]) == plain_etag(etag):
            return NOT_MODIFIED
        return Got(got[0], plain_etag(got[1]))

    def put(self, key: str, data: bytes) -> str:
        self.requests.add("PUT")
        tag = self._etag(bytes(data))
        with self._mu:
            self._data[key] = (bytes(data), tag, time.time())
        return plain_etag(tag)

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        self.requests.add("PUT")
        tag = self._etag(bytes(data))
        with self._mu:
            if key in self._data:
                return None
            self._data[key] = (bytes(data), tag, time.time())
        return plain_etag(tag)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        self.requests.add("PUT")
        hooks, self.before_put_if_match = self.before_put_if_match, []
        for hook in hooks:
            if hook(self, key, data, etag) == "412":
                return None
        sent = '"' + plain_etag(etag) + '"' if self.etag_form != "plain" else plain_etag(etag)
        if not self._form_ok(sent):
            raise RemoteError(f"PUT {key}", "400 bad If-Match form")
        tag = self._etag(bytes(data))
        with self._mu:
            cur = self._data.get(key)
            if cur is None or plain_etag(cur[1]) != plain_etag(etag):
                return None
            self._data[key] = (bytes(data), tag, time.time())
        return plain_etag(tag)

    def delete(self, key: str) -> None:
        self.requests.add("DELETE")
        with self._mu:
            self._data.pop(key, None)

    def list(self, prefix: str = "") -> Iterator[Listed]:
        self.requests.add("LIST")
        with self._mu:
            items = sorted((k, len(v[0]), v[2]) for k, v in self._data.items() if k.startswith(prefix))
        for k, size, mod in items:
            yield Listed(k, size, mod)

    # for tests: damage or age what is stored, as someone with write access to the bucket could
    def raw(self) -> dict[str, bytes]:
        with self._mu:
            return {k: v[0] for k, v in self._data.items()}

    def poke(self, key: str, data: bytes, modified: float | None = None) -> None:
        with self._mu:
            self._data[key] = (bytes(data), self._etag(bytes(data)), time.time() if modified is None else modified)
