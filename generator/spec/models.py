"""The stack spec: one typed description of a disaggregated-prefill stack.

Field-level rules live here (types, ranges, unknown keys are errors); rules that relate
several fields live in ``checks.py``. Defaults follow the two upstream seeds; settings whose
right value depends on the topology or profile are ``None`` here and resolved by the planner.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

from generator.limits import MAX_SCRAPE_INTERVAL_S
from generator.paths import RESERVED_IMAGE_DIRS
from generator.spec.types import (
    AbsolutePath,
    Arg,
    CheckoutPath,
    CsvDeviceIds,
    CsvHostNames,
    CsvPorts,
    DnsLabel,
    DockerContextName,
    DockerUrl,
    EnrootImage,
    EnvName,
    EnvValue,
    HeaderName,
    HostAddress,
    ImagePython,
    ImageRef,
    ModelRef,
    NixlBackend,
    Port,
    PyxisMount,
    Repository,
    ServedName,
    Text,
    TokenPath,
    UcxDevices,
    UcxTransports,
    Url,
    Version,
    Word,
    refuse,
)

__all__ = [
    "DockerAccess",
    "GpuAccess",
    "GpuSpec",
    "GroupPlacement",
    "GroupSpec",
    "HFSpec",
    "HostSpec",
    "ImagesSpec",
    "Isolation",
    "KubernetesSpec",
    "LMCachePDSpec",
    "LMCacheServerSpec",
    "LMCacheSpec",
    "ModelSpec",
    "NetworkingSpec",
    "NixlSpec",
    "ObserveSpec",
    "PipSpec",
    "PlacementSpec",
    "PolicyChoice",
    "PortBases",
    "ProcessSpec",
    "Profile",
    "RecoverySpec",
    "RouterKind",
    "RouterSpec",
    "Runtime",
    "SidedPolicy",
    "SlurmSpec",
    "Spec",
    "TokenSource",
    "Topology",
    "VersionOverrides",
]


def _own_folder_name(name: str) -> str:
    """A stack renders into images/<name>/: never into one of the tool's own folders there."""
    if name in RESERVED_IMAGE_DIRS:
        raise refuse(
            f"{name!r} is the name of the tool's own folder images/{name}/",
            f"pick another name (not one of: {', '.join(RESERVED_IMAGE_DIRS)})",
        )
    return name


StackName = Annotated[DnsLabel, AfterValidator(_own_folder_name)]
Args = Annotated[list[Arg], Field(max_length=1024)]
# Enum fields take their values as strings (strict mode alone would want enum instances).
Lax = Field(strict=False)


# NIXL's idle progress thread's poll timeout: 100 wakeups/s. Measured (docs/facts.md): an idle
# engine from ~100 % of a core to under 3 % on cpu and on an H100, no cost under load.
NIXL_IDLE_DELAY_US = 10_000


class Topology(StrEnum):
    LMCACHE_PD = "lmcache-pd"  # LMCacheConnectorV1 in vLLM, LMCache's own P/D transfer, our proxy
    NIXL_MP = "nixl-mp"  # MultiConnector[NixlConnector, LMCacheMPConnector] + `lmcache server`s
    # No P/D: every engine serves whole requests behind a round-robin router. `bench
    # --baseline colocated` derives it from a P/D stack (same engines, same GPUs or cores).
    COLOCATED = "colocated"


class Profile(StrEnum):
    GPU = "gpu"  # NVIDIA GPUs, optionally RDMA
    CPU = "cpu"  # vLLM's CPU build, one pinned core per engine: CI and first runs


class GpuAccess(StrEnum):
    """How a container gets its GPUs (what the host's Docker supports: `doctor` tells)."""

    DEVICE_REQUESTS = "device-requests"  # compose device reservations, NVIDIA container toolkit
    NVIDIA_RUNTIME = "nvidia-runtime"  # `runtime: nvidia` + NVIDIA_VISIBLE_DEVICES (legacy hosts)
    CDI = "cdi"  # CDI device names (nvidia.com/gpu=N): hosts with CDI specs and no runtime hook


