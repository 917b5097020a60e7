"""`bench STACK --fault ACTION:TARGET@T[+D]`: a fault drill instead of load points."""

from __future__ import annotations

from pathlib import Path

import typer

from generator.cli.modes import refuse_unused
from generator.plan import Plan

__all__ = ["FAULT_PANEL", "refuse_other_mode_options", "run_fault_bench"]

FAULT_PANEL = "Fault drill (instead of load points)"
# What a drill reads of bench's options besides these: the stack (with --set, --runtime,
# --python), --run-id, --wait-scale and --rebuild.
_FAULT_OPTIONS = ("fault_duration_s", "fault_concurrency", "fault_deadline_s")
# vLLM's benchmark and its load points: a drill runs a load of its own instead.
_LOAD_OPTIONS = (
    "preset", "input_len", "output_len", "num_prompts", "request_rate", "max_concurrency",
    "burstiness", "seed", "goodput", "dataset", "prefix_len", "suffix_len", "num_prefixes",
    "point_timeout_s", "idle_window_s",
)  # fmt: skip
_ARM_OPTIONS = ("baseline", "policies", "p2p")  # more stacks than the one drilled


def refuse_other_mode_options(ctx: typer.Context, *, fault: bool) -> None:
    """bench's options that its mode (a drill with --fault, load points without) would
    ignore: BadParameter naming the option and why, before anything is read or started."""
    if not fault:
        refuse_unused(ctx, _FAULT_OPTIONS, mode="without --fault", reason="it sets the drill")
        return
    refuse_unused(
        ctx,
        _LOAD_OPTIONS,
        mode="with --fault",
        reason="a drill sends a load of its own (--fault-duration-s, --fault-concurrency, "
        "--fault-deadline-s), not vLLM's benchmark",
    )
    refuse_unused(ctx, _ARM_OPTIONS, mode="with --fault", reason="a drill runs the stack alone")
    refuse_unused(
        ctx, ("down",), mode="with --fault", reason="the drill leaves the stack up; run `down`"
    )


def run_fault_bench(
    plan: Plan,
    fault_text: str,
    *,
    duration_s: float,
    concurrency: int,
    deadline_s: float,
    folder: Path,
    wait_scale: float,
    rebuild: bool = False,
) -> None:
    from generator.bench.drill import run_drill
    from generator.bench.fault_load import LoadSettings
    from generator.bench.fault_report import markdown, write_fault_report
    from generator.bench.faults import FaultError, parse_fault
    from generator.bench.session import describe_hardware
    from generator.cli.run_reporter import ConsoleReporter
    from generator.console import success, warn
    from generator.paths import find_workspace
    from generator.probes.readiness import router_of_plan
    from generator.workflow.runtimes import runtime_driver

    try:
        fault = parse_fault(fault_text, plan)
    except FaultError as error:
        raise typer.BadParameter(f"{error.message} ({error.hint})", param_hint="--fault") from None
    if fault.at_s >= duration_s:
        raise typer.BadParameter(
            f"the fault at {fault.at_s:g} s comes after the load ends ({duration_s:g} s)",
            param_hint="--fault-duration-s",
        )
    if fault.for_s is not None and fault.at_s + fault.for_s > duration_s:
        raise typer.BadParameter(
            f"{fault.label} lasts past the load's end ({duration_s:g} s)",
            param_hint="--fault-duration-s",
        )
    runtime_driver(plan.runtime).require()
    session = plan.router.session_header
    load = LoadSettings(
        url=f"{router_of_plan(plan).url}/v1/completions",
        model=plan.model.served_name,
        concurrency=concurrency,
        duration_s=duration_s,
        deadline_s=deadline_s,
        headers=((session, "fault-drill"),) if session else (),
    )
    result = run_drill(
        plan,
        fault,
        load,
        workspace=find_workspace(),
        folder=folder,
        reporter=ConsoleReporter(),
        wait_scale=wait_scale,
        rebuild=rebuild,
    )
    hardware = describe_hardware(plan)
    path = write_fault_report(result, folder, hardware=hardware)
    typer.echo(markdown(result, hardware=hardware))
    where = f"report: {path} (fault.json, fault.png beside it)"
    if result.verdict_after:
        success(f"{plan.stack}: survived {fault.label}; {where}")
        return
    warn(f"{plan.stack}: did not recover from {fault.label} with a passing verdict; {where}")
    raise typer.Exit(1)
