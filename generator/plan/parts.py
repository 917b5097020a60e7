"""The topology's and the router's share of the plan, as discriminated unions: one member
per unit (generator/topologies/, generator/routers/), so nothing is None "for the other one".

An engine's KV part says which KV ports it holds; the stack's topology part holds the
resolved LMCache settings; the router part holds the router kind's own ports.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import Field

from generator.plan.frozen import Frozen
from generator.spec import RouterKind, SidedPolicy, Topology

__all__ = [
    "ColocatedTopology",
    "EngineKV",
    "LMCachePDReceiverKV",
    "LMCachePDSenderKV",
    "LMCachePDTopology",
    "LMCacheServerPlan",
    "NixlMPEngineKV",
    "NixlMPTopology",
    "NoKV",
    "P2PPlan",
    "ProxyRouterPlan",
    "RouterPlan",
    "SidecarPlan",
    "TopologyPlan",
    "VllmRouterPlan",
    "part_of",
    "span",
]

_T = TypeVar("_T")


def span(ports: tuple[int, ...]) -> str:
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"


def part_of(value: object, kind: type[_T], owner: str) -> _T:
    """A unit's own part of the plan. The registries dispatch by kind, so another kind's part
    here is a bug in the tool, never the user's."""
    if not isinstance(value, kind):
        raise TypeError(f"{owner}: {kind.__name__} expected, not {type(value).__name__}")
    return value


# --- the stack's topology part -------------------------------------------------------------


class LMCachePDTopology(Frozen):
    kind: Literal[Topology.LMCACHE_PD] = Topology.LMCACHE_PD
    chunk_size: int
    prefill_buffer_bytes: int
    decode_buffer_bytes: int
    buffer_device: Literal["cuda", "cpu"]
    backends: tuple[str, ...]

    def stack_sidecars(self) -> tuple[SidecarPlan, ...]:
        return ()


class P2PPlan(Frozen):
    """LMCache P2P (lmcache.p2p): the coordinator's place and the servers' shared settings."""

    coordinator: str  # its service name
    coordinator_host: str
    coordinator_address: str  # its host's address (what servers reach with host networking)
    coordinator_port: int
    transfer_engine: Literal["nixl", "mooncake_te"]
    lookup_timeout_s: float
    load_timeout_s: float

    def sidecar(self) -> SidecarPlan:
        return SidecarPlan(
            service=self.coordinator,
            role="lmcache",  # the LMCache image runs it
            engine=None,
            host=self.coordinator_host,
            health_port=self.coordinator_port,
            health_path="/healthz",
        )


class NixlMPTopology(Frozen):
    kind: Literal[Topology.NIXL_MP] = Topology.NIXL_MP
    chunk_size: int
    l1_size_gb: float
    eviction_policy: str
    supported_transfer_mode: str
    server_extra_args: tuple[str, ...] = ()
    # NIXL's direction (spec nixl.transfer); plan.json leaves out the default.
    transfer: Literal["pull", "push"] = Field("pull", exclude_if=lambda value: value == "pull")
    # lmcache.p2p; None (off) is left out of plan.json.
    p2p: P2PPlan | None = Field(None, exclude_if=lambda value: value is None)

    def stack_sidecars(self) -> tuple[SidecarPlan, ...]:
        """Services of the whole stack the engines' sidecars need: the P2P coordinator."""
        return (self.p2p.sidecar(),) if self.p2p is not None else ()


class ColocatedTopology(Frozen):
    kind: Literal[Topology.COLOCATED] = Topology.COLOCATED

    def stack_sidecars(self) -> tuple[SidecarPlan, ...]:
        return ()


TopologyPlan = Annotated[
    LMCachePDTopology | NixlMPTopology | ColocatedTopology, Field(discriminator="kind")
]


# --- an engine's KV part -------------------------------------------------------------------