class Runtime(StrEnum):
    """What runs the services: all read the same neutral service model."""

    COMPOSE = "compose"  # Docker Compose, one project per host, built images
    # Local processes, no Docker (HPC nodes, bare-metal runners, a GPU host without Docker):
    # a Python with the stack's lock (`python -m generator env`), host networking, one host.
    PROCESS = "process"
    # A Slurm allocation: each host a node of one job, each service a job step on its node
    # (srun), from Pythons on a filesystem every node sees; host networking.
    SLURM = "slurm"


class Isolation(StrEnum):
    """How much of its container's view a service gets under the process runtime."""

    PLAIN = "plain"  # CUDA_VISIBLE_DEVICES selects GPUs, taskset pins cores: any user
    # Root only: each engine in the view its container would have (its GPUs' device nodes
    # alone, its PID namespace), built with unshare as doctor's process mode does.
    CONTAINER = "container"


class RouterKind(StrEnum):
    PROXY = "proxy"  # our P/D proxy (generator.proxy): speaks LMCache P/D and NIXL
    VLLM_ROUTER = "vllm-router"  # vllm-project/router in --vllm-pd-disaggregation mode


class StrictModel(BaseModel):
    # strict: no silent coercion (`count: true` is not 1, "2" is not 2); no inf/nan either.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ProcessSpec(StrictModel):
    """The process runtime's settings (runtime: process, or up/bench --runtime process)."""

    python: AbsolutePath | None = Field(
        None, description="the engines' Python, with the stack's lock; default: the env's"
    )
    router_python: AbsolutePath | None = Field(
        None, description="the router's Python (images/locks/router.txt); default: the env's"
    )
    isolation: Annotated[Isolation, Lax] = Isolation.PLAIN


SlurmName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class SlurmContainerSpec(StrictModel):
    """Every step in a container, through pyxis (NVIDIA's Slurm plugin for enroot) where the
    cluster has it: srun --container-image. The checkout is mounted at its own path (the
    supervisor, the configs, the state and the logs the login node reads), a host-path model
    too; each step's own environment wins over the image's. Rendered and checked against
    pyxis's option table, not run here (no enroot on the machine CI runs on)."""

    engine_image: EnrootImage = Field(
        description="engines, LMCache servers and one-off runs (the benchmark): an image with "
        "the stack's engine lock, such as its engine image pushed to a registry the nodes pull "
        "from, or made a squashfs file on a shared filesystem (enroot import dockerd://IMAGE)"
    )
    router_image: EnrootImage = Field(
        description="the router: an image with images/locks/router.txt (the stack's router image)"
    )
    engine_python: ImagePython = Field(
        "python3", description="the engines' Python in engine_image: a name on its PATH, or a path"
    )
    router_python: ImagePython = Field(
        "python3", description="the router's Python in router_image: a name on its PATH, or a path"
    )
    mounts: list[PyxisMount] = Field(
        default_factory=list,
        max_length=64,
        description="more bind mounts, SRC:DST[:FLAGS], flags joined by + (/data:/data:ro)",
    )


class SlurmSpec(StrictModel):
    """The Slurm runtime's settings (runtime: slurm, or up --runtime slurm): what the job asks
    of the cluster. Each host of the spec is one node of the job."""

    partition: SlurmName | None = Field(
        None, description="sbatch --partition; default: the cluster's"
    )
    account: SlurmName | None = Field(None, description="sbatch --account; default: yours")
    time_limit_min: int = Field(
        60, ge=1, le=30 * 24 * 60, description="sbatch --time, minutes: the stack ends with the job"
    )
    wait_s: int = Field(
        600, ge=10, le=7 * 24 * 3600, description="how long up waits for the job to start"
    )
    job_id: int | None = Field(
        None,
        ge=1,
        le=1 << 40,
        description="the job to run in (an salloc of yours); default: the job up runs inside, "
        "else one up submits. up sets it, with each host's address, once the job runs",
    )
    container: SlurmContainerSpec | None = Field(
        None, description="run every step in a container (pyxis); default: from the Pythons"
    )


