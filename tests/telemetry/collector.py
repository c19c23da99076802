"""A real OTLP/HTTP receiver on loopback: accepts protobuf POSTs to /v1/traces and /v1/metrics
and decodes them with the opentelemetry-proto classes, for tests to assert on."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PATHS = ("/v1/traces", "/v1/metrics")


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    resource: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReceivedPoint:
    metric: str
    attributes: dict[str, Any]
    value: float  # a sum's value, or a histogram's count
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items if isinstance(item, KeyValue)}


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)
    posts: list[str] = field(default_factory=list)  # the path of every POST, in order

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  # http.server's handler naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path not in PATHS:
                    self.send_response(404)
                    self.end_headers()
                    return
                answer = receiver._receive(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _receive(self, path: str, body: bytes) -> bytes:
        with self._lock:
            self.posts.append(path)
            if path == "/v1/traces":
                traces = ExportTraceServiceRequest.FromString(body)
                for resource_spans in traces.resource_spans:
                    resource = _attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        self.spans.extend(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes=_attributes(span.attributes),
                                resource=resource,
                            )
                            for span in scope_spans.spans
                        )
                return ExportTraceServiceResponse().SerializeToString()
            metrics = ExportMetricsServiceRequest.FromString(body)
            for resource_metrics in metrics.resource_metrics:
                resource = _attributes(resource_metrics.resource.attributes)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            if kind == "histogram":
                                value = float(point.count)
                            else:
                                value = float(point.as_int if point.HasField("as_int") else point.as_double)
                            self.points.append(
                                ReceivedPoint(metric.name, _attributes(point.attributes), value, resource)
                            )
            return ExportMetricsServiceResponse().SerializeToString()

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def metric_names(self) -> set[str]:
        with self._lock:
            return {point.metric for point in self.points}

    def latest(self, metric: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """The last exported value of each attribute set of a (cumulative) metric."""
        with self._lock:
            values: dict[tuple[tuple[str, Any], ...], float] = {}
            for point in self.points:
                if point.metric == metric:
                    values[tuple(sorted(point.attributes.items()))] = point.value
            return values
