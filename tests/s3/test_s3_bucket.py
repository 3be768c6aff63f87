"""ObstoreBucket (storage.s3.client) against a real SeaweedFS: the Bucket contract of storage.s3.bucket —
missing keys and failed preconditions are None, a 304 is NOT_MODIFIED, everything else one-line
RemoteError — with exact request counts; open_bucket's URL parsing; the ETag forms the server takes;
and MemoryBucket answering a sequence of calls as the real server does."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections import Counter

import pytest

from objstore.errors import InvalidInput
from objstore.storage.s3.bucket import NOT_MODIFIED, Got, MemoryBucket, RemoteError
from objstore.storage.s3.client import ObstoreBucket, open_bucket, parse_url


def test_get_put_roundtrip_and_counts(s3_url):
    b = open_bucket(s3_url)
    assert b.url == s3_url
    assert b.get("a/one") is None
    etag = b.put("a/one", b"first bytes")
    assert etag and '"' not in etag  # kept plain
    assert b.get("a/one") == Got(b"first bytes", etag)
    etag2 = b.put("a/one", b"second")  # a plain PUT replaces
    assert etag2 != etag and b.get("a/one") == Got(b"second", etag2)
    assert b.put("empty", b"") and b.get("empty").data == b""
    assert b.requests == Counter({"GET": 4, "PUT": 3})


def test_put_if_absent_one_of_two_wins(s3_url):
    b1, b2 = open_bucket(s3_url), open_bucket(s3_url)
    won = b1.put_if_absent("HEAD", b"from one")
    assert won is not None
    assert b2.put_if_absent("HEAD", b"from two") is None
    assert b2.get("HEAD") == Got(b"from one", won)
    assert b1.requests == Counter({"PUT": 1}) and b2.requests == Counter({"PUT": 1, "GET": 1})


def test_put_if_match_right_stale_and_missing(s3_url):
    b = open_bucket(s3_url)
    e1 = b.put("HEAD", b"v1")
    e2 = b.put_if_match("HEAD", b"v2", e1)
    assert e2 is not None and e2 != e1
    assert b.put_if_match("HEAD", b"v3", e1) is None  # stale: 412
    assert b.get("HEAD") == Got(b"v2", e2)
    assert b.put_if_match("nothing-here", b"x", e2) is None  # SeaweedFS: 412 (AWS: 404), both None
    assert b.get("nothing-here") is None
    assert b.requests == Counter({"PUT": 4, "GET": 2})


def test_get_if_changed(s3_url):
    b = open_bucket(s3_url)
    assert b.get_if_changed("HEAD", "0123") is None
    e1 = b.put("HEAD", b"one")
    assert b.get_if_changed("HEAD", e1) is NOT_MODIFIED
    assert b.get_if_changed("HEAD", f'"{e1}"') is NOT_MODIFIED  # either form in, the same answer
    assert b.get_if_changed("HEAD", "not-the-etag") == Got(b"one", e1)
    e2 = b.put("HEAD", b"two")
    assert b.get_if_changed("HEAD", e1) == Got(b"two", e2)
    assert b.requests == Counter({"GET": 5, "PUT": 2})


def test_list_sorted_relative_with_sizes_and_delete(s3_url):
    b = open_bucket(s3_url)
    before = time.time()
    for key, size in [("runs/b/x", 3), ("runs/a/y", 10), ("runs/ab", 1), ("other", 7), ("runs/a/z/deep", 0)]:
        b.put(key, b"q" * size)
    got = list(b.list())
    assert [(x.key, x.size) for x in got] == [("other", 7), ("runs/a/y", 10), ("runs/a/z/deep", 0), ("runs/ab", 1), ("runs/b/x", 3)]
    assert all(abs(x.modified - before) < 3600 for x in got)  # epoch seconds, not a datetime or milliseconds
    # a prefix is a plain string prefix (obstore lists whole segments; the bucket filters)
    assert [x.key for x in b.list("runs/a")] == ["runs/a/y", "runs/a/z/deep", "runs/ab"]
    assert [x.key for x in b.list("runs/a/")] == ["runs/a/y", "runs/a/z/deep"]
    assert [x.key for x in b.list("r")] == ["runs/a/y", "runs/a/z/deep", "runs/ab", "runs/b/x"]
    assert list(b.list("nope/")) == []
    b.delete("runs/ab")
    b.delete("runs/ab")  # deleting what is gone is no error
    assert b.get("runs/ab") is None
    assert [x.key for x in b.list("runs/")] == ["runs/a/y", "runs/a/z/deep", "runs/b/x"]
    assert b.requests == Counter({"PUT": 5, "LIST": 6, "DELETE": 2, "GET": 1})


def test_prefixes_are_separate_stores(s3_url, seaweed):
    one, two = open_bucket(s3_url + "/one"), open_bucket(s3_url + "/two")
    one.put("k", b"1")
    assert two.get("k") is None and list(two.list()) == []
    whole = open_bucket(f"s3://{seaweed.bucket}")
    assert whole.get(s3_url.split("/", 3)[3] + "/one/k").data == b"1"  # stored under the prefix


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("what", ["get", "get_if_changed", "put", "put_if_absent", "put_if_match", "delete", "list"])
def test_unreachable_endpoint_is_one_line_remote_error(s3_url, monkeypatch, what):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    b = open_bucket(s3_url)
    calls = {"get": lambda: b.get("k"), "get_if_changed": lambda: b.get_if_changed("k", "e"), "put": lambda: b.put("k", b"x"),
             "put_if_absent": lambda: b.put_if_absent("k", b"x"), "put_if_match": lambda: b.put_if_match("k", b"x", "e"),
             "delete": lambda: b.delete("k"), "list": lambda: list(b.list())}
    with pytest.raises(RemoteError) as e:
        calls[what]()
    msg = str(e.value)
    assert "\n" not in msg and "Debug" not in msg and "Traceback" not in msg
    assert msg.startswith("object storage: ") and s3_url in msg and "error sending request" in msg
    assert e.value.exit_code == 10


def test_wrong_secret_is_remote_error_not_missing(s3_url, monkeypatch):
    open_bucket(s3_url).put("k", b"x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    b = open_bucket(s3_url)
    for call in (lambda: b.get("k"), lambda: b.put_if_absent("k2", b"x"), lambda: b.put_if_match("k", b"y", "e")):
        with pytest.raises(RemoteError, match="403") as e:
            call()
        assert "\n" not in str(e.value) and "SignatureDoesNotMatch" in str(e.value)


def test_missing_bucket_is_bucket_not_found_not_missing_key(seaweed):
    """A missing bucket is no store there (exit 3), never a missing key. (Writes are not asked here: SeaweedFS
    answers a PUT into a missing bucket by making it; a store's open reads HEAD first.)"""
    from objstore.storage.s3.bucket import BucketNotFound

    b = open_bucket("s3://objstore-no-such-bucket/p")
    for call in (lambda: b.get("k"), lambda: b.get_if_changed("k", "x"), lambda: list(b.list())):
        with pytest.raises(BucketNotFound, match="bucket objstore-no-such-bucket does not exist at http://127.0.0.1:") as e:
            call()
        assert e.value.exit_code == 3


def test_seaweedfs_takes_both_etag_forms(s3_url):
    """We send the quoted form (RFC 9110, what AWS wants); SeaweedFS takes the plain one as well, and
    ObstoreBucket takes an ETag either way from its caller."""
    import obstore

    b = open_bucket(s3_url)
    assert isinstance(b, ObstoreBucket)
    for form in ("quoted", "plain"):
        raw = obstore.put(b._store, f"raw-{form}", b"v1")["e_tag"]
        assert raw.startswith('"') and raw.endswith('"')  # what SeaweedFS answers: quoted hex MD5
        sent = raw if form == "quoted" else raw.strip('"')
        assert obstore.put(b._store, f"raw-{form}", b"v2", mode={"e_tag": sent})["e_tag"]
        e = b.put(f"ours-{form}", b"v1")
        given = f'"{e}"' if form == "quoted" else e
        assert b.put_if_match(f"ours-{form}", b"v2", given) is not None
        assert b.get(f"ours-{form}").data == b"v2"


def _contract_sequence(b) -> list:
    """One sequence of calls; the answers reduced to what the contract fixes (ETag values differ per server)."""
    out: list = []
    e1 = b.put("k", b"one")
    out.append(("put", bool(e1), b.get("k") == Got(b"one", e1)))
    out.append(("absent-exists", b.put_if_absent("k", b"x")))
    e_new = b.put_if_absent("n", b"new")
    out.append(("absent-new", bool(e_new), b.get("n") == Got(b"new", e_new)))
    e2 = b.put_if_match("k", b"two", e1)
    out.append(("match", bool(e2), e2 != e1))
    out.append(("match-quoted-in", bool(b.put_if_match("k", b"three", f'"{e2}"'))))
    e3 = b.get("k").etag
    out.append(("stale", b.put_if_match("k", b"four", e1), b.get("k").data))
    out.append(("match-missing", b.put_if_match("gone", b"x", e3), b.get("gone")))
    out.append(("not-modified", b.get_if_changed("k", e3) is NOT_MODIFIED, b.get_if_changed("k", e1) == Got(b"three", e3)))
    out.append(("changed-missing", b.get_if_changed("gone", e3)))
    b.delete("n")
    out.append(("deleted", b.get("n"), [(x.key, x.size) for x in b.list()]))
    out.append(("counts", dict(b.requests)))
    return out


@pytest.mark.parametrize("form", ["quoted", "plain", None])
def test_memory_bucket_answers_as_seaweedfs(s3_url, form):
    real = _contract_sequence(open_bucket(s3_url))
    assert real[0] == ("put", True, True) and real[5] == ("stale", None, b"three")
    assert _contract_sequence(MemoryBucket(etag_form=form)) == real


def test_memory_bucket_404_for_missing_if_match_is_none_too():
    b = MemoryBucket(missing_if_match=404)
    assert b.put_if_match("gone", b"x", "e") is None


@pytest.mark.parametrize("url,bucket,prefix,norm", [
    ("s3://bucket", "bucket", "", "s3://bucket"),
    ("s3://bucket/", "bucket", "", "s3://bucket"),
    ("s3://my.bucket-1/runs", "my.bucket-1", "runs", "s3://my.bucket-1/runs"),
    ("s3://bkt/a/b/c/", "bkt", "a/b/c", "s3://bkt/a/b/c"),
])
def test_parse_good_urls(url, bucket, prefix, norm):
    assert parse_url(url) == (bucket, prefix)
    assert open_bucket(url).url == norm  # opening makes no request


@pytest.mark.parametrize("url", ["bucket/p", "s3:/bucket", "http://bucket/p", "s3://", "s3:///p", "s3://ab", "s3://Bucket",
                                 "s3://-bucket", "s3://bucket//p", "s3://bucket/a//b", "s3://bucket/a/../b", "s3://bucket/./b",
                                 "s3://bucket/p?x=1", "s3://bucket/p#f", "s3://bucket/a\nb", "s3://b..b/p", "s3://b_b/p"])
def test_bad_urls_are_invalid_input_one_line(url):
    with pytest.raises(InvalidInput) as e:
        open_bucket(url)
    assert "\n" not in str(e.value) and str(e.value).startswith("invalid input: ")


def test_obstore_is_imported_only_when_a_bucket_opens():
    code = ("import sys, objstore, objstore.storage.s3.client, objstore_cli.main; "
            "assert 'obstore' not in sys.modules, 'imported early'; "
            "from objstore.storage.s3.client import parse_url; parse_url('s3://bucket/p'); assert 'obstore' not in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


class _Scripted:
    """A loopback HTTP server answering each request with the next status of a script (then the last
    one), recording what it was sent: to pin obstore's retries, which a real server shows only when
    it fails."""

    def __init__(self, statuses: list[int]) -> None:
        import http.server
        import threading

        self.statuses, self.seen = list(statuses), []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.seen.append((self.command, self.headers.get("If-Match"), self.headers.get("If-None-Match")))
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_PUT = do_DELETE = answer

            def log_message(self, *args) -> None:
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.srv.server_port}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def _scripted_env(monkeypatch, endpoint: str) -> None:
    """The AWS environment for a scripted server: credentials of its own (without them obstore asks the instance
    metadata service), never the session's SeaweedFS's, which the README's test command does not start."""
    for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("what", ["put", "put_if_absent", "put_if_match"])
def test_obstore_retries_every_put_on_5xx_then_gives_up_with_remote_error(monkeypatch, what):
    """obstore retries a 5xx for every method, a conditional PUT included (RETRY: 3 retries), and sends
    If-Match quoted. Safe because a retried conditional PUT whose first try landed answers 412, which
    is None here and decided by content in the engine (next test)."""
    from objstore.storage.s3.client import RETRY

    fake = _Scripted([503])
    try:
        _scripted_env(monkeypatch, fake.endpoint)
        b = open_bucket("s3://bucket/p")
        call = {"put": lambda: b.put("k", b"x"), "put_if_absent": lambda: b.put_if_absent("k", b"x"),
                "put_if_match": lambda: b.put_if_match("k", b"x", "abc")}[what]
        with pytest.raises(RemoteError, match="503") as e:
            call()
        assert "\n" not in str(e.value)
        header = {"put": (None, None), "put_if_absent": (None, "*"), "put_if_match": ('"abc"', None)}[what]
        assert fake.seen == [("PUT", *header)] * (1 + RETRY["max_retries"])
        assert b.requests == Counter({"PUT": 1})  # one call counted once: obstore's retries are invisible to us
    finally:
        fake.close()


def test_a_retried_conditional_put_answering_412_is_none(monkeypatch):
    fake = _Scripted([503, 412])
    try:
        _scripted_env(monkeypatch, fake.endpoint)
        b = open_bucket("s3://bucket/p")
        assert b.put_if_match("k", b"x", "abc") is None
        assert len(fake.seen) == 2
    finally:
        fake.close()
