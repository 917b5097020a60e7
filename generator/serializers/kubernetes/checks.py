"""Our own invariants of an export, for what the schemas do not catch: each check reads the
rendered objects (dicts, as they are written) and returns its problems, one line each.

- every Service, workload and PodMonitor selector matches a pod template of the export;
- every port a probe, Service or PodMonitor names is declared by a container of that pod, and
  no two containers of a pod declare one port (number or name);
- each NIXL side channel (one per TP rank) has its own port, and vLLM is told the first;
- names are what Kubernetes takes (Services: DNS labels; ports: IANA service names);
- every ConfigMap and claim a pod mounts is in the export, every Secret is one the docs tell
  the user to create, and no object carries a secret's value;
- each engine pod asks for exactly its TP ranks' GPUs (all of them, or its node's share of an
  engine over several nodes), and its CUDA_VISIBLE_DEVICES counts as many;
- a router that discovers pods (vllm-router's ``--service-discovery``) runs in P/D mode in its
  own namespace, its prefill and decode selectors pick every engine pod once and by its role,
  each picked pod's vLLM listens on ``--service-discovery-port``, and its pod's ServiceAccount
  is bound to a Role that may get, list and watch pods.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from generator.serializers.kubernetes.naming import (
    INSTANCE_LABEL,
    ROLE_LABEL,
    is_dns_label,
    is_port_name,
)
from generator.serializers.kubernetes.pods import (
    ENV_SECRET,
    GPU_RESOURCE,
    HF_TOKEN_ENV_SECRET,
    HF_TOKEN_SECRET,
)
from generator.serializers.kubernetes.templates import WORKLOAD_KINDS, pod_templates

__all__ = ["CHECKS", "Check", "check_objects"]

_USER_SECRETS: Final = (HF_TOKEN_SECRET, HF_TOKEN_ENV_SECRET, ENV_SECRET)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY", re.IGNORECASE)
_WHERE = re.compile(r"_(PATH|FILE|DIR)$")
_SIDE_CHANNEL = re.compile(r"nixl-side(?:-(\d+))?")
_SIDE_CHANNEL_ENV: Final = "VLLM_NIXL_SIDE_CHANNEL_PORT"
_CONFIG_MAP_MAX_BYTES: Final = 1 << 20

Obj = dict[str, Any]


@dataclass(frozen=True)
class PodView:
    """A workload's pod template, as the checks read it."""

    # a LeaderWorkerSet's templates: "<name>/leader", "<name>/worker"; a DisaggregatedSet's:
    # "<name>/<role>/leader"
    workload: str
    labels: dict[str, str]
    containers: list[Obj]  # init containers (sidecars) first
    volumes: list[Obj]
    engine: bool = False  # an engine's vLLM that serves the API (a follower's serves none)

    def ports(self) -> list[Obj]:
        return [port for c in self.containers for port in c.get("ports", [])]

    def has_port(self, port: int | str) -> bool:
        key = "name" if isinstance(port, str) else "containerPort"
        return any(declared.get(key) == port for declared in self.ports())


Check = Callable[[Sequence[Obj], Mapping[str, int]], Iterator[str]]


def check_objects(objects: Sequence[Obj], gpus: Mapping[str, int]) -> list[str]:
    """``gpus``: the GPUs each engine pod must ask for (its TP ranks on its node), by the
    pod's instance label."""
    return [problem for check in CHECKS for problem in check(objects, gpus)]


def _pods(objects: Sequence[Obj]) -> list[PodView]:
    views = []
    for obj in objects:
        for which, template in pod_templates(obj):
            spec = template["spec"]
            containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
            labels = template.get("metadata", {}).get("labels", {})
            name = obj["metadata"]["name"] + ("" if which == "pod" else f"/{which}")
            engine = obj["kind"] == "StatefulSet" or which.endswith("leader")
            views.append(PodView(name, labels, containers, spec["volumes"], engine))
    return views


def _selected(selector: Mapping[str, str], pods: Sequence[PodView]) -> list[PodView]:
    if not selector:
        return []
    return [pod for pod in pods if all(pod.labels.get(k) == v for k, v in selector.items())]


