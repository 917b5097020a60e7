"""The Kubernetes export (render --target kubernetes) of every shipped stack, read back from
the files it writes: every object against Kubernetes 1.33's schemas in strict mode (unknown
fields fail; kubernetes-validate), the prometheus-operator objects against the CRDs' vendored
schemas (tests/render/kubernetes_schemas/, made as strict), our own checks, and what the
objects must say (pod IP side channel, sidecars, GPUs, secrets only by reference)."""

from __future__ import annotations

import gzip
import http.server
import itertools
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from generator.errors import RenderError
from generator.observe.rules import rules_document
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import write_rendered
from generator.serializers.kubernetes import KUSTOMIZATION, KUSTOMIZE_CONFIG
from generator.serializers.kubernetes.checks import check_objects
from generator.serializers.kubernetes.templates import (
    DS_API,
    DS_KIND,
    LWS_API,
    LWS_KIND,
    pod_templates,
)
from generator.services.parts import python_check
from generator.stack import load_spec
from generator.topologies import topology_of
from tests.render.test_shipped_stacks import SHIPPED

KUBERNETES_VERSION = "1.33"
SCHEMAS = Path(__file__).parent / "kubernetes_schemas"
CRDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring.coreos.com-v1.json",
    (LWS_API, LWS_KIND): "leaderworkerset-leaderworkerset.x-k8s.io-v1.json.gz",
    (DS_API, DS_KIND): "disaggregatedset-disaggregatedset.x-k8s.io-v1.json.gz",
}
KUSTOMIZE_FILES = {KUSTOMIZATION.name, KUSTOMIZE_CONFIG.name}  # kustomize's input, not objects
Obj = dict[str, Any]


