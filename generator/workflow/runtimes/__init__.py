"""Runtimes as units for the workflow: one driver module each behind ``RuntimeDriver``
(base.py), looked up by kind here; what `up` runs, and what `status`, `logs` and `down` act on
from another shell. What the spec, planner and render need of a runtime is its kind's
(generator/runtimes/kinds/)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import RenderedStack
from generator.runtimes import ServiceRuntime
from generator.spec import Runtime
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.report import Reporter
from generator.workflow.runtimes import compose, process, slurm
from generator.workflow.runtimes.base import RuntimeDriver

__all__ = [
    "RUNTIME_DRIVERS",
    "RuntimeDriver",
    "allocation_ended",
    "host_stacks",
    "placed_overrides",
    "release",
    "remove_hosts",
    "rendered_runtime_kind",
    "rendered_stacks",
    "running_plan",
    "runtime_driver",
]

RUNTIME_DRIVERS: Mapping[Runtime, RuntimeDriver] = MappingProxyType(
    {driver.kind: driver for driver in (compose.DRIVER, process.DRIVER, slurm.DRIVER)}
)


def runtime_driver(kind: Runtime) -> RuntimeDriver:
    return RUNTIME_DRIVERS[kind]


def placed_overrides(plan: Plan, workspace: Workspace, reporter: Reporter) -> list[str]:
    """Spec overrides that put each host where its runtime placed it (a Slurm job's nodes,
    asked for and waited for now); [] where the spec already says where each host is. Make
    the plan again with them before a stack starts."""
    return runtime_driver(plan.runtime).place(plan, workspace, reporter)


def running_plan(plan: Plan, workspace: Workspace, overrides: Sequence[str]) -> Plan:
    """``plan`` (made with ``overrides``) with each host where its runtime placed it when the
    stack came up (a Slurm job's nodes), for commands that read a running stack."""
    placed = runtime_driver(plan.runtime).placed(plan, workspace)
    if not placed:
        return plan
    from generator.workbench import load_plan

    return load_plan(plan.stack, [*overrides, *placed], workspace)


def rendered_runtime_kind(stack: str) -> Runtime:
    """The runtime a rendered stack was rendered for (its plan.json)."""
    from generator.workbench import rendered_projects

    return rendered_projects(stack)[0].runtime


def remove_hosts(context: RunContext, *, release: bool = True) -> None:
    """Every host's services down, then (``release``) what the stack holds beyond them (a
    Slurm job)."""
    for stack in context.hosts.values():
        stack.runtime.down()
    if release:
        runtime_driver(context.plan.runtime).release(context.plan.stack, context.workspace)


def release(plan_runtime: Runtime, stack: str, workspace: Workspace) -> str | None:
    """What a stack holds beyond its services (a Slurm job), once they are down: let go, and
    what was found and done (None: it held nothing)."""
    return runtime_driver(plan_runtime).release(stack, workspace)


def stray_process_runs(stack: str, workspace: Workspace) -> list[str]:
    """The process runs on record (a state file under .cache/process/) of a stack now rendered
    for containers: an `up --runtime process --set ...` whose render was put back since.
    `down` of the render it finds does not reach them; it says so instead of leaving them
    silently."""
    from generator.runtimes.kinds import runtime_kind
    from generator.runtimes.process_state import STATE_FILE
    from generator.serializers.process import state_dir
    from generator.workbench import rendered_projects

    hosts = rendered_projects(stack, workspace)
    if not runtime_kind(hosts[0].runtime).containers:
        return []  # its down reads those state files itself
    files = [state_dir(host.project) / STATE_FILE for host in hosts]
    return [str(file) for file in files if os.path.lexists(workspace.root / file)]


def allocation_ended(stack: str, workspace: Workspace) -> str | None:
    """One line where what a rendered stack runs in was ended under it (its Slurm job), for
    `status`; None where nothing holds it, or it still does."""
    return runtime_driver(rendered_runtime_kind(stack)).allocation_ended(stack, workspace)


def host_stacks(plan: Plan, rendered: RenderedStack, workspace: Workspace) -> dict[str, HostStack]:
    """Every host that runs something, in the plan's order, as its runtime drives it."""
    return runtime_driver(plan.runtime).host_stacks(plan, rendered, workspace)


def rendered_stacks(
    stack: str, *, service: str | None = None, host: str | None = None
) -> list[tuple[str, ServiceRuntime]]:
    """(host, what runs that host's services) of a rendered stack: what `down`, `status` and
    `logs` act on (stacks rendered with --set overrides too), each as the runtime it was
    rendered for reads it back."""
    from generator.paths import find_workspace
    from generator.workbench import rendered_projects

    workspace = find_workspace()
    found: list[tuple[str, ServiceRuntime]] = []
    for rendered in rendered_projects(stack):
        if host is not None and rendered.host != host:
            continue
        if service is not None and service not in rendered.services:
            continue
        driver = runtime_driver(rendered.runtime)
        found.append((rendered.host, driver.rendered_runtime(rendered, workspace)))
    if not found:
        what = f"service {service!r}" if service else f"host {host!r}"
        raise XpydError(f"{stack} has no {what}", hint=f"python -m generator status {stack}")
    return found
