"""OTLP traces (``observe.traces``, GPU hosts): an OpenTelemetry collector on the first host
receives the engines' traces (vLLM's ``--otlp-traces-endpoint``) over gRPC and logs them
(its ``debug`` exporter: no trace store is part of the stack; point it at yours by editing
nothing but this config). LMCache servers do not send theirs: with ``--otlp-endpoint``
LMCache pushes its metrics there too and its own /metrics, which Prometheus and the verdict
read, goes away."""

from __future__ import annotations

from typing import Any, Final

from generator.plan import Plan
from generator.plan.observe import OTEL_SERVICE

__all__ = ["OTEL_CONFIG_PATH", "collector_bind", "collector_config", "traces_endpoint"]

OTEL_CONFIG_PATH: Final = "/etc/otelcol/config.yaml"  # the upstream image's default


def _across_hosts(plan: Plan) -> bool:
    return plan.is_multi_host or (plan.observe is not None and plan.observe.public)


def collector_bind(plan: Plan) -> str:
    """Loopback unless engines on other hosts send to it (or observe.publish)."""
    return "0.0.0.0" if plan.network == "bridge" or _across_hosts(plan) else "127.0.0.1"


def traces_endpoint(plan: Plan) -> str | None:
    """Where the engines send their spans (None: traces off)."""
    observe = plan.observe
    if observe is None or observe.otel_port is None:
        return None
    if plan.network == "bridge":
        host = OTEL_SERVICE
    else:
        host = observe.address if plan.is_multi_host else "127.0.0.1"
    return f"grpc://{host}:{observe.otel_port}"


def collector_config(plan: Plan, port: int) -> dict[str, Any]:
    receiver = {"protocols": {"grpc": {"endpoint": f"{collector_bind(plan)}:{port}"}}}
    return {
        "receivers": {"otlp": receiver},
        "processors": {"batch": {}},
        "exporters": {"debug": {"verbosity": "basic"}},
        "service": {
            # The collector's own metrics would listen on :8888 of a host-networked host.
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["debug"]}
            },
        },
    }
