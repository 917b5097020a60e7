"""Compose service definitions (plain dicts), one function per concern.

Why the non-obvious settings are there (measured, see NOTES.md):
- GPU engines share the host PID namespace: with a private one UCX silently drops cuda_ipc
  and moves KV over TCP, ~850x slower, with correct results. The same happens when a
  container sees only its own GPU, so a same-host engine reserves its peers' GPUs too and
  picks its own with CUDA_VISIBLE_DEVICES (the plan's ``visible_gpus``/``cuda_devices``).
  ``ipc: host`` for CUDA IPC and LMCache shared memory, ``SYS_PTRACE`` for cross-process
  memory access, ``IPC_LOCK`` and unlimited memlock for RDMA memory registration; RDMA
  devices only where the plan moves KV between hosts (their absence fails container creation).
- CPU engines are pinned to one core each (the NIXL progress thread spins a whole core; two
  unpinned engines on two cores stall for the 30 s KV lease) and see an empty
  ``/sys/devices/system/node``: vLLM's NIXL worker otherwise reads the host NUMA layout,
  ignores the cpuset and fails ``sched_setaffinity``.
- Healthchecks have a finite ``start_period``: a vLLM that cannot bind its NIXL side channel
  hangs in "starting" forever instead of exiting.
"""

from __future__ import annotations

from typing import Any

from generator.plan import EnginePlan, Plan, SidecarPlan
from generator.render.bench import BenchSettings, bench_command
from generator.render.commands import engine_command
from generator.routers import router_of
from generator.services.model import ConfigFile
from generator.spec import GpuAccess, Profile
from generator.topologies import topology_of
from generator.topologies.nixl_mp import lmcache_server_command

__all__ = [
    "HF_HOME",
    "bench_service",
    "engine_service",
    "lmcache_service",
    "router_service",
]

HF_HOME = "/root/.cache/huggingface"
VLLM_CACHE = "/root/.cache/vllm"  # model-info and torch.compile caches: ~7 s (CPU) to minutes saved
_START_PERIOD = {Profile.GPU: "900s", Profile.CPU: "300s"}
Service = dict[str, Any]


def engine_service(
    plan: Plan, engine: EnginePlan, image: Service, config: ConfigFile | None, env_files: list[str]
) -> Service:
    topology = topology_of(plan)
    service: Service = {**image, "hostname": engine.name, "command": engine_command(plan, engine)}
    service["environment"] = _engine_env(plan, engine)
    service |= _network(plan, [engine.http_port, *topology.engine_ports(engine)])
    service |= _compute(plan, devices=engine.visible_gpus, cpus=engine.cpus, rdma=plan.rdma)
    service["environment"] |= _gpu_env(plan, engine.visible_gpus)
    service["volumes"] = _engine_volumes(plan)
    if config is not None:
        service["configs"] = [{"source": config.name, "target": config.target, "mode": 0o444}]
    if _token_secret(plan):
        service["secrets"] = ["hf_token"]
    if env_files:
        service["env_file"] = env_files
    # And the sockets the topology opens besides vLLM's (lmcache-pd decoders' receiver ports,
    # where LMCache binds them).
    listening = topology.engine_listening(engine)
    start = _START_PERIOD[plan.profile]
    service["healthcheck"] = _healthcheck(engine.http_port, "/health", start, listening)
    sidecars = [s.service for s in plan.sidecars if s.engine == engine.name]
    if sidecars:
        service["depends_on"] = {name: {"condition": "service_healthy"} for name in sidecars}
    return service | _common(plan, engine.role.value, engine.name, engine.host)


def lmcache_service(
    plan: Plan, engine: EnginePlan, sidecar: SidecarPlan, image: Service
) -> Service:
    service: Service = {**image, "hostname": sidecar.service}
    service["command"] = lmcache_server_command(plan, engine)
    service["environment"] = {"LMCACHE_TRACK_USAGE": "false", "PYTHONHASHSEED": "0"}
    # The server copies KV to and from its engine's GPUs (CUDA IPC; LMCache finds the device by
    # UUID, so the engine's other visible GPUs do not matter): it sees exactly those.
    service |= _network(plan, [sidecar.health_port])
    service |= _compute(plan, devices=engine.gpus, cpus=(), rdma=False)
    service["environment"] |= _gpu_env(plan, engine.gpus)
    service["healthcheck"] = _healthcheck(sidecar.health_port, sidecar.health_path, "120s")
    return service | _common(plan, sidecar.role, sidecar.service, engine.host)


def router_service(plan: Plan, image: Service, config: ConfigFile | None) -> Service:
    router, unit = plan.router, router_of(plan)
    service: Service = {**image, "hostname": router.service, "command": unit.command(plan)}
    service |= _network(plan, list(unit.published_ports(plan)), public=(router.port,))
    if plan.network == "bridge":
        for port in unit.private_ports(plan):
            service.setdefault("expose", []).append(str(port))
    if config is not None:
        service["configs"] = [{"source": config.name, "target": config.target, "mode": 0o444}]
    local = [engine.name for engine in plan.engines_on(router.host)]
    if local:
        service["depends_on"] = {name: {"condition": "service_healthy"} for name in local}
    service["healthcheck"] = _healthcheck(router.port, "/health", "120s")
    return service | _common(plan, "router", router.service, router.host)


