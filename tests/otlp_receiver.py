"""Test helpers for OTLP (the tests of ``objstore export --format otlp-json`` / ``--endpoint``): a loopback OTLP/HTTP
receiver (``http.server``, port 0) that decodes every POST with the official opentelemetry-proto classes, and the
OTLP/JSON a CLI prints parsed back into the same protobuf message."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from google.protobuf import json_format  # opentelemetry-proto: the otel extra, which the test extra pulls
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def decode_json(text: str):
    """OTLP/JSON back into the protobuf message (ids from hex to the base64 protobuf's JSON reads)."""
    def unhex(node):
        if isinstance(node, dict):
            return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId") else unhex(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [unhex(x) for x in node]
        return node

    return json_format.ParseDict(unhex(json.loads(text)), trace_service_pb2.ExportTraceServiceRequest())


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: list = []  # (path, content type, the decoded request) of each POST
    answer = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, self.headers["Content-Type"], trace_service_pb2.ExportTraceServiceRequest.FromString(body)))
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(type(self).answer)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@contextmanager
def receiving() -> Iterator[tuple[str, type[_Receiver]]]:
    """(its URL, its handler class: ``got`` and ``answer``) of a receiver serving on loopback until the block ends."""
    handler = type("Receiver", (_Receiver,), {"got": [], "answer": 200})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
