"""The command of the stack's `bench` service: vLLM's own serving benchmark (random dataset)
against the router. The rendered service carries it with the default settings, so
`docker compose run --rm bench` reproduces a run; `up --bench` passes its own settings."""

from __future__ import annotations

from dataclasses import dataclass

from generator.plan import Plan

__all__ = ["BENCH_RESULTS_DIR", "BenchSettings", "bench_command"]

BENCH_RESULTS_DIR = "/results"  # mount a host folder here to keep bench.json


@dataclass(frozen=True)
class BenchSettings:
    """The defaults suit the cpu stacks; seed A's GPU run is 7500 in / 200 out, 30 prompts,
    1 req/s, burstiness 100."""

    input_len: int = 512
    output_len: int = 32
    num_prompts: int = 32
    request_rate: float | None = None  # None: as fast as max_concurrency allows
    burstiness: float = 1.0
    max_concurrency: int | None = None


def bench_command(plan: Plan, settings: BenchSettings) -> list[str]:
    # The bench container runs on the router's host: loopback with host networking, the
    # router's service name on the stack's bridge.
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
        *["--save-result", "--result-dir", BENCH_RESULTS_DIR, "--result-filename", "bench.json"],
    ]
