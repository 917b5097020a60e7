"""validate / plan / render: everything that reads a spec and never touches Docker."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from generator.cli.help_text import add_command

__all__ = ["register"]

StackArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Stack names (stacks/<name>.yaml) or paths to spec files.", show_default=False
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a spec value, e.g. --set decode.count=3 --set 'hosts.0.gpus=[0,1]'.",
        show_default=False,
    ),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every stack under stacks/.")]


class Target(StrEnum):
    COMPOSE = "compose"  # compose projects (or process plans), Dockerfiles, plan.json
    KUBERNETES = "kubernetes"  # a kustomization under kubernetes/<stack>/


TargetOpt = Annotated[
    Target,
    typer.Option(
        "--target",
        help="What to render for: compose (and the process and Slurm runtimes), or "
        "kubernetes (kubernetes/<stack>/, applied with `kubectl apply -k`; docs/kubernetes.md).",
        envvar="XPYD_RENDER_TARGET",
    ),
]


def register(app: typer.Typer) -> None:
    add_command(app, validate, "Specs")
    add_command(app, plan, "Specs")
    add_command(app, render, "Specs")


def validate(stacks: StackArg = None, all_stacks: AllOpt = False, set_: SetOpt = None) -> None:
    """Check stack specs: fields, cross-field rules, placement and ports, a full render.

    Prints warnings for risky-but-legal choices and exits 1 on the first invalid stack.
    """
    from generator.console import success, warn
    from generator.workbench import load_plan, render_in_memory, stack_names

    for name in stack_names(stacks, all_stacks):
        plan = load_plan(name, set_ or [])
        render_in_memory(plan)
        for line in plan.warnings:
            warn(f"{plan.stack}: {line}")
        success(
            f"{plan.stack}: valid ({len(plan.prefill)}P{len(plan.decode)}D, "
            f"{plan.topology.kind.value}, {plan.profile.value})"
        )


def plan(
    stack: Annotated[str, typer.Argument(help="Stack name or spec path.")],
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Show where every engine runs and every port it uses (GPUs, NIXL, LMCache, router)."""
    from generator.cli.tables import print_plan
    from generator.workbench import load_plan

    the_plan = load_plan(stack, set_ or [])
    if as_json:
        typer.echo(the_plan.model_dump_json(indent=2))
    else:
        print_plan(the_plan)


def render(
    stacks: StackArg = None,
    all_stacks: AllOpt = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Root to write compose/<stack>/ and images/<stack>/ (or kubernetes/<stack>/) "
            "under \\[default: the checkout]."
        ),
    ] = None,
    set_: SetOpt = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing; exit 1 if the committed output differs (CI drift check).",
        ),
    ] = False,
    target: TargetOpt = Target.COMPOSE,
) -> None:
    """Write a stack's Dockerfiles, compose project(s), LMCache and router configs.

    Output: images/<stack>/*.Dockerfile, compose/<stack>/compose.yaml (one folder per host for
    multi-host stacks) and plan.json; with --target kubernetes, kubernetes/<stack>/ (the
    images are compose's: render for compose too to build them). Rendering is all-or-nothing:
    on any error nothing is written.
    """
    from generator.console import success, warn
    from generator.errors import DriftError
    from generator.workbench import check_drift, load_plan, stack_names, write_stacks

    # Every spec is loaded and planned before anything is written: one bad stack, none written.
    pods = target is Target.KUBERNETES
    wanted = stack_names(stacks, all_stacks)
    plans = [load_plan(name, set_ or [], pod_network=pods) for name in wanted]
    for plan in plans:
        for line in plan.warnings:
            warn(f"{plan.stack}: {line}")
    if not check:
        written = write_stacks(plans, out)
        names = ", ".join(dict.fromkeys(plan.stack for plan in plans))
        success(f"{names}: wrote {len(written)} files")
        return
    drifted: list[str] = []
    for plan in plans:
        problems = check_drift(plan, out)
        if problems:
            drifted.append(f"{plan.stack}:\n" + "\n".join(f"  {p}" for p in problems))
        else:
            success(f"{plan.stack}: committed output is up to date")
    if drifted:
        hint = (
            "run `python -m generator render <stack> --target kubernetes` (its output is "
            "not committed)"
            if pods
            else "run `python -m generator render --all` and commit the result"
        )
        raise DriftError(
            "rendered output differs from what is committed:\n" + "\n".join(drifted), hint=hint
        )
