"""bench: vLLM's serving benchmark against a stack, and against what it is compared with.

Its modes, each a small function below: the benchmark of the stack alone; with a colocated
baseline (``--baseline``); as arms of routing policies or LMCache P2P states (``--policies``,
``--p2p``); and ``--fault``, an alias of `drill` (generator/cli/fault_command.py). Options
a mode does not read are refused, never ignored (generator/cli/modes.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli.bench_options import MAX_SEED, parse_goodput
from generator.cli.fault_command import (
    DRILL_OPTIONS,
    FAULT_PANEL,
    DrillOptions,
    FaultConcurrencyOpt,
    FaultDeadlineOpt,
    FaultDurationOpt,
    run_drill_command,
)
from generator.cli.help_text import add_command
from generator.cli.load_options import (
    LOAD_OPTIONS,
    LOAD_PANEL,
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
    parse_preset,
)
from generator.cli.modes import refuse_unused
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
    from generator.bench import BenchJob, BenchReport
    from generator.bench.policies import PolicyArm
    from generator.paths import Workspace
    from generator.services.bench import BenchSettings, Preset

__all__ = [
    "Arms",
    "BenchOptions",
    "parse_arms",
    "refuse_other_mode_options",
    "register",
    "run_bench",
]

# What only the benchmark reads: a drill sends a load of its own instead.
_BENCHMARK_ONLY = ("preset", *LOAD_OPTIONS, "seed", "goodput", "point_timeout_s", "idle_window_s")
_ARM_OPTIONS = ("baseline", "policies", "p2p")  # more stacks than the one drilled

PresetOpt = Annotated[
    str | None,
    typer.Option(
        help="seed-xpyd: seed A's run (7500 in / 200 out, 30 prompts, 1 req/s, burstiness "
        "100), its published figures shown beside ours; smoke: seconds on a cpu stack. "
        "Default: smoke on cpu stacks, seed-xpyd on GPU stacks.",
        show_default=False,
    ),
]
BaselineOpt = Annotated[
    str | None,
    typer.Option(
        help="colocated: also benchmark the same model on the same engines with no KV "
        "transfer (vllm-router round robin), after the P/D stack, which is removed first.",
        show_default=False,
    ),
]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=MAX_SEED,
        help="The benchmark's random seed (vLLM's; the presets': 0).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
GoodputOpt = Annotated[
    str | None,
    typer.Option(
        help="SLO for goodput, e.g. ttft:500,tpot:50 (ms; ttft, tpot, e2el).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
PoliciesOpt = Annotated[
    str | None,
    typer.Option(
        help="Compare routing policies: the stack once per policy, one after the other, "
        "e.g. round_robin,prefix_aware,cache_aware (a bare name is the proxy's where it "
        "has it, else vllm-router's; or write proxy:NAME, vllm-router:NAME).",
        show_default=False,
    ),
]
P2pOpt = Annotated[
    str | None,
    typer.Option(
        "--p2p",
        help="nixl-mp: compare LMCache P2P KV sharing on and off (on,off): the stack once "
        "each, one after the other (with --dataset prefix-repetition: what sharing buys).",
        show_default=False,
    ),
]
DownOpt = Annotated[
    bool,
    typer.Option("--down", help="Remove the P/D stack at the end (always with a baseline)."),
]
PointTimeoutOpt = Annotated[
    float, typer.Option(min=10, max=86400, help="Give up on one load point after this.")
]
IdleWindowOpt = Annotated[
    float,
    typer.Option(
        min=0,
        max=3600,
        help="Sample each service's CPU use this long while the stack is idle, before the "
        "first point (0: skip); the report shows it.",
    ),
]
FaultOpt = Annotated[
    str | None,
    typer.Option(
        help="Run `drill` instead, with this fault (ACTION:SERVICE@T[+D], e.g. "
        "kill:decode-0@15: see `drill --help`); the benchmark's options are refused with it.",
        rich_help_panel=FAULT_PANEL,
        show_default=False,
    ),
]


@dataclass(frozen=True)
class Arms:
    """What the stack is compared with: each arm is the stack (or its twin) brought up and
    benchmarked alone, one after the other."""

    baseline: bool = False  # its colocated twin, after the P/D arms
    policies: tuple[PolicyArm, ...] = ()  # one P/D arm per routing policy
    p2p: tuple[bool, ...] = ()  # one P/D arm per LMCache P2P state


@dataclass(frozen=True)
class BenchOptions:
    """bench's own settings beside the load: what `up --bench` has no use for."""

    preset: Preset | None  # None: the profile's default
    seed: int | None
    goodput_slo_ms: tuple[tuple[str, float], ...]
    point_timeout_s: float
    idle_window_s: float
    down: bool


