"""Golden tests of the shipped stacks: committed output is exactly a fresh render, and the
rendered files say what the seeds say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import diff_rendered
from generator.stack import load_spec
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE

SHIPPED = [
    "cpu-1p1d",
    "cpu-2host",
    "cpu-faults",
    "cpu-lmcache-pd",
    "cpu-p2p",
    "cpu-slurm",
    "xpyd",
    "xpyd-1gpu",
    "xpyd-lmcache-1gpu",
    "xpyd-mp",
    "xpyd-mp-2host",
    "xpyd-tp8",
]


def rendered(workspace: Workspace, stack: str) -> RenderedStack:
    return render_stack(make_plan(load_spec(workspace.stack_file(stack))), workspace)


def compose(workspace: Workspace, stack: str, host: str | None = None) -> dict[str, Any]:
    folder = Path("compose") / stack / (host or "")
    document: dict[str, Any] = yaml.safe_load(
        (workspace.root / folder / "compose.yaml").read_text()
    )
    return document


def running(document: dict[str, Any]) -> dict[str, Any]:
    """Services that `up` starts (not the build-only base image or the one-off bench)."""
    return {name: s for name, s in document["services"].items() if "profiles" not in s}


def test_bench_never_starts_with_up_and_engine_images_carry_their_base(
    workspace: Workspace,
) -> None:
    services = compose(workspace, "cpu-1p1d")["services"]
    assert "engine-base" not in services
    assert services["bench"]["profiles"] == ["bench"]
    assert services["bench"]["image"] == services["decode-0"]["image"]
    assert services["prefill-0"]["build"]["dockerfile"] == "images/cpu-1p1d/prefill.Dockerfile"
    role = (workspace.root / "images/cpu-1p1d/prefill.Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE} AS engine-base" in role
    assert role.rstrip().splitlines()[-1].startswith("CMD ")
    assert "FROM engine-base AS prefill" in role


def command_of(service: dict[str, Any]) -> list[str]:
    """The service's own command: restarted services run under the supervisor."""
    command: list[str] = service["command"]
    supervised = command[:2] == ["python3", SUPERVISOR_IN_IMAGE]
    assert supervised == (service["restart"] != "no"), command
    if not supervised:
        return command
    # [--needs-registered URL] [--restarts-with URL]... SERVICE -- COMMAND...
    return command[command.index("--") + 1 :]


def test_the_shipped_stacks_are_the_ones_under_stacks(workspace: Workspace) -> None:
    assert workspace.shipped_stacks() == SHIPPED


@pytest.mark.parametrize("stack", SHIPPED)
def test_committed_output_matches_a_fresh_render(workspace: Workspace, stack: str) -> None:
    assert diff_rendered(rendered(workspace, stack), workspace.root) == []


def test_xpyd_follows_seed_a_numbering(workspace: Workspace) -> None:
    services = running(compose(workspace, "xpyd"))
    assert list(services) == ["prefill-0", "prefill-1", "decode-0", "decode-1", "router"]
    ports = [
        command_of(service)[command_of(service).index("--port") + 1]
        for name, service in services.items()
        if name != "router"
    ]
    assert ports == ["7100", "7101", "7200", "7201"]
    router = yaml.safe_load((workspace.root / "compose/xpyd/router.yaml").read_text())
    assert router["listen"]["port"] == 9100
    # Host networking: the KV-notice port listens only where the prefillers reach it (issue 17).
    assert router["notify"] == {"bind_host": "127.0.0.1", "port": 7500}
    assert [(d["init_ports"], d["alloc_ports"]) for d in router["decode"]] == [
        ([7300], [7400]),
        ([7301], [7401]),
    ]
    prefill = yaml.safe_load((workspace.root / "compose/xpyd/lmcache/prefill-0.yaml").read_text())
    assert prefill["pd_role"] == "sender"
    assert (prefill["pd_proxy_host"], prefill["pd_proxy_port"]) == ("127.0.0.1", 7500)


