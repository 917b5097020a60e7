"""Docker Compose's driver: one compose project per host, through that host's own Docker
engine (``hosts[].docker``, else this machine's), from images built here, then shipped to the
hosts whose engine is another machine's. Compose's types stay here and in generator/docker/."""

from __future__ import annotations

from typing import TYPE_CHECKING

from generator.docker import LOCAL, ComposeStack, check_reachable
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import RenderedStack
from generator.runtimes import ServiceRuntime
from generator.spec import Profile, Runtime
from generator.workflow.builder import MINUTE, GraphBuilder
from generator.workflow.context import RunContext
from generator.workflow.engines import endpoint_of, host_endpoints
from generator.workflow.hosts import HostStack
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.runtimes.docker_host import DockerHost
from generator.workflow.steps import images
from generator.workflow.steps.prepare import doctor_checks
from generator.workflow.task import Task

if TYPE_CHECKING:
    from generator.workbench import RenderedHost

__all__ = ["DRIVER"]

_REACH_TIMEOUT_S = 20.0
_BUILD_LIMIT_S = {Profile.GPU: 120 * MINUTE, Profile.CPU: 45 * MINUTE}
_SHIP_LIMIT_S = 60 * MINUTE  # a GPU engine image is ~20 GB over ssh


class _ComposeDriver:
    kind = Runtime.COMPOSE

    def require(self) -> None:
        from generator.docker import require_docker

        require_docker()

    def place(self, plan: Plan, workspace: Workspace, reporter: Reporter) -> list[str]:
        return []  # the spec says where each host is

    def placed(self, plan: Plan, workspace: Workspace) -> list[str]:
        return []

    def release(self, stack: str, workspace: Workspace) -> str | None:
        return None  # nothing beyond the services

    def allocation_ended(self, stack: str, workspace: Workspace) -> str | None:
        return None  # the services run on hosts nothing allocates

    def host_stacks(
        self, plan: Plan, rendered: RenderedStack, workspace: Workspace
    ) -> dict[str, HostStack]:
        projects = {project.host: project for project in rendered.projects}
        endpoints = host_endpoints(plan)  # refuses two hosts through one engine
        stacks: dict[str, HostStack] = {}
        for host in plan.hosts:
            if host.name not in projects:
                continue
            project = projects[host.name]
            compose_file = workspace.root / project.compose_file
            endpoint = endpoints[host.name]
            compose = ComposeStack(compose_file, project.name, endpoint=endpoint)
            builder = ComposeStack(compose_file, project.name, endpoint=LOCAL)
            services = project.host_services
            stacks[host.name] = DockerHost(host, services, compose, endpoint, builder)
        return stacks

    def preflight(self, context: RunContext) -> str:
        """Every host's engine answers and the base images are there, then doctor's checks
        on the hosts this machine is (they read this machine's ports, GPUs and /dev/shm)."""
        from generator.docker import ensure_image

        hosts = [stack for stack in context.hosts.values() if isinstance(stack, DockerHost)]
        for stack in hosts:
            check_reachable(stack.endpoint, timeout_s=_REACH_TIMEOUT_S)
        for image in context.rendered.images:
            ensure_image(image.from_image)
        checked = [doctor_checks(context, stack) for stack in hosts if stack.local]
        remote = [stack.name for stack in hosts if not stack.local]
        if remote:
            context.progress(
                f"hosts {', '.join(remote)}: run `python -m generator doctor "
                f"{context.plan.stack} --host NAME` on each for its host checks",
                EventLevel.WARN,
            )
        return f"{len(context.hosts)} engine(s) answer; " + ", ".join(checked)

    def prepare(self, g: GraphBuilder, after: Task) -> tuple[Task, Task]:
        wheels = g.add(
            "wheels",
            images.fetch_wheels,
            "download the wheels the images install",
            30 * MINUTE,
            after,
        )
        limit = _BUILD_LIMIT_S[g.plan.profile]
        engines = g.add(
            "build-engines",
            images.build_engine_images,
            "build the prefill/decode/lmcache images on this machine's engine",
            limit,
            wheels,
        )
        built = "the router image" + (" and Prometheus's" if _builds_prometheus(g.plan) else "")
        router = g.add("build-router", images.build_router_image, f"build {built}", limit, wheels)
        return engines, router

    def deliver(self, g: GraphBuilder, host: str, after: list[Task]) -> Task | None:
        """Images to a host whose engine is not this machine's (no registry: save | load)."""
        if not g.plan.host(host).services or not images.needs_shipping(g.plan, host):
            return None
        return g.add(
            g.on("ship", host),
            images.ship_images_to(host),
            f"{host}: copy the images its services use to its Docker engine",
            _SHIP_LIMIT_S,
            *after,
        )

    def rendered_runtime(self, rendered: RenderedHost, workspace: Workspace) -> ServiceRuntime:
        endpoint = endpoint_of(rendered.host, rendered.docker)
        compose = ComposeStack(rendered.compose_file, rendered.project, endpoint=endpoint)
        check_reachable(endpoint, timeout_s=_REACH_TIMEOUT_S)
        return compose


def _builds_prometheus(plan: Plan) -> bool:
    return plan.observe is not None and plan.profile is Profile.CPU


DRIVER = _ComposeDriver()
