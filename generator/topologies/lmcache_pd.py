"""lmcache-pd: LMCache inside vLLM (LMCacheConnectorV1) moves the KV with its own P/D
transfer, as LMCache's ``examples/disagg_prefill/xpyd`` (seed A) runs it.

The prefiller's LMCache WRITEs each TP rank's KV into the decoder's receive buffer over NIXL
(the decoder's per-rank init/alloc ports), then notifies our proxy on its ZMQ port. Each
engine reads an LMCache config file. Only keys that LMCache 0.5.6 knows are written: the old
``nixl_peer_*``/``nixl_role`` names are aliased and ``enable_xpyd`` is ignored there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from generator.errors import SpecIssue
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import EnginePlan, Plan, Role
from generator.plan.parts import (
    EngineKV,
    LMCachePDReceiverKV,
    LMCachePDSenderKV,
    LMCachePDTopology,
    SidecarPlan,
    part_of,
)
from generator.plan.ports import PortBook
from generator.spec import LMCachePDSpec, Profile, RouterKind, Spec, Topology
from generator.topologies.base import (
    EngineSite,
    KvSpeedSource,
    LoadLog,
    ReceiverPorts,
    VerdictSources,
    baseline_room,
    cuda_ipc_peers,
    foreign_settings,
    kv_prompt_tokens,
    no_sidecar,
    page_address,
)

__all__ = ["LMCACHE_CONFIG_PATH", "UNIT", "LMCachePD"]

LMCACHE_CONFIG_PATH = "/etc/xpyd/lmcache.yaml"
# What every active rank of a receiver logs at INFO once a request's KV is in vLLM's cache
# (LMCache 0.5.6, lmcache/v1/cache_engine.py). A receiver skipped its loads on an H100 with CUDA
# graphs while vLLM still counted the tokens as arrived (docs/gpu-h200/xpyd-lmcache-1gpu).
_RETRIEVED = LoadLog(
    "LMCache",
    re.compile(
        r"\[req_id=(?P<request>\S+)\] Retrieved (?P<loaded>\d+) out of (?P<required>\d+) "
        r"required tokens"
    ),
)


class LMCachePD:
    kind = Topology.LMCACHE_PD
    default_router = RouterKind.PROXY
    router_protocol: Literal["lmcache-pd", "nixl", "none"] = "lmcache-pd"
    router_notices = True
    spec_sections = ("pd",)
    port_fields = ("decode_pd_init", "decode_pd_alloc", "proxy_notify", "nixl_telemetry")
    extra_image_roles: tuple[str, ...] = ()

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        p_tp, d_tp = spec.prefill.tp, spec.decode.tp
        if p_tp != d_tp:
            which = "larger" if p_tp > d_tp else "smaller"
            yield SpecIssue(
                "prefill.tp",
                f"prefill TP {p_tp} is {which} than decode TP {d_tp}; LMCache P/D sends each "
                "TP rank's KV to the decoder rank of the same number, so the sizes must match",
                f"set prefill.tp and decode.tp to the same value (e.g. both {d_tp})",
            )
        for role in spec.multinode_roles:
            yield SpecIssue(
                f"{role}.nodes",
                "lmcache-pd sends each TP rank's KV to one host of the decoder "
                "(pd_peer_host) at that rank's ports; an engine over several hosts has "
                "not been run with it",
                f"set {role}.nodes: 1, or use topology: nixl-mp (measured with engines "
                "over two nodes)",
            )
        yield from baseline_room(spec)

    def foreign_issues(self, spec: Spec) -> Iterator[SpecIssue]:
        return foreign_settings(spec, self.kind, self.spec_sections, self.port_fields)

    def plan_settings(self, spec: Spec, book: PortBook) -> LMCachePDTopology:
        given = spec.lmcache.pd or LMCachePDSpec()
        return LMCachePDTopology(
            chunk_size=spec.lmcache.chunk_size,
            prefill_buffer_bytes=given.prefill_buffer_bytes,
            decode_buffer_bytes=given.decode_buffer_bytes,
            buffer_device=given.buffer_device or ("cuda" if spec.profile is Profile.GPU else "cpu"),
            backends=tuple(given.backends),
        )

    def plan_engine(self, spec: Spec, book: PortBook, site: EngineSite) -> EngineKV:
        bases = spec.ports

        def block(preferred: int, size: int, purpose: str, field: str) -> tuple[int, ...]:
            return book.claim_block(
                site.host, preferred, size, owner=site.name, purpose=purpose, field=field
            )

        if site.role is Role.PREFILL:
            telemetry = block(
                bases.nixl_telemetry, 1, "NIXL telemetry (Prometheus)", "ports.nixl_telemetry"
            )
            return LMCachePDSenderKV(nixl_telemetry_port=telemetry[0])
        init = block(bases.decode_pd_init, site.tp, "LMCache P/D init", "ports.decode_pd_init")
        alloc = block(bases.decode_pd_alloc, site.tp, "LMCache P/D alloc", "ports.decode_pd_alloc")
        # The receiver binds its init/alloc sockets here; prefillers are told advertise_host.
        bind = "0.0.0.0" if site.network == "bridge" else site.address
        return LMCachePDReceiverKV(init_ports=init, alloc_ports=alloc, bind_host=bind)

    def sidecars(self, engine: EnginePlan) -> tuple[SidecarPlan, ...]:
        return ()

    def sidecar_command(
        self, plan: Plan, engine: EnginePlan | None, sidecar: SidecarPlan
    ) -> list[str]:
        raise no_sidecar(self.kind, sidecar)

    def connector_config(self, plan: Plan, engine: EnginePlan) -> dict[str, Any]:
        # Seed A's settings: keep partial chunks (P/D must move every token's KV), a
        # per-instance RPC name, and decoders skip the last prompt token (the prefiller
        # returns its first token).
        extra: dict[str, Any] = {"discard_partial_chunks": False, "lmcache_rpc_port": engine.name}
        role = "kv_producer"
        if engine.role is Role.DECODE:
            role = "kv_consumer"
            extra["skip_last_n_tokens"] = 1
        return {
            "kv_connector": "LMCacheConnectorV1",
            "kv_role": role,
            "kv_connector_extra_config": extra,
        }

    def engine_env(self, plan: Plan, engine: EnginePlan) -> dict[str, str]:
        env = {
            "LMCACHE_CONFIG_FILE": LMCACHE_CONFIG_PATH,
            "LMCACHE_TRACK_USAGE": "false",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
            "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        }
        if isinstance(engine.kv, LMCachePDSenderKV):
            env |= _telemetry_env(plan, engine.kv.nixl_telemetry_port)
        return env

    def metrics_pages(self, plan: Plan, engine: EnginePlan) -> tuple[MetricsPage, ...]:
        kv = engine.kv
        if not isinstance(kv, LMCachePDSenderKV):
            return ()
        loopback = _TELEMETRY_LOCAL in _telemetry_env(plan, kv.nixl_telemetry_port)
        address = page_address(plan, engine.name, engine.host, loopback=loopback)
        page = MetricsPage(
            "nixl-telemetry",
            engine.name,
            engine.role.value,
            engine.host,
            address,
            kv.nixl_telemetry_port,
            engine=engine.name,
        )
        return (page,)

    def engine_ports(self, engine: EnginePlan) -> tuple[int, ...]:
        kv = engine.kv
        return (kv.nixl_telemetry_port,) if isinstance(kv, LMCachePDSenderKV) else ()

    def receiver_ports(self, engine: EnginePlan) -> ReceiverPorts | None:
        kv = engine.kv
        if not isinstance(kv, LMCachePDReceiverKV):
            return None
        return ReceiverPorts(engine.advertise_host, kv.init_ports, kv.alloc_ports)

    def engine_listening(self, engine: EnginePlan) -> list[tuple[str, int]]:
        # One LMCache cannot bind leaves them closed without any error while /health says 200.
        kv = engine.kv
        if not isinstance(kv, LMCachePDReceiverKV):
            return []
        return [(kv.probe_host, port) for port in (*kv.init_ports, *kv.alloc_ports)]

    def engine_config(self, plan: Plan, engine: EnginePlan) -> ConfigFile:
        return ConfigFile(
            f"lmcache-{engine.name}",
            f"lmcache/{engine.name}.yaml",
            LMCACHE_CONFIG_PATH,
            _lmcache_config(plan, engine),
        )

    def needs_cpu_connector(self, profile: Profile) -> bool:
        # vLLM's CPU build needs our KV connector for LMCache's in-process P/D.
        return profile is Profile.CPU

    def block_size(self, plan: Plan) -> int | None:
        return None  # LMCache moves its own chunks (lmcache.chunk_size), not vLLM's blocks

    def cudagraph_mode(self, plan: Plan) -> str | None:
        # Under vLLM's default full CUDA graphs for decode batches, LMCache's receiver finds no
        # attention metadata and skips its loads (start_load_kv returns at once), then stalls
        # once its buffer is full of chunks never loaded: on an H100 and on an H200. Piecewise
        # graphs (attention eager) loaded every request's KV on the H200 (docs/gpu-h200).
        return "PIECEWISE" if plan.profile is Profile.GPU else None

    def registration_url(self, plan: Plan, engine: EnginePlan) -> str | None:
        return None

    def stale_after(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        # A sender keeps its NIXL connection to each decoder it met: after a decoder restarts,
        # its "KV sent" notices never come (measured: 504 after 30 s) until the sender restarts.
        decoders = tuple(engine.name for engine in plan.decode)
        return {engine.name: decoders for engine in plan.prefill}

    def ends_with_peers(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        return {}  # a sender's stale connections are ``stale_after``'s: a decoder reconnects

    def maps_memory_of(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        # The sender WRITEs into each decoder's LMCache transfer buffer; on a GPU, over CUDA
        # IPC where they share a host (a buffer in host memory is not GPU memory).
        if _settings(plan).buffer_device != "cuda":
            return {}
        return cuda_ipc_peers(plan, plan.prefill, plan.decode)

    def verdict_sources(self, plan: Plan) -> VerdictSources:
        # LMCache's sender WRITEs into the decoder's buffer (ucp_put) and reports no network
        # figures of its own: NIXL's Prometheus exporter on the prefillers does.
        ports = tuple(_sender(engine).nixl_telemetry_port for engine in plan.prefill)
        speed = KvSpeedSource(
            engines=tuple(engine.name for engine in plan.prefill),
            ports=ports,
            operation="write",
            bytes_metric="agent_tx_bytes_total",
            seconds_metric="agent_xfer_time_total",
            seconds_per_unit=1e-6,  # microseconds
            transfers_metric="agent_tx_requests_num_total",
            # GPU KV moves GPU to GPU, except with LMCache's transfer buffer in host memory.
            memory="cuda" if _settings(plan).buffer_device == "cuda" else "host",
        )
        tokens = kv_prompt_tokens(plan.profile, _settings(plan).chunk_size)
        return VerdictSources(
            speed, local_compute_per_request=1, kv_prompt_tokens=tokens, load_log=_RETRIEVED
        )


def _settings(plan: Plan) -> LMCachePDTopology:
    return part_of(plan.topology, LMCachePDTopology, plan.stack)


def _sender(engine: EnginePlan) -> LMCachePDSenderKV:
    return part_of(engine.kv, LMCachePDSenderKV, engine.name)


_TELEMETRY_LOCAL = "NIXL_TELEMETRY_PROMETHEUS_LOCAL"  # listen on loopback only


def _telemetry_env(plan: Plan, port: int) -> dict[str, str]:
    env = {
        "NIXL_TELEMETRY_ENABLE": "y",
        "NIXL_TELEMETRY_EXPORTER": "prometheus",
        "NIXL_TELEMETRY_PROMETHEUS_PORT": str(port),
    }
    # Loopback only where the verdict's probes run on the same host; across hosts they read it
    # at the host's address (as they read vLLM's /metrics). On a bridge it is published on
    # loopback.
    if plan.network == "host" and not plan.is_multi_host:
        env[_TELEMETRY_LOCAL] = "y"
    return env


def _lmcache_config(plan: Plan, engine: EnginePlan) -> dict[str, Any]:
    settings = _settings(plan)
    config: dict[str, Any] = {
        "chunk_size": settings.chunk_size,
        # Chunk keys that do not depend on PYTHONHASHSEED (LMCache's builtin hash needs it
        # equal on every instance, else the decoder finds nothing and silently recomputes).
        "pre_caching_hash_algorithm": "sha256_cbor",
        # P/D keeps KV in its transfer buffer, not in LMCache's CPU cache (as in seed A).
        "local_cpu": False,
        "max_local_cpu_size": 0,
        "max_local_disk_size": 0,
        # P/D must move every token's KV, partial last chunk included.
        "save_unfull_chunk": True,
        "enable_pd": True,
        "transfer_channel": "nixl",
        "nixl_backends": list(settings.backends),
        "pd_buffer_device": settings.buffer_device,
    }
    return config | _role_config(plan, engine, settings)


def _role_config(plan: Plan, engine: EnginePlan, settings: LMCachePDTopology) -> dict[str, Any]:
    kv = engine.kv
    if isinstance(kv, LMCachePDReceiverKV):
        return {
            "pd_role": "receiver",
            "pd_buffer_size": settings.decode_buffer_bytes,
            "pd_peer_host": kv.bind_host,
            "pd_peer_init_port": list(kv.init_ports),
            "pd_peer_alloc_port": list(kv.alloc_ports),
        }
    return {
        "pd_role": "sender",
        "pd_buffer_size": settings.prefill_buffer_bytes,
        "pd_proxy_host": plan.router.advertise_host,
        "pd_proxy_port": plan.router.notices_port(),
    }


UNIT = LMCachePD()
