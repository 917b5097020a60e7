"""The KV path check: a real NIXL transfer between each same-host prefill/decode pair, with
exactly the devices and namespaces the stack's containers get, judged by transport and GiB/s.

Container mode runs the KV probe (generator/kvprobe/nixl_kv_probe.py, copied into the engine
images as /opt/xpyd/nixl_kv_probe.py) in two one-off containers of the rendered
services (`docker compose run`: same image, devices, namespaces, environment). Process mode,
for hosts without Docker, runs it in two processes that see what those containers would see
(``generator.runtimes.isolation``). The prefill side serves a buffer; the decode side pulls
from it (as vLLM's decoder does) and pushes to it, and reports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from generator.doctor.context import HostView
from generator.doctor.gpus import describe_link, link_between
from generator.doctor.report import CheckRow, Verdict
from generator.limits import NVLINK_EXPECTED_GIB_S, KvPath, judge_kv_speed
from generator.plan import EnginePlan
from generator.render import RenderedStack
from generator.services.model import Service

if TYPE_CHECKING:
    from generator.docker import ComposeStack
    from generator.runtimes.isolation import ContainerView

__all__ = [
    "KvLayout",
    "KvProbe",
    "judge",
    "parse_probe_output",
    "probe_command",
]

PROBE_IN_IMAGE = "/opt/xpyd/nixl_kv_probe.py"
PROBE_IN_CHECKOUT = "generator/kvprobe/nixl_kv_probe.py"  # copied into the engine images
_GPU_SIZE_MIB, _CPU_SIZE_MIB = 1024, 256
_PROBE_TIMEOUT_S = 240.0
_CONTAINER_PORT = 5999  # inside a one-off container on a bridge network: no clash possible
_PROBE_ENV: dict[str, str] = {}  # the probe asks UCX for its protocol report itself


class KvLayout(StrEnum):
    RENDERED = "rendered"  # what the stack's compose files give each container
    OWN_GPUS = "own-gpus"  # each side sees only its own GPUs: the layout that falls back


@dataclass(frozen=True)
class KvProbe:
    """One measured pair."""

    prefill: str
    decode: str
    result: dict[str, Any]  # the probe's JSON line, plus "mode" and "layout"

    @property
    def name(self) -> str:
        return f"{self.prefill} -> {self.decode}"


def probe_command(role: str, *, device: str, address: str, size_mib: int) -> list[str]:
    """The probe's arguments: the prefill side serves, the decode side connects."""
    common = ["--device", device, "--size-mib", str(size_mib)]
    common += ["--timeout-s", str(int(_PROBE_TIMEOUT_S))]
    if role == "serve":
        return ["serve", "--listen", address, *common]
    return ["run", "--peer", address, *common]


def parse_probe_output(stdout: str) -> dict[str, Any]:
    """The probe's one JSON line (the last line that parses), or an error record."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            return parsed
    tail = stdout.strip().splitlines()[-3:]
    return {"ok": False, "error": f"no result from the probe ({' | '.join(tail) or 'no output'})"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def device_of(view: HostView) -> str:
    return "cuda" if view.gpu_profile else "cpu"


def size_for(view: HostView, size_mib: int | None) -> int:
    return size_mib or (_GPU_SIZE_MIB if view.gpu_profile else _CPU_SIZE_MIB)


def container_pair(
    view: HostView,
    prefill: EnginePlan,
    decode: EnginePlan,
    services: dict[str, Service],
    size_mib: int | None,
) -> KvProbe:
    """Two one-off containers of the prefill and decode services (as rendered, or the variant
    in ``services``): their images, devices, namespaces and environment, the probe's command."""
    device, size = device_of(view), size_for(view, size_mib)
    tag = uuid.uuid4().hex[:8]
    serve_name = f"{view.project.name}-kvpath-{prefill.name}-{tag}"
    if view.plan.network == "host":
        port = free_port()
        listen, peer = f"0.0.0.0:{port}", f"127.0.0.1:{port}"
    else:
        listen, peer = f"0.0.0.0:{_CONTAINER_PORT}", f"{serve_name}:{_CONTAINER_PORT}"
    serve_args = probe_command("serve", device=device, address=listen, size_mib=size)
    run_args = probe_command("run", device=device, address=peer, size_mib=size)
    with _compose_with(view, services) as stack:
        serve = stack.start_oneoff(
            prefill.name, ["python3", PROBE_IN_IMAGE, *serve_args], name=serve_name, env=_PROBE_ENV
        )
        client = stack.start_oneoff(
            decode.name,
            ["python3", PROBE_IN_IMAGE, *run_args],
            name=f"{view.project.name}-kvpath-{decode.name}-{tag}",
            env=_PROBE_ENV,
        )
        try:
            client.wait(_PROBE_TIMEOUT_S + 60)
            result = parse_probe_output(client.output()[0])
            serve.wait(30)
        finally:
            client.remove()
            serve.remove()
    return KvProbe(prefill.name, decode.name, result | {"mode": "container"})


