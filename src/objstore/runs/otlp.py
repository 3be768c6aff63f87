"""OTLP for ``objstore export --format otlp-json`` and ``--endpoint URL``: encoding and sending.

This module owns the wire form of the spans ``otel`` builds: an ``ExportTraceServiceRequest`` of
the official ``opentelemetry-proto`` package (the ``otel`` extra; imported only when a command
encodes, so the CLI's start-up never loads protobuf), its OTLP/JSON form and the OTLP/HTTP POST.

* OTLP/JSON follows the OTLP specification's JSON mapping: the protobuf JSON mapping with
  lowerCamelCase keys and enums as integers, except that trace and span ids are lowercase hex
  (not base64). 64-bit integers are strings, as protobuf's JSON mapping writes them.
* OTLP/HTTP posts the binary protobuf (``Content-Type: application/x-protobuf``) to ``URL/v1/traces``
  (or to URL itself when it already ends in ``/v1/traces``). An endpoint that cannot be reached,
  does not answer within ``TIMEOUT`` seconds or answers other than 2xx is ``ExportFailed`` (one line,
  exit 10); nothing is retried.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ..errors import ExportFailed, InvalidInput
from . import otel

TIMEOUT = 10.0  # seconds an OTLP/HTTP endpoint has to answer


def _pb() -> Any:
    """The generated protobuf modules (the ``otel`` extra), or InvalidInput naming the extra."""
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise InvalidInput(f"OTLP export needs the opentelemetry-proto package: pip install 'objstore[otel]' ({e})") from None
    return trace_service_pb2, common_pb2, resource_pb2, trace_pb2


def _any_value(common_pb2: Any, v: otel.Value) -> Any:
    if isinstance(v, bool):
        return common_pb2.AnyValue(bool_value=v)
    if isinstance(v, int):
        return common_pb2.AnyValue(int_value=v)
    if isinstance(v, float):
        return common_pb2.AnyValue(double_value=v)
    if isinstance(v, list):
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=[_any_value(common_pb2, x) for x in v]))
    return common_pb2.AnyValue(string_value=str(v))


def _attrs(common_pb2: Any, attrs: dict[str, otel.Value]) -> list[Any]:
    return [common_pb2.KeyValue(key=k, value=_any_value(common_pb2, v)) for k, v in sorted(attrs.items())]


def _ns(t: float) -> int:
    return max(0, round(t * 1_000_000_000))


def request(tr: otel.Trace, version: str = "") -> Any:
    """The ``ExportTraceServiceRequest`` of a trace: one resource (``service.name`` objstore), one scope
    (``objstore``, at ``version``: the caller's objstore version; this module does not import the package)."""
    trace_service_pb2, common_pb2, resource_pb2, trace_pb2 = _pb()
    spans = []
    for s in tr.spans:
        links = [trace_pb2.Span.Link(trace_id=ln.trace_id, span_id=ln.span_id, attributes=_attrs(common_pb2, ln.attributes))
                 for ln in s.links]
        spans.append(trace_pb2.Span(
            trace_id=tr.trace_id, span_id=s.span_id, parent_span_id=s.parent_id or b"", name=s.name, kind=s.kind,
            start_time_unix_nano=_ns(s.start), end_time_unix_nano=_ns(s.end), attributes=_attrs(common_pb2, s.attributes),
            links=links, status=trace_pb2.Status(code=s.status, message=s.message)))
    scope = trace_pb2.ScopeSpans(scope=common_pb2.InstrumentationScope(name=otel.SCOPE_NAME, version=version),
                                 spans=spans, schema_url=otel.SCHEMA_URL)
    resource = resource_pb2.Resource(attributes=_attrs(common_pb2, {"service.name": otel.SERVICE_NAME}))
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(resource=resource, scope_spans=[scope], schema_url=otel.SCHEMA_URL)])


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> Any:
    """protobuf's JSON writes bytes as base64; OTLP/JSON writes trace and span ids as hex."""
    import base64

    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids(x) for x in node]
    return node


def to_json(req: Any) -> dict:
    """The OTLP/JSON form of a request (see the module docstring)."""
    from google.protobuf import json_format

    d = json_format.MessageToDict(req, use_integers_for_enums=True, preserving_proto_field_name=False)
    return dict(_hex_ids(d))


def json_text(req: Any) -> str:
    return json.dumps(to_json(req), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def traces_url(endpoint: str) -> str:
    if not endpoint.startswith(("http://", "https://")):
        raise InvalidInput(f"an OTLP/HTTP endpoint is an http:// or https:// URL, got {endpoint!r}")
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def send(req: Any, endpoint: str, timeout: float = TIMEOUT) -> int:
    """POST the request as OTLP/HTTP protobuf; the HTTP status (2xx), or ExportFailed."""
    url = traces_url(endpoint)
    http = urllib.request.Request(url, data=req.SerializeToString(), method="POST",
                                  headers={"Content-Type": "application/x-protobuf", "User-Agent": "objstore"})
    try:
        with urllib.request.urlopen(http, timeout=timeout) as resp:  # noqa: S310 - the URL's scheme is checked above
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as e:
        raise ExportFailed(url, f"it answered HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise ExportFailed(url, str(e.reason)) from None
    except (OSError, TimeoutError) as e:
        raise ExportFailed(url, str(e) or type(e).__name__) from None
