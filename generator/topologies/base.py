"""What a P/D topology is to the rest of the tool: the protocol each unit meets (one module
per topology, registered in ``__init__.py``) and the data it hands to the probes.

A unit is pure: it reads the spec and the plan and returns data (plan parts, connector
configs, environments, config files, where the verdict's counters are). It never does HTTP
or touches Docker; the probes and the workflow read what it returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from generator.errors import SpecIssue
from generator.limits import BASELINE_SUFFIX, PD_NAME_MAX
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import EnginePlan, Network, Plan, Role
from generator.plan.parts import EngineKV, SidecarPlan, TopologyPlan
from generator.plan.ports import PortBook
from generator.spec import Profile, RouterKind, Spec, Topology

__all__ = [
    "CounterRow",
    "EngineSite",
    "KvSpeedSource",
    "LoadLog",
    "ReceiverPorts",
    "TopologyUnit",
    "VerdictSources",
    "baseline_room",
    "foreign_settings",
    "kv_prompt_tokens",
    "no_sidecar",
    "page_address",
]


@dataclass(frozen=True)
class EngineSite:
    """What the planner has decided about an engine before its topology claims KV ports."""

    name: str
    role: Role
    host: str
    address: str
    network: Network
    tp: int


@dataclass(frozen=True)
class KvSpeedSource:
    """Prometheus counters that time the KV transfers, on the engines that make them."""

    engines: tuple[str, ...]  # whose counters tell (their logs name the UCX transport)
    ports: tuple[int, ...]  # their metrics ports, in the same order
    operation: Literal["read", "write"]  # the UCX operation carrying the KV (ucp_get/ucp_put)
    bytes_metric: str
    seconds_metric: str
    seconds_per_unit: float  # the seconds metric's unit, in seconds
    transfers_metric: str
    memory: Literal["host", "cuda"]  # where the KV sits (UCX's memory type)
    # NIXL descriptors per transfer (a sum), where the engines count them: each costs UCX's
    # cuda_ipc about the same time whatever its size (docs/facts.md), so fewer is faster
    descriptors_metric: str | None = None


@dataclass(frozen=True)
class ReceiverPorts:
    """Where a decoder receives pushed KV, for the router to tell the prefiller (lmcache-pd)."""

    host: str
    init_ports: tuple[int, ...]  # one per TP rank
    alloc_ports: tuple[int, ...]


@dataclass(frozen=True)
class CounterRow:
    """A decode-engine counter the verdict judges by its change across the smoke requests."""

    check: str
    metric: str
    must_be_zero: bool  # else it must grow


@dataclass(frozen=True)
class LoadLog:
    """The line a decoder's KV connector logs for each request whose KV it loaded. vLLM counts
    a prompt's tokens as arrived (external_kv_transfer) once the connector promises them, so
    only this line shows that they were loaded. ``pattern``'s groups: ``request`` (vLLM's
    request id, which starts with the answer's id), ``loaded`` and ``required`` (tokens)."""

    source: str  # who writes it, for the verdict row
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class VerdictSources:
    kv_speed: KvSpeedSource
    # Prompt tokens a decoder computes itself per request (lmcache-pd: the prefiller's first
    # token; NIXL hands over the prompt alone).
    local_compute_per_request: int
    kv_prompt_tokens: int  # the smoke's KV-speed request: see ``kv_prompt_tokens``
    decode_rows: tuple[CounterRow, ...] = ()
    object_stores: tuple[tuple[str, int], ...] = ()  # (service, http port): LMCache /status
    # lmcache.p2p: (engine, its server's service, the server's http port), in plan order.
    p2p_servers: tuple[tuple[str, str, int], ...] = ()
    load_log: LoadLog | None = None  # where the decoders log each request's KV they loaded


