"""`bench`: vLLM's serving benchmark against a stack and its colocated baseline, and the
report (bench.json, bench.md, plots) in the run folder."""

from __future__ import annotations

from generator.bench.arms import ArmOptions, LoadPoint
from generator.bench.report import BenchReport
from generator.bench.session import BenchJob, check_fits, load_points, run_benchmark

__all__ = [
    "ArmOptions",
    "BenchJob",
    "BenchReport",
    "LoadPoint",
    "check_fits",
    "load_points",
    "run_benchmark",
]
