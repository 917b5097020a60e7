"""The host ports a stack takes, and who already holds one (a process, and whether it is a
common cluster agent's default port). Used by doctor and by `up`'s preflight."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from generator.plan import Plan
from generator.plan.agent_ports import agent_on
from generator.render import ComposeProject
from generator.runtimes.base import ServiceState

__all__ = [
    "HostPort",
    "busy_ports",
    "ephemeral_range",
    "holder_of",
    "orphan_ports",
    "published_ports",
]


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
    return [
        HostPort(
            published.address,
            published.port,
            service.name,
            uses[published.port].purpose if published.port in uses else "published port",
        )
        for service in project.host_services.services
        for published in service.ports
    ]


def orphan_ports(
    states: Iterable[ServiceState], planned: Iterable[str]
) -> dict[str, frozenset[int]]:
    """Running services of the project that its file no longer has (an earlier variant of the
    stack) and the host ports they publish: `up` removes them when it starts the stack."""
    wanted = set(planned)
    return {
        state.service: frozenset(_host_port(binding) for binding in state.ports)
        for state in states
        if state.status == "running" and state.service not in wanted
    }


def _host_port(binding: str) -> int:
    # "127.0.0.1:18091->18091/tcp" (ServiceState.ports)
    return int(binding.split("->", 1)[0].rsplit(":", 1)[1])


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
    """Who holds ``port``: "pid 123 (node_exporter)", plus the agent that usually listens
    there; or the connection whose local end it is (an outgoing connection's ephemeral port)."""
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        connections = []
    mine = [c for c in connections if c.laddr and c.laddr.port == port]
    listeners = [c for c in mine if c.status == psutil.CONN_LISTEN]
    names = sorted({_process_name(c.pid, port) for c in listeners})
    if not names and mine:
        who = sorted({_process_name(c.pid, port) for c in mine})
        names = [f"an outgoing connection of {', '.join(who)} (its local end; {_ephemeral(port)})"]
    agent = agent_on(port)
    held = ", ".join(names) or "a process this user cannot see"
    return held + (f"; {port} is the default port of {agent}" if agent else "")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _ephemeral(port: int) -> str:
    low, high = ephemeral_range()
    inside = low <= port <= high
    return f"{port} is {'inside' if inside else 'outside'} the ephemeral range {low}-{high}"


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
