"""The stack spec: one typed description of a disaggregated-prefill stack.

Field-level rules live here (types, ranges, unknown keys are errors); rules that relate
several fields live in ``checks.py``. Defaults follow the two upstream seeds; settings whose
right value depends on the topology or profile are ``None`` here and resolved by the planner.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "GpuAccess",
    "GpuSpec",
    "GroupPlacement",
    "GroupSpec",
    "HFSpec",
    "HostSpec",
    "ImagesSpec",
    "LMCachePDSpec",
    "LMCacheServerSpec",
    "LMCacheSpec",
    "ModelSpec",
    "NetworkingSpec",
    "PipSpec",
    "PlacementSpec",
    "PortBases",
    "Profile",
    "RouterKind",
    "RouterSpec",
    "Spec",
    "TokenSource",
    "Topology",
    "VersionOverrides",
]

Port = Annotated[int, Field(ge=1024, le=65535)]
DnsLabel = Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")]


def _split_csv(value: object) -> object:
    """Accept seed-style CSV strings ("a,b") wherever a list is expected."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, int):
        return [value]
    return value


CsvStrs = Annotated[list[str], BeforeValidator(_split_csv)]
CsvPorts = Annotated[list[Port], BeforeValidator(_split_csv)]
CsvInts = Annotated[list[Annotated[int, Field(ge=0)]], BeforeValidator(_split_csv)]


class Topology(StrEnum):
    LMCACHE_PD = "lmcache-pd"  # LMCacheConnectorV1 in vLLM, LMCache's own P/D transfer, our proxy
    NIXL_MP = "nixl-mp"  # MultiConnector[NixlConnector, LMCacheMPConnector] + `lmcache server`s


class Profile(StrEnum):
    GPU = "gpu"  # NVIDIA GPUs, optionally RDMA
    CPU = "cpu"  # vLLM's CPU build, one pinned core per engine: CI and first runs


class GpuAccess(StrEnum):
    """How a container gets its GPUs (what the host's Docker supports: `doctor` tells)."""

    DEVICE_REQUESTS = "device-requests"  # compose device reservations, NVIDIA container toolkit
    NVIDIA_RUNTIME = "nvidia-runtime"  # `runtime: nvidia` + NVIDIA_VISIBLE_DEVICES (legacy hosts)
    CDI = "cdi"  # CDI device names (nvidia.com/gpu=N): hosts with CDI specs and no runtime hook


class RouterKind(StrEnum):
    PROXY = "proxy"  # our P/D proxy (generator.proxy): speaks LMCache P/D and NIXL
    VLLM_ROUTER = "vllm-router"  # vllm-project/router in --vllm-pd-disaggregation mode


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(StrictModel):
    id: str = Field(min_length=1, description="HF repo id, or a path inside the containers")
    source: Literal["hub", "host-path", "synthetic"] = "hub"
    host_path: str | None = Field(None, description="host directory mounted read-only (host-path)")
    served_name: str | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int | None = Field(None, gt=0)
    extra_args: list[str] = Field(default_factory=list)


class GroupSpec(StrictModel):
    count: int = Field(1, ge=1, le=4096)
    tp: int = Field(1, ge=1, le=64, description="tensor parallel size")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class HostSpec(StrictModel):
    name: DnsLabel
    address: str = Field("127.0.0.1", min_length=1)
    gpus: CsvInts | None = None
    cpus: CsvInts | None = None


class GroupPlacement(StrictModel):
    hosts: CsvStrs = Field(min_length=1)
    http_ports: CsvPorts | None = None
    gpus: list[CsvInts] | None = None


class PlacementSpec(StrictModel):
    prefill: GroupPlacement | None = None
    decode: GroupPlacement | None = None


class LMCacheServerSpec(StrictModel):
    """`lmcache server` settings (nixl-mp): one server per vLLM instance."""

    l1_size_gb: float | None = Field(None, gt=0)
    eviction_policy: Literal["LRU", "ARC", "IsolatedLRU", "noop"] = "LRU"
    supported_transfer_mode: Literal["lmcache_driven", "engine_driven", "auto"] | None = None
    extra_args: list[str] = Field(default_factory=list)


