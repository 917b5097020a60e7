"""A pod-network plan and its deployment -> the Kubernetes objects of a stack, as data.

One StatefulSet per planned engine (one replica: its pod is the engine, with its own ports, config
and sidecar), a LeaderWorkerSet per engine over several nodes (``<role>.nodes``: a leader pod
and its followers' pods, each with its own sidecar), a Deployment for the router and for each
stack-wide sidecar (the P2P coordinator). Every name a service is reached by on the compose
bridge is a headless Service here that publishes not-ready pods too: a peer dials an engine's
sockets while it starts (its `lmcache server`, its KV receiver). A headless Service per role
lists the role's pods; the router's Service is the stack's front door. Services the cluster
brings itself (Prometheus, Grafana: see monitoring.py) and one-off runs (bench) are left out;
the trace receiver (observe.traces) is a Deployment; the smoke verdict is a Job (verdict.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from generator.plan import Plan
from generator.plan.observe import OTEL_SERVICE, RECEIVER_SERVICE
from generator.serializers.kubernetes.discovery import discovery_objects, router_identity
from generator.serializers.kubernetes.naming import (
    INSTANCE_LABEL,
    ROLE_LABEL,
    STACK_LABEL,
    namespace_of,
    pod_labels,
    port_name,
)
from generator.serializers.kubernetes.pods import PodOptions, PodPart, pod_spec
from generator.serializers.kubernetes.templates import (
    DS_API,
    DS_KIND,
    ENGINE_SET,
    LWS_API,
    LWS_KIND,
    lws_name,
    pod_templates,
    worker_instance,
    worker_role,
)
from generator.serializers.kubernetes.verdict import verdict_objects
from generator.serializers.yaml_text import dump_yaml
from generator.services.model import ConfigFile, Deployment, Service, Volume

__all__ = ["Pod", "stack_objects", "stack_pods"]

_MODEL_CACHE_SIZE = "200Gi"  # a few models' weights; an overlay's to change


@dataclass(frozen=True)
class Pod:
    """What one pod runs: its main service, its sidecars, and what they share."""

    kind: str  # StatefulSet (an engine), LeaderWorkerSet (one over several nodes), Deployment
    main: PodPart
    sidecars: tuple[PodPart, ...]
    volumes: tuple[Volume, ...]
    configs: tuple[ConfigFile, ...]
    # A LeaderWorkerSet's: the worker template (its first follower's pod: each follower runs
    # it, told its rank by LWS) and the nodes of the group, the leader's pod included.
    workers: Pod | None = None
    nodes: int = 1

    @property
    def name(self) -> str:
        return self.main.service.name


def stack_pods(plan: Plan, deployment: Deployment) -> list[Pod]:
    """The pods, engines first (in plan order), then stack-wide sidecars and the router."""
    services = {s.name: (s, host) for host in deployment.hosts for s in host.services}
    own = {s.service: s.engine for s in plan.sidecars if s.engine is not None}
    named = _port_names(plan)

    def pod(kind: str, main: str) -> Pod:
        service, host = services[main]
        sidecars = [services[name][0] for name, engine in own.items() if engine == main]
        parts = [PodPart.of(s, named.get(s.name, ())) for s in (*sidecars, service)]
        configs = tuple(c for part in parts for c in part.service.configs)
        return Pod(kind, parts[-1], tuple(parts[:-1]), host.volumes, configs)

    pods: list[Pod] = []
    for engine in plan.engines:
        followers = plan.nodes_of(engine)[1:]
        if not followers:
            pods.append(pod("StatefulSet", engine.name))
            continue
        leader, workers = pod(LWS_KIND, engine.name), pod(LWS_KIND, followers[0].name)
        configs = leader.configs + workers.configs
        pods.append(replace(leader, configs=configs, workers=workers, nodes=engine.nodes))
    mains = [s.service for s in plan.sidecars if s.engine is None] + [plan.router.service]
    # Where the engines send their traces (observe.traces): the cluster has no receiver of
    # ours, and the engines name it; Prometheus and Grafana are the cluster's own.
    mains += [name for name in (OTEL_SERVICE, RECEIVER_SERVICE) if name in services]
    return pods + [pod("Deployment", main) for main in mains]


def _port_names(plan: Plan) -> dict[str, list[tuple[str, int]]]:
    named: dict[str, list[tuple[str, int]]] = {}
    for use in plan.ports:
        named.setdefault(use.owner, []).append((port_name(use.purpose, use.port), use.port))
    return named


def stack_objects(
    plan: Plan, deployment: Deployment, options: PodOptions
) -> dict[PurePosixPath, list[dict[str, Any]]]:
    """Each file of the export's base and its objects (``kustomization.yaml`` aside)."""
    pods = stack_pods(plan, deployment)
    engine_pods = [p for p in pods if _engine(p)]
    workloads = {p.name: _workload(plan, p, options) for p in pods if not _engine(p)}
    router = plan.router.service
    if plan.kubernetes is not None and plan.kubernetes.engines == "disaggregatedset":
        engines = [_disaggregated_set(plan, engine_pods, options)]
    else:
        engines = [_workload(plan, p, options) for p in engine_pods]
    shared = [workload for name, workload in workloads.items() if name != router]
    files = {
        PurePosixPath("namespace.yaml"): [_namespace(plan.stack)],
        PurePosixPath("configmaps.yaml"): [_config_map(c) for p in pods for c in p.configs],
        PurePosixPath("services.yaml"): list(_services(plan, pods)),
        PurePosixPath("engines.yaml"): engines,
        PurePosixPath("shared.yaml"): shared,
        PurePosixPath("router.yaml"): [workloads[router]],
        PurePosixPath("rbac.yaml"): discovery_objects(plan),
        PurePosixPath("verdict.yaml"): verdict_objects(plan, deployment),
    }
    if _claims([*engines, *workloads.values()], options.model_cache_claim):
        files[PurePosixPath("storage.yaml")] = [_model_cache_claim(options)]
    return {path: objects for path, objects in files.items() if objects}


