"""A real OTLP receiver for stacks where the OpenTelemetry Collector's image cannot come (the cpu
profile; the process and Slurm runtimes): OTLP's gRPC trace and metrics services, as vLLM's
``--otlp-traces-endpoint`` and LMCache's ``--enable-tracing --otlp-endpoint`` export to them.

Runs inside the engine image (``/opt/xpyd/otlp_receiver.py``) or with the engine Python, where
grpcio, opentelemetry-proto, opentelemetry-exporter-prometheus and prometheus_client come with
the engine lock; it never imports the xpyd package.

    python3 otlp_receiver.py --grpc HOST:PORT --http HOST:PORT

HTTP on ``--http``:

- ``/health``: 200 once both servers listen.
- ``/spans``: JSON, the spans received per sending service and span name (a service is its
  ``service.name``, else its ``service.instance.id``), with when the last batch came.
- ``/metrics``: the metrics each sender pushed last, in Prometheus's text format, each series
  labelled ``engine=<its service.instance.id>``. LMCache's server serves its own metrics only
  while it has no OTLP endpoint: with one it pushes them (every 10 s) and its /metrics keeps
  Python's process counters alone, so Prometheus scrapes them here. Names are translated as
  opentelemetry-exporter-prometheus translates them for LMCache's own page (its mapping
  functions), so dashboards and rules read the same series either way.

What is kept is bounded: the last data of at most ``MAX_METRICS`` metrics, span counts for at
most ``MAX_SPAN_KEYS`` (service, name) pairs (the rest are counted under ``(other)``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.exporter.prometheus._mapping import (  # the exporter's own name mapping
    map_unit,
    sanitize_attribute,
    sanitize_full_name,
)
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

MAX_METRICS = 5000
MAX_SPAN_KEYS = 1000
OTHER = "(other)"
ENGINE_LABEL = "engine"
_CUMULATIVE = metrics_pb2.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        found[pair.key] = str(getattr(value, kind)) if kind in _SCALARS else ""
    return found


_SCALARS = ("string_value", "bool_value", "int_value", "double_value")


def _sender(resource: dict[str, str]) -> str:
    name = resource.get("service.name", "")
    if name and not name.startswith("unknown_service"):
        return name
    return resource.get("service.instance.id") or name or "unknown"


@dataclass
class Received:
    """What came in, under one lock (gRPC's and HTTP's threads share it)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    spans: dict[tuple[str, str], int] = field(default_factory=dict)
    last_span_at: dict[str, float] = field(default_factory=dict)
    # (instance, metric name) -> the last data of that metric from that sender
    metrics: dict[tuple[str, str], metrics_pb2.Metric] = field(default_factory=dict)

    def add_spans(self, request: trace_service_pb2.ExportTraceServiceRequest) -> int:
        count = 0
        with self.lock:
            for resource_spans in request.resource_spans:
                sender = _sender(_attributes(resource_spans.resource.attributes))
                self.last_span_at[sender] = time.time()
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        key = (sender, span.name)
                        if key not in self.spans and len(self.spans) >= MAX_SPAN_KEYS:
                            key = (sender, OTHER)
                        self.spans[key] = self.spans.get(key, 0) + 1
                        count += 1
        return count

    def add_metrics(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            for resource_metrics in request.resource_metrics:
                resource = _attributes(resource_metrics.resource.attributes)
                instance = resource.get("service.instance.id") or _sender(resource)
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        key = (instance, metric.name)
                        if key in self.metrics or len(self.metrics) < MAX_METRICS:
                            self.metrics[key] = metric

    def span_report(self) -> dict[str, Any]:
        with self.lock:
            senders: dict[str, dict[str, Any]] = {}
            for (sender, name), count in sorted(self.spans.items()):
                entry = senders.setdefault(sender, {"spans": 0, "names": {}})
                entry["spans"] += count
                entry["names"][name] = count
            for sender, at in self.last_span_at.items():
                senders.setdefault(sender, {"spans": 0, "names": {}})["last_at"] = at
            return {"senders": senders}

    def snapshot(self) -> list[tuple[str, metrics_pb2.Metric]]:
        with self.lock:
            return [(instance, metric) for (instance, _), metric in self.metrics.items()]


class _Families:
    """Prometheus metric families built from OTLP metrics, one per name and kind, their label
    keys the union over every data point (missing ones empty), as the exporter builds them."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, str, str, str], list[tuple[dict[str, str], Any]]] = {}

    def add(self, instance: str, metric: metrics_pb2.Metric) -> None:
        kind = metric.WhichOneof("data")
        if kind == "sum":
            counter = metric.sum.is_monotonic or metric.sum.aggregation_temporality != _CUMULATIVE
            family, points = ("counter" if counter else "gauge"), metric.sum.data_points
        elif kind == "gauge":
            family, points = "gauge", metric.gauge.data_points
        elif kind == "histogram":
            family, points = "histogram", metric.histogram.data_points
        else:
            return  # exponential histograms and summaries: none of our senders push them
        key = (sanitize_full_name(metric.name), metric.description, map_unit(metric.unit), family)
        rows = self.points.setdefault(key, [])
        for point in points:
            labels = {sanitize_attribute(k): v for k, v in _attributes(point.attributes).items()}
            labels.setdefault(ENGINE_LABEL, instance)
            rows.append((labels, point))

    def families(self) -> Iterator[Metric]:
        for (name, description, unit, kind), rows in self.points.items():
            keys = sorted({key for labels, _ in rows for key in labels})
            made: Metric
            if kind == "histogram":
                made = HistogramMetricFamily(name, description, labels=keys, unit=unit)
            elif kind == "counter":
                made = CounterMetricFamily(name, description, labels=keys, unit=unit)
            else:
                made = GaugeMetricFamily(name, description, labels=keys, unit=unit)
            for labels, point in rows:
                values = [labels.get(key, "") for key in keys]
                if isinstance(made, HistogramMetricFamily):
                    made.add_metric(values, _buckets(point), sum_value=point.sum)
                else:
                    value = point.as_double if point.HasField("as_double") else point.as_int
                    made.add_metric(values, float(value))
            yield made


def _buckets(point: metrics_pb2.HistogramDataPoint) -> list[tuple[str, float]]:
    """Cumulative counts per upper bound, +Inf last (Prometheus's buckets)."""
    bounds = [*(f"{bound}" for bound in point.explicit_bounds), "+Inf"]
    total, buckets = 0, []
    for bound, count in zip(bounds, point.bucket_counts, strict=False):
        total += count
        buckets.append((bound, float(total)))
    return buckets


class _Collector:
    def __init__(self, received: Received) -> None:
        self.received = received

    def collect(self) -> Iterator[Metric]:
        built = _Families()
        for instance, metric in self.received.snapshot():
            built.add(instance, metric)
        yield from built.families()


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.received.add_spans(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: object
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self.received.add_metrics(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


def _http_handler(received: Received, registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/spans":
                body = json.dumps(received.span_report(), sort_keys=True).encode()
                self._send(200, body, "application/json")
            elif path == "/metrics":
                self._send(200, generate_latest(registry), "text/plain; version=0.0.4")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # Prometheus asks every few seconds: the log keeps what came in

    return Handler


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--grpc", type=_address, required=True, help="OTLP/gRPC HOST:PORT")
    parser.add_argument("--http", type=_address, required=True, help="/spans, /metrics HOST:PORT")
    args = parser.parse_args(argv)
    received = Received()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(received))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(received), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(received), server)
    grpc_host, grpc_port = args.grpc
    if server.add_insecure_port(f"{grpc_host}:{grpc_port}") == 0:
        print(f"otlp_receiver: cannot listen on {grpc_host}:{grpc_port}", file=sys.stderr)
        return 1
    server.start()
    http = ThreadingHTTPServer(args.http, _http_handler(received, registry))
    print(f"otlp_receiver: OTLP/gRPC on {grpc_host}:{grpc_port}, HTTP on "
          f"{args.http[0]}:{args.http[1]}", flush=True)  # fmt: skip
    try:
        http.serve_forever()
    finally:
        server.stop(grace=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
