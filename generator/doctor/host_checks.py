"""Doctor's checks of the host itself: /dev/shm, host addresses, ports, disk, HF token."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import psutil

from generator.doctor.context import HostView, local_addresses
from generator.doctor.ports import busy_ports, ephemeral_range, holder_of, published_ports
from generator.doctor.report import CheckRow, Verdict
from generator.plan import TokenPlan
from generator.plan.agent_ports import agent_on
from generator.runtimes.kinds import runtime_kind

__all__ = ["address_checks", "disk_checks", "port_checks", "shm_checks", "token_checks"]

_GIB = 1 << 30
_SHM_PER_ENGINE_GIB = 1  # vLLM's shared-memory broadcast, NCCL, LMCache's shared buffers
_RAM_PER_CPU_ENGINE_GIB = 2  # measured ~1.6 GiB RSS per tiny-model engine
_SHM_MIB = 1024  # what render gives each cpu engine (shm_size 1g)
_IMAGE_GIB = {"gpu": 30, "cpu": 10}  # vllm/vllm-openai + our layers; the cpu engine image
_PARAMS = re.compile(r"(\d+(?:\.\d+)?)\s*[bB]\b")


def shm_checks(view: HostView) -> list[CheckRow]:
    if not view.engines:
        return []
    return [_host_shm_row(view) if view.gpu_profile else _container_shm_row(view)]


def _host_shm_row(view: HostView) -> CheckRow:
    """GPU engines run with ``ipc: host``: they all use the host's /dev/shm."""
    usage = shutil.disk_usage("/dev/shm")
    needed = len(view.engines) * _SHM_PER_ENGINE_GIB
    ok = usage.free >= needed * _GIB
    return CheckRow(
        "/dev/shm (ipc: host)",
        f">= {needed} GiB free ({_SHM_PER_ENGINE_GIB} GiB per engine)",
        f"{usage.free / _GIB:.1f} GiB free of {usage.total / _GIB:.1f}",
        Verdict.PASS if ok else Verdict.FAIL,
        "" if ok else "grow /dev/shm (mount -o remount,size=...G /dev/shm)",
    )


def _container_shm_row(view: HostView) -> CheckRow:
    """CPU engines get their own /dev/shm (shm_size), taken from the host's memory."""
    names = {engine.name for engine in view.engines}
    services = view.project.host_services.services
    sizes = [service.shm_size_mib for service in services if service.name in names]
    available = psutil.virtual_memory().available
    needed = len(view.engines) * _RAM_PER_CPU_ENGINE_GIB
    ok = all(size == _SHM_MIB for size in sizes) and available >= needed * _GIB
    shown = ", ".join("default" if size is None else f"{size} MiB" for size in sizes)
    return CheckRow(
        "/dev/shm and memory (cpu engines)",
        f"shm_size 1g per engine (Docker's 64 MiB breaks vLLM); >= {needed} GiB RAM free",
        f"shm_size {shown}; {available / _GIB:.1f} GiB free",
        Verdict.PASS if ok else Verdict.FAIL,
        "" if ok else "free memory, or lower prefill/decode count",
    )


def address_checks(view: HostView) -> list[CheckRow]:
    """Host networking binds the host's address (NIXL side channel, LMCache P/D ports): an
    address that is not on this machine leaves a decoder that never becomes healthy."""
    if view.plan.network != "host" or not view.engines:
        return []
    address = view.host.address
    ok = address in local_addresses()
    return [
        CheckRow(
            f"address of host {view.host.name}",
            f"{address} is an address of this machine",
            "yes" if ok else f"no (this machine has {', '.join(sorted(local_addresses()))})",
            Verdict.PASS if ok else Verdict.FAIL,
            ""
            if ok
            else f"set hosts[{view.host.name}].address to this machine's address, "
            "or run doctor on that host (--host)",
        )
    ]


