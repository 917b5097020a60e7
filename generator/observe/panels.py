"""The dashboard's panels as data, from the plan: per role latency percentiles, load per
engine, the KV path (prompt tokens by source, NIXL bytes, time, GiB/s against the floor,
failures, expired leases), LMCache, the router. Each query names the series it reads (the
same ``Query`` as the rules), so tests hold every panel to what the stack publishes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from generator.limits import DECODE_KV_USAGE_MAX
from generator.observe.published import published_families
from generator.observe.rules import KV_GIB_S, LOCAL_COMPUTE_SHARE, Query, kv_floor
from generator.plan import Plan
from generator.topologies import topology_of

__all__ = ["SELECTOR", "PanelSpec", "RowSpec", "dashboard_rows"]

# Every panel filters by the dashboard's variables (their values come from the plan).
SELECTOR: Final = 'engine=~"$engine",role=~"$role",host=~"$host"'
_RATE: Final = "$__rate_interval"
_QUANTILES: Final = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str
    queries: tuple[tuple[Query, str], ...]  # (query, legend)
    description: str = ""
    threshold: float | None = None  # drawn as a dashed line (a limit the rules alert at)


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...]


def _rate(series: str, by: str, where: str = SELECTOR) -> Query:
    return Query(f"sum by ({by}) (rate({series}{{{where}}}[{_RATE}]))", (series,))


def _percentiles(title: str, family: str, by: str = "role", where: str = SELECTOR) -> PanelSpec:
    bucket = f"{family}_bucket"
    queries = tuple(
        (
            Query(
                f"histogram_quantile({q:g}, sum by (le, {by}) "
                f"(rate({bucket}{{{where}}}[{_RATE}])))",
                (bucket,),
            ),
            f"p{q * 100:g} {{{{{by}}}}}",
        )
        for q in _QUANTILES
    )
    return PanelSpec(title, "s", queries)


def _latency_row() -> RowSpec:
    return RowSpec(
        "Latency per role",
        (
            _percentiles("TTFT", "vllm:time_to_first_token_seconds"),
            _percentiles("ITL", "vllm:inter_token_latency_seconds"),
            _percentiles("TPOT", "vllm:request_time_per_output_token_seconds"),
            _percentiles("E2E", "vllm:e2e_request_latency_seconds"),
        ),
    )


def _gauge(series: str) -> Query:
    return Query(f"{series}{{{SELECTOR}}}", (series,))


def _load_row() -> RowSpec:
    usage = "vllm:kv_cache_usage_perc"
    return RowSpec(
        "Load per engine",
        (
            PanelSpec(
                "Requests",
                "reqps",
                ((_rate("vllm:request_success_total", "engine"), "{{engine}}"),),
            ),
            PanelSpec(
                "Tokens",
                "short",
                (
                    (_rate("vllm:prompt_tokens_total", "engine"), "prompt {{engine}}"),
                    (_rate("vllm:generation_tokens_total", "engine"), "generated {{engine}}"),
                ),
            ),
            PanelSpec(
                "Queue depth",
                "short",
                (
                    (_gauge("vllm:num_requests_waiting"), "waiting {{engine}}"),
                    (_gauge("vllm:num_requests_running"), "running {{engine}}"),
                ),
            ),
            PanelSpec(
                "KV cache usage",
                "percentunit",
                ((_gauge(usage), "{{engine}}"),),
                f"decode above {DECODE_KV_USAGE_MAX:g}: decode is the bottleneck",
                DECODE_KV_USAGE_MAX,
            ),
        ),
    )


def _kv_row(plan: Plan) -> RowSpec | None:
    verdict = topology_of(plan).verdict_sources(plan)
    if verdict is None:
        return None
    speed = verdict.kv_speed
    tokens = "vllm:prompt_tokens_by_source_total"
    engines = f'engine=~"{"|".join(speed.engines)}"'
    panels = [
        PanelSpec(
            "Prompt tokens by source (decoders)",
            "short",
            (
                (
                    _rate(tokens, "engine, source", f'{SELECTOR},role="decode"'),
                    "{{source}} {{engine}}",
                ),
            ),
            "external_kv_transfer: KV from a prefiller; local_compute: recomputed on the decoder",
        ),
        PanelSpec(
            "Decoders' local_compute share",
            "percentunit",
            ((Query(f"{LOCAL_COMPUTE_SHARE}{{{SELECTOR}}}", ()), "{{engine}}"),),
        ),
        PanelSpec(
            f"KV GiB/s ({speed.operation}s)",
            "none",
            ((Query(f"{KV_GIB_S}{{{SELECTOR}}}", ()), "{{engine}}"),),
            f"per engine whose NIXL counters time the transfers; the floor for "
            f"{plan.kv_path().value}",
            kv_floor(plan),
        ),
        PanelSpec(
            "KV bytes moved", "Bps", ((_rate(speed.bytes_metric, "engine", engines), "{{engine}}"),)
        ),
        PanelSpec(
            "KV transfer time",
            "percentunit",
            ((_rate(speed.seconds_metric, "engine", engines), "{{engine}}"),),
            f"seconds spent transferring per second, in units of {speed.seconds_per_unit:g} s",
        ),
    ]
    failures = _failure_panel(plan)
    return RowSpec("KV transfer", (*panels, *([failures] if failures else [])))


_FAILURES: Final = (
    ("vllm:nixl_num_failed_transfers_total", "failed transfers"),
    ("vllm:nixl_num_failed_notifications_total", "failed notifications"),
    ("vllm:nixl_num_kv_expired_reqs_total", "expired KV leases"),
    ("agent_errors_total", "NIXL errors"),
)


def _failure_panel(plan: Plan) -> PanelSpec | None:
    families = published_families(plan)
    queries = tuple(
        (
            Query(f"sum by (engine) (increase({name}{{{SELECTOR}}}[{_RATE}]))", (name,)),
            f"{label} {{{{engine}}}}",
        )
        for name, label in _FAILURES
        if name in families
    )
    return (
        PanelSpec("Failed transfers, notifications, expired leases", "short", queries)
        if queries
        else None
    )


def _lmcache_row(plan: Plan) -> RowSpec | None:
    if "lmcache_mp_lookup_hit_tokens_total" not in published_families(plan):
        return None
    hit, asked = "lmcache_mp_lookup_hit_tokens_total", "lmcache_mp_lookup_requested_tokens_total"
    ratio = Query(
        f"sum by (engine) (rate({hit}{{{SELECTOR}}}[{_RATE}])) / "
        f"sum by (engine) (rate({asked}{{{SELECTOR}}}[{_RATE}]))",
        (hit, asked),
    )
    memory = "lmcache_mp_l1_memory_usage_bytes"
    return RowSpec(
        "LMCache servers",
        (
            PanelSpec("Lookup hit rate (tokens)", "percentunit", ((ratio, "{{engine}}"),)),
            PanelSpec("L1 memory (stored objects)", "bytes", ((_gauge(memory), "{{engine}}"),)),
        ),
    )


_ROUTER: Final = 'role="router"'


def _router_row(plan: Plan) -> RowSpec:
    up = PanelSpec(
        "Targets up", "short", ((Query("up{" + SELECTOR + "}", ("up",)), "{{job}} {{service}}"),)
    )
    families = published_families(plan)
    if "xpyd_proxy_requests_total" in families:
        return RowSpec("Router and targets", (up, *_proxy_panels()))
    if "vllm_router_pd_requests_total" in families:
        return RowSpec("Router and targets", (up, *_vllm_router_panels()))
    return RowSpec("Router and targets", (up,))


def _proxy_panels() -> tuple[PanelSpec, ...]:
    # The proxy's own "role" label (prefill, decode) yields to the target's (router): Prometheus
    # keeps it as exported_role.
    healthy = "xpyd_proxy_backend_healthy"
    return (
        PanelSpec(
            "Requests by status",
            "reqps",
            ((_rate("xpyd_proxy_requests_total", "status", _ROUTER), "{{status}}"),),
        ),
        PanelSpec(
            "Pairs: requests per backend",
            "reqps",
            (
                (
                    _rate("xpyd_proxy_backend_requests_total", "exported_role, backend", _ROUTER),
                    "{{exported_role}} {{backend}}",
                ),
            ),
        ),
        PanelSpec(
            "Errors by stage",
            "short",
            (
                (
                    _rate("xpyd_proxy_errors_total", "stage, backend", _ROUTER),
                    "{{stage}} {{backend}}",
                ),
            ),
        ),
        PanelSpec(
            "Backends in rotation",
            "short",
            ((Query(f"{healthy}{{{_ROUTER}}}", (healthy,)), "{{backend}}"),),
        ),
    )


def _vllm_router_panels() -> tuple[PanelSpec, ...]:
    # Its error counter has a series only once a decode failed (see published.VLLM_ROUTER), as
    # our proxy's: the errors panel is empty on a healthy stack.
    health = "vllm_router_worker_health"
    active, pending = (
        "vllm_router_pd_active_decode_requests",
        "vllm_router_pd_pending_decode_requests",
    )
    return (
        PanelSpec(
            "Requests by route",
            "reqps",
            ((_rate("vllm_router_pd_requests_total", "route", _ROUTER), "{{route}}"),),
        ),
        _percentiles(
            "Request duration (router)",
            "vllm_router_pd_request_duration_seconds",
            by="route",
            where=_ROUTER,
        ),
        PanelSpec(
            "Pairs: requests per worker",
            "reqps",
            (
                (
                    _rate("vllm_router_pd_prefill_requests_total", "worker", _ROUTER),
                    "prefill {{worker}}",
                ),
                (
                    _rate("vllm_router_pd_decode_requests_total", "worker", _ROUTER),
                    "decode {{worker}}",
                ),
            ),
        ),
        PanelSpec(
            "Decode errors per worker",
            "short",
            ((_rate("vllm_router_pd_decode_errors_total", "worker", _ROUTER), "{{worker}}"),),
        ),
        PanelSpec(
            "Workers healthy",
            "short",
            ((Query(f"{health}{{{_ROUTER}}}", (health,)), "{{worker}}"),),
            "vllm-router's own view: 1 while its health checks pass",
        ),
        PanelSpec(
            "Decode requests active and pending",
            "short",
            (
                (Query(f"sum by (worker) ({active}{{{_ROUTER}}})", (active,)), "active {{worker}}"),
                (
                    Query(f"sum by (worker) ({pending}{{{_ROUTER}}})", (pending,)),
                    "pending {{worker}}",
                ),
            ),
        ),
    )


def dashboard_rows(plan: Plan) -> tuple[RowSpec, ...]:
    rows = (_latency_row(), _load_row(), _kv_row(plan), _lmcache_row(plan), _router_row(plan))
    return tuple(row for row in rows if row is not None)
