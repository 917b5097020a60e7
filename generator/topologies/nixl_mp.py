"""nixl-mp: vLLM's NIXL hand-off (MultiConnector[NixlConnector, LMCacheMPConnector]) with one
`lmcache server` per vLLM instance, as LMCache's MP docs ("Disaggregated Prefill") run it.

The decoder pulls the prompt's KV from the prefiller with NIXL READs over the side channel
(one port per TP rank); each engine keeps its KV chunks in its own LMCache server, which the
workflow starts and waits for before the engines. With ``lmcache.p2p`` the servers also share
their L1s: a coordinator of the stack's own keeps membership, and each server reads the chunks
it misses from a peer (LMCache MP docs, p2p.rst).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from generator.errors import PlanError, SpecIssue
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import POD_IP_REF, POD_NAME_REF, EnginePlan, Plan, Role
from generator.plan.parts import (
    LMCacheServerPlan,
    NixlMPEngineKV,
    NixlMPTopology,
    P2PPlan,
    SidecarPlan,
    part_of,
)
from generator.plan.placement import Slot, place_engines
from generator.plan.ports import PortBook
from generator.plan.traces import receiver_url
from generator.spec import LMCacheServerSpec, Profile, RouterKind, Spec, Topology
from generator.topologies.base import (
    CounterRow,
    EngineSite,
    KvSpeedSource,
    ReceiverPorts,
    VerdictSources,
    baseline_room,
    cuda_ipc_peers,
    foreign_settings,
    kv_prompt_tokens,
    page_address,
)

__all__ = ["UNIT", "NixlMP"]

_CPU_L1_SIZE_GB = 0.25  # L1 is allocated up front on CPU; the tiny model needs little
_GPU_L1_SIZE_GB = 100.0  # the MP docs' value
_P2P_L1_ALIGN_BYTES = 65536  # what LMCache's P2P docs recommend
_COORDINATOR = "lmcache-coordinator"
_REAP_SILENT_ENGINE_S = 30


class NixlMP:
    kind = Topology.NIXL_MP
    default_router = RouterKind.VLLM_ROUTER
    router_protocol: Literal["lmcache-pd", "nixl", "none"] = "nixl"
    router_notices = False
    spec_sections = ("server", "p2p")
    port_fields = (
        "lmcache_zmq",
        "lmcache_http",
        "lmcache_metrics",
        "lmcache_coordinator",
        "lmcache_p2p",
    )
    extra_image_roles = ("lmcache",)

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        p_tp, d_tp = spec.prefill.tp, spec.decode.tp
        if max(p_tp, d_tp) % min(p_tp, d_tp) != 0:
            yield SpecIssue(
                "prefill.tp",
                f"prefill TP {p_tp} and decode TP {d_tp}: NIXL's heterogeneous TP needs one to "
                "divide the other",
                "pick TP sizes where the larger is a multiple of the smaller",
            )
        yield from baseline_room(spec)
        yield from _p2p_issues(spec)
        yield from _shared_gpu_pull(spec)
        yield from _chunk_of_whole_blocks(spec)

    def foreign_issues(self, spec: Spec) -> Iterator[SpecIssue]:
        yield from foreign_settings(spec, self.kind, self.spec_sections, self.port_fields)
        if "nixl" in spec.model_fields_set:
            yield SpecIssue(
                "nixl",
                f"is read by the nixl-mp topology only (this stack is {spec.topology.value}; "
                "lmcache-pd's transfer always pushes)",
                "remove the nixl section, or set topology: nixl-mp",
            )

    def plan_settings(self, spec: Spec, book: PortBook) -> NixlMPTopology:
        given = spec.lmcache.server or LMCacheServerSpec()
        cpu = spec.profile is Profile.CPU
        # On CPU the vLLM worker can only use engine-driven transfers; `auto` serves both.
        return NixlMPTopology(
            chunk_size=spec.lmcache.chunk_size,
            l1_size_gb=given.l1_size_gb or (_CPU_L1_SIZE_GB if cpu else _GPU_L1_SIZE_GB),
            eviction_policy=given.eviction_policy,
            supported_transfer_mode=given.supported_transfer_mode
            or ("auto" if cpu else "lmcache_driven"),
            server_extra_args=tuple(given.extra_args),
            transfer=spec.nixl.transfer,
            p2p=_p2p_plan(spec, book),
        )

    def plan_engine(self, spec: Spec, book: PortBook, site: EngineSite) -> NixlMPEngineKV:
        side = book.claim_block(
            site.host,
            spec.ports.nixl_side_channel,
            site.tp,
            owner=site.name,
            purpose="NIXL side channel",
            field="ports.nixl_side_channel",
        )
        return NixlMPEngineKV(side_channel_ports=side, lmcache_server=_server(spec, book, site))

    def sidecars(self, engine: EnginePlan) -> tuple[SidecarPlan, ...]:
        server = _kv(engine).lmcache_server
        return (
            SidecarPlan(
                service=server.service,
                role="lmcache",
                engine=engine.name,
                host=engine.host,
                health_port=server.http_port,
                health_path="/healthcheck",  # /health is 404 there
            ),
        )

    def sidecar_command(
        self, plan: Plan, engine: EnginePlan | None, sidecar: SidecarPlan
    ) -> list[str]:
        if engine is None:
            return _coordinator_command(_p2p_of(plan))
        return _lmcache_server_command(plan, engine)

    def connector_config(self, plan: Plan, engine: EnginePlan) -> dict[str, Any]:
        server = _kv(engine).lmcache_server
        role = "kv_producer" if engine.role is Role.PREFILL else "kv_consumer"
        connector = "NixlPushConnector" if _settings(plan).transfer == "push" else "NixlConnector"
        nixl: dict[str, Any] = {"kv_connector": connector, "kv_role": role}
        if plan.profile is Profile.CPU:
            nixl["kv_buffer_device"] = "cpu"
        # Its own server is on its host, or in its pod: a LeaderWorkerSet's followers share one
        # template, so none of them can name its own server's Service.
        local = plan.network == "host" or plan.pod_network
        lmcache_host = "127.0.0.1" if local else server.service
        mp = {
            "kv_connector": "LMCacheMPConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {
                "lmcache.mp.host": f"tcp://{lmcache_host}",
                "lmcache.mp.port": server.zmq_port,
            },
        }
        # Fail loudly on a failed KV load instead of silently recomputing the prompt. vLLM
        # reads this at the top level only (measured on 0.32: inside NixlConnector's entry it
        # is ignored).
        config: dict[str, Any] = {
            "kv_connector": "MultiConnector",
            "kv_role": role,
            "kv_load_failure_policy": "fail",
            "kv_connector_extra_config": {"connectors": [nixl, mp]},
        }
        if _settings(plan).transfer == "push":
            config["engine_id"] = push_engine_id(plan, engine)
        return config

    def engine_env(self, plan: Plan, engine: EnginePlan) -> dict[str, str]:
        # vLLM binds its side channel at this address: in a pod, the pod's IP (its name
        # resolves only once the pod is ready, after the side channel must be up).
        host = POD_IP_REF if plan.pod_network else engine.advertise_host
        return {
            "VLLM_NIXL_SIDE_CHANNEL_HOST": host,
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(_kv(engine).side_channel_ports[0]),
        }

    def metrics_pages(self, plan: Plan, engine: EnginePlan) -> tuple[MetricsPage, ...]:
        # LMCache 0.5.6 serves its metrics on its HTTP port: --prometheus-port does not listen.
        server = _kv(engine).lmcache_server
        loopback = _http_bind(plan) == "127.0.0.1"
        address = page_address(plan, server.service, engine.host, loopback=loopback)
        page = MetricsPage(
            "lmcache",
            server.service,
            "lmcache",
            engine.host,
            address,
            server.http_port,
            engine=engine.name,
        )
        return (page,)

    def engine_ports(self, engine: EnginePlan) -> tuple[int, ...]:
        return ()

    def receiver_ports(self, engine: EnginePlan) -> ReceiverPorts | None:
        return None  # the decoder pulls: no ports to tell

    def engine_listening(self, engine: EnginePlan) -> list[tuple[str, int]]:
        return []

    def engine_config(self, plan: Plan, engine: EnginePlan) -> ConfigFile | None:
        return None  # the servers take their settings as arguments

    def needs_cpu_connector(self, profile: Profile) -> bool:
        return False

    def block_size(self, plan: Plan) -> int | None:
        return _GPU_BLOCK_TOKENS if plan.profile is Profile.GPU else None

    def cudagraph_mode(self, plan: Plan) -> str | None:
        return None  # full CUDA graphs load NIXL's KV (H100, H200: docs/gpu-h200)

    def registration_url(self, plan: Plan, engine: EnginePlan) -> str | None:
        # The engine's LMCacheMPConnector registers its KV buffers with the server at start
        # and never again: a restarted server lists no engine, and every request hangs.
        server = _kv(engine).lmcache_server
        host = "127.0.0.1" if plan.network == "host" else server.service
        return f"http://{host}:{server.http_port}/status"

    def stale_after(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        if _settings(plan).p2p is None:
            return {}
        # With P2P each server keeps NIXL metadata for every peer it loaded from and does not
        # reconnect after that peer restarts (NIXL_ERR_REMOTE_DISCONNECT on each load).
        servers = [s.service for s in plan.sidecars if s.engine is not None]
        return {server: tuple(peer for peer in servers if peer != server) for server in servers}

    def ends_with_peers(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        if _settings(plan).transfer != "push":
            return {}
        # A decoder keeps the NIXL agent of each prefiller that pushed into it, by engine id,
        # and vLLM 0.32.0's push path never replaces it (its pull path does); with the
        # prefiller's id the same at each start (push_engine_id) the decoder would keep
        # notifying the gone process. Ended at once, it starts before the prefiller serves.
        prefillers = tuple(engine.name for engine in plan.prefill)
        return {engine.name: prefillers for engine in plan.decode}

    def maps_memory_of(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        if plan.profile is not Profile.GPU:
            return {}
        # The engine that moves the bytes maps its peers' KV (push: the prefiller WRITEs into
        # the decoders; pull: the decoder READs from the prefillers). Measured on one H200: a
        # killed decoder could not start again while its prefiller lived (41.87 GiB free).
        push = _settings(plan).transfer == "push"
        movers, targets = (plan.prefill, plan.decode) if push else (plan.decode, plan.prefill)
        mapped = cuda_ipc_peers(plan, movers, targets)
        # And each engine's `lmcache server` maps that engine's KV (its registration): measured
        # on one H100, a dead engine's 15.02 GiB stayed taken until LMCache's reaper dropped
        # it, which for a decoder (it never pings) is an hour. Its L1 goes with it: a cache.
        servers = {_kv(e).lmcache_server.service: (e.name,) for e in plan.engines}
        return mapped | servers

    def verdict_sources(self, plan: Plan) -> VerdictSources:
        # pull: the decoder READs from the prefiller (ucp_get); push: the prefiller WRITEs into
        # the decoder (ucp_put). The engine that moves the bytes records each transfer's bytes
        # and time (NIXL's own telemetry).
        push = _settings(plan).transfer == "push"
        movers = plan.prefill if push else plan.decode
        speed = KvSpeedSource(
            engines=tuple(engine.name for engine in movers),
            ports=tuple(engine.http_port for engine in movers),
            operation="write" if push else "read",
            bytes_metric="vllm:nixl_bytes_transferred_sum",
            seconds_metric="vllm:nixl_xfer_time_seconds_sum",
            seconds_per_unit=1.0,
            transfers_metric="vllm:nixl_xfer_time_seconds_count",
            memory="host" if plan.profile is Profile.CPU else "cuda",
            descriptors_metric="vllm:nixl_num_descriptors_sum",
        )
        # Decoder counters; under push the bytes are counted where they move (the speed row).
        failed = CounterRow("NIXL failed transfers", "vllm:nixl_num_failed_transfers_total", True)
        rows: tuple[CounterRow, ...] = (failed,)
        if not push:
            rows += (
                CounterRow("NIXL bytes transferred", "vllm:nixl_bytes_transferred_sum", False),
            )
        stores = tuple(
            (_kv(e).lmcache_server.service, _kv(e).lmcache_server.http_port) for e in plan.engines
        )
        tokens = kv_prompt_tokens(plan.profile, _settings(plan).chunk_size)
        p2p: tuple[tuple[str, str, int], ...] = ()
        if _settings(plan).p2p is not None:  # stores are in engine order
            pairs = zip(plan.engines, stores, strict=True)
            p2p = tuple((engine.name, service, port) for engine, (service, port) in pairs)
        return VerdictSources(speed, 0, tokens, rows, stores, p2p)


def _kv(engine: EnginePlan) -> NixlMPEngineKV:
    return part_of(engine.kv, NixlMPEngineKV, engine.name)


def _settings(plan: Plan) -> NixlMPTopology:
    return part_of(plan.topology, NixlMPTopology, plan.stack)


def _p2p_of(plan: Plan) -> P2PPlan:
    p2p = _settings(plan).p2p
    if p2p is None:  # only a P2P plan has a stack sidecar
        raise TypeError(f"{plan.stack}: a stack sidecar was asked for without lmcache.p2p")
    return p2p


# LMCache refuses P2P with an L1 outside pinned DRAM (LMCache MP docs, p2p.rst).
_P2P_INCOMPATIBLE = {
    "--gds-l1-path": "a GDS (NVMe) L1",
    "--l1-devdax-path": "a devdax L1",
}


def _p2p_issues(spec: Spec) -> Iterator[SpecIssue]:
    if spec.lmcache.p2p is None or spec.lmcache.server is None:
        return
    for arg in spec.lmcache.server.extra_args:
        flag = arg.split("=", 1)[0]
        if flag in _P2P_INCOMPATIBLE:
            yield SpecIssue(
                "lmcache.server.extra_args",
                f"{flag} makes {_P2P_INCOMPATIBLE[flag]}, which LMCache's P2P cannot share "
                "(lmcache.p2p is on)",
                f"remove {flag}, or remove lmcache.p2p",
            )


def push_engine_id(plan: Plan, engine: EnginePlan) -> str:
    """The engine's NIXL engine id under push, the same at every start of the engine.

    vllm-router (0.1.17) keeps each prefiller's push identity (engine id, side-channel host and
    port) from its first answer and sends decoders that identity while it sends the prefill, so
    after a restart the first requests name an engine id the new process does not have. The
    decoder's handshake then fails ("Remote NIXL agent engine ID mismatch") and vLLM 0.32.0
    stops its engine on that failed push (measured on one H100: the pair restarted in a cycle
    and served nothing). vLLM draws a fresh id per process unless given one. Under pull the id
    stays vLLM's: its pull path notices a new engine at a known address by the new id. In a
    pod, the pod's name: kept across its containers' restarts, its own for each replica."""
    return POD_NAME_REF if plan.pod_network else f"{plan.stack}-{engine.name}"


# vLLM's NIXL connector hands NIXL one descriptor per KV block, layer and K or V, and each costs
# UCX about the same time whatever its size (docs/facts.md): 128-token blocks moved 938 MiB per
# request at 129.5 GiB/s where vLLM's 16 moved it at 32.8 (one H100, seed A's preset; TTFT 412
# vs 440 ms, ITL 8.09 vs 8.19 ms).
_GPU_BLOCK_TOKENS = 128


def _chunk_of_whole_blocks(spec: Spec) -> Iterator[SpecIssue]:
    """LMCache's MP connector (0.5.6) refuses at start a chunk that is not a whole number of
    the engine's KV blocks ("LMCache chunk size ... must be a multiple of ... tokens_per_block")."""
    gpu_default = _GPU_BLOCK_TOKENS if spec.profile is Profile.GPU else None
    block = spec.model.block_size or gpu_default
    chunk = spec.lmcache.chunk_size
    if block is None or chunk % block == 0:
        return
    whose = "model.block_size" if spec.model.block_size else "nixl-mp's block on GPUs"
    nearest = max(block, chunk - chunk % block)
    yield SpecIssue(
        "lmcache.chunk_size",
        f"{chunk} tokens is not a whole number of KV blocks ({block} tokens, {whose}): "
        "LMCache's MP connector refuses it at start",
        f"set lmcache.chunk_size to a multiple of {block} (e.g. {nearest})"
        + ("" if spec.model.block_size else ", or model.block_size to a divisor of it"),
    )


