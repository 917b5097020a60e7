"""Config files the units hand to the services: plain data below the units (topologies and
routers return it), which the service model and the serializers place and write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ConfigFile", "MetricsPage"]


@dataclass(frozen=True)
class ConfigFile:
    """A config file a service reads, rendered beside its host's deployment files."""

    name: str  # the file's name in the deployment (compose: the config's name)
    path: str  # where it is written, relative to the host's folder
    target: str  # where the container reads it
    data: dict[str, Any]  # dumped as YAML
    text: str | None = None  # written as it is instead (a JSON file: Grafana's dashboard)


# What publishes a Prometheus page: vLLM's API server, an `lmcache server`, NIXL's telemetry
# exporter (lmcache-pd prefillers), our proxy, vllm-router.
Part = Literal["vllm", "lmcache", "nixl-telemetry", "proxy", "vllm-router"]


@dataclass(frozen=True)
class MetricsPage:
    """A Prometheus page one of the stack's services serves, and where a scraper among the
    stack's services (observe's Prometheus, on the first host) reaches it."""

    part: Part
    service: str
    role: str  # prefill | decode | lmcache | router
    host: str
    address: str  # a service name on a bridge; with host networking an address of its host
    port: int
    engine: str | None = None  # the engine it serves or is (None: the router)
    path: str = "/metrics"
    pushed: bool = False  # series pushed to our OTLP receiver by their senders, served there
