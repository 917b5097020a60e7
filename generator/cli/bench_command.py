"""bench: vLLM's serving benchmark against a stack, and against its colocated baseline."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli.bench_options import (
    MAX_LOAD_POINTS,
    MAX_PROMPTS,
    MAX_SEED,
    MAX_TOKENS,
    check_sweep,
    parse_concurrencies,
    parse_goodput,
    parse_rates,
)
from generator.cli.fault_command import FAULT_PANEL, refuse_other_mode_options, run_fault_bench
from generator.cli.help_text import add_command
from generator.cli.run_commands import PythonOpt, RuntimeOpt, runtime_overrides

if TYPE_CHECKING:
    from generator.bench import BenchReport
    from generator.bench.policies import PolicyArm
    from generator.services.bench import BenchSettings, Preset

__all__ = [
    "MAX_LOAD_POINTS",
    "check_sweep",
    "dataset_settings",
    "parse_concurrencies",
    "parse_goodput",
    "parse_policies",
    "parse_rates",
    "register",
]

_PANEL = "Load and settings (default: the preset's)"
_DATASET_PANEL = "Dataset (default: random)"


def register(app: typer.Typer) -> None:
    add_command(app, bench, "Stacks")


def parse_policies(text: str) -> tuple[PolicyArm, ...]:
    from generator.bench.policies import parse_policies as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policies") from None


def _parse_p2p(text: str) -> tuple[bool, ...]:
    from generator.bench.p2p_arms import parse_p2p

    try:
        return parse_p2p(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--p2p") from None


def dataset_settings(
    settings: BenchSettings,
    dataset: str | None,
    *,
    input_len: int | None,
    prefix_len: int | None,
    suffix_len: int | None,
    num_prefixes: int | None,
) -> BenchSettings:
    """The settings with the dataset asked for; BadParameter for options of the other one."""
    from generator.services.bench import Dataset

    try:
        chosen = Dataset(dataset or Dataset.RANDOM.value)
    except ValueError:
        choices = ", ".join(d.value for d in Dataset)
        message = f"{dataset!r} is not one of {choices}"
        raise typer.BadParameter(message, param_hint="--dataset") from None
    lengths = {"prefix_len": prefix_len, "suffix_len": suffix_len, "num_prefixes": num_prefixes}
    given = {key: value for key, value in lengths.items() if value is not None}
    if chosen is Dataset.RANDOM:
        if given:
            flag = "--" + next(iter(given)).replace("_", "-")
            raise typer.BadParameter(f"{flag} needs --dataset prefix-repetition")
        return settings
    if input_len is not None:
        raise typer.BadParameter(
            "prefix-repetition prompts are --prefix-len + --suffix-len tokens",
            param_hint="--input-len",
        )
    if num_prefixes is None:  # vLLM's 10 needs 10 prompts: the smoke preset sends 8
        given["num_prefixes"] = min(settings.prefix.num_prefixes, settings.num_prompts)
    prefix = replace(settings.prefix, **given)
    if prefix.num_prefixes > settings.num_prompts:
        raise typer.BadParameter(
            f"{prefix.num_prefixes} prefixes need at least as many prompts "
            f"(--num-prompts {settings.num_prompts}): vLLM sends num_prompts // num_prefixes "
            "per prefix",
            param_hint="--num-prefixes",
        )
    return replace(settings, dataset=chosen, prefix=prefix)


def bench(
    ctx: typer.Context,
    stack: Annotated[str, typer.Argument(help="Stack name or spec path.", show_default=False)],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec value, as for `up`.", show_default=False),
    ] = None,
    runtime: RuntimeOpt = None,
    python: PythonOpt = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="seed-xpyd: seed A's run (7500 in / 200 out, 30 prompts, 1 req/s, burstiness "
            "100), its published figures shown beside ours; smoke: seconds on a cpu stack. "
            "Default: smoke on cpu stacks, seed-xpyd on GPU stacks.",
            show_default=False,
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="colocated: also benchmark the same model on the same engines with no KV "
            "transfer (vllm-router round robin), after the P/D stack, which is removed first.",
            show_default=False,
        ),
    ] = None,
    input_len: Annotated[
        int | None, typer.Option(min=1, max=MAX_TOKENS, rich_help_panel=_PANEL)
    ] = None,
    output_len: Annotated[
        int | None, typer.Option(min=1, max=MAX_TOKENS, rich_help_panel=_PANEL)
    ] = None,
    num_prompts: Annotated[
        int | None, typer.Option(min=1, max=MAX_PROMPTS, rich_help_panel=_PANEL)
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(
            help="Requests/s, or a sweep: 1,2,4 (inf: all at once).", rich_help_panel=_PANEL
        ),
    ] = None,
    max_concurrency: Annotated[
        str | None,
        typer.Option(
            help="Requests in flight at most, or a sweep: 1,4,16.", rich_help_panel=_PANEL
        ),
    ] = None,
    burstiness: Annotated[
        float | None, typer.Option(min=0.001, max=1e6, rich_help_panel=_PANEL)
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, rich_help_panel=_PANEL)] = None,
    goodput: Annotated[
        str | None,
        typer.Option(
            help="SLO for goodput, e.g. ttft:500,tpot:50 (ms; ttft, tpot, e2el).",
            rich_help_panel=_PANEL,
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="random (no shared prefixes) or prefix-repetition (vLLM's prefix_repetition: "
            "--num-prefixes prefixes, each prompt one of them + its own suffix).",
            rich_help_panel=_DATASET_PANEL,
            show_default=False,
        ),
    ] = None,
    prefix_len: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_TOKENS,
            help="prefix-repetition: tokens [256].",
            rich_help_panel=_DATASET_PANEL,
            show_default=False,
        ),
    ] = None,
    suffix_len: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_TOKENS,
            help="prefix-repetition: tokens after the prefix [256].",
            rich_help_panel=_DATASET_PANEL,
            show_default=False,
        ),
    ] = None,
    num_prefixes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_PROMPTS,
            help="prefix-repetition: distinct prefixes [10, at most --num-prompts].",
            rich_help_panel=_DATASET_PANEL,
            show_default=False,
        ),
    ] = None,
    policies: Annotated[
        str | None,
        typer.Option(
            help="Compare routing policies: the stack once per policy, one after the other, "
            "e.g. round_robin,prefix_aware,cache_aware (a bare name is the proxy's where it "
            "has it, else vllm-router's; or write proxy:NAME, vllm-router:NAME).",
            show_default=False,
        ),
    ] = None,
    p2p: Annotated[
        str | None,
        typer.Option(
            "--p2p",
            help="nixl-mp: compare LMCache P2P KV sharing on and off (on,off): the stack once "
            "each, one after the other (with --dataset prefix-repetition: what sharing buys).",
            show_default=False,
        ),
    ] = None,
    down: Annotated[
        bool,
        typer.Option("--down", help="Remove the P/D stack at the end (always with a baseline)."),
    ] = False,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Name of the report folder under runs/.")
    ] = None,
    point_timeout_s: Annotated[
        float, typer.Option(min=10, max=86400, help="Give up on one load point after this.")
    ] = 1800.0,
    idle_window_s: Annotated[
        float,
        typer.Option(
            min=0,
            max=3600,
            help="Sample each service's CPU use this long while the stack is idle, before the "
            "first point (0: skip); the report shows it.",
        ),
    ] = 10.0,
    wait_scale: Annotated[
        float,
        typer.Option(envvar="XPYD_WAIT_SCALE", min=0.01, max=1000.0, help="As for `up`."),
    ] = 1.0,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="As for `up`.")] = False,
    fault: Annotated[
        str | None,
        typer.Option(
            help="ACTION:SERVICE@T[+D]: kill (SIGKILL), term (SIGTERM) or stop (SIGSTOP for D "
            "s) an engine, LMCache server or the router T s into a steady load, or hang an "
            "engine (SIGSTOP to its core only: it still answers /health); the report "
            "(fault.md) gives failures per second, time to ejection and to recovery, and the "
            "verdict after. Multi-host stacks: cut:HOST@T+D cuts HOST off the other hosts "
            "for D s. E.g. kill:decode-0@10, stop:prefill-0@10+15, hang:decode-0@10+40, "
            "cut:host-a@10+15.",
            rich_help_panel=FAULT_PANEL,
            show_default=False,
        ),
    ] = None,
    fault_duration_s: Annotated[
        float,
        typer.Option(min=5, max=3600, help="How long the load runs.", rich_help_panel=FAULT_PANEL),
    ] = 60.0,
    fault_concurrency: Annotated[
        int,
        typer.Option(min=1, max=256, help="Clients in the load.", rich_help_panel=FAULT_PANEL),
    ] = 4,
    fault_deadline_s: Annotated[
        float,
        typer.Option(min=1, max=3600, help="Each request's deadline.", rich_help_panel=FAULT_PANEL),
    ] = 30.0,
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

    With --fault it runs a fault drill instead, with a load of its own: the benchmark's
    load, dataset and comparison options are refused there (they would change nothing), as
    are the drill's options without --fault.
    """
    from generator.bench import ArmOptions, BenchJob, check_fits, load_points, run_benchmark
    from generator.cli.run_reporter import ConsoleReporter
    from generator.paths import find_workspace
    from generator.planner import make_plan
    from generator.services.bench import default_preset, preset_settings
    from generator.stack import load_spec
    from generator.workflow.records import claim_run_dir
    from generator.workflow.run import check_run_id
    from generator.workflow.runtimes import runtime_driver

    refuse_other_mode_options(ctx, fault=fault is not None)
    if baseline not in (None, "colocated"):
        raise typer.BadParameter(
            f"{baseline!r}: the one baseline is colocated", param_hint="--baseline"
        )
    if run_id is not None:
        check_run_id(run_id)
    arms = parse_policies(policies) if policies is not None else ()
    p2p_states = _parse_p2p(p2p) if p2p is not None else ()
    if arms and p2p_states:
        raise typer.BadParameter("compare policies or P2P states, not both", param_hint="--p2p")
    workspace = find_workspace()
    spec = load_spec(
        workspace.stack_file(stack), [*(set_ or []), *runtime_overrides(runtime, python)]
    )
    plan = make_plan(spec)
    if fault is not None:
        run_fault_bench(
            plan,
            fault,
            duration_s=fault_duration_s,
            concurrency=fault_concurrency,
            deadline_s=fault_deadline_s,
            folder=claim_run_dir(workspace.root, f"{plan.stack}-fault", run_id),
            wait_scale=wait_scale,
            rebuild=rebuild,
        )
        return
    chosen = _preset(preset) or default_preset(plan.profile)
    given = preset_settings(chosen)
    settings = replace(
        given,
        input_len=input_len or given.input_len,
        output_len=output_len or given.output_len,
        num_prompts=num_prompts or given.num_prompts,
        burstiness=burstiness or given.burstiness,
        seed=given.seed if seed is None else seed,
        goodput_slo_ms=parse_goodput(goodput) if goodput else given.goodput_slo_ms,
    )
    settings = dataset_settings(
        settings,
        dataset,
        input_len=input_len,
        prefix_len=prefix_len,
        suffix_len=suffix_len,
        num_prefixes=num_prefixes,
    )
    rates = parse_rates(request_rate) if request_rate else (given.request_rate,)
    concurrencies = (
        parse_concurrencies(max_concurrency) if max_concurrency else (given.max_concurrency,)
    )
    check_sweep(rates, concurrencies)
    check_fits(plan, settings)  # before anything starts
    job = BenchJob(
        spec=spec,
        plan=plan,
        preset=chosen,
        settings=settings,
        arm_options=ArmOptions(
            load_points(settings, rates, concurrencies),
            point_timeout_s=point_timeout_s,
            wait_scale=wait_scale,
            rebuild=rebuild,
            idle_window_s=idle_window_s,
        ),
        baseline=baseline is not None,
        down=down,
        folder=claim_run_dir(workspace.root, f"{plan.stack}-bench", run_id),
        policies=arms,
        p2p=p2p_states,
    )
    job.arm_plans()  # every arm's spec and plan checked before anything starts
    runtime_driver(plan.runtime).require()
    report = run_benchmark(job, workspace, ConsoleReporter())
    _print(report)


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


def _preset(name: str | None) -> Preset | None:
    from generator.services.bench import Preset

    if name is None:
        return None
    try:
        return Preset(name)
    except ValueError:
        choices = ", ".join(p.value for p in Preset)
        raise typer.BadParameter(f"{name!r} is not a preset ({choices})") from None
