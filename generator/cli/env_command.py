"""env: the process runtime's Pythons, made from the stack's locks (no Docker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from generator.cli.help_text import add_command

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    add_command(app, env, "Stacks")


def env(
    stack: Annotated[str, typer.Argument(help="Stack name or spec path.", show_default=False)],
    base_python: Annotated[
        Path | None,
        typer.Option(
            "--base-python",
            help="The interpreter the venvs are made from (default: this one). GPU stacks: "
            "the Python the GPU lock was resolved for (versions.yaml's gpu_engine.python).",
            show_default=False,
        ),
    ] = None,
    find_links: Annotated[
        Path | None,
        typer.Option(
            "--find-links",
            help="Install from this folder of wheels, without an index (offline hosts). Default: "
            "cpu stacks their wheelhouse (filled first), GPU stacks the index.",
            show_default=False,
        ),
    ] = None,
    system_site_packages: Annotated[
        bool,
        typer.Option(
            "--system-site-packages",
            help="Keep the base Python's packages visible; the lock's pins it already has at "
            "the same version are not installed again (a GPU host's own torch stack).",
        ),
    ] = False,
) -> None:
    """Make the Pythons `up --runtime process` runs a stack's services with, from the same
    locks the images install: the engines' (vLLM, LMCache, NIXL; on cpu stacks also the
    image's venv fixes and the AMX permission) and the router's (vllm-router and our proxy's
    imports), under .cache/env/, and the synthetic model where the stack uses one.

    An HPC user's two commands: `python -m generator env <stack>`, then `python -m generator
    up <stack> --runtime process`. A venv is remade only when its lock changed.
    """
    from generator.console import info, success
    from generator.envs import make_envs, make_synthetic_model
    from generator.paths import find_workspace
    from generator.workbench import load_plan

    workspace = find_workspace()
    plan = load_plan(stack)
    pythons = make_envs(
        plan,
        workspace,
        info,
        base_python=base_python,
        find_links=find_links,
        system_site_packages=system_site_packages,
    )
    if plan.model.source == "synthetic":
        info(make_synthetic_model(plan, workspace, pythons.engine, info))
    success(f"engines' Python: {pythons.engine}")
    success(f"router's Python: {pythons.router}")
