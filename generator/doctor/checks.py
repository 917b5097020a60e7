"""Doctor's cheap checks of one host: Docker and Compose, GPU access, the GPUs and their links,
RDMA and memlock. Each returns rows; none changes the machine. (/dev/shm, ports, disk, token
and addresses are in ``host_checks.py``.)"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import psutil

from generator.cpu_features import cpu_features, request_amx_permission
from generator.doctor.context import HostView
from generator.doctor.gpus import GpuInfo, describe_link, link_between
from generator.doctor.host_checks import (
    address_checks,
    disk_checks,
    port_checks,
    shm_checks,
    token_checks,
)
from generator.doctor.report import CheckRow, Verdict
from generator.runtimes.kinds import runtime_kind
from generator.spec import GpuAccess, Isolation

__all__ = ["CHECKS", "run_checks"]

_MIN_DOCKER = (20, 10)
_MIN_COMPOSE = (2, 20)
_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
_TOOLKIT_BINARIES = ("nvidia-container-runtime-hook", "nvidia-container-cli")

Check = Callable[[HostView], list[CheckRow]]


def run_checks(view: HostView) -> list[CheckRow]:
    return [row for check in CHECKS for row in check(view)]


def _version(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.lstrip("v").split("+")[0].split("-")[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def docker_checks(view: HostView) -> list[CheckRow]:
    runtime = view.plan.runtime
    if not runtime_kind(runtime).containers:
        return [CheckRow("Docker engine", "-", f"{runtime.value} runtime: not used", Verdict.SKIP)]
    facts = view.facts
    if facts is None:
        return [
            CheckRow(
                "Docker engine",
                f">= {'.'.join(map(str, _MIN_DOCKER))}, answering",
                "no engine answers (docker info failed)",
                Verdict.FAIL,
                "start dockerd (bash .ci/setup installs and starts one) or set DOCKER_HOST",
            )
        ]
    engine_ok = _version(facts.server_version) >= _MIN_DOCKER
    compose = facts.compose_version
    compose_ok = compose is not None and _version(compose) >= _MIN_COMPOSE
    return [
        CheckRow(
            "Docker engine",
            f">= {'.'.join(map(str, _MIN_DOCKER))}",
            facts.server_version,
            Verdict.PASS if engine_ok else Verdict.FAIL,
            "" if engine_ok else "upgrade Docker Engine",
        ),
        CheckRow(
            "Docker Compose",
            f"v2 plugin >= {'.'.join(map(str, _MIN_COMPOSE))}",
            compose or "missing (`docker compose version` failed)",
            Verdict.PASS if compose_ok else Verdict.FAIL,
            "" if compose_ok else "install the docker-compose-plugin (Compose v2)",
        ),
    ]


def process_checks(view: HostView) -> list[CheckRow]:
    """The tools the process runtime starts services with: taskset where cores are pinned;
    unshare, as root, for isolation: container."""
    settings = view.plan.process  # set for the runtimes that start local processes
    if settings is None:
        return []
    needed = ["taskset"] if any(engine.cpus for engine in view.engines) else []
    container = settings.isolation is Isolation.CONTAINER
    needed += ["unshare"] if container else []
    missing = [tool for tool in needed if shutil.which(tool) is None]
    root = os.geteuid() == 0
    problems = [f"{', '.join(missing)} missing"] if missing else []
    problems += ["not root"] if container and not root else []
    return [
        CheckRow(
            f"process runtime (isolation: {settings.isolation.value})",
            ", ".join(needed) + (" and root" if container else "") if needed else "-",
            "; ".join(problems) or "present",
            Verdict.FAIL if problems else Verdict.PASS,
            "install util-linux; isolation: container needs root (or use isolation: plain)"
            if problems
            else "",
        )
    ]


def gpu_access_checks(view: HostView) -> list[CheckRow]:
    """Which ways of handing GPUs to containers this host supports, against the spec's."""
    if not runtime_kind(view.plan.runtime).containers:
        return []
    if not view.gpu_profile:
        return [CheckRow("GPU access", "-", "cpu profile: no GPUs", Verdict.SKIP)]
    wanted = view.plan.gpu_access
    supported = supported_gpu_access(view)
    found = ", ".join(f"{mode.value}: {'yes' if ok else 'no'}" for mode, ok in supported.items())
    ok = supported[wanted]
    others = [mode.value for mode, usable in supported.items() if usable and mode is not wanted]
    fix = ""
    if not ok:
        fix = (
            f"set gpu.access: {others[0]} in the spec"
            if others
            else "install the NVIDIA container toolkit (nvidia-ctk), then restart dockerd"
        )
    verdict = Verdict.PASS if ok else Verdict.FAIL
    return [CheckRow(f"GPU access (gpu.access: {wanted.value})", "supported", found, verdict, fix)]


