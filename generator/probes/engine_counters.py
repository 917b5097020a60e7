"""Counters summed over every engine of a stack, read before and after some traffic: what
the colocated verdict and the benchmark report say about KV transfer and load spread."""

from __future__ import annotations

from dataclasses import dataclass

from generator.plan import EnginePlan, Plan
from generator.probes.http import MetricSamples, ProbeClient, metric_sum

__all__ = ["EngineCounters", "read_engine_counters"]

_SOURCE = "vllm:prompt_tokens_by_source_total"


@dataclass(frozen=True)
class EngineCounters:
    kv_tokens: float  # prompt tokens an engine got as KV from another (external_kv_transfer)
    local_tokens: float  # prompt tokens engines computed themselves (local_compute)
    requests: dict[str, float]  # finished requests, per engine

    def __sub__(self, before: EngineCounters) -> EngineCounters:
        return EngineCounters(
            self.kv_tokens - before.kv_tokens,
            self.local_tokens - before.local_tokens,
            {name: count - before.requests.get(name, 0.0) for name, count in self.requests.items()},
        )


def read_engine_counters(client: ProbeClient, plan: Plan) -> EngineCounters:
    per_engine = {engine.name: _scrape(client, plan, engine) for engine in plan.engines}
    samples = list(per_engine.values())
    return EngineCounters(
        kv_tokens=sum(metric_sum(s, _SOURCE, {"source": "external_kv_transfer"}) for s in samples),
        local_tokens=sum(metric_sum(s, _SOURCE, {"source": "local_compute"}) for s in samples),
        requests={
            name: metric_sum(s, "vllm:request_success_total") for name, s in per_engine.items()
        },
    )


def _scrape(client: ProbeClient, plan: Plan, engine: EnginePlan) -> MetricSamples:
    address = plan.engine_address(engine)
    return client.scrape(engine.name, f"http://{address}:{engine.http_port}/metrics")