def port_checks(view: HostView) -> list[CheckRow]:
    ports = published_ports(view.plan, view.project)
    theirs = {port for held in view.orphans.values() for port in held}
    busy = [p for p in busy_ports(ports, set(view.running)) if p.port not in theirs]
    rows = [
        CheckRow(
            f"port {p.port} ({p.owner}: {p.purpose})",
            "free",
            f"in use by {holder_of(p.port)}",
            Verdict.FAIL,
            "stop what holds it, or move the stack's ports (router.port, ports.* in the spec)",
        )
        for p in busy
    ]
    low, high = ephemeral_range()
    rows += [
        CheckRow(
            f"port {p.port} ({p.owner})",
            f"outside the ephemeral range {low}-{high}",
            "inside: any outgoing connection may hold it for a while",
            Verdict.WARN,
            f"pick a port below {low} (or above {high})",
            required=False,
        )
        for p in ports
        if p not in busy and low <= p.port <= high
    ]
    agents = [p for p in ports if p not in busy and agent_on(p.port)]
    rows += [
        CheckRow(
            f"port {p.port} ({p.owner})",
            "not a cluster agent's default port",
            f"free now, but {p.port} is {agent_on(p.port)}'s default",
            Verdict.WARN,
            "pick another port if that agent may run here",
            required=False,
        )
        for p in agents
    ]
    if view.orphans:
        rows.append(
            CheckRow(
                "services the stack no longer has",
                "none running",
                f"{', '.join(sorted(view.orphans))} running (an earlier variant of the stack)",
                Verdict.WARN,
                "`up` removes them when it starts the stack (their ports are free then)",
                required=False,
            )
        )
    held = "" if not view.running else f" ({len(view.running)} of this stack's services running)"
    rows.append(
        CheckRow(
            "planned ports",
            f"{len(ports)} free",
            f"{len(ports) - len(busy)} free{held}",
            Verdict.FAIL if busy else Verdict.PASS,
            "see the rows above" if busy else "",
        )
    )
    return rows


def disk_checks(view: HostView) -> list[CheckRow]:
    if not view.engines:
        return []
    model, hf = view.plan.model, view.plan.hf
    profile = view.plan.profile.value
    model_gib = _model_size_gib(model.id) if model.source == "hub" else 0
    if model.host_path is not None:
        path_ok = Path(model.host_path).is_dir()
        if not path_ok:
            return [
                CheckRow(
                    "model.host_path",
                    f"{model.host_path} exists",
                    "missing",
                    Verdict.FAIL,
                    "copy the model there, or fix model.host_path",
                )
            ]
    processes = not runtime_kind(view.plan.runtime).containers
    docker_root = view.facts.root_dir if view.facts else "/var/lib/docker"
    # The process runtime's Pythons (.cache/env/) take the images' place.
    where = hf.cache_dir or (str(view.workspace.root) if processes else docker_root)
    probe = _existing_parent(Path(where))
    free_gib = shutil.disk_usage(probe).free / _GIB
    needed = _IMAGE_GIB[profile] + model_gib
    ok = free_gib >= needed
    what = "environments" if processes else "images"
    return [
        CheckRow(
            f"disk for {what} and model cache",
            f">= {needed:.0f} GiB free at {where} ({what} ~{_IMAGE_GIB[profile]}"
            + (f", model ~{model_gib:.0f} estimated from its name" if model_gib else "")
            + ")",
            f"{free_gib:.0f} GiB free",
            Verdict.PASS if ok else Verdict.WARN,
            "" if ok else "free disk there, or point hf.cache_dir at a larger disk",
            required=False,
        )
    ]


def _model_size_gib(model_id: str) -> float:
    """bf16 weights plus 20%, from the parameter count in the name ("Llama-3.1-8B" -> ~18)."""
    match = _PARAMS.search(model_id.rsplit("/", 1)[-1])
    billions = float(match.group(1)) if match else 8.0
    return billions * 2 * 1.2


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def token_checks(view: HostView) -> list[CheckRow]:
    """The token's source is present (never its value). A gated hub model needs one."""
    needs = not view.plan.hf.offline and bool(view.engines)  # offline: not from the hub
    token = view.plan.hf.token
    if not needs:
        return [CheckRow("HF token", "-", "model is not downloaded from the hub", Verdict.SKIP)]
    if token is None:
        return [
            CheckRow(
                "HF token",
                "a token source for gated models",
                "hf.token not set",
                Verdict.WARN,
                "set hf.token: {env: HF_TOKEN} if the model is gated",
                required=False,
            )
        ]
    where, present = _token_present(view, token)
    return [
        CheckRow(
            "HF token",
            f"available from {where}",
            "present (value not shown)" if present else "missing or empty",
            Verdict.PASS if present else Verdict.FAIL,
            "" if present else f"provide it in {where}",
        )
    ]


def _token_present(view: HostView, token: TokenPlan) -> tuple[str, bool]:
    if token.source == "env":
        return f"environment variable {token.name}", bool(os.environ.get(token.name, "").strip())
    path = view.workspace.root / token.name
    if token.source == "file":
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        return f"file {token.name}", bool(text.strip())
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    found = any(
        line.strip().startswith("HF_TOKEN=") and line.strip() != "HF_TOKEN="
        for line in text.splitlines()
    )
    return f"HF_TOKEN in {token.name}", found