def _shared_gpu_pull(spec: Spec) -> Iterator[SpecIssue]:
    """A decoder that pulls from a prefiller on its own GPU reads over tcp/lo: UCX serves a
    same-GPU READ that way (~0.5 GiB/s measured on an H200), so the verdict fails."""
    if spec.profile is not Profile.GPU or not spec.gpu.share or spec.nixl.transfer != "pull":
        return
    try:
        slots = place_engines(spec)
    except PlanError:
        return  # the planner says what is wrong with the placement
    shared = _gpu_of_both_roles(slots)
    if shared is not None:
        yield SpecIssue(
            "nixl.transfer",
            f"is pull, but {shared} (gpu.share): UCX serves a same-GPU read over tcp/lo "
            "(~0.5 GiB/s), so KV crawls and the verdict fails",
            "set nixl.transfer: push (the prefiller writes over cuda_ipc), or give each engine "
            "GPUs of its own",
        )


def _gpu_of_both_roles(slots: list[Slot]) -> str | None:
    """The first GPU a prefiller and a decoder share, said in words; None if none is."""
    first: dict[tuple[str, int, Role], str] = {}
    for slot in slots:
        for gpu in slot.devices:
            first.setdefault((slot.host, gpu, slot.role), f"{slot.role.value}-{slot.index}")
    for (host, gpu, role), name in first.items():
        other = first.get((host, gpu, Role.DECODE))
        if role is Role.PREFILL and other is not None:
            return f"{name} and {other} share GPU {gpu} on host {host}"
    return None


