"""The plan: every decision about where things run and which ports they use, resolved.

A plan is pure data made from a spec (``make_plan``); renderers read only the plan and the
spec it came from. ``Plan.port_table()`` lists every port with its owner, per host.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from generator.spec import LMCachePDSpec, LMCacheServerSpec, Profile, RouterKind, Spec, Topology

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
    gpus: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    tp: int
    http_port: int
    side_channel_ports: tuple[int, ...] = ()  # NIXL handshake, one per TP rank (nixl-mp)
    lmcache_server: LMCacheServerPlan | None = None  # nixl-mp
    pd_init_ports: tuple[int, ...] = ()  # lmcache-pd decoders, one per TP rank
    pd_alloc_ports: tuple[int, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.advertise_host}:{self.http_port}"


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


class Plan(_Frozen):
    stack: str
    topology: Topology
    profile: Profile
    network: Network
    rdma: bool
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

    def host(self, name: str) -> HostPlan:
        return next(host for host in self.hosts if host.name == name)
