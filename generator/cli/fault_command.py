"""`drill STACK --fault ACTION:TARGET@T[+D]`: a fault drill. The stack comes up, a steady
load of the drill's own runs through its router, the fault hits one service (or cuts a
host off) T s in, and the report says what failed, when the router noticed and when the
stack was whole again. `bench STACK --fault ...` runs the same drill (an alias, kept for the
commands already written down in reports and scripts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli.help_text import add_command
from generator.cli.stack_options import (
    PythonOpt,
    RebuildOpt,
    RunIdOpt,
    RuntimeOpt,
    SetOpt,
    StackArg,
    StackRun,
    WaitScaleOpt,
)

if TYPE_CHECKING:
    from pathlib import Path

    from generator.bench.drill import DrillResult
    from generator.bench.fault_load import LoadSettings
    from generator.bench.faults import Fault
    from generator.plan import Plan

__all__ = [
    "DRILL_OPTIONS",
    "FAULT_HELP",
    "FAULT_PANEL",
    "DrillOptions",
    "FaultConcurrencyOpt",
    "FaultDeadlineOpt",
    "FaultDurationOpt",
    "register",
    "run_drill_command",
]

FAULT_PANEL = "Fault drill"
FAULT_HELP = (
    "ACTION:SERVICE@T[+D]: kill (SIGKILL), term (SIGTERM) or stop (SIGSTOP for D s) an "
    "engine, LMCache server or the router T s into a steady load, or hang an engine (SIGSTOP "
    "to its core only: it still answers /health); the report (fault.md) gives failures per "
    "second, time to ejection and to recovery, and the verdict after. Multi-host stacks: "
    "cut:HOST@T+D cuts HOST off the other hosts for D s. E.g. kill:decode-0@10, "
    "stop:prefill-0@10+15, hang:decode-0@10+40, cut:host-a@10+15."
)


@dataclass(frozen=True)
class DrillOptions:
    fault: str  # ACTION:TARGET@T[+D], read against the stack's plan
    duration_s: float = 60.0  # how long the load runs
    concurrency: int = 4  # clients in the load
    deadline_s: float = 30.0  # each request's


FaultDurationOpt = Annotated[
    float,
    typer.Option(min=5, max=3600, help="How long the load runs.", rich_help_panel=FAULT_PANEL),
]
FaultConcurrencyOpt = Annotated[
    int,
    typer.Option(min=1, max=256, help="Clients in the load.", rich_help_panel=FAULT_PANEL),
]
FaultDeadlineOpt = Annotated[
    float,
    typer.Option(min=1, max=3600, help="Each request's deadline.", rich_help_panel=FAULT_PANEL),
]
# The drill's own options (besides --fault), by parameter name.
DRILL_OPTIONS = ("fault_duration_s", "fault_concurrency", "fault_deadline_s")


def register(app: typer.Typer) -> None:
    add_command(app, drill, "Stacks")


def drill(
    stack: StackArg,
    fault: Annotated[str, typer.Option(help=FAULT_HELP, show_default=False)],
    fault_duration_s: FaultDurationOpt = DrillOptions.duration_s,
    fault_concurrency: FaultConcurrencyOpt = DrillOptions.concurrency,
    fault_deadline_s: FaultDeadlineOpt = DrillOptions.deadline_s,
    set_: SetOpt = None,
    runtime: RuntimeOpt = None,
    python: PythonOpt = None,
    run_id: RunIdOpt = None,
    wait_scale: WaitScaleOpt = 1.0,
    rebuild: RebuildOpt = False,
) -> None:
    """A fault drill: hurt one service of a stack under a steady load and measure how the
    stack fails and recovers.

    The stack comes up (as `up`, verdict included); --fault-concurrency streamed clients run
    through the router for --fault-duration-s, and --fault's T s in the service is killed,
    stopped or hung (from inside its container, or through its supervisor on the process
    runtime), or a host is cut off the others. The stack is left up (`down` removes it).

    The drill watches the service every second (state, restarts, the router's view) and runs
    the smoke verdict as the load ends and again once the service is whole. The report goes
    to runs/<run-id>/: fault.md (requests failed after / before their answer started, time
    to ejection, to the last failure and until whole again, a per-second table), fault.json
    and fault.png. Exit 1 if the verdict does not pass again. `bench STACK --fault ...` is
    the same drill.
    """
    run = StackRun.of(
        stack, set_, runtime, python, run_id=run_id, wait_scale=wait_scale, rebuild=rebuild
    )
    options = DrillOptions(fault, fault_duration_s, fault_concurrency, fault_deadline_s)
    run_drill_command(run, options)


def run_drill_command(run: StackRun, options: DrillOptions) -> None:
    """The drill from the options to the report: `drill`, and `bench --fault`. Every
    option is checked against the plan before anything starts."""
    from generator.bench.drill import run_drill
    from generator.cli.run_reporter import ConsoleReporter
    from generator.paths import find_workspace
    from generator.runtimes.kinds import runtime_kind
    from generator.workbench import load_plan
    from generator.workflow.records import claim_run_dir
    from generator.workflow.run import check_run_id
    from generator.workflow.runtimes import placed_overrides, runtime_driver

    if run.run_id is not None:
        check_run_id(run.run_id)
    workspace = find_workspace()
    plan = load_plan(run.stack, run.overrides, workspace)
    later = runtime_kind(plan.runtime).addresses_at_placement
    fault = _check_fault(plan, options, addresses_known=not later)
    runtime_driver(plan.runtime).require()
    reporter = ConsoleReporter()
    if placed := placed_overrides(plan, workspace, reporter):  # a Slurm job's nodes
        plan = load_plan(run.stack, [*run.overrides, *placed], workspace)
        fault = _check_fault(plan, options)  # a link cut: the nodes' addresses, now known
    folder = claim_run_dir(workspace.root, f"{plan.stack}-fault", run.run_id)
    result = run_drill(
        plan,
        fault,
        _load(plan, options),
        workspace=workspace,
        folder=folder,
        reporter=reporter,
        wait_scale=run.wait_scale,
        rebuild=run.rebuild,
    )
    _report(plan, fault, result, folder)


def _check_fault(plan: Plan, options: DrillOptions, *, addresses_known: bool = True) -> Fault:
    """The fault read against the plan, and within the load: BadParameter if not."""
    from generator.bench.faults import FaultError, parse_fault

    try:
        fault = parse_fault(options.fault, plan, addresses_known=addresses_known)
    except FaultError as error:
        raise typer.BadParameter(f"{error.message} ({error.hint})", param_hint="--fault") from None
    duration_s = options.duration_s
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
    return fault


def _load(plan: Plan, options: DrillOptions) -> LoadSettings:
    from generator.bench.fault_load import LoadSettings
    from generator.probes.readiness import router_of_plan

    session = plan.router.session_header
    return LoadSettings(
        url=f"{router_of_plan(plan).url}/v1/completions",
        model=plan.model.served_name,
        concurrency=options.concurrency,
        duration_s=options.duration_s,
        deadline_s=options.deadline_s,
        headers=((session, "fault-drill"),) if session else (),
    )


def _report(plan: Plan, fault: Fault, result: DrillResult, folder: Path) -> None:
    """fault.md on stdout (it is the result), where the files are on stderr; exit 1 when
    the verdict did not pass again."""
    from generator.bench.fault_report import markdown, write_fault_report
    from generator.bench.session import describe_hardware
    from generator.console import success, warn

    hardware = describe_hardware(plan)
    path = write_fault_report(result, folder, hardware=hardware)
    typer.echo(markdown(result, hardware=hardware))
    where = f"report: {path} (fault.json, fault.png beside it)"
    if result.verdict_after:
        success(f"{plan.stack}: survived {fault.label}; {where}")
        return
    warn(f"{plan.stack}: did not recover from {fault.label} with a passing verdict; {where}")
    raise typer.Exit(1)