def pod_plan(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    spec = load_spec(workspace.stack_file(stack), overrides, export=True)
    return make_plan(spec, pod_network=True)


def pod_gpus(plan: Plan) -> dict[str, int]:
    """The GPUs each engine pod must ask for, by its instance label: its TP ranks on a node
    (a LeaderWorkerSet's workers: ``<engine>-workers``)."""
    gpus: dict[str, int] = {}
    for engine in plan.engines:
        if engine.gpus:
            gpus[engine.name] = engine.tp // engine.nodes
            if engine.nodes > 1:
                gpus[f"{engine.name}-workers"] = engine.tp // engine.nodes
    return gpus


@cache
def exported(stack: str, *overrides: str) -> tuple[Plan, RenderedStack]:
    workspace = Workspace(Path(__file__).resolve().parents[2])
    plan = pod_plan(workspace, stack, *overrides)
    return plan, render_stack(plan, workspace)


def documents(rendered: RenderedStack) -> dict[PurePosixPath, list[Obj]]:
    """Each YAML file of the export, its documents parsed back."""
    folder = rendered.owned_dirs[0]
    return {
        path.relative_to(folder): [d for d in yaml.safe_load_all(text) if d is not None]
        for path, text in rendered.files.items()
        if path.suffix == ".yaml"
    }


def cluster_objects(rendered: RenderedStack) -> list[Obj]:
    """What `kubectl apply -k` sends (kustomizations are kustomize's own input)."""
    return [
        obj
        for path, objects in documents(rendered).items()
        if path.name not in KUSTOMIZE_FILES
        for obj in objects
    ]


def _strict(schema: Any) -> Any:
    """A CRD schema that refuses what the API server would prune: unknown fields."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    open_ended = "additionalProperties" in strict or strict.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if "properties" in strict and not open_ended:
        strict["additionalProperties"] = False
    return strict


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    path = SCHEMAS / CRDS[(api_version, kind)]
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return jsonschema.Draft202012Validator(_strict(json.loads(data)))


def _pod_template(name: str, template: Obj) -> Obj:
    meta = {"name": name.replace("/", "-").lower()}
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template}


def schema_errors(obj: Obj) -> list[str]:
    key = (obj["apiVersion"], obj["kind"])
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    if key in CRDS:
        errors = crd_validator(*key).iter_errors(obj)
        found = [f"{where}: {list(e.absolute_path)}: {e.message}" for e in errors]
        # A CRD's copy of the pod template is the API of its controller-gen's day: each
        # template must also be what this Kubernetes takes.
        for which, template in pod_templates(obj):
            found += schema_errors(_pod_template(f"{where}-{which}", template))
        return found
    try:
        version = kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{where}: {list(exc.path)}: {exc.message}"]
    assert version == KUBERNETES_VERSION
    return []


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_object_of_every_shipped_stack_meets_the_strict_schemas(stack: str) -> None:
    _, rendered = exported(stack)
    objects = cluster_objects(rendered)
    kinds = {obj["kind"] for obj in objects}
    assert {"StatefulSet", "Service", "PodMonitor", "PrometheusRule"} <= kinds
    assert [error for obj in objects for error in schema_errors(obj)] == []


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_shipped_stack_passes_our_own_checks(stack: str) -> None:
    plan, rendered = exported(stack)
    assert check_objects(cluster_objects(rendered), pod_gpus(plan)) == []


def test_the_strict_schemas_refuse_an_unknown_field() -> None:
    """Strict means strict: a field the API server would drop fails, built-in or CRD."""
    _, rendered = exported("cpu-1p1d")
    objects = cluster_objects(rendered)
    statefulset = next(o for o in objects if o["kind"] == "StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    assert schema_errors(statefulset)
    monitor = next(o for o in objects if o["kind"] == "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["scrapeEvery"] = "5s"
    assert schema_errors(monitor)
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["severity"] = "page"
    assert schema_errors(rule)


@pytest.mark.parametrize("stack", SHIPPED)
def test_each_kustomization_lists_its_files_and_overlay_points(stack: str) -> None:
    plan, rendered = exported(stack)
    files = documents(rendered)
    base = files[PurePosixPath("kustomization.yaml")][0]
    monitoring = files[PurePosixPath("monitoring/kustomization.yaml")][0]
    on_disk = {str(path) for path in files if path.name != "kustomization.yaml"}
    listed = set(base["resources"]) | {f"monitoring/{r}" for r in monitoring["resources"]}
    assert listed == on_disk
    assert base["namespace"] == monitoring["namespace"]
    workloads = [o for o in cluster_objects(rendered) if o["kind"] in ("StatefulSet", "Deployment")]
    assert {r["name"] for r in base["replicas"]} == {o["metadata"]["name"] for o in workloads}
    images = {f"{i['name']}:{i['newTag']}" for i in base["images"]}
    assert images == set(_container_field(workloads, "image"))
    assert {e.name for e in plan.engines} <= {o["metadata"]["name"] for o in workloads}


def _containers(workloads: list[Obj]) -> Iterator[Obj]:
    for workload in workloads:
        spec = workload["spec"]["template"]["spec"]
        yield from (*spec.get("initContainers", ()), *spec["containers"])


def _container_field(workloads: list[Obj], field: str) -> Iterator[Any]:
    return (container[field] for container in _containers(workloads))


def _workload(rendered: RenderedStack, name: str) -> Obj:
    return next(
        o
        for o in cluster_objects(rendered)
        if o["kind"] in ("StatefulSet", "Deployment") and o["metadata"]["name"] == name
    )


def _env(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_a_nixl_engine_binds_its_side_channel_at_its_pod_ip_beside_its_own_server() -> None:
    _, rendered = exported("xpyd-mp")
    spec = _workload(rendered, "prefill-0")["spec"]["template"]["spec"]
    engine, (server,) = spec["containers"][0], spec["initContainers"]
    env = _env(engine)
    assert engine["env"][0] == {
        "name": "POD_IP",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
    }
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$(POD_IP)"
    assert server["name"] == "lmcache-prefill-0"
    assert server["restartPolicy"] == "Always"  # a native sidecar
    assert "startupProbe" in server  # the engine starts once its server answers
    assert spec["shareProcessNamespace"] is True  # CUDA IPC between them
    assert env["UCX_PROTO_INFO"] == "y"


def test_a_push_engine_is_named_by_its_pod_for_nixl() -> None:
    """Under push an engine keeps its NIXL engine id across restarts (vllm-router keeps a
    prefiller's push identity): in a pod, the pod's name, kept across its containers'
    restarts and its own for each replica; Kubernetes expands it in the argument."""
    workspace = Workspace(Path(__file__).resolve().parents[2])
    plan = pod_plan(workspace, "xpyd-mp", "nixl.transfer=push")
    rendered = render_stack(plan, workspace)
    engine = _workload(rendered, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    assert _env(engine)["POD_NAME"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
    }
    config = engine["args"][engine["args"].index("--kv-transfer-config") + 1]
    assert json.loads(config)["engine_id"] == "$(POD_NAME)"
    pulled = _workload(exported("xpyd-mp")[1], "decode-0")["spec"]["template"]["spec"]
    pulled_args = pulled["containers"][0]["args"]
    assert "engine_id" not in json.loads(pulled_args[pulled_args.index("--kv-transfer-config") + 1])


def test_gpu_engines_ask_for_their_tp_size_and_rdma_only_across_nodes() -> None:
    _, tp8 = exported("xpyd-tp8")
    resources = _workload(tp8, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    assert resources["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert _env(resources)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    _, one_node = exported("xpyd-mp")
    limits = _workload(one_node, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    assert limits["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_lmcache_pd_configs_are_config_maps_mounted_where_lmcache_reads_them() -> None:
    _, rendered = exported("cpu-lmcache-pd")
    maps = {o["metadata"]["name"]: o for o in cluster_objects(rendered) if o["kind"] == "ConfigMap"}
    config = yaml.safe_load(maps["lmcache-decode-0"]["data"]["decode-0.yaml"])
    assert config["pd_role"] == "receiver"
    container = _workload(rendered, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    mounted = {m["name"]: m for m in container["volumeMounts"]}["lmcache-decode-0"]
    assert mounted["mountPath"] == _env(container)["LMCACHE_CONFIG_FILE"]


def test_probes_mean_what_the_workflow_waits_for() -> None:
    plan, rendered = exported("xpyd")
    container = _workload(rendered, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    assert container["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["startupProbe"]["failureThreshold"] * 10 >= 900  # the GPU start period
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    # An lmcache-pd decoder is ready once it serves and its KV receive ports take connections
    # (LMCache that cannot bind them says nothing): compose's healthcheck, as an exec.
    decoder = next(e for e in plan.decode if e.name == "decode-0")
    sockets = topology_of(plan).engine_listening(decoder)
    assert sockets
    readiness = container["readinessProbe"]["exec"]["command"]
    assert readiness == list(python_check(decoder.http_port, "/v1/models", sockets))
    prefiller = _workload(rendered, "prefill-0")["spec"]["template"]["spec"]["containers"][0]
    assert prefiller["readinessProbe"]["httpGet"]["path"] == "/v1/models"


def test_the_readiness_check_fails_while_one_socket_is_closed() -> None:
    """The check itself, run for real: a serving page and a listening socket pass; the same
    with one socket closed fails."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    listener = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port, open_port = server.server_address[1], listener.getsockname()[1]
        ready = python_check(port, "/v1/models", [("127.0.0.1", open_port)])
        assert subprocess.run(ready, capture_output=True, check=False).returncode == 0
        one_closed = [("127.0.0.1", open_port), ("127.0.0.1", closed_port)]
        check = python_check(port, "/v1/models", one_closed)
        assert subprocess.run(check, capture_output=True, check=False).returncode != 0
    finally:
        server.shutdown()
        server.server_close()
        listener.close()


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_the_hf_token_is_only_ever_a_secret_reference(workspace: Workspace) -> None:
    for stack in ("xpyd", "xpyd-tp8"):  # token from the environment, from a file
        _, rendered = exported(stack)
        text = "".join(rendered.files.values())
        assert "kind: Secret\n" not in text
        spec = _workload(rendered, "prefill-0")["spec"]["template"]["spec"]
        token = {v["name"]: v for v in spec["volumes"]}["hf-token"]
        assert token["secret"]["secretName"] == "hf-token"


def test_the_alert_rules_and_dashboard_are_observes_own() -> None:
    plan, rendered = exported("xpyd")
    files = documents(rendered)
    (rule,) = files[PurePosixPath("monitoring/prometheusrule.yaml")]
    assert rule["spec"] == rules_document(plan)
    (dashboard,) = files[PurePosixPath("monitoring/dashboards.yaml")]
    assert dashboard["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert json.loads(next(iter(dashboard["data"].values())))["title"]


def test_dollar_signs_reach_the_container_as_written(workspace: Workspace) -> None:
    plan = pod_plan(workspace, "cpu-1p1d", "decode.extra_args=['--x', '$(HOME)$$']")
    rendered = render_stack(plan, workspace)
    args = _workload(rendered, "decode-0")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--x", "$$(HOME)$$$$"]


def test_render_writes_kubernetes_beside_compose_and_never_through_a_link(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = render_stack(pod_plan(workspace, "cpu-1p1d"), workspace)
    written = write_rendered(rendered, tmp_path)
    assert tmp_path / "kubernetes/cpu-1p1d/kustomization.yaml" in written
    assert not (tmp_path / "compose").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    (linked / "kubernetes").mkdir(parents=True)
    (linked / "kubernetes/cpu-1p1d").symlink_to(elsewhere)
    with pytest.raises(RenderError, match="symbolic link"):
        write_rendered(rendered, linked)
    assert list(elsewhere.iterdir()) == []


def _watches(container: Obj) -> dict[str, list[str]]:
    """The supervisor's watch options in a container's args ({} when it runs bare)."""
    args: list[str] = container["args"]
    if "/opt/xpyd/supervise.py" not in args:
        return {}
    head = args[: args.index("--")]
    found: dict[str, list[str]] = {}
    for option, value in itertools.pairwise(head):
        if option.startswith("--"):
            found.setdefault(option, []).append(value)
    return found


def test_the_supervisors_watches_run_in_the_pods_with_this_pods_pages_at_loopback() -> None:
    """An engine whose server lost it, and a GPU server whose engine died (it maps that KV),
    end as crashes and the kubelet restarts them; a page in the same pod is read at loopback,
    since the Service's name would also reach a scaled StatefulSet's other replicas."""
    _, rendered = exported("xpyd-1gpu")
    spec = _workload(rendered, "prefill-0")["spec"]["template"]["spec"]
    engine, (server,) = spec["containers"][0], spec["initContainers"]
    assert _watches(engine) == {"--needs-registered": ["http://127.0.0.1:8090/status"]}
    assert _watches(server) == {"--ends-with": ["http://127.0.0.1:7100/metrics"]}
    assert "--restarts" not in engine["args"]  # once: restarts are the kubelet's
    # The pusher maps its decoder over CUDA IPC under compose; pods move KV over the network.
    assert "--ends-with" not in _watches(engine)
    decode = _workload(rendered, "decode-0")["spec"]["template"]["spec"]
    # Its own engine, at the port every engine pod listens on (vllm-router discovers pods).
    assert _watches(decode["initContainers"][0]) == {
        "--ends-with": ["http://127.0.0.1:7100/metrics"]
    }


def test_a_peer_in_another_pod_stays_watched_for_its_new_start() -> None:
    """An lmcache-pd prefiller keeps state about its decoders (stale after their restart): that
    watch crosses pods by Service name; the GPU mapping it also stands for does not."""
    _, rendered = exported("xpyd")
    prefiller = _workload(rendered, "prefill-0")["spec"]["template"]["spec"]["containers"][0]
    assert _watches(prefiller) == {
        "--restarts-with": ["http://decode-0:7200/metrics", "http://decode-1:7201/metrics"]
    }
    _, cpu = exported("cpu-1p1d")  # no watch at all: the command as the image runs it
    router = _workload(cpu, "router")["spec"]["template"]["spec"]["containers"][0]
    assert _watches(router) == {}


@pytest.mark.parametrize(
    ("stack", "receiver"), [("cpu-1p1d", "otlp-receiver"), ("xpyd-mp", "otel-collector")]
)  # ours where the Collector's image cannot come (cpu), the Collector on GPUs
def test_traces_go_to_a_receiver_the_export_runs(
    workspace: Workspace, stack: str, receiver: str
) -> None:
    """observe.traces: the engines send to a Service of the export, backed by a Deployment of
    the receiver (its PodMonitor had matched no pod: the export failed its own checks)."""
    plan = pod_plan(workspace, stack, "observe.enabled=true", "observe.traces=true")
    rendered = render_stack(plan, workspace)
    objects = cluster_objects(rendered)
    assert [error for obj in objects for error in schema_errors(obj)] == []
    gpus = pod_gpus(plan)
    assert check_objects(objects, gpus) == []
    deployment = _workload(rendered, receiver)
    assert deployment["kind"] == "Deployment"
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    engine = _workload(rendered, "decode-0")["spec"]["template"]["spec"]["containers"][0]
    args = [*engine.get("command", []), *engine.get("args", [])]
    endpoint = args[args.index("--otlp-traces-endpoint") + 1]
    host, port = endpoint.removeprefix("grpc://").split(":")
    assert host == receiver
    assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert int(port) in {p["containerPort"] for p in container["ports"]}
