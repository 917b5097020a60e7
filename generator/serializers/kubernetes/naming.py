"""Names and labels of the Kubernetes export: which labels pick a stack's pods, what each
container port is called (ports are named: probes and PodMonitors refer to them by name), and
the rules Kubernetes holds names to."""

from __future__ import annotations

import re
from typing import Final

from generator.plan.models import ENGINE_LABEL, ENGINE_LABEL_VALUE, ROLE_LABEL, STACK_LABEL

__all__ = [
    "INSTANCE_LABEL",
    "ROLE_LABEL",
    "STACK_LABEL",
    "is_dns_label",
    "is_port_name",
    "namespace_of",
    "pod_labels",
    "port_name",
]

INSTANCE_LABEL: Final = "xpyd.org/instance"  # the engine (or router) a pod runs

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_PORT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MAX_DNS_LABEL = 63
_MAX_PORT_NAME = 15
_RANK = re.compile(r"\(tp rank (\d+)\)")

# A port's purpose in the plan (PortUse.purpose, its rank suffix dropped) -> its name.
_PORT_NAMES: Final = {
    "vLLM http": "http",
    "router port": "http",
    "router metrics": "metrics",
    "proxy ZMQ notices": "notices",
    "NIXL side channel": "nixl-side",
    "NIXL telemetry (Prometheus)": "nixl-metrics",
    "LMCache ZMQ": "lmc-zmq",
    "LMCache http": "lmc-http",
    "LMCache metrics": "lmc-metrics",
    "LMCache P2P transfer channel": "lmc-p2p",
    "LMCache coordinator": "coordinator",
    "LMCache P/D init": "pd-init",
    "LMCache P/D alloc": "pd-alloc",
    "torch.distributed rendezvous (its nodes' TP group)": "rendezvous",
    "its supervisor's page (a node of an engine over several hosts)": "node-page",
}


def port_name(purpose: str, port: int) -> str:
    """A container port's name: its purpose (with its TP rank), else its number."""
    rank = _RANK.search(purpose)
    base = _PORT_NAMES.get(_RANK.sub("", purpose).strip())
    if base is None:
        return f"port-{port}"
    return f"{base}-{rank.group(1)}" if rank else base


def is_port_name(name: str) -> bool:
    """IANA_SVC_NAME, as Kubernetes checks a named port: at most 15 characters, a letter."""
    return (
        len(name) <= _MAX_PORT_NAME
        and _PORT_NAME.fullmatch(name) is not None
        and "--" not in name
        and any(c.isalpha() for c in name)
    )


def is_dns_label(name: str) -> bool:
    """RFC 1035 label (a Service's name: it becomes a DNS name)."""
    return len(name) <= _MAX_DNS_LABEL and _DNS_LABEL.fullmatch(name) is not None


def namespace_of(stack: str) -> str:
    return stack if stack.startswith("xpyd") else f"xpyd-{stack}"


def pod_labels(stack: str, role: str, instance: str, *, engine: bool = False) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "xpyd",
        "app.kubernetes.io/instance": stack,
        "app.kubernetes.io/component": role,
        STACK_LABEL: stack,
        ROLE_LABEL: role,
        INSTANCE_LABEL: instance,
    }
    return labels | ({ENGINE_LABEL: ENGINE_LABEL_VALUE} if engine else {})
