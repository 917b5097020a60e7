"""The optional bench task: vLLM's own serving benchmark (`vllm bench serve`) against the
router, run as a one-off `bench` container of the stack; results kept in the run folder.
(The full `bench` command, P/D against a colocated baseline with plots, builds on this.)"""

from __future__ import annotations

import json
from typing import Any

from generator.errors import StackError
from generator.workflow.context import RunContext

__all__ = ["bench_command", "run_bench"]

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


def bench_command(context: RunContext) -> list[str]:
    plan = context.plan
    settings = context.options.bench_settings
    router_host = "127.0.0.1" if plan.network == "host" else plan.router.service
    model = plan.model
    load = ["--request-rate", f"{settings.request_rate:g}"] if settings.request_rate else []
    if settings.max_concurrency is not None:
        load += ["--max-concurrency", str(settings.max_concurrency)]
    return [
        *["python3", "-m", "vllm.entrypoints.cli.main", "bench", "serve"],
        *["--backend", "openai", "--endpoint", "/v1/completions"],
        *["--base-url", f"http://{router_host}:{plan.router.port}"],
        *["--model", model.served_name, "--tokenizer", model.id],
        *["--dataset-name", "random", "--random-input-len", str(settings.input_len)],
        *["--random-output-len", str(settings.output_len)],
        *["--num-prompts", str(settings.num_prompts), *load],
        *["--burstiness", f"{settings.burstiness:g}", "--seed", "0", "--ignore-eos"],
        *["--save-result", "--result-dir", "/results", "--result-filename", "bench.json"],
    ]


def run_bench(context: RunContext) -> dict[str, Any]:
    results = context.run_dir / "bench"
    results.mkdir(parents=True, exist_ok=True)
    output = context.stack.run_oneoff("bench", bench_command(context), [(results, "/results")])
    (results / "bench.log").write_text(output, encoding="utf-8")
    report = results / "bench.json"
    if not report.is_file():
        raise StackError("the benchmark wrote no result", hint=f"read {results / 'bench.log'}")
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    summary = {key: data[key] for key in _KEYS if key in data}
    if summary.get("completed", 0) == 0:
        raise StackError("the benchmark completed no request", hint=f"read {results / 'bench.log'}")
    return summary
