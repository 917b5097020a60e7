"""The services of a stack, one function per kind (engine, LMCache server, router, bench).

Why the non-obvious settings are there (measured: docs/facts.md):
- GPU engines share the host PID namespace: with a private one UCX silently drops cuda_ipc
  and moves KV over TCP, ~850x slower, with correct results. The same happens when a
  container sees only its own GPU, so a same-host engine reserves its peers' GPUs too and
  picks its own with CUDA_VISIBLE_DEVICES (the plan's ``visible_gpus``/``cuda_devices``).
  ``ipc: host`` for CUDA IPC and LMCache shared memory, ``SYS_PTRACE`` for cross-process
  memory access, ``IPC_LOCK`` and unlimited memlock for RDMA memory registration; RDMA
  devices only where the plan moves KV between hosts (their absence fails container creation).
- CPU engines are pinned to one core each (NIXL's stock progress thread spins a whole core;
  two unpinned engines on two cores stalled for the 30 s KV lease) and see an empty
  ``/sys/devices/system/node``: vLLM's NIXL worker otherwise reads the host NUMA layout,
  ignores the cpuset and fails ``sched_setaffinity``.
- Engines and LMCache servers give NIXL's UCX progress thread the plan's poll timeout
  (``NIXL_PTHR_DELAY_ENV``, read by the images' patch of NIXL's Python agent): NIXL hard-codes
  0, and the thread then spins 60-100% of a core per engine on an idle stack. It sleeps on the
  UCX worker's event fd, so KV traffic still wakes it at once; the timeout only bounds a
  sleep: no cost measured under load on cpu or on an H100 (``networking.nixl_idle_delay_us``).
- Healthchecks have a finite ``start_period``: a vLLM that cannot bind its NIXL side channel
  hangs in "starting" forever instead of exiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from generator.plan import EnginePlan, Plan, SidecarPlan
from generator.plan.models import POD_IP_REF
from generator.plan.start_order import gpus_started_alone
from generator.plan.traces import receiver_url, traces_endpoint
from generator.routers import router_of
from generator.services.bench import bench_command, default_preset, preset_settings
from generator.services.commands import engine_command
from generator.services.model import (
    BindMount,
    ConfigFile,
    Dependency,
    DeviceNode,
    GpuRequest,
    Health,
    HttpEndpoint,
    ImageRef,
    Mount,
    NamedVolume,
    NetworkMode,
    PeerWatch,
    PublishedPort,
    Service,
    TmpfsMount,
    Ulimit,
)
from generator.spec import GpuAccess, Profile
from generator.supervise import LOCK_DIR_ENV
from generator.topologies import topology_of

__all__ = [
    "HF_HOME",
    "NIXL_PTHR_DELAY_ENV",
    "START_LOCKS",
    "bench_service",
    "engine_service",
    "gpu_env",
    "lmcache_service",
    "python_health",
    "router_service",
    "stack_sidecar_service",
]

HF_HOME = "/root/.cache/huggingface"
VLLM_CACHE = "/root/.cache/vllm"  # model-info and torch.compile caches: ~7 s (CPU) to minutes saved
_START_PERIOD_S = {Profile.GPU: 900, Profile.CPU: 300}
_LMCACHE_ENV = {"LMCACHE_TRACK_USAGE": "false", "PYTHONHASHSEED": "0"}
_SHM_MIB = 1024  # Docker's 64 MiB /dev/shm breaks vLLM and LMCache
_HF_TOKEN_PATH = "/run/secrets/hf_token"  # a secret, never an env value
START_LOCKS = "start-locks"  # the volume of shared GPUs' start locks (compose; every stack's)
_START_LOCKS_DIR = "/run/xpyd/start-locks"
NIXL_PTHR_DELAY_ENV = "XPYD_NIXL_PTHR_DELAY_US"  # the images' NIXL patch reads it
# A one-process CPU engine's worker in its engine core's process (vLLM's uni executor, as on
# one GPU): vLLM's CPU platform swaps it for a worker process of its own, one more vLLM import
# (~6 s of a core), only while this is 1. AsyncLLM keeps its engine core in a process of its
# own either way. Measured: ready in 22.5-23.5 s against 29.1 s on one AMD EPYC core
# (docs/facts.md).
IN_PROCESS_WORKER_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def engine_service(
    plan: Plan,
    engine: EnginePlan,
    image: ImageRef,
    config: ConfigFile | None,
    env_files: tuple[str, ...],
    *,
    sidecars: Sequence[SidecarPlan] | None = None,
    alone_gpus: AbstractSet[int] | None = None,
) -> Service:
    """``sidecars``: the engine's own (its LMCache server), and ``alone_gpus``: its host's
    GPUs whose engines start one at a time (``gpus_started_alone``), when the caller has them
    at hand (else found in the plan: a scan of every sidecar or engine, per engine)."""
    topology = topology_of(plan)
    service = Service(
        engine.name, engine.host, engine.role.value, image, tuple(engine_command(plan, engine))
    )
    ports = [engine.http_port, *topology.engine_ports(engine)]
    if engine.node_page is not None and engine.node_page != engine.http_port:
        ports.append(engine.node_page)  # a leader's supervisor page, which its followers watch
    service = _identity(plan, _networked(plan, service, ports), engine.name)
    service = replace(
        _computing(plan, service, devices=engine.visible_gpus, cpus=engine.cpus, rdma=plan.rdma),
        env=_engine_env(plan, engine),
        mounts=_engine_mounts(plan),
        configs=(config,) if config is not None else (),
        secrets=_secrets(plan),
        env_files=env_files,
        passed_env=engine.secret_env,
    )
    # And the sockets the topology opens besides vLLM's (lmcache-pd decoders' receiver ports,
    # where LMCache binds them).
    start = _START_PERIOD_S[plan.profile]
    health = python_health(engine.http_port, "/health", start, topology.engine_listening(engine))
    if not engine.is_follower:  # a follower's page is its supervisor's: up is all it says
        # Up (/health) is not serving: as the workflow's engine wait, /v1/models must answer.
        health = replace(health, ready=HttpEndpoint(engine.http_port, "/v1/models"))
    if sidecars is None:
        sidecars = [s for s in plan.sidecars if s.engine == engine.name]
    peers = _peer_watches(plan, engine.name) + _node_watches(plan, engine)
    service = replace(
        service,
        health=health,
        registered_at=topology.registration_url(plan, engine),
        restarts_with=peers,
        depends_on=_healthy([sidecar.service for sidecar in sidecars]),
        max_restarts=plan.recovery.max_restarts,
        # Only a supervisor waits its turn: a service never restarted starts once, in `up`'s order.
        starts_alone_on=(alone := _starts_alone_on(plan, engine, alone_gpus)),
        # Its turn ends, and its peers are watched, once it serves (a run that has not served
        # met no peer: one ending meanwhile leaves nothing stale).
        started_when=f"{engine.url}/health" if alone or peers else None,
        page_port=engine.node_page,
    )
    if not alone:
        return service
    # The engines sharing a GPU see one folder of start locks (the process runtime: its state).
    return replace(
        service,
        env=service.env | {LOCK_DIR_ENV: _START_LOCKS_DIR},
        mounts=(*service.mounts, NamedVolume(START_LOCKS, _START_LOCKS_DIR)),
    )


def _starts_alone_on(
    plan: Plan, engine: EnginePlan, alone: AbstractSet[int] | None
) -> tuple[int, ...]:
    if not engine.gpus or not plan.recovery.max_restarts:
        return ()
    if alone is None:
        alone = gpus_started_alone(plan, (e for e in plan.engines if e.host == engine.host))
    return tuple(gpu for gpu in engine.gpus if gpu in alone)


def _peer_watches(plan: Plan, name: str) -> tuple[PeerWatch, ...]:
    """The engines whose restart leaves ``name`` talking to a process that is gone (the
    topology's ``stale_after``: an lmcache-pd prefiller's decoders), those whose end leaves its
    state about them stale (``ends_with_peers``: a NIXL push decoder's prefillers), and those
    whose GPU memory it maps (``maps_memory_of``: a NIXL pusher's decoders). Peers that go
    stale on each other (P2P servers) are left to `up`: watching each other they would
    restart each other in turn."""
    topology = topology_of(plan)
    stale, maps = topology.stale_after(plan), topology.maps_memory_of(plan)
    ends = topology.ends_with_peers(plan)
    if not stale.get(name) and not maps.get(name) and not ends.get(name):
        return ()  # most services: then no lookup table either (one per engine is quadratic)
    engines = {engine.name: engine for engine in plan.engines}
    mapped, ending = set(maps.get(name, ())), set(ends.get(name, ()))
    stale_peers = [p for p in stale.get(name, ()) if name not in stale.get(p, ())]
    peers = dict.fromkeys([*stale_peers, *ends.get(name, ()), *maps.get(name, ())])
    return tuple(
        PeerWatch(
            peer,
            f"{engines[peer].url}/metrics",
            maps_memory=peer in mapped,
            gone_ends=peer in ending,
            stale=peer in stale_peers,
        )
        for peer in peers
        if peer in engines
    )


def _node_watches(plan: Plan, engine: EnginePlan) -> tuple[PeerWatch, ...]:
    """The nodes of an engine over several hosts end together: none notices its peer's death
    (measured: docs/facts.md), and a new node cannot join the others' running group. The
    leader watches each follower's supervisor page, each follower the leader's: a newer start
    or a page gone ends it too, and its supervisor starts it again into a new group."""
    if engine.nodes == 1 or plan.pod_network:  # there LeaderWorkerSet recreates the group
        return ()
    leader = plan.leader_of(engine) if engine.is_follower else engine
    peers = (leader,) if engine.is_follower else plan.nodes_of(engine)[1:]
    return tuple(
        PeerWatch(
            peer.name, f"http://{_page_host(plan, peer)}:{peer.node_page}/metrics", gone_ends=True
        )
        for peer in peers
        if peer.node_page is not None
    )


def _page_host(plan: Plan, node: EnginePlan) -> str:
    """Where the other nodes reach a node's page: its host's address (engines over several
    hosts run with host networking), its service's name on a bridge."""
    return node.address if plan.network == "host" else node.name


def lmcache_service(
    plan: Plan,
    engine: EnginePlan,
    sidecar: SidecarPlan,
    image: ImageRef,
    *,
    stack_sidecars: Sequence[SidecarPlan] | None = None,
) -> Service:
    """``stack_sidecars``: the stack's own sidecars (no engine's), when the caller has them at
    hand (else found in the plan)."""
    command = tuple(topology_of(plan).sidecar_command(plan, engine, sidecar))
    service = Service(sidecar.service, engine.host, sidecar.role, image, command)
    service = _identity(plan, _networked(plan, service, [sidecar.health_port]), sidecar.service)
    # The server copies KV to and from its engine's GPUs (CUDA IPC; LMCache finds the device by
    # UUID, so the engine's other visible GPUs do not matter): it sees exactly those.
    service = _computing(plan, service, devices=engine.gpus, cpus=(), rdma=False)
    health = python_health(sidecar.health_port, sidecar.health_path, 120)
    # The stack's sidecars on this host (the P2P coordinator) come up healthy first: a server
    # with P2P on registers with it at start. Across hosts the workflow's order does it.
    if stack_sidecars is None:
        stack_sidecars = [s for s in plan.sidecars if s.engine is None]
    stack = [s.service for s in stack_sidecars if s.host == engine.host]
    # A server with P2P on makes a NIXL agent (its transfer channel): the same patched
    # progress thread as the engines', which spins a core idle without a poll timeout.
    env = _LMCACHE_ENV | _nixl_idle_env(plan)
    if receiver_url(plan) is not None:
        env = env | {"OTEL_SERVICE_NAME": sidecar.service}  # whose spans and metrics
    return replace(
        service,
        env=env,
        health=health,
        restarts_with=_peer_watches(plan, sidecar.service),  # on a GPU: it maps its engine's KV
        depends_on=_healthy(stack),
        max_restarts=plan.recovery.max_restarts,
    )


def stack_sidecar_service(plan: Plan, sidecar: SidecarPlan, image: ImageRef) -> Service:
    """A service of the whole stack that the engines' sidecars need (the P2P coordinator):
    no GPUs, no pinned cores."""
    command = tuple(topology_of(plan).sidecar_command(plan, None, sidecar))
    service = Service(sidecar.service, sidecar.host, sidecar.role, image, command)
    service = _identity(plan, _networked(plan, service, [sidecar.health_port]), sidecar.service)
    health = python_health(sidecar.health_port, sidecar.health_path, 120)
    return replace(
        service, env=_LMCACHE_ENV, health=health, max_restarts=plan.recovery.max_restarts
    )


def router_service(plan: Plan, image: ImageRef, config: ConfigFile | None) -> Service:
    router, unit = plan.router, router_of(plan)
    service = Service(router.service, router.host, "router", image, tuple(unit.command(plan)))
    published = list(unit.published_ports(plan))
    service = _identity(plan, _networked(plan, service, published, router.port), router.service)
    exposed = unit.private_ports(plan) if plan.network == "bridge" else ()
    local = [engine.name for engine in plan.engines_on(router.host)]
    return replace(
        service,
        exposed=tuple(exposed),
        configs=(config,) if config is not None else (),
        depends_on=_healthy(local),
        health=python_health(router.port, "/health", 120),
        max_restarts=plan.recovery.max_restarts,
    )


def bench_service(plan: Plan, image: ImageRef, env_files: tuple[str, ...]) -> Service:
    """A one-off container for vLLM's serving benchmark (`docker compose run --rm bench`):
    the engine image has vLLM and the tokenizer; it reaches the router like a client."""
    # The decode image, built for the engines (same pull policy: never from a public name).
    command = tuple(bench_command(plan, preset_settings(default_preset(plan.profile))))
    service = Service("bench", plan.router.host, "bench", replace(image, build=None), command)
    env = {"HF_HOME": HF_HOME}
    if plan.hf.offline:
        env["HF_HUB_OFFLINE"] = "1"
    if _secrets(plan):
        env["HF_TOKEN_PATH"] = _HF_TOKEN_PATH
    return replace(
        service,
        on_demand=True,
        env=env,
        env_files=env_files,
        network=NetworkMode(plan.network),
        secrets=_secrets(plan),
        mounts=_model_mounts(plan),
        labels=_labels(plan, "bench", "bench", plan.router.host),
    )


def _secrets(plan: Plan) -> tuple[str, ...]:
    token = plan.hf.token
    return ("hf_token",) if token is not None and token.is_secret else ()


def _engine_env(plan: Plan, engine: EnginePlan) -> dict[str, str]:
    env = {"PYTHONHASHSEED": "0", "HF_HOME": HF_HOME, "VLLM_CACHE_ROOT": VLLM_CACHE}
    # (the same hash seed on every instance gives the same KV chunk keys)
    if plan.hf.offline:
        env["HF_HUB_OFFLINE"] = "1"
    if _secrets(plan):
        env["HF_TOKEN_PATH"] = _HF_TOKEN_PATH
    if traces_endpoint(plan) is not None:
        env["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] = "true"  # the collector speaks plain gRPC
        env["OTEL_SERVICE_NAME"] = engine.name  # whose spans: OpenTelemetry's resource reads it
    if plan.ucx.tls:
        env["UCX_TLS"] = plan.ucx.tls
    if plan.ucx.net_devices:
        env["UCX_NET_DEVICES"] = plan.ucx.net_devices
    # UCX prints the protocol and transport it selects (cuda_ipc, rc, tcp...) to the log once
    # per new endpoint configuration: how the smoke verdict names the KV transport.
    env["UCX_PROTO_INFO"] = "y"
    if plan.profile is Profile.GPU:
        env["NCCL_CUMEM_ENABLE"] = "1"
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # index i = the i-th visible GPU by bus id
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, engine.cuda_devices))
    else:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(cpu) for cpu in engine.cpus)
    if engine.nodes > 1:
        # Where the other nodes reach this node's message queues. vLLM guesses it from the
        # default route, and a node without one says 0.0.0.0: measured under Slurm, the
        # leader then waited for its follower forever after loading the weights.
        env["VLLM_HOST_IP"] = POD_IP_REF if plan.pod_network else engine.address
    env |= _nixl_idle_env(plan) | topology_of(plan).engine_env(plan, engine)
    if plan.profile is Profile.CPU and engine.tp == 1 and engine.nodes == 1:
        env |= IN_PROCESS_WORKER_ENV  # over lmcache-pd's 1 (its example's, for GPUs)
    return env | engine.extra_env


