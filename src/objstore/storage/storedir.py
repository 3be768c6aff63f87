"""Where a store is and which format it is: finding one, naming one on object storage, its marker.

A local store is a directory holding an ``OBJSTORE`` marker (JSON: format and version); a command
that names none finds ``.objstore`` the way git finds ``.git`` (``discover``: up to ``/``, stopping
at a filesystem boundary or a ceiling directory). ``s3://bucket/prefix`` names a store on object
storage, cached locally under ``remote_cache_dir``. Kept here: the marker is raised before the
first entry or file that needs the newer version lands, never lowered, and replaced atomically, so
an older objstore refuses a newer store (exit 5) instead of reading its new rows as damage.
"""

from __future__ import annotations

import json
import os

import blake3

from ..errors import StorageOSError, StoreFormatError, StoreNotFound
from .fileutil import FsyncPolicy, atomic_file

MARKER = "OBJSTORE"
FORMAT_VERSION = 3  # what a new store is
PACKED_VERSION = 4  # format 3 with packed segments and rewrite entries: what a store becomes at its first gc
# format 4 with labelled records (index rows with labels, label rows in segment indexes), schema objects
# and cross-run forks: what a store becomes at its first labelled run or record, schema or copy (issue 18)
LABELS_VERSION = 5
# a log per run: a store log, a log per run and the catalog (storage.runlogs; issue 16)
RUNLOGS_VERSION = 6
# format 6's logs on object storage, each with its own HEAD (storage.runlogs.bucketlogs; issue 18). Only a bucket
# holds it; an objstore that reads up to 6 refuses it (NewerFormat) before writing anything
BUCKET_VERSION = 7
NEWEST_VERSION = BUCKET_VERSION
READ_VERSIONS = (FORMAT_VERSION, PACKED_VERSION, LABELS_VERSION, RUNLOGS_VERSION)  # on disk
BUCKET_READ_VERSIONS = (FORMAT_VERSION, PACKED_VERSION, LABELS_VERSION, BUCKET_VERSION)  # on object storage (3-5: read only)
ONE_LOG_VERSIONS = (FORMAT_VERSION, PACKED_VERSION, LABELS_VERSION)  # one log holds everything


def new_store_format() -> int:
    """The format ``objstore init`` makes on disk: 6 (a log per run), or one log (``OBJSTORE_NEW_FORMAT=3``) while
    every command learns format 6."""
    v = os.environ.get("OBJSTORE_NEW_FORMAT")
    return RUNLOGS_VERSION if v is None or v.strip() == "6" else FORMAT_VERSION
DEFAULT_DIR = ".objstore"


def default_path() -> str:
    return os.environ.get("OBJSTORE_DIR") or DEFAULT_DIR


S3_SCHEME = "s3://"
CACHE_ENV = "OBJSTORE_CACHE_DIR"


def is_remote(path: object) -> bool:
    """Whether ``path`` names a store on object storage (``s3://bucket/prefix``) rather than a directory."""
    return isinstance(path, str) and path.startswith(S3_SCHEME)


