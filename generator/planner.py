"""``make_plan``: Spec -> Plan. Pure and deterministic. It sits above the units it consults
(generator/topologies/, generator/routers/), which sit above the plan's data
(generator/plan/): what differs between topologies and router kinds (their settings, their
own ports) comes from them. Ports are claimed in a fixed order: fixed ones, the router's,
then engine by engine, the stack's own services, observability's last.
"""

from __future__ import annotations

from generator.errors import PlanError
from generator.plan.models import EnginePlan, HostPlan, Network, Plan, Role
from generator.plan.observe import (
    GRAFANA_SERVICE,
    OTEL_SERVICE,
    PROMETHEUS_SERVICE,
    RECEIVER_SERVICE,
    ObservePlan,
)
from generator.plan.parts import RouterPlan, SidecarPlan
from generator.plan.placement import (
    GpuView,
    Slot,
    check_gpu_shares,
    gpu_views,
    own_gpu_views,
    place_engines,
)
from generator.plan.ports import PortBook
from generator.plan.resolve import resolve_hf, resolve_model, resolve_ucx
from generator.plan.warnings import collect_warnings
from generator.routers import RouterSite, router_kind, router_unit, router_warnings
from generator.runtimes.kinds import runtime_kind
from generator.spec import GroupSpec, HostSpec, Profile, Spec
from generator.topologies import EngineSite, TopologyUnit, topology_unit

__all__ = ["make_plan"]

_DISAGGREGATED_ROLES = (2, 10)  # LWS v0.10.0's DisaggregatedSet: spec.roles' min and max


def make_plan(spec: Spec, *, pod_network: bool = False) -> Plan:
    """``pod_network``: plan for a cluster where each engine is a pod with its own address
    (the Kubernetes export): the bridge's addressing (every service reached by its name, every
    socket bound on all interfaces), and each engine sees only its own GPUs (the device plugin
    hands a pod exactly what it requests)."""
    # Host networking on GPUs (NIXL and RDMA advertise host addresses), across hosts (KV and
    # side channels must reach the other host's address) and where the runtime has no bridge
    # (local processes); a bridge for single-host cpu stacks in containers.
    multi_host = len(spec.hosts) > 1
    runtime = runtime_kind(spec.runtime)
    gpu = spec.profile is Profile.GPU
    host_network = (gpu or multi_host or runtime.host_network) and not pod_network
    network: Network = "host" if host_network else "bridge"
    topology = topology_unit(spec.topology)
    book = PortBook()
    slots = place_engines(spec)
    if gpu:  # cores shared (cpu.share) split nothing between engines
        check_gpu_shares(spec, slots)
    _claim_fixed_ports(spec, book, slots)
    router = _plan_router(
        spec, book, network, notices=topology.router_notices, pod_network=pod_network
    )
    http = _common_http_port(spec, book, slots) if router.discovers_pods() else None
    nodes = [node for slot in slots for node in slot.nodes()]
    views = (own_gpu_views(nodes) if pod_network else gpu_views(nodes)) if gpu else {}
    hosts = {host.name: host for host in spec.hosts}
    engines = [
        _plan_engine(
            spec,
            book,
            network,
            slot,
            views.get(slot),
            host=hosts[slot.host],
            topology=topology,
            http=http,
        )
        for slot in slots
    ]
    followers = [
        _plan_follower(
            spec, book, network, leader, slot, view=views.get(slot), hosts=hosts, topology=topology
        )
        for leader, placed in zip(engines, slots, strict=True)
        for slot in placed.followers
    ]
    settings = topology.plan_settings(spec, book)
    sidecars = settings.stack_sidecars() + tuple(
        sidecar for engine in [*engines, *followers] for sidecar in topology.sidecars(engine)
    )
    observe = _plan_observe(spec, book)  # last: its ports never move another's
    services = _services_by_host([*engines, *followers], sidecars, router)
    if observe is not None:
        services.setdefault(observe.host, []).extend(observe.services)
    plan = Plan(
        stack=spec.name,
        topology=settings,
        profile=spec.profile,
        runtime=spec.runtime,
        process=spec.process if "process" in runtime.sections else None,
        slurm=spec.slurm if "slurm" in runtime.sections else None,
        recovery=spec.recovery,
        network=network,
        pod_network=pod_network,
        kubernetes=spec.kubernetes if pod_network else None,
        rdma=_rdma(spec, slots),
        ucx=resolve_ucx(spec),
        gpu_access=spec.gpu.access,
        model=resolve_model(spec),
        hf=resolve_hf(spec),
        images=spec.images,
        hosts=tuple(_plan_host(host, services.get(host.name, [])) for host in spec.hosts),
        prefill=tuple(e for e in engines if e.role is Role.PREFILL),
        decode=tuple(e for e in engines if e.role is Role.DECODE),
        followers=tuple(followers),
        router=router,
        sidecars=sidecars,
        ports=book.table(),
        observe=observe,
    )
    if pod_network:
        _check_engine_sets(spec, plan)
    warnings = (*collect_warnings(plan, spec), *router_warnings(spec))
    return plan.model_copy(update={"warnings": warnings})


