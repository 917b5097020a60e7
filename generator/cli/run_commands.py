"""up / down / status / logs / dag: commands that drive a stack's runtime (Docker Compose, or
local processes)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli.help_text import add_command
from generator.cli.load_options import (
    LOAD_OPTIONS,
    BurstinessOpt,
    DatasetOpt,
    InputLenOpt,
    LoadOptions,
    MaxConcurrencyOpt,
    NumPrefixesOpt,
    NumPromptsOpt,
    OutputLenOpt,
    PrefixLenOpt,
    RequestRateOpt,
    SuffixLenOpt,
    bench_settings,
)
from generator.cli.modes import refuse_unused
from generator.cli.stack_options import (
    PythonOpt,
    RebuildOpt,
    RunIdOpt,
    RuntimeOpt,
    SetOpt,
    StackArg,
    WaitScaleOpt,
    runtime_overrides,
)

__all__ = ["register"]

HostOpt = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="Only this host of a multi-host stack (its name in the spec's hosts).",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    add_command(app, up, "Stacks")
    add_command(app, down, "Stacks")
    add_command(app, status, "Stacks")
    add_command(app, logs, "Stacks")
    add_command(app, dag, "Stacks")
    add_command(app, observe, "Stacks")


def up(
    ctx: typer.Context,
    stack: StackArg,
    set_: SetOpt = None,
    runtime: RuntimeOpt = None,
    python: PythonOpt = None,
    bench: Annotated[
        bool,
        typer.Option(
            "--bench",
            help="Run vLLM's serving benchmark after the smoke verdict: one load point, the "
            "smoke preset's unless the load and dataset options say otherwise (as for `bench`).",
        ),
    ] = False,
    down_after: Annotated[
        bool, typer.Option("--down", help="Remove the stack at the end, whatever happened.")
    ] = False,
    teardown_on_failure: Annotated[
        bool,
        typer.Option(
            "--teardown-on-failure",
            help="Remove the stack if a task fails (default: keep it to inspect).",
        ),
    ] = False,
    start_from: Annotated[
        str | None,
        typer.Option(
            "--from", help="Resume at this task (see `dag`); earlier tasks count as done."
        ),
    ] = None,
    run_id: RunIdOpt = None,
    rebuild: RebuildOpt = False,
    wait_scale: WaitScaleOpt = 1.0,
    output_len: OutputLenOpt = None,
    num_prompts: NumPromptsOpt = None,
    request_rate: RequestRateOpt = None,
    max_concurrency: MaxConcurrencyOpt = None,
    burstiness: BurstinessOpt = None,
    dataset: DatasetOpt = None,
    input_len: InputLenOpt = None,
    prefix_len: PrefixLenOpt = None,
    suffix_len: SuffixLenOpt = None,
    num_prefixes: NumPrefixesOpt = None,
) -> None:
    """Bring a stack up and prove it works: render, build images, start LMCache servers,
    engines and router in dependency order, wait for real health, then a smoke request whose
    verdict shows the KV really moved from prefill to decode (exit 1 if not).

    With --runtime process every service runs as a local process instead (no Docker, no
    images: the Pythons `python -m generator env <stack>` makes, or --python), on host
    networking; status, logs and down work on it from any shell.

    The run's record (task states, times, errors, plan, verdict) and every service's log go
    to runs/<run-id>/. A second `up` of a running stack is a no-op apart from the smoke.
    """
    from generator.cli.run_reporter import ConsoleReporter
    from generator.console import success
    from generator.paths import find_workspace
    from generator.services.bench import Preset
    from generator.workbench import load_plan
    from generator.workflow import up_stack
    from generator.workflow.context import RunOptions
    from generator.workflow.run import make_context
    from generator.workflow.runtimes import placed_overrides, runtime_driver

    if not bench:
        refuse_unused(
            ctx, LOAD_OPTIONS, mode="without --bench", reason="it sets the benchmark --bench runs"
        )
    load = LoadOptions.of(ctx).one_point()
    overrides = [*(set_ or []), *runtime_overrides(runtime, python)]
    plan = load_plan(stack, overrides)
    runtime_driver(plan.runtime).require()
    workspace, reporter = find_workspace(), ConsoleReporter()
    if placed := placed_overrides(plan, workspace, reporter):  # a Slurm job's nodes
        plan = load_plan(stack, [*overrides, *placed], workspace)
    options = RunOptions(
        rebuild=rebuild,
        bench=bench,
        down=down_after,
        teardown_on_failure=teardown_on_failure,
        wait_scale=wait_scale,
        bench_settings=bench_settings(load, Preset.SMOKE),
    )
    context = make_context(plan, workspace, options, run_id, reporter)
    up_stack(context, start_from=start_from)
    success(f"{plan.stack}: up, verdict PASS (record: {context.run_dir / 'run.json'})")


def down(
    stack: StackArg,
    volumes: Annotated[
        bool, typer.Option("--volumes", help="Also remove volumes (the shared model cache!).")
    ] = False,
    host: HostOpt = None,
) -> None:
    """Remove a stack's containers and networks on every host (volumes only with --volumes),
    or, for a stack up under the process runtime, end all its processes. Each host's engine is
    reached as the spec's hosts[].docker says."""
    from generator.console import success, warn
    from generator.paths import find_workspace
    from generator.stack_lock import holding
    from generator.workbench import rendered_name
    from generator.workflow.runtimes import (
        release,
        rendered_runtime_kind,
        rendered_stacks,
        stray_process_runs,
    )

    name, workspace = rendered_name(stack), find_workspace()
    with holding(workspace.root, name, f"down {name}"):
        for host_name, compose in rendered_stacks(stack, host=host):
            compose.down(volumes=volumes)
            success(f"removed {compose.project} on {host_name}")
        # The whole stack is down: what it holds beyond its services goes (a Slurm job).
        if host is None and (found := release(rendered_runtime_kind(stack), name, workspace)):
            success(found)
        for record in stray_process_runs(stack, workspace) if host is None else []:
            warn(
                f"a process run of {name} is still on record ({record}), and compose/{name} "
                f"is rendered for containers since: its processes are not ended. Render it as "
                f"you brought it up (python -m generator render {name} --set runtime=process "
                f"and your other --set), then python -m generator down {name}"
            )


