"""A gateway that accepts a connection and never answers (a frozen SeaweedFS filer behind it does so) ends a
command after the request timeout — ``OBJSTORE_S3_TIMEOUT`` seconds, default at most 15 — with exit 10 and one
line naming the endpoint, instead of hanging for a minute. The server is a socket in this test: no S3 server and
no ``weed`` needed, only the obstore client."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("obstore", reason="the S3 client: pip install 'objstore[s3]'")


class FrozenServer:
    """Accepts every connection on 127.0.0.1 and never reads nor writes a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            self._serve(c)

    def _serve(self, c: socket.socket) -> None:
        pass  # frozen: never a byte

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


class TricklingServer(FrozenServer):
    """Answers every request with a 200 whose body comes one byte every 0.2 s: never silent long, never done."""

    def _serve(self, c: socket.socket) -> None:
        threading.Thread(target=self._trickle, args=(c,), daemon=True).start()

    def _trickle(self, c: socket.socket) -> None:
        try:
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nETag: \"x\"\r\n\r\n")
            for _ in range(100000):
                c.sendall(b"x")
                time.sleep(0.2)
        except OSError:
            return


@pytest.fixture
def frozen():
    s = FrozenServer()
    yield s
    s.close()


def _run(endpoint: str, tmp_path, *args: str, timeout: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OBJSTORE_"))}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_REGION="us-east-1",
               OBJSTORE_KEYS=str(tmp_path / "keys"), OBJSTORE_CACHE_DIR=str(tmp_path / "cache"))
    if timeout is not None:
        env["OBJSTORE_S3_TIMEOUT"] = timeout
    # a generous bound, not a timing assertion: the 63 s hang this replaces would exceed it
    return subprocess.run([sys.executable, "-m", "objstore", "--store", "s3://frozen-bucket/p", *args], env=env,
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args", [["runs"], ["init"]])
def test_a_frozen_gateway_is_exit_10_naming_the_endpoint_after_the_timeout(frozen, tmp_path, args):
    p = _run(frozen.endpoint, tmp_path, *args, timeout="2")
    assert p.returncode == 10, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert frozen.endpoint in p.stderr and "no answer" in p.stderr and "2 s" in p.stderr and "OBJSTORE_S3_TIMEOUT" in p.stderr, p.stderr


def test_a_bad_timeout_value_is_one_line(frozen, tmp_path):
    for bad in ("soon", "0", "-1", "nan"):
        p = _run(frozen.endpoint, tmp_path, "runs", timeout=bad)
        assert p.returncode == 5 and p.stderr.count("\n") == 1 and "OBJSTORE_S3_TIMEOUT" in p.stderr, p.stderr


def test_the_default_request_timeout_is_at_most_15_seconds(monkeypatch):
    from objstore.storage.s3 import client as s3client

    monkeypatch.delenv("OBJSTORE_S3_TIMEOUT", raising=False)
    assert 0 < s3client.request_timeout() <= 15
    monkeypatch.setenv("OBJSTORE_S3_TIMEOUT", "2.5")
    assert s3client.request_timeout() == 2.5


@pytest.mark.slow
def test_a_transfer_that_keeps_moving_is_bounded_too(tmp_path):
    """Each read resets the wait for the server; the whole request is bounded at 20 times it."""
    s = TricklingServer()
    try:
        p = _run(s.endpoint, tmp_path, "runs", timeout="0.5")
    finally:
        s.close()
    assert p.returncode == 10, p.stderr
    assert p.stderr.count("\n") == 1 and s.endpoint in p.stderr and "did not finish" in p.stderr and "10 s in all" in p.stderr, p.stderr
