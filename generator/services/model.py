"""The neutral service model: what runs where, with no serializer's shapes in it.

A ``Deployment`` holds, per host, the services that run there (``HostServices``) and what they
share (volumes, config files, secrets). Built from the plan (build.py); compose is one
serializer of it (serializers/compose.py). Paths are relative to the workspace root (the
checkout) unless absolute: a serializer writes them relative to where its files live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Literal

from generator.plan.files import ConfigFile
from generator.spec import GpuAccess

__all__ = [
    "BindMount",
    "ConfigFile",
    "Dependency",
    "Deployment",
    "DeviceNode",
    "GpuRequest",
    "Health",
    "HostServices",
    "HttpEndpoint",
    "ImageBuildRef",
    "ImageRef",
    "LogPolicy",
    "Mount",
    "NamedVolume",
    "NetworkMode",
    "PeerWatch",
    "PublishedPort",
    "Secret",
    "Service",
    "TmpfsMount",
    "Ulimit",
    "Volume",
    "watched_pages",
]


_WORKSPACE_ROOT = PurePosixPath(".")


class NetworkMode(StrEnum):
    HOST = "host"  # the host's own network stack (multi-host and GPU stacks)
    BRIDGE = "bridge"  # the stack's private network; only published ports are reachable


@dataclass(frozen=True)
class ImageBuildRef:
    """How the image is built: a Dockerfile and its build context, both under the workspace."""

    dockerfile: PurePosixPath  # relative to the context
    context: PurePosixPath = _WORKSPACE_ROOT


@dataclass(frozen=True)
class ImageRef:
    tag: str
    pull_policy: Literal["never", "missing"]  # never: build it; missing: pull, else build
    build: ImageBuildRef | None  # None: another service builds this tag


@dataclass(frozen=True)
class PublishedPort:
    """A container port published on the same host port."""

    port: int
    public: bool  # reachable from other machines; else on the host's loopback only

    @property
    def address(self) -> str:
        return "0.0.0.0" if self.public else "127.0.0.1"


@dataclass(frozen=True)
class GpuRequest:
    device_ids: tuple[int, ...]  # host GPU ids the container sees
    access: GpuAccess  # how the container runtime hands them over


@dataclass(frozen=True)
class DeviceNode:
    path: str  # on the host
    target: str  # in the container


@dataclass(frozen=True)
class Ulimit:
    name: str
    soft: int  # -1: unlimited
    hard: int


@dataclass(frozen=True)
class HttpEndpoint:
    """Where a prober outside the container asks whether the service is up."""

    port: int
    path: str


@dataclass(frozen=True)
class Health:
    command: tuple[str, ...]  # run inside the container: exit 0 = healthy
    start_period_s: int  # failures before this do not count
    endpoints: tuple[HttpEndpoint, ...] = ()
    # Where a prober asks whether it serves, where that differs from being up (vLLM: its
    # /v1/models, which lists the model once loaded); None: up is ready.
    ready: HttpEndpoint | None = None
    # Sockets the check also connects to, from inside the container (an lmcache-pd decoder's
    # KV receive ports: LMCache that cannot bind them leaves them closed while /health says
    # 200); a prober that cannot run ``command`` runs them with its readiness check.
    listening: tuple[tuple[str, int], ...] = ()
    interval_s: int = 5
    timeout_s: int = 5
    retries: int = 3


@dataclass(frozen=True)
class Dependency:
    service: str
    condition: Literal["healthy"] = "healthy"  # start once that service is healthy


@dataclass(frozen=True)
class PeerWatch:
    """A peer whose process this service keeps state about: when the peer's Prometheus page
    gives a newer ``process_start_time_seconds``, that state is stale. ``maps_memory``: this
    service maps the peer's GPU memory (CUDA IPC), which a dead peer needs back to start
    again, so the peer's page refusing connections (gone) ends this service too."""

    service: str
    metrics_url: str  # reachable from the service's own network
    maps_memory: bool = False
    # Its state about the peer goes stale once the peer is gone, wherever the two run
    # (Topology.ends_with_peers): the peer gone ends this service, as for a mapper.
    gone_ends: bool = False
    # Its state about the peer is stale after the peer's new start, mapped or not (a runtime
    # where the mapping cannot happen keeps the watch for this).
    stale: bool = False


