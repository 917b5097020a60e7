"""Issue 33, class 6: a value the spec accepts is one the stack can work with. Numbers have
bounds with a physical meaning (not only > 0), what a setting cannot do where it is given is
refused, and each refusal names the field and the fix."""

from __future__ import annotations

import re
from typing import Any

import pytest

from generator.errors import SpecError
from generator.limits import MAX_SCRAPE_INTERVAL_S, RULE_WINDOW_SCRAPES
from generator.observe.rules import alert_rules, recording_rules
from generator.planner import make_plan
from generator.stack import parse_spec
from tests.conftest import spec_dict

CPU: dict[str, Any] = {"profile": "cpu", "hosts": [{"name": "h", "cpus": [0, 1]}]}


def refusal(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml", overrides=overrides)
    return str(caught.value)


@pytest.mark.parametrize(
    ("assignment", "field"),
    [
        ("observe.kv_floor_gib_s=1.0e-300", "observe.kv_floor_gib_s"),
        ("observe.kv_floor_gib_s=1.0e+5", "observe.kv_floor_gib_s"),
        ("lmcache.p2p={lookup_timeout_s: 1.0e-300}", "lmcache.p2p.lookup_timeout_s"),
        ("lmcache.p2p={load_timeout_s: 0.001}", "lmcache.p2p.load_timeout_s"),
        ("lmcache.p2p={load_timeout_s: 3600}", "lmcache.p2p.load_timeout_s"),
        ("decode.gpu_memory_utilization=1.0e-300", "decode.gpu_memory_utilization"),
        ("lmcache.server.l1_size_gb=1.0e-300", "lmcache.server.l1_size_gb"),
        ("observe.scrape_interval_s=3600", "observe.scrape_interval_s"),
    ],
)
def test_numbers_past_what_can_work_are_refused(assignment: str, field: str) -> None:
    overrides = ["observe.enabled=true"] if assignment.startswith("observe") else []
    assert f"{field}: Input should be" in refusal(spec_dict(), *overrides, assignment)


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_lmcache_pd_buffers_hold_a_chunk_at_least(side: str) -> None:
    data = spec_dict(topology="lmcache-pd", lmcache={"pd": {f"{side}_buffer_bytes": 1}})
    assert f"lmcache.pd.{side}_buffer_bytes: Input should be greater than or equal to" in (
        refusal(data)
    )


def test_every_rule_window_holds_enough_scrapes_at_the_longest_interval() -> None:
    """The bound is the rules' own: each window a rendered rule reads over holds
    RULE_WINDOW_SCRAPES scrapes at the largest scrape interval the spec accepts."""
    overrides = ("observe.enabled=true", f"observe.scrape_interval_s={MAX_SCRAPE_INTERVAL_S}")
    plan = make_plan(parse_spec(spec_dict(), source="t", overrides=overrides))
    records, alerts = recording_rules(plan), alert_rules(plan)
    queries = [rule.query.expr for rule in records] + [rule.query.expr for rule in alerts]
    windows = [window for expr in queries for window in _windows_s(expr)]
    assert windows  # the rules read over windows
    assert min(windows) >= RULE_WINDOW_SCRAPES * MAX_SCRAPE_INTERVAL_S
    assert "observe.scrape_interval_s" in refusal(
        spec_dict(),
        "observe.enabled=true",
        f"observe.scrape_interval_s={MAX_SCRAPE_INTERVAL_S + 1}",
    )


def _windows_s(expr: str) -> list[int]:
    units = {"s": 1, "m": 60, "h": 3600}
    return [int(n) * units[u] for n, u in re.findall(r"\[([0-9]+)([smh])\]", expr)]


def test_container_isolation_is_refused_on_cpu_where_it_confines_nothing() -> None:
    text = refusal(spec_dict(runtime="process", **CPU), "process.isolation=container")
    assert "process.isolation: container builds each engine the view of its GPUs" in text
    assert "fix: remove process.isolation (plain), or set profile: gpu" in text
    parse_spec(spec_dict(runtime="process"), source="t", overrides=["process.isolation=container"])


@pytest.mark.parametrize(
    "name",
    ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
     "XPYD_PID_FILE", "XPYD_WATCH_EVERY_S", "BASH_ENV", "VIRTUAL_ENV"],
)  # fmt: skip
def test_secret_env_refuses_what_changes_how_programs_load(name: str) -> None:
    text = refusal(spec_dict(), f"decode.secret_env=[{name}]")
    assert f"decode.secret_env[0]: {name} " in text
    assert "fix: remove it: secret_env carries secrets" in text


def test_the_tools_own_variables_are_refused_in_env_too() -> None:
    text = refusal(spec_dict(), "prefill.env={XPYD_WATCH_EVERY_S: '0.001'}")
    assert "prefill.env.XPYD_WATCH_EVERY_S: is the tool's own" in text


def test_secrets_still_pass() -> None:
    spec = parse_spec(spec_dict(), source="t", overrides=["decode.secret_env=[WANDB_API_KEY]"])
    assert spec.decode.secret_env == ["WANDB_API_KEY"]


def test_a_colocated_stack_refuses_what_only_moving_kv_reads() -> None:
    colocated = spec_dict(topology="colocated")
    text = refusal(colocated, "lmcache.chunk_size=128")
    assert "lmcache.chunk_size: a colocated stack runs no LMCache: nothing reads it" in text
    text = refusal(colocated, "observe.enabled=true", "observe.kv_floor_gib_s=5")
    assert "observe.kv_floor_gib_s: a colocated stack moves no KV" in text