class LMCachePDSpec(StrictModel):
    """LMCache's in-process P/D transfer (lmcache-pd)."""

    prefill_buffer_bytes: int = Field(1 << 30, gt=0)
    decode_buffer_bytes: int = Field(2 << 30, gt=0)
    buffer_device: Literal["cuda", "cpu"] | None = None
    backends: list[str] = Field(default_factory=lambda: ["UCX"])


class LMCacheSpec(StrictModel):
    chunk_size: int = Field(256, ge=16, le=65536)
    server: LMCacheServerSpec | None = None
    pd: LMCachePDSpec | None = None


class RouterSpec(StrictModel):
    kind: RouterKind | None = None
    host: str | None = None
    port: Port | None = None
    prometheus_port: Port | None = None
    notify_port: Port | None = Field(None, description="proxy ZMQ PULL port (lmcache-pd)")
    policy: str = "round_robin"
    session_header: str | None = Field(None, min_length=1)
    extra_args: list[str] = Field(default_factory=list)


class GpuSpec(StrictModel):
    access: GpuAccess = GpuAccess.DEVICE_REQUESTS


class NetworkingSpec(StrictModel):
    rdma: bool | None = Field(
        None, description="map RDMA devices; default: only where KV crosses hosts"
    )
    ucx_tls: str | None = None
    ucx_net_devices: str | None = "all"


class VersionOverrides(StrictModel):
    """GPU image pins (cpu and router images install exactly images/locks/*.txt)."""

    vllm: str | None = None
    lmcache: str | None = None
    nixl: str | None = None


class PipSpec(StrictModel):
    index_url: str | None = None
    extra_index_urls: list[str] = Field(default_factory=list)
    extra_ca_file: str | None = Field(None, description="PEM bundle under images/, for proxies")
    wheelhouse: str | None = Field(None, description="folder under images/ with every wheel")


class ImagesSpec(StrictModel):
    engine_base: str | None = None
    router_base: str | None = None
    registry: str = Field("xpyd", pattern=r"^[a-z0-9][a-z0-9._/:-]*$")
    versions: VersionOverrides = Field(default_factory=VersionOverrides)
    pip: PipSpec = Field(default_factory=PipSpec)


class TokenSource(StrictModel):
    """Where the HF token comes from. Never the token itself."""

    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: str | None = None
    env_file: str | None = None


class HFSpec(StrictModel):
    cache_dir: str | None = None
    token: TokenSource | None = None
    offline: bool = False


class PortBases(StrictModel):
    """Where each kind of port starts counting (per host). Seed A's numbering by default;
    automatic blocks skip the ports of common cluster agents (generator/plan/agent_ports.py)."""

    prefill_http: Port = 7100
    decode_http: Port = 7200
    decode_pd_init: Port = 7300
    decode_pd_alloc: Port = 7400
    proxy_notify: Port = 7500
    nixl_telemetry: Port = 7600  # lmcache-pd prefillers: NIXL's Prometheus exporter (KV GiB/s)
    nixl_side_channel: Port = 5600
    lmcache_zmq: Port = 6555
    lmcache_http: Port = 8090
    lmcache_metrics: Port = 8190  # not 9090: Prometheus's own port on many GPU hosts
    router_metrics: Port = 29000


class Spec(StrictModel):
    name: DnsLabel
    description: str = ""
    topology: Topology
    profile: Profile = Profile.GPU
    model: ModelSpec
    prefill: GroupSpec = Field(default_factory=GroupSpec)
    decode: GroupSpec = Field(default_factory=GroupSpec)
    hosts: list[HostSpec] = Field(default_factory=lambda: [HostSpec(name="local")], min_length=1)
    placement: PlacementSpec | None = None
    lmcache: LMCacheSpec = Field(default_factory=LMCacheSpec)
    router: RouterSpec = Field(default_factory=RouterSpec)
    networking: NetworkingSpec = Field(default_factory=NetworkingSpec)
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    images: ImagesSpec = Field(default_factory=ImagesSpec)
    hf: HFSpec = Field(default_factory=HFSpec)
    ports: PortBases = Field(default_factory=PortBases)

    @property
    def router_kind(self) -> RouterKind:
        if self.router.kind is not None:
            return self.router.kind
        return RouterKind.PROXY if self.topology is Topology.LMCACHE_PD else RouterKind.VLLM_ROUTER

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1
