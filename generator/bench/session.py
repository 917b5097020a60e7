"""`bench`: the P/D stack (or, with --policies, the stack once per routing policy; with --p2p,
once with LMCache P2P on and once off), then
(with a baseline) its colocated twin on the same resources, each benchmarked at the same load
points, one after the other; then the report.

Arms never run at once: they share GPUs (or cores). Each is removed before the next starts
(policy arms too: engines left running would keep their warm prefix caches for the next
policy), and the last when it is done if asked to.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, replace
from pathlib import Path

from generator.bench.arms import ArmOptions, LoadPoint, remove_stack, run_arm
from generator.bench.p2p_arms import p2p_arms
from generator.bench.plots import draw_plots
from generator.bench.policies import PolicyArm, arms_of
from generator.bench.report import BenchReport, write_report
from generator.cpu_features import cpu_features
from generator.datasets import prompt_len_flags
from generator.doctor.gpus import query_gpus
from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.services.bench import BenchSettings, Preset
from generator.spec import Profile, Spec
from generator.stack import baseline_spec
from generator.stack_lock import holding
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.runtimes import release

__all__ = ["BenchJob", "check_fits", "describe_hardware", "load_points", "run_benchmark"]


@dataclass(frozen=True)
class BenchJob:
    spec: Spec
    plan: Plan
    preset: Preset
    settings: BenchSettings  # the common settings; each point sets its own load
    arm_options: ArmOptions
    baseline: bool  # also benchmark the colocated twin
    down: bool  # remove the P/D stack at the end (always, with a baseline)
    folder: Path
    policies: tuple[PolicyArm, ...] = ()  # one P/D arm per policy instead of the stack's own
    p2p: tuple[bool, ...] = ()  # one P/D arm per LMCache P2P state (on, off)

    def arm_plans(self) -> list[tuple[str, Plan]]:
        """Every arm's name and plan, in the order they run (all planned before any starts:
        a policy the stack cannot take stops the run before anything is up)."""
        arms = [("pd", self.plan)]
        if self.policies:
            arms = [(name, make_plan(spec)) for name, spec in arms_of(self.spec, self.policies)]
        elif self.p2p:
            arms = [(name, make_plan(spec)) for name, spec in p2p_arms(self.spec, self.p2p)]
        if self.baseline:
            arms.append(("colocated", make_plan(baseline_spec(self.spec, self.plan))))
        return arms


def load_points(
    settings: BenchSettings,
    rates: tuple[float | None, ...],
    concurrencies: tuple[int | None, ...],
) -> tuple[LoadPoint, ...]:
    """Every (rate, concurrency) pair, in the order given: a sweep is one or both lists."""
    points = []
    for rate, concurrency in itertools.product(rates, concurrencies):
        parts = [f"rate {rate:g}/s" if rate else "all at once"]
        parts += [f"concurrency {concurrency}"] if concurrency is not None else []
        point = replace(settings, request_rate=rate, max_concurrency=concurrency)
        points.append(LoadPoint(", ".join(parts), point))
    return tuple(points)


def check_fits(plan: Plan, settings: BenchSettings) -> None:
    limit = plan.model.max_model_len
    if limit is not None and settings.tokens_per_request > limit:
        raise XpydError(
            f"{settings.prompt_len} prompt + --output-len {settings.output_len} = "
            f"{settings.tokens_per_request} tokens, more than {plan.stack}'s model.max_model_len "
            f"{limit}",
            hint=f"lower {' or '.join([*prompt_len_flags(settings.dataset), '--output-len'])} "
            "(the smoke preset suits the cpu stacks)",
        )


def run_benchmark(job: BenchJob, workspace: Workspace, reporter: Reporter) -> BenchReport:
    """Call ``check_fits`` first: a point that cannot fit fails only after the stack is up.
    Holds the stack's lock throughout (its arms' `up`s take it again)."""
    with holding(workspace.root, job.plan.stack, f"bench {job.plan.stack}"):
        return _run_benchmark(job, workspace, reporter)


def _run_benchmark(job: BenchJob, workspace: Workspace, reporter: Reporter) -> BenchReport:
    report = BenchReport(
        job.plan.stack, job.preset.value, job.settings, describe_hardware(job.plan), job.folder
    )
    arms = job.arm_plans()
    removed: list[Plan] = []  # what they hold beyond their services goes at the end
    try:
        for index, (arm, plan) in enumerate(arms):
            remove = index + 1 < len(arms) or job.down or job.baseline
            result, context = run_arm(
                arm,
                plan,
                job.arm_options,
                workspace=workspace,
                folder=job.folder,
                reporter=reporter,
                remove_if_down=remove,
            )
            report.arms.append(result)
            write_report(report)  # what is measured so far survives a later failure
            if remove:
                reporter.event(EventLevel.INFO, f"{plan.stack}: removing it (frees its resources)")
                remove_stack(context, release=False)  # a later arm may run in its Slurm job
                removed.append(plan)
    finally:
        for plan in removed:
            release(plan.runtime, plan.stack, workspace)
    report.plots = draw_plots(report)
    write_report(report)
    return report


def describe_hardware(plan: Plan) -> str:
    """What the numbers were measured on: the engines' share, this machine's CPU or the GPUs
    its driver lists (a remote host's GPUs are named by the spec only), and what ran them."""
    return f"{_engines_on(plan)}; {plan.runtime.value} runtime"


def _engines_on(plan: Plan) -> str:
    count = len(plan.engines)
    if plan.profile is Profile.CPU:
        cores = len({(engine.host, core) for engine in plan.engines for core in engine.cpus})
        pinned = sum(len(engine.cpus) for engine in plan.engines)
        shared = " (shared: cpu.share)" if cores < pinned else ""
        return f"cpu profile: {count} engines on {cores} pinned cores{shared} of {_cpu_model()}"
    gpus = len({(engine.host, gpu) for engine in plan.engines for gpu in engine.gpus})
    shared = " (shared: gpu.share)" if gpus < sum(len(e.gpus) for e in plan.engines) else ""
    plural = "" if gpus == 1 else "s"
    return f"{count} engines on {gpus} GPU{plural}{shared} ({_gpu_model() or 'GPU model not read'})"


def _cpu_model() -> str:
    features = cpu_features()  # AMD and Intel figures are not comparable: name the ISA too
    flags = " ".join(features.vector_flags) or "no AVX2"
    return f"{features.model} ({flags}; {os.cpu_count()} CPUs)"


def _gpu_model() -> str | None:
    gpus = query_gpus()  # doctor's one place that runs nvidia-smi
    return ", ".join(sorted({gpu.name for gpu in gpus})) if gpus else None
