"""Running vLLM's serving benchmark (`vllm bench serve`) once against a stack's router, as a
one-off container of the stack's `bench` service; results kept in the run folder. The
optional `bench` task of `up` runs it once; `python -m generator bench` (generator/bench/)
runs it per load point and arm."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from generator.errors import StackError
from generator.owned import owned_dir, write_text
from generator.services.bench import BENCH_RESULTS_DIR, BenchSettings, bench_command
from generator.workflow.context import RunContext

__all__ = ["run_bench", "run_bench_point"]

_PROGRESS_EVERY_S = 15.0
_LOG_TAIL_LINES = 25
_UP_BENCH_TIMEOUT_S = 3600.0
_KEYS = (
    "completed",
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_itl_ms",
)


def run_bench(context: RunContext) -> dict[str, Any]:
    """The `bench` task of `up`: one run with the options' settings; a summary."""
    report = run_bench_point(
        context, context.options.bench_settings, "bench", timeout_s=_UP_BENCH_TIMEOUT_S
    )
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    summary = {key: data[key] for key in _KEYS if key in data}
    if summary.get("completed", 0) == 0:
        raise StackError(
            "the benchmark completed no request", hint=f"read {report.with_suffix('.log')}"
        )
    return summary


def run_bench_point(
    context: RunContext, settings: BenchSettings, name: str, *, timeout_s: float
) -> Path:
    """Runs the benchmark to the end (bounded, with progress); its result JSON, with its
    output beside it (``<name>.log``). Fails with the log's tail."""
    folder = owned_dir(context.run_dir, PurePosixPath("bench"))
    runtime = context.router_host.runtime
    container = f"{runtime.project}-bench-{name}"
    runtime.remove_oneoff(container)  # left by a run that was killed
    command = bench_command(context.plan, settings, f"{name}.json")
    volumes = [(folder.resolve(), BENCH_RESULTS_DIR)]
    oneoff = runtime.start_oneoff("bench", command, name=container, env={}, volumes=volumes)
    try:
        code = _wait(context, oneoff.wait, timeout_s)
        stdout, stderr = oneoff.output()
    finally:
        oneoff.remove()
    log = stdout + stderr
    write_text(folder, folder / f"{name}.log", log)
    if code is None:
        raise StackError(f"the benchmark ran past {timeout_s:g} s", hint="raise its timeout")
    if code != 0:
        tail = "\n".join(log.splitlines()[-_LOG_TAIL_LINES:])
        raise StackError(f"the benchmark exited with code {code}:\n{tail}")
    result = folder / f"{name}.json"
    if not result.is_file():
        raise StackError("the benchmark wrote no result", hint=f"read {folder / name}.log")
    return result


def _wait(context: RunContext, wait: Callable[[float], int | None], timeout_s: float) -> int | None:
    started = time.monotonic()
    while (left := timeout_s - (time.monotonic() - started)) > 0:
        code = wait(min(_PROGRESS_EVERY_S, left))
        if code is not None:
            return code
        context.progress(f"benchmark running, {time.monotonic() - started:.0f}s")
    return None