def _p2p_plan(spec: Spec, book: PortBook) -> P2PPlan | None:
    given = spec.lmcache.p2p
    if given is None:
        return None
    host = spec.hosts[0]  # the first host, as the router's default
    port = book.claim_block(
        host.name,
        spec.ports.lmcache_coordinator,
        1,
        owner=_COORDINATOR,
        purpose="LMCache coordinator",
        field="ports.lmcache_coordinator",
    )[0]
    return P2PPlan(
        coordinator=_COORDINATOR,
        coordinator_host=host.name,
        coordinator_address=host.address,
        coordinator_port=port,
        transfer_engine=given.transfer_engine,
        lookup_timeout_s=given.lookup_timeout_s,
        load_timeout_s=given.load_timeout_s,
    )


def _coordinator_command(p2p: P2PPlan) -> list[str]:
    # Every interface: servers on other hosts (or containers) register with it. It keeps
    # membership only, never KV.
    return ["lmcache", "coordinator", "--host", "0.0.0.0", "--port", str(p2p.coordinator_port)]


def _p2p_args(plan: Plan, engine: EnginePlan, p2p: P2PPlan) -> list[str]:
    """Register with the coordinator at an address every peer reaches (the server's service
    name on a bridge, its host's address with host networking) and advertise the transfer
    channel there; peers also dial the server's ZMQ port at that address."""
    server = _kv(engine).lmcache_server
    own = engine.address if plan.network == "host" else server.service
    coordinator = p2p.coordinator_address if plan.network == "host" else p2p.coordinator
    args = ["--coordinator-url", f"http://{coordinator}:{p2p.coordinator_port}"]
    args += ["--coordinator-advertise-ip", own]
    args += ["--p2p-advertise-url", f"{own}:{server.p2p_port}"]
    args += ["--p2p-listen-url", f"0.0.0.0:{server.p2p_port}"]
    args += ["--p2p-lookup-timeout", f"{p2p.lookup_timeout_s:g}"]
    args += ["--p2p-load-timeout", f"{p2p.load_timeout_s:g}"]
    args += ["--p2p-transfer-engine", p2p.transfer_engine]
    return [*args, "--l1-align-bytes", str(_P2P_L1_ALIGN_BYTES)]