class RecoverySpec(StrictModel):
    """How the stack survives a dead engine, LMCache server or router (every runtime reads
    the restarts; both routers read the health checks; our proxy alone migrates requests)."""

    max_restarts: int = Field(
        5, ge=0, le=1000, description="per service, then it stays down and `status` says so"
    )
    # A service that exits 0 is restarted too: a server never exits on its own (vLLM's API
    # server exits 0 when its engine core dies).
    health_interval_s: int = Field(2, ge=1, le=600, description="routers check every engine")
    health_timeout_s: int = Field(2, ge=1, le=600, description="one health check's limit")
    health_failures: int = Field(
        2, ge=1, le=100, description="failed checks in a row before an engine is ejected"
    )
    attempts: int = Field(
        2, ge=1, le=8, description="our proxy: pairs a request may try before its answer starts"
    )
    # A wedged engine answers /health (a vLLM decoder after SIGSTOP/SIGCONT, or whose KV pull
    # hung: measured): only its token counters tell. Tokens move every engine step for every
    # running request, so a minute of none with requests in flight is no slow engine.
    stall_s: int | None = Field(
        60,
        ge=5,
        le=3600,
        description="our proxy: an engine with requests in flight whose token counters stand "
        "still this long leaves rotation for as long again (null: never)",
    )

    # vllm-router and a proxy without it answer 503 at once while a role has no engine in
    # rotation: every request sent during a restart fails, where only those in flight need to.
    hold_s: int = Field(
        0,
        ge=0,
        le=600,
        description="our proxy: a request that finds no prefiller or decoder in rotation "
        "waits up to this long for one to come back (0: 503 at once); while it waits it "
        "counts against the proxy's concurrency cap",
    )

    @property
    def ejection_bound_s(self) -> int:
        """The longest a dead engine stays in rotation: its last check, then the failures."""
        return self.health_failures * (self.health_interval_s + self.health_timeout_s)


class ModelSpec(StrictModel):
    id: ModelRef = Field(description="HF repo id, or a path inside the containers")
    source: Literal["hub", "host-path", "synthetic"] = "hub"
    host_path: AbsolutePath | None = Field(
        None, description="host directory mounted read-only (host-path)"
    )
    served_name: ServedName | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: int | None = Field(None, gt=0, le=100_000_000)
    block_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="tokens per KV block (vLLM's --block-size); unset: the topology's choice "
        "(nixl-mp on GPUs: 128, fewer NIXL descriptors per request), else vLLM's default",
    )
    extra_args: Args = Field(default_factory=list)


class GroupSpec(StrictModel):
    count: int = Field(1, ge=1, le=4096)
    tp: int = Field(1, ge=1, le=64, description="tensor parallel size")
    nodes: int = Field(
        1,
        ge=1,
        le=16,
        description="hosts one engine spans (vLLM's --nnodes): its tp ranks split evenly, "
        "tp/nodes on each; the first host's process serves the API, the others run headless",
    )
    # Below 1% of a GPU (1.4 GB of an H200) no model's weights and KV cache fit: vLLM fails at
    # start with no memory left for KV blocks.
    gpu_memory_utilization: float | None = Field(None, ge=0.01, le=1)
    extra_args: Args = Field(default_factory=list)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=1024)
    secret_env: list[EnvName] = Field(
        default_factory=list,
        max_length=256,
        description="env vars the engines take from the shell that runs `up` (API keys, "
        "cloud credentials): named in the rendered files, their values never written",
    )


class DockerAccess(StrictModel):
    """How the tool reaches a host's Docker engine: exactly one of the two (checks.py)."""

    context: DockerContextName | None = Field(None, description="a `docker context` name")
    url: DockerUrl | None = Field(
        None, description="ssh://[user@]host[:port], tcp://host:port or unix:///path"
    )


class HostSpec(StrictModel):
    name: DnsLabel
    address: HostAddress = "127.0.0.1"
    gpus: CsvDeviceIds | None = None
    cpus: CsvDeviceIds | None = None
    docker: DockerAccess | None = Field(
        None, description="this host's Docker engine; absent: the local one (DOCKER_HOST)"
    )


class GroupPlacement(StrictModel):
    hosts: CsvHostNames = Field(min_length=1, max_length=4096)
    http_ports: CsvPorts | None = Field(None, max_length=4096)
    gpus: list[CsvDeviceIds] | None = Field(None, max_length=4096)


