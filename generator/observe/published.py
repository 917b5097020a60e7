"""What each part of a stack publishes on its Prometheus page: the only metric names rules and
dashboards may read (tests check both against this table, and the table against pages
recorded from live stacks: tests/probes/recorded/).

Names are the families as their ``# TYPE`` lines spell them; a histogram's series are the
family with ``_bucket``, ``_sum`` and ``_count``."""

from __future__ import annotations

from typing import Final, Literal

from generator.observe.targets import scrape_targets
from generator.plan import Plan
from generator.topologies import topology_of

__all__ = [
    "LMCACHE_SERVER",
    "NIXL_TELEMETRY",
    "PROMETHEUS",
    "PROXY",
    "VLLM",
    "VLLM_NIXL",
    "VLLM_ROUTER",
    "Kind",
    "published_families",
    "published_series",
    "series_of",
]

Kind = Literal["counter", "gauge", "histogram"]

# vLLM 0.32's API server (every engine; recorded in tests/probes/recorded/cpu-lmcache-pd.json).
VLLM: Final[dict[str, Kind]] = {
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_success_total": "counter",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:prompt_tokens_by_source_total": "counter",  # label source: external_kv_transfer...
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_preemptions_total": "counter",
}
# vLLM's NixlConnector (nixl-mp engines; recorded in tests/probes/recorded/cpu-p2p/decode-0.txt).
VLLM_NIXL: Final[dict[str, Kind]] = {
    "vllm:nixl_bytes_transferred": "histogram",
    "vllm:nixl_xfer_time_seconds": "histogram",
    "vllm:nixl_num_failed_transfers_total": "counter",
    "vllm:nixl_num_failed_notifications_total": "counter",
    "vllm:nixl_num_kv_expired_reqs_total": "counter",  # counted on the prefiller
}
# NIXL's Prometheus exporter (lmcache-pd prefillers; recorded as prefill-0-nixl).
NIXL_TELEMETRY: Final[dict[str, Kind]] = {
    "agent_tx_bytes_total": "counter",
    "agent_xfer_time_total": "counter",  # microseconds
    "agent_tx_requests_num_total": "counter",
    "agent_errors_total": "counter",
}
# `lmcache server` 0.5.6 on its HTTP port (recorded in tests/probes/recorded/cpu-p2p/; its lookup
# counters appear only after the first lookup).
LMCACHE_SERVER: Final[dict[str, Kind]] = {
    "lmcache_mp_lookup_hit_tokens_total": "counter",
    "lmcache_mp_lookup_requested_tokens_total": "counter",
    "lmcache_mp_l1_memory_usage_bytes": "gauge",
}
# Our proxy (generator/proxy/metrics.py; a test reads its registry).
PROXY: Final[dict[str, Kind]] = {
    "xpyd_proxy_requests_total": "counter",
    "xpyd_proxy_errors_total": "counter",
    "xpyd_proxy_migrations_total": "counter",
    "xpyd_proxy_backend_requests_total": "counter",
    "xpyd_proxy_decode_ttft_seconds": "histogram",
    "xpyd_proxy_kv_wait_seconds": "histogram",
    "xpyd_proxy_outstanding": "gauge",
    "xpyd_proxy_backend_healthy": "gauge",
}
# vllm-router (the pinned wheel) on its Prometheus port, as a live cpu-1p1d's router published
# it after a few requests (tests/probes/recorded/cpu-p2p/router.txt). Its error counters
# appear only after an error (as our proxy's do): a panel on them is empty until one.
VLLM_ROUTER: Final[dict[str, Kind]] = {
    "vllm_router_pd_requests_total": "counter",  # label route
    "vllm_router_pd_request_duration_seconds": "histogram",  # label route
    "vllm_router_pd_prefill_requests_total": "counter",  # label worker
    "vllm_router_pd_decode_requests_total": "counter",  # label worker
    "vllm_router_pd_active_decode_requests": "gauge",
    "vllm_router_pd_pending_decode_requests": "gauge",
    "vllm_router_worker_health": "gauge",  # label worker
    # Only after a decode failed (recorded after a decoder was killed:
    # tests/probes/recorded/cpu-1p1d/router-after-a-decoder-died.txt).
    "vllm_router_pd_decode_errors_total": "counter",  # label worker
}
# Prometheus itself, per target.
PROMETHEUS: Final[dict[str, Kind]] = {"up": "gauge"}

_BY_PART: Final[dict[str, dict[str, Kind]]] = {
    "vllm": VLLM,
    "lmcache": LMCACHE_SERVER,
    "nixl-telemetry": NIXL_TELEMETRY,
    "proxy": PROXY,
    "vllm-router": VLLM_ROUTER,
}


def series_of(family: str, kind: Kind) -> tuple[str, ...]:
    if kind == "histogram":
        return tuple(f"{family}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return (family,)


def published_families(plan: Plan) -> dict[str, Kind]:
    """Every family the stack's parts publish. vLLM's NIXL metrics where the engines run
    NixlConnector, which the verdict's own KV-speed counters tell."""
    families = dict(PROMETHEUS)
    for page in scrape_targets(plan):
        families |= _BY_PART[page.part]
    verdict = topology_of(plan).verdict_sources(plan)
    nixl_series = {
        series for family, kind in VLLM_NIXL.items() for series in series_of(family, kind)
    }
    if verdict is not None and verdict.kv_speed.bytes_metric in nixl_series:
        families |= VLLM_NIXL
    return families


def published_series(plan: Plan) -> frozenset[str]:
    return frozenset(
        series for family, kind in published_families(plan).items()
        for series in series_of(family, kind)
    )  # fmt: skip
