"""Bad input -> one clear error naming the field and the fix (issue 2's list, one test each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from generator.errors import PlanError, SpecError
from generator.planner import make_plan
from generator.stack import load_spec, parse_spec
from tests.conftest import spec_dict


def issues_of(data: dict[str, Any], overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="test.yaml", overrides=overrides)
    return str(caught.value)


def plan_error(data: dict[str, Any]) -> PlanError:
    with pytest.raises(PlanError) as caught:
        make_plan(parse_spec(data, source="test.yaml"))
    return caught.value


def test_missing_model() -> None:
    text = issues_of(spec_dict(model=None))
    assert "model: is required" in text
    assert "fix: add model" in text


def test_unknown_key_lists_the_known_ones() -> None:
    text = issues_of(spec_dict(prefill={"count": 1, "tensor_parallel": 2}))
    assert "prefill.tensor_parallel: is not a known setting" in text
    assert "count, env, extra_args, gpu_memory_utilization, nodes, secret_env, tp" in text


def test_inline_token_is_refused_without_echoing_it() -> None:
    token = "hf_" + "a1B2c3D4e5" * 3
    text = issues_of(spec_dict(hf={"token": token}))
    assert "hf.token: holds a literal value" in text
    assert "{env: HF_TOKEN}" in text
    assert token not in text


def test_token_hidden_in_env_is_refused() -> None:
    token = "hf_" + "Z9y8X7w6V5" * 3
    text = issues_of(spec_dict(decode={"env": {"HF_TOKEN": token}}))
    assert "decode.env.HF_TOKEN: contains what looks like a Hugging Face token" in text
    assert token not in text


def test_lmcache_pd_needs_equal_tp() -> None:
    data = spec_dict(topology="lmcache-pd", prefill={"tp": 2}, decode={"tp": 1})
    text = issues_of(data)
    assert "prefill.tp: prefill TP 2 is larger than decode TP 1" in text
    assert "fix: set prefill.tp and decode.tp to the same value" in text


def test_nixl_tp_must_divide() -> None:
    text = issues_of(spec_dict(prefill={"tp": 2}, decode={"tp": 3}))
    assert "needs one to divide the other" in text


def test_mixing_topology_settings() -> None:
    text = issues_of(spec_dict(lmcache={"pd": {"buffer_device": "cuda"}}))
    assert "lmcache.pd: applies to topology lmcache-pd, but this stack is nixl-mp" in text
    text = issues_of(spec_dict(topology="lmcache-pd", lmcache={"server": {"l1_size_gb": 4}}))
    assert "lmcache.server: applies to topology nixl-mp" in text
    text = issues_of(spec_dict(ports={"decode_pd_init": 8300}))
    assert "ports.decode_pd_init: is only used by topology lmcache-pd" in text


def test_vllm_router_cannot_drive_lmcache_pd() -> None:
    text = issues_of(spec_dict(topology="lmcache-pd", router={"kind": "vllm-router"}))
    assert "router.kind: vllm-router cannot drive LMCache's P/D protocol" in text


def test_policy_choices_are_listed() -> None:
    text = issues_of(spec_dict(router={"policy": "fastest"}))
    assert "router.policy: 'fastest' is not a vllm-router policy" in text
    assert "cache_aware" in text


def test_csv_lists_of_unequal_length() -> None:
    placement = {
        "prefill": {"hosts": "h,h,h"},
        "decode": {"hosts": "h", "http_ports": "8000,8001,8002"},
    }
    data = spec_dict(prefill={"count": 2}, decode={"count": 2}, placement=placement)
    text = issues_of(data)
    assert "placement.prefill.hosts: has 3 entries but prefill.count is 2" in text
    assert "placement.decode.http_ports: has 3 entries but decode.count is 2" in text


def test_cpu_profile_settings() -> None:
    data = spec_dict(
        profile="cpu", prefill={"tp": 2, "gpu_memory_utilization": 0.5}, networking={"rdma": True}
    )
    text = issues_of(data)
    assert "networking.rdma: the cpu profile has no RDMA devices" in text
    assert "prefill.tp: the cpu profile runs one TP rank per host, on one pinned core: tp " in text
    assert "fix: set prefill.tp: 1" in text
    assert "prefill.gpu_memory_utilization: has no meaning on the cpu profile" in text


def test_all_problems_are_reported_together() -> None:
    data = spec_dict(router={"policy": "x", "notify_port": 7777}, lmcache={"pd": {}})
    assert "3 problems" in issues_of(data)


def test_set_overrides_apply_before_validation() -> None:
    spec = parse_spec(spec_dict(), source="t", overrides=("decode.count=2", "hosts.0.gpus=[4,5]"))
    assert spec.decode.count == 2
    assert spec.hosts[0].gpus == [4, 5]
    assert "is not KEY=VALUE" in issues_of(spec_dict(), ("decode.count",))


def test_more_gpus_than_the_host_has() -> None:
    error = plan_error(spec_dict(prefill={"count": 3}, decode={"count": 2}))
    assert error.field == "decode.count"
    assert "need 5 GPUs in aligned blocks; the hosts have 4 (hosts[0].gpus: [0, 1, 2, 3])" in str(
        error
    )
    assert "fix: lower prefill/decode count or tp" in str(error)


def test_tp_that_fits_no_host() -> None:
    error = plan_error(spec_dict(prefill={"tp": 8}, decode={"tp": 8}))
    assert error.field == "prefill.tp"
    assert "prefill needs 8 GPUs per engine but no host has more than 4" in str(error)
    assert "spread each engine over more hosts (prefill.nodes" in str(error)


def test_gpu_profile_host_without_gpus() -> None:
    error = plan_error(spec_dict(hosts=[{"name": "h"}]))
    assert error.field == "hosts[0].gpus"
    assert "lists no GPUs" in str(error)


def test_fixed_ports_colliding() -> None:
    placement = {"prefill": {"hosts": "h", "http_ports": "9000"}}
    error = plan_error(spec_dict(placement=placement, router={"port": 9000}))
    assert error.field == "placement.prefill.http_ports"
    assert "port 9000 on host h is already used by router (router port, from router.port)" in str(
        error
    )


def test_seed_style_single_port_on_one_host_collides() -> None:
    placement = {"prefill": {"hosts": "h", "http_ports": "8000"}}
    error = plan_error(spec_dict(prefill={"count": 2}, placement=placement))
    assert "port 8000 on host h is already used by prefill-0" in str(error)


def test_explicit_gpus_must_exist_and_not_be_shared() -> None:
    placement = {"prefill": {"hosts": "h", "gpus": ["7"]}}
    assert "asks for device 7, which host h does not list" in str(
        plan_error(spec_dict(placement=placement))
    )
    placement = {"prefill": {"hosts": "h", "gpus": ["0"]}, "decode": {"hosts": "h", "gpus": ["0"]}}
    assert "device 0 on host h is given to both prefill-0 and decode-0" in str(
        plan_error(spec_dict(placement=placement))
    )


def test_missing_file_names_the_shipped_stacks(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("name: one\n")
    with pytest.raises(SpecError) as caught:
        load_spec(tmp_path / "nope.yaml")
    assert "pick one of: one" in str(caught.value)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "is not valid YAML" in str(caught.value)
