"""Services of the neutral model -> pod templates: one pod per engine (its own `lmcache server`
beside it as a native sidecar, an init container that keeps running), one per router or
stack-wide sidecar. Every shape of a pod lives here; the model has none.

Why the non-obvious settings are there:
- Each container's command is the image's arguments (``args``): compose's ``command`` replaces
  the image's CMD, never its entrypoint. Kubernetes restarts containers itself; a service that
  watches a peer (an engine its server's registration, a server the engine whose GPU memory
  it maps, a prefiller the decoders it keeps state about) runs once under our supervisor, whose
  watch ends it as a crash, and the kubelet starts the container again. Pods move KV over the
  network, never CUDA IPC, so a peer in another pod is watched only for a new start.
- ``POD_IP`` comes first in every container's environment (the downward API): the plan
  refers to it as ``$(POD_IP)`` where a socket must be bound at the pod's own address (NIXL's
  side channel); ``POD_NAME`` and ``POD_NAMESPACE`` follow (a push engine's NIXL id, where
  vllm-router watches pods). Every other ``$`` is written ``$$``, which Kubernetes reads as a
  literal one.
- A GPU engine's sidecar copies KV to and from the engine's GPUs over CUDA IPC: the pod shares
  one PID namespace (compose gives both the host's), and the sidecar asks the container
  toolkit for the node's GPUs by environment, since a device plugin hands a GPU to one
  container only.
- Probes mean what the workflow's waits mean: up is ``/health`` (startup, liveness), ready is
  what the service names (vLLM: ``/v1/models``). A ``preStop`` sleep keeps a stopping pod
  serving while it leaves its Services' endpoints, and the grace period covers the sleep and
  the service's own stop time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from generator.plan.models import (
    LWS_LEADER_ADDRESS_REF,
    LWS_WORKER_INDEX_REF,
    POD_IP_ENV,
    POD_IP_REF,
    POD_NAME_ENV,
    POD_NAME_REF,
    POD_NAMESPACE_ENV,
    POD_NAMESPACE_REF,
)
from generator.services.model import (
    BindMount,
    ConfigFile,
    Health,
    HttpEndpoint,
    Mount,
    NamedVolume,
    Service,
    TmpfsMount,
    Volume,
    watched_pages,
)
from generator.services.parts import START_LOCKS, python_check
from generator.supervise import LOCK_DIR_ENV, in_image_command, watch_options

__all__ = [
    "ENV_SECRET",
    "GPU_RESOURCE",
    "HF_TOKEN_ENV_SECRET",
    "HF_TOKEN_SECRET",
    "PodOptions",
    "PodPart",
    "pod_spec",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
HF_TOKEN_SECRET: Final = "hf-token"  # key hf_token: the token, mounted as a file
HF_TOKEN_ENV_SECRET: Final = "hf-token-env"  # the token as env (spec hf.token env-file)
ENV_SECRET: Final = "xpyd-secret-env"  # one key per <role>.secret_env variable
_SECRETS_DIR: Final = "/run/secrets"
_PROBE_PERIOD_S: Final = 10
_CPU_SHM_MIB: Final = 1024  # as compose gives a cpu engine
_GPU_SHM_MIB: Final = 16 * 1024  # NCCL and LMCache on GPUs (compose shares the host's)
# What the plan refers to in a container's environment: ours (the downward API) and what
# LeaderWorkerSet's controller puts there.
_REFS: Final = (
    POD_IP_REF,
    POD_NAME_REF,
    POD_NAMESPACE_REF,
    LWS_LEADER_ADDRESS_REF,
    LWS_WORKER_INDEX_REF,
)


@dataclass(frozen=True)
class PodOptions:
    """Cluster choices the plan does not make; each is also an overlay's to change."""

    rdma_resource: str = "rdma/rdma_shared_device_a"  # k8s-rdma-shared-dev-plugin's default
    drain_s: int = 15  # preStop sleep: the pod serves on while it leaves its Services
    model_cache_claim: str = "xpyd-model-cache"  # the PVC, where no host folder is given


