"""The Backend Host: the journal Host served over a Unix socket, as its own process.

``serve`` (CLI ``objstore journal-serve --socket PATH``) answers signed requests
with a ``LocalJournalHost`` over the store; ``BackendHost`` is the client, with
the same ``read`` / ``update`` interface as the in-process Host, so the
compaction core cannot tell them apart.

Protocol: one JSON line per connection each way. Request ``{"op": "read" |
"update" | "stats", "request": <signed request>, "body": <base64, update only>}``;
reply ``{"ok": true, "answer": "<the answer's canonical JSON>"}`` (read),
``{"ok": true, "result": {...}}`` (update, stats), or ``{"ok": false, "status":
401 | 403 | 400 | 404 | 409 | 500, "error": <class>, "args": [...], "message"}``.
The client raises the same typed error the Host raised (``Unauthenticated`` for
401, ``JobCaller`` and the other refusals for 403); a Host it cannot reach is
``HostUnavailable``, which compaction records as ``unavailable (read_failed)``.
Each request is answered as of one log position (``host.At``), whatever other
processes commit while it is served.
A read neither contacts any agent runtime nor waits for jobs or generations.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING

from .. import errors
from ..errors import InvalidInput, ObjstoreError
from ..storage import codec
from ..storage.identity import Request
from .host import HostUnavailable, LocalJournalHost, Principal

if TYPE_CHECKING:
    from ..runs.api import RunLog

MAX_LINE = 64 << 20  # a journal update carries its body; anything longer is refused
IDLE_TIMEOUT = 30.0  # seconds a connection may take to send its request line


def _status(e: ObjstoreError) -> int:
    if isinstance(e, errors.Unauthenticated):
        return 401
    if isinstance(e, errors.Refused):
        return 403
    if isinstance(e, errors.Conflict):
        return 409
    if isinstance(e, errors.NotFound):
        return 404
    if isinstance(e, errors.InvalidInput):
        return 400
    return 500


def _short(path: str) -> tuple[str, int | None]:
    """A socket path short enough for sun_path (108 bytes): long ones go through /proc/self/fd."""
    if len(os.fsencode(path)) < 100:
        return path, None
    d = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{d}/{os.path.basename(path)}", d


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(store_path: str, socket_path: str, *, ready: Callable[[str], object] | None = None,
          on_authorized: Callable[[Request, Principal], object] | None = None) -> None:
    """Serve the journal Host of the store at ``store_path`` on ``socket_path`` until SIGTERM/SIGINT.
    ``on_authorized`` is the Host's hook between a read's authorization and its journal read
    (``LocalJournalHost.on_authorized``; a test pauses the Backend there)."""
    from ..runs.api import RunLog
    from ..storage.store import Store

    log = RunLog(Store.open(store_path))
    host = LocalJournalHost(log)
    host.name = "backend"
    host.on_authorized = on_authorized

    class Handler(socketserver.StreamRequestHandler):
        timeout = IDLE_TIMEOUT  # a client that connects and sends nothing does not hold a thread forever

        def handle(self) -> None:
            try:
                line = self.rfile.readline(MAX_LINE + 1)
            except OSError:  # timed out or reset before a whole line came: nothing to answer
                return
            out = _answer(host, line)
            try:
                self.wfile.write(json.dumps(out).encode() + b"\n")
            except OSError:
                pass

    if os.path.exists(socket_path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bind_path, d = _short(socket_path)
        try:
            probe.connect(bind_path)
            raise InvalidInput(f"a journal host already listens on {socket_path}")
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(socket_path)  # a stale socket left by a killed host
        finally:
            probe.close()
            if d is not None:
                os.close(d)
    bind_path, d = _short(socket_path)
    server = _Server(bind_path, Handler)
    if d is not None:
        os.close(d)
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if ready:
        ready(socket_path)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        try:
            os.unlink(socket_path)
        except OSError:
            pass


def _answer(host: LocalJournalHost, line: bytes) -> dict:
    """The Host's answer to one request line (``stats``, ``read`` or ``update``): the result, or the
    failure as the client raises it again (an ``ObjstoreError`` by name, anything else a 500)."""
    try:
        if len(line) > MAX_LINE:
            raise InvalidInput("request too long")
        # the one input parser (codec.parse_json): a deeply nested line was a 500; NaN, duplicate
        # keys, huge integers and lone surrogates are a bad request like any malformed line
        msg = codec.parse_json(line, "a request (one JSON line)")
        if not isinstance(msg, dict):
            raise InvalidInput("a request is a JSON object")
        op = msg.get("op")
        if op == "stats":
            out = {"ok": True, "result": {"reads": host.reads}}
        elif op == "read":
            out = {"ok": True, "answer": codec.canonical_json(host.read(Request.from_json(msg.get("request")))).decode()}
        elif op == "update":
            try:
                body = base64.b64decode(msg.get("body") or "", validate=True)
            except (ValueError, TypeError):  # TypeError: a body that is not a string was a 500
                raise InvalidInput("update body must be base64") from None
            out = {"ok": True, "result": host.update(Request.from_json(msg.get("request")), body)}
        else:
            raise InvalidInput(f"unknown op {op!r}")
    except ObjstoreError as e:
        out = {"ok": False, "status": _status(e), "error": type(e).__name__, "args": _jsonable(e.args), "message": str(e)}
    except Exception as e:  # the Host stays up; the caller sees a failed read
        out = {"ok": False, "status": 500, "error": "HostError", "args": [], "message": f"{type(e).__name__}: {e}"}
    return out


def _jsonable(args: Iterable[object]) -> list:
    out = []
    for a in args:
        out.append(a if isinstance(a, (str, int, float, bool, type(None))) else str(a))
    return out


class BackendHost:
    """Client of a Backend Host on a Unix socket; the same interface as ``LocalJournalHost``."""

    name = "backend"

    def __init__(self, socket_path: str, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.reads = 0  # reads this client sent

    def _call(self, msg: dict) -> dict:
        path, d = _short(self.socket_path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(path)
            s.sendall(json.dumps(msg).encode() + b"\n")
            buf = bytearray()
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            raise HostUnavailable(f"journal host at {self.socket_path}: {e.strerror or e}") from None
        finally:
            s.close()
            if d is not None:
                os.close(d)
        try:
            out = json.loads(buf)
        except ValueError:
            raise HostUnavailable(f"journal host at {self.socket_path} gave no answer") from None
        if not out.get("ok"):
            cls = getattr(errors, str(out.get("error")), None)
            if isinstance(cls, type) and issubclass(cls, ObjstoreError):
                raise cls(*out.get("args", []))
            raise HostUnavailable(f"journal host failed: {out.get('message')}")
        return out

    def read(self, req: Request) -> bytes:
        """The Host's answer, as the canonical JSON bytes it sent (immutable)."""
        self.reads += 1
        return self._call({"op": "read", "request": req.to_json()})["answer"].encode("utf-8")

    def update(self, req: Request, body: bytes) -> dict:
        return self._call({"op": "update", "request": req.to_json(), "body": base64.b64encode(body).decode()})["result"]

    def stats(self) -> dict:
        return self._call({"op": "stats"})["result"]


def main_serve(store_path: str, socket_path: str) -> None:
    serve(store_path, socket_path, ready=lambda p: print(f"objstore: journal host listening on {p}", file=sys.stderr, flush=True))


def connect(log: RunLog, socket_path: str | None = None) -> BackendHost | LocalJournalHost:
    """The Host a caller talks to: the Backend Host serving ``socket_path``, else the in-process one."""
    if socket_path:
        return BackendHost(socket_path)
    return LocalJournalHost(log)
