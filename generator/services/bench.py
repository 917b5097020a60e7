"""The command of the stack's `bench` service: vLLM's own serving benchmark (`vllm bench
serve`, with one of the datasets of generator/datasets/) against the router, and the named
presets it runs with.

The rendered service carries the profile's default preset, so `docker compose run --rm bench`
reproduces a run of `python -m generator bench` at that preset's first load point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from generator.datasets import DatasetSettings, dataset_settings, default_dataset
from generator.plan import Plan
from generator.spec import Profile

__all__ = [
    "BENCH_RESULTS_DIR",
    "BenchSettings",
    "Preset",
    "bench_command",
    "default_preset",
    "preset_settings",
]

BENCH_RESULTS_DIR = "/results"  # mount a host folder here to keep the result JSON


class Preset(StrEnum):
    # LMCache's examples/disagg_prefill/xpyd README benchmark (seed A), with a fixed seed
    SEED_XPYD = "seed-xpyd"
    SMOKE = "smoke"  # seconds on the cpu stacks' tiny model: CI and first runs


@dataclass(frozen=True)
class BenchSettings:
    """One run of `vllm bench serve` (one load point)."""

    output_len: int = 16
    num_prompts: int = 8
    request_rate: float | None = None  # None: all at once, bounded by max_concurrency
    burstiness: float = 1.0  # 1: Poisson arrivals; larger: more regular
    max_concurrency: int | None = None
    seed: int = 0
    goodput_slo_ms: tuple[tuple[str, float], ...] = ()  # (ttft|tpot|e2el, ms)
    detailed: bool = True  # per-request TTFTs and ITLs in the JSON (the report's plots)
    dataset: DatasetSettings = field(default_factory=default_dataset)  # the prompts

    @property
    def prompt_len(self) -> int:
        return self.dataset.prompt_len

    @property
    def tokens_per_request(self) -> int:
        return self.prompt_len + self.output_len

    def as_dict(self) -> dict[str, Any]:
        """For bench.json: the dataset by name, its prompt length and its own fields."""
        return {
            "dataset": self.dataset.name,
            "input_len": self.prompt_len,
            **self.dataset.report_fields(),
            "output_len": self.output_len,
            "num_prompts": self.num_prompts,
            "request_rate": self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "seed": self.seed,
            "goodput_slo_ms": dict(self.goodput_slo_ms),
            "detailed": self.detailed,
        }


_PRESETS = {
    Preset.SEED_XPYD: BenchSettings(
        output_len=200,
        num_prompts=30,
        request_rate=1.0,
        burstiness=100.0,
        dataset=dataset_settings("random", {"input_len": 7500}, num_prompts=30),
    ),
    Preset.SMOKE: BenchSettings(),
}


def preset_settings(preset: Preset) -> BenchSettings:
    return _PRESETS[preset]


def default_preset(profile: Profile) -> Preset:
    return Preset.SMOKE if profile is Profile.CPU else Preset.SEED_XPYD


def bench_command(
    plan: Plan, settings: BenchSettings, result_file: str = "bench.json"
) -> list[str]:
    # The bench container runs on the router's host: loopback with host networking, the
    # router's service name on the stack's bridge.
    router_host = "127.0.0.1" if plan.network == "host" else plan.router.service
    model = plan.model
    return [
        *["python3", "-m", "vllm.entrypoints.cli.main", "bench", "serve"],
        *["--backend", "openai", "--endpoint", "/v1/completions"],
        *["--base-url", f"http://{router_host}:{plan.router.port}"],
        *["--model", model.served_name, "--tokenizer", model.id],
        *settings.dataset.vllm_args(settings.output_len),
        *["--num-prompts", str(settings.num_prompts), *_load_args(settings)],
        *["--burstiness", f"{settings.burstiness:g}", "--seed", str(settings.seed)],
        *["--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el"],
        *["--metric-percentiles", "50,90,99", *_goodput_args(settings)],
        *["--save-result", *(["--save-detailed"] if settings.detailed else [])],
        *["--result-dir", BENCH_RESULTS_DIR, "--result-filename", result_file],
    ]


def _load_args(settings: BenchSettings) -> list[str]:
    args = ["--request-rate", f"{settings.request_rate:g}"] if settings.request_rate else []
    if settings.max_concurrency is not None:
        args += ["--max-concurrency", str(settings.max_concurrency)]
    return args


def _goodput_args(settings: BenchSettings) -> list[str]:
    if not settings.goodput_slo_ms:
        return []
    return ["--goodput", *(f"{metric}:{ms:g}" for metric, ms in settings.goodput_slo_ms)]