def supported_gpu_access(view: HostView) -> dict[GpuAccess, bool]:
    facts = view.facts
    runtimes = facts.runtimes if facts else ()
    hook = any(shutil.which(binary) for binary in _TOOLKIT_BINARIES)
    cdi_dirs = (facts.cdi_spec_dirs if facts else ()) or ()
    return {
        GpuAccess.DEVICE_REQUESTS: hook,
        GpuAccess.NVIDIA_RUNTIME: "nvidia" in runtimes,
        # The engine must have CDI on (it then lists its spec dirs) and a spec for NVIDIA GPUs.
        GpuAccess.CDI: bool(cdi_dirs) and _nvidia_cdi_spec(cdi_dirs or _CDI_DIRS),
    }


def _nvidia_cdi_spec(folders: tuple[str, ...]) -> bool:
    for folder in folders:
        for path in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            try:
                if "nvidia.com/gpu" in path.read_text(encoding="utf-8", errors="replace"):
                    return True
            except OSError:
                continue
    return False


def gpu_checks(view: HostView) -> list[CheckRow]:
    if not view.gpu_profile or not view.engines:
        return [CheckRow("GPUs", "-", "no GPU engines on this host", Verdict.SKIP)]
    needed = sorted({gpu for engine in view.engines for gpu in engine.gpus})
    if view.gpus is None:
        return [
            CheckRow(
                "GPUs",
                f"{len(needed)} GPUs: {_ids(needed)}",
                "nvidia-smi missing or failing (no NVIDIA driver?)",
                Verdict.FAIL,
                "install the NVIDIA driver; `nvidia-smi` must list the GPUs",
            )
        ]
    present = {gpu.index: gpu for gpu in view.gpus}
    missing = [gpu for gpu in needed if gpu not in present]
    models = sorted(
        {f"{present[g].name} {present[g].memory_mib // 1024} GiB" for g in needed if g in present}
    )
    found = f"{len(view.gpus)} GPUs ({', '.join(models) or 'none of the planned ones'})"
    rows = [
        CheckRow(
            "GPUs",
            f"{len(needed)} GPUs: {_ids(needed)}",
            found + (f"; missing {_ids(missing)}" if missing else ""),
            Verdict.FAIL if missing else Verdict.PASS,
            f"list only GPUs nvidia-smi shows in hosts[].gpus (has {_ids(sorted(present))})"
            if missing
            else "",
        )
    ]
    return rows + _memory_rows(view, present) + _link_rows(view)


_VLLM_DEFAULT_SHARE = 0.9  # vLLM's --gpu-memory-utilization when the spec sets none


def _memory_rows(view: HostView, present: dict[int, GpuInfo]) -> list[CheckRow]:
    """vLLM refuses to start when a GPU has less free memory than its share asks for; engines
    sharing a GPU (gpu.share) ask for the sum of theirs."""
    rows = []
    for gpu in sorted({gpu for engine in view.engines for gpu in engine.gpus}):
        info = present.get(gpu)
        if info is None or info.memory_used_mib is None:
            continue
        engines = [engine for engine in view.engines if gpu in engine.gpus]
        if any(engine.name in view.running for engine in engines):
            continue  # this stack's own engines hold that memory (a second up, bench)
        share = sum(engine.gpu_memory_utilization or _VLLM_DEFAULT_SHARE for engine in engines)
        needed_mib = share * info.memory_mib
        free_mib = info.memory_mib - info.memory_used_mib
        ok = free_mib >= needed_mib
        names = ", ".join(engine.name for engine in engines)
        rows.append(
            CheckRow(
                f"GPU {gpu} free memory",
                f">= {needed_mib / 1024:.0f} GiB ({share:.2f} of {info.memory_mib / 1024:.0f} GiB "
                f"for {names})",
                f"{free_mib / 1024:.0f} GiB free",
                Verdict.PASS if ok else Verdict.FAIL,
                ""
                if ok
                else "free the GPU (nvidia-smi shows who holds it), or lower "
                "<role>.gpu_memory_utilization",
            )
        )
    return rows