def _check_engine_sets(spec: Spec, plan: Plan) -> None:
    """A DisaggregatedSet holds 2 to 10 roles (LWS v0.10.0's CRD): here one per engine."""
    if spec.kubernetes.engines != "disaggregatedset":
        return
    count = len(plan.engines)
    if not _DISAGGREGATED_ROLES[0] <= count <= _DISAGGREGATED_ROLES[1]:
        low, high = _DISAGGREGATED_ROLES
        raise PlanError(
            "kubernetes.engines",
            f"a DisaggregatedSet holds {low} to {high} roles, one per engine; this stack "
            f"has {count} engines",
            fix="use kubernetes.engines: statefulsets",
        )


def _rdma(spec: Spec, slots: list[Slot]) -> bool:
    """RDMA devices only where KV crosses hosts (or the spec asks): mapping /dev/infiniband
    into a container fails its creation on a host that has none."""
    if spec.networking.rdma is not None:
        return spec.networking.rdma
    nodes = [node for slot in slots for node in slot.nodes()]  # an engine's ranks on each
    prefill_hosts = {node.host for node in nodes if node.role is Role.PREFILL}
    decode_hosts = {node.host for node in nodes if node.role is Role.DECODE}
    crosses = any(p != d for p in prefill_hosts for d in decode_hosts)
    return spec.profile is Profile.GPU and crosses


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


def _plan_router(
    spec: Spec, book: PortBook, network: Network, *, notices: bool, pod_network: bool
) -> RouterPlan:
    unit = router_unit(router_kind(spec))
    host, address = _router_host(spec)
    port = (
        spec.router.port
        or book.claim_block(
            host, unit.default_port, 1, owner="router", purpose="router port", field="router.port"
        )[0]
    )
    site = RouterSite(
        host=host,
        address=address,
        advertise_host=address if network == "host" else "router",
        port=port,
        policy=spec.router.policy,
        session_header=spec.router.session_header,
        extra_args=tuple(spec.router.extra_args),
        notices=notices,
        pod_network=pod_network,
    )
    return unit.plan_router(spec, book, site)


def _plan_engine(
    spec: Spec,
    book: PortBook,
    network: Network,
    slot: Slot,
    view: GpuView | None,
    *,
    host: HostSpec,
    topology: TopologyUnit,
    http: int | None = None,
) -> EnginePlan:
    name = f"{slot.role.value}-{slot.index}"
    group: GroupSpec = getattr(spec, slot.role.value)
    http = http or slot.http_port or _claim_http(spec, book, slot, name)
    site = EngineSite(name, slot.role, slot.host, host.address, network, group.tp)
    kv = topology.plan_engine(spec, book, site)
    gpu = spec.profile is Profile.GPU
    return EnginePlan(
        name=name,
        role=slot.role,
        index=slot.index,
        host=slot.host,
        address=host.address,
        advertise_host=host.address if network == "host" else name,
        gpus=slot.devices if gpu else (),
        visible_gpus=view.visible if view else (),
        cuda_devices=view.selected if view else (),
        cpus=() if gpu else slot.devices,
        tp=group.tp,
        http_port=http,
        gpu_memory_utilization=group.gpu_memory_utilization,
        extra_args=tuple(group.extra_args),
        extra_env=dict(group.env),
        secret_env=tuple(group.secret_env),
        kv=kv,
        nodes=group.nodes,
        master_port=_claim_master(spec, book, slot, name) if group.nodes > 1 else None,
        node_page=_claim_node_page(spec, book, slot.host, name) if group.nodes > 1 else None,
    )


def _claim_master(spec: Spec, book: PortBook, slot: Slot, name: str) -> int:
    field = "ports.engine_master"
    purpose = "torch.distributed rendezvous (its nodes' TP group)"
    return book.claim_block(
        slot.host, spec.ports.engine_master, 1, owner=name, purpose=purpose, field=field
    )[0]


def _claim_node_page(spec: Spec, book: PortBook, host: str, name: str) -> int:
    purpose = "its supervisor's page (a node of an engine over several hosts)"
    field = "ports.node_page"
    return book.claim_block(
        host, spec.ports.node_page, 1, owner=name, purpose=purpose, field=field
    )[0]