def _where(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def _selectors(obj: Obj) -> Mapping[str, str] | None:
    kind = obj.get("kind")
    if kind == "Service":
        return dict(obj["spec"].get("selector", {}))
    if kind in (*WORKLOAD_KINDS, "PodMonitor") and "selector" in obj["spec"]:
        # a Job's is made for it; a LeaderWorkerSet has none (it labels its pods itself)
        return dict(obj["spec"]["selector"].get("matchLabels", {}))
    return None


def selectors_match(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    pods = _pods(objects)
    for obj in objects:
        selector = _selectors(obj)
        if selector is not None and not _selected(selector, pods):
            yield f"{_where(obj)}: its selector {selector} matches no pod template"
        for _, template in pod_templates(obj):
            labels = template.get("metadata", {}).get("labels", {})
            if any(labels.get(k) != v for k, v in (selector or {}).items()):
                yield f"{_where(obj)}: its selector does not match its own pod template"


def ports_declared(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    pods = _pods(objects)
    for pod in pods:
        yield from _probe_ports(pod)
        yield from _clashes(pod)
    for obj in objects:
        for port in _referred_ports(obj):
            for pod in _selected(_selectors(obj) or {}, pods):
                if not pod.has_port(port):
                    yield f"{_where(obj)}: port {port!r} is not declared in {pod.workload}'s pod"


def _referred_ports(obj: Obj) -> list[int | str]:
    if obj.get("kind") == "Service":
        return [port.get("targetPort", port["port"]) for port in obj["spec"]["ports"]]
    if obj.get("kind") == "PodMonitor":
        return [endpoint["port"] for endpoint in obj["spec"]["podMetricsEndpoints"]]
    return []


def _probe_ports(pod: PodView) -> Iterator[str]:
    for container in pod.containers:
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            http = container.get(probe, {}).get("httpGet")
            if http is not None and not pod.has_port(http["port"]):
                yield (
                    f"{pod.workload}/{container['name']}: {probe} asks port {http['port']!r}, "
                    "which no container of the pod declares"
                )


def _clashes(pod: PodView) -> Iterator[str]:
    for key in ("containerPort", "name"):
        counts = Counter(port[key] for port in pod.ports())
        for value, count in sorted(counts.items(), key=str):
            if count > 1:
                yield f"{pod.workload}: {count} container ports share {key} {value!r}"


def side_channels(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    for pod in _pods(objects):
        for container in pod.containers:
            yield from _side_channel_ports(pod, container)


def _side_channel_ports(pod: PodView, container: Obj) -> Iterator[str]:
    ranks = {
        int(match.group(1) or 0): port["containerPort"]
        for port in container.get("ports", [])
        if (match := _SIDE_CHANNEL.fullmatch(port["name"])) is not None
    }
    where = f"{pod.workload}/{container['name']}"
    if len(set(ranks.values())) != len(ranks):
        yield f"{where}: TP ranks share a NIXL side-channel port ({ranks})"
    if ranks and sorted(ranks) != list(range(len(ranks))):
        yield f"{where}: NIXL side-channel ranks {sorted(ranks)} are not 0..{len(ranks) - 1}"
    told = _env_value(container, _SIDE_CHANNEL_ENV)
    if ranks and told != str(ranks.get(0)):
        yield f"{where}: {_SIDE_CHANNEL_ENV} is {told}, not rank 0's port {ranks.get(0)}"


def _env_value(container: Obj, name: str) -> str | None:
    return next((e.get("value") for e in container.get("env", []) if e["name"] == name), None)


def names_valid(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    for obj in objects:
        if obj.get("kind") == "Service" and not is_dns_label(obj["metadata"]["name"]):
            yield f"{_where(obj)}: the name is not a DNS label (lowercase, a letter first)"
    for pod in _pods(objects):
        for port in pod.ports():
            if not is_port_name(port["name"]):
                yield f"{pod.workload}: port name {port['name']!r} is not an IANA service name"


def references_exist(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    present = {(obj.get("kind"), obj["metadata"]["name"]) for obj in objects}
    for pod in _pods(objects):
        for volume in pod.volumes:
            yield from _volume_reference(pod, volume, present)
        for container in pod.containers:
            for name in _secret_refs(container):
                if name not in _USER_SECRETS:
                    yield f"{pod.workload}: refers to Secret {name!r}, which no doc names"


def _volume_reference(pod: PodView, volume: Obj, present: set[tuple[Any, Any]]) -> Iterator[str]:
    if "configMap" in volume and ("ConfigMap", volume["configMap"]["name"]) not in present:
        yield f"{pod.workload}: mounts ConfigMap {volume['configMap']['name']!r}, not exported"
    claim = volume.get("persistentVolumeClaim", {}).get("claimName")
    if claim is not None and ("PersistentVolumeClaim", claim) not in present:
        yield f"{pod.workload}: mounts claim {claim!r}, not exported"
    secret = volume.get("secret", {}).get("secretName")
    if secret is not None and secret not in _USER_SECRETS:
        yield f"{pod.workload}: mounts Secret {secret!r}, which no doc names"


def _secret_refs(container: Obj) -> Iterator[str]:
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            yield ref["name"]
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            yield source["secretRef"]["name"]


def no_secret_values(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    for obj in objects:
        if obj.get("kind") == "Secret" and (obj.get("data") or obj.get("stringData")):
            yield f"{_where(obj)}: carries secret values (the user creates Secrets)"
    for pod in _pods(objects):
        for container in pod.containers:
            for entry in container.get("env", []):
                if "value" in entry and _holds_secret(entry["name"]):
                    yield f"{pod.workload}: env {entry['name']} holds a value, not a reference"


def _holds_secret(name: str) -> bool:
    """A name that says its value is a secret (HF_TOKEN); one that names where the secret is
    (HF_TOKEN_PATH) holds a path."""
    return _SECRET_NAME.search(name) is not None and _WHERE.search(name) is None


def gpu_counts(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    for pod in _pods(objects):
        asked = [_gpus_of(container) for container in pod.containers]
        total = sum(count for count, _ in asked)
        ranks = gpus.get(pod.labels.get(INSTANCE_LABEL, ""))
        if ranks is not None and total != ranks:
            yield f"{pod.workload}: asks for {total} GPUs, its TP ranks here are {ranks}"
        for container, (count, problem) in zip(pod.containers, asked, strict=True):
            if problem:
                yield f"{pod.workload}/{container['name']}: {problem}"
            visible = _env_value(container, "CUDA_VISIBLE_DEVICES")
            if count and (visible is None or len(visible.split(",")) != count):
                yield (
                    f"{pod.workload}/{container['name']}: CUDA_VISIBLE_DEVICES {visible!r} "
                    f"does not name its {count} GPUs"
                )


def _gpus_of(container: Obj) -> tuple[int, str | None]:
    resources = container.get("resources", {})
    requests = resources.get("requests", {}).get(GPU_RESOURCE)
    limits = resources.get("limits", {}).get(GPU_RESOURCE)
    if requests != limits:
        return int(limits or 0), f"GPU requests {requests} differ from limits {limits}"
    return int(limits or 0), None


def config_maps_fit(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    """The API server refuses a ConfigMap over 1 MiB (the plan of a very large stack)."""
    for obj in objects:
        if obj.get("kind") == "ConfigMap":
            size = sum(len(k) + len(v.encode()) for k, v in obj.get("data", {}).items())
            if size > _CONFIG_MAP_MAX_BYTES:
                yield f"{_where(obj)}: {size} bytes, over Kubernetes' 1 MiB for a ConfigMap"


# vllm-router 0.1.17's flags (py_src/vllm_router/router_args.py) and what its watcher needs.
_DISCOVERY = "--service-discovery"
_SIDES: Final = {"prefill": "--prefill-selector", "decode": "--decode-selector"}
_ANY_SIDE: Final = "--selector"  # regular mode (colocated): every engine, whatever its role
_WATCH_VERBS: Final = frozenset({"get", "list", "watch"})


def pod_discovery(objects: Sequence[Obj], gpus: Mapping[str, int]) -> Iterator[str]:
    pods = _pods(objects)
    for obj in objects:
        for _, template in pod_templates(obj):
            spec = template["spec"]
            for container in spec.get("containers", []):
                args = [str(arg) for arg in container.get("args", [])]
                if _DISCOVERY in args:
                    where = f"{_where(obj)}/{container['name']}"
                    yield from _discovery_mode(where, args)
                    yield from _discovered_pods(where, args, pods)
                    yield from _may_watch_pods(_where(obj), spec, objects)


def _flag_values(args: Sequence[str], flag: str) -> list[str] | None:
    """The values after ``flag`` up to the next flag; None where it is not given."""
    if flag not in args:
        return None
    values = []
    for arg in args[args.index(flag) + 1 :]:
        if arg.startswith("--"):
            break
        values.append(arg)
    return values


def _discovery_mode(where: str, args: Sequence[str]) -> Iterator[str]:
    if "--vllm-pd-disaggregation" in args:
        if _ANY_SIDE in args:
            yield f"{where}: discovers pods in P/D mode, where its {_ANY_SIDE} is unused"
    elif any(flag in args for flag in _SIDES.values()):
        yield f"{where}: discovers pods without --vllm-pd-disaggregation (its P/D selectors unused)"
    if not _flag_values(args, "--service-discovery-namespace"):
        yield f"{where}: discovers pods in every namespace, which its Role cannot grant"


def _discovered_pods(where: str, args: Sequence[str], pods: Sequence[PodView]) -> Iterator[str]:
    port = _flag_values(args, "--service-discovery-port")
    if not port or not port[0].isdigit():
        yield f"{where}: --service-discovery-port is not given (vllm-router's default is 80)"
        return
    found: Counter[str] = Counter()
    sides = _SIDES if "--vllm-pd-disaggregation" in args else {None: _ANY_SIDE}
    for side, flag in sides.items():
        selector = dict(v.split("=", 1) for v in _flag_values(args, flag) or [] if "=" in v)
        picked = _selected(selector, pods)
        if not picked:
            yield f"{where}: its {flag} {selector} matches no pod template"
        for pod in picked:
            found[pod.workload] += 1
            yield from _discovered_pod(where, pod, side, int(port[0]))
    for pod in pods:  # every engine, once: a pod left out is never routed to
        if pod.engine and found[pod.workload] != 1:
            yield f"{where}: engine {pod.workload} is picked by {found[pod.workload]} selectors"


def _discovered_pod(where: str, pod: PodView, side: str | None, port: int) -> Iterator[str]:
    """A picked pod is an engine (of that side, in P/D mode) whose vLLM listens at the port."""
    role = pod.labels.get(ROLE_LABEL)
    if not pod.engine or (side is not None and role != side):
        yield f"{where}: its {side or 'engine'} selector picks {pod.workload}, a {role}"
    http = [p["containerPort"] for p in pod.ports() if p.get("name") == "http"]
    if http != [port]:
        yield f"{where}: reaches {pod.workload} at port {port}; its vLLM listens on {http}"


def _may_watch_pods(where: str, spec: Obj, objects: Sequence[Obj]) -> Iterator[str]:
    account = spec.get("serviceAccountName")
    present = {(o.get("kind"), o["metadata"]["name"]) for o in objects}
    if account is None or ("ServiceAccount", account) not in present:
        yield f"{where}: discovers pods but runs as no exported ServiceAccount ({account})"
        return
    if spec.get("automountServiceAccountToken") is False:
        yield f"{where}: discovers pods without its ServiceAccount's token mounted"
    namespaces = {o["metadata"]["name"] for o in objects if o.get("kind") == "Namespace"}
    roles = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Role"}
    bound = [
        roles.get(binding["roleRef"]["name"])
        for binding in objects
        if binding.get("kind") == "RoleBinding"
        and binding["roleRef"].get("kind") == "Role"
        and any(_names(subject, account, namespaces) for subject in binding.get("subjects", []))
    ]
    if not any(role is not None and _reads_pods(role) for role in bound):
        yield f"{where}: ServiceAccount {account} is bound to no Role that may watch pods"


def _names(subject: Obj, account: str, namespaces: set[str]) -> bool:
    """The subject is the account, in the stack's namespace (where the export has one)."""
    in_namespace = not namespaces or subject.get("namespace") in namespaces
    return (
        subject.get("kind") == "ServiceAccount" and subject.get("name") == account and in_namespace
    )


def _reads_pods(role: Obj) -> bool:
    granted: set[str] = set()
    for rule in role.get("rules", []):
        if "" in rule.get("apiGroups", []) and "pods" in rule.get("resources", []):
            granted |= set(rule.get("verbs", []))
    return granted >= _WATCH_VERBS


CHECKS: tuple[Check, ...] = (
    selectors_match,
    ports_declared,
    side_channels,
    names_valid,
    references_exist,
    no_secret_values,
    gpu_counts,
    config_maps_fit,
    pod_discovery,
)
