"""doctor's checks on real inputs: nvidia-smi output and KV probe records captured on 2x H200
(tests/doctor/fixtures/), this machine's own ports, files and environment."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from generator.cpu_features import cpu_features
from generator.docker import EngineFacts
from generator.doctor.checks import (
    cpu_isa_checks,
    docker_checks,
    gpu_access_checks,
    gpu_checks,
    rdma_checks,
)
from generator.doctor.context import HostView
from generator.doctor.gpus import parse_gpus, parse_topology
from generator.doctor.host_checks import port_checks, token_checks
from generator.doctor.kvpath import KvProbe, container_view, judge, own_gpus_variant
from generator.doctor.ports import orphan_ports
from generator.doctor.report import Verdict
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.runtimes.base import ServiceState
from generator.stack import load_spec

FIXTURES = Path(__file__).parent / "fixtures"
FACTS = EngineFacts("28.2.2", "v2.40.3", ("runc",), "runc", "/var/lib/docker", (), None)


def h200_view(workspace: Workspace, stack: str = "xpyd-mp", *overrides: str) -> HostView:
    """A view of the 2x H200 machine (its nvidia-smi output) for a stack on GPUs 0 and 1."""
    plan = make_plan(load_spec(workspace.stack_file(stack), ["hosts.0.gpus=[0,1]", *overrides]))
    (project,) = render_stack(plan, workspace).projects
    gpus = parse_gpus((FIXTURES / "nvidia_smi_query_h200x2.csv").read_text())
    links = parse_topology((FIXTURES / "nvidia_smi_topo_h200x2.txt").read_text())
    return HostView(plan, plan.host("local"), project, workspace, FACTS, gpus, links, frozenset())


def record(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return loaded


def test_nvidia_smi_output_parses(workspace: Workspace) -> None:
    view = h200_view(workspace)
    assert view.gpus is not None
    assert [(g.index, g.name, g.memory_mib, g.bus_id) for g in view.gpus] == [
        (0, "NVIDIA H200", 143771, "00000000:00:06.0"),
        (1, "NVIDIA H200", 143771, "00000000:00:07.0"),
    ]
    assert view.links == {(0, 0): "X", (0, 1): "NV18", (1, 0): "NV18", (1, 1): "X"}


def test_gpus_and_the_nvlink_between_the_pair(workspace: Workspace) -> None:
    rows = gpu_checks(h200_view(workspace))
    assert [(row.check, row.verdict) for row in rows] == [
        ("GPUs", Verdict.PASS),
        ("GPU link prefill-0 -> decode-0", Verdict.PASS),
    ]
    assert "NV18 (NVLink x18)" in rows[1].found


def test_gpus_the_host_lacks_fail_and_name_what_it_has(workspace: Workspace) -> None:
    view = h200_view(workspace, "xpyd", "hosts.0.gpus=[0,1,2,3]")
    (row, *_) = gpu_checks(view)
    assert row.verdict is Verdict.FAIL
    assert "missing 2,3" in row.found
    assert "has 0,1" in row.fix


def test_the_recorded_h200_kv_paths_are_judged_as_measured(workspace: Workspace) -> None:
    """What the rendered layout moved (cuda_ipc, ~280 GiB/s) passes; one GPU per container
    (TCP, ~0.45 GiB/s, data intact) is failed as the silent fallback it is."""
    view = h200_view(workspace)
    rendered = judge(view, KvProbe("prefill-0", "decode-0", record("kvpath_h200_rendered.json")))
    own = judge(view, KvProbe("prefill-0", "decode-0", record("kvpath_h200_own_gpus.json")))
    assert rendered.verdict is Verdict.PASS, rendered
    assert rendered.found.startswith("cuda_ipc, read 282.40 GiB/s")
    assert own.verdict is Verdict.FAIL
    assert own.found.startswith("tcp, read 0.46 GiB/s")
    assert "fallback" in own.fix


def test_cuda_ipc_below_the_floor_is_still_a_fallback(workspace: Workspace) -> None:
    slow = record("kvpath_h200_rendered.json") | {
        "read_gib_s_median": 0.4,
        "write_gib_s_median": 0.4,
    }
    assert judge(h200_view(workspace), KvProbe("prefill-0", "decode-0", slow)).blocking


def test_views_follow_the_rendered_services_and_the_own_gpu_variant(
    workspace: Workspace,
) -> None:
    view = h200_view(workspace)
    services = view.project.host_services
    decode = container_view(services.service("decode-0"))
    assert (decode.gpus, decode.pid.value) == ((0, 1), "host")
    assert decode.environment["CUDA_VISIBLE_DEVICES"] == "1"
    (engine,) = view.plan.decode
    narrowed = container_view(own_gpus_variant(services.service("decode-0"), engine))
    assert (narrowed.gpus, narrowed.environment["CUDA_VISIBLE_DEVICES"]) == ((1,), "0")


@pytest.mark.parametrize("access", ["cdi", "nvidia-runtime"])
def test_views_read_every_gpu_access_mode(workspace: Workspace, access: str) -> None:
    view = h200_view(workspace, "xpyd-mp", f"gpu.access={access}")
    assert container_view(view.project.host_services.service("prefill-0")).gpus == (0, 1)


def test_gpu_access_modes_the_engine_offers(workspace: Workspace, tmp_path: Path) -> None:
    view = h200_view(workspace, "xpyd-mp", "gpu.access=cdi")
    (row,) = gpu_access_checks(view)
    assert row.verdict is Verdict.FAIL  # this engine has neither CDI nor the NVIDIA runtime
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    cdi = replace(view, facts=replace(FACTS, cdi_spec_dirs=(str(tmp_path),)))
    (row,) = gpu_access_checks(cdi)
    assert row.verdict is Verdict.PASS
    assert "cdi: yes" in row.found
    runtime = replace(h200_view(workspace, "xpyd-mp", "gpu.access=nvidia-runtime"))
    runtime = replace(runtime, facts=replace(FACTS, runtimes=("nvidia", "runc")))
    assert gpu_access_checks(runtime)[0].verdict is Verdict.PASS


def test_no_engine_is_one_failed_row(workspace: Workspace) -> None:
    (row,) = docker_checks(replace(h200_view(workspace), facts=None))
    assert (row.verdict, row.blocking) == (Verdict.FAIL, True)


def _held_port() -> socket.socket:
    """A port this test holds, whichever the machine has free (never a fixed number: another
    test or service may hold it)."""
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    return holder


def test_a_busy_port_names_its_holder(workspace: Workspace) -> None:
    with _held_port() as holder:
        port = holder.getsockname()[1]
        view = h200_view(workspace, "xpyd-mp", f"ports.prefill_http={port}")
        rows = port_checks(view)
    busy = next(row for row in rows if row.check.startswith(f"port {port}"))
    assert busy.verdict is Verdict.FAIL
    assert "python" in busy.found  # pid N (python...): this test process


def test_a_port_held_by_a_service_the_stack_no_longer_has_is_no_clash(
    workspace: Workspace,
) -> None:
    """`bench --set prefill.count=2` left prefill-1 running; the committed stack (one
    prefiller) gives its port to another service: `up` removes the orphan, so only a warning."""
    planned = ["prefill-0", "decode-0", "router"]
    with _held_port() as holder:
        port = holder.getsockname()[1]
        running, healthy, held = "running", "healthy", f"127.0.0.1:{port}->7101/tcp"
        states = [
            ServiceState("prefill-1", "c1", running, healthy, None, (held,)),
            ServiceState("decode-0", "c2", running, healthy, None, ("127.0.0.1:47200->7200/tcp",)),
            ServiceState("prefill-2", "c3", "exited", None, 1, ()),
        ]
        orphans = orphan_ports(states, planned)
        assert orphans == {"prefill-1": frozenset({port})}  # an exited one holds no port
        stack = h200_view(workspace, "xpyd-mp", f"ports.prefill_http={port}")
        rows = port_checks(replace(stack, orphans=orphans))
    assert not [r for r in rows if r.check.startswith(f"port {port}") and r.verdict is Verdict.FAIL]
    (old,) = [row for row in rows if row.check == "services the stack no longer has"]
    assert (old.verdict, old.blocking) == (Verdict.WARN, False)
    assert "prefill-1 running" in old.found
    assert "`up` removes them" in old.fix
    # Only the held port is this test's: the stack's other ports are whatever the machine has.
    assert not [row for row in rows if row.blocking and row.check.startswith(f"port {port}")]


def test_agent_ports_warn_even_when_free(workspace: Workspace) -> None:
    rows = port_checks(h200_view(workspace, "xpyd", "hosts.0.gpus=[0,1,2,3]"))
    warned = [row for row in rows if row.verdict is Verdict.WARN]
    assert any("node_exporter" in row.found for row in warned)


def test_token_source_presence_never_its_value(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = h200_view(workspace)  # hf.token: {env: HF_TOKEN}
    monkeypatch.delenv("HF_TOKEN", raising=False)
    (row,) = token_checks(view)
    assert row.verdict is Verdict.FAIL
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 30)
    (row,) = token_checks(view)
    assert row.verdict is Verdict.PASS
    assert "hf_" not in row.found + row.expected + row.fix


def test_an_outgoing_connections_local_port_is_named_as_such(workspace: Workspace) -> None:
    """A port taken by the local end of a connection (no listener) is not "a process that
    cannot be seen": doctor says whose connection it is, and that the port is ephemeral."""
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())  # the kernel picks an ephemeral local port
        port = client.getsockname()[1]
        accepted, _ = server.accept()
        with accepted:
            rows = port_checks(h200_view(workspace, "xpyd-mp", f"ports.prefill_http={port}"))
    busy = next(row for row in rows if row.check.startswith(f"port {port}"))
    assert busy.verdict is Verdict.FAIL
    assert "an outgoing connection of pid" in busy.found
    assert "inside the ephemeral range" in busy.found
    ephemeral = [r for r in rows if r.verdict is Verdict.WARN and "ephemeral" in r.expected]
    assert ephemeral == []  # a busy port is reported once, as busy


