"""The host ports a stack takes, and who already holds one (a process, and whether it is a
common cluster agent's default port). Used by doctor and by `up`'s preflight."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import psutil

from generator.plan import Plan
from generator.plan.agent_ports import agent_on
from generator.render import ComposeProject

__all__ = ["HostPort", "busy_ports", "holder_of", "published_ports"]


@dataclass(frozen=True)
class HostPort:
    address: str  # what to bind to test it: 127.0.0.1, 0.0.0.0 or a host address
    port: int
    owner: str  # the stack's service that needs it
    purpose: str


def published_ports(plan: Plan, project: ComposeProject) -> list[HostPort]:
    """Ports the stack takes on this host: every planned port with host networking, the
    published ones on a bridge."""
    uses = {use.port: use for use in plan.ports if use.host == project.host}
    if plan.network == "host":
        return [HostPort("0.0.0.0", use.port, use.owner, use.purpose) for use in uses.values()]
    found = []
    for service, definition in project.document["services"].items():
        for mapping in definition.get("ports", []):
            parts = str(mapping).split(":")
            address = parts[0] if len(parts) == 3 else "0.0.0.0"
            port = int(parts[-2])
            purpose = uses[port].purpose if port in uses else "published port"
            found.append(HostPort(address, port, service, purpose))
    return found


def busy_ports(ports: list[HostPort], running_services: set[str]) -> list[HostPort]:
    """Ports someone else already listens on (this stack's running services excepted)."""
    return [
        p for p in ports if p.owner not in running_services and not _can_bind(p.address, p.port)
    ]


def _can_bind(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def holder_of(port: int) -> str:
    """Who listens on ``port``: "pid 123 (node_exporter)", plus the agent that usually does."""
    names = []
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        connections = []
    for connection in connections:
        local = connection.laddr
        if connection.status == psutil.CONN_LISTEN and local and local.port == port:
            names.append(_process_name(connection.pid, port))
    agent = agent_on(port)
    held = ", ".join(sorted(set(names))) or "a process this user cannot see"
    return held + (f"; {port} is the default port of {agent}" if agent else "")


def _process_name(pid: int | None, port: int) -> str:
    if pid is None:
        return "a process in another namespace (a container?)"
    try:
        name = psutil.Process(pid).name()
    except psutil.Error:
        return f"pid {pid}"
    if name == "docker-proxy":  # a container's published port: name the container
        from generator.docker import container_publishing

        container = container_publishing(port)
        return f"container {container}" if container else f"pid {pid} (docker-proxy)"
    return f"pid {pid} ({name})"