def bench_service(plan: Plan, image: Service, env_files: list[str]) -> Service:
    """A one-off container for vLLM's serving benchmark (`docker compose run --rm bench`):
    the engine image has vLLM and the tokenizer; it reaches the router like a client."""
    # The decode image, built for the engines (same pull policy: never from a public name).
    service: Service = {
        "image": image["image"],
        "pull_policy": image["pull_policy"],
        "profiles": ["bench"],
    }
    service["command"] = bench_command(plan, BenchSettings())
    env = {"HF_HOME": HF_HOME}
    if plan.hf.offline:
        env["HF_HUB_OFFLINE"] = "1"
    if _token_secret(plan):
        env["HF_TOKEN_PATH"] = "/run/secrets/hf_token"
        service["secrets"] = ["hf_token"]
    service["environment"] = env
    if env_files:
        service["env_file"] = env_files
    if plan.network == "host":
        service["network_mode"] = "host"
    service["volumes"] = [f"model-cache:{HF_HOME}"]
    if plan.model.host_path is not None:
        service["volumes"].append(f"{plan.model.host_path}:{plan.model.id}:ro")
    return service | _common(plan, "bench", "bench", plan.router.host)


def _token_secret(plan: Plan) -> bool:
    return plan.hf.token is not None and plan.hf.token.is_secret


def _engine_env(plan: Plan, engine: EnginePlan) -> dict[str, str]:
    env = {"PYTHONHASHSEED": "0", "HF_HOME": HF_HOME, "VLLM_CACHE_ROOT": VLLM_CACHE}
    # (the same hash seed on every instance gives the same KV chunk keys)
    if plan.hf.offline:
        env["HF_HUB_OFFLINE"] = "1"
    if _token_secret(plan):
        env["HF_TOKEN_PATH"] = "/run/secrets/hf_token"  # a compose secret, never an env value
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
    return env | topology_of(plan).engine_env(plan, engine) | engine.extra_env


def _network(plan: Plan, published: list[int], public: tuple[int, ...] = ()) -> Service:
    """Host networking on GPUs (NIXL/RDMA advertise host addresses); a bridge on CPU, where
    only the router is published beyond loopback (LMCache's admin port exposes its env)."""
    if plan.network == "host":
        return {"network_mode": "host"}
    return {
        "ports": [
            f"{port}:{port}" if port in public else f"127.0.0.1:{port}:{port}" for port in published
        ]
    }


def _compute(plan: Plan, *, devices: tuple[int, ...], cpus: tuple[int, ...], rdma: bool) -> Service:
    """Namespaces, devices and limits of engines and LMCache servers."""
    if plan.profile is Profile.CPU:
        service: Service = {"shm_size": "1g"}  # Docker's 64 MiB /dev/shm breaks vLLM and LMCache
        if cpus:
            service["cpuset"] = ",".join(str(cpu) for cpu in cpus)
            service["cap_add"] = ["SYS_NICE"]
        return service
    service = {"ipc": "host", "pid": "host", "cap_add": ["IPC_LOCK", "SYS_PTRACE"]}
    service["ulimits"] = {"memlock": {"soft": -1, "hard": -1}}
    nodes = ["/dev/infiniband:/dev/infiniband"] if rdma else []
    access = plan.gpu_access
    if devices and access is GpuAccess.CDI:
        nodes += [f"nvidia.com/gpu={device}" for device in devices]
    elif devices and access is GpuAccess.NVIDIA_RUNTIME:
        service["runtime"] = "nvidia"  # the GPUs come from NVIDIA_VISIBLE_DEVICES (_gpu_env)
    elif devices:
        reservation = {
            "driver": "nvidia",
            "device_ids": [str(device) for device in devices],
            "capabilities": ["gpu"],
        }
        service["deploy"] = {"resources": {"reservations": {"devices": [reservation]}}}
    if nodes:
        service["devices"] = nodes
    return service


def _gpu_env(plan: Plan, visible: tuple[int, ...]) -> dict[str, str]:
    """Which of the container's GPUs a process uses. CUDA numbers a container's GPUs from 0;
    in PCI bus order (as nvidia-smi numbers the host's) they follow the host ids' order."""
    if not visible:
        return {}
    env: dict[str, str] = {}
    if plan.gpu_access is GpuAccess.NVIDIA_RUNTIME:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, visible))
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    return env


def _engine_volumes(plan: Plan) -> list[Any]:
    volumes: list[Any] = [f"model-cache:{HF_HOME}", f"vllm-cache:{VLLM_CACHE}"]
    if plan.model.host_path is not None:
        volumes.append(f"{plan.model.host_path}:{plan.model.id}:ro")
    if plan.profile is Profile.CPU:
        # An empty, read-only node directory: vLLM then keeps to the container's cpuset.
        volumes.append({"type": "tmpfs", "target": "/sys/devices/system/node", "read_only": True})
    return volumes


def _healthcheck(
    port: int, path: str, start_period: str, listening: list[tuple[str, int]] | None = None
) -> Service:
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}{path}', timeout=4)"
    if listening:
        targets = ", ".join(repr(target) for target in listening)
        connect = f"[socket.create_connection(t, 2).close() for t in ({targets},)]"
        probe = f"import socket; {probe}; {connect}"
    return {
        "test": ["CMD", "python3", "-c", probe],
        "interval": "5s",
        "timeout": "5s",
        "retries": 3,
        "start_period": start_period,
    }


def _common(plan: Plan, role: str, instance: str, host: str) -> Service:
    return {
        "init": True,  # reaps vLLM's worker processes; `down` takes ~1 s instead of 10
        "restart": "no",  # a crash must fail the workflow's wait, not loop quietly
        "stop_grace_period": "30s",
        "labels": {
            "org.xpyd.stack": plan.stack,
            "org.xpyd.role": role,
            "org.xpyd.instance": instance,
            "org.xpyd.host": host,
        },
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
    }
