"""`bench --policies`: the arms a comparison runs, a prefix-repetition prompt checked against
the model, and the report's shape with the prefillers' cache hit rates (the datasets
themselves: tests/datasets/).

The result files are stand-ins in vLLM's shape (tests/bench/test_report.py); the real
comparison needs a running stack per arm (the README's command)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from generator.bench import ArmOptions, BenchJob, BenchReport
from generator.bench.cache_counters import CacheCounters
from generator.bench.policies import PolicyArm, parse_policies, policy_spec
from generator.bench.report import markdown, write_report
from generator.bench.results import ArmResult, read_point
from generator.bench.session import check_fits
from generator.cli.load_options import LoadOptions, bench_settings
from generator.errors import SpecError, XpydError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes.engine_counters import EngineCounters
from generator.services.bench import BenchSettings, Preset, preset_settings
from generator.spec import RouterKind, Spec
from generator.stack import load_spec
from tests.bench.test_report import arm_folder
from tests.conftest import ROOT
from tests.tools import run_cli

SMOKE = preset_settings(Preset.SMOKE)
PROXY, VLLM_ROUTER = RouterKind.PROXY, RouterKind.VLLM_ROUTER


def spec_of(stack: str) -> Spec:
    return load_spec(Workspace(ROOT).stack_file(stack))


def test_bare_names_are_the_proxys_where_it_has_them() -> None:
    assert parse_policies("round_robin, prefix_aware,cache_aware") == (
        PolicyArm(PROXY, "round_robin"),
        PolicyArm(PROXY, "prefix_aware"),
        PolicyArm(VLLM_ROUTER, "cache_aware"),
    )
    assert parse_policies("vllm-router:round_robin") == (PolicyArm(VLLM_ROUTER, "round_robin"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fastest", "'fastest' is not a policy; proxy: round_robin"),
        ("proxy:cache_aware", "'cache_aware' is not a proxy policy"),
        ("nginx:round_robin", "'nginx' is not a router kind (proxy, vllm-router)"),
        ("round_robin,proxy:round_robin", "given twice"),
        ("a,,b", "comma-separated"),
        (",".join(["round_robin"] * 9), "1 to 8 policies"),
    ],
)
def test_bad_policy_lists_are_refused_with_the_choices(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_policies(text)


def test_an_arm_switches_the_router_and_leaves_the_other_kinds_settings_out() -> None:
    spec = spec_of("cpu-1p1d")  # nixl-mp behind vllm-router
    arm = policy_spec(spec, PolicyArm(PROXY, "prefix_aware"))
    plan = make_plan(arm)
    assert (plan.router.kind, plan.router.policy.prefill.name) == (PROXY, "prefix_aware")
    assert arm.router.prometheus_port is None  # vllm-router's own: the proxy refuses it
    assert arm.name == spec.name


def test_an_arm_keeps_only_the_recovery_settings_its_router_reads() -> None:
    spec = spec_of("cpu-faults")  # our proxy, with attempts and stall_s of its own
    arm = policy_spec(spec, PolicyArm(VLLM_ROUTER, "round_robin"))
    assert arm.recovery.model_fields_set == {
        "max_restarts", "health_interval_s", "health_timeout_s", "health_failures"
    }  # fmt: skip
    assert not [line for line in make_plan(arm).warnings if "recovery." in line]
    assert make_plan(spec_of("cpu-faults")).warnings == ()
    same = policy_spec(spec, PolicyArm(PROXY, "least_outstanding"))
    assert same.recovery == spec.recovery


def test_cache_aware_on_lmcache_pd_is_refused_naming_the_arm() -> None:
    with pytest.raises(SpecError, match="with bench --policies vllm-router-cache_aware"):
        policy_spec(spec_of("cpu-lmcache-pd"), PolicyArm(VLLM_ROUTER, "cache_aware"))


def job(policies: str, *, baseline: bool = False) -> BenchJob:
    spec = spec_of("cpu-1p1d")
    return BenchJob(
        spec,
        make_plan(spec),
        Preset.SMOKE,
        SMOKE,
        ArmOptions((), point_timeout_s=60),
        baseline=baseline,
        down=False,
        folder=Path("unused"),
        policies=parse_policies(policies),
    )


def test_a_comparison_runs_one_arm_per_policy_then_the_baseline() -> None:
    arms = job("round_robin,prefix_aware,cache_aware", baseline=True).arm_plans()
    assert [name for name, _ in arms] == [
        "proxy-round_robin",
        "proxy-prefix_aware",
        "vllm-router-cache_aware",
        "colocated",
    ]
    assert [plan.router.kind for _, plan in arms[:3]] == [PROXY, PROXY, VLLM_ROUTER]


# --- the dataset ------------------------------------------------------------------------------


def prefix_settings(**given: int) -> BenchSettings:
    load = LoadOptions(dataset="prefix-repetition", dataset_options=given)
    return bench_settings(load, Preset.SMOKE)


def test_a_prefix_repetition_prompt_is_checked_against_the_context_whole() -> None:
    plan = make_plan(spec_of("cpu-1p1d"))  # max_model_len 2048
    with pytest.raises(XpydError, match="2040 prompt") as caught:
        check_fits(plan, prefix_settings(prefix_len=2000, suffix_len=40))
    assert caught.value.hint.startswith("lower --prefix-len or --suffix-len or --output-len")


# --- the report -------------------------------------------------------------------------------


def policy_arm(root: Path, name: str, cache: CacheCounters) -> ArmResult:
    path = arm_folder(root, name, 8, 0.2)
    counters = EngineCounters(2048.0, 0.0, {"prefill-0": 4.0, "prefill-1": 4.0})
    result = ArmResult(name, "s", "nixl-mp", name.split("-", maxsplit=1)[0], {}, "r", True, {}, [])
    result.points.append(read_point(path, "all at once", SMOKE, counters, None, cache=cache))
    return result


def test_the_comparison_report_shows_each_policys_cache_hits(tmp_path: Path) -> None:
    report = BenchReport("s", "smoke", SMOKE, "cpu profile: test", tmp_path)
    report.arms += [
        policy_arm(tmp_path, "proxy-round_robin", CacheCounters(1000, 450, 550, 0)),
        policy_arm(tmp_path, "proxy-prefix_aware", CacheCounters(1000, 900, 100, 50)),
        policy_arm(tmp_path, "vllm-router-cache_aware", CacheCounters()),
    ]
    text = markdown(report)
    assert "| metric | proxy-round_robin | proxy-prefix_aware | vllm-router-cache_aware |" in text
    assert "| prefillers' prefix cache hits (vLLM, %) | 45.0 | 90.0 | - |" in text
    assert "| prefillers' KV connector hits (LMCache, %) | 0.0 | 50.0 | - |" in text
    assert "| all at once | proxy-prefix_aware | 1.50 |" in text
    assert text.splitlines()[
        text.splitlines().index("## Summary: a row per load point and arm") + 2
    ].endswith("| KV tokens | prefix hit % |")
    write_report(report)
    points = [arm["points"][0] for arm in json.loads((tmp_path / "bench.json").read_text())["arms"]]
    assert [p["prefix_cache_hit_rate"] for p in points] == [0.45, 0.9, None]
    assert points[1]["cache"] == {
        "queries": 1000,
        "hits": 900,
        "external_queries": 100,
        "external_hits": 50,
    }


def test_bad_comparison_options_stop_before_anything_starts() -> None:
    runs = ROOT / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    result = run_cli(
        "bench", "cpu-lmcache-pd", "--policies", "prefix_aware,cache_aware", root=ROOT, timeout_s=60
    )
    assert result.returncode == 1, result.stderr
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before  # no run folder made
    assert "cpu-lmcache-pd with bench --policies vllm-router-cache_aware" in result.stderr
    assert "vllm-router cannot drive LMCache's P/D protocol" in result.stderr
