"""The plan: every decision about where things run and which ports they use, resolved.

A plan is pure data made from a spec (``make_plan``); renderers read only the plan and the
spec it came from. ``Plan.port_table()`` lists every port with its owner, per host.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from generator.spec import (
    DockerAccess,
    LMCachePDSpec,
    LMCacheServerSpec,
    Profile,
    RouterKind,
    Spec,
    Topology,
)

__all__ = [
    "EnginePlan",
    "HostPlan",
    "LMCacheServerPlan",
    "Network",
    "Plan",
    "PortUse",
    "Role",
    "RouterPlan",
]


class Role(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


Network = Literal["host", "bridge"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PortUse(_Frozen):
    host: str
    port: int
    owner: str  # service name
    purpose: str  # e.g. "http", "nixl side channel (tp rank 1)"


class LMCacheServerPlan(_Frozen):
    service: str
    zmq_port: int
    http_port: int
    metrics_port: int


class EnginePlan(_Frozen):
    name: str
    role: Role
    index: int
    host: str
    address: str  # the host's address
    advertise_host: str  # what peers use to reach it: host address, or service name on a bridge
    gpus: tuple[int, ...] = ()  # host GPU ids this engine computes on; never shared
    # Host GPU ids the container sees: its own plus those of every same-host engine it swaps KV
    # with. A container that sees only its own GPU cannot use CUDA IPC to a peer's GPU and UCX
    # silently falls back to TCP (~900x slower, measured on H200s; NOTES.md).
    visible_gpus: tuple[int, ...] = ()
    # CUDA_VISIBLE_DEVICES inside the container: positions of ``gpus`` among ``visible_gpus``
    # (a container numbers the GPUs it sees from 0, in PCI bus order, as the host does).
    cuda_devices: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    tp: int
    http_port: int
    side_channel_ports: tuple[int, ...] = ()  # NIXL handshake, one per TP rank (nixl-mp)
    lmcache_server: LMCacheServerPlan | None = None  # nixl-mp
    pd_init_ports: tuple[int, ...] = ()  # lmcache-pd decoders, one per TP rank
    pd_alloc_ports: tuple[int, ...] = ()
    pd_bind_host: str | None = None  # where those ports listen (LMCache's pd_peer_host)
    # lmcache-pd prefillers: NIXL's own Prometheus exporter, the only place LMCache's P/D
    # transfers report bytes and time (LMCache's metrics time local copies only).
    nixl_telemetry_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.advertise_host}:{self.http_port}"

    @property
    def pd_probe_host(self) -> str:
        """Where a check inside the container reaches the P/D ports: they listen only on
        ``pd_bind_host`` (a host address), or on every interface (0.0.0.0)."""
        assert self.pd_bind_host is not None, "lmcache-pd decoders only"
        return "127.0.0.1" if self.pd_bind_host == "0.0.0.0" else self.pd_bind_host


class RouterPlan(_Frozen):
    kind: RouterKind
    service: str = "router"
    host: str
    address: str
    advertise_host: str
    port: int
    metrics_port: int | None = None  # vllm-router's Prometheus listener
    notify_port: int | None = None  # proxy's ZMQ PULL socket for LMCache P/D notices
    policy: str
    session_header: str | None = None


class HostPlan(_Frozen):
    name: str
    address: str
    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    services: tuple[str, ...] = ()
    # How to reach this host's Docker engine; None: the local one. Left out of plan.json when
    # None, so stacks without it render as before.
    docker: DockerAccess | None = Field(None, exclude_if=lambda value: value is None)


class Plan(_Frozen):
    stack: str
    topology: Topology
    profile: Profile
    network: Network
    rdma: bool  # RDMA devices mapped into engines (KV crosses hosts, or the spec asks)
    hosts: tuple[HostPlan, ...]
    prefill: tuple[EnginePlan, ...]
    decode: tuple[EnginePlan, ...]
    router: RouterPlan
    lmcache_server: LMCacheServerSpec | None = None
    lmcache_pd: LMCachePDSpec | None = None
    ports: tuple[PortUse, ...]
    warnings: tuple[str, ...] = ()
    spec: Spec = Field(exclude=True)

    @property
    def engines(self) -> tuple[EnginePlan, ...]:
        return self.prefill + self.decode

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1

    def engines_on(self, host: str) -> tuple[EnginePlan, ...]:
        return tuple(engine for engine in self.engines if engine.host == host)

    def kv_pairs(self) -> tuple[tuple[EnginePlan, EnginePlan], ...]:
        """Every (prefill, decode) pair that may swap KV: any router pairs any two."""
        return tuple((p, d) for p in self.prefill for d in self.decode)

    def same_host_pairs(self, host: str | None = None) -> tuple[tuple[EnginePlan, EnginePlan], ...]:
        return tuple(
            (p, d)
            for p, d in self.kv_pairs()
            if p.host == d.host and (host is None or p.host == host)
        )

    @property
    def kv_crosses_hosts(self) -> bool:
        return any(p.host != d.host for p, d in self.kv_pairs())

    def host(self, name: str) -> HostPlan:
        return next(host for host in self.hosts if host.name == name)