@dataclass(frozen=True)
class PodPart:
    """One container of a pod: the service it runs and the ports it listens on."""

    service: Service
    ports: tuple[tuple[str, int], ...]  # (name, number), names unique in the pod

    @classmethod
    def of(cls, service: Service, ports: Iterable[tuple[str, int]]) -> PodPart:
        return cls(_unlocked(service), tuple(sorted(set(ports), key=lambda named: named[1])))


def _unlocked(service: Service) -> Service:
    """Without the start locks of shared GPUs: a pod's GPUs are its own (the device plugin
    gives each to one pod), so no other engine starts on them."""
    if not service.starts_alone_on:
        return service
    return replace(
        service,
        env={name: value for name, value in service.env.items() if name != LOCK_DIR_ENV},
        mounts=tuple(
            m
            for m in service.mounts
            if not (isinstance(m, NamedVolume) and m.volume == START_LOCKS)
        ),
        starts_alone_on=(),
        started_when=None,
    )


def pod_spec(
    main: PodPart,
    sidecars: Sequence[PodPart],
    volumes: Sequence[Volume],
    options: PodOptions,
) -> dict[str, Any]:
    parts = [*sidecars, main]
    grace = max(part.service.stop_grace_s for part in parts) + options.drain_s
    spec: dict[str, Any] = {}
    pod = frozenset(part.service.name for part in parts)
    if sidecars:
        spec["initContainers"] = [_sidecar(part, pod, options) for part in sidecars]
    spec["containers"] = [_main(main, pod, options)]
    if any(part.service.host_pid for part in parts) and sidecars:
        spec["shareProcessNamespace"] = True
    spec["terminationGracePeriodSeconds"] = grace
    spec["volumes"] = _volumes(parts, volumes, options)
    return spec


def _main(part: PodPart, pod: frozenset[str], options: PodOptions) -> dict[str, Any]:
    container = _container(part, pod, options, own_gpus=True)
    container["lifecycle"] = {"preStop": {"sleep": {"seconds": options.drain_s}}}
    return container


def _sidecar(part: PodPart, pod: frozenset[str], options: PodOptions) -> dict[str, Any]:
    """A native sidecar: started (its startup probe passed) before the main container, and
    kept running beside it."""
    return _container(part, pod, options, own_gpus=False) | {"restartPolicy": "Always"}


def _container(
    part: PodPart, pod: frozenset[str], options: PodOptions, *, own_gpus: bool
) -> dict[str, Any]:
    service = part.service
    container: dict[str, Any] = {
        "name": service.name,
        "image": service.image.tag,
        "imagePullPolicy": "IfNotPresent",
    }
    if service.command:
        container["args"] = [_literal(arg) for arg in _watched_command(service, pod)]
    container["env"] = _env(service, own_gpus=own_gpus)
    if service.env_files:
        container["envFrom"] = [{"secretRef": {"name": HF_TOKEN_ENV_SECRET}}]
    if part.ports:
        container["ports"] = [
            {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in part.ports
        ]
    resources = _resources(service, options, own_gpus=own_gpus)
    if resources:
        container["resources"] = {"requests": resources, "limits": resources}
    if service.capabilities:
        container["securityContext"] = {"capabilities": {"add": list(service.capabilities)}}
    if service.health is not None:
        container |= _probes(service.health, part.ports)
    container["volumeMounts"] = _mounts(service)
    return container


def _watched_command(service: Service, pod: frozenset[str]) -> list[str]:
    """The command, run once under the supervisor where it watches peers (module notes): a
    mapped peer in another pod maps nothing here, and stays watched only where the service's
    state about it goes stale."""
    watches = [
        replace(watch, metrics_url=_in_pod(watch.metrics_url, pod))
        if watch.service in pod
        else replace(watch, maps_memory=False)
        for watch in service.restarts_with
        if watch.service in pod or watch.stale or watch.gone_ends or not watch.maps_memory
    ]
    if service.registered_at is None and not watches:
        return list(service.command)
    registered_at = service.registered_at and _in_pod(service.registered_at, pod)
    return in_image_command(
        service.name, service.command, watch_options(registered_at, *watched_pages(watches))
    )


def _in_pod(url: str, pod: frozenset[str]) -> str:
    """A page of a container in this pod, at loopback: its Service's name would also reach
    the other replicas of a scaled StatefulSet."""
    parts = urlsplit(url)
    if parts.hostname not in pod:
        return url
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"127.0.0.1{port}"))


