"""``objstore upgrade s3://…``: a store on object storage of one HEAD (formats 3 to 5) to format 7, a HEAD per run.

The new layout's keys (``store/``, ``runs/<xx>/<run>/``, ``catalog/``: storage.runlogs.bucketlogs) lie beside the
old ones (``HEAD``, ``chunk/``, ``entry/``) under the same prefix, and nothing reads them while the marker names the
old format. So the new store is built in place, the old one staying readable throughout:

1. keys under the new prefixes that a killed earlier upgrade left are deleted;
2. the old log is replayed into the new logs (``legacy.runlogs.build_into``: each old entry becomes one entry in each
   log it touches, with its time, so the catalog keeps the runs' order), up to the HEAD read at the start;
3. a fresh open of the new logs (an empty cache) is proved against the old store (``check_against``: every ref, run
   and object);
4. the old HEAD is read again: if an older objstore (which does not know format 7) committed meanwhile, the build
   starts over from step 1 (this objstore writes nothing to a store of one HEAD);
5. the marker is swapped to version 7 by compare-and-swap on the ETag read at the start (``If-Match``): the one
   request that moves the store. An objstore that reads up to format 6 refuses the bucket from then on
   (``NewerFormat``) before writing.

Killed at any request before step 5, the bucket is the old store, readable and writable by an older objstore as
before; running ``upgrade`` again starts over. After step 5 the old keys are left where they were (the format-3 to
5 copy, as ``PATH.format<N>`` is on disk); ``objstore gc --prune-unreferenced-older-than`` does not touch them.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from ..errors import Busy, InvalidInput, StoreFormatError, StoreNotFound
from ..storage.runlogs.bucketcatalog import CATALOG
from ..storage.runlogs.bucketlogs import RUNS_PREFIX, STORE_PREFIX, BucketLogs
from ..storage.s3.bucket import Bucket
from ..storage.s3.client import open_bucket
from ..storage.s3.layout import HEAD_KEY, MARKER_KEY, marker_bytes, marker_version
from ..storage.store import Store
from ..storage.storedir import BUCKET_VERSION, ONE_LOG_VERSIONS, remote_cache_dir
from . import runlogs

ROUNDS = 3  # builds started over because an older objstore committed meanwhile, before giving up (Busy)


def upgrade_bucket(url: str) -> dict:
    """One upgrade of the store at ``url`` (``s3://bucket/prefix``), as the module docstring says. Returns a summary:
    ``status`` (``upgraded`` or ``already-format-7``), ``from``, ``to`` and the counts of the replay and its proof."""
    bucket = open_bucket(url)
    try:
        return _upgrade(bucket)
    finally:
        bucket.close()


def _upgrade(bucket: Bucket) -> dict:
    url = bucket.url
    got = bucket.get(MARKER_KEY)
    if got is None:
        raise StoreNotFound(url)
    version = marker_version(got.data, f"{url.rstrip('/')}/{MARKER_KEY}")
    if version == BUCKET_VERSION:
        return {"status": f"already-format-{version}", "path": url}
    if version not in ONE_LOG_VERSIONS:
        raise StoreFormatError(url, f"format version {version!r}; upgrade converts a store on object storage of format "
                               f"{', '.join(map(str, ONE_LOG_VERSIONS))} to {BUCKET_VERSION}")
    marker_etag = got.etag
    for _round in range(ROUNDS):
        head = bucket.get(HEAD_KEY)
        summary = _build(bucket, url)
        again = bucket.get(HEAD_KEY)
        if (head is None) != (again is None) or (head is not None and again is not None and head.etag != again.etag):
            continue  # an older objstore committed to the old HEAD meanwhile: build again from what it holds now
        if bucket.put_if_match(MARKER_KEY, marker_bytes(BUCKET_VERSION), marker_etag) is None:
            now = bucket.get(MARKER_KEY)
            if now is not None and marker_version(now.data, url) == BUCKET_VERSION:
                return {"status": f"already-format-{BUCKET_VERSION}", "path": url}  # another upgrade finished first
            raise InvalidInput(f"the marker of {url} changed during the upgrade; run upgrade again")
        return {"status": "upgraded", "path": url, "from": version, "to": BUCKET_VERSION, **summary, "backup": None}
    raise Busy(url, ROUNDS, 0)


def _build(bucket: Bucket, url: str) -> dict:
    """Steps 1 to 3: clear the new prefixes, replay the old log into them, prove a fresh open of them."""
    for prefix in (STORE_PREFIX, RUNS_PREFIX, CATALOG):
        for x in list(bucket.list(prefix)):
            bucket.delete(x.key)
    base = remote_cache_dir(url)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    work = tempfile.mkdtemp(prefix=os.path.basename(base) + ".upgrade-", dir=os.path.dirname(base))
    try:
        old = Store.on_bucket(bucket, cache=os.path.join(work, "old"), create=False)
        new = _new_store(bucket, os.path.join(work, "new"))
        try:
            built = runlogs.build_into(old, new)
        finally:
            new.logs.release()
        fresh = _new_store(bucket, os.path.join(work, "proof"))
        proved = runlogs.check_against(old, fresh, f"{url.rstrip('/')}/{STORE_PREFIX}")
        return {**built, **proved}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _new_store(bucket: Bucket, cache: str) -> Store:
    """The format-7 logs of ``bucket`` while its marker still names the old format (only the upgrade opens them so)."""
    logs = BucketLogs(bucket, cache)
    logs.close = lambda: None  # type: ignore[method-assign]  # the bucket is the caller's
    store = Store(logs.store_log, root=cache, logs=logs)
    store._version = BUCKET_VERSION
    store.url = bucket.url
    return store


__all__ = ["upgrade_bucket"]
