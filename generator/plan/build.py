"""``make_plan``: Spec -> Plan. Pure and deterministic: same spec, same plan."""

from __future__ import annotations

from generator.plan.models import (
    EnginePlan,
    HostPlan,
    LMCacheServerPlan,
    Network,
    Plan,
    Role,
    RouterPlan,
)
from generator.plan.placement import GpuView, Slot, gpu_views, place_engines
from generator.plan.ports import PortBook
from generator.plan.resolve import resolve_hf, resolve_model, resolve_ucx
from generator.plan.warnings import collect_warnings
from generator.spec import (
    GroupSpec,
    LMCachePDSpec,
    LMCacheServerSpec,
    Profile,
    RouterKind,
    Spec,
    Topology,
)

__all__ = ["make_plan"]

# Seed A's proxy listens on 9100, node_exporter's port on most GPU hosts: the seed stacks keep
# it (router.port), everything else defaults to 8100.
_DEFAULT_ROUTER_PORT = {RouterKind.PROXY: 8100, RouterKind.VLLM_ROUTER: 30000}
_CPU_L1_SIZE_GB = 0.25  # L1 is allocated up front on CPU; the tiny model needs little
_GPU_L1_SIZE_GB = 100.0  # the MP docs' value


def make_plan(spec: Spec) -> Plan:
    network: Network = "host" if spec.profile is Profile.GPU else "bridge"
    book = PortBook()
    slots = place_engines(spec)
    _claim_fixed_ports(spec, book, slots)
    router = _plan_router(spec, book, network)
    views = gpu_views(slots) if spec.profile is Profile.GPU else {}
    engines = [_plan_engine(spec, book, network, slot, views.get(slot)) for slot in slots]
    prefill = tuple(e for e in engines if e.role is Role.PREFILL)
    decode = tuple(e for e in engines if e.role is Role.DECODE)
    hosts = tuple(
        _plan_host(spec, position, engines, router) for position in range(len(spec.hosts))
    )
    plan = Plan(
        stack=spec.name,
        topology=spec.topology,
        profile=spec.profile,
        network=network,
        rdma=_rdma(spec, slots),
        ucx=resolve_ucx(spec),
        gpu_access=spec.gpu.access,
        model=resolve_model(spec),
        hf=resolve_hf(spec),
        images=spec.images,
        lmcache_chunk_size=spec.lmcache.chunk_size,
        hosts=hosts,
        prefill=prefill,
        decode=decode,
        router=router,
        lmcache_server=_lmcache_server(spec),
        lmcache_pd=_lmcache_pd(spec),
        ports=book.table(),
    )
    return plan.model_copy(update={"warnings": tuple(collect_warnings(plan, spec))})


def _rdma(spec: Spec, slots: list[Slot]) -> bool:
    """RDMA devices only where KV crosses hosts (or the spec asks): mapping /dev/infiniband
    into a container fails its creation on a host that has none."""
    if spec.networking.rdma is not None:
        return spec.networking.rdma
    prefill_hosts = {slot.host for slot in slots if slot.role is Role.PREFILL}
    decode_hosts = {slot.host for slot in slots if slot.role is Role.DECODE}
    crosses = any(p != d for p in prefill_hosts for d in decode_hosts)
    return spec.profile is Profile.GPU and crosses


def _lmcache_server(spec: Spec) -> LMCacheServerSpec | None:
    if spec.topology is not Topology.NIXL_MP:
        return None
    given = spec.lmcache.server or LMCacheServerSpec()
    cpu = spec.profile is Profile.CPU
    l1 = given.l1_size_gb or (_CPU_L1_SIZE_GB if cpu else _GPU_L1_SIZE_GB)
    # On CPU the vLLM worker can only use engine-driven transfers; `auto` serves both kinds.
    mode = given.supported_transfer_mode or ("auto" if cpu else "lmcache_driven")
    return given.model_copy(update={"l1_size_gb": l1, "supported_transfer_mode": mode})


def _lmcache_pd(spec: Spec) -> LMCachePDSpec | None:
    if spec.topology is not Topology.LMCACHE_PD:
        return None
    given = spec.lmcache.pd or LMCachePDSpec()
    device = given.buffer_device or ("cuda" if spec.profile is Profile.GPU else "cpu")
    return given.model_copy(update={"buffer_device": device})


def _router_host(spec: Spec) -> tuple[str, str]:
    name = spec.router.host or spec.hosts[0].name
    host = next(h for h in spec.hosts if h.name == name)
    return host.name, host.address


def _claim_fixed_ports(spec: Spec, book: PortBook, slots: list[Slot]) -> None:
    host, _ = _router_host(spec)
    fixed = (
        (spec.router.port, "router port", "router.port"),
        (spec.router.prometheus_port, "router metrics", "router.prometheus_port"),
        (spec.router.notify_port, "proxy ZMQ notices", "router.notify_port"),
    )
    for port, purpose, field in fixed:
        if port is not None:
            book.claim_fixed(host, port, owner="router", purpose=purpose, field=field)
    for slot in slots:
        if slot.http_port is not None:
            book.claim_fixed(
                slot.host,
                slot.http_port,
                owner=f"{slot.role.value}-{slot.index}",
                purpose="vLLM http",
                field=f"placement.{slot.role.value}.http_ports",
            )


