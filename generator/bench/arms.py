"""One arm of a benchmark: bring a stack up through the normal `up` workflow (its verdict
included), run vLLM's `bench serve` at every load point in a one-off container on the
stack's network, and read the engines' counters around each point."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from generator.bench.cache_counters import read_cache_counters
from generator.bench.engine_settings import engine_settings
from generator.bench.results import ArmResult, PointResult, read_point
from generator.errors import StackError
from generator.observe.rules import KV_GIB_S
from generator.owned import write_text
from generator.paths import Workspace
from generator.plan import Plan
from generator.probes.engine_counters import read_engine_counters
from generator.probes.http import ProbeClient
from generator.probes.kv_speed import KvCounters, read_counters, wait_for_transfers
from generator.probes.prometheus_history import fetch_history
from generator.probes.prometheus_page import screenshot_graph
from generator.probes.ttft_parts import read_engine_times, ttft_parts
from generator.services.bench import BenchSettings
from generator.topologies import topology_of
from generator.workflow.bench import run_bench_point
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.run import make_context, up_stack
from generator.workflow.runner import TaskFailure
from generator.workflow.runtimes import remove_hosts

__all__ = ["ArmOptions", "LoadPoint", "idle_cpu_means", "remove_stack", "run_arm"]

_SAMPLE_EVERY_S = 2.0


@dataclass(frozen=True)
class LoadPoint:
    label: str
    settings: BenchSettings


@dataclass(frozen=True)
class ArmOptions:
    points: tuple[LoadPoint, ...]
    point_timeout_s: float
    wait_scale: float = 1.0
    rebuild: bool = False
    idle_window_s: float = 10.0  # how long the idle stack's CPU use is sampled (0: not)


def run_arm(
    arm: str,
    plan: Plan,
    options: ArmOptions,
    *,
    workspace: Workspace,
    folder: Path,
    reporter: Reporter,
    remove_if_down: bool = False,
) -> tuple[ArmResult, RunContext]:
    """The arm's result and the context of its stack (to remove it with). With
    ``remove_if_down`` a stack that never answered is removed before the failure is raised
    (a baseline, or --down: what it started must not keep holding the GPUs or cores)."""
    run_options = RunOptions(wait_scale=options.wait_scale, rebuild=options.rebuild)
    context = make_context(plan, workspace, run_options, None, reporter, directory=folder / arm)
    try:
        up_stack(context)
    except TaskFailure:
        if context.verdict is None:  # it never answered: nothing to benchmark
            if remove_if_down:
                reporter.event(EventLevel.FAILED, f"{plan.stack}: did not come up, removing it")
                remove_stack(context)
            raise
        reporter.event(
            EventLevel.WARN,
            f"{plan.stack}: the verdict FAILED; benchmarking anyway, results marked invalid",
        )
    result = _arm_result(arm, context)
    try:
        if options.idle_window_s > 0:
            result.idle_cpu_percent = _idle_cpu(context, options.idle_window_s)
        started = time.time()
        for index, point in enumerate(options.points):
            result.points.append(_run_point(context, index, point, options.point_timeout_s))
        if plan.observe is not None:  # before the arm is removed: its Prometheus goes with it
            result.prometheus_file = _keep_history(context, arm, folder, started)
            result.prometheus_screenshot = _picture_kv_speed(context, arm, folder, started)
    except KeyboardInterrupt:  # as `up` does: Ctrl+C leaves nothing running
        reporter.event(EventLevel.FAILED, f"{plan.stack}: interrupted, removing it")
        remove_stack(context)
        raise
    return result, context


def remove_stack(context: RunContext, *, release: bool = True) -> None:
    """Its services down; with ``release``, what it holds beyond them too (a Slurm job,
    which a bench's later arms may still run in: the bench releases it at its end)."""
    remove_hosts(context, release=release)
    context.reporter.event(EventLevel.DONE, f"{context.plan.stack}: removed")


def _arm_result(arm: str, context: RunContext) -> ArmResult:
    plan, verdict = context.plan, context.verdict
    assert verdict is not None  # run_arm returns early without one
    return ArmResult(
        arm=arm,
        stack=plan.stack,
        topology=plan.topology.kind.value,
        router=plan.router.kind.value,
        engines={engine.name: _resources(engine.gpus, engine.cpus) for engine in plan.engines},
        run_dir=str(context.run_dir),
        verdict_passed=verdict.passed,
        verdict=verdict.as_dict(),
        kv_per_request=list(verdict.kv_transfers),
        engine_settings=engine_settings(plan),
    )


def _keep_history(context: RunContext, arm: str, folder: Path, started: float) -> str | None:
    """The key dashboard panels over the arm's load points, from its Prometheus, as JSON
    beside the arm's results (its name, relative to the report's folder)."""
    try:
        histories = fetch_history(context.plan, started, time.time())
    except StackError as error:
        context.reporter.event(EventLevel.WARN, f"no Prometheus history: {error.message}")
        return None
    name = f"{arm}/prometheus.json"
    write_text(folder, folder / name, json.dumps([asdict(h) for h in histories]))
    return name


def _picture_kv_speed(context: RunContext, arm: str, folder: Path, started: float) -> str | None:
    """Prometheus's own graph page of the KV path's speed over the load points, as headless
    Chromium draws it (its name, relative to the report's folder). Stacks that move no KV
    (a colocated baseline) have no such series."""
    if topology_of(context.plan).verdict_sources(context.plan) is None:
        return None
    name = f"{arm}/prometheus-kv-speed.png"
    try:
        screenshot_graph(context.plan, KV_GIB_S, time.time() - started, folder / name)
    except StackError as error:
        context.reporter.event(EventLevel.WARN, f"no picture of Prometheus: {error.message}")
        return None
    context.reporter.event(EventLevel.INFO, f"Prometheus's graph of {KV_GIB_S}: {folder / name}")
    return name


def _idle_cpu(context: RunContext, window_s: float) -> dict[str, float]:
    """Mean CPU use per service (% of one core) while nothing is asked of the stack: a stack
    that spins when idle steals the cores its neighbours (and its own engines) need."""
    context.progress(f"{context.plan.stack}: sampling CPU use while idle ({window_s:g} s)")
    runtimes = [stack.runtime for stack in context.hosts.values()]
    return idle_cpu_means(lambda: [runtime.cpu_percentages() for runtime in runtimes], window_s)


def idle_cpu_means(
    look: Callable[[], Sequence[Mapping[str, float]]], window_s: float
) -> dict[str, float]:
    """Each service's mean over the looks (one per host each time) in ``window_s``. A first
    look that finds nothing ends it: the runtime cannot sample here (the Slurm runtime: its
    steps run on the nodes), and the rest of the window would only sleep."""
    samples: dict[str, list[float]] = {}
    deadline = time.monotonic() + window_s
    while (started := time.monotonic()) < deadline:
        for percentages in look():
            for service, percent in percentages.items():
                samples.setdefault(service, []).append(percent)
        if not samples:
            return {}
        # `docker stats` samples about a second; never poll faster than that
        time.sleep(max(0.0, _SAMPLE_EVERY_S - (time.monotonic() - started)))
    return {service: sum(values) / len(values) for service, values in sorted(samples.items())}


def _resources(gpus: tuple[int, ...], cpus: tuple[int, ...]) -> str:
    if gpus:
        return "GPU " + ",".join(map(str, gpus))
    return ("core " + ",".join(map(str, cpus))) if cpus else "unpinned"


def _run_point(context: RunContext, index: int, point: LoadPoint, timeout_s: float) -> PointResult:
    plan = context.plan
    moves_kv = topology_of(plan).verdict_sources(plan) is not None
    context.progress(
        f"{plan.stack}: benchmark at {point.label} ({point.settings.num_prompts} prompts)"
    )
    with ProbeClient(plan.stack, timeout_s=30.0) as client:
        engines_before = read_engine_counters(client, plan)
        cache_before = read_cache_counters(client, plan)
        kv_before = read_counters(client, plan) if moves_kv else None
        times_before = read_engine_times(client, plan, disaggregated=moves_kv)
        path = run_bench_point(context, point.settings, f"point-{index}", timeout_s=timeout_s)
        kv = _kv_change(client, plan, kv_before)
        engines = read_engine_counters(client, plan) - engines_before
        cache = read_cache_counters(client, plan) - cache_before
        times = read_engine_times(client, plan, disaggregated=moves_kv) - times_before
    result = read_point(path, point.label, point.settings, engines, kv, cache=cache)
    parts = ttft_parts(
        result.metrics.get("mean_ttft_ms"),
        times,
        result.kv_ms_per_request,
        first_token_from_prefiller=topology_of(plan).router_protocol == "lmcache-pd",
    )
    result = replace(result, ttft_parts=parts)
    context.progress(f"{plan.stack}: {point.label}: {_headline(result)}")
    return result


def _kv_change(client: ProbeClient, plan: Plan, before: KvCounters | None) -> KvCounters | None:
    """NIXL's counters over the point: vLLM publishes a transfer with its next stats update,
    a moment after the response."""
    if before is None:
        return None
    return wait_for_transfers(client, plan, before) - before


def _headline(result: PointResult) -> str:
    m = {key: value or 0.0 for key, value in result.metrics.items()}
    return (
        f"{m['completed']:.0f} completed, {m['output_throughput']:.1f} output tok/s, "
        f"mean TTFT {m['mean_ttft_ms']:.1f} ms, mean ITL {m['mean_itl_ms']:.2f} ms, "
        f"KV tokens {result.kv_tokens:.0f}"
    )