def register(app: typer.Typer) -> None:
    add_command(app, bench, "Stacks")


def bench(
    ctx: typer.Context,
    stack: StackArg,
    set_: SetOpt = None,
    runtime: RuntimeOpt = None,
    python: PythonOpt = None,
    preset: PresetOpt = None,
    baseline: BaselineOpt = None,
    output_len: OutputLenOpt = None,
    num_prompts: NumPromptsOpt = None,
    request_rate: RequestRateOpt = None,
    max_concurrency: MaxConcurrencyOpt = None,
    burstiness: BurstinessOpt = None,
    seed: SeedOpt = None,
    goodput: GoodputOpt = None,
    dataset: DatasetOpt = None,
    input_len: InputLenOpt = None,
    prefix_len: PrefixLenOpt = None,
    suffix_len: SuffixLenOpt = None,
    num_prefixes: NumPrefixesOpt = None,
    policies: PoliciesOpt = None,
    p2p: P2pOpt = None,
    down: DownOpt = False,
    run_id: RunIdOpt = None,
    point_timeout_s: PointTimeoutOpt = 1800.0,
    idle_window_s: IdleWindowOpt = 10.0,
    wait_scale: WaitScaleOpt = 1.0,
    rebuild: RebuildOpt = False,
    fault: FaultOpt = None,
    fault_duration_s: FaultDurationOpt = DrillOptions.duration_s,
    fault_concurrency: FaultConcurrencyOpt = DrillOptions.concurrency,
    fault_deadline_s: FaultDeadlineOpt = DrillOptions.deadline_s,
) -> None:
    """Benchmark a stack with vLLM's own `bench serve` (random or prefix-repetition dataset)
    through its router, from a one-off container of the stack's `bench` service, after the
    stack is up and its smoke verdict is in.

    With --policies the stack runs once per routing policy (removed in between, so no policy
    inherits warm caches), and the report adds the prefillers' prefix-cache hit rates.

    With --baseline colocated the same engines run again as plain vLLM instances behind a
    round-robin router (no KV transfer) at the same load points: disaggregation pays off
    where P/D beats it. Several --request-rate or --max-concurrency values make a sweep.

    The report goes to runs/<run-id>/: bench.md (the arms side by side per load point),
    bench.json, vLLM's own result JSONs, and PNG plots (TTFT and ITL distributions,
    throughput, latency and goodput against load). A stack whose verdict failed is still
    measured, and the report says INVALID.

    With --fault it runs `drill` instead (the same drill, the same options): the benchmark's
    load, dataset and comparison options are refused there (they would change nothing), as
    are the drill's options without --fault.
    """
    refuse_other_mode_options(ctx, drill=fault is not None)
    run = StackRun.of(
        stack, set_, runtime, python, run_id=run_id, wait_scale=wait_scale, rebuild=rebuild
    )
    if fault is not None:
        run_drill_command(
            run, DrillOptions(fault, fault_duration_s, fault_concurrency, fault_deadline_s)
        )
        return
    arms = parse_arms(baseline, policies, p2p)
    options = BenchOptions(
        parse_preset(preset) if preset is not None else None,
        seed,
        parse_goodput(goodput) if goodput else (),
        point_timeout_s,
        idle_window_s,
        down,
    )
    run_bench(run, LoadOptions.of(ctx), options, arms)


def refuse_other_mode_options(ctx: typer.Context, *, drill: bool) -> None:
    """bench's options that its mode (the drill with --fault, the benchmark without) would
    ignore: BadParameter naming the option and why, before anything is read or started."""
    if not drill:
        refuse_unused(ctx, DRILL_OPTIONS, mode="without --fault", reason="it sets the drill")
        return
    refuse_unused(
        ctx,
        _BENCHMARK_ONLY,
        mode="with --fault",
        reason="a drill sends a load of its own (--fault-duration-s, --fault-concurrency, "
        "--fault-deadline-s), not vLLM's benchmark",
    )
    refuse_unused(ctx, _ARM_OPTIONS, mode="with --fault", reason="a drill runs the stack alone")
    refuse_unused(
        ctx, ("down",), mode="with --fault", reason="the drill leaves the stack up; run `down`"
    )