@contextmanager
def _compose_with(view: HostView, services: dict[str, Service]) -> Iterator[ComposeStack]:
    """The rendered compose project, or a temporary copy beside it whose pair services are
    replaced (relative paths in it keep working): removed afterwards."""
    from generator.docker import ComposeStack
    from generator.serializers.compose import compose_text_with

    rendered_file = view.workspace.root / view.project.compose_file
    rendered = view.project.host_services
    if all(rendered.service(name) == service for name, service in services.items()):
        yield ComposeStack(rendered_file, view.project.name)
        return
    path = rendered_file.with_name(f".doctor-kvpath-{uuid.uuid4().hex[:8]}.yaml")
    path.write_text(compose_text_with(view.project, services.values()), encoding="utf-8")
    try:
        yield ComposeStack(path, view.project.name)
    finally:
        path.unlink(missing_ok=True)


def _prepare_containers(
    view: HostView, rendered: RenderedStack, pairs: tuple[tuple[EnginePlan, EnginePlan], ...]
) -> None:
    """The rendered files on disk (as `up` writes them) and the pair's images built."""
    from generator.console import status
    from generator.docker import ComposeStack, image_exists, require_docker
    from generator.render.writer import write_rendered

    require_docker()
    write_rendered(rendered, view.workspace.root)
    stack = ComposeStack(view.workspace.root / view.project.compose_file, view.project.name)
    names = sorted({engine.name for pair in pairs for engine in pair})
    services = view.project.host_services
    missing = [n for n in names if not image_exists(services.service(n).image.tag)]
    if missing:
        with status(f"building the engine images of {', '.join(missing)} (first run: minutes)"):
            stack.build(missing, lambda _line: None)


def judge(view: HostView, probe: KvProbe) -> CheckRow:
    """A row for one pair: a fallback (TCP or below the floor) fails on GPUs; CPU pairs pass
    when the data arrived intact (their figure is printed, not judged)."""
    result = probe.result
    check = f"KV path {probe.name} ({result.get('mode', '?')}, {result.get('layout', 'rendered')})"
    if not result.get("ok"):
        return CheckRow(
            check,
            "a NIXL transfer",
            f"failed: {result.get('error')}",
            Verdict.FAIL,
            "read the probe's error; `doctor --kv-path --json` shows the whole record",
        )
    transport = str(result.get("transport", "unknown"))
    read, write = _rate(result, "read"), _rate(result, "write")
    found = f"{transport}, read {read:.2f} GiB/s, write {write:.2f} GiB/s"
    if not result.get("correct"):
        return CheckRow(
            check,
            "data intact",
            found + ", DATA WRONG",
            Verdict.FAIL,
            "the transfer corrupted data: report it with the probe's record",
        )
    if not view.gpu_profile:
        return CheckRow(check, "DRAM over NIXL, data intact", found, Verdict.PASS)
    expected, verdict, fix = _gpu_expectation(view, probe, transport, min(read, write))
    return CheckRow(check, expected, found, verdict, fix)


def _rate(result: dict[str, Any], direction: str) -> float:
    return float(result.get(f"{direction}_gib_s_median") or 0.0)


def _gpu_expectation(
    view: HostView, probe: KvProbe, transport: str, rate: float
) -> tuple[str, Verdict, str]:
    first_gpu = {engine.name: engine.gpus[0] for engine in view.engines}
    link = link_between(view.links or {}, first_gpu[probe.prefill], first_gpu[probe.decode])
    nvlink = link.startswith("NV")
    judged = judge_kv_speed(KvPath.SAME_HOST_GPU, transport, rate)  # doctor probes one host
    expected = judged.expected
    if nvlink:
        expected += f" (~250+ over {describe_link(link)})"
    if not judged.passed:
        return (
            expected,
            Verdict.FAIL,
            "a silent fallback: every same-host engine must see its peers' GPUs and share the "
            "host PID namespace (what the generator renders); check gpu.access and re-render",
        )
    if nvlink and rate < NVLINK_EXPECTED_GIB_S:
        return expected, Verdict.WARN, "NVLink but slow: other work on these GPUs? run again"
    return expected, Verdict.PASS, ""


