"""doctor: is this host ready for this stack, and does KV move at the speed it should?

``check_host`` runs the cheap checks (Docker, GPU access, GPUs and links, RDMA, memlock,
/dev/shm, addresses, ports, disk, HF token); ``up`` runs them as its preflight. The KV path
check (``generator.doctor.kvpath``) moves real data with NIXL between each same-host P/D pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from generator.docker import engine_facts
from generator.doctor.checks import run_checks
from generator.doctor.context import HostView, pick_host
from generator.doctor.gpus import query_gpus, topology
from generator.doctor.kvpath import KvLayout, judge, measure_pairs
from generator.doctor.ports import orphan_ports
from generator.doctor.report import CheckRow, DoctorReport, Verdict
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import ComposeProject, RenderedStack
from generator.runtimes.base import ServiceState

__all__ = [
    "CheckRow",
    "DoctorReport",
    "Verdict",
    "check_host",
    "host_view",
    "pick_host",
    "run_doctor",
]


def host_view(
    plan: Plan,
    project: ComposeProject,
    workspace: Workspace,
    running: frozenset[str],
    orphans: Mapping[str, frozenset[int]],
) -> HostView:
    gpu = plan.profile.value == "gpu"
    return HostView(
        plan=plan,
        host=plan.host(project.host),
        project=project,
        workspace=workspace,
        facts=engine_facts(),
        gpus=query_gpus() if gpu else None,
        links=topology() if gpu else None,
        running=running,
        orphans=orphans,
    )


def check_host(
    plan: Plan,
    rendered: RenderedStack,
    workspace: Workspace,
    *,
    host: str | None = None,
    states: Sequence[ServiceState] = (),
) -> tuple[HostView, DoctorReport]:
    """``states``: the stack's containers (or processes) on that host, as its runtime lists
    them: their ports are theirs, not a clash."""
    project = pick_host(plan, rendered, host)
    running = frozenset(state.service for state in states if state.status == "running")
    orphans = orphan_ports(states, project.document.get("services", {}))
    view = host_view(plan, project, workspace, running, orphans)
    report = DoctorReport(plan.stack, project.host)
    report.add(run_checks(view))
    return view, report


def run_doctor(
    stack: str,
    overrides: list[str],
    *,
    host: str | None,
    kv_path: bool,
    process: bool,
    python: str,
    layout: KvLayout,
    size_mib: int | None,
) -> DoctorReport:
    """The `doctor` command: cheap checks, then (``kv_path``) a NIXL transfer per pair."""
    from generator.paths import find_workspace
    from generator.workbench import load_plan, render_in_memory

    workspace = find_workspace()
    plan = load_plan(stack, overrides, workspace)
    rendered = render_in_memory(plan, workspace)
    project = pick_host(plan, rendered, host)
    view, report = check_host(
        plan, rendered, workspace, host=project.host, states=_states(workspace, project)
    )
    if kv_path:
        probes = measure_pairs(
            view, rendered, process=process, python=python, layout=layout, size_mib=size_mib
        )
        report.add([judge(view, probe) for probe in probes])
        report.kv_paths = [probe.result | {"pair": probe.name} for probe in probes]
        if layout is KvLayout.RENDERED:  # the stack's own layout: what its verdict compares with
            _keep_reference(workspace, plan.stack, project.host, process, report.kv_paths)
    return report


def _keep_reference(
    workspace: Workspace, stack: str, host: str, process: bool, results: list[dict[str, Any]]
) -> None:
    """NIXL's measured rates for the smoke verdict to set its KV figure against."""
    from generator.probes.kv_reference import reference_from, write_reference

    mode: Literal["container", "process"] = "process" if process else "container"
    reference = reference_from(stack, host, mode, results)
    if reference is not None:
        write_reference(workspace.root, reference)


def _states(workspace: Workspace, project: ComposeProject) -> list[ServiceState]:
    """This stack's containers here."""
    from generator.docker import ComposeStack, docker_available

    compose_file = workspace.root / project.compose_file
    if not compose_file.is_file() or not docker_available():
        return []
    return ComposeStack(compose_file, project.name).ps()
