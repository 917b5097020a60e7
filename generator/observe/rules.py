"""Prometheus recording and alert rules for the ways P/D fails silently, from the plan and
the verdict's own definitions: the KV counters the topology times transfers by
(``verdict_sources``), the KV floor of the stack's KV path (generator/limits.py), the
recompute share and decode KV usage limits there too. Each expression is a ``Query`` that
names the series it reads, so tests can hold them to what the stack publishes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from generator.limits import (
    DECODE_KV_USAGE_MAX,
    LOCAL_COMPUTE_SHARE_MAX,
    RATE_WINDOW_S,
    SLOW_WINDOW_S,
    KvPath,
    kv_floor_gib_s,
)
from generator.observe.published import published_families
from generator.plan import Plan
from generator.topologies import KvSpeedSource, topology_of

__all__ = [
    "KV_GIB_S",
    "LOCAL_COMPUTE_SHARE",
    "AlertRule",
    "Query",
    "RecordingRule",
    "alert_rules",
    "kv_floor",
    "recording_rules",
    "rules_document",
]

KV_GIB_S: Final = "xpyd:kv_gib_per_second"  # per engine whose counters time the transfers
LOCAL_COMPUTE_SHARE: Final = "xpyd:decode_local_compute_share"  # per decoder


def _window(seconds: int) -> str:
    """A PromQL range: whole minutes as minutes."""
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


_RATE_WINDOW: Final = _window(RATE_WINDOW_S)
_SLOW_WINDOW: Final = _window(SLOW_WINDOW_S)
_GIB: Final = 1 << 30


@dataclass(frozen=True)
class Query:
    expr: str
    series: tuple[str, ...]  # the scraped series it reads (recorded ones are not scraped)


@dataclass(frozen=True)
class RecordingRule:
    record: str
    query: Query


@dataclass(frozen=True)
class AlertRule:
    alert: str
    query: Query
    for_s: int
    severity: str
    summary: str


def _engines(names: tuple[str, ...]) -> str:
    return "|".join(names)


def kv_speed_query(source: KvSpeedSource) -> Query:
    """GiB/s per engine over the last minute, as the verdict computes it per request."""
    where = f'{{engine=~"{_engines(source.engines)}"}}'
    moved = f"sum by (engine, host) (rate({source.bytes_metric}{where}[{_RATE_WINDOW}]))"
    timed = f"sum by (engine, host) (rate({source.seconds_metric}{where}[{_RATE_WINDOW}]))"
    expr = f"{moved} / ({timed} * {source.seconds_per_unit:g}) / {_GIB}"
    return Query(expr, (source.bytes_metric, source.seconds_metric))


def local_compute_query() -> Query:
    tokens = "vllm:prompt_tokens_by_source_total"
    local = f'rate({tokens}{{role="decode",source="local_compute"}}[{_SLOW_WINDOW}])'
    every = f'rate({tokens}{{role="decode"}}[{_SLOW_WINDOW}])'
    expr = f"sum by (engine, host) ({local}) / sum by (engine, host) ({every})"
    return Query(expr, (tokens,))


def recording_rules(plan: Plan) -> tuple[RecordingRule, ...]:
    verdict = topology_of(plan).verdict_sources(plan)
    if verdict is None:  # colocated: no KV moves
        return ()
    return (
        RecordingRule(KV_GIB_S, kv_speed_query(verdict.kv_speed)),
        RecordingRule(LOCAL_COMPUTE_SHARE, local_compute_query()),
    )


def kv_floor(plan: Plan) -> float | None:
    """The user's floor (observe.kv_floor_gib_s), else the verdict's for the stack's KV path
    (None on cpu, whose KV speed the verdict reports and never judges)."""
    own = plan.observe.kv_floor_gib_s if plan.observe is not None else None
    return own if own is not None else kv_floor_gib_s(plan.kv_path())


def alert_rules(plan: Plan) -> tuple[AlertRule, ...]:
    families = published_families(plan)
    rules = [*_kv_alerts(plan), *_failure_alerts(families), *_health_alerts()]
    return tuple(rules)


def _kv_alerts(plan: Plan) -> list[AlertRule]:
    if topology_of(plan).verdict_sources(plan) is None:
        return []
    recompute = AlertRule(
        "XpydDecoderRecomputesPrompts",
        Query(f"{LOCAL_COMPUTE_SHARE} > {LOCAL_COMPUTE_SHARE_MAX:g}", ()),
        60,
        "critical",
        f"{{{{ $labels.engine }}}} computes more than {LOCAL_COMPUTE_SHARE_MAX:.0%} of its "
        "prompt tokens itself: KV is not arriving and P/D recomputes silently",
    )
    floor = kv_floor(plan)
    if floor is None:
        return [recompute]
    across = plan.kv_path() is KvPath.CROSS_HOST_GPU
    slow = AlertRule(
        "XpydKvPathSlow",
        Query(f"{KV_GIB_S} < {floor:g}", ()),
        120,
        "warning" if across else "critical",
        f"KV moves at {{{{ $value | humanize }}}} GiB/s on {{{{ $labels.engine }}}}, below "
        f"{floor:g} GiB/s for {plan.kv_path().value}: a transport fallback (TCP?)",
    )
    return [slow, recompute]


def _failure_alerts(families: dict[str, Any]) -> list[AlertRule]:
    failures = [
        name
        for name in ("vllm:nixl_num_failed_transfers_total",
                     "vllm:nixl_num_failed_notifications_total", "agent_errors_total")
        if name in families
    ]  # fmt: skip
    alerts = [
        AlertRule(
            "XpydNixlFailures",
            Query(f"increase({name}[{_SLOW_WINDOW}]) > 0", (name,)),
            0,
            "critical",
            f"{{{{ $labels.engine }}}}: {name} rose in the last {_SLOW_WINDOW}",
        )
        for name in failures
    ]
    expired = "vllm:nixl_num_kv_expired_reqs_total"
    if expired in families:
        alerts.append(
            AlertRule(
                "XpydKvLeasesExpired",
                Query(f"increase({expired}[{_SLOW_WINDOW}]) > 0", (expired,)),
                0,
                "warning",
                "{{ $labels.engine }} dropped KV whose lease expired before the decoder read "
                "it: those requests were recomputed or failed",
            )
        )
    return alerts


def _health_alerts() -> list[AlertRule]:
    usage = "vllm:kv_cache_usage_perc"
    return [
        AlertRule(
            "XpydEngineDown",
            Query('up{job="vllm"} == 0', ("up",)),
            30,
            "critical",
            "{{ $labels.engine }} on {{ $labels.host }} does not answer /metrics",
        ),
        AlertRule(
            "XpydPartDown",
            Query('up{job!="vllm"} == 0', ("up",)),
            30,
            "critical",
            "{{ $labels.service }} ({{ $labels.job }}) on {{ $labels.host }} does not answer",
        ),
        AlertRule(
            "XpydDecodeKvCacheFull",
            Query(f'{usage}{{role="decode"}} > {DECODE_KV_USAGE_MAX:g}', (usage,)),
            120,
            "warning",
            f"{{{{ $labels.engine }}}} uses more than {DECODE_KV_USAGE_MAX:.0%} of its KV "
            "cache: decode is the bottleneck",
        ),
    ]


def rules_document(plan: Plan) -> dict[str, Any]:
    """Prometheus's rule file: the recording group first (alerts read its series)."""
    groups: list[dict[str, Any]] = []
    recording = recording_rules(plan)
    if recording:
        records = [{"record": r.record, "expr": r.query.expr} for r in recording]
        groups.append({"name": "xpyd-kv", "rules": records})
    groups.append({"name": "xpyd-alerts", "rules": [_alert(r) for r in alert_rules(plan)]})
    return {"groups": groups}


def _alert(rule: AlertRule) -> dict[str, Any]:
    entry: dict[str, Any] = {"alert": rule.alert, "expr": rule.query.expr}
    if rule.for_s:
        entry["for"] = f"{rule.for_s}s"
    entry["labels"] = {"severity": rule.severity}
    entry["annotations"] = {"summary": rule.summary}
    return entry
