"""The Grafana dashboard: built with grafana-foundation-sdk, read back by the SDK's own model
and compiled against Grafana's own TypeScript types (@grafana/schema, from npm; see
grafana_schema.ts); every panel's query reads only what the stack publishes (or what its
rules record); the variables are the plan's engines, roles and hosts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from generator.observe.dashboards import DATASOURCE_UID, dashboard_json
from generator.observe.files import (
    DASHBOARD_FILE,
    DATASOURCE_FILE,
    PROVIDER_FILE,
)
from generator.observe.published import published_series
from generator.observe.rules import KV_GIB_S, kv_floor, recording_rules
from generator.paths import Workspace
from generator.plan import Plan
from tests.observe.helpers import expression_names, observed_plan, rendered_observe

STACKS = ["xpyd", "xpyd-mp", "xpyd-mp-2host", "xpyd-lmcache-1gpu", "xpyd-1gpu", "xpyd-tp8"]
NODE_MODULES = Path(__file__).resolve().parents[2] / ".cache/node/node_modules"
SCHEMA_CHECK = Path(__file__).with_name("grafana_schema.ts")


def _plan(workspace: Workspace, stack: str) -> Plan:
    return observed_plan(workspace, stack, "runtime=compose")


def _dashboard(plan: Plan) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(dashboard_json(plan))
    return document


def _panels(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in document["panels"] if panel["type"] != "row"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_sdk_reads_the_dashboard_back_unchanged(workspace: Workspace, stack: str) -> None:
    document = _dashboard(_plan(workspace, stack))
    again = json.loads(json.dumps(Dashboard.from_json(document), cls=JSONEncoder))
    assert again == document
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    assert document["uid"] == f"xpyd-{stack}"


@pytest.mark.parametrize("stack", STACKS)
def test_every_panel_query_reads_what_the_stack_publishes(workspace: Workspace, stack: str) -> None:
    plan = _plan(workspace, stack)
    readable = published_series(plan) | {rule.record for rule in recording_rules(plan)}
    targets = [target for panel in _panels(_dashboard(plan)) for target in panel["targets"]]
    assert targets
    for target in targets:
        assert target["datasource"]["uid"] == DATASOURCE_UID
        names = expression_names(target["expr"])
        assert names, target["expr"]
        assert names <= readable, target["expr"]


def test_the_variables_are_the_plan_s_engines_roles_and_hosts(workspace: Workspace) -> None:
    plan = _plan(workspace, "xpyd-mp-2host")
    variables = {v["name"]: v for v in _dashboard(plan)["templating"]["list"]}
    engines = [engine.name for engine in plan.engines]
    assert variables["engine"]["query"].split(",") == [*engines, "router"]
    assert variables["host"]["query"].split(",") == ["gpu-a", "gpu-b"]
    assert variables["role"]["query"].split(",") == ["prefill", "decode", "lmcache", "router"]
    assert all(v["multi"] and v["includeAll"] for v in variables.values())


def test_the_panels_cover_latency_load_kv_lmcache_and_the_router(workspace: Workspace) -> None:
    nixl_mp = {p["title"] for p in _panels(_dashboard(_plan(workspace, "xpyd-mp")))}
    for title in ("TTFT", "ITL", "TPOT", "E2E", "Requests", "Tokens", "Queue depth"):
        assert title in nixl_mp
    assert {"KV cache usage", "Prompt tokens by source (decoders)", "KV bytes moved"} <= nixl_mp
    assert {"Lookup hit rate (tokens)", "Failed transfers, notifications, expired leases"} <= (
        nixl_mp
    )
    lmcache_pd = {p["title"] for p in _panels(_dashboard(_plan(workspace, "xpyd-lmcache-1gpu")))}
    assert {"Requests by status", "Errors by stage", "Backends in rotation"} <= lmcache_pd
    assert "Lookup hit rate (tokens)" not in lmcache_pd  # no `lmcache server` there


def test_the_kv_speed_panel_draws_the_rules_floor(workspace: Workspace) -> None:
    plan = _plan(workspace, "xpyd")
    panel = next(p for p in _panels(_dashboard(plan)) if p["title"].startswith("KV GiB/s"))
    assert KV_GIB_S in panel["targets"][0]["expr"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == kv_floor(plan)


def test_grafana_files_render_on_gpu_only(workspace: Workspace) -> None:
    gpu = rendered_observe(workspace, _plan(workspace, "xpyd"))
    assert {DATASOURCE_FILE, PROVIDER_FILE, DASHBOARD_FILE} <= set(gpu)
    assert json.loads(gpu[DASHBOARD_FILE])["uid"] == "xpyd-xpyd"  # JSON, not YAML
    source = yaml.safe_load(gpu[DATASOURCE_FILE])["datasources"][0]
    plan = _plan(workspace, "xpyd")
    assert plan.observe is not None
    assert source["url"] == f"http://127.0.0.1:{plan.observe.prometheus_port}"
    assert source["uid"] == DATASOURCE_UID
    cpu = rendered_observe(workspace, _plan(workspace, "cpu-1p1d"))
    assert not {DATASOURCE_FILE, PROVIDER_FILE, DASHBOARD_FILE} & set(cpu)


def _typescript() -> Path:
    tsc = NODE_MODULES / ".bin/tsc"
    if shutil.which("node") is None or not tsc.exists():
        pytest.skip("node, typescript or @grafana/schema missing (.ci/setup installs them)")
    return tsc


def _compile(
    tsc: Path, folder: Path, dashboards: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Each dashboard as a typed constant of Grafana's dashboard type, compiled."""
    os.symlink(NODE_MODULES, folder / "node_modules")
    shutil.copy(SCHEMA_CHECK, folder / SCHEMA_CHECK.name)
    for name, text in dashboards.items():
        source = "import type { GrafanaDashboard } from './grafana_schema';\n"
        source += f"export const dashboard: GrafanaDashboard = {text};\n"
        (folder / f"{name}.ts").write_text(source, encoding="utf-8")
    files = [f"{name}.ts" for name in dashboards]
    flags = ["--noEmit", "--strict", "--moduleResolution", "bundler", "--module", "esnext"]
    return subprocess.run(
        [str(tsc), *flags, "--target", "es2022", *files],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_every_dashboard_compiles_against_grafana_s_own_types(
    workspace: Workspace, tmp_path: Path
) -> None:
    tsc = _typescript()
    cpu = [observed_plan(workspace, s) for s in ("cpu-1p1d", "cpu-lmcache-pd", "cpu-p2p")]
    plans = [_plan(workspace, stack) for stack in STACKS] + cpu
    done = _compile(tsc, tmp_path, {plan.stack: dashboard_json(plan) for plan in plans})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_schema_check_refuses_what_grafana_does_not_know(
    workspace: Workspace, tmp_path: Path
) -> None:
    """The check can fail: a misspelled field, a wrong kind of value."""
    tsc = _typescript()
    text = dashboard_json(_plan(workspace, "xpyd"))
    bad = {
        "misspelled": text.replace('"title": "TTFT"', '"titel": "TTFT"', 1),
        "wrong_kind": text.replace('"refresh": "10s"', '"refresh": 10', 1),
    }
    assert all(variant != text for variant in bad.values())
    done = _compile(tsc, tmp_path, bad)
    assert done.returncode != 0
    assert "misspelled.ts" in done.stdout
    assert "'\"titel\"' does not exist" in done.stdout
    assert "wrong_kind.ts" in done.stdout
