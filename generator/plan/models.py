"""The plan: every decision about where things run, which ports they use and what they run
with, resolved.

A plan is pure data made from a spec (``make_plan``) and the whole contract: render, probes
and the workflow read only the plan (plan.json says everything that will be rendered and run).
``Plan.ports`` lists every port with its owner, per host.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from generator.limits import KvPath
from generator.plan.frozen import Frozen
from generator.plan.observe import ObservePlan
from generator.plan.parts import (
    EngineKV,
    RouterPlan,
    SidecarPlan,
    TopologyPlan,
)
from generator.spec import (
    DockerAccess,
    GpuAccess,
    ImagesSpec,
    KubernetesSpec,
    ProcessSpec,
    Profile,
    RecoverySpec,
    Runtime,
    SlurmSpec,
)

__all__ = [
    "ENGINE_LABEL",
    "ENGINE_LABEL_VALUE",
    "LWS_LEADER_ADDRESS_REF",
    "LWS_WORKER_INDEX_REF",
    "POD_IP_ENV",
    "POD_IP_REF",
    "POD_NAMESPACE_ENV",
    "POD_NAMESPACE_REF",
    "POD_NAME_ENV",
    "POD_NAME_REF",
    "ROLE_LABEL",
    "STACK_LABEL",
    "EnginePlan",
    "HFPlan",
    "HostPlan",
    "ModelPlan",
    "Network",
    "Plan",
    "PortUse",
    "Role",
    "TokenPlan",
    "UcxPlan",
]


class Role(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


Network = Literal["host", "bridge"]

# Under a pod network (the Kubernetes export) a container's own pod IP, where a socket must be
# bound to it: the serializer defines ``POD_IP`` first in each container's environment (the
# downward API), and Kubernetes expands ``$(POD_IP)`` in later env values and arguments.
POD_IP_ENV = "POD_IP"
POD_IP_REF = f"$({POD_IP_ENV})"
# The pod's own name, the same way (``metadata.name``): a StatefulSet pod keeps it across its
# containers' restarts, and each replica has its own.
POD_NAME_ENV = "POD_NAME"
POD_NAME_REF = f"$({POD_NAME_ENV})"
# The pod's namespace, the same way (``metadata.namespace``): where vllm-router's pod discovery
# looks, still right after an overlay moves the stack to another namespace.
POD_NAMESPACE_ENV = "POD_NAMESPACE"
POD_NAMESPACE_REF = f"$({POD_NAMESPACE_ENV})"
# An engine over several nodes is a LeaderWorkerSet there, whose controller puts these first in
# every container's environment: the leader pod's DNS name (its rendezvous), and the pod's node
# rank (0 on the leader). One worker template serves every follower, so its rank is this.
LWS_LEADER_ADDRESS_REF = "$(LWS_LEADER_ADDRESS)"
LWS_WORKER_INDEX_REF = "$(LWS_WORKER_INDEX)"
# Labels every pod of the Kubernetes export carries: its stack and its role (prefill, decode,
# router, ...). Services select pods by them, and so does vllm-router's pod discovery.
STACK_LABEL = "xpyd.org/stack"
ROLE_LABEL = "xpyd.org/role"
# And every engine pod, whatever its role: a colocated stack's vllm-router finds its engines by
# one selector whose labels must all match (0.1.17's --selector), so the roles cannot be OR-ed.
ENGINE_LABEL = "xpyd.org/engine"
ENGINE_LABEL_VALUE = "vllm"


class PortUse(Frozen):
    host: str
    port: int
    owner: str  # service name
    purpose: str  # e.g. "http", "nixl side channel (tp rank 1)"


class ModelPlan(Frozen):
    id: str  # HF repo id, or the path inside the containers (host-path, synthetic)
    served_name: str  # what clients ask for: model.served_name, else the id
    source: Literal["hub", "host-path", "synthetic"]
    host_path: str | None = None  # host folder mounted read-only at ``id`` (host-path)
    dtype: str
    max_model_len: int | None = None
    block_size: int | None = None  # model.block_size (None: the topology's, else vLLM's)
    extra_args: tuple[str, ...] = ()  # vLLM arguments of every engine


class TokenPlan(Frozen):
    """Where the HF token comes from (never the token): a compose secret read from an
    environment variable or a file, or an env file handed to the containers."""

    source: Literal["env", "file", "env-file"]
    name: str  # the variable's name, or the path (relative to the checkout unless absolute)

    @property
    def is_secret(self) -> bool:
        return self.source != "env-file"


class HFPlan(Frozen):
    offline: bool  # HF_HUB_OFFLINE=1: asked for, or the model does not come from the hub
    cache_dir: str | None = None  # host folder bound as the model cache volume
    token: TokenPlan | None = None


class UcxPlan(Frozen):
    tls: str | None = None  # UCX_TLS
    net_devices: str | None = None  # UCX_NET_DEVICES
    # NIXL's progress thread's poll timeout (XPYD_NIXL_PTHR_DELAY_US, read by our patch of NIXL):
    # 0 is NIXL's own (it spins).
    nixl_idle_delay_us: int


class EnginePlan(Frozen):
    name: str
    role: Role
    index: int
    host: str
    address: str  # the host's address
    advertise_host: str  # what peers use to reach it: host address, or service name on a bridge
    gpus: tuple[int, ...] = ()  # host GPU ids this engine computes on; never shared
    # Host GPU ids the container sees: its own plus those of every same-host engine it swaps KV
    # with. A container that sees only its own GPU cannot use CUDA IPC to a peer's GPU and UCX
    # silently falls back to TCP (~900x slower, measured on H200s: docs/facts.md).
    visible_gpus: tuple[int, ...] = ()
    # CUDA_VISIBLE_DEVICES inside the container: positions of ``gpus`` among ``visible_gpus``
    # (a container numbers the GPUs it sees from 0, in PCI bus order, as the host does).
    cuda_devices: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    tp: int
    http_port: int
    gpu_memory_utilization: float | None = None
    extra_args: tuple[str, ...] = ()  # the group's vLLM arguments, after the model's
    extra_env: dict[str, str] = Field(default_factory=dict)  # the group's env, over ours
    # Env vars taken from the shell that starts the engine (<role>.secret_env): names only.
    secret_env: tuple[str, ...] = Field((), exclude_if=lambda value: not value)
    kv: EngineKV  # the KV ports of its topology and role
    # An engine over several hosts (<role>.nodes): how many, this process's node (0: the
    # leader, which serves the API; a follower runs headless), a follower's leader, and the
    # leader's torch.distributed rendezvous port (vLLM's --master-port, at its address). A
    # follower's ``http_port`` is its supervisor's page (/health, /metrics with its vLLM's
    # process_start_time_seconds): vLLM serves nothing there, and peers watch it there.
    nodes: int = Field(1, exclude_if=lambda value: value == 1)
    node_rank: int = Field(0, exclude_if=lambda value: value == 0)
    leader: str | None = Field(None, exclude_if=lambda value: value is None)
    master_port: int | None = Field(None, exclude_if=lambda value: value is None)
    # Each node's supervisor page there (a follower's ``http_port`` too): the other nodes
    # watch it, as a node whose peer died does not notice (docs/facts.md).
    node_page: int | None = Field(None, exclude_if=lambda value: value is None)

    @property
    def url(self) -> str:
        return f"http://{self.advertise_host}:{self.http_port}"

    @property
    def is_follower(self) -> bool:
        return self.leader is not None


class HostPlan(Frozen):
    name: str
    address: str
    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    services: tuple[str, ...] = ()
    # How to reach this host's Docker engine; None: the local one. Left out of plan.json when
    # None, so stacks without it render as before.
    docker: DockerAccess | None = Field(None, exclude_if=lambda value: value is None)


class Plan(Frozen):
    stack: str
    topology: TopologyPlan
    profile: Profile
    # What runs the services; plan.json leaves out the default (compose), so compose stacks'
    # plans read as before.
    runtime: Runtime = Field(Runtime.COMPOSE, exclude_if=lambda value: value is Runtime.COMPOSE)
    process: ProcessSpec | None = Field(None, exclude_if=lambda value: value is None)
    slurm: SlurmSpec | None = Field(None, exclude_if=lambda value: value is None)
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    network: Network
    # Planned for a cluster's pod network (make_plan's ``pod_network``): bridge addressing, one
    # pod per engine; left out of plan.json when off.
    pod_network: bool = Field(False, exclude_if=lambda value: not value)
    # What the export makes of the engines: only on a pod network, else left out.
    kubernetes: KubernetesSpec | None = Field(None, exclude_if=lambda value: value is None)
    rdma: bool  # RDMA devices mapped into engines (KV crosses hosts, or the spec asks)
    ucx: UcxPlan
    gpu_access: GpuAccess
    model: ModelPlan
    hf: HFPlan
    images: ImagesSpec  # base images, registry, pins and pip settings of the builds
    hosts: tuple[HostPlan, ...]
    prefill: tuple[EnginePlan, ...]
    decode: tuple[EnginePlan, ...]
    # The headless nodes of engines over several hosts (<role>.nodes), in engine order: each
    # runs its share of its leader's TP ranks; routers, probes and the verdict see leaders only.
    followers: tuple[EnginePlan, ...] = Field((), exclude_if=lambda value: not value)
    router: RouterPlan
    sidecars: tuple[SidecarPlan, ...] = ()
    ports: tuple[PortUse, ...]
    # observe: Prometheus and the rest; None (off) is left out of plan.json.
    observe: ObservePlan | None = Field(None, exclude_if=lambda value: value is None)
    warnings: tuple[str, ...] = ()

    @property
    def engines(self) -> tuple[EnginePlan, ...]:
        return self.prefill + self.decode

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1

    def engines_on(self, host: str) -> tuple[EnginePlan, ...]:
        return tuple(engine for engine in self.engines if engine.host == host)

    def nodes_of(self, engine: EnginePlan) -> tuple[EnginePlan, ...]:
        """An engine's processes: itself, then its followers (engines over several hosts)."""
        return (engine, *(f for f in self.followers if f.leader == engine.name))

    def leader_of(self, follower: EnginePlan) -> EnginePlan:
        return next(engine for engine in self.engines if engine.name == follower.leader)

    def kv_pairs(self) -> tuple[tuple[EnginePlan, EnginePlan], ...]:
        """Every (prefill, decode) pair that may swap KV: any router pairs any two."""
        return tuple((p, d) for p in self.prefill for d in self.decode)

    def same_host_pairs(self, host: str | None = None) -> tuple[tuple[EnginePlan, EnginePlan], ...]:
        decoders: dict[str, list[EnginePlan]] = {}
        for decoder in self.decode:
            decoders.setdefault(decoder.host, []).append(decoder)
        return tuple(
            (p, d)
            for p in self.prefill
            if host is None or p.host == host
            for d in decoders.get(p.host, ())
        )

    @property
    def kv_crosses_hosts(self) -> bool:
        """Whether some (prefill, decode) pair sits on two hosts: unless every engine is on
        one host (found without listing the pairs: there are prefill x decode of them)."""
        hosts = {engine.host for engine in (*self.engines, *self.followers)}
        return bool(self.prefill) and bool(self.decode) and len(hosts) > 1

    @property
    def has_same_host_pairs(self) -> bool:
        return not {p.host for p in self.prefill}.isdisjoint(d.host for d in self.decode)

    def kv_path(self) -> KvPath:
        """The path the stack's KV takes, which the verdict and the alert rules judge by: GPU
        pairs on one host where there are any (their floor is the higher one)."""
        if self.profile is Profile.CPU:
            return KvPath.CPU
        if self.kv_crosses_hosts and not self.has_same_host_pairs:
            return KvPath.CROSS_HOST_GPU
        return KvPath.SAME_HOST_GPU

    def host(self, name: str) -> HostPlan:
        return next(host for host in self.hosts if host.name == name)

    def reach_address(self, host: str) -> str:
        """Where a client outside the containers (the workflow's probes) reaches the ports
        that ``host``'s services listen on: the host's address with host networking; on a
        bridge, loopback (ports are published on 127.0.0.1 of the machine that runs them)."""
        return self.host(host).address if self.network == "host" else "127.0.0.1"

    def engine_address(self, engine: EnginePlan) -> str:
        """Where a probe reaches an engine's ports: as ``reach_address`` says for its host;
        on a pod network (the verdict Job, inside the cluster) by its own name, its Service's:
        engine pods there may share a port number (vllm-router's pod discovery), which the
        Job's port -> name book cannot tell apart."""
        return engine.name if self.pod_network else self.reach_address(engine.host)