def remote_cache_dir(url: str) -> str:
    """The local directory that caches an S3 store's immutable keys and holds its state cache:
    $OBJSTORE_CACHE_DIR, else $XDG_CACHE_HOME/objstore, else ~/.cache/objstore; one directory per
    endpoint, bucket and prefix. Everything in it is derived and checked on use."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "objstore")
    ident = f"{os.environ.get('AWS_ENDPOINT_URL', '')}|{url.rstrip('/')}"
    return os.path.join(base, "s3-" + blake3.blake3(ident.encode()).hexdigest()[:24])


CEILING_ENV = "OBJSTORE_CEILING_DIRECTORIES"


def store_dir(path: str) -> str:
    """The store a local path names: ``path`` itself when it is a store (or none is in it), else the
    ``.objstore`` in it — a directory holding a store, as ``objstore clone URL DIR`` makes one (git's
    working directory holding ``.git``). So ``--store DIR`` takes a clone and a store cloned the old
    way (DIR itself the store) alike."""
    if os.path.isfile(os.path.join(path, MARKER)):
        return path
    inner = os.path.join(path, DEFAULT_DIR)
    return inner if os.path.isfile(os.path.join(inner, MARKER)) else path


def discover(start: str | None = None, ceilings: list[str] | None = None) -> str:
    """The store a command uses when none is named, found like git finds ``.git``: a ``.objstore``
    directory holding an OBJSTORE marker in ``start`` (default: the current directory), else in
    its parent, and so on up to ``/`` — stopping before a filesystem boundary (the parent's
    ``st_dev`` differs) and, like git's GIT_CEILING_DIRECTORIES, before going up into a ceiling
    directory (``ceilings``; default: the colon-separated absolute paths in
    $OBJSTORE_CEILING_DIRECTORIES). Returns its absolute path; raises StoreNotFound naming where it
    looked."""
    here = os.path.abspath(start or os.getcwd())
    first = here
    if ceilings is None:
        ceilings = [c for c in os.environ.get(CEILING_ENV, "").split(":") if os.path.isabs(c)]
    stops = {os.path.normpath(c) for c in ceilings}
    try:
        dev = os.stat(here).st_dev
        while True:
            cand = os.path.join(here, DEFAULT_DIR)
            if os.path.isfile(os.path.join(cand, MARKER)):
                return cand
            parent = os.path.dirname(here)
            if parent == here:
                stop = "/"
                break
            if parent in stops:
                stop = f"{here} (ceiling {parent} in ${CEILING_ENV})"
                break
            pdev = os.stat(parent).st_dev
            if pdev != dev:
                stop = f"{here} (filesystem boundary)"
                break
            here = parent
    except OSError as e:
        raise StorageOSError(f"look for {DEFAULT_DIR} from {first}", e) from None
    raise StoreNotFound(f"no {DEFAULT_DIR} in {first} or any parent up to {stop}")


def mark_packed(path: str, policy: FsyncPolicy) -> None:
    """Make the store's marker say format 4 before gc puts its first packed segment in place: an
    objstore that reads only format 3 then refuses the store as newer (exit 5) instead of reading a
    packed segment as damage. Atomic (written aside, renamed); a no-op on a format-4 store."""
    mark_version(path, PACKED_VERSION, policy)


def mark_version(path: str, version: int, policy: FsyncPolicy) -> None:
    """Raise the store's marker to ``version`` (never lower it) before the first entry or file that
    needs it lands, so that an older objstore refuses the store as newer instead of taking the new
    rows for damage. Atomic (written aside, renamed); a no-op when the marker says as much already."""
    if read_marker(path) >= version:
        return
    marker = os.path.join(path, MARKER)
    scratch = os.path.join(path, "tmp")  # a copy a kill leaves behind lands in scratch, which every reader ignores
    try:
        os.makedirs(scratch, exist_ok=True)
        with atomic_file(marker, scratch, policy) as f:
            f.write(json.dumps({"format": "objstore", "version": version}).encode() + b"\n")
    except OSError as e:
        raise StorageOSError(f"write {marker}", e) from None


def read_marker(path: str) -> int:
    """The format version of the store at ``path``; raises StoreNotFound / StoreFormatError."""
    marker = os.path.join(path, MARKER)
    try:
        with open(marker, "rb") as f:
            meta = json.loads(f.read())
        version = meta["version"]
    except FileNotFoundError:
        raise StoreNotFound(path) from None
    except (ValueError, KeyError, TypeError):
        raise StoreFormatError(path, "unreadable OBJSTORE marker") from None
    except OSError as e:
        raise StorageOSError(f"read {marker}", e) from None
    if meta.get("format") != "objstore" or not isinstance(version, int):
        raise StoreFormatError(path, "not an objstore marker")
    return version