def test_gpu_services_reserve_device_ids_and_share_namespaces(workspace: Workspace) -> None:
    services = compose(workspace, "xpyd")["services"]
    for index, name in enumerate(["prefill-0", "prefill-1", "decode-0", "decode-1"]):
        service = services[name]
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        # Every same-host engine sees its peers' GPUs (cuda_ipc) and selects its own.
        assert device == {
            "driver": "nvidia",
            "device_ids": ["0", "1", "2", "3"],
            "capabilities": ["gpu"],
        }
        assert service["environment"]["CUDA_VISIBLE_DEVICES"] == str(index)
        assert "count" not in device
        assert (service["pid"], service["ipc"], service["network_mode"]) == ("host", "host", "host")
        assert "runtime" not in service  # device requests alone: CDI-only hosts too
        assert service["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
        assert {"IPC_LOCK", "SYS_PTRACE"} <= set(service["cap_add"])
        assert "devices" not in service  # one host: no RDMA devices to require
        assert service["environment"]["PYTHONHASHSEED"] == "0"
        assert service["environment"]["HF_TOKEN_PATH"] == "/run/secrets/hf_token"
        # NIXL's idle thread sleeps on GPUs too (the image's patch reads it; docs/gpu-h200)
        assert service["environment"]["XPYD_NIXL_PTHR_DELAY_US"] == "10000"
    assert compose(workspace, "xpyd")["secrets"] == {"hf_token": {"environment": "HF_TOKEN"}}


def kv_config(service: dict[str, Any]) -> dict[str, Any]:
    command = command_of(service)
    parsed: dict[str, Any] = json.loads(command[command.index("--kv-transfer-config") + 1])
    return parsed


def test_xpyd_mp_follows_seed_b(workspace: Workspace) -> None:
    document = compose(workspace, "xpyd-mp")
    services = running(document)
    assert list(services) == [
        "lmcache-prefill-0",
        "prefill-0",
        "lmcache-decode-0",
        "decode-0",
        "router",
    ]
    prefill = kv_config(services["prefill-0"])
    assert prefill["kv_connector"] == "MultiConnector"
    assert prefill["kv_load_failure_policy"] == "fail"
    nixl, mp = prefill["kv_connector_extra_config"]["connectors"]
    assert nixl == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert mp["kv_connector_extra_config"] == {
        "lmcache.mp.host": "tcp://127.0.0.1",
        "lmcache.mp.port": 6555,
    }
    assert (
        kv_config(services["decode-0"])["kv_connector_extra_config"]["connectors"][1][
            "kv_connector_extra_config"
        ]["lmcache.mp.port"]
        == 6556
    )
    env = services["decode-0"]["environment"]
    assert (env["VLLM_NIXL_SIDE_CHANNEL_HOST"], env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == (
        "127.0.0.1",
        "5601",
    )
    assert (env["UCX_NET_DEVICES"], env["NCCL_CUMEM_ENABLE"]) == ("all", "1")
    assert services["prefill-0"]["depends_on"] == {
        "lmcache-prefill-0": {"condition": "service_healthy"}
    }
    assert set(services["router"]["depends_on"]) == {"prefill-0", "decode-0"}
    router = command_of(services["router"])
    assert router[:1] == ["vllm-router"]
    assert "--vllm-pd-disaggregation" in router
    assert router[router.index("--prometheus-port") + 1] == "29000"
    lmcache = command_of(services["lmcache-prefill-0"])
    assert lmcache[:2] == ["lmcache", "server"]
    assert lmcache[lmcache.index("--l1-size-gb") + 1] == "100"


def test_cpu_stack_pins_each_engine_to_its_own_core(workspace: Workspace) -> None:
    services = compose(workspace, "cpu-1p1d")["services"]
    for name, core in (("prefill-0", "0"), ("decode-0", "1")):
        service = services[name]
        assert service["cpuset"] == core
        assert service["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == core
        # NIXL's progress thread sleeps while idle (the cpu image's patch reads it).
        assert service["environment"]["XPYD_NIXL_PTHR_DELAY_US"] == "10000"
        assert {
            "type": "tmpfs",
            "target": "/sys/devices/system/node",
            "read_only": True,
        } in service["volumes"]
        assert service["shm_size"] == "1g"
        assert "deploy" not in service
        assert "runtime" not in service
        nixl = kv_config(service)["kv_connector_extra_config"]["connectors"][0]
        assert nixl["kv_buffer_device"] == "cpu"
    lmcache = command_of(services["lmcache-prefill-0"])
    assert lmcache[lmcache.index("--supported-transfer-mode") + 1] == "auto"
    assert services["lmcache-prefill-0"]["ports"] == [
        "127.0.0.1:8090:8090"
    ]  # never beyond the host
    assert services["router"]["ports"][0] == "30000:30000"


def test_one_process_cpu_engines_keep_their_worker_in_process(workspace: Workspace) -> None:
    """A CPU engine of one process runs its worker in its engine core (one vLLM import fewer),
    lmcache-pd's too (its example's 1 is for GPUs); an engine over several processes, and
    every GPU engine, keeps vLLM's own executor choice."""

    def multiprocessing(stack: str, service: str, *overrides: str) -> str | None:
        plan = make_plan(load_spec(workspace.stack_file(stack), list(overrides)))
        hosts = render_stack(plan, workspace).deployment.hosts
        (env,) = (s.env for host in hosts for s in host.services if s.name == service)
        return env.get("VLLM_ENABLE_V1_MULTIPROCESSING")

    for stack in ("cpu-1p1d", "cpu-lmcache-pd", "cpu-faults", "cpu-slurm"):
        assert {multiprocessing(stack, e) for e in ("prefill-0", "decode-0")} == {"0"}, stack
    two_nodes = ("prefill.nodes=2", "prefill.tp=2", "cpu.share=true")
    assert multiprocessing("cpu-slurm", "decode-0", *two_nodes) == "0"
    assert multiprocessing("cpu-slurm", "prefill-0", *two_nodes) is None
    assert multiprocessing("xpyd-1gpu", "prefill-0") is None
    assert multiprocessing("xpyd-lmcache-1gpu", "prefill-0") == "1"


def test_multi_host_stacks_render_one_project_per_host(workspace: Workspace) -> None:
    a, b = (
        compose(workspace, "xpyd-mp-2host", "gpu-a"),
        compose(workspace, "xpyd-mp-2host", "gpu-b"),
    )
    assert (a["name"], b["name"]) == ("xpyd-xpyd-mp-2host-gpu-a", "xpyd-xpyd-mp-2host-gpu-b")
    assert set(running(a)) == {
        "lmcache-prefill-0",
        "prefill-0",
        "lmcache-prefill-1",
        "prefill-1",
        "router",
    }
    router = command_of(a["services"]["router"])
    assert router[router.index("--decode") + 1] == "http://10.0.0.12:7200"
    assert b["volumes"]["model-cache"]["driver_opts"]["device"] == "/data/hf-cache"
    assert b["services"]["decode-0"]["environment"]["HF_HUB_OFFLINE"] == "1"


def test_tp8_decoder_gets_a_port_per_rank(workspace: Workspace) -> None:
    config = yaml.safe_load(
        (workspace.root / "compose/xpyd-tp8/node-d/lmcache/decode-0.yaml").read_text()
    )
    assert config["pd_peer_init_port"] == list(range(7300, 7308))
    assert config["pd_peer_alloc_port"] == list(range(7400, 7408))
    assert config["pd_peer_host"] == "10.0.1.2"
    sender = yaml.safe_load(
        (workspace.root / "compose/xpyd-tp8/node-p/lmcache/prefill-0.yaml").read_text()
    )
    assert sender["pd_proxy_host"] == "10.0.1.1"
    node_p = compose(workspace, "xpyd-tp8", "node-p")
    assert node_p["secrets"] == {"hf_token": {"file": "../../../secrets/hf_token"}}
    devices = node_p["services"]["prefill-0"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert devices["device_ids"] == [str(i) for i in range(8)]


def test_nixl_mp_engines_are_watched_for_their_lmcache_server_s_restart(
    workspace: Workspace,
) -> None:
    """Their supervisor ends an engine whose server no longer lists it (the server
    restarted); lmcache-pd engines have no server of their own to watch."""
    services = compose(workspace, "cpu-1p1d")["services"]
    for engine, server in (("prefill-0", "lmcache-prefill-0"), ("decode-0", "lmcache-decode-0")):
        command = services[engine]["command"]
        watched = command[command.index("--needs-registered") + 1]
        server_command = services[server]["command"]
        port = server_command[server_command.index("--http-port") + 1]
        assert watched == f"http://{server}:{port}/status"
        assert command.index("--needs-registered") < command.index(engine)
    for name, service in compose(workspace, "cpu-lmcache-pd")["services"].items():
        assert "--needs-registered" not in service.get("command", []), name


def _peers_watched(command: list[str]) -> list[str]:
    """Both watches see a peer's restart; ``--ends-with`` (a GPU peer mapped over CUDA IPC,
    tests/topologies/test_maps_memory.py) also its end."""
    watches = ("--restarts-with", "--ends-with")
    return [command[i + 1] for i, part in enumerate(command) if part in watches]


def test_lmcache_pd_prefillers_are_watched_for_their_decoders_restarts(
    workspace: Workspace,
) -> None:
    """A sender never reconnects to a decoder that restarted: each prefiller's supervisor
    watches every decoder's process (its /metrics, at the address the router uses)."""
    services = compose(workspace, "xpyd")["services"]
    decoders = [f"http://127.0.0.1:{port}/metrics" for port in (7200, 7201)]
    for name in ("prefill-0", "prefill-1"):
        assert _peers_watched(services[name]["command"]) == decoders
        command = services[name]["command"]
        assert command.index("--ends-with") < command.index(name) < command.index("--")
    for name in ("decode-0", "decode-1", "router"):
        assert _peers_watched(services[name].get("command", [])) == [], name
    bridged = compose(workspace, "cpu-lmcache-pd")["services"]
    decode_port = command_of(bridged["decode-0"])[
        command_of(bridged["decode-0"]).index("--port") + 1
    ]
    assert _peers_watched(bridged["prefill-0"]["command"]) == [
        f"http://decode-0:{decode_port}/metrics"
    ]


def test_peers_that_go_stale_on_each_other_are_not_watched(workspace: Workspace) -> None:
    """P2P servers are stale after each other's restarts: watching each other they would
    restart each other in turn, so `up` restarts them together instead."""
    for name, service in compose(workspace, "cpu-p2p")["services"].items():
        assert _peers_watched(service.get("command", [])) == [], name
