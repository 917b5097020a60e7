"""Glue the CLI uses: resolve stack names, load+plan, render to memory or disk, drift check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.errors import XpydError
from generator.limits import is_stack_name
from generator.owned import read_bounded
from generator.paths import Workspace, find_workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import diff_rendered, write_all
from generator.serializers.process import PLAN_FILE
from generator.spec import DockerAccess, ProcessSpec, Profile, Runtime, SlurmSpec
from generator.stack import load_spec

_PLAN_JSON_MAX_BYTES = 16 << 20

__all__ = [
    "RenderedHost",
    "check_drift",
    "load_plan",
    "render_in_memory",
    "rendered_name",
    "rendered_projects",
    "stack_names",
    "write_stacks",
]


def stack_names(stacks: Sequence[str] | None, all_stacks: bool) -> list[str]:
    workspace = find_workspace()
    names = list(stacks or [])
    if all_stacks:
        names += workspace.shipped_stacks()
    if not names:
        raise XpydError(
            "no stack given",
            hint=f"name one ({', '.join(workspace.shipped_stacks())}) or pass --all",
        )
    return names


def load_plan(
    stack: str,
    overrides: Sequence[str] = (),
    workspace: Workspace | None = None,
    *,
    pod_network: bool = False,
) -> Plan:
    """``pod_network``: planned for Kubernetes (renders kubernetes/<stack>/)."""
    workspace = workspace or find_workspace()
    spec = load_spec(workspace.stack_file(stack), overrides, export=pod_network)
    return make_plan(spec, pod_network=pod_network)


def render_in_memory(plan: Plan, workspace: Workspace | None = None) -> RenderedStack:
    return render_stack(plan, workspace or find_workspace())


def write_stacks(plans: Sequence[Plan], out: Path | None = None) -> list[Path]:
    """Every plan rendered, then all of them written, or none (any error writes nothing)."""
    workspace = find_workspace()
    rendered = [render_stack(plan, workspace) for plan in plans]
    return write_all(rendered, out or workspace.root)


def check_drift(plan: Plan, out: Path | None = None) -> list[str]:
    workspace = find_workspace()
    return diff_rendered(render_stack(plan, workspace), out or workspace.root)


@dataclass(frozen=True)
class RenderedHost:
    """One host's compose project of a rendered stack, and how to reach its Docker engine."""

    stack: str
    host: str
    project: str
    compose_file: Path
    docker: DockerAccess | None  # None: this machine's engine
    services: tuple[str, ...]
    profile: Profile
    process_file: Path | None  # rendered for local processes: its processes.yaml
    process: ProcessSpec  # the rendered plan's process settings
    runtime: Runtime  # what it was rendered for (plan.json)
    slurm: SlurmSpec | None = None  # the rendered plan's Slurm settings (its steps' containers)


def rendered_projects(stack: str, workspace: Workspace | None = None) -> list[RenderedHost]:
    """The compose projects of a rendered stack, per host: what `down`, `status` and `logs`
    act on, so they also work for stacks rendered with --set overrides."""
    workspace = workspace or find_workspace()
    name = rendered_name(stack, workspace)
    folder = workspace.compose_dir / name
    files = sorted(folder.glob("compose.yaml")) + sorted(folder.glob("*/compose.yaml"))
    if not files:
        compose_dir = workspace.compose_dir
        rendered = (
            sorted(p.name for p in compose_dir.iterdir() if p.is_dir())
            if compose_dir.is_dir()
            else []
        )
        raise XpydError(
            f"no rendered stack named {name} under {workspace.compose_dir}",
            hint=f"rendered stacks: {', '.join(rendered) or 'none'} (render or up it first)",
        )
    access, profile, process, runtime, slurm = _rendered_plan(folder / "plan.json")
    hosts = []
    for path in files:
        project, host, services = _project_of(path)
        process_file = path.with_name(PLAN_FILE)
        processes = process_file if process_file.is_file() else None
        hosts.append(
            RenderedHost(
                name,
                host,
                project,
                path,
                access.get(host),
                services,
                profile,
                processes,
                process,
                runtime,
                slurm,
            )
        )
    return hosts


def _rendered_plan(
    plan_file: Path,
) -> tuple[dict[str, DockerAccess], Profile, ProcessSpec, Runtime, SlurmSpec | None]:
    """Each host's Docker engine as the rendered plan.json says (absent: the local one), the
    plan's profile, its process settings (validated as the spec's are: the Pythons named there
    are what `status` runs health checks with), its runtime and its Slurm settings."""
    try:
        text = read_bounded(plan_file, max_bytes=_PLAN_JSON_MAX_BYTES)
        if text is None:
            raise ValueError("it does not exist")
        plan = json.loads(text)
        access = {
            str(host["name"]): DockerAccess.model_validate(host["docker"])
            for host in plan["hosts"]
            if host.get("docker")
        }
        process = ProcessSpec.model_validate(plan.get("process") or {})
        runtime = Runtime(plan.get("runtime", "compose"))  # the plan leaves the default out
        slurm = SlurmSpec.model_validate(plan["slurm"]) if plan.get("slurm") else None
        return access, Profile(plan["profile"]), process, runtime, slurm
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise XpydError(
            f"{plan_file} is not a plan render wrote ({exc})", hint="render the stack again"
        ) from exc


def rendered_name(stack: str, workspace: Workspace | None = None) -> str:
    """A stack name, or the name inside a spec file given by path: never a path under
    compose/ (``../..`` would reach other projects)."""
    if is_stack_name(stack):
        return stack
    path = (workspace or find_workspace()).stack_file(stack)
    if path.exists():
        return load_spec(path).name
    raise XpydError(
        f"{stack!r} is neither a stack name nor a spec file",
        hint="give the stack's name (its folder under compose/) or its spec's path",
    )


def _project_of(compose_file: Path) -> tuple[str, str, tuple[str, ...]]:
    """(project name, host, services) of a compose file render wrote (read bounded, with the
    spec's YAML bounds: it may have been edited)."""
    from generator.errors import SpecError
    from generator.spec.source import parse_yaml

    try:
        text = read_bounded(compose_file, max_bytes=_PLAN_JSON_MAX_BYTES)
        document: Any = parse_yaml(text or "", source=str(compose_file))
        services = tuple(str(name) for name in document["services"])
        return str(document["name"]), str(document["x-xpyd"]["host"]), services
    except (SpecError, ValueError, KeyError, TypeError) as exc:
        raise XpydError(
            f"{compose_file} is not a compose file render wrote (no readable name: {exc})",
            hint="render the stack again",
        ) from exc
