"""Checks before anything starts: one host, Docker answers, the host ports are free."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from generator.errors import StackError
from generator.plan import Plan
from generator.render import ComposeProject

__all__ = ["HostPort", "busy_ports", "published_ports"]


@dataclass(frozen=True)
class HostPort:
    address: str  # what to bind to test it: 127.0.0.1 or 0.0.0.0
    port: int
    owner: str
    purpose: str


def published_ports(plan: Plan, project: ComposeProject) -> list[HostPort]:
    """Ports the stack takes on this host: every planned port with host networking, the
    published ones on a bridge."""
    uses = {(use.port): use for use in plan.ports if use.host == project.host}
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


def describe_busy(busy: list[HostPort]) -> StackError:
    lines = "\n".join(f"  {p.address}:{p.port} ({p.owner}: {p.purpose})" for p in busy)
    first = busy[0].port
    return StackError(
        f"{len(busy)} port(s) this stack needs are already in use on this host:\n{lines}",
        hint=f"stop what holds them (ss -ltnp 'sport = :{first}'), or move the stack's ports "
        "(--set router.port=..., ports.* bases in the spec)",
    )