def test_ports_in_the_ephemeral_range_warn(workspace: Workspace) -> None:
    rows = port_checks(h200_view(workspace, "xpyd-mp", "router.port=40000"))
    (warned,) = [r for r in rows if r.verdict is Verdict.WARN and "ephemeral" in r.expected]
    assert warned.check == "port 40000 (router)"
    assert not warned.required


def cpu_view(workspace: Workspace, stack: str = "cpu-1p1d") -> HostView:
    plan = make_plan(load_spec(workspace.stack_file(stack)))
    (project,) = render_stack(plan, workspace).projects
    return HostView(plan, plan.host("local"), project, workspace, FACTS, None, None, frozenset())


def test_the_cpu_row_reports_this_hosts_isa_and_amx(workspace: Workspace) -> None:
    """Informational (never blocks): the flags vLLM CPU's kernels use, and AMX's state."""
    features = cpu_features()
    (row,) = cpu_isa_checks(cpu_view(workspace))
    assert row.required is False
    assert row.found.startswith(f"{features.model}: {' '.join(features.vector_flags)}; ")
    if not features.amx_in_cpu:
        assert row.found.endswith("; no AMX")
    elif not features.amx_in_kernel:
        assert "not enabled by this kernel" in row.found
    else:  # a CPU with AMX under Linux >= 5.16: what the engine images rely on
        assert "AMX tile data granted on request" in row.found
    assert row.verdict is (
        Verdict.PASS if {"avx2", "avx512f"} & set(features.vector_flags) else Verdict.WARN
    )
    assert cpu_isa_checks(h200_view(workspace)) == []  # GPU engines do not run vLLM CPU