class LMCacheServerPlan(Frozen):
    service: str
    zmq_port: int
    http_port: int
    metrics_port: int
    # lmcache.p2p: the transfer channel it listens on and advertises (None: P2P off).
    p2p_port: int | None = Field(None, exclude_if=lambda value: value is None)


class NixlMPEngineKV(Frozen):
    kind: Literal["nixl-mp"] = "nixl-mp"
    side_channel_ports: tuple[int, ...]  # NIXL handshake, one per TP rank
    lmcache_server: LMCacheServerPlan

    def describe(self) -> str:
        return f"nixl {span(self.side_channel_ports)}"


class LMCachePDSenderKV(Frozen):
    kind: Literal["lmcache-pd-sender"] = "lmcache-pd-sender"
    # NIXL's own Prometheus exporter, the only place LMCache's P/D transfers report bytes and
    # time (LMCache's metrics time local copies only).
    nixl_telemetry_port: int

    def describe(self) -> str:
        return "-"


class LMCachePDReceiverKV(Frozen):
    kind: Literal["lmcache-pd-receiver"] = "lmcache-pd-receiver"
    init_ports: tuple[int, ...]  # one per TP rank
    alloc_ports: tuple[int, ...]
    bind_host: str  # where those ports listen (LMCache's pd_peer_host)

    @property
    def probe_host(self) -> str:
        """Where a check inside the container reaches the P/D ports: they listen only on
        ``bind_host`` (a host address), or on every interface (0.0.0.0)."""
        return "127.0.0.1" if self.bind_host == "0.0.0.0" else self.bind_host

    def describe(self) -> str:
        return f"init {span(self.init_ports)} alloc {span(self.alloc_ports)}"


class NoKV(Frozen):
    """colocated: the engine moves no KV (no connector, no KV ports)."""

    kind: Literal["none"] = "none"

    def describe(self) -> str:
        return "-"


EngineKV = Annotated[
    NixlMPEngineKV | LMCachePDSenderKV | LMCachePDReceiverKV | NoKV, Field(discriminator="kind")
]


class SidecarPlan(Frozen):
    """A service an engine needs healthy before it starts (nixl-mp: its `lmcache server`; the
    P2P coordinator, which every server needs): the workflow starts and waits for these
    first."""

    service: str
    role: str  # its image role and label
    engine: str | None  # None: the stack's, no one engine's (the P2P coordinator)
    host: str
    health_port: int
    health_path: str


# --- the router part -----------------------------------------------------------------------


class _RouterBase(Frozen):
    service: str = "router"
    host: str
    address: str
    advertise_host: str
    port: int
    policy: SidedPolicy  # the prefillers' and the decoders'
    session_header: str | None = None
    extra_args: tuple[str, ...] = ()

    def notices_port(self) -> int | None:
        """Where the prefillers send KV-ready notices (None: this router takes none)."""
        return None

    def discovers_pods(self) -> bool:
        """It finds engine pods by their labels (the Kubernetes export), so every engine
        listens on one HTTP port and the router's pod may list and watch pods."""
        return False


class ProxyRouterPlan(_RouterBase):
    kind: Literal[RouterKind.PROXY] = RouterKind.PROXY
    notify_port: int | None = None  # ZMQ PULL socket for LMCache P/D notices (lmcache-pd)

    def notices_port(self) -> int | None:
        return self.notify_port


class VllmRouterPlan(_RouterBase):
    kind: Literal[RouterKind.VLLM_ROUTER] = RouterKind.VLLM_ROUTER
    metrics_port: int  # its Prometheus listener
    # On a pod network, unless router.pod_discovery is false; left out of plan.json when off,
    # so compose, process and Slurm plans read as before.
    pod_discovery: bool = Field(False, exclude_if=lambda value: not value)

    def discovers_pods(self) -> bool:
        return self.pod_discovery


RouterPlan = Annotated[ProxyRouterPlan | VllmRouterPlan, Field(discriminator="kind")]
