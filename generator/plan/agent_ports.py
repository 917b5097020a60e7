"""Ports that cluster agents commonly hold on GPU hosts. Automatic port blocks skip them; a
port the user fixed on one of them gets a plan warning, and preflight/doctor name the agent
when the port is really taken."""

from __future__ import annotations

__all__ = ["AGENT_PORTS", "agent_on"]

AGENT_PORTS: dict[int, str] = {
    2379: "etcd client",
    2380: "etcd peer",
    3000: "Grafana",
    4194: "cAdvisor",
    4317: "OpenTelemetry collector (OTLP gRPC)",
    4318: "OpenTelemetry collector (OTLP HTTP)",
    6443: "Kubernetes API server",
    8126: "Datadog agent (APM)",
    9090: "Prometheus",
    9091: "Prometheus Pushgateway",
    9093: "Alertmanager",
    9094: "Alertmanager (cluster)",
    9100: "Prometheus node_exporter",
    9400: "NVIDIA DCGM exporter",
    10250: "kubelet",
    10255: "kubelet (read-only)",
    10256: "kube-proxy health",
}


def agent_on(port: int) -> str | None:
    return AGENT_PORTS.get(port)
