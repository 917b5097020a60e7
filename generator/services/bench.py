"""The command of the stack's `bench` service: vLLM's own serving benchmark (`vllm bench
serve`, its random or prefix_repetition dataset) against the router, and the named presets
it runs with.

The rendered service carries the profile's default preset, so `docker compose run --rm bench`
reproduces a run of `python -m generator bench` at that preset's first load point.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from generator.plan import Plan
from generator.spec import Profile

__all__ = [
    "BENCH_RESULTS_DIR",
    "BenchSettings",
    "Dataset",
    "PrefixRepetition",
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


class Dataset(StrEnum):
    RANDOM = "random"  # random tokens: no two prompts share a prefix
    # vLLM's prefix_repetition: num_prefixes random prefixes, each followed by random
    # suffixes; what prefix caches and prefix-aware routing are measured with
    PREFIX_REPETITION = "prefix-repetition"


@dataclass(frozen=True)
class PrefixRepetition:
    """vLLM 0.32's --prefix-repetition-* options (its defaults)."""

    prefix_len: int = 256
    suffix_len: int = 256
    num_prefixes: int = 10  # vLLM sends num_prompts // num_prefixes prompts per prefix


@dataclass(frozen=True)
class BenchSettings:
    """One run of `vllm bench serve` (one load point)."""

    input_len: int = 256  # the random dataset's; prefix-repetition: prefix + suffix
    output_len: int = 16
    num_prompts: int = 8
    request_rate: float | None = None  # None: all at once, bounded by max_concurrency
    burstiness: float = 1.0  # 1: Poisson arrivals; larger: more regular
    max_concurrency: int | None = None
    seed: int = 0
    goodput_slo_ms: tuple[tuple[str, float], ...] = ()  # (ttft|tpot|e2el, ms)
    detailed: bool = True  # per-request TTFTs and ITLs in the JSON (the report's plots)
    dataset: Dataset = Dataset.RANDOM
    prefix: PrefixRepetition = PrefixRepetition()  # read with Dataset.PREFIX_REPETITION only

    @property
    def prompt_len(self) -> int:
        if self.dataset is Dataset.PREFIX_REPETITION:
            return self.prefix.prefix_len + self.prefix.suffix_len
        return self.input_len

    @property
    def tokens_per_request(self) -> int:
        return self.prompt_len + self.output_len


_PRESETS = {
    Preset.SEED_XPYD: BenchSettings(
        input_len=7500, output_len=200, num_prompts=30, request_rate=1.0, burstiness=100.0
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
        *_dataset_args(settings),
        *["--num-prompts", str(settings.num_prompts), *_load_args(settings)],
        *["--burstiness", f"{settings.burstiness:g}", "--seed", str(settings.seed)],
        *["--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el"],
        *["--metric-percentiles", "50,90,99", *_goodput_args(settings)],
        *["--save-result", *(["--save-detailed"] if settings.detailed else [])],
        *["--result-dir", BENCH_RESULTS_DIR, "--result-filename", result_file],
    ]


def _dataset_args(settings: BenchSettings) -> list[str]:
    output = str(settings.output_len)
    if settings.dataset is Dataset.RANDOM:
        args = ["--dataset-name", "random", "--random-input-len", str(settings.input_len)]
        return [*args, "--random-output-len", output]
    prefix = settings.prefix
    return [
        *["--dataset-name", "prefix_repetition"],
        *["--prefix-repetition-prefix-len", str(prefix.prefix_len)],
        *["--prefix-repetition-suffix-len", str(prefix.suffix_len)],
        *["--prefix-repetition-num-prefixes", str(prefix.num_prefixes)],
        *["--prefix-repetition-output-len", output],
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