def _plan_follower(
    spec: Spec,
    book: PortBook,
    network: Network,
    leader: EnginePlan,
    slot: Slot,
    *,
    view: GpuView | None,
    hosts: dict[str, HostSpec],
    topology: TopologyUnit,
) -> EnginePlan:
    """Node ``slot.node_rank`` of ``leader``'s engine: a headless vLLM on its own host with
    its share of the TP ranks, and (nixl-mp) its own LMCache server, as each node needs one
    (docs/facts.md, "One engine over two nodes")."""
    name = f"{leader.name}-node{slot.node_rank}"
    host = hosts[slot.host]
    page = _claim_node_page(spec, book, slot.host, name)  # its vLLM serves no API
    site = EngineSite(name, slot.role, slot.host, host.address, network, leader.tp)
    gpu = spec.profile is Profile.GPU
    return leader.model_copy(
        update={
            "name": name,
            "host": slot.host,
            "address": host.address,
            "advertise_host": host.address if network == "host" else name,
            "gpus": slot.devices if gpu else (),
            "visible_gpus": view.visible if view else (),
            "cuda_devices": view.selected if view else (),
            "cpus": () if gpu else slot.devices,
            "http_port": page,
            "node_page": page,
            "kv": topology.plan_engine(spec, book, site),
            "node_rank": slot.node_rank,
            "leader": leader.name,
            "master_port": leader.master_port,
        }
    )


def _claim_http(spec: Spec, book: PortBook, slot: Slot, name: str) -> int:
    base = spec.ports.prefill_http if slot.role is Role.PREFILL else spec.ports.decode_http
    field = f"ports.{slot.role.value}_http"
    return book.claim_block(slot.host, base, 1, owner=name, purpose="vLLM http", field=field)[0]


def _common_http_port(spec: Spec, book: PortBook, slots: list[Slot]) -> int:
    """One HTTP port for every engine, where the router finds engine pods by label: it
    reaches each at its pod IP and one port. Each pod has its own address, so one number in
    every pod is fine; it is reserved on each host, so no other port of any pod there (its
    `lmcache server`, side channels, metrics) takes it."""
    fixed = next((slot for slot in slots if slot.http_port is not None), None)
    if fixed is not None:
        raise PlanError(
            f"placement.{fixed.role.value}.http_ports",
            "vllm-router's pod discovery reaches every engine pod at one port: an engine's "
            "own HTTP port does not apply in the Kubernetes export",
            fix="remove placement.<role>.http_ports, or set router.pod_discovery: false",
        )
    owners = [(slot.host, f"{slot.role.value}-{slot.index}") for slot in slots]
    return book.claim_common(
        owners, spec.ports.prefill_http, purpose="vLLM http", field="ports.prefill_http"
    )


def _services_by_host(
    engines: list[EnginePlan], sidecars: tuple[SidecarPlan, ...], router: RouterPlan
) -> dict[str, list[str]]:
    """Each host's services in start order: the stack's own sidecars, then each engine's
    sidecars and the engine; the router last (one pass: plans of thousands of engines stay
    linear)."""
    sidecars_of: dict[str | None, list[str]] = {}
    services: dict[str, list[str]] = {}
    for sidecar in sidecars:
        if sidecar.engine is None:
            services.setdefault(sidecar.host, []).append(sidecar.service)
        else:
            sidecars_of.setdefault(sidecar.engine, []).append(sidecar.service)
    for engine in engines:
        services.setdefault(engine.host, []).extend(
            [*sidecars_of.get(engine.name, ()), engine.name]
        )
    services.setdefault(router.host, []).append(router.service)
    return services


def _plan_host(host: HostSpec, services: list[str]) -> HostPlan:
    return HostPlan(
        name=host.name,
        address=host.address,
        gpus=tuple(host.gpus or ()),
        cpus=tuple(host.cpus or ()),
        services=tuple(services),
        docker=host.docker,
    )


def _plan_observe(spec: Spec, book: PortBook) -> ObservePlan | None:
    observe = spec.observe
    if not observe.enabled:
        return None
    host = spec.hosts[0]
    # Grafana comes as an image: by default on GPU hosts that run containers.
    by_default = spec.profile is Profile.GPU and runtime_kind(spec.runtime).containers
    grafana = observe.grafana if observe.grafana is not None else by_default
    # The collector comes as an image: GPU hosts under compose; elsewhere our receiver.
    ours = not (spec.profile is Profile.GPU and runtime_kind(spec.runtime).containers)
    traces = RECEIVER_SERVICE if ours else OTEL_SERVICE

    def claim(field: str, owner: str, purpose: str) -> int:
        base: int = getattr(spec.ports, field)
        return book.claim_block(
            host.name, base, 1, owner=owner, purpose=purpose, field=f"ports.{field}"
        )[0]

    return ObservePlan(
        host=host.name,
        address=host.address,
        scrape_interval_s=observe.scrape_interval_s,
        public=observe.publish,
        prometheus_port=claim("prometheus", PROMETHEUS_SERVICE, "Prometheus"),
        grafana_port=claim("grafana", GRAFANA_SERVICE, "Grafana") if grafana else None,
        otel_port=claim("otel_collector", traces, "OTLP (gRPC)") if observe.traces else None,
        receiver_http_port=claim("otlp_receiver_http", RECEIVER_SERVICE, "OTLP receiver (HTTP)")
        if observe.traces and ours
        else None,
        kv_floor_gib_s=observe.kv_floor_gib_s,
    )
