"""One compose project per host, each driven through that host's own Docker engine (a Docker
context or an engine URL from the plan; this machine's engine when the plan names none)."""

from __future__ import annotations

from dataclasses import dataclass

from generator.docker import LOCAL, ComposeStack, DockerEndpoint, check_reachable
from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import HostPlan, Plan
from generator.render import ComposeProject, RenderedStack
from generator.workflow.engines import endpoint_of, host_endpoints

__all__ = ["HostStack", "host_stacks", "rendered_stacks"]

_REACH_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class HostStack:
    """One host of the stack: its compose project through that host's Docker engine
    (``compose``), and the same project through this machine's engine (``builder``: images
    are built here, where the build cache and base images are, then shipped)."""

    host: HostPlan
    project: ComposeProject
    endpoint: DockerEndpoint
    compose: ComposeStack
    builder: ComposeStack

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def local(self) -> bool:
        return self.endpoint.is_local


def host_stacks(plan: Plan, rendered: RenderedStack, workspace: Workspace) -> dict[str, HostStack]:
    """Every host that runs something, in the plan's order."""
    projects = {project.host: project for project in rendered.projects}
    endpoints = host_endpoints(plan)  # refuses two hosts through one engine
    stacks = {}
    for host in plan.hosts:
        if host.name in projects:
            project = projects[host.name]
            compose_file = workspace.root / project.compose_file
            endpoint = endpoints[host.name]
            compose = ComposeStack(compose_file, project.name, endpoint=endpoint)
            builder = ComposeStack(compose_file, project.name, endpoint=LOCAL)
            stacks[host.name] = HostStack(host, project, endpoint, compose, builder)
    return stacks


def rendered_stacks(
    stack: str, *, service: str | None = None, host: str | None = None
) -> list[tuple[str, ComposeStack]]:
    """(host, compose project on that host's engine) of a rendered stack, the engines checked:
    what `down`, `status` and `logs` act on (stacks rendered with --set overrides too)."""
    from generator.workbench import rendered_projects

    found = []
    for rendered in rendered_projects(stack):
        if host is not None and rendered.host != host:
            continue
        if service is not None and service not in rendered.services:
            continue
        endpoint = endpoint_of(rendered.host, rendered.docker)
        compose = ComposeStack(rendered.compose_file, rendered.project, endpoint=endpoint)
        check_reachable(endpoint, timeout_s=_REACH_TIMEOUT_S)
        found.append((rendered.host, compose))
    if not found:
        what = f"service {service!r}" if service else f"host {host!r}"
        raise XpydError(f"{stack} has no {what}", hint=f"python -m generator status {stack}")
    return found