def _engine(pod: Pod) -> bool:
    return pod.kind in ("StatefulSet", LWS_KIND)


def _meta(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "labels": labels} if labels else {"name": name}


def _namespace(stack: str) -> dict[str, Any]:
    labels = {STACK_LABEL: stack, "app.kubernetes.io/name": "xpyd"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace_of(stack), labels)}


def _config_map(config: ConfigFile) -> dict[str, Any]:
    text = config.text if config.text is not None else dump_yaml(config.data)
    data = {PurePosixPath(config.path).name: text}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(config.name), "data": data}


def _selector(stack: str, instance: str) -> dict[str, str]:
    return {STACK_LABEL: stack, INSTANCE_LABEL: instance}


def _workload(plan: Plan, pod: Pod, options: PodOptions) -> dict[str, Any]:
    service = pod.main.service
    labels = pod_labels(plan.stack, service.role, pod.name, engine=_engine(pod))
    if pod.workers is not None:
        return _leader_worker_set(plan, pod, labels, options)
    spec = pod_spec(pod.main, pod.sidecars, pod.volumes, options)
    if pod.name == plan.router.service:
        spec |= router_identity(plan)
    template = {"metadata": {"labels": labels}, "spec": spec}
    workload: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": _selector(plan.stack, pod.name)},
    }
    if _engine(pod):
        workload |= {"serviceName": pod.name, "podManagementPolicy": "Parallel"}
    else:
        workload["strategy"] = {"type": "Recreate"}  # one router: never two answering at once
    apps = {"apiVersion": "apps/v1", "kind": pod.kind, "metadata": _meta(pod.name, labels)}
    return apps | {"spec": workload | {"template": template}}


def _leader_worker_set(
    plan: Plan, pod: Pod, labels: dict[str, str], options: PodOptions
) -> dict[str, Any]:
    meta = _meta(lws_name(pod.name), labels)
    spec = _group_spec(plan, pod, labels, options)
    return {"apiVersion": LWS_API, "kind": LWS_KIND, "metadata": meta, "spec": spec}