def measure_pairs(
    view: HostView,
    rendered: RenderedStack,
    *,
    process: bool,
    python: str,
    layout: KvLayout,
    size_mib: int | None,
) -> list[KvProbe]:
    pairs = view.plan.same_host_pairs(view.host.name)
    if not process:
        _prepare_containers(view, rendered, pairs)
    probes = []
    for prefill, decode in pairs:
        services = {engine.name: _service_for(view, engine, layout) for engine in (prefill, decode)}
        if process:
            probe = process_pair(
                view, prefill, decode, services=services, python=python, size_mib=size_mib
            )
        else:
            probe = container_pair(view, prefill, decode, services, size_mib)
        probes.append(KvProbe(probe.prefill, probe.decode, probe.result | {"layout": layout.value}))
    return probes


def _service_for(view: HostView, engine: EnginePlan, layout: KvLayout) -> Service:
    service = view.project.host_services.service(engine.name)
    if layout is KvLayout.OWN_GPUS and engine.gpus:
        service = own_gpus_variant(service, engine)
    return service


def own_gpus_variant(service: Service, engine: EnginePlan) -> Service:
    """The service as if its container saw only its own GPUs (one GPU per container: what a
    naive compose file gives, and what silently falls back to TCP)."""
    from generator.services.parts import gpu_env

    if service.gpus is None:
        return service
    gpus = replace(service.gpus, device_ids=engine.gpus)
    own = ",".join(str(i) for i in range(len(engine.gpus)))
    env = service.env | {"CUDA_VISIBLE_DEVICES": own}
    return replace(service, gpus=gpus, gpu_env=gpu_env(gpus), env=env)


def process_pair(
    view: HostView,
    prefill: EnginePlan,
    decode: EnginePlan,
    *,
    services: dict[str, Service],
    python: str,
    size_mib: int | None,
) -> KvProbe:
    """Two processes, each in a reproduction of its container's view (no Docker needed): the
    serving side in the background, the measuring side in the foreground."""
    from generator.runtimes.isolation import run_in_view, view_command

    device, size = device_of(view), size_for(view, size_mib)
    address = f"127.0.0.1:{free_port()}"
    probe = [python, str(view.workspace.root / PROBE_IN_CHECKOUT)]
    serve_view, run_view = (container_view(services[e.name]) for e in (prefill, decode))
    serve_args = probe_command("serve", device=device, address=address, size_mib=size)
    serving = subprocess.Popen(
        view_command(serve_view, [*probe, *serve_args]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        run_args = probe_command("run", device=device, address=address, size_mib=size)
        done = run_in_view(run_view, [*probe, *run_args], timeout_s=_PROBE_TIMEOUT_S + 60)
        result = parse_probe_output(done.stdout)
        if not result.get("ok") and done.stderr.strip():
            tail = done.stderr.strip().splitlines()[-5:]
            result |= {"stderr_tail": tail, "error": f"{result.get('error')}; {tail[-1]}"}
    finally:
        _stop(serving)
    return KvProbe(prefill.name, decode.name, result | {"mode": "process"})


def container_view(service: Service) -> ContainerView:
    """What a service's container would see: its GPUs (however the runtime hands them over),
    its PID namespace, RDMA devices, and its CUDA/UCX environment."""
    from generator.runtimes.isolation import ContainerView, PidNamespace

    gpus = service.gpus.device_ids if service.gpus is not None else ()
    wanted = ("CUDA_", "UCX_", "NCCL_")
    return ContainerView(
        gpus=tuple(sorted(set(gpus))),
        pid=PidNamespace.HOST if service.host_pid else PidNamespace.PRIVATE,
        environment={k: v for k, v in service.environment.items() if k.startswith(wanted)},
        infiniband=any(node.path.startswith("/dev/infiniband") for node in service.devices),
    )


def _stop(process: subprocess.Popen[str]) -> None:
    try:
        process.wait(timeout=30)  # it ends by itself once its peer says done
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