def one_gpu_view(workspace: Workspace, used_mib: int) -> HostView:
    """xpyd-1gpu (both engines on GPU 0, 0.4 each) on an H200 with ``used_mib`` taken."""
    plan = make_plan(load_spec(workspace.stack_file("xpyd-1gpu")))
    (project,) = render_stack(plan, workspace).projects
    line = f"0, NVIDIA H200, 143771, 00000000:00:06.0, GPU-24c9e0c0, {used_mib}"
    return HostView(
        plan, plan.host("local"), project, workspace, FACTS, parse_gpus(line), {}, frozenset()
    )


def test_engines_sharing_a_gpu_need_the_sum_of_their_shares_free(workspace: Workspace) -> None:
    rows = {row.check: row for row in gpu_checks(one_gpu_view(workspace, used_mib=1000))}
    row = rows["GPU 0 free memory"]
    assert row.verdict is Verdict.PASS
    assert row.expected == ">= 112 GiB (0.80 of 140 GiB for prefill-0, decode-0)"
    busy = {row.check: row for row in gpu_checks(one_gpu_view(workspace, used_mib=60_000))}
    assert busy["GPU 0 free memory"].verdict is Verdict.FAIL
    assert busy["GPU 0 free memory"].found == "82 GiB free"


def test_one_gpu_pairs_say_so_and_running_engines_hold_their_own_memory(
    workspace: Workspace,
) -> None:
    view = one_gpu_view(workspace, used_mib=100_000)
    rows = {row.check: row for row in gpu_checks(view)}
    link = rows["GPU link prefill-0 -> decode-0"]
    assert (link.verdict, link.found.split(":")[0]) == (Verdict.PASS, "both on GPU 0")
    running = replace(view, running=frozenset({"prefill-0", "decode-0"}))
    assert "GPU 0 free memory" not in {row.check for row in gpu_checks(running)}  # second up
    assert "memlock unlimited for engines" not in {r.check for r in rdma_checks(view)}  # no dockerd
