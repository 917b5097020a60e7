"""One runtime per host: a compose project driven through that host's own Docker engine (a
Docker context or an engine URL from the plan; this machine's engine when the plan names none),
or, under the process runtime, the host's services as local processes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.docker import LOCAL, ComposeStack, DockerEndpoint, check_reachable
from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import HostPlan, Plan
from generator.render import ComposeProject, RenderedStack
from generator.runtimes import ServiceRuntime
from generator.runtimes.process import ProcessStack, Pythons
from generator.spec import Isolation, ProcessSpec, Profile, Runtime
from generator.workflow.engines import endpoint_of, host_endpoints

__all__ = ["HostStack", "host_stacks", "rendered_stacks"]

_REACH_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class HostStack:
    """One host of the stack: what runs its services (``runtime``: its compose project through
    that host's Docker engine, or local processes), and for compose the same project through
    this machine's engine (``builder``: images are built here, where the build cache and base
    images are, then shipped; None under the process runtime, which builds nothing)."""

    host: HostPlan
    project: ComposeProject
    endpoint: DockerEndpoint
    runtime: ServiceRuntime
    builder: ComposeStack | None

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def local(self) -> bool:
        return self.endpoint.is_local


def host_stacks(
    plan: Plan, rendered: RenderedStack, workspace: Workspace, pythons: Pythons | None = None
) -> dict[str, HostStack]:
    """Every host that runs something, in the plan's order. ``pythons``: the interpreters of
    the process runtime (default: the plan's, else the env ``python -m generator env`` made)."""
    if plan.runtime is Runtime.PROCESS:
        return _process_stacks(plan, rendered, workspace, pythons)
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


def _process_stacks(
    plan: Plan, rendered: RenderedStack, workspace: Workspace, pythons: Pythons | None
) -> dict[str, HostStack]:
    projects = {project.host: project for project in rendered.projects}
    chosen = pythons or plan_pythons(plan, workspace)
    isolation = plan.process.isolation if plan.process else Isolation.PLAIN
    stacks = {}
    for process in rendered.processes:
        runtime = ProcessStack(process, workspace.root, chosen, isolation=isolation)
        host = plan.host(process.host)
        stacks[host.name] = HostStack(host, projects[host.name], LOCAL, runtime, None)
    return stacks


def plan_pythons(plan: Plan, workspace: Workspace) -> Pythons:
    """The process runtime's interpreters: the spec's (process.python / router_python), else
    the ones `python -m generator env` makes under .cache/env/."""
    return settings_pythons(plan.process or ProcessSpec(), plan.profile, workspace)


def settings_pythons(settings: ProcessSpec, profile: Profile, workspace: Workspace) -> Pythons:
    from generator.envs import default_pythons

    defaults = default_pythons(workspace, profile)
    return Pythons(
        engine=Path(settings.python) if settings.python else defaults.engine,
        router=Path(settings.router_python) if settings.router_python else defaults.router,
    )


def rendered_stacks(
    stack: str, *, service: str | None = None, host: str | None = None
) -> list[tuple[str, ServiceRuntime]]:
    """(host, what runs that host's services) of a rendered stack, the engines checked: what
    `down`, `status` and `logs` act on (stacks rendered with --set overrides too). A host
    rendered for the process runtime is read back from its processes.yaml and state."""
    from generator.paths import find_workspace
    from generator.runtimes.process import rendered_process_stack
    from generator.workbench import rendered_projects

    workspace = find_workspace()
    found: list[tuple[str, ServiceRuntime]] = []
    for rendered in rendered_projects(stack):
        if host is not None and rendered.host != host:
            continue
        if service is not None and service not in rendered.services:
            continue
        if rendered.process_file is not None:
            pythons = settings_pythons(rendered.process, rendered.profile, workspace)
            runtime = rendered_process_stack(
                rendered.process_file, workspace.root, pythons, rendered.process.isolation
            )
            found.append((rendered.host, runtime))
            continue
        endpoint = endpoint_of(rendered.host, rendered.docker)
        compose = ComposeStack(rendered.compose_file, rendered.project, endpoint=endpoint)
        check_reachable(endpoint, timeout_s=_REACH_TIMEOUT_S)
        found.append((rendered.host, compose))
    if not found:
        what = f"service {service!r}" if service else f"host {host!r}"
        raise XpydError(f"{stack} has no {what}", hint=f"python -m generator status {stack}")
    return found
