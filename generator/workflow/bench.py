"""The optional bench task: vLLM's own serving benchmark (`vllm bench serve`) against the
router, run as a one-off `bench` container of the stack; results kept in the run folder.
The rendered `bench` service carries the same command with the default settings."""

from __future__ import annotations

import json
from typing import Any

from generator.errors import StackError
from generator.services.bench import BENCH_RESULTS_DIR, bench_command
from generator.workflow.context import RunContext

__all__ = ["run_bench"]

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
    results = context.run_dir / "bench"
    results.mkdir(parents=True, exist_ok=True)
    command = bench_command(context.plan, context.options.bench_settings)
    output = context.router_host.compose.run_oneoff(
        "bench", command, [(results, BENCH_RESULTS_DIR)]
    )
    (results / "bench.log").write_text(output, encoding="utf-8")
    report = results / "bench.json"
    if not report.is_file():
        raise StackError("the benchmark wrote no result", hint=f"read {results / 'bench.log'}")
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    summary = {key: data[key] for key in _KEYS if key in data}
    if summary.get("completed", 0) == 0:
        raise StackError("the benchmark completed no request", hint=f"read {results / 'bench.log'}")
    return summary