class PlacementSpec(StrictModel):
    prefill: GroupPlacement | None = None
    decode: GroupPlacement | None = None


class LMCacheServerSpec(StrictModel):
    """`lmcache server` settings (nixl-mp): one server per vLLM instance."""

    # At least 10 MB: an L1 that holds no KV chunk stores nothing (a chunk of 256 tokens is
    # ~32 MiB for an 8B model).
    l1_size_gb: float | None = Field(None, ge=0.01, le=1 << 20)
    eviction_policy: Literal["LRU", "ARC", "IsolatedLRU", "noop"] = "LRU"
    supported_transfer_mode: Literal["lmcache_driven", "engine_driven", "auto"] | None = None
    extra_args: Args = Field(default_factory=list)


class LMCachePDSpec(StrictModel):
    """LMCache's in-process P/D transfer (lmcache-pd)."""

    # At least 1 MiB: a buffer must hold a chunk's KV for the transfer to move anything.
    prefill_buffer_bytes: int = Field(1 << 30, ge=1 << 20, le=1 << 40)
    decode_buffer_bytes: int = Field(2 << 30, ge=1 << 20, le=1 << 40)
    buffer_device: Literal["cuda", "cpu"] | None = None
    backends: list[NixlBackend] = Field(default_factory=lambda: ["UCX"], min_length=1)


class NixlSpec(StrictModel):
    """vLLM's NIXL hand-off (nixl-mp)."""

    # pull: the decoder READs the prefiller's KV (vLLM's NixlConnector, upstream's default);
    # push: the prefiller WRITEs it into the decoder's blocks (NixlPushConnector). Same router
    # protocol. Two engines on ONE GPU need push: UCX serves same-GPU READs over tcp/lo.
    transfer: Literal["pull", "push"] = "pull"


class LMCacheP2PSpec(StrictModel):
    """LMCache P2P KV sharing between the stack's `lmcache server`s (nixl-mp): a coordinator
    keeps membership, every server advertises a transfer channel, and a server that misses
    reads the chunk from a peer's L1 (one hop, read-only). Present: on."""

    transfer_engine: Literal["nixl", "mooncake_te"] = "nixl"
    # At least a peer's round trip and a chunk over TCP (a 32 MiB chunk at ~0.4 GiB/s takes
    # 80 ms): less, and every peer read misses or fails. At most 600 s, the OpenAI SDK's own
    # request timeout: no client is left waiting for a slower peer.
    lookup_timeout_s: float = Field(30.0, ge=0.1, le=600)  # a slower peer lookup is a miss
    load_timeout_s: float = Field(30.0, ge=0.1, le=600)  # a slower peer load is a failure


class LMCacheSpec(StrictModel):
    chunk_size: int = Field(256, ge=16, le=65536)
    server: LMCacheServerSpec | None = None
    p2p: LMCacheP2PSpec | None = None  # nixl-mp only
    pd: LMCachePDSpec | None = None


class PolicyChoice(StrictModel):
    """A policy and its options: which names and options exist (and their types) is the
    router kind's to say (routers/)."""

    name: Word
    options: dict[Word, Any] = Field(default_factory=dict, max_length=32)


def _one_side(side: object) -> object:
    return {"name": side} if isinstance(side, str) else side


def _both_sides(policy: object) -> object:
    """What may be written (a name; {name, options}; {prefill: ..., decode: ...}, each side a
    name or {name, options}) as the one form the tool reads."""
    if isinstance(policy, str) or (
        isinstance(policy, dict) and "name" in policy and policy.keys() <= {"name", "options"}
    ):
        return {"prefill": _one_side(policy), "decode": _one_side(policy)}
    if isinstance(policy, dict):
        return {side: _one_side(value) for side, value in policy.items()}
    return policy


