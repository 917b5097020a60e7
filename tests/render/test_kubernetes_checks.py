"""Each of our own checks of the Kubernetes export (generator/serializers/kubernetes/checks.py)
fails on an object broken on purpose: a check that cannot fail checks nothing. Every check
is covered (the last test holds the list to CHECKS)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from generator.serializers.kubernetes.checks import (
    CHECKS,
    config_maps_fit,
    gpu_counts,
    names_valid,
    no_secret_values,
    pod_discovery,
    ports_declared,
    references_exist,
    selectors_match,
    side_channels,
)
from tests.render.test_kubernetes import cluster_objects, exported, pod_gpus
from tests.render.test_kubernetes_nodes import GPU_NODES

Obj = dict[str, Any]
Breakage = Callable[[list[Obj]], None]


# cpu-1p1d as the colocated topology: its vllm-router finds every engine pod by one selector.
COLOCATED = ("cpu-1p1d", "topology=colocated", "lmcache={}")


def _objects(stack: str | tuple[str, ...]) -> tuple[list[Obj], dict[str, int]]:
    name, *overrides = (stack,) if isinstance(stack, str) else stack
    plan, rendered = exported(name, *overrides)
    return copy.deepcopy(cluster_objects(rendered)), pod_gpus(plan)


def _one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    return next(o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"]))


def _engine(objects: list[Obj], name: str = "prefill-0") -> Obj:
    spec: Obj = _one(objects, "StatefulSet", name)["spec"]["template"]["spec"]
    return spec


def _main(objects: list[Obj], name: str = "prefill-0") -> Obj:
    container: Obj = _engine(objects, name)["containers"][0]
    return container


def _service_selects_nothing(objects: list[Obj]) -> None:
    _one(objects, "Service", "decode-0")["spec"]["selector"]["xpyd.org/instance"] = "decode-9"


def _template_drifts_from_its_selector(objects: list[Obj]) -> None:
    labels = _one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    labels["xpyd.org/instance"] = "someone-else"


def _probe_on_an_undeclared_port(objects: list[Obj]) -> None:
    _main(objects)["readinessProbe"]["httpGet"]["port"] = "admin"


def _service_targets_an_undeclared_port(objects: list[Obj]) -> None:
    _one(objects, "Service", "router")["spec"]["ports"][0]["targetPort"] = 9999


def _monitor_scrapes_an_undeclared_port(objects: list[Obj]) -> None:
    _one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] = "web"


def _two_containers_on_one_port(objects: list[Obj]) -> None:
    sidecar = _engine(objects)["initContainers"][0]
    sidecar["ports"][0]["containerPort"] = _main(objects)["ports"][-1]["containerPort"]


def _ranks_share_a_side_channel(objects: list[Obj]) -> None:
    ports = [p for p in _main(objects)["ports"] if p["name"].startswith("nixl-side")]
    ports[1]["containerPort"] = ports[0]["containerPort"]


def _vllm_told_another_side_channel(objects: list[Obj]) -> None:
    env = _main(objects)["env"]
    next(e for e in env if e["name"] == "VLLM_NIXL_SIDE_CHANNEL_PORT")["value"] = "1"


def _service_name_not_a_dns_label(objects: list[Obj]) -> None:
    _one(objects, "Service", "router")["metadata"]["name"] = "Router_1"


def _port_name_too_long(objects: list[Obj]) -> None:
    _main(objects)["ports"][0]["name"] = "nixl-side-channel-0"


def _config_map_missing(objects: list[Obj]) -> None:
    objects.remove(_one(objects, "ConfigMap", "lmcache-decode-0"))


def _claim_missing(objects: list[Obj]) -> None:
    objects.remove(_one(objects, "PersistentVolumeClaim"))


def _unknown_secret(objects: list[Obj]) -> None:
    ref = {"secretKeyRef": {"name": "my-keys", "key": "K"}}
    _main(objects)["env"].append({"name": "K", "valueFrom": ref})


def _secret_with_data(objects: list[Obj]) -> None:
    meta = {"name": "hf-token"}
    objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {"x": "eQ=="}})


def _token_as_a_value(objects: list[Obj]) -> None:
    _main(objects)["env"].append({"name": "HF_TOKEN", "value": "hf_abc"})


def _gpus_not_tp(objects: list[Obj]) -> None:
    resources = _main(objects)["resources"]
    resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = "1"


def _gpu_requests_differ_from_limits(objects: list[Obj]) -> None:
    _main(objects)["resources"]["requests"]["nvidia.com/gpu"] = "1"


def _cuda_devices_miscounted(objects: list[Obj]) -> None:
    env = _main(objects)["env"]
    next(e for e in env if e["name"] == "CUDA_VISIBLE_DEVICES")["value"] = "0"


def _plan_over_a_mebibyte(objects: list[Obj]) -> None:
    _one(objects, "ConfigMap", "verdict-plan")["data"]["plan.json"] += " " * (1 << 20)


def _verdict_plan_missing(objects: list[Obj]) -> None:
    objects.remove(_one(objects, "ConfigMap", "verdict-plan"))


def _router_args(objects: list[Obj]) -> list[str]:
    router = _one(objects, "Deployment", "router")["spec"]["template"]["spec"]
    args: list[str] = router["containers"][0]["args"]
    return args


def _without_flag(objects: list[Obj], flag: str, values: int) -> None:
    args = _router_args(objects)
    at = args.index(flag)
    del args[at : at + 1 + values]


def _engine_role_label_drifts(objects: list[Obj]) -> None:
    labels = _one(objects, "StatefulSet", "decode-0")["spec"]["template"]["metadata"]["labels"]
    labels["xpyd.org/role"] = "decoder"


def _selector_names_another_stack(objects: list[Obj]) -> None:
    args = _router_args(objects)
    at = args.index("--prefill-selector") + 1
    args[at] = "xpyd.org/stack=someone-else"


def _selectors_swapped(objects: list[Obj]) -> None:
    args = _router_args(objects)
    prefill, decode = args.index("--prefill-selector"), args.index("--decode-selector")
    args[prefill], args[decode] = args[decode], args[prefill]


def _engine_on_a_port_of_its_own(objects: list[Obj]) -> None:
    http = next(p for p in _main(objects, "decode-0")["ports"] if p["name"] == "http")
    http["containerPort"] += 100


def _discovery_port_left_to_its_default(objects: list[Obj]) -> None:
    _without_flag(objects, "--service-discovery-port", 1)


def _discovery_across_namespaces(objects: list[Obj]) -> None:
    _without_flag(objects, "--service-discovery-namespace", 1)


def _discovery_without_pd_mode(objects: list[Obj]) -> None:
    _without_flag(objects, "--vllm-pd-disaggregation", 0)


def _engine_label_dropped(objects: list[Obj]) -> None:
    labels = _one(objects, "StatefulSet", "decode-0")["spec"]["template"]["metadata"]["labels"]
    del labels["xpyd.org/engine"]


def _selector_by_stack_only(objects: list[Obj]) -> None:
    args = _router_args(objects)
    del args[args.index("xpyd.org/engine=vllm")]  # the router's own pod matches too


def _selector_beside_pd_mode(objects: list[Obj]) -> None:
    _router_args(objects).extend(["--selector", "xpyd.org/stack=cpu-1p1d"])


def _router_runs_as_the_default_account(objects: list[Obj]) -> None:
    del _one(objects, "Deployment", "router")["spec"]["template"]["spec"]["serviceAccountName"]


def _router_token_not_mounted(objects: list[Obj]) -> None:
    spec = _one(objects, "Deployment", "router")["spec"]["template"]["spec"]
    spec["automountServiceAccountToken"] = False


def _role_cannot_watch(objects: list[Obj]) -> None:
    _one(objects, "Role")["rules"][0]["verbs"] = ["get", "list"]


def _binding_names_another_account(objects: list[Obj]) -> None:
    _one(objects, "RoleBinding")["subjects"][0]["name"] = "default"


def _binding_in_another_namespace(objects: list[Obj]) -> None:
    _one(objects, "RoleBinding")["subjects"][0]["namespace"] = "default"


def _worker(objects: list[Obj]) -> Obj:
    template: Obj = _one(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return template["workerTemplate"]  # type: ignore[no-any-return]


def _worker_labelled_with_the_engines_role(objects: list[Obj]) -> None:
    _worker(objects)["metadata"]["labels"]["xpyd.org/role"] = "prefill"


def _worker_asks_for_the_whole_engines_gpus(objects: list[Obj]) -> None:
    engine = _worker(objects)["spec"]["containers"][0]
    engine["resources"]["requests"]["nvidia.com/gpu"] = "4"
    engine["resources"]["limits"]["nvidia.com/gpu"] = "4"


BROKEN: list[tuple[str, Any, str | tuple[str, ...], Breakage, str]] = [
    ("selectors_match", selectors_match, "cpu-1p1d", _service_selects_nothing, "matches no pod"),
    (
        "selectors_match",
        selectors_match,
        "cpu-1p1d",
        _template_drifts_from_its_selector,
        "its own pod template",
    ),
    ("ports_declared", ports_declared, "cpu-1p1d", _probe_on_an_undeclared_port, "'admin'"),
    ("ports_declared", ports_declared, "cpu-1p1d", _service_targets_an_undeclared_port, "9999"),
    ("ports_declared", ports_declared, "cpu-1p1d", _monitor_scrapes_an_undeclared_port, "'web'"),
    ("ports_declared", ports_declared, "cpu-1p1d", _two_containers_on_one_port, "share"),
    ("side_channels", side_channels, "xpyd-mp-2host", _ranks_share_a_side_channel, "share"),
    ("side_channels", side_channels, "cpu-1p1d", _vllm_told_another_side_channel, "rank 0"),
    ("names_valid", names_valid, "cpu-1p1d", _service_name_not_a_dns_label, "DNS label"),
    ("names_valid", names_valid, "cpu-1p1d", _port_name_too_long, "IANA"),
    ("references_exist", references_exist, "cpu-lmcache-pd", _config_map_missing, "ConfigMap"),
    ("references_exist", references_exist, "cpu-1p1d", _claim_missing, "claim"),
    ("references_exist", references_exist, "cpu-1p1d", _verdict_plan_missing, "verdict-plan"),
    ("references_exist", references_exist, "cpu-1p1d", _unknown_secret, "'my-keys'"),
    ("no_secret_values", no_secret_values, "xpyd", _secret_with_data, "secret values"),
    ("no_secret_values", no_secret_values, "xpyd", _token_as_a_value, "HF_TOKEN"),
    ("gpu_counts", gpu_counts, "xpyd-mp-2host", _gpus_not_tp, "TP ranks here are 2"),
    ("gpu_counts", gpu_counts, "xpyd-mp-2host", _gpu_requests_differ_from_limits, "differ"),
    ("gpu_counts", gpu_counts, "xpyd-mp-2host", _cuda_devices_miscounted, "CUDA_VISIBLE"),
    (
        "gpu_counts",
        gpu_counts,
        GPU_NODES,
        _worker_asks_for_the_whole_engines_gpus,
        "prefill-0-nodes/worker: asks for 4 GPUs, its TP ranks here are 2",
    ),
    ("config_maps_fit", config_maps_fit, "cpu-1p1d", _plan_over_a_mebibyte, "1 MiB"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _engine_role_label_drifts, "picked by 0"),
    ("pod_discovery", pod_discovery, "cpu-2host", _selector_names_another_stack, "matches no"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _selectors_swapped, "selector picks"),
    ("pod_discovery", pod_discovery, "xpyd-mp-2host", _engine_on_a_port_of_its_own, "listens"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _discovery_port_left_to_its_default, "80"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _discovery_across_namespaces, "every names"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _discovery_without_pd_mode, "P/D selectors"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _selector_beside_pd_mode, "--selector is unused"),
    ("pod_discovery", pod_discovery, COLOCATED, _engine_label_dropped, "picked by 0"),
    (
        "pod_discovery",
        pod_discovery,
        GPU_NODES,
        _worker_labelled_with_the_engines_role,
        "picks prefill-0-nodes/worker",
    ),
    ("pod_discovery", pod_discovery, COLOCATED, _selector_by_stack_only, "picks router"),
    (
        "pod_discovery",
        pod_discovery,
        "cpu-1p1d",
        _router_runs_as_the_default_account,
        "no exported ServiceAccount",
    ),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _router_token_not_mounted, "token"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _role_cannot_watch, "may watch pods"),
    ("pod_discovery", pod_discovery, "cpu-1p1d", _binding_names_another_account, "may watch"),
    ("pod_discovery", pod_discovery, "xpyd-mp", _binding_in_another_namespace, "may watch"),
]


_CASES = [
    pytest.param(check, stack, breakage, says, id=breakage.__name__.strip("_"))
    for _, check, stack, breakage, says in BROKEN
]


@pytest.mark.parametrize(("check", "stack", "breakage", "says"), _CASES)
def test_each_check_fails_on_an_object_broken_on_purpose(
    check: Any, stack: str | tuple[str, ...], breakage: Breakage, says: str
) -> None:
    objects, gpus = _objects(stack)
    assert list(check(objects, gpus)) == []  # whole: it passes
    breakage(objects)
    problems = list(check(objects, gpus))
    assert problems, f"{check.__name__} missed {breakage.__name__}"
    assert any(says in problem for problem in problems), problems


def test_every_check_is_shown_failing() -> None:
    assert {name for name, *_ in BROKEN} == {check.__name__ for check in CHECKS}
