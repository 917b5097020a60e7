"""What every doctor check reads: the plan, the host being checked, its rendered compose
project, and facts gathered once (Docker engine, GPUs, links, running services)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from generator.docker import EngineFacts
from generator.doctor.gpus import GpuInfo
from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import EnginePlan, HostPlan, Plan
from generator.render import ComposeProject, RenderedStack

__all__ = ["HostView", "local_addresses", "pick_host"]


@dataclass(frozen=True)
class HostView:
    plan: Plan
    host: HostPlan
    project: ComposeProject
    workspace: Workspace
    facts: EngineFacts | None  # None: no Docker engine answers
    gpus: list[GpuInfo] | None  # None: no nvidia-smi or no driver
    links: dict[tuple[int, int], str] | None
    running: frozenset[str]  # this stack's services already running on this host
    # Running services the file no longer has, with the host ports they publish (orphan_ports).
    orphans: Mapping[str, frozenset[int]] = field(default_factory=dict)

    @property
    def engines(self) -> tuple[EnginePlan, ...]:
        return self.plan.engines_on(self.host.name)

    @property
    def gpu_profile(self) -> bool:
        return self.plan.profile.value == "gpu"


def local_addresses() -> set[str]:
    addresses = {"127.0.0.1", "0.0.0.0"}
    for entries in psutil.net_if_addrs().values():
        addresses |= {entry.address for entry in entries if entry.family.name == "AF_INET"}
    return addresses


def pick_host(plan: Plan, rendered: RenderedStack, name: str | None) -> ComposeProject:
    """The compose project of the host to check: the one named, the only one, or the one whose
    address is on this machine."""
    projects = {project.host: project for project in rendered.projects}
    if name is not None:
        if name not in projects:
            raise XpydError(
                f"{plan.stack} has no services on a host named {name!r}",
                hint=f"use --host with one of: {', '.join(projects)}",
            )
        return projects[name]
    if len(projects) == 1:
        return next(iter(projects.values()))
    local = local_addresses()
    mine = [plan.host(host).name for host in projects if plan.host(host).address in local]
    if len(mine) == 1:
        return projects[mine[0]]
    raise XpydError(
        f"{plan.stack} spans {len(projects)} hosts and this machine's addresses match "
        f"{len(mine)} of them",
        hint=f"run doctor on each host with --host NAME ({', '.join(projects)})",
    )