class SidedPolicy(StrictModel):
    """The prefillers' policy and the decoders'."""

    prefill: PolicyChoice = PolicyChoice(name="round_robin")
    decode: PolicyChoice = PolicyChoice(name="round_robin")

    _written = model_validator(mode="before")(staticmethod(_both_sides))

    @model_serializer(mode="wrap")
    def _shortest(self, handler: SerializerFunctionWrapHandler) -> object:
        """Written back in the shortest form that reads the same (plan.json stays as it was
        for a stack with one policy and no options)."""
        if self.prefill == self.decode and not self.prefill.options:
            return self.prefill.name
        return handler(self)


class RouterSpec(StrictModel):
    kind: Annotated[RouterKind, Lax] | None = None
    host: DnsLabel | None = None
    port: Port | None = None
    prometheus_port: Port | None = None
    notify_port: Port | None = Field(None, description="proxy ZMQ PULL port (lmcache-pd)")
    # One name for both sides, {name, options}, or {prefill: ..., decode: ...}.
    policy: SidedPolicy = SidedPolicy()
    session_header: HeaderName | None = None
    extra_args: Args = Field(default_factory=list)
    pod_discovery: bool | None = Field(
        None,
        description="vllm-router (nixl-mp) in the Kubernetes export: find engine pods by "
        "their labels, so a scaled role is routed to (default: on); false: the planned "
        "engine URLs",
    )


class GpuSpec(StrictModel):
    access: Annotated[GpuAccess, Lax] = GpuAccess.DEVICE_REQUESTS
    share: bool = Field(
        False,
        description="let engines share a GPU (each sets <role>.gpu_memory_utilization; "
        "they may sum to at most 0.9 on one GPU); off: every engine has GPUs of its own",
    )


class CpuSpec(StrictModel):
    share: bool = Field(
        False,
        description="let engines share CPU cores (more engines than hosts[].cpus lists, each "
        "pinned to the least used core; they compete for it); off: every engine has cores of "
        "its own",
    )


class NetworkingSpec(StrictModel):
    rdma: bool | None = Field(
        None, description="map RDMA devices; default: only where KV crosses hosts"
    )
    ucx_tls: UcxTransports | None = None
    ucx_net_devices: UcxDevices | None = "all"
    nixl_idle_delay_us: int = Field(
        NIXL_IDLE_DELAY_US,
        ge=0,
        le=1_000_000,
        description="longest sleep (microseconds) of NIXL's UCX progress thread while no KV "
        "moves, in every engine and LMCache server; 0 is NIXL's own: the thread spins a core "
        "per engine. KV traffic wakes it at once (docs/facts.md: no cost measured on cpu or "
        "an H100)",
    )


class VersionOverrides(StrictModel):
    """GPU image pins (cpu and router images install exactly images/locks/*.txt)."""

    vllm: Version | None = None
    lmcache: Version | None = None
    nixl: Version | None = None


class PipSpec(StrictModel):
    index_url: Url | None = None
    extra_index_urls: list[Url] = Field(default_factory=list, max_length=64)
    extra_ca_file: CheckoutPath | None = Field(
        None, description="PEM bundle under images/, for proxies"
    )
    wheelhouse: CheckoutPath | None = Field(
        None, description="folder under images/ with every wheel"
    )


class ImagesSpec(StrictModel):
    engine_base: ImageRef | None = None
    router_base: ImageRef | None = None
    registry: Repository = "xpyd"
    versions: VersionOverrides = Field(default_factory=VersionOverrides)
    pip: PipSpec = Field(default_factory=PipSpec)


class TokenSource(StrictModel):
    """Where the HF token comes from (exactly one of these: checks.py). Never the token."""

    env: EnvName | None = None
    file: TokenPath | None = None
    env_file: TokenPath | None = None


class HFSpec(StrictModel):
    cache_dir: AbsolutePath | None = Field(
        None, description="host folder bound as the model cache volume"
    )
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
    lmcache_coordinator: Port = 9300  # lmcache.p2p: the coordinator's HTTP port (LMCache's)
    lmcache_p2p: Port = 8290  # lmcache.p2p: each server's transfer channel
    router_metrics: Port = 29000
    # observe: on the stack's first host. Not 9090/3000/4317: a GPU host's own Prometheus,
    # Grafana and OpenTelemetry collector often hold those (generator/plan/agent_ports.py).
    prometheus: Port = 9490
    grafana: Port = 3400
    otel_collector: Port = 4417  # OTLP over gRPC
    otlp_receiver_http: Port = 4418  # our OTLP receiver's /spans and /metrics (cpu, processes)
    # <role>.nodes > 1: each engine's torch.distributed rendezvous on its leader's host (vLLM's
    # --master-port; torch's own default is 29500), and each node's supervisor page.
    engine_master: Port = 29600
    node_page: Port = 7700