def _group_spec(
    plan: Plan, pod: Pod, labels: dict[str, str], options: PodOptions
) -> dict[str, Any]:
    """An engine as a LeaderWorkerSet's spec, one group. Over several nodes: a leader (vLLM's
    API, node rank 0) and its followers, started together (the leader waits for its followers
    at its rendezvous, so the workers are created with the leader, not once it is ready) and
    recreated as a whole when any of its containers restarts: a new node cannot join the
    others' running group (docs/facts.md, "One engine over two nodes"). On one node: the
    leader alone, whose containers restart in place, as a StatefulSet's do."""
    leader = {"metadata": {"labels": labels}, "spec": _engine_pod_spec(pod, options)}
    if pod.workers is None:  # LWS makes the leader from the worker template when it has none
        group = {"size": 1, "restartPolicy": "None", "workerTemplate": leader}
        return {"replicas": 1, "leaderWorkerTemplate": group}
    role = pod.main.service.role
    worker_labels = pod_labels(plan.stack, worker_role(role), worker_instance(pod.name))
    worker = {"metadata": {"labels": worker_labels}, "spec": _engine_pod_spec(pod.workers, options)}
    group = {
        "size": pod.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": leader,
        "workerTemplate": worker,
    }
    return {"replicas": 1, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": group}


def _engine_pod_spec(pod: Pod, options: PodOptions) -> dict[str, Any]:
    return pod_spec(pod.main, pod.sidecars, pod.volumes, options)


def _disaggregated_set(plan: Plan, pods: Sequence[Pod], options: PodOptions) -> dict[str, Any]:
    """Every engine as a role of one DisaggregatedSet (kubernetes.engines), which rolls them
    out together: a role per engine, not per side, since each engine has its own ports,
    configs and Services, as its StatefulSet would."""
    roles = []
    for pod in pods:
        labels = pod_labels(plan.stack, pod.main.service.role, pod.name, engine=True)
        roles.append({"name": pod.name, "spec": _group_spec(plan, pod, labels, options)})
    meta = _meta(ENGINE_SET, {STACK_LABEL: plan.stack})
    return {"apiVersion": DS_API, "kind": DS_KIND, "metadata": meta, "spec": {"roles": roles}}


def _services(plan: Plan, pods: Sequence[Pod]) -> Iterator[dict[str, Any]]:
    """Each service's own name (headless: its pod's address), each role's, the router's."""
    for pod in pods:
        front = pod.main.service.name == plan.router.service
        for part in (*pod.sidecars, pod.main):
            yield _service(plan, part, pod.name, headless=not front)
    for role in sorted({e.role.value for e in plan.engines}):
        engine = next(e for e in plan.engines if e.role.value == role)
        port = {"name": "http", "port": engine.http_port, "targetPort": "http"}
        selector = {STACK_LABEL: plan.stack, ROLE_LABEL: role}
        labels = {STACK_LABEL: plan.stack, ROLE_LABEL: role}
        spec = {"clusterIP": "None", "selector": selector, "ports": [port]}
        yield {"apiVersion": "v1", "kind": "Service", "metadata": _meta(role, labels)} | {
            "spec": spec
        }


def _service(plan: Plan, part: PodPart, pod: str, *, headless: bool) -> dict[str, Any]:
    service: Service = part.service
    ports = [{"name": name, "port": port, "targetPort": name} for name, port in part.ports]
    spec: dict[str, Any] = {"selector": _selector(plan.stack, pod), "ports": ports}
    if headless:
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    labels = {STACK_LABEL: plan.stack, ROLE_LABEL: service.role}
    name = service.hostname or service.name
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, labels), "spec": spec}


def _claims(workloads: Iterable[dict[str, Any]], claim: str) -> bool:
    return any(
        volume.get("persistentVolumeClaim", {}).get("claimName") == claim
        for workload in workloads
        for _, template in pod_templates(workload)
        for volume in template["spec"]["volumes"]
    )


def _model_cache_claim(options: PodOptions) -> dict[str, Any]:
    """Shared by every engine pod of the stack, which may run on different nodes."""
    spec = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": _MODEL_CACHE_SIZE}},
    }
    meta = _meta(options.model_cache_claim)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
