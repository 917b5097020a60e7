"""vllm-router's Kubernetes pod discovery in the export (issue 36): a nixl-mp stack's router
finds its engine pods by label, so `kubectl scale` is routed to without a restart. Read back
from the rendered files: the router's flags against vllm-router 0.1.17's (its
py_src/vllm_router/router_args.py), its selectors against the engine pod templates' labels
(matched here, independently of our own checks), one HTTP port in every engine pod equal to
--service-discovery-port, and the RBAC its watcher needs. Not applied to a cluster: no API
server runs here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.plan.ports import PortBook
from generator.planner import make_plan
from generator.render import render_stack
from generator.serializers.kubernetes.checks import check_objects
from generator.stack import load_spec
from tests.render.test_kubernetes import Obj, cluster_objects, exported, pod_plan, schema_errors
from tests.render.test_shipped_stacks import SHIPPED

ROOT = Path(__file__).resolve().parents[2]
# nixl-mp stacks routed by vllm-router (its P/D mode): every one discovers pods by default.
DISCOVERING = [s for s in SHIPPED if exported(s)[0].router.discovers_pods()]
_FLAGS_WITH_VALUES = ("--service-discovery-namespace", "--service-discovery-port")


def _one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    return next(o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"]))


def _router_pod(objects: list[Obj]) -> Obj:
    spec: Obj = _one(objects, "Deployment", "router")["spec"]["template"]["spec"]
    return spec


def _values(args: list[str], flag: str) -> list[str]:
    """vllm-router's argparse: a flag's values run to the next flag (nargs="+")."""
    at = args.index(flag) + 1
    end = next((i for i in range(at, len(args)) if args[i].startswith("--")), len(args))
    return args[at:end]


def _selected(objects: list[Obj], selector: list[str]) -> set[str]:
    """The workloads whose pod template carries every key=value (vllm-router's rule: all
    labels equal; an empty selector picks nothing)."""
    wanted = dict(item.split("=", 1) for item in selector)
    return {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] in ("StatefulSet", "Deployment", "Job")
        and wanted
        and wanted.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    }


def test_every_nixl_mp_vllm_router_stack_discovers_and_no_other() -> None:
    expected = {s for s in SHIPPED if exported(s)[0].router.kind.value == "vllm-router"}
    expected = {s for s in expected if exported(s)[0].topology.kind.value == "nixl-mp"}
    assert set(DISCOVERING) == expected
    assert {"cpu-1p1d", "xpyd-mp-2host"} <= set(DISCOVERING)
    for stack in set(SHIPPED) - expected:  # our proxy (lmcache-pd, router.kind: proxy)
        objects = cluster_objects(exported(stack)[1])
        assert not [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
        assert "serviceAccountName" not in _router_pod(objects)


@pytest.mark.parametrize("stack", DISCOVERING)
def test_the_routers_args_discover_its_namespaces_pods_in_pd_mode(stack: str) -> None:
    plan, rendered = exported(stack)
    router = _router_pod(cluster_objects(rendered))["containers"][0]
    args: list[str] = router["args"]
    assert args[0] == "vllm-router"
    # P/D mode is --vllm-pd-disaggregation; --service-discovery alone would read --selector.
    assert {"--vllm-pd-disaggregation", "--service-discovery"} <= set(args)
    assert not {"--prefill", "--decode", "--worker-urls"} & set(args)  # no fixed URLs
    for flag in _FLAGS_WITH_VALUES:
        assert len(_values(args, flag)) == 1
    # The pod's own namespace, from the downward API: right after an overlay moves it too.
    assert _values(args, "--service-discovery-namespace") == ["$(POD_NAMESPACE)"]
    env = {e["name"]: e for e in router["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert plan.router.discovers_pods()


@pytest.mark.parametrize("stack", DISCOVERING)
def test_each_sides_selector_picks_exactly_that_sides_engine_pods(stack: str) -> None:
    plan, rendered = exported(stack)
    objects = cluster_objects(rendered)
    args = _router_pod(objects)["containers"][0]["args"]
    prefill = _selected(objects, _values(args, "--prefill-selector"))
    decode = _selected(objects, _values(args, "--decode-selector"))
    assert prefill == {engine.name for engine in plan.prefill}
    assert decode == {engine.name for engine in plan.decode}


@pytest.mark.parametrize("stack", DISCOVERING)
def test_every_engine_listens_on_the_discovery_port_with_no_clash_in_its_pod(stack: str) -> None:
    plan, rendered = exported(stack)
    objects = cluster_objects(rendered)
    args = _router_pod(objects)["containers"][0]["args"]
    (port,) = _values(args, "--service-discovery-port")
    for engine in plan.engines:
        spec = _one(objects, "StatefulSet", engine.name)["spec"]["template"]["spec"]
        vllm = spec["containers"][0]
        http = [p["containerPort"] for p in vllm["ports"] if p["name"] == "http"]
        assert http == [int(port)], engine.name
        assert vllm["args"][vllm["args"].index("--port") + 1] == port  # what vLLM binds
        declared = [p["containerPort"] for c in (*spec["initContainers"], vllm) for p in c["ports"]]
        assert max(Counter(declared).values()) == 1, (engine.name, declared)


@pytest.mark.parametrize("stack", DISCOVERING)
def test_the_routers_account_may_get_list_and_watch_pods_and_only_that(stack: str) -> None:
    _, rendered = exported(stack)
    objects = cluster_objects(rendered)
    account = _one(objects, "ServiceAccount")["metadata"]["name"]
    pod = _router_pod(objects)
    assert pod["serviceAccountName"] == account
    assert pod["automountServiceAccountToken"] is True  # the watcher's credentials
    binding = _one(objects, "RoleBinding")
    (subject,) = binding["subjects"]
    namespace = _one(objects, "Namespace")["metadata"]["name"]
    assert subject == {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    role = _one(objects, "Role", binding["roleRef"]["name"])
    assert binding["roleRef"]["kind"] == "Role"  # the namespace's, never the cluster's
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    assert "rbac.yaml" in {path.name for path in rendered.files}


def test_pod_discovery_off_keeps_the_planned_urls_and_each_engines_port() -> None:
    workspace = Workspace(ROOT)
    plan = pod_plan(workspace, "cpu-1p1d", "router.pod_discovery=false")
    objects = cluster_objects(render_stack(plan, workspace))
    args = _router_pod(objects)["containers"][0]["args"]
    assert "--service-discovery" not in args
    assert _values(args, "--prefill") == [plan.prefill[0].url]
    assert _values(args, "--decode") == [plan.decode[0].url]
    assert len({engine.http_port for engine in plan.engines}) == len(plan.engines)
    assert not [o for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    assert check_objects(objects, {}) == []
    assert [error for obj in objects for error in schema_errors(obj)] == []


def test_a_colocated_stacks_router_finds_every_engine_pod_by_one_selector() -> None:
    """vllm-router's regular mode takes one --selector whose labels must all match: the
    stack's and the engine label every engine pod carries, whatever its role (matched here
    against the pod templates, not by our own checks)."""
    workspace = Workspace(ROOT)
    plan = pod_plan(workspace, "cpu-1p1d", "topology=colocated", "lmcache={}")
    objects = cluster_objects(render_stack(plan, workspace))
    args = _router_pod(objects)["containers"][0]["args"]
    assert "--vllm-pd-disaggregation" not in args
    assert "--worker-urls" not in args  # 0.1.17 empties it under --service-discovery anyway
    assert "--prefill-selector" not in args
    assert "--decode-selector" not in args
    selector = _values(args, "--selector")
    assert selector == ["xpyd.org/stack=cpu-1p1d", "xpyd.org/engine=vllm"]
    assert _selected(objects, selector) == {engine.name for engine in plan.engines}
    assert _selected(objects, selector[:1]) > _selected(objects, selector)  # router, verdict
    (port,) = _values(args, "--service-discovery-port")
    assert {engine.http_port for engine in plan.engines} == {int(port)}
    assert _values(args, "--service-discovery-namespace") == ["$(POD_NAMESPACE)"]
    assert {"ServiceAccount", "Role", "RoleBinding"} <= {o["kind"] for o in objects}
    assert check_objects(objects, {}) == []
    assert [error for obj in objects for error in schema_errors(obj)] == []


def test_a_colocated_stack_without_discovery_keeps_its_worker_urls() -> None:
    workspace = Workspace(ROOT)
    overrides = ("topology=colocated", "lmcache={}", "router.pod_discovery=false")
    plan = pod_plan(workspace, "cpu-1p1d", *overrides)
    args = _router_pod(cluster_objects(render_stack(plan, workspace)))["containers"][0]["args"]
    assert "--service-discovery" not in args
    assert _values(args, "--worker-urls") == [engine.url for engine in plan.engines]


def test_compose_and_process_plans_never_discover_pods() -> None:
    """Only the Kubernetes export's plan (pod_network) does; plan.json elsewhere is as before."""
    workspace = Workspace(ROOT)
    for stack in DISCOVERING:
        plan = make_plan(load_spec(workspace.stack_file(stack)))
        assert not plan.router.discovers_pods()
        assert "pod_discovery" not in plan.model_dump_json()
        assert len({engine.http_port for engine in plan.engines}) == len(plan.engines)


