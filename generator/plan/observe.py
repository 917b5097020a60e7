"""The plan's observability part (spec ``observe``): where Prometheus, Grafana and the OTLP
collector run and listen. The planner claims their ports after every other port of the
stack, so a stack with ``observe`` off plans (and renders) exactly as without it."""

from __future__ import annotations

from typing import Final

from generator.plan.frozen import Frozen

__all__ = [
    "GRAFANA_SERVICE",
    "OBSERVE_PORT_FIELDS",
    "OTEL_SERVICE",
    "PROMETHEUS_SERVICE",
    "RECEIVER_SERVICE",
    "ObservePlan",
]

PROMETHEUS_SERVICE: Final = "prometheus"
GRAFANA_SERVICE: Final = "grafana"
OTEL_SERVICE: Final = "otel-collector"
# Ours (generator/observe/otlp_receiver.py), where the collector's image cannot come: the cpu
# profile, the process and Slurm runtimes.
RECEIVER_SERVICE: Final = "otlp-receiver"
OBSERVE_PORT_FIELDS: Final = ("prometheus", "grafana", "otel_collector", "otlp_receiver_http")


class ObservePlan(Frozen):
    host: str  # the stack's first host runs all three
    address: str  # its address
    scrape_interval_s: int
    public: bool  # published on every interface; else the host only
    prometheus_port: int
    grafana_port: int | None = None  # None: no Grafana (the cpu profile, or observe.grafana off)
    otel_port: int | None = None  # OTLP over gRPC; None: no traces
    # Set: our receiver takes the traces (its HTTP port: /spans, and the metrics LMCache
    # servers push once they trace); None: the OpenTelemetry Collector does.
    receiver_http_port: int | None = None
    kv_floor_gib_s: float | None = None  # the user's floor; None: the verdict's for the KV path

    @property
    def services(self) -> tuple[str, ...]:
        optional = ((GRAFANA_SERVICE, self.grafana_port), (self.traces_service, self.otel_port))
        return (PROMETHEUS_SERVICE, *(name for name, port in optional if port is not None))

    @property
    def traces_service(self) -> str:
        return OTEL_SERVICE if self.receiver_http_port is None else RECEIVER_SERVICE