# --- the modes --------------------------------------------------------------------------------


def parse_arms(baseline: str | None, policies: str | None, p2p: str | None) -> Arms:
    """The arms asked for: the stack alone, and a baseline after policy or P2P arms."""
    arms = Arms(
        baseline=_baseline(baseline),
        policies=_policy_arms(policies) if policies is not None else (),
        p2p=_p2p_arms(p2p) if p2p is not None else (),
    )
    if arms.policies and arms.p2p:
        raise typer.BadParameter("compare policies or P2P states, not both", param_hint="--p2p")
    return arms


def _baseline(text: str | None) -> bool:
    if text not in (None, "colocated"):
        message = f"{text!r}: the one baseline is colocated"
        raise typer.BadParameter(message, param_hint="--baseline")
    return text is not None


def _policy_arms(text: str) -> tuple[PolicyArm, ...]:
    from generator.bench.policies import parse_policies

    try:
        return parse_policies(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policies") from None


def _p2p_arms(text: str) -> tuple[bool, ...]:
    from generator.bench.p2p_arms import parse_p2p

    try:
        return parse_p2p(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--p2p") from None


def run_bench(run: StackRun, load: LoadOptions, options: BenchOptions, arms: Arms) -> None:
    """Every arm at every load point, then the report; every check before anything starts
    (the run's folder included: a refused run leaves none)."""
    from generator.bench import run_benchmark
    from generator.cli.run_reporter import ConsoleReporter
    from generator.paths import find_workspace
    from generator.workflow.records import claim_run_dir
    from generator.workflow.run import check_run_id
    from generator.workflow.runtimes import placed_overrides, runtime_driver

    if run.run_id is not None:
        check_run_id(run.run_id)
    workspace = find_workspace()
    job = _job(run, load, options, arms, workspace)
    job.arm_plans()  # every arm's spec and plan checked before anything starts
    runtime_driver(job.plan.runtime).require()
    reporter = ConsoleReporter()
    if placed := placed_overrides(job.plan, workspace, reporter):  # a Slurm job's nodes
        placed_run = replace(run, overrides=(*run.overrides, *placed))
        job = _job(placed_run, load, options, arms, workspace)
    job = replace(job, folder=claim_run_dir(workspace.root, f"{job.plan.stack}-bench", run.run_id))
    _print(run_benchmark(job, workspace, reporter))


def _job(
    run: StackRun, load: LoadOptions, options: BenchOptions, arms: Arms, workspace: Workspace
) -> BenchJob:
    from generator.bench import ArmOptions, BenchJob, check_fits, load_points
    from generator.planner import make_plan
    from generator.services.bench import default_preset
    from generator.stack import load_spec

    spec = load_spec(workspace.stack_file(run.stack), run.overrides)
    plan = make_plan(spec)
    preset = options.preset or default_preset(plan.profile)
    settings = _settings(load, preset, options)
    check_fits(plan, settings)  # before anything starts
    points = load_points(settings, *load.sweep(settings))
    return BenchJob(
        spec=spec,
        plan=plan,
        preset=preset,
        settings=settings,
        arm_options=ArmOptions(
            points,
            point_timeout_s=options.point_timeout_s,
            wait_scale=run.wait_scale,
            rebuild=run.rebuild,
            idle_window_s=options.idle_window_s,
        ),
        baseline=arms.baseline,
        down=options.down,
        folder=workspace.runs_dir,  # claimed once every check passed (run_bench)
        policies=arms.policies,
        p2p=arms.p2p,
    )


def _settings(load: LoadOptions, preset: Preset, options: BenchOptions) -> BenchSettings:
    settings = bench_settings(load, preset)
    seed = settings.seed if options.seed is None else options.seed
    goodput = options.goodput_slo_ms or settings.goodput_slo_ms
    return replace(settings, seed=seed, goodput_slo_ms=goodput)


def _print(report: BenchReport) -> None:
    """The report's tables on stdout (they are the result); where the files are on stderr."""
    from generator.bench.report import markdown
    from generator.console import success, warn

    typer.echo(markdown(report))
    where = f"report: {report.folder / 'bench.md'} (bench.json, plots beside it)"
    if report.valid:
        success(f"{report.stack}: benchmarked; {where}")
    else:
        warn(f"{report.stack}: a verdict FAILED, the report is marked INVALID; {where}")
        raise typer.Exit(1)