def watched_pages(watches: Sequence[PeerWatch]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pages the supervisor watches for a new start (``--restarts-with``), and those of
    the peers whose GPU memory the service maps or whose end it ends with (``--ends-with``)."""
    ends = [w for w in watches if w.maps_memory or w.gone_ends]
    restarts = tuple(w.metrics_url for w in watches if w not in ends)
    return restarts, tuple(w.metrics_url for w in ends)


@dataclass(frozen=True)
class NamedVolume:
    volume: str  # a ``Volume.key`` of the host
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class BindMount:
    source: str  # a host path
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class TmpfsMount:
    target: str
    read_only: bool = False


Mount = NamedVolume | BindMount | TmpfsMount


@dataclass(frozen=True)
class LogPolicy:
    max_size_mib: int = 50
    max_files: int = 5


@dataclass(frozen=True)
class Service:
    name: str
    host: str
    role: str  # prefill | decode | lmcache | router | bench
    image: ImageRef
    command: tuple[str, ...]
    hostname: str | None = None  # its name on the stack's network
    on_demand: bool = False  # started only when asked for (a one-off run), never by `up`
    env: dict[str, str] = field(default_factory=dict)
    gpu_env: dict[str, str] = field(default_factory=dict)  # how the GPU access picks devices
    env_files: tuple[str, ...] = ()
    # Env vars whose values come from the environment of whoever starts the service (secrets:
    # the rendered files name them, never hold them).
    passed_env: tuple[str, ...] = ()
    network: NetworkMode = NetworkMode.BRIDGE
    ports: tuple[PublishedPort, ...] = ()  # only on the bridge
    exposed: tuple[int, ...] = ()  # reachable by the stack's services, not published
    gpus: GpuRequest | None = None
    devices: tuple[DeviceNode, ...] = ()
    host_ipc: bool = False
    host_pid: bool = False
    capabilities: tuple[str, ...] = ()
    ulimits: tuple[Ulimit, ...] = ()
    shm_size_mib: int | None = None  # None: the runtime's default
    cpuset: tuple[int, ...] = ()
    health: Health | None = None
    depends_on: tuple[Dependency, ...] = ()
    mounts: tuple[Mount, ...] = ()
    configs: tuple[ConfigFile, ...] = ()
    secrets: tuple[str, ...] = ()  # ``Secret.name`` of the host
    labels: dict[str, str] = field(default_factory=dict)
    init: bool = True
    # Restarts after any exit nobody asked for, this many times (recovery.max_restarts); 0:
    # never. How is the runtime's: compose wraps the command (generator/supervise.py).
    max_restarts: int = 0
    # Its KV store's status page (Topology.registration_url): its supervisor restarts it when
    # the store answers without it registered (the store restarted). Supervised services only.
    registered_at: str | None = None
    # Peers whose restart leaves it talking to a process that is gone (Topology.stale_after):
    # its supervisor restarts it when one of them restarts. Supervised services only.
    restarts_with: tuple[PeerWatch, ...] = ()
    # Host GPUs it shares with other engines (gpu.share): each start, restarts included, waits
    # while another engine starts on one of them, until ``started_when`` answers (vLLM sizes
    # its KV cache from the memory it sees used). Supervised services only (compose, processes).
    starts_alone_on: tuple[int, ...] = ()
    # Its own readiness page, from its own network: where set, its peers (``restarts_with``)
    # are watched only once a run serves it, and its turn on ``starts_alone_on`` ends there.
    started_when: str | None = None
    # Where its supervisor answers for its command (``--serves-page``: /health, /metrics with
    # the run's start): each node of an engine over several hosts, which the others watch.
    page_port: int | None = None
    stop_grace_s: int = 30
    logging: LogPolicy = LogPolicy()

    @property
    def environment(self) -> dict[str, str]:
        return self.env | self.gpu_env


@dataclass(frozen=True)
class Volume:
    key: str  # what services mount
    name: str  # the engine's volume name (shared by stacks that use the same name)
    host_path: str | None = None  # a host folder behind it; None: the engine's storage


@dataclass(frozen=True)
class Secret:
    name: str
    source: Literal["env", "file"]
    value: str  # the variable's name, or the file's path


@dataclass(frozen=True)
class HostServices:
    """What one host runs, and the files, volumes and secrets its services share."""

    host: str
    project_name: str
    directory: PurePosixPath  # relative to the workspace root
    services: tuple[Service, ...]
    volumes: tuple[Volume, ...] = ()
    configs: tuple[ConfigFile, ...] = ()
    secrets: tuple[Secret, ...] = ()

    def service(self, name: str) -> Service:
        return next(service for service in self.services if service.name == name)

    @property
    def service_names(self) -> tuple[str, ...]:
        return tuple(service.name for service in self.services)


@dataclass(frozen=True)
class Deployment:
    stack: str
    topology: str
    hosts: tuple[HostServices, ...]
    notes: tuple[str, ...] = ()  # the plan's warnings, for whoever reads the files