def _nixl_idle_env(plan: Plan) -> dict[str, str]:
    """NIXL's idle progress thread's poll timeout, where the plan asks for one (unset: NIXL's
    own 0, the patch's default)."""
    delay = plan.ucx.nixl_idle_delay_us
    return {NIXL_PTHR_DELAY_ENV: str(delay)} if delay else {}


def _networked(plan: Plan, service: Service, published: list[int], public: int = 0) -> Service:
    """Host networking on GPUs (NIXL/RDMA advertise host addresses); a bridge on CPU, where
    only the router is published beyond loopback (LMCache's admin port exposes its env)."""
    if plan.network == "host":
        return replace(service, network=NetworkMode.HOST)
    ports = tuple(PublishedPort(port, public=port == public) for port in published)
    return replace(service, network=NetworkMode.BRIDGE, ports=ports)


def _computing(
    plan: Plan, service: Service, *, devices: tuple[int, ...], cpus: tuple[int, ...], rdma: bool
) -> Service:
    """Namespaces, devices and limits of engines and LMCache servers."""
    if plan.profile is Profile.CPU:
        capabilities = ("SYS_NICE",) if cpus else ()
        return replace(service, shm_size_mib=_SHM_MIB, cpuset=cpus, capabilities=capabilities)
    gpus = GpuRequest(devices, plan.gpu_access) if devices else None
    return replace(
        service,
        host_ipc=True,
        host_pid=True,
        capabilities=("IPC_LOCK", "SYS_PTRACE"),
        ulimits=(Ulimit("memlock", -1, -1),),
        devices=(DeviceNode("/dev/infiniband", "/dev/infiniband"),) if rdma else (),
        gpus=gpus,
        gpu_env=gpu_env(gpus),
    )


