"""The colocated baseline of every shipped P/D stack: the same engines on the same GPUs or
cores, no KV transfer anywhere, vllm-router's round robin over all of them."""

from __future__ import annotations

import json

import pytest

from generator.errors import SpecError, XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import render_stack
from generator.spec import Spec
from generator.stack import baseline_spec, load_spec, parse_spec
from tests.conftest import ROOT, spec_dict

P_D_STACKS = sorted(path.stem for path in (ROOT / "stacks").glob("*.yaml"))


def _pair(stack: str) -> tuple[Spec, Plan, Plan]:
    spec = load_spec(Workspace(ROOT).stack_file(stack))
    plan = make_plan(spec)
    return spec, plan, make_plan(baseline_spec(spec, plan))


def _resources(plan: Plan) -> dict[str, tuple[object, ...]]:
    return {e.name: (e.host, e.gpus, e.cpus, e.tp, e.address) for e in plan.engines}


@pytest.mark.parametrize("stack", P_D_STACKS)
def test_the_baseline_has_the_same_engines_on_the_same_resources(stack: str) -> None:
    _spec, plan, baseline = _pair(stack)
    assert baseline.stack == f"{stack}-colocated"
    assert baseline.topology.kind.value == "colocated"
    assert _resources(baseline) == _resources(plan)
    assert baseline.model == plan.model
    assert (baseline.router.host, baseline.router.port) == (plan.router.host, plan.router.port)
    assert baseline.sidecars == ()  # no LMCache servers


@pytest.mark.parametrize("stack", P_D_STACKS)
def test_the_baseline_moves_no_kv_and_round_robins_over_every_engine(stack: str) -> None:
    _spec, _plan, baseline = _pair(stack)
    services = {
        service.name: service
        for host in render_stack(baseline, Workspace(ROOT)).deployment.hosts
        for service in host.services
    }
    for engine in baseline.engines:
        command = services[engine.name].command
        assert "--kv-transfer-config" not in command
        assert not any(
            key.startswith(("VLLM_NIXL", "LMCACHE")) for key in services[engine.name].env
        )
    router = list(services["router"].command)
    assert "--vllm-pd-disaggregation" not in router
    assert router[router.index("--policy") + 1] == "round_robin"
    urls = router[router.index("--worker-urls") + 1 :]
    assert urls[: len(baseline.engines)] == [engine.url for engine in baseline.engines]
    assert not [name for name in services if name.startswith("lmcache-")]


def test_the_baseline_keeps_only_the_recovery_settings_vllm_router_reads() -> None:
    spec = load_spec(Workspace(ROOT).stack_file("cpu-faults"))  # our proxy: attempts, stall_s
    twin = baseline_spec(spec, make_plan(spec))
    assert spec.recovery.model_fields_set - twin.recovery.model_fields_set == {
        "attempts",
        "stall_s",
    }
    assert twin.recovery.health_interval_s == spec.recovery.health_interval_s == 1
    assert not [line for line in make_plan(twin).warnings if "recovery." in line]


def test_the_baseline_of_a_stack_with_a_kv_floor_drops_it() -> None:
    spec = load_spec(
        Workspace(ROOT).stack_file("xpyd"), ["observe={enabled: true, kv_floor_gib_s: 5}"]
    )
    twin = baseline_spec(spec, make_plan(spec))
    assert twin.observe.enabled
    assert twin.observe.kv_floor_gib_s is None


def test_a_stack_already_colocated_has_no_baseline() -> None:
    spec, plan, _ = _pair("cpu-1p1d")
    colocated = baseline_spec(spec, plan)
    with pytest.raises(XpydError, match="already colocated"):
        baseline_spec(colocated, make_plan(colocated))


def test_a_name_too_long_for_the_baseline_is_refused_with_the_limit() -> None:
    spec, plan, _ = _pair("cpu-1p1d")
    long = spec.model_copy(update={"name": "a" * 23})  # made in code: load_spec refuses it
    with pytest.raises(XpydError, match="longer than 32") as caught:
        baseline_spec(long, plan)
    assert "22 or less" in (caught.value.hint or "")


@pytest.mark.parametrize("length", [23, 32])
def test_a_pd_stack_whose_baseline_name_would_not_fit_is_refused_at_load(length: int) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_dict(name="a" * length), source="t")
    assert f"name: is {length} characters long; a P/D stack's name has at most 22" in str(
        caught.value
    )


def test_the_longest_pd_name_gets_its_baseline() -> None:
    spec, _, _ = _pair("cpu-1p1d")
    longest = parse_spec(
        {**spec.model_dump(mode="json", exclude_unset=True), "name": "a" * 22}, source="t"
    )
    assert baseline_spec(longest, make_plan(longest)).name == "a" * 22 + "-colocated"


@pytest.mark.parametrize("topology", ["colocated", "nixl-mp"])
def test_a_user_stack_may_not_take_a_baselines_name(topology: str) -> None:
    data = spec_dict(name="cpu-1p1d-colocated", topology=topology)
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t")
    assert "name: is the name bench gives cpu-1p1d's colocated baseline" in str(caught.value)


def test_the_proxy_cannot_route_a_colocated_stack() -> None:
    data = spec_dict(topology="colocated", router={"kind": "proxy"})
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t")
    assert "router.kind" in str(caught.value)
    assert "vllm-router" in str(caught.value)


def test_a_colocated_spec_plans_with_vllm_router_by_default() -> None:
    plan = make_plan(parse_spec(spec_dict(topology="colocated"), source="t"))
    assert plan.router.kind.value == "vllm-router"
    assert all(engine.kv.kind == "none" for engine in plan.engines)
    assert json.loads(plan.model_dump_json())["topology"] == {"kind": "colocated"}