def _plan_router(spec: Spec, book: PortBook, network: Network) -> RouterPlan:
    kind = spec.router_kind
    host, address = _router_host(spec)

    def one(preferred: int, purpose: str, field: str) -> int:
        return book.claim_block(host, preferred, 1, owner="router", purpose=purpose, field=field)[0]

    port = spec.router.port or one(_DEFAULT_ROUTER_PORT[kind], "router port", "router.port")
    metrics = None
    if kind is RouterKind.VLLM_ROUTER:
        metrics = spec.router.prometheus_port or one(
            spec.ports.router_metrics, "router metrics", "ports.router_metrics"
        )
    notify = None
    if spec.topology is Topology.LMCACHE_PD:
        notify = spec.router.notify_port or one(
            spec.ports.proxy_notify, "proxy ZMQ notices", "ports.proxy_notify"
        )
    return RouterPlan(
        kind=kind,
        host=host,
        address=address,
        advertise_host=address if network == "host" else "router",
        port=port,
        metrics_port=metrics,
        notify_port=notify,
        policy=spec.router.policy,
        session_header=spec.router.session_header,
        extra_args=tuple(spec.router.extra_args),
    )


def _plan_engine(
    spec: Spec, book: PortBook, network: Network, slot: Slot, view: GpuView | None
) -> EnginePlan:
    name = f"{slot.role.value}-{slot.index}"
    host = next(h for h in spec.hosts if h.name == slot.host)
    group: GroupSpec = getattr(spec, slot.role.value)
    tp = group.tp
    bases = spec.ports

    def block(
        preferred: int, size: int, purpose: str, field: str, owner: str = name
    ) -> tuple[int, ...]:
        return book.claim_block(
            slot.host, preferred, size, owner=owner, purpose=purpose, field=field
        )

    base_http = bases.prefill_http if slot.role is Role.PREFILL else bases.decode_http
    http_field = f"ports.{slot.role.value}_http"
    http = slot.http_port or block(base_http, 1, "vLLM http", http_field)[0]
    fields: dict[str, object] = {}
    if spec.topology is Topology.NIXL_MP:
        fields["side_channel_ports"] = block(
            bases.nixl_side_channel, tp, "NIXL side channel", "ports.nixl_side_channel"
        )
        fields["lmcache_server"] = _plan_lmcache_server(spec, book, slot, name)
    elif slot.role is Role.PREFILL:
        fields["nixl_telemetry_port"] = block(
            bases.nixl_telemetry, 1, "NIXL telemetry (Prometheus)", "ports.nixl_telemetry"
        )[0]
    else:
        fields["pd_init_ports"] = block(
            bases.decode_pd_init, tp, "LMCache P/D init", "ports.decode_pd_init"
        )
        fields["pd_alloc_ports"] = block(
            bases.decode_pd_alloc, tp, "LMCache P/D alloc", "ports.decode_pd_alloc"
        )
        # The receiver binds its init/alloc sockets here; prefillers are told advertise_host.
        fields["pd_bind_host"] = "0.0.0.0" if network == "bridge" else host.address
    if view is not None:
        fields["visible_gpus"], fields["cuda_devices"] = view.visible, view.selected
    gpu = spec.profile is Profile.GPU
    return EnginePlan(
        name=name,
        role=slot.role,
        index=slot.index,
        host=slot.host,
        address=host.address,
        advertise_host=host.address if network == "host" else name,
        gpus=slot.devices if gpu else (),
        cpus=() if gpu else slot.devices,
        tp=tp,
        http_port=http,
        gpu_memory_utilization=group.gpu_memory_utilization,
        extra_args=tuple(group.extra_args),
        extra_env=dict(group.env),
        **fields,
    )


def _plan_lmcache_server(spec: Spec, book: PortBook, slot: Slot, engine: str) -> LMCacheServerPlan:
    service = f"lmcache-{engine}"
    bases = spec.ports

    def one(preferred: int, purpose: str, field: str) -> int:
        return book.claim_block(
            slot.host, preferred, 1, owner=service, purpose=purpose, field=field
        )[0]

    return LMCacheServerPlan(
        service=service,
        zmq_port=one(bases.lmcache_zmq, "LMCache ZMQ", "ports.lmcache_zmq"),
        http_port=one(bases.lmcache_http, "LMCache http", "ports.lmcache_http"),
        metrics_port=one(bases.lmcache_metrics, "LMCache metrics", "ports.lmcache_metrics"),
    )


def _plan_host(
    spec: Spec, position: int, engines: list[EnginePlan], router: RouterPlan
) -> HostPlan:
    host = spec.hosts[position]
    services: list[str] = []
    for engine in engines:
        if engine.host == host.name:
            if engine.lmcache_server is not None:
                services.append(engine.lmcache_server.service)
            services.append(engine.name)
    if router.host == host.name:
        services.append(router.service)
    return HostPlan(
        name=host.name,
        address=host.address,
        gpus=tuple(host.gpus or ()),
        cpus=tuple(host.cpus or ()),
        services=tuple(services),
    )
