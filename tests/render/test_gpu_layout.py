"""What GPU containers see and probe: same-host P/D peers' GPUs (cuda_ipc needs them), RDMA
only where KV crosses hosts, the GPU access mode, health checks that probe what LMCache binds,
ports clear of cluster agents, and per-host projects that build on their own."""

from __future__ import annotations

import ast
import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from generator.paths import Workspace
from generator.plan import LMCachePDReceiverKV, Plan
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.stack import load_spec


def rendered(workspace: Workspace, stack: str, *overrides: str) -> tuple[Plan, RenderedStack]:
    plan = make_plan(load_spec(workspace.stack_file(stack), list(overrides)))
    return plan, render_stack(plan, workspace)


def services(result: RenderedStack, host: str | None = None) -> dict[str, Any]:
    project = next(p for p in result.projects if host is None or p.host == host)
    found: dict[str, Any] = project.document["services"]
    return found


def device_ids(service: dict[str, Any]) -> list[str]:
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    ids: list[str] = device["device_ids"]
    return ids


def test_same_host_engines_see_every_peer_gpu_and_select_their_own(
    workspace: Workspace,
) -> None:
    _, result = rendered(workspace, "xpyd")
    engines = services(result)
    for index, name in enumerate(["prefill-0", "prefill-1", "decode-0", "decode-1"]):
        assert device_ids(engines[name]) == ["0", "1", "2", "3"]
        environment = engines[name]["environment"]
        assert environment["CUDA_VISIBLE_DEVICES"] == str(index)
        assert environment["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert engines[name]["pid"] == "host"


def test_cuda_visible_devices_count_the_containers_gpus_not_the_hosts(
    workspace: Workspace,
) -> None:
    # Seed B: GPUs 6 and 7 of the host are GPUs 0 and 1 inside the containers.
    _, result = rendered(workspace, "xpyd-mp")
    engines = services(result)
    assert device_ids(engines["prefill-0"]) == device_ids(engines["decode-0"]) == ["6", "7"]
    assert engines["prefill-0"]["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert engines["decode-0"]["environment"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_lmcache_servers_keep_seeing_only_their_engines_gpus(workspace: Workspace) -> None:
    _, result = rendered(workspace, "xpyd-mp")
    engines = services(result)
    assert device_ids(engines["lmcache-prefill-0"]) == ["6"]
    assert device_ids(engines["lmcache-decode-0"]) == ["7"]
    assert "CUDA_VISIBLE_DEVICES" not in engines["lmcache-prefill-0"]["environment"]


def test_hosts_with_one_role_keep_each_engine_to_its_own_gpus(workspace: Workspace) -> None:
    # xpyd-mp-2host: prefill on gpu-a, decode on gpu-b: no same-host KV traffic.
    plan, result = rendered(workspace, "xpyd-mp-2host")
    for engine in plan.engines:
        assert engine.visible_gpus == engine.gpus
        service = services(result, engine.host)[engine.name]
        assert device_ids(service) == [str(gpu) for gpu in engine.gpus]
        assert service["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_rdma_devices_only_where_kv_crosses_hosts(workspace: Workspace) -> None:
    _, single = rendered(workspace, "xpyd")
    assert all("devices" not in s for s in services(single).values())
    # Multi-host with networking.rdma left unset: KV crosses hosts, so RDMA is on.
    plan, multi = rendered(workspace, "xpyd-mp-2host", "networking.rdma=null")
    assert plan.rdma
    for project in multi.projects:
        for name, service in project.document["services"].items():
            if name in ("prefill-0", "decode-0"):
                assert service["devices"] == ["/dev/infiniband:/dev/infiniband"]
    # ...and the spec can ask for RDMA on one host (e.g. GPUDirect RDMA across NICs).
    _, asked = rendered(workspace, "xpyd", "networking.rdma=true")
    assert services(asked)["decode-0"]["devices"] == ["/dev/infiniband:/dev/infiniband"]


@pytest.mark.parametrize(
    ("access", "expected"),
    [
        ("device-requests", {"deploy"}),
        ("nvidia-runtime", {"runtime"}),
        ("cdi", {"devices"}),
    ],
)
def test_gpu_access_modes_never_mix(workspace: Workspace, access: str, expected: set[str]) -> None:
    _, result = rendered(workspace, "xpyd-mp", f"gpu.access={access}")
    engines = services(result)
    decode = engines["decode-0"]
    assert {"deploy", "runtime", "devices"} & set(decode) == expected
    if access == "nvidia-runtime":
        assert decode["runtime"] == "nvidia"
        assert decode["environment"]["NVIDIA_VISIBLE_DEVICES"] == "6,7"
        assert engines["lmcache-decode-0"]["environment"]["NVIDIA_VISIBLE_DEVICES"] == "7"
    if access == "cdi":
        assert decode["devices"] == ["nvidia.com/gpu=6", "nvidia.com/gpu=7"]
    assert decode["environment"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_gpu_access_is_refused_on_the_cpu_profile(workspace: Workspace) -> None:
    from generator.errors import SpecError

    with pytest.raises(SpecError, match=r"gpu\.access"):
        load_spec(workspace.stack_file("cpu-1p1d"), ["gpu.access=cdi"])


# --- health checks probe what LMCache binds -----------------------------------------------


def health_targets(service: dict[str, Any]) -> list[tuple[str, int]]:
    """The (host, port) pairs the rendered healthcheck connects to, read from its code."""
    code = service["healthcheck"]["test"][-1]
    if "create_connection" not in code:
        return []
    listed = code.split(" for t in ")[1].removesuffix("]")
    targets: tuple[tuple[str, int], ...] = ast.literal_eval(listed)
    return list(targets)


@pytest.mark.parametrize(
    ("stack", "overrides"),
    [
        ("xpyd", []),
        ("xpyd-tp8", []),
        ("cpu-lmcache-pd", []),
        ("xpyd", ["hosts.0.address=10.1.2.3"]),
    ],
)
def test_decoder_health_checks_probe_the_pd_ports_where_lmcache_binds_them(
    workspace: Workspace, stack: str, overrides: list[str]
) -> None:
    plan, result = rendered(workspace, stack, *overrides)
    for engine in plan.decode:
        project = next(p for p in result.projects if p.host == engine.host)
        config = yaml.safe_load(project.files[PurePosixPath("lmcache") / f"{engine.name}.yaml"])
        bind = config["pd_peer_host"]
        probe_host = "127.0.0.1" if bind == "0.0.0.0" else bind
        ports = config["pd_peer_init_port"] + config["pd_peer_alloc_port"]
        wanted = [(probe_host, port) for port in ports]
        assert health_targets(project.document["services"][engine.name]) == wanted


def run_check(command: list[str]) -> int:
    return subprocess.run(command, capture_output=True, timeout=30, check=False).returncode


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def listening(address: str, ports: list[int]) -> Iterator[None]:
    with ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket())
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen()
        yield


def test_tp8_decoder_health_check_passes_only_where_lmcache_really_listens(
    workspace: Workspace,
) -> None:
    """Run the rendered check itself: decoder P/D sockets bound on the host's address (here
    127.0.0.2, a loopback alias) with vLLM's /health answering on 127.0.0.1."""
    # Below the kernel's ephemeral range (32768-60999): a port there may be the local end of
    # any outgoing connection (it failed here once with EADDRINUSE).
    shift = ["ports.decode_http=23200", "ports.decode_pd_init=23300", "ports.decode_pd_alloc=23400"]
    plan, result = rendered(workspace, "xpyd-tp8", "hosts.1.address=127.0.0.2", *shift)
    (decoder,) = plan.decode
    service = services(result, "node-d")[decoder.name]
    command = service["healthcheck"]["test"][1:]
    command[0] = sys.executable
    assert isinstance(decoder.kv, LMCachePDReceiverKV)
    ports = list(decoder.kv.init_ports + decoder.kv.alloc_ports)
    assert len(ports) == 16
    server = http.server.HTTPServer(("127.0.0.1", decoder.http_port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with listening("127.0.0.2", ports):
            assert run_check(command) == 0
        with listening("127.0.0.1", ports):  # where the old check looked: LMCache is not there
            assert run_check(command) != 0
    finally:
        server.shutdown()
        server.server_close()


# --- ports clear of cluster agents --------------------------------------------------------


def test_automatic_ports_skip_cluster_agent_ports(workspace: Workspace) -> None:
    plan, _ = rendered(workspace, "cpu-1p1d", "ports.lmcache_metrics=9090")
    metrics = [use.port for use in plan.ports if use.purpose == "LMCache metrics"]
    assert metrics == [9092, 9095]  # 9090, 9091, 9093 and 9094 belong to Prometheus & co.


def test_a_fixed_agent_port_is_kept_and_warned_about(workspace: Workspace) -> None:
    plan, _ = rendered(workspace, "xpyd")
    assert plan.router.port == 9100  # seed A's
    assert any("node_exporter" in warning for warning in plan.warnings)


def test_default_ports_avoid_agents(workspace: Workspace) -> None:
    from generator.plan.agent_ports import AGENT_PORTS

    for stack in ("cpu-1p1d", "cpu-lmcache-pd", "xpyd-mp", "xpyd-mp-2host"):
        plan, _ = rendered(workspace, stack)
        assert not [use for use in plan.ports if use.port in AGENT_PORTS], stack


# --- per-host projects build on their own ---------------------------------------------------


def test_every_engine_image_is_self_contained(workspace: Workspace) -> None:
    """No image FROM another image of the stack: each host's project builds alone."""
    for stack in ("xpyd-mp-2host", "xpyd-tp8", "cpu-1p1d"):
        _, result = rendered(workspace, stack)
        tags = {image.tag for image in result.images}
        for image in result.images:
            froms = [
                line.split()[1] for line in image.text.splitlines() if line.startswith("FROM ")
            ]
            assert froms, image.dockerfile
            assert not tags & set(froms), image.dockerfile
        for project in result.projects:
            for service in project.document["services"].values():
                assert "build" not in service.get("profiles", [])


def test_our_images_are_never_pulled_from_a_public_namespace(workspace: Workspace) -> None:
    """Tags are predictable (a hash of public templates): anyone could publish
    xpyd/prefill:<hash> on Docker Hub. Bare names build when missing and are never pulled;
    a registry host of the user's own is pulled from first."""
    _, result = rendered(workspace, "xpyd")
    for service in services(result).values():
        if "build" in service:
            assert service["pull_policy"] == "never", service["image"]
    _, private = rendered(workspace, "xpyd", "images.registry=registry.example.com:5000/team")
    assert {s["pull_policy"] for s in services(private).values() if "build" in s} == {"missing"}
