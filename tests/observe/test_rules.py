"""Recording and alert rules: valid YAML in Prometheus's shape, thresholds from the verdict's
own definitions, and only series the stack's parts publish (the table itself held to pages
recorded from live stacks where the repository has them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from generator.limits import (
    CROSS_HOST_FLOOR_GIB_S,
    DECODE_KV_USAGE_MAX,
    LOCAL_COMPUTE_SHARE_MAX,
    SAME_HOST_FLOOR_GIB_S,
)
from generator.observe.files import RULES_FILE
from generator.observe.panels import dashboard_rows
from generator.observe.published import (
    LMCACHE_SERVER,
    NIXL_TELEMETRY,
    PROXY,
    VLLM,
    VLLM_NIXL,
    VLLM_ROUTER,
    published_series,
)
from generator.observe.rules import KV_GIB_S, alert_rules, kv_floor, recording_rules
from generator.observe.targets import scrape_targets
from generator.paths import Workspace
from generator.planner import make_plan
from generator.proxy.metrics import ProxyMetrics
from generator.stack import baseline_spec, load_spec
from tests.observe.helpers import OBSERVED, expression_names, observed_plan, rendered_observe

STACKS = ["cpu-1p1d", "cpu-lmcache-pd", "cpu-p2p", "xpyd", "xpyd-mp-2host", "xpyd-tp8"]
PAGES = Path(__file__).resolve().parents[1] / "probes"
_TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)


def _families(text: str) -> dict[str, str]:
    return dict(_TYPE_LINE.findall(text))


def _recorded_pages() -> dict[str, dict[str, str]]:
    """Families per recorded page: vLLM engines and NIXL's exporter of a live lmcache-pd stack."""
    pages: dict[str, dict[str, str]] = {}
    record = json.loads((PAGES / "recorded" / "cpu-lmcache-pd.json").read_text())
    for exchange in record["exchanges"]:
        if exchange["key"].endswith("GET /metrics") and isinstance(exchange["body"], str):
            pages[exchange["key"].split()[0]] = _families(exchange["body"])
    return pages


def test_the_table_matches_the_pages_recorded_from_a_live_stack() -> None:
    pages = _recorded_pages()
    assert pages["decode-0"].items() >= VLLM.items()
    assert pages["prefill-0-nixl"].items() >= NIXL_TELEMETRY.items()


def test_the_nixl_mp_tables_match_the_pages_recorded_from_a_live_stack() -> None:
    """cpu-p2p's pages after a bench: a nixl-mp decoder, an LMCache server, vllm-router."""
    folder = PAGES / "recorded" / "cpu-p2p"
    pages = {path.stem: _families(path.read_text()) for path in folder.glob("*.txt")}
    assert pages["decode-0"].items() >= (VLLM | VLLM_NIXL).items()
    assert pages["lmcache-prefill-0"].items() >= LMCACHE_SERVER.items()
    after_error = _families(
        (PAGES / "recorded/cpu-1p1d/router-after-a-decoder-died.txt").read_text()
    )
    assert (pages["router"] | after_error).items() >= VLLM_ROUTER.items()


def test_the_table_matches_the_proxy_s_own_registry() -> None:
    kinds = {
        metric.name + ("_total" if metric.type == "counter" else ""): metric.type
        for metric in ProxyMetrics().registry.collect()
    }
    assert kinds.items() >= PROXY.items()