def _server(spec: Spec, book: PortBook, site: EngineSite) -> LMCacheServerPlan:
    service = f"lmcache-{site.name}"
    bases = spec.ports

    def one(preferred: int, purpose: str, field: str) -> int:
        return book.claim_block(
            site.host, preferred, 1, owner=service, purpose=purpose, field=field
        )[0]

    return LMCacheServerPlan(
        service=service,
        zmq_port=one(bases.lmcache_zmq, "LMCache ZMQ", "ports.lmcache_zmq"),
        http_port=one(bases.lmcache_http, "LMCache http", "ports.lmcache_http"),
        metrics_port=one(bases.lmcache_metrics, "LMCache metrics", "ports.lmcache_metrics"),
        p2p_port=None
        if spec.lmcache.p2p is None
        else one(bases.lmcache_p2p, "LMCache P2P transfer channel", "ports.lmcache_p2p"),
    )


def _http_bind(plan: Plan) -> str:
    """On a bridge network peers reach the server by service name, so bind all interfaces of
    the container; with host networking only the co-located engine needs it, and observe's
    Prometheus where the server runs on another host than Prometheus's first one."""
    scraped_from_afar = plan.observe is not None and plan.is_multi_host
    return "127.0.0.1" if plan.network == "host" and not scraped_from_afar else "0.0.0.0"


