"""The ``Bucket`` interface (storage.s3.bucket) over real S3-compatible object storage, through ``obstore``.

This module owns the mapping from the S3 wire to the bucket contract: ``open_bucket`` parses
``s3://bucket/prefix`` and reads the endpoint, region and credentials from the usual AWS environment
variables; ``ObstoreBucket`` turns a missing key and every failed precondition into ``None``, a 304
into ``NOT_MODIFIED``, a missing bucket into ``BucketNotFound`` and every other failure into one
``RemoteError`` with a one-line reason. ``create_bucket`` makes a bucket (``init --create-bucket``):
obstore has no bucket calls, so it is one SigV4-signed ``PUT /bucket`` of our own.

``obstore`` is imported lazily, inside the functions that need it: the command line on a local store
must not pay its import.

Timeouts: a request may wait ``OBJSTORE_S3_TIMEOUT`` seconds (default ``DEFAULT_TIMEOUT``, 15) for the server
— to connect (at most 5), or between two reads of its answer — so a gateway that accepts and never answers (a
frozen filer behind it) is one ``RemoteError`` naming the endpoint, not a minute's hang. A transfer that keeps
moving (a large entry on a slow link) may take ``WHOLE_REQUEST`` times that in all.

Retries: obstore (the Rust ``object_store`` crate) retries 5xx answers and connection errors for
every method, PUT included, with jittered exponential backoff; it does not retry a timeout of a
non-idempotent request. We keep that modest (``RETRY``: 3 retries within 10 s, or within the
request timeout when that is shorter, so a timed-out request is not sent again past it). A conditional PUT
retried at the HTTP level after its first attempt landed answers 412 (or 409): ``put_if_match`` and
``put_if_absent`` then return ``None`` although our bytes are stored. That is safe only because the
engine decides a failed precondition by content (it re-reads the key and looks for its own entry);
a caller of ``put_if_absent`` that must know whether it created the key has to read it back.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import math
import os
import re
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from ...errors import InvalidInput, ObjstoreError
from .bucket import NOT_MODIFIED, Bucket, BucketNotFound, Got, Listed, RemoteError, Requests, plain_etag

# S3's page size for ListObjectsV2 (max-keys defaults to 1000 on AWS and SeaweedFS; obstore does
# not change it). obstore hides pages, so ``list`` counts one LIST per started page of this size.
LIST_PAGE = 1000

RETRY: dict[str, Any] = {
    "max_retries": 3,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=1), "base": 2},
}
DEFAULT_TIMEOUT = 15.0  # seconds a request may wait for the server (OBJSTORE_S3_TIMEOUT)
CONNECT_TIMEOUT = 5.0
WHOLE_REQUEST = 20  # a whole request, answer included, may take this many times OBJSTORE_S3_TIMEOUT

# S3 bucket names: 3-63 of lower-case letters, digits, dots and hyphens, starting and ending alphanumeric.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BAD_SEGMENT = re.compile(r"[\x00-\x1f\x7f\\?#*]")


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at its ends); InvalidInput otherwise."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise InvalidInput(f"not an s3:// URL: {url!r} (expected s3://bucket/prefix)")
    rest = url[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise InvalidInput(f"bad bucket name {bucket!r} in {url!r} (3-63 of a-z 0-9 . -)")
    if prefix.endswith("/"):
        prefix = prefix[:-1]  # s3://bucket/ and s3://bucket/p/ name what s3://bucket and s3://bucket/p do
    if prefix:
        for seg in prefix.split("/"):
            if seg in ("", ".", "..") or _BAD_SEGMENT.search(seg):
                raise InvalidInput(f"bad key prefix {prefix!r} in {url!r} (segments must be non-empty, not . or .., "
                                   "without control characters, \\ ? # *)")
    return bucket, prefix


def open_bucket(url: str) -> Bucket:
    """The bucket and prefix that ``url`` names, configured from the AWS environment variables."""
    bucket, prefix = parse_url(url)
    return ObstoreBucket(bucket, prefix)


def request_timeout() -> float:
    """Seconds a request may wait for the server: ``OBJSTORE_S3_TIMEOUT``, else ``DEFAULT_TIMEOUT``; InvalidInput when it is
    not a number of seconds above 0 (read at each open, so a process may change it between stores)."""
    text = os.environ.get("OBJSTORE_S3_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidInput(f"OBJSTORE_S3_TIMEOUT={text!r}: not a number of seconds above 0 (default {DEFAULT_TIMEOUT:g})")
    return value


def _timed_out(e: BaseException) -> bool:
    """obstore's timeout, as its debug dump names it (reqwest's kind, or the OS's)."""
    text = str(e)
    return "kind: Timeout" in text or "TimedOut" in text or "operation timed out" in text