def _link_rows(view: HostView) -> list[CheckRow]:
    rows = []
    for prefill, decode in view.plan.same_host_pairs(view.host.name):
        if prefill.gpus[0] == decode.gpus[0]:
            rows.append(_same_gpu_row(prefill.name, decode.name, prefill.gpus[0]))
            continue
        link = link_between(view.links or {}, prefill.gpus[0], decode.gpus[0])
        fast = link.startswith("NV")
        rows.append(
            CheckRow(
                f"GPU link {prefill.name} -> {decode.name}",
                "NVLink (KV at 250+ GiB/s)",
                f"GPU {prefill.gpus[0]} <-> {decode.gpus[0]}: {link} ({describe_link(link)})",
                Verdict.PASS if fast else Verdict.WARN,
                ""
                if fast
                else "KV crosses PCIe here (~10-25 GiB/s): pair GPUs on one NVLink "
                "domain (placement.<role>.gpus) if the host has one",
                required=False,
            )
        )
    return rows


def _same_gpu_row(prefill: str, decode: str, gpu: int) -> CheckRow:
    """gpu.share: the KV never leaves the GPU (cuda_ipc within one device, if NIXL pushes)."""
    return CheckRow(
        f"GPU link {prefill} -> {decode}",
        "NVLink, or one GPU",
        f"both on GPU {gpu}: KV stays in its memory (nixl-mp: push; pull READs go over tcp/lo)",
        Verdict.PASS,
        required=False,
    )


def rdma_checks(view: HostView) -> list[CheckRow]:
    rows = []
    if view.plan.rdma and view.engines:
        devices = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
        ok = Path("/dev/infiniband").is_dir() and bool(devices)
        rows.append(
            CheckRow(
                "RDMA devices",
                "/dev/infiniband and an RDMA device (networking.rdma is on)",
                ", ".join(devices) if devices else "none (/sys/class/infiniband is empty)",
                Verdict.PASS if ok else Verdict.FAIL,
                ""
                if ok
                else "install the RDMA driver (MOFED/rdma-core), or set "
                "networking.rdma: false (KV then crosses hosts over TCP)",
            )
        )
    if view.gpu_profile and view.engines and runtime_kind(view.plan.runtime).containers:
        rows.append(_memlock_row(view))  # what dockerd can grant; processes have their own
    return rows


def _memlock_row(view: HostView) -> CheckRow:
    """GPU engines ask for unlimited locked memory (RDMA and CUDA IPC registration); a rootless
    daemon cannot grant it and container creation fails."""
    pid = view.facts.daemon_pid if view.facts else None
    try:
        root = pid is not None and psutil.Process(pid).uids().effective == 0
    except psutil.Error:
        root = False
    return CheckRow(
        "memlock unlimited for engines",
        "dockerd runs as root",
        f"dockerd pid {pid}, {'root' if root else 'not root or unknown'}",
        Verdict.PASS if root else Verdict.WARN,
        "" if root else "rootless Docker cannot grant memlock: run a rootful dockerd",
        required=False,
    )


def cpu_isa_checks(view: HostView) -> list[CheckRow]:
    """Informational: which of vLLM CPU's kernels this host's CPU can run, and AMX's state
    (the cpu engine images ask for AMX tile data in every process; see generator/cpu_features)."""
    if view.gpu_profile or not view.engines:
        return []
    # Asking here changes nothing but this short-lived process: it tells whether the kernel
    # grants what the engines will ask for.
    granted = request_amx_permission()
    features = cpu_features()
    problems = (
        []
        if {"avx512f", "avx2"} & set(features.vector_flags)
        else ["vLLM CPU needs at least AVX2: run the cpu stacks on another host"]
    )
    if not features.amx_in_cpu:
        amx = "no AMX"
    elif not features.amx_in_kernel:
        amx = "AMX in the CPU, not enabled by this kernel (vLLM will not use it)"
    elif granted:
        amx = "AMX tile data granted on request (the engine images ask at start)"
    else:
        amx = "AMX tile data refused by the kernel"
        problems.append(
            "vLLM's AMX attention dies of SIGILL without it: check dmesg, or "
            "run the cpu stacks on another host"
        )
    return [
        CheckRow(
            "CPU vector ISA (cpu engines)",
            "avx512f (vLLM CPU's recommended kernels) or avx2 (limited); AMX granted if present",
            f"{features.model}: {' '.join(features.vector_flags) or 'none of them'}; {amx}",
            Verdict.WARN if problems else Verdict.PASS,
            "; ".join(problems),
            required=False,
        )
    ]


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


CHECKS: tuple[Check, ...] = (
    docker_checks,
    process_checks,
    gpu_access_checks,
    gpu_checks,
    rdma_checks,
    cpu_isa_checks,
    shm_checks,
    address_checks,
    port_checks,
    disk_checks,
    token_checks,
)