def _lmcache_server_command(plan: Plan, engine: EnginePlan) -> list[str]:
    server, settings = _kv(engine).lmcache_server, _settings(plan)
    bind = _http_bind(plan)
    p2p = settings.p2p
    # P2P peers dial the server's ZMQ port from their own hosts.
    zmq_bind = bind if p2p is None else "0.0.0.0"
    args = ["lmcache", "server", "--host", zmq_bind, "--port", str(server.zmq_port)]
    args += ["--http-host", bind, "--http-port", str(server.http_port)]
    args += ["--prometheus-port", str(server.metrics_port)]
    args += ["--l1-size-gb", f"{settings.l1_size_gb:g}"]
    args += ["--eviction-policy", settings.eviction_policy]
    args += ["--chunk-size", str(settings.chunk_size), "--instance-id", engine.name]
    args += ["--supported-transfer-mode", settings.supported_transfer_mode]
    if plan.profile is Profile.GPU:
        # The server maps its engine's KV over CUDA IPC and keeps a killed engine's mapped
        # (its GPU memory taken) until its reaper drops the silent registration: 120 s by
        # default; on an H100 the restarted prefiller found 14.61 of 79.18 GiB free meanwhile.
        # 30 s is LMCache's floor (3 x its engines' 10 s heartbeat); it scans every 7.5 s.
        args += ["--worker-reap-timeout-seconds", str(_REAP_SILENT_ENGINE_S)]
    if p2p is not None:
        args += _p2p_args(plan, engine, p2p)
    if (receiver := receiver_url(plan)) is not None:
        # LMCache's MP docs' tracing: spans and, from then on, its metrics pushed there.
        args += ["--enable-tracing", "--otlp-endpoint", receiver]
    return [*args, *settings.server_extra_args]


UNIT = NixlMP()
