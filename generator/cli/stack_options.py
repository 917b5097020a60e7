"""Options every command that runs a stack reads the same way (`up`, `bench`, `drill`,
`doctor`): which stack, its overrides, the run's folder and its waits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import typer

__all__ = [
    "PythonOpt",
    "RebuildOpt",
    "RunIdOpt",
    "RuntimeOpt",
    "SetOpt",
    "StackArg",
    "StackRun",
    "WaitScaleOpt",
    "finite",
    "not_nan",
    "runtime_overrides",
]


def not_nan(value: float | None) -> float | None:
    # click's ranges let nan through (every comparison with nan is false)
    if value is not None and math.isnan(value):
        raise typer.BadParameter("must be a number, not nan")
    return value


def finite(value: float) -> float:
    if not math.isfinite(value):
        raise typer.BadParameter("must be a finite number")
    return value


StackArg = Annotated[
    str, typer.Argument(help="Stack name (stacks/<name>.yaml) or spec path.", show_default=False)
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="Override a spec value, e.g. --set router.port=31000.", show_default=False
    ),
]
RuntimeOpt = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="compose (Docker), process (local processes, no Docker: HPC nodes, bare metal) "
        "or slurm (a Slurm job: each host a node, each service a job step); default: the "
        "spec's runtime. Same as --set runtime=...",
        show_default=False,
    ),
]
PythonOpt = Annotated[
    str | None,
    typer.Option(
        "--python",
        help="Process runtime: the engines' Python, with the stack's lock installed (default: "
        "the one `python -m generator env` makes). Same as --set process.python=...",
        show_default=False,
    ),
]
RunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="Name of the run's folder under runs/.")
]
RebuildOpt = Annotated[
    bool,
    typer.Option("--rebuild", help="Build images even when their (content-addressed) tag exists."),
]
WaitScaleOpt = Annotated[
    float,
    typer.Option(
        "--wait-scale",
        envvar="XPYD_WAIT_SCALE",
        help="Multiply every health deadline (slow hosts).",
        min=0.01,
        max=1000.0,
        callback=finite,
    ),
]


def runtime_overrides(runtime: str | None, python: str | None) -> list[str]:
    """--runtime and --python as the spec overrides they stand for (validated with the spec)."""
    overrides = [f"runtime={runtime}"] if runtime is not None else []
    return overrides + ([f"process.python={python}"] if python is not None else [])


@dataclass(frozen=True)
class StackRun:
    """A stack to bring up and what its run is called and waits for: the options `bench`
    and `drill` share with `up`."""

    stack: str  # name or spec path
    overrides: tuple[str, ...]  # --set, then --runtime and --python as overrides
    run_id: str | None
    wait_scale: float = 1.0
    rebuild: bool = False

    @classmethod
    def of(
        cls,
        stack: str,
        set_: list[str] | None,
        runtime: str | None,
        python: str | None,
        *,
        run_id: str | None,
        wait_scale: float,
        rebuild: bool,
    ) -> StackRun:
        overrides = (*(set_ or []), *runtime_overrides(runtime, python))
        return cls(stack, overrides, run_id, wait_scale=wait_scale, rebuild=rebuild)