def test_the_name_finder_finds_metrics_and_skips_functions_labels_and_numbers() -> None:
    expr = 'sum by (engine) (rate(a:b_total{role="decode"}[5m])) / up > 0.5'
    assert expression_names(expr) == {"a:b_total", "up"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_rule_reads_only_what_the_stack_publishes(workspace: Workspace, stack: str) -> None:
    plan = observed_plan(workspace, stack, "runtime=compose")
    published = published_series(plan)
    recorded = {rule.record for rule in recording_rules(plan)}
    queries = [r.query for r in recording_rules(plan)] + [r.query for r in alert_rules(plan)]
    for query in queries:
        assert set(query.series) <= published, query
        # It names all it reads: the declared series are exactly the names in its text.
        assert expression_names(query.expr) - recorded == set(query.series), query


@pytest.mark.parametrize("stack", STACKS)
def test_the_rules_file_is_prometheus_s_shape(workspace: Workspace, stack: str) -> None:
    plan = observed_plan(workspace, stack, "runtime=compose")
    document = yaml.safe_load(rendered_observe(workspace, plan)[RULES_FILE])
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert {group["name"] for group in document["groups"]} <= {"xpyd-kv", "xpyd-alerts"}
    for rule in rules:
        assert rule.keys() <= {"record", "alert", "expr", "for", "labels", "annotations"}
        assert ("record" in rule) != ("alert" in rule)
        assert rule["expr"].count("(") == rule["expr"].count(")")
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert re.fullmatch(r"[0-9]+s", rule.get("for", "0s"))
    alerts = {rule["alert"] for rule in rules if "alert" in rule}
    assert {"XpydEngineDown", "XpydDecodeKvCacheFull", "XpydDecoderRecomputesPrompts"} <= alerts


def test_the_kv_floor_is_the_verdict_s_for_the_stack_s_path(workspace: Workspace) -> None:
    same_host = observed_plan(workspace, "xpyd")
    assert kv_floor(same_host) == SAME_HOST_FLOOR_GIB_S
    across = observed_plan(workspace, "xpyd-mp-2host")
    assert kv_floor(across) == CROSS_HOST_FLOOR_GIB_S
    slow = {rule.alert: rule for rule in alert_rules(across)}["XpydKvPathSlow"]
    assert slow.query.expr == f"{KV_GIB_S} < {CROSS_HOST_FLOOR_GIB_S:g}"
    assert slow.severity == "warning"  # between hosts the verdict warns, as here
    assert {r.alert: r for r in alert_rules(same_host)}["XpydKvPathSlow"].severity == "critical"


def test_a_cpu_stack_has_no_kv_floor_unless_one_is_set(workspace: Workspace) -> None:
    plain = observed_plan(workspace, "cpu-1p1d")
    assert kv_floor(plain) is None
    assert "XpydKvPathSlow" not in {rule.alert for rule in alert_rules(plain)}
    floored = observed_plan(workspace, "cpu-1p1d", "observe.kv_floor_gib_s=50")
    slow = {rule.alert: rule for rule in alert_rules(floored)}["XpydKvPathSlow"]
    assert slow.query.expr == f"{KV_GIB_S} < 50"


def test_limits_enter_the_expressions(workspace: Workspace) -> None:
    rules = {rule.alert: rule for rule in alert_rules(observed_plan(workspace, "xpyd"))}
    assert rules["XpydDecodeKvCacheFull"].query.expr.endswith(f"> {DECODE_KV_USAGE_MAX:g}")
    recompute = rules["XpydDecoderRecomputesPrompts"].query.expr
    assert recompute.endswith(f"> {LOCAL_COMPUTE_SHARE_MAX:g}")


def test_the_kv_speed_rule_reads_the_verdict_s_counters_in_its_unit(workspace: Workspace) -> None:
    """lmcache-pd: NIXL's exporter times in microseconds, on the prefillers."""
    plan = observed_plan(workspace, "cpu-lmcache-pd")
    record = {rule.record: rule for rule in recording_rules(plan)}[KV_GIB_S]
    assert record.query.series == ("agent_tx_bytes_total", "agent_xfer_time_total")
    assert "* 1e-06" in record.query.expr
    assert 'engine=~"prefill-0"' in record.query.expr


def test_lmcache_pd_has_no_vllm_nixl_rules_and_nixl_mp_has_lease_expiry(
    workspace: Workspace,
) -> None:
    lmcache_pd = {r.query.expr for r in alert_rules(observed_plan(workspace, "cpu-lmcache-pd"))}
    assert not any("vllm:nixl_" in expr for expr in lmcache_pd)
    assert "increase(agent_errors_total[5m]) > 0" in lmcache_pd
    nixl_mp = {r.alert for r in alert_rules(observed_plan(workspace, "cpu-1p1d"))}
    assert "XpydKvLeasesExpired" in nixl_mp


def test_a_colocated_baseline_keeps_observe_without_kv_rules(workspace: Workspace) -> None:
    """bench --baseline colocated derives the twin from the spec: observe comes along, and a
    stack that moves no KV gets no KV rules or panels (nothing to judge there)."""
    spec = load_spec(workspace.stack_file("cpu-1p1d"), OBSERVED)
    twin = make_plan(baseline_spec(spec, make_plan(spec)))
    assert twin.observe is not None
    assert recording_rules(twin) == ()
    alerts = {rule.alert for rule in alert_rules(twin)}
    assert alerts == {"XpydEngineDown", "XpydPartDown", "XpydDecodeKvCacheFull"}
    assert {page.part for page in scrape_targets(twin)} == {"vllm", "vllm-router"}
    assert [row.title for row in dashboard_rows(twin)] == [
        "Latency per role", "Load per engine", "Router and targets",
    ]  # fmt: skip
