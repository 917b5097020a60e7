"""What one benchmark point and one arm (the P/D stack, or its colocated baseline) measured.

The numbers are read from vLLM's own result JSON (`vllm bench serve --save-result`), never
computed again here; the KV columns come from the engines' counters around the point."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from generator.bench.cache_counters import CacheCounters
from generator.errors import StackError
from generator.probes.engine_counters import EngineCounters
from generator.probes.kv_speed import KvCounters
from generator.probes.ttft_parts import TtftPart
from generator.services.bench import BenchSettings

__all__ = ["METRICS", "ArmResult", "PointResult", "read_point"]

# vLLM's result keys the report shows, in its order (ms unless named otherwise).
METRICS = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    *(
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "p99")
    ),
)


@dataclass(frozen=True)
class PointResult:
    label: str  # the load: "rate 2/s", "concurrency 4", "all at once"
    settings: BenchSettings
    result_file: str  # vLLM's JSON, relative to the bench folder
    metrics: dict[str, float | None]
    kv_tokens: float  # prompt tokens engines received as KV during the point
    local_tokens: float  # prompt tokens engines computed themselves
    kv_bytes: float | None = None  # NIXL's counters (P/D only)
    kv_seconds: float | None = None
    kv_descriptors: float | None = None  # where the engines count them (nixl-mp)
    # the prefillers' prefix caches over the point
    cache: CacheCounters = field(default_factory=CacheCounters)
    # the client's mean TTFT and its parts, as the engines timed them (probes.ttft_parts)
    ttft_parts: list[TtftPart] = field(default_factory=list)

    @property
    def kv_ms_per_request(self) -> float | None:
        """NIXL's transfer time per completed request (its counters over the point)."""
        completed = self.metrics.get("completed") or 0
        if self.kv_seconds is None or not completed:
            return None
        return 1000 * self.kv_seconds / completed

    @property
    def kv_mib_per_request(self) -> float | None:
        completed = self.metrics.get("completed") or 0
        if self.kv_bytes is None or not completed:
            return None
        return self.kv_bytes / completed / (1 << 20)

    @property
    def kv_descriptors_per_request(self) -> float | None:
        """NIXL descriptors per completed request: vLLM gives one per layer, K or V and run of
        neighbouring KV blocks, so more per request means fewer blocks merged."""
        completed = self.metrics.get("completed") or 0
        if not self.kv_descriptors or not completed:
            return None
        return self.kv_descriptors / completed

    @property
    def kv_gib_s(self) -> float | None:
        if not self.kv_bytes or not self.kv_seconds:
            return None
        return self.kv_bytes / self.kv_seconds / (1 << 30)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self) | {"settings": self.settings.as_dict()}
        rates = {
            "prefix_cache_hit_rate": self.cache.hit_rate,
            "external_prefix_cache_hit_rate": self.cache.external_hit_rate,
        }
        return (
            data
            | rates
            | {"kv_mib_per_request": self.kv_mib_per_request, "kv_gib_s": self.kv_gib_s}
            | {"kv_descriptors_per_request": self.kv_descriptors_per_request}
        )


@dataclass
class ArmResult:
    arm: str  # "pd" or "colocated"
    stack: str
    topology: str
    router: str
    engines: dict[str, str]  # name -> its resources ("GPU 0,1", "core 1")
    run_dir: str  # the `up` record of this arm
    verdict_passed: bool
    verdict: dict[str, Any]
    kv_per_request: list[dict[str, Any]]  # the verdict's KV speed measurement
    points: list[PointResult] = field(default_factory=list)
    idle_cpu_percent: dict[str, float] = field(default_factory=dict)  # per service, 1 core = 100
    # what changes the figures: CUDA graphs, block size, GPU share, KV transfer (engine_settings)
    engine_settings: dict[str, str] = field(default_factory=dict)
    # Observed stacks: the key dashboard panels over the load points (relative to the report).
    prometheus_file: str | None = None
    prometheus_screenshot: str | None = None  # Prometheus's graph page of the KV speed (PNG)

    @property
    def valid(self) -> bool:
        """A benchmark of a stack whose verdict failed measures something else."""
        return self.verdict_passed

    def as_dict(self) -> dict[str, Any]:
        data = {key: value for key, value in vars(self).items() if key != "points"}
        return data | {"valid": self.valid, "points": [p.as_dict() for p in self.points]}


def read_point(
    path: Path,
    label: str,
    settings: BenchSettings,
    engines: EngineCounters,
    kv: KvCounters | None,
    *,
    cache: CacheCounters | None = None,
) -> PointResult:
    """One point from vLLM's JSON (workflow.bench made sure it exists); refuses a run that
    completed nothing."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    metrics = {key: _number(data.get(key)) for key in METRICS}
    if not metrics["completed"]:
        raise StackError(
            f"the benchmark completed no request at {label}",
            hint=f"read {path.with_suffix('.log')} and the router's log",
        )
    return PointResult(
        label,
        settings,
        path.parent.name + "/" + path.name,
        metrics,
        kv_tokens=engines.kv_tokens,
        local_tokens=engines.local_tokens,
        kv_bytes=kv.bytes if kv else None,
        kv_seconds=kv.seconds if kv else None,
        kv_descriptors=(kv.descriptors or None) if kv else None,
        cache=cache or CacheCounters(),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
