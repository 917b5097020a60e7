"""An engine over several nodes (<role>.nodes) in the Kubernetes export: one LeaderWorkerSet
(LWS v0.10.0's leaderworkerset.x-k8s.io/v1) per engine, its leader pod serving vLLM's API and
its workers running headless, each pod with its own `lmcache server`. Read back from the files
render writes, held to LWS's vendored schema and Kubernetes 1.33's for each pod template, and
to our own checks. Not applied to a cluster: none can run here (docs/kubernetes.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.plan import Plan
from generator.plan.models import LWS_LEADER_ADDRESS_REF, LWS_WORKER_INDEX_REF, POD_IP_REF
from generator.planner import make_plan
from generator.serializers.kubernetes import KUSTOMIZATION, KUSTOMIZE_CONFIG
from generator.serializers.kubernetes.checks import check_objects
from generator.serializers.kubernetes.templates import pod_templates
from generator.stack import load_spec
from tests.render.test_kubernetes import (
    cluster_objects,
    documents,
    exported,
    pod_gpus,
    schema_errors,
)

Obj = dict[str, Any]

# xpyd-mp-2host's prefiller as one TP=4 engine over its two hosts (two GPUs on each), beside
# one TP=2 decoder; and the cpu Slurm stack's prefiller over two nodes (one rank on each).
GPU_NODES = (
    "xpyd-mp-2host",
    "prefill.count=1",
    "prefill.tp=4",
    "prefill.nodes=2",
    "decode.count=1",
    "placement={}",
)
CPU_NODES = ("cpu-slurm", "prefill.nodes=2", "prefill.tp=2", "cpu.share=true")
STACKS = [pytest.param(GPU_NODES, id="gpu"), pytest.param(CPU_NODES, id="cpu")]


def _objects(stack: tuple[str, ...]) -> list[Obj]:
    return cluster_objects(exported(*stack)[1])


def _clean_export(stack: tuple[str, ...]) -> tuple[Plan, list[Obj]]:
    """The export's objects, each held to its schema and all to our own checks."""
    plan, rendered = exported(*stack)
    objects = cluster_objects(rendered)
    assert [error for obj in objects for error in schema_errors(obj)] == []
    assert check_objects(objects, pod_gpus(plan)) == []
    return plan, objects