def kv_prompt_tokens(profile: Profile, chunk_size: int) -> int:
    """A few LMCache chunks on CPU. On GPUs a few thousand tokens (hundreds of MiB of KV): a
    transfer of microseconds would be timed mostly by vLLM's completion polling, not the link."""
    return 4096 if profile is not Profile.CPU else 3 * chunk_size


def cuda_ipc_peers(
    plan: Plan, movers: tuple[EnginePlan, ...], targets: tuple[EnginePlan, ...]
) -> dict[str, tuple[str, ...]]:
    """Each engine that moves KV straight into or out of other engines' GPU memory, and those
    of them on its host (CUDA IPC reaches one host's GPUs; across hosts the NIC does, and a
    dead peer's memory goes with it). None off GPUs."""
    if plan.profile is not Profile.GPU:
        return {}
    peers = {m.name: tuple(t.name for t in targets if t.host == m.host) for m in movers}
    return {name: names for name, names in peers.items() if names}


def page_address(plan: Plan, service: str, host: str, *, loopback: bool) -> str:
    """Where observe's Prometheus (on the first host) reaches a page: by service name on a
    bridge; with host networking at loopback where the page listens only there (single-host
    stacks: Prometheus shares that host), else at its host's address."""
    if plan.network == "bridge":
        return service
    return "127.0.0.1" if loopback else plan.host(host).address


def no_sidecar(kind: Topology, sidecar: SidecarPlan) -> TypeError:
    """A topology without sidecars asked for one's command: a bug in the tool."""
    return TypeError(f"{kind.value} plans no sidecars, yet {sidecar.service} was asked for")


def foreign_settings(
    spec: Spec, owner: Topology, sections: tuple[str, ...], port_fields: tuple[str, ...]
) -> Iterator[SpecIssue]:
    """``lmcache.<section>`` settings and ``ports.<field>`` bases only ``owner`` reads."""
    for section in sections:
        if getattr(spec.lmcache, section) is not None:
            yield SpecIssue(
                f"lmcache.{section}",
                f"applies to topology {owner.value}, but this stack is {spec.topology.value}",
                f"remove lmcache.{section}, or set topology: {owner.value}",
            )
    for name in sorted(spec.ports.model_fields_set & set(port_fields)):
        yield SpecIssue(
            f"ports.{name}",
            f"is only used by topology {owner.value}, not {spec.topology.value}",
            f"remove ports.{name}",
        )


def baseline_room(spec: Spec) -> Iterator[SpecIssue]:
    """A P/D stack's name leaves room for its colocated baseline's (``bench --baseline``)."""
    if len(spec.name) > PD_NAME_MAX:
        yield SpecIssue(
            "name",
            f"is {len(spec.name)} characters long; a P/D stack's name has at most "
            f"{PD_NAME_MAX}, so that bench's baseline (<name>{BASELINE_SUFFIX}) fits",
            f"shorten it to {PD_NAME_MAX} characters or less",
        )