def _env(service: Service, *, own_gpus: bool) -> list[dict[str, Any]]:
    pod_ip = {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
    pod_name = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    namespace = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    env: list[dict[str, Any]] = [
        {"name": POD_IP_ENV, "valueFrom": pod_ip},
        {"name": POD_NAME_ENV, "valueFrom": pod_name},
        {"name": POD_NAMESPACE_ENV, "valueFrom": namespace},
    ]
    # The runtime's GPU choice (gpu_env) is the device plugin's here; CUDA_VISIBLE_DEVICES
    # (env) numbers the pod's own GPUs from 0.
    env += [{"name": name, "value": _literal(value)} for name, value in service.env.items()]
    if service.gpus is not None and not own_gpus:
        env += [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ]
    env += [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": ENV_SECRET, "key": name}}}
        for name in service.passed_env
    ]
    return env


def _resources(service: Service, options: PodOptions, *, own_gpus: bool) -> dict[str, str]:
    resources: dict[str, str] = {}
    if service.cpuset:
        resources["cpu"] = str(len(service.cpuset))
    if service.gpus is not None and own_gpus:
        resources[GPU_RESOURCE] = str(len(service.gpus.device_ids))
    if any(node.path == "/dev/infiniband" for node in service.devices):
        resources[options.rdma_resource] = "1"
    return resources


def _probes(health: Health, ports: Sequence[tuple[str, int]]) -> dict[str, Any]:
    up = health.endpoints[0] if health.endpoints else None
    if up is None:
        return {}
    timeout = {"timeoutSeconds": health.timeout_s}
    starts = math.ceil(health.start_period_s / _PROBE_PERIOD_S)
    ready = health.ready or up
    # Ready means serving and every socket the compose healthcheck connects to taking
    # connections: one probe handler only, so an exec of the same check where there are some.
    serving = (
        {"exec": {"command": list(python_check(ready.port, ready.path, health.listening))}}
        if health.listening
        else _http(ready, ports)
    )
    return {
        "startupProbe": _http(up, ports) | timeout | _every(_PROBE_PERIOD_S, starts),
        "livenessProbe": _http(up, ports) | timeout | _every(_PROBE_PERIOD_S, health.retries),
        "readinessProbe": serving | timeout | _every(health.interval_s, 3),
    }


def _http(endpoint: HttpEndpoint, ports: Sequence[tuple[str, int]]) -> dict[str, Any]:
    named = next((name for name, port in ports if port == endpoint.port), None)
    return {"httpGet": {"path": endpoint.path, "port": named or endpoint.port}}


def _every(period_s: int, failures: int) -> dict[str, int]:
    return {"periodSeconds": period_s, "failureThreshold": max(failures, 1)}


def _needs_shm(service: Service) -> bool:
    """vLLM and LMCache: Docker's 64 MiB /dev/shm breaks them (compose sizes it or shares
    the host's); a pod's /dev/shm is as small."""
    return service.shm_size_mib is not None or service.host_ipc


def _shm_mib(service: Service) -> int:
    if service.shm_size_mib is not None:
        return service.shm_size_mib
    return _GPU_SHM_MIB if service.gpus is not None else _CPU_SHM_MIB


def _mounts(service: Service) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = []
    if _needs_shm(service):
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    for index, mount in enumerate(service.mounts):
        entry: dict[str, Any] = {"name": _mount_volume(mount, index), "mountPath": mount.target}
        mounts.append(entry | ({"readOnly": True} if mount.read_only else {}))
    for config in service.configs:
        mounts.append(_config_mount(config))
    if service.secrets:  # the HF token: the one secret the model has
        path = f"{_SECRETS_DIR}/hf_token"
        token = {"name": HF_TOKEN_SECRET, "mountPath": path, "subPath": "hf_token"}
        mounts.append(token | {"readOnly": True})
    return mounts


def _config_mount(config: ConfigFile) -> dict[str, Any]:
    key = PurePosixPath(config.path).name
    return {"name": config.name, "mountPath": config.target, "subPath": key, "readOnly": True}


def _mount_volume(mount: Mount, index: int) -> str:
    if isinstance(mount, NamedVolume):
        return mount.volume
    if isinstance(mount, BindMount):
        return f"host-path-{index}"
    return f"tmpfs-{index}"


def _volumes(
    parts: Sequence[PodPart], shared: Sequence[Volume], options: PodOptions
) -> list[dict[str, Any]]:
    volumes: dict[str, dict[str, Any]] = {}
    if any(_needs_shm(part.service) for part in parts):
        shm = max(_shm_mib(part.service) for part in parts if _needs_shm(part.service))
        memory = {"medium": "Memory", "sizeLimit": f"{shm}Mi"}
        volumes["dshm"] = {"name": "dshm", "emptyDir": memory}
    by_key = {volume.key: volume for volume in shared}
    for part in parts:
        for index, mount in enumerate(part.service.mounts):
            name = _mount_volume(mount, index)
            volumes.setdefault(name, _volume(name, mount, by_key, options))
        for config in part.service.configs:
            volumes.setdefault(config.name, _config_volume(config))
        if part.service.secrets:
            volumes.setdefault(HF_TOKEN_SECRET, _token_volume())
    return list(volumes.values())


def _volume(
    name: str, mount: Mount, shared: dict[str, Volume], options: PodOptions
) -> dict[str, Any]:
    if isinstance(mount, NamedVolume):
        return _named_volume(name, shared.get(mount.volume), options)
    if isinstance(mount, BindMount):
        return {"name": name, "hostPath": {"path": mount.source, "type": "Directory"}}
    assert isinstance(mount, TmpfsMount)
    return {"name": name, "emptyDir": {"medium": "Memory"}}


def _named_volume(name: str, volume: Volume | None, options: PodOptions) -> dict[str, Any]:
    """The model cache: a host folder where the spec names one (hf.cache_dir), else a claim
    shared by the stack's pods. Other caches live and die with their pod."""
    if volume is not None and volume.host_path:
        path = {"path": volume.host_path, "type": "DirectoryOrCreate"}
        return {"name": name, "hostPath": path}
    if name == "model-cache":
        return {"name": name, "persistentVolumeClaim": {"claimName": options.model_cache_claim}}
    return {"name": name, "emptyDir": {}}


def _config_volume(config: ConfigFile) -> dict[str, Any]:
    return {"name": config.name, "configMap": {"name": config.name}}


def _token_volume() -> dict[str, Any]:
    items = [{"key": "hf_token", "path": "hf_token"}]
    secret = {"secretName": HF_TOKEN_SECRET, "items": items, "defaultMode": 0o400}
    return {"name": HF_TOKEN_SECRET, "secret": secret}


def _literal(value: str) -> str:
    """Kubernetes expands ``$(VAR)`` in env values and arguments and reads ``$$`` as ``$``:
    every ``$`` is kept literal except the plan's own references to the pod's IP, name and
    namespace, and LeaderWorkerSet's to its leader's address and the pod's rank."""
    literal = value.replace("$", "$$")
    for ref in _REFS:
        literal = literal.replace(f"${ref}", ref)
    return literal
