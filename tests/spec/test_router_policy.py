"""router.policy: one name (old specs), a name with options, or one per side; each router
kind checks its own names and options and renders them (router.yaml, vllm-router's flags)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.errors import SpecError
from generator.planner import make_plan
from generator.routers import router_of
from generator.spec import SidedPolicy
from generator.stack import parse_spec
from tests.conftest import spec_dict

LMCACHE_PD = {"topology": "lmcache-pd", "lmcache": {"chunk_size": 64}}


def plan_of(policy: object, **changes: Any) -> Any:
    return make_plan(parse_spec(spec_dict(router={"policy": policy}, **changes), source="t"))


def issues_of(policy: object, **changes: Any) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_dict(router={"policy": policy}, **changes), source="t")
    return str(caught.value)


def proxy_policy(plan: Any) -> dict[str, Any]:
    config = router_of(plan).config_file(plan)
    assert config is not None
    return dict(config.data["policy"])


@pytest.mark.parametrize(
    ("written", "prefill", "decode"),
    [
        ("least_outstanding", "least_outstanding", "least_outstanding"),
        ({"name": "cache_aware"}, "cache_aware", "cache_aware"),
        ({"decode": "power_of_two"}, "round_robin", "power_of_two"),
        ({"prefill": {"name": "cache_aware"}, "decode": "random"}, "cache_aware", "random"),
    ],
)
def test_every_written_form_reads_as_two_sides(written: object, prefill: str, decode: str) -> None:
    policy = SidedPolicy.model_validate(written)
    assert (policy.prefill.name, policy.decode.name) == (prefill, decode)


def test_one_name_is_written_back_as_one_name() -> None:
    written: object = SidedPolicy.model_validate("round_robin").model_dump(mode="json")
    assert written == "round_robin"


def test_vllm_router_gets_a_policy_per_side_and_cache_aware_options_as_flags() -> None:
    policy = {
        "prefill": {
            "name": "cache_aware",
            "options": {"cache_threshold": 0.5, "max_tree_size": 1000},
        },
        "decode": "power_of_two",
    }
    plan = plan_of(policy)
    command = router_of(plan).command(plan)
    flags = command[command.index("--vllm-pd-disaggregation") + 1 : command.index("--prefill")]
    assert flags == [
        "--prefill-policy", "cache_aware", "--decode-policy", "power_of_two",
        "--cache-threshold", "0.5", "--max-tree-size", "1000",
    ]  # fmt: skip


def test_one_policy_stays_one_flag() -> None:
    plan = plan_of("cache_aware")
    command = router_of(plan).command(plan)
    assert command[command.index("--vllm-pd-disaggregation") + 1 :][:2] == [
        "--policy",
        "cache_aware",
    ]
    assert "--prefill-policy" not in command


def cache_aware(**options: object) -> dict[str, object]:
    return {"name": "cache_aware", "options": options}


@pytest.mark.parametrize(
    ("policy", "field", "fix"),
    [
        (cache_aware(cache_thresh=0.5), "router.policy.options.cache_thresh", "cache_threshold,"),
        (cache_aware(cache_threshold=2), "router.policy.options.cache_threshold", "less than"),
        (
            {"decode": {"name": "random", "options": {"x": 1}}},
            "router.policy.decode.options.x",
            "random options: none",
        ),
        ({"prefill": "fastest"}, "router.policy.prefill: 'fastest' is not a", "cache_aware"),
    ],
)
def test_vllm_router_policy_issues_name_the_field(policy: object, field: str, fix: str) -> None:
    text = issues_of(policy)
    assert field in text
    assert fix in text


def test_vllm_router_options_are_one_set_for_both_sides() -> None:
    side = {"name": "cache_aware", "options": {"cache_threshold": 0.1}}
    other = {"name": "cache_aware", "options": {"cache_threshold": 0.9}}
    assert "one set for both sides" in issues_of({"prefill": side, "decode": other})


def test_cache_aware_is_refused_on_lmcache_pd_where_the_proxy_routes() -> None:
    text = issues_of("cache_aware", **LMCACHE_PD)
    assert "router.policy: 'cache_aware' is not a proxy policy" in text
    assert "prefix_aware" in text
    assert "router.kind: vllm-router" in text


def test_the_proxy_hashes_blocks_of_lmcaches_chunk_size_per_side() -> None:
    plan = plan_of({"prefill": "prefix_aware", "decode": "least_outstanding"}, **LMCACHE_PD)
    assert proxy_policy(plan) == {
        "prefill": {"name": "prefix_aware", "options": {"block_tokens": 64}},
        "decode": "least_outstanding",
    }


def test_a_proxy_option_given_wins_over_the_stacks_default() -> None:
    policy = {"name": "prefix_aware", "options": {"block_tokens": 16, "hot_threshold": 2}}
    options = proxy_policy(plan_of(policy, **LMCACHE_PD))["decode"]["options"]
    assert options == {"block_tokens": 16, "hot_threshold": 2}


def test_proxy_options_are_checked_by_the_proxys_own_models() -> None:
    text = issues_of({"name": "prefix_aware", "options": {"hot_threshold": -1}}, **LMCACHE_PD)
    assert "router.policy.options.hot_threshold" in text
    assert "the proxy's prefix_aware options: block_tokens" in text


def test_the_policy_flags_are_the_specs_own() -> None:
    data = spec_dict(router={"extra_args": ["--prefill-policy", "random"]})
    with pytest.raises(SpecError, match=r"router\.policy\.prefill"):
        parse_spec(data, source="t")


# vllm-router 0.1.17 gives cache_aware's options to its Rust core: f32, usize and u64 there
# (an int past usize stops it at start with OverflowError; a float past f32 becomes inf).
_RUST_INT_MAX = 2**64 - 1
_F32_MAX = 3.4028234663852886e38
_F32_OPTIONS = ("cache_threshold", "balance_rel_threshold")
CACHE_AWARE_VALUES = st.one_of(
    st.integers(-(2**80), 2**80),
    st.sampled_from([2**64 - 1, 2**64, 10**30, 31_536_000, 31_536_001]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("inf"), 1e39, _F32_MAX]),
)


@given(
    option=st.sampled_from(
        ["cache_threshold", "balance_abs_threshold", "balance_rel_threshold",
         "eviction_interval_secs", "max_tree_size"]
    ),
    value=CACHE_AWARE_VALUES,
)  # fmt: skip
def test_a_cache_aware_option_is_refused_or_fits_the_routers_own_types(
    option: str, value: float
) -> None:
    """What reaches vllm-router's command line parses as its argparse type and fits the Rust
    field it lands in; anything else is refused, naming the option."""
    data = spec_dict(router={"kind": "vllm-router", "policy": cache_aware(**{option: value})})
    try:
        plan = make_plan(parse_spec(data, source="t"))
    except SpecError as exc:
        refused = str(exc)
    else:
        refused = ""
        command = router_of(plan).command(plan)
        text = command[command.index(f"--{option.replace('_', '-')}") + 1]
        if option in _F32_OPTIONS:  # argparse's float, then an f32
            assert math.isfinite(float(text))
            assert abs(float(text)) <= _F32_MAX
        else:  # argparse's int, then a usize or u64
            assert 0 <= int(text) <= _RUST_INT_MAX
    assert not refused or f"router.policy.options.{option}" in refused


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_tree_size", 2**64),
        ("balance_abs_threshold", 10**30),
        ("balance_rel_threshold", float("inf")),
        ("balance_rel_threshold", 1e39),
        ("eviction_interval_secs", 2**63),
    ],
)
def test_cache_aware_values_past_the_routers_types_are_refused(option: str, value: float) -> None:
    assert f"router.policy.options.{option}" in issues_of(cache_aware(**{option: value}))


def test_recovery_settings_vllm_router_ignores_are_a_warning_naming_them() -> None:
    recovery = {"attempts": 3, "stall_s": 30, "health_failures": 3}
    plan = plan_of("round_robin", recovery=recovery)
    (warning,) = [w for w in plan.warnings if "recovery." in w]
    assert warning.startswith("recovery.attempts, recovery.stall_s: vllm-router does not read")
    proxy = plan_of("round_robin", recovery=recovery, **LMCACHE_PD)
    assert not [w for w in proxy.warnings if "recovery." in w]
    assert not [w for w in plan_of("round_robin").warnings if "recovery." in w]