def status(stack: StackArg, host: HostOpt = None) -> None:
    """The live stack on every host (services, state, health, ports) and its last run. Under
    Slurm, a job Slurm ended (its time limit, a node failure, scancel) is one line saying how
    and what to do, and status exits 1."""
    from generator.cli.tables import print_status
    from generator.console import error
    from generator.paths import find_workspace
    from generator.workbench import rendered_name
    from generator.workflow.records import latest_run
    from generator.workflow.runtimes import allocation_ended, rendered_stacks

    workspace = find_workspace()
    last_run = latest_run(workspace.runs_dir, stack)
    for name, compose in rendered_stacks(stack, host=host):
        print_status(f"{compose.project} (host {name})", compose.ps(), last_run)
    if ended := allocation_ended(rendered_name(stack), workspace):
        error(ended)
        raise typer.Exit(1)


def observe(
    stack: StackArg,
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
) -> None:
    """What the live Prometheus of an observed stack says: every scrape target's health,
    every rule's (and the alerts firing now), and whether each dashboard panel's query and
    each recording rule answers with data, asked as Grafana asks them; with observe.traces
    (our receiver), the spans each engine and LMCache server sent. Exit 1 when a target is
    down, a rule failed to evaluate, a query was refused or a sender sent no span.

    Use the --set overrides the stack was brought up with, e.g.
    `observe cpu-1p1d --set observe.enabled=true`."""
    import json

    from generator.cli.tables import print_observe
    from generator.paths import find_workspace
    from generator.probes.prometheus import Answer, check_prometheus
    from generator.workbench import load_plan
    from generator.workflow.runtimes import running_plan

    workspace = find_workspace()
    plan = running_plan(load_plan(stack, set_ or [], workspace), workspace, set_ or [])
    report = check_prometheus(plan)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_observe(report)
    broken = (
        any(health != "up" for health in report.targets.values())
        or any(health == "err" for health in report.rules.values())
        or any(q.answer is Answer.ERROR for q in report.queries)
        or bool(report.silent)
    )
    if broken:
        raise typer.Exit(1)


def logs(
    stack: StackArg,
    service: Annotated[
        str | None, typer.Argument(help="One service (e.g. decode-0); all if omitted.")
    ] = None,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.", min=0)] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    host: HostOpt = None,
) -> None:
    """Print a stack's logs (one service, or all of them, host by host)."""
    from generator.errors import XpydError
    from generator.workflow.runtimes import rendered_stacks

    stacks = rendered_stacks(stack, service=service, host=host)
    if follow and len(stacks) > 1:
        raise XpydError(
            "--follow follows one host's logs",
            hint=f"name a service or --host ({', '.join(name for name, _ in stacks)})",
        )
    for _name, compose in stacks:
        if follow:
            compose.follow_logs(service, typer.echo)
        else:
            typer.echo(compose.logs(service, tail=tail), nl=False)


def dag(
    stack: StackArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the graph as JSON.")] = False,
) -> None:
    """Show the task graph `up` runs for a stack (what runs after what, what runs in parallel)."""
    import json

    from generator.cli.tables import print_dag
    from generator.workbench import load_plan
    from generator.workflow import dag_of

    graph = dag_of(load_plan(stack))
    if as_json:
        tasks = {
            t.name: {"after": [u.name for u in t.upstream], "description": t.description}
            for t in graph.tasks
        }
        typer.echo(
            json.dumps({"order": graph.order, "levels": graph.levels(), "tasks": tasks}, indent=2)
        )
    else:
        print_dag(graph)
