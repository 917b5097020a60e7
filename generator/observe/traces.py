"""OTLP traces (``observe.traces``): a receiver on the first host takes the engines' traces
(vLLM's ``--otlp-traces-endpoint``) over gRPC.

- GPU hosts under compose: the OpenTelemetry Collector (pinned image), which logs them (its
  ``debug`` exporter: point it at your trace store by editing nothing but its config). LMCache
  servers send none there: with ``--otlp-endpoint`` LMCache pushes its metrics too, and the
  Collector's config has no metrics pipeline.
- Elsewhere (the cpu profile; the process and Slurm runtimes, where no image comes): our own
  receiver (generator/observe/otlp_receiver.py), and the LMCache servers trace too, as
  LMCache's MP docs show (``--enable-tracing --otlp-endpoint``). Their metrics then come from
  the receiver's /metrics, where they push them."""

from __future__ import annotations

from typing import Any, Final

from generator.plan import Plan
from generator.plan.traces import collector_bind

__all__ = ["OTEL_CONFIG_PATH", "collector_config"]

OTEL_CONFIG_PATH: Final = "/etc/otelcol/config.yaml"  # the upstream image's default


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
