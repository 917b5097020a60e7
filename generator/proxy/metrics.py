"""Prometheus metrics of the proxy (its own registry: nothing leaks in from libraries)."""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

__all__ = ["ProxyMetrics"]

M = TypeVar("M", bound=MetricWrapperBase)

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ProxyMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.requests = Counter(
            "xpyd_proxy_requests", "Client requests", ["endpoint", "status"], registry=r
        )
        self.errors = Counter(
            "xpyd_proxy_errors", "Failed requests by stage", ["stage", "backend"], registry=r
        )
        self.migrations = Counter(
            "xpyd_proxy_migrations",
            "Requests sent again through another pair after a failure before their answer began",
            ["side", "reason"],
            registry=r,
        )
        self.held = Gauge(
            "xpyd_proxy_held_requests",
            "Requests waiting for a prefiller or decoder to come back into rotation",
            registry=r,
        )
        self.backend_requests = Counter(
            "xpyd_proxy_backend_requests",
            "Requests sent to a backend",
            ["role", "backend"],
            registry=r,
        )
        self.prefill_seconds = Histogram(
            "xpyd_proxy_prefill_seconds",
            "Prefill request time",
            ["backend"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.kv_wait_seconds = Histogram(
            "xpyd_proxy_kv_wait_seconds",
            "Wait for LMCache KV-sent notices after the prefill answered",
            ["backend"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decode_ttft_seconds = Histogram(
            "xpyd_proxy_decode_ttft_seconds",
            "Decode request to first byte",
            ["backend"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.outstanding = Gauge(
            "xpyd_proxy_outstanding",
            "Requests in flight per backend",
            ["role", "backend"],
            registry=r,
        )
        self.notices = Gauge(
            "xpyd_proxy_kv_notices",
            "Messages on the KV-notice port: accepted notices and rejected input",
            ["outcome"],
            registry=r,
        )
        self.healthy = Gauge(
            "xpyd_proxy_backend_healthy",
            "1 if the backend is in rotation",
            ["role", "backend"],
            registry=r,
        )

    def of(self, metric: M, *labels: str) -> M:
        """``metric.labels(*labels)``, looked up once: label values come from small sets (backend
        names, stages, statuses) and a lookup per request costs ~1 us each, five per request."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