def gpu_env(gpus: GpuRequest | None) -> dict[str, str]:
    """How the runtime picks the container's GPUs where it reads the environment (the nvidia
    runtime). CUDA numbers a container's GPUs from 0; in PCI bus order (as nvidia-smi numbers
    the host's) they follow the host ids' order."""
    if gpus is None or gpus.access is not GpuAccess.NVIDIA_RUNTIME:
        return {}
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(map(str, gpus.device_ids)),
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }


def _model_mounts(plan: Plan) -> tuple[Mount, ...]:
    mounts: list[Mount] = [NamedVolume("model-cache", HF_HOME)]
    if plan.model.host_path is not None:
        mounts.append(BindMount(plan.model.host_path, plan.model.id, read_only=True))
    return tuple(mounts)


def _engine_mounts(plan: Plan) -> tuple[Mount, ...]:
    model, rest = _model_mounts(plan)[:1], _model_mounts(plan)[1:]
    mounts: list[Mount] = [*model, NamedVolume("vllm-cache", VLLM_CACHE), *rest]
    if plan.profile is Profile.CPU:
        # An empty, read-only node directory: vLLM then keeps to the container's cpuset.
        mounts.append(TmpfsMount("/sys/devices/system/node", read_only=True))
    return tuple(mounts)


def python_check(
    port: int, path: str, listening: Sequence[tuple[str, int]] = ()
) -> tuple[str, ...]:
    """A check run inside the container: ``path`` answers on ``port`` and each of
    ``listening`` takes a connection (exit 0: all of them)."""
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}{path}', timeout=4)"
    if listening:
        targets = ", ".join(repr(target) for target in listening)
        connect = f"[socket.create_connection(t, 2).close() for t in ({targets},)]"
        probe = f"import socket; {probe}; {connect}"
    return ("python3", "-c", probe)


def python_health(
    port: int, path: str, start_period_s: int, listening: list[tuple[str, int]] | None = None
) -> Health:
    sockets = tuple(listening or ())
    command = python_check(port, path, sockets)
    endpoints = (HttpEndpoint(port, path),)
    return Health(command, start_period_s, endpoints=endpoints, listening=sockets)


def _healthy(services: list[str]) -> tuple[Dependency, ...]:
    return tuple(Dependency(name) for name in services)


def _identity(plan: Plan, service: Service, instance: str) -> Service:
    labels = _labels(plan, service.role, instance, service.host)
    return replace(service, hostname=instance, labels=labels)


def _labels(plan: Plan, role: str, instance: str, host: str) -> dict[str, str]:
    return {
        "org.xpyd.stack": plan.stack,
        "org.xpyd.role": role,
        "org.xpyd.instance": instance,
        "org.xpyd.host": host,
    }