@pytest.mark.parametrize(
    ("stack", "overrides", "says"),
    [
        ("cpu-1p1d", ("router.pod_discovery=maybe",), "Input should be a valid boolean"),
        ("xpyd", ("router.pod_discovery=true",), "the proxy finds scaled engines"),
        ("cpu-lmcache-pd", ("router.pod_discovery=false",), "the proxy finds scaled engines"),
    ],
)
def test_a_pod_discovery_setting_where_it_cannot_apply_is_one_clear_line(
    stack: str, overrides: tuple[str, ...], says: str
) -> None:
    with pytest.raises(SpecError) as refused:
        load_spec(Workspace(ROOT).stack_file(stack), overrides)
    lines = [line for line in str(refused.value).splitlines() if "- router.pod_discovery:" in line]
    assert len(lines) == 1, str(refused.value)
    assert says in lines[0]


def test_an_engines_own_http_port_cannot_be_discovered() -> None:
    overrides = ("placement.prefill.hosts=[local]", "placement.prefill.http_ports='8100'")
    with pytest.raises(PlanError, match=r"placement\.prefill\.http_ports: .*one port"):
        pod_plan(Workspace(ROOT), "cpu-1p1d", *overrides)
    pod_plan(Workspace(ROOT), "cpu-1p1d", *overrides, "router.pod_discovery=false")  # fine


def test_a_common_port_is_free_on_every_host_and_listed_for_each_owner() -> None:
    book = PortBook()
    book.claim_fixed("a", 7100, owner="router", purpose="router port", field="router.port")
    book.claim_fixed("b", 7101, owner="x", purpose="x", field="x")
    owners = [("a", "prefill-0"), ("a", "prefill-1"), ("b", "decode-0")]
    port = book.claim_common(owners, 7100, purpose="vLLM http", field="ports.prefill_http")
    assert port == 7102
    uses = [(u.host, u.owner) for u in book.table() if u.port == port]
    assert sorted(uses) == sorted(owners)
    # It stays claimed on each host: a later block there steps over it.
    assert book.claim_block("a", 7102, 1, owner="s", purpose="s", field="s") == (7103,)