def _only(objects: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _set(objects: list[Obj]) -> Obj:
    return _only(objects, "LeaderWorkerSet")


def _templates(objects: list[Obj]) -> dict[str, Obj]:
    return dict(pod_templates(_set(objects)))


def _containers(template: Obj) -> dict[str, Obj]:
    spec = template["spec"]
    return {c["name"]: c for c in (*spec.get("initContainers", []), *spec["containers"])}


def _vllm_args(template: Obj) -> list[str]:
    """The engine's own command: what follows the supervisor's ``--``, where it has one."""
    args: list[str] = template["spec"]["containers"][0]["args"]
    return args[args.index("--") + 1 :] if "--" in args else args


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _env(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("stack", STACKS)
def test_an_engine_over_two_nodes_is_one_leader_worker_set_that_meets_the_schemas(
    stack: tuple[str, ...],
) -> None:
    _, objects = _clean_export(stack)
    lws = _set(objects)
    assert lws["metadata"]["name"] == "prefill-0-nodes"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"  # the leader waits for its workers
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (group["size"], group["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    engines = {o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"}
    assert engines == {"decode-0"}  # the decoder, on one node, stays a StatefulSet


@pytest.mark.parametrize("stack", STACKS)
def test_the_leader_serves_and_each_worker_gets_its_rank_and_leader_from_lws(
    stack: tuple[str, ...],
) -> None:
    templates = _templates(_objects(stack))
    leader, worker = _vllm_args(templates["leader"]), _vllm_args(templates["worker"])
    assert (_value(leader, "--node-rank"), _value(leader, "--master-addr")) == ("0", POD_IP_REF)
    assert "--port" in leader
    assert "--headless" not in leader
    assert _value(worker, "--node-rank") == LWS_WORKER_INDEX_REF
    assert _value(worker, "--master-addr") == LWS_LEADER_ADDRESS_REF
    assert "--headless" in worker
    assert "--port" not in worker
    assert _value(leader, "--master-port") == _value(worker, "--master-port")
    for template in templates.values():
        engine = template["spec"]["containers"][0]
        # vLLM's guess from a default route can be 0.0.0.0 (docs/facts.md): the pod's own IP.
        assert _env(engine)["VLLM_HOST_IP"] == POD_IP_REF


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_has_its_own_lmcache_server_reached_at_loopback(stack: tuple[str, ...]) -> None:
    for template in _templates(_objects(stack)).values():
        sidecar, engine = template["spec"]["initContainers"], template["spec"]["containers"][0]
        assert [c["args"][c["args"].index("lmcache") + 1] for c in sidecar] == ["server"]
        config = json.loads(_value(_vllm_args(template), "--kv-transfer-config"))
        mp = config["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"]
        zmq = next(p["containerPort"] for p in sidecar[0]["ports"] if p["name"] == "lmc-zmq")
        assert (mp["lmcache.mp.host"], mp["lmcache.mp.port"]) == ("tcp://127.0.0.1", zmq)
        assert engine["name"] not in {c["name"] for c in sidecar}


def _selected(selector: dict[str, str], templates: dict[str, Obj]) -> set[str]:
    return {
        which
        for which, template in templates.items()
        if all(template["metadata"]["labels"].get(k) == v for k, v in selector.items())
    }


@pytest.mark.parametrize("stack", STACKS)
def test_only_the_leader_is_reached_by_a_service_or_the_routers_discovery(
    stack: tuple[str, ...],
) -> None:
    """A worker serves no API: no Service may pick it (nor vllm-router's discovery: the
    pod_discovery check, which the export passes above, holds a picked pod to be a leader)."""
    objects = _objects(stack)
    templates = _templates(objects)
    services = [o for o in objects if o["kind"] == "Service"]
    picked = {o["metadata"]["name"]: _selected(o["spec"]["selector"], templates) for o in services}
    assert {name for name, which in picked.items() if which} == {
        "prefill-0",
        "lmcache-prefill-0",
        "prefill",
    }
    assert all(which == {"leader"} for which in picked.values() if which)


def _walk(node: Any, path: list[str]) -> Iterator[Any]:
    """Where kustomize's field spec ``path`` leads (``name[]``: every item of a list)."""
    if not path:
        yield node
        return
    key, rest = path[0], path[1:]
    if key.endswith("[]"):
        for item in node.get(key[:-2], []):
            yield from _walk(item, rest)
    elif isinstance(node, dict) and key in node:
        yield from _walk(node[key], rest)


def test_kustomize_is_told_where_the_sets_images_and_group_count_are() -> None:
    """kustomize's own field lists know the built-in kinds only: without ours an overlay's
    ``images`` and ``replicas`` would leave the set's pods as rendered."""
    _, rendered = exported(*GPU_NODES)
    files = documents(rendered)
    (kustomization,) = files[KUSTOMIZATION]
    (config,) = files[KUSTOMIZE_CONFIG]
    assert kustomization["configurations"] == [str(KUSTOMIZE_CONFIG)]
    lws = _set(cluster_objects(rendered))
    images = {c["image"] for t in _templates([lws]).values() for c in _containers(t).values()}
    found = {
        image
        for spec in config["images"]
        if spec["kind"] == "LeaderWorkerSet"
        for image in _walk(lws, spec["path"].split("/"))
    }
    assert found == images
    assert len(images) >= 2  # the engine's and its server's
    assert {f"{name}:{tag}" for name, tag in _image_pins(kustomization)} >= images
    (replicas,) = config["replicas"]
    assert list(_walk(lws, replicas["path"].split("/"))) == [1]
    assert {"name": "prefill-0-nodes", "count": 1} in kustomization["replicas"]


def _image_pins(kustomization: Obj) -> Iterator[tuple[str, str]]:
    for image in kustomization["images"]:
        yield image["name"], image["newTag"]


def test_a_stack_without_such_engines_has_no_kustomize_config() -> None:
    _, rendered = exported("xpyd-mp-2host")
    assert KUSTOMIZE_CONFIG not in documents(rendered)
    (kustomization,) = documents(rendered)[KUSTOMIZATION]
    assert "configurations" not in kustomization


def test_the_nodes_do_not_watch_each_others_pages_lws_recreates_the_group() -> None:
    """Under Slurm each node's supervisor watches the others' pages; in a LeaderWorkerSet the
    controller recreates the whole group when one container restarts."""
    plan, _ = exported(*GPU_NODES)
    pages = {str(e.node_page) for e in plan.nodes_of(plan.prefill[0])}
    for template in _templates(_objects(GPU_NODES)).values():
        for container in _containers(template).values():
            watched = [a for a in container.get("args", []) if a.startswith("http")]
            assert not any(a.rsplit(":", 1)[-1].startswith(tuple(pages)) for a in watched)


def test_the_export_takes_a_spec_the_compose_runtime_would_refuse(workspace: Workspace) -> None:
    """No runtime of ours runs an export, so their rules do not apply to it; a topology's do."""
    stack, *overrides = GPU_NODES
    with pytest.raises(SpecError, match="have run under the slurm runtime only"):
        load_spec(workspace.stack_file(stack), overrides)
    assert load_spec(workspace.stack_file(stack), overrides, export=True).prefill.nodes == 2
    with pytest.raises(SpecError, match="lmcache-pd sends each TP rank's KV to one host"):
        load_spec(workspace.stack_file("xpyd-tp8"), ["decode.nodes=2"], export=True)


def _unknown_field(lws: Obj) -> None:
    lws["spec"]["workersPerGroup"] = 2


def _no_such_policy(lws: Obj) -> None:
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"


def _worker_field_no_pod_has(lws: Obj) -> None:
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 2


@pytest.mark.parametrize("breakage", [_unknown_field, _no_such_policy, _worker_field_no_pod_has])
def test_the_sets_schema_refuses_what_lws_or_kubernetes_would_not_take(
    breakage: Callable[[Obj], None],
) -> None:
    """The vendored schema is read: an unknown field, a policy LWS does not have, and a
    worker's container field that no pod has each fail."""
    lws = _set(_objects(GPU_NODES))
    assert schema_errors(lws) == []
    breakage(lws)
    assert schema_errors(lws)


# kubernetes.engines: disaggregatedset: every engine a role of one DisaggregatedSet.
DISAGGREGATED = "kubernetes.engines=disaggregatedset"
SET_STACKS = [
    pytest.param((*GPU_NODES, DISAGGREGATED), id="gpu-nodes"),
    pytest.param(("xpyd-mp", DISAGGREGATED), id="gpu"),
    pytest.param(("cpu-lmcache-pd", DISAGGREGATED), id="cpu-lmcache-pd"),
]


def _disaggregated(objects: list[Obj]) -> Obj:
    return _only(objects, "DisaggregatedSet")


@pytest.mark.parametrize("stack", SET_STACKS)
def test_every_engine_is_a_role_of_one_disaggregated_set_that_meets_the_schemas(
    stack: tuple[str, ...],
) -> None:
    plan, objects = _clean_export(stack)
    assert not [o for o in objects if o["kind"] in ("StatefulSet", "LeaderWorkerSet")]
    roles = _disaggregated(objects)["spec"]["roles"]
    assert [role["name"] for role in roles] == [engine.name for engine in plan.engines]
    for role in roles:  # every role has replicas (the CRD's CEL rule: all or none)
        assert role["spec"]["replicas"] == 1


def test_a_role_is_the_engines_own_pod_as_its_statefulset_or_leader_worker_set_has_it() -> None:
    """The set changes how the engines are rolled out, not what they run: a role on one node
    holds the StatefulSet's pod template (a group of one, restarted in place), a role over
    several nodes the LeaderWorkerSet's spec."""
    by_set = {
        r["name"]: r["spec"]
        for r in _disaggregated(_objects((*GPU_NODES, DISAGGREGATED)))["spec"]["roles"]
    }
    plain = _objects(GPU_NODES)
    assert by_set["prefill-0"] == _set(plain)["spec"]
    statefulset = next(o for o in plain if o["kind"] == "StatefulSet")
    group = by_set["decode-0"]["leaderWorkerTemplate"]
    assert (group["size"], group["restartPolicy"]) == (1, "None")
    assert group["workerTemplate"] == statefulset["spec"]["template"]
    assert "leaderTemplate" not in group  # LWS makes the leader from the worker template


def test_kustomize_is_told_where_the_disaggregated_sets_images_are() -> None:
    _, rendered = exported(*GPU_NODES, DISAGGREGATED)
    files = documents(rendered)
    (config,) = files[KUSTOMIZE_CONFIG]
    ds = _disaggregated(cluster_objects(rendered))
    images = {c["image"] for _, t in pod_templates(ds) for c in _containers(t).values()}
    found = {i for spec in config["images"] for i in _walk(ds, spec["path"].split("/"))}
    assert found == images
    assert {spec["kind"] for spec in config["images"]} == {"DisaggregatedSet"}
    assert "replicas" not in config  # per role: an overlay patches them


def test_a_disaggregated_set_takes_two_to_ten_engines(workspace: Workspace) -> None:
    overrides = ["decode.count=10", "cpu.share=true", DISAGGREGATED]
    spec = load_spec(workspace.stack_file("cpu-1p1d"), overrides)
    with pytest.raises(PlanError, match="holds 2 to 10 roles, one per engine; this stack has 11"):
        make_plan(spec, pod_network=True)
    assert make_plan(spec).kubernetes is None  # compose, process, Slurm: not read


def _eleven_roles(ds: Obj) -> None:
    ds["spec"]["roles"] += [dict(ds["spec"]["roles"][0], name=f"extra-{i}") for i in range(9)]


def _role_name_not_a_label(ds: Obj) -> None:
    ds["spec"]["roles"][0]["name"] = "Prefill_0"


@pytest.mark.parametrize("breakage", [_eleven_roles, _role_name_not_a_label])
def test_the_disaggregated_sets_schema_is_read(breakage: Callable[[Obj], None]) -> None:
    ds = _disaggregated(_objects(("xpyd-mp", DISAGGREGATED)))
    assert schema_errors(ds) == []
    breakage(ds)
    assert schema_errors(ds)