@runtime_checkable  # lets the registry test check that each unit has every member
class TopologyUnit(Protocol):
    """One topology: everything in which lmcache-pd, nixl-mp and colocated differ."""

    @property
    def kind(self) -> Topology: ...

    @property
    def default_router(self) -> RouterKind: ...

    @property
    def router_notices(self) -> bool:
        """The router receives KV-ready notices from the prefillers (on a port of its own)."""
        ...

    @property
    def router_protocol(self) -> Literal["lmcache-pd", "nixl", "none"]:
        """The P/D protocol a router speaks for this topology ("none": plain requests to any
        engine, no P/D)."""
        ...

    @property
    def spec_sections(self) -> tuple[str, ...]:
        """The ``lmcache.<section>`` settings only this topology reads."""
        ...

    @property
    def port_fields(self) -> tuple[str, ...]:
        """The ``ports.<field>`` bases only this topology uses."""
        ...

    @property
    def extra_image_roles(self) -> tuple[str, ...]: ...

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        """The rules of a stack of this topology."""
        ...

    def foreign_issues(self, spec: Spec) -> Iterator[SpecIssue]:
        """Settings only this topology reads, found on a stack of another topology."""
        ...

    def plan_settings(self, spec: Spec, book: PortBook) -> TopologyPlan:
        """The stack's settings, and the ports of the stack's own services (the P2P
        coordinator), claimed after every engine's."""
        ...

    def plan_engine(self, spec: Spec, book: PortBook, site: EngineSite) -> EngineKV:
        """Claims the engine's KV ports (in a fixed order: the plan must be deterministic)."""
        ...

    def sidecars(self, engine: EnginePlan) -> tuple[SidecarPlan, ...]: ...

    def sidecar_command(
        self, plan: Plan, engine: EnginePlan | None, sidecar: SidecarPlan
    ) -> list[str]:
        """The command of one of the engine's sidecars (those ``sidecars`` returned), or of
        one of the stack's (``engine`` None: the P2P coordinator)."""
        ...

    def connector_config(self, plan: Plan, engine: EnginePlan) -> dict[str, Any] | None:
        """vLLM's ``--kv-transfer-config`` (None: the engine moves no KV)."""
        ...

    def engine_env(self, plan: Plan, engine: EnginePlan) -> dict[str, str]: ...

    def engine_ports(self, engine: EnginePlan) -> tuple[int, ...]:
        """Ports besides vLLM's http port that a prober outside reaches (published)."""
        ...

    def metrics_pages(self, plan: Plan, engine: EnginePlan) -> tuple[MetricsPage, ...]:
        """The Prometheus pages of the engine's own parts besides vLLM's /metrics (its LMCache
        server, NIXL's exporter)."""
        ...

    def receiver_ports(self, engine: EnginePlan) -> ReceiverPorts | None:
        """A decoder's KV receive ports (None: the decoder pulls, or no KV moves)."""
        ...

    def engine_listening(self, engine: EnginePlan) -> list[tuple[str, int]]:
        """Sockets the engine's health check must find open, from inside its container."""
        ...

    def engine_config(self, plan: Plan, engine: EnginePlan) -> ConfigFile | None:
        """The engine's LMCache config file, if it reads one."""
        ...

    def needs_cpu_connector(self, profile: Profile) -> bool:
        """The engine image carries our KV connector for vLLM's CPU build."""
        ...

    def block_size(self, plan: Plan) -> int | None:
        """vLLM's ``--block-size`` where the spec sets none (``model.block_size``); None:
        vLLM's own default."""
        ...

    def cudagraph_mode(self, plan: Plan) -> str | None:
        """vLLM's CUDA graph mode (``-cc.cudagraph_mode``) where the engines' arguments choose
        none; None: vLLM's own default."""
        ...

    def verdict_sources(self, plan: Plan) -> VerdictSources | None:
        """Where the P/D verdict reads its counters (None: no KV moves, no P/D verdict)."""
        ...

    def registration_url(self, plan: Plan, engine: EnginePlan) -> str | None:
        """Where the engine's own KV store says whom it knows (nixl-mp: its LMCache server's
        /status): a store that answers without the engine registered has restarted and lost
        it, and the engine's supervisor then restarts the engine. None: nothing to watch."""
        ...

    def stale_after(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        """Services that keep state about other services' current processes beyond what they
        depend on (KV peers that do not reconnect): each, and the services whose newer start
        leaves it talking to a process that is gone. `up` restarts it then."""
        ...

    def ends_with_peers(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        """Services whose state about a peer goes stale once the peer is gone and that cannot
        refresh it, wherever the two run: each, and those peers. Its supervisor ends it as
        soon as the peer is gone, as for a mapper (``maps_memory_of``), so both start anew."""
        ...

    def maps_memory_of(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        """Services that map engines' GPU memory (CUDA IPC, within one host): each, and the
        engines it maps. The mapping keeps a dead engine's GPU memory taken until the mapper
        exits, so that engine cannot start again before: the mapper's supervisor ends it once
        the engine is gone (or new)."""
        ...
