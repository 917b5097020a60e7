"""The process runtime's driver: one host's services as local processes, from the Pythons
`python -m generator env` makes (or the spec's), with nothing built or shipped."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import RenderedStack
from generator.runtimes import ServiceRuntime
from generator.runtimes.process import ProcessStack, Pythons, rendered_process_stack
from generator.spec import Isolation, ProcessSpec, Profile, Runtime
from generator.workflow.builder import MINUTE, GraphBuilder
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.report import Reporter
from generator.workflow.steps.prepare import doctor_checks
from generator.workflow.steps.pythons import check_pythons
from generator.workflow.task import Task

if TYPE_CHECKING:
    from generator.workbench import RenderedHost

__all__ = ["DRIVER", "plan_pythons", "settings_pythons"]


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


class _ProcessDriver:
    kind = Runtime.PROCESS

    def require(self) -> None:
        return None  # no engine: the Pythons are made or checked by prepare-env

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
        services = {host.host: host for host in rendered.deployment.hosts}
        pythons = plan_pythons(plan, workspace)
        isolation = plan.process.isolation if plan.process else Isolation.PLAIN
        stacks: dict[str, HostStack] = {}
        for process in rendered.processes:
            runtime = ProcessStack(process, workspace.root, pythons, isolation=isolation)
            host = plan.host(process.host)
            stacks[host.name] = HostStack(host, services[host.name], runtime)
        return stacks

    def preflight(self, context: RunContext) -> str:
        stack = next(iter(context.hosts.values()))
        return "process runtime; " + doctor_checks(context, stack)

    def prepare(self, g: GraphBuilder, after: Task) -> tuple[Task, Task]:
        # Nothing to build or ship: the services run from the process runtime's Pythons.
        ready = g.add(
            "prepare-env",
            check_pythons,
            "the Pythons the services run with, made where missing (what env does), answer; "
            "the synthetic model, made once",
            30 * MINUTE,
            after,
        )
        return ready, ready

    def deliver(self, g: GraphBuilder, host: str, after: list[Task]) -> Task | None:
        return None  # the services run from this machine's files

    def rendered_runtime(self, rendered: RenderedHost, workspace: Workspace) -> ServiceRuntime:
        if rendered.process_file is None:
            raise XpydError(
                f"{rendered.compose_file.parent} has no processes.yaml",
                hint="render the stack for the process runtime again (up --runtime process)",
            )
        pythons = settings_pythons(rendered.process, rendered.profile, workspace)
        return rendered_process_stack(
            rendered.process_file, workspace.root, pythons, rendered.process.isolation
        )


DRIVER = _ProcessDriver()
