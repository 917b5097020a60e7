"""The prefillers' prefix-cache counters around a benchmark point: vLLM's own
``vllm:prefix_cache_{queries,hits}`` (its GPU/CPU block cache) and
``vllm:external_prefix_cache_{queries,hits}`` (what the KV connector found: LMCache on a
prefiller). All in tokens, summed over the prefillers only: a decoder's "external" hits are
the P/D hand-off itself, not a cache."""

from __future__ import annotations

from dataclasses import dataclass, fields

from generator.plan import Plan
from generator.probes.http import ProbeClient, metric_sum

__all__ = ["CacheCounters", "read_cache_counters"]

_NAMES = {
    "queries": "vllm:prefix_cache_queries_total",
    "hits": "vllm:prefix_cache_hits_total",
    "external_queries": "vllm:external_prefix_cache_queries_total",
    "external_hits": "vllm:external_prefix_cache_hits_total",
}


@dataclass(frozen=True)
class CacheCounters:
    queries: float = 0.0
    hits: float = 0.0
    external_queries: float = 0.0
    external_hits: float = 0.0

    def __sub__(self, before: CacheCounters) -> CacheCounters:
        return CacheCounters(
            *(getattr(self, f.name) - getattr(before, f.name) for f in fields(self))
        )

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None

    @property
    def external_hit_rate(self) -> float | None:
        return self.external_hits / self.external_queries if self.external_queries else None


def read_cache_counters(client: ProbeClient, plan: Plan) -> CacheCounters:
    totals = dict.fromkeys(_NAMES, 0.0)
    for engine in plan.prefill:
        address = plan.engine_address(engine)
        samples = client.scrape(engine.name, f"http://{address}:{engine.http_port}/metrics")
        for key, name in _NAMES.items():
            totals[key] += metric_sum(samples, name)
    return CacheCounters(**totals)