class ObserveSpec(StrictModel):
    """Prometheus (and Grafana, an OpenTelemetry collector) added to the stack, scraping every
    part of it, with alert rules for the ways P/D fails silently. Off by default."""

    enabled: bool = False
    scrape_interval_s: int = Field(
        5,
        ge=1,
        le=MAX_SCRAPE_INTERVAL_S,
        description="also the rules' evaluation interval; at most a quarter of the shortest "
        "window a rule reads over (generator/limits.py), or its alerts could never fire",
    )
    publish: bool = Field(
        False,
        description="Prometheus and Grafana reachable from other machines; off: on the host "
        "only (loopback on a bridge), as the stack's other ports",
    )
    grafana: bool | None = Field(
        None,
        description="Grafana with the stack's dashboards; default: on for gpu under compose, "
        "else off",
    )
    traces: bool = Field(
        False,
        description="an OTLP receiver the engines (and LMCache servers) send their traces to: "
        "the OpenTelemetry Collector on GPU hosts under compose, else our own",
    )
    # 0.01 GiB/s is 100 Mb/s Ethernet's speed: a lower floor never fires before KV has stopped
    # (the recompute alert says that); 10,000 GiB/s is ~5x the fastest GPU link (NVLink 5):
    # a higher floor fires on every stack.
    kv_floor_gib_s: float | None = Field(
        None,
        ge=0.01,
        le=10_000,
        description="alert when KV moves slower than this; default: the verdict's floor for the "
        "stack's KV path (none on cpu, whose speed is a figure)",
    )


class KubernetesSpec(StrictModel):
    """What the Kubernetes export (render --target kubernetes) makes of the engines; read by
    it alone."""

    engines: Literal["statefulsets", "disaggregatedset"] = Field(
        "statefulsets",
        description="statefulsets: a StatefulSet per engine (a LeaderWorkerSet for an engine "
        "over several nodes); disaggregatedset: one DisaggregatedSet of LWS v0.10.0 whose "
        "roles are the engines (2 to 10), rolled out together",
    )


class Spec(StrictModel):
    name: StackName
    description: Text = ""
    topology: Annotated[Topology, Lax]
    profile: Annotated[Profile, Lax] = Profile.GPU
    runtime: Annotated[Runtime, Lax] = Runtime.COMPOSE
    process: ProcessSpec = Field(default_factory=ProcessSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
    model: ModelSpec
    prefill: GroupSpec = Field(default_factory=GroupSpec)
    decode: GroupSpec = Field(default_factory=GroupSpec)
    hosts: list[HostSpec] = Field(
        default_factory=lambda: [HostSpec(name="local")], min_length=1, max_length=4096
    )
    placement: PlacementSpec | None = None
    lmcache: LMCacheSpec = Field(default_factory=LMCacheSpec)
    nixl: NixlSpec = Field(default_factory=NixlSpec)
    router: RouterSpec = Field(default_factory=RouterSpec)
    networking: NetworkingSpec = Field(default_factory=NetworkingSpec)
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    cpu: CpuSpec = Field(default_factory=CpuSpec)
    images: ImagesSpec = Field(default_factory=ImagesSpec)
    hf: HFSpec = Field(default_factory=HFSpec)
    ports: PortBases = Field(default_factory=PortBases)
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    observe: ObserveSpec = Field(default_factory=ObserveSpec)
    kubernetes: KubernetesSpec = Field(default_factory=KubernetesSpec)

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1

    @property
    def multinode_roles(self) -> tuple[str, ...]:
        """The roles whose engines each span several hosts (``nodes`` > 1)."""
        return tuple(role for role in ("prefill", "decode") if getattr(self, role).nodes > 1)