def _one_line(e: BaseException) -> str:
    """obstore's message without its multi-line debug dump and response body: its first line, with
    the S3 error code (``<Code>...</Code>``) appended when the body carried one."""
    text = str(e)
    first = text.split("\n", 1)[0].strip()
    first = first.split(": <?xml", 1)[0]
    code = re.search(r"<Code>([^<]{1,80})</Code>", text)
    if code and code.group(1) not in first:
        first += f" ({code.group(1)})"
    if len(first) > 300:
        first = first[:297] + "..."
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


class ObstoreBucket(Bucket):
    """One bucket and prefix through an ``obstore.store.S3Store`` (path-style requests, signed with the
    environment's credentials, plain http allowed when the endpoint is ``http://``)."""

    def __init__(self, bucket: str, prefix: str = "") -> None:
        try:
            from obstore.store import S3Store
        except ImportError:  # the base install stays small: object storage is the extra objstore[s3]
            raise InvalidInput(f"s3://{bucket}/{prefix}: a store on object storage needs the obstore client "
                               "(pip install 'objstore[s3]')") from None

        self.bucket_name = bucket
        self.prefix = prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.requests = Requests()
        config: dict[str, Any] = {}
        endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        if endpoint:
            config["endpoint"] = endpoint
        region = _env("AWS_REGION", "AWS_DEFAULT_REGION")
        if region:
            config["region"] = region
        for key, names in (("access_key_id", ("AWS_ACCESS_KEY_ID",)), ("secret_access_key", ("AWS_SECRET_ACCESS_KEY",)),
                           ("session_token", ("AWS_SESSION_TOKEN",))):
            v = _env(*names)
            if v:
                config[key] = v
        self.endpoint = endpoint or _aws_endpoint(region)
        self.timeout = request_timeout()
        client: dict[str, Any] = {"connect_timeout": timedelta(seconds=min(CONNECT_TIMEOUT, self.timeout)),
                                  "read_timeout": timedelta(seconds=self.timeout),
                                  "timeout": timedelta(seconds=self.timeout * WHOLE_REQUEST)}
        if endpoint and endpoint.startswith("http://"):
            client["allow_http"] = True
        retry = dict(RETRY, retry_timeout=min(RETRY["retry_timeout"], timedelta(seconds=self.timeout)))
        try:
            self._store = S3Store(bucket, prefix=prefix or None, config=config,  # type: ignore[arg-type]
                                  client_options=client, retry_config=retry)  # type: ignore[arg-type]
        except Exception as e:  # obstore's configuration errors (a bad endpoint URL, an unknown key) have no common base
            raise RemoteError(f"configure {self.url}", _one_line(e)) from None

    def _fail(self, what: str, e: BaseException) -> ObjstoreError:
        if _no_bucket(e):
            return BucketNotFound(self.bucket_name, self.endpoint, self.url)
        if _timed_out(e):
            text = str(e)
            where = re.search(r"https?://[^/\s]+", text)
            endpoint = where.group(0) if where else self.endpoint
            if "kind: Body" in text:  # the answer began: it stalled, or kept moving past the whole request's bound
                return RemoteError(f"{what} {self.url}", f"the answer from {endpoint} stalled or did not finish (OBJSTORE_S3_TIMEOUT: "
                                                         f"{self.timeout:g} s without a byte, {self.timeout * WHOLE_REQUEST:g} s in all)")
            return RemoteError(f"{what} {self.url}", f"no answer from {endpoint} within {self.timeout:g} s "
                                                     "(OBJSTORE_S3_TIMEOUT sets the limit)")
        return RemoteError(f"{what} {self.url}", _one_line(e))

    def _missing(self, what: str, e: BaseException) -> None:
        """A 404 (obstore raises the builtin FileNotFoundError) is a missing key, unless the bucket is missing."""
        if _no_bucket(e):
            raise self._fail(what, e) from None
        return None

    def _got(self, res: Any) -> Got:
        return Got(bytes(res.bytes()), plain_etag(res.meta.get("e_tag") or ""))

    def get(self, key: str) -> Got | None:
        import obstore
        self.requests.add("GET")
        try:
            return self._got(obstore.get(self._store, key))
        except FileNotFoundError as e:
            self._missing(f"GET {key}", e)
            return None
        except Exception as e:  # every other obstore error is one RemoteError (its classes share no base we may rely on)
            raise self._fail(f"GET {key}", e) from None

    def get_if_changed(self, key: str, etag: str) -> Got | None:
        import obstore
        from obstore.exceptions import NotModifiedError

        self.requests.add("GET")
        try:
            return self._got(obstore.get(self._store, key, options={"if_none_match": _quoted(etag)}))
        except NotModifiedError:
            return NOT_MODIFIED
        except FileNotFoundError as e:
            self._missing(f"GET {key}", e)
            return None
        except Exception as e:
            raise self._fail(f"GET {key}", e) from None

    def _put(self, key: str, data: bytes, mode: Any) -> str | None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        conditional = mode != "overwrite"
        self.requests.add("PUT")
        try:
            res = obstore.put(self._store, key, bytes(data), mode=mode)
        except (AlreadyExistsError, PreconditionError, FileNotFoundError) as e:
            # 412, 409 (a concurrent create on AWS), and 404 for If-Match on a missing key (AWS; SeaweedFS
            # answers 412). On a plain PUT any of these is a server fault, not an answer.
            if conditional and not _no_bucket(e):
                return None
            raise self._fail(f"PUT {key}", e) from None
        except Exception as e:
            raise self._fail(f"PUT {key}", e) from None
        return plain_etag(res.get("e_tag") or "")

    def put(self, key: str, data: bytes) -> str:
        etag = self._put(key, data, "overwrite")
        assert etag is not None  # only a conditional PUT answers None
        return etag

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        return self._put(key, data, "create")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str | None:
        return self._put(key, data, {"e_tag": _quoted(etag)})

    def delete(self, key: str) -> None:
        import obstore

        self.requests.add("DELETE")
        try:
            obstore.delete(self._store, key)  # a missing key is no error (S3 answers 204)
        except Exception as e:
            raise self._fail(f"DELETE {key}", e) from None

    def list(self, prefix: str = "") -> Iterator[Listed]:
        """Every key starting with ``prefix`` (a plain string prefix, as MemoryBucket's), sorted.

        obstore lists by whole path segments (``a/b`` does not match ``a/bc``), so this lists the
        prefix's directory part and filters the rest. It reads the whole listing before yielding
        (sorting needs it; a run's keys are few after sealing)."""
        import obstore

        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        out: list[Listed] = []
        seen = 0
        try:
            for batch in obstore.list(self._store, base or None, chunk_size=LIST_PAGE):
                for m in batch:
                    seen += 1
                    path = m["path"]
                    if path.startswith(prefix):
                        out.append(Listed(path, int(m["size"]), m["last_modified"].timestamp()))
        except Exception as e:
            self.requests.add("LIST", 1 + max(0, seen - 1) // LIST_PAGE)
            raise self._fail(f"LIST {prefix or '(all)'}", e) from None
        self.requests.add("LIST", 1 + max(0, seen - 1) // LIST_PAGE)
        out.sort()
        yield from out

    def stream(self, prefix: str = "") -> Iterator[Listed]:
        """As ``list``, a page at a time: S3 lists keys in UTF-8 binary order (ListObjectsV2), so the keys come
        sorted without reading the rest; a caller that stops early pays for the pages it read (one per LIST_PAGE keys,
        ``StartAfter`` just before the prefix so the listing begins at it)."""
        import obstore

        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        seen = 0
        counted = 0
        try:
            # (StartAfter is exclusive: after the prefix less its last character, so a key equal to the prefix is listed)
            for batch in obstore.list(self._store, base or None, offset=prefix[:-1] or None, chunk_size=LIST_PAGE):
                for m in batch:
                    seen += 1
                    if seen > counted * LIST_PAGE:
                        counted += 1
                        self.requests.add("LIST")
                    path = m["path"]
                    if not path.startswith(prefix):
                        if path > prefix:
                            return  # past the prefix: nothing later starts with it
                        continue
                    yield Listed(path, int(m["size"]), m["last_modified"].timestamp())
        except Exception as e:
            if not counted:
                self.requests.add("LIST")
            raise self._fail(f"LIST {prefix or '(all)'}", e) from None
        if not counted:
            self.requests.add("LIST")


def _aws_endpoint(region: str | None) -> str:
    """Where obstore sends requests when no endpoint is set: AWS's regional endpoint."""
    return f"https://s3.{region or 'us-east-1'}.amazonaws.com"


def create_bucket(url: str) -> bool:
    """Create the bucket ``url`` names (``s3://bucket/prefix``) at the environment's endpoint, with its
    credentials: True if this call made it, False if it was there already. A signed path-style ``PUT /bucket``
    (with a ``LocationConstraint`` outside us-east-1, as AWS requires); any other answer is RemoteError."""
    bucket, _prefix = parse_url(url)
    region = _env("AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") or _aws_endpoint(region)
    key, secret, token = _env("AWS_ACCESS_KEY_ID"), _env("AWS_SECRET_ACCESS_KEY"), _env("AWS_SESSION_TOKEN")
    if not key or not secret:
        raise InvalidInput(f"creating bucket {bucket} needs credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    ep = urllib.parse.urlsplit(endpoint)
    if ep.scheme not in ("http", "https") or not ep.netloc:
        raise InvalidInput(f"AWS_ENDPOINT_URL={endpoint!r}: not an http:// or https:// URL")
    body = b"" if region == "us-east-1" else (
        '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>").encode()
    path = ep.path.rstrip("/") + "/" + bucket
    headers = _sigv4("PUT", ep.netloc, path, body, region, key, secret, token)
    what = f"create bucket {bucket} at {endpoint}"
    conn_cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    timeout = request_timeout()
    conn = conn_cls(ep.netloc, timeout=timeout)
    try:
        conn.request("PUT", path, body=body, headers=headers)
        res = conn.getresponse()
        status, answer = res.status, res.read(4096).decode("utf-8", "replace")
    except TimeoutError:
        raise RemoteError(what, f"no answer from {endpoint} within {timeout:g} s (OBJSTORE_S3_TIMEOUT sets the limit)") from None
    except (OSError, http.client.HTTPException) as e:
        raise RemoteError(what, f"{type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if 200 <= status < 300:
        return True
    code = re.search(r"<Code>([^<]{1,80})</Code>", answer)
    if code and code.group(1) in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
        return False  # whose it is shows at the first request of the store that follows
    raise RemoteError(what, f"HTTP {status}" + (f" ({code.group(1)})" if code else ""))


def _sigv4(method: str, host: str, path: str, body: bytes, region: str, key: str, secret: str,
           token: str | None) -> dict[str, str]:
    """The headers of an AWS Signature Version 4 request for service s3 (no query string; ``path`` is a bucket
    name, which needs no escaping)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join([method, path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {("Host" if name == "host" else name): value for name, value in headers.items()}
    out["Authorization"] = f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders={signed}, Signature={sig}"
    out["Content-Length"] = str(len(body))
    return out


def _no_bucket(e: BaseException) -> bool:
    """S3 answers a missing bucket with 404 too; its body's code tells it from a missing key."""
    return "NoSuchBucket" in str(e)


def _quoted(etag: str) -> str:
    """The one form we send: RFC 9110's quoted ETag (AWS requires it; SeaweedFS takes both)."""
    return '"' + plain_etag(etag) + '"'
