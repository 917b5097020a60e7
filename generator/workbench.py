"""Glue the CLI uses: resolve stack names, load+plan, render to memory or disk, drift check."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from generator.errors import XpydError
from generator.paths import Workspace, find_workspace
from generator.plan import Plan, make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import diff_rendered, write_rendered
from generator.spec import load_spec

__all__ = ["check_drift", "load_plan", "render_in_memory", "stack_names", "write_stack"]


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
    stack: str, overrides: Sequence[str] = (), workspace: Workspace | None = None
) -> Plan:
    workspace = workspace or find_workspace()
    return make_plan(load_spec(workspace.stack_file(stack), overrides))


def render_in_memory(plan: Plan, workspace: Workspace | None = None) -> RenderedStack:
    return render_stack(plan, workspace or find_workspace())


def write_stack(plan: Plan, out: Path | None = None) -> list[Path]:
    workspace = find_workspace()
    return write_rendered(render_stack(plan, workspace), out or workspace.root)


def check_drift(plan: Plan, out: Path | None = None) -> list[str]:
    workspace = find_workspace()
    return diff_rendered(render_stack(plan, workspace), out or workspace.root)
