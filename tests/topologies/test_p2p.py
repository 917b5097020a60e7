"""lmcache.p2p (nixl-mp): a coordinator of the stack's own, every `lmcache server` registered
and advertised at an address its peers reach, ports from ports.* bases, and refusals that name
the field and the fix."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from generator.doctor.ports import published_ports
from generator.errors import SpecError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes.http import MetricSamples, Origin, Reply
from generator.probes.p2p import PeerReuse, peer_rows
from generator.render import render_stack
from generator.services.build import build_deployment, image_ref
from generator.stack import load_spec
from generator.topologies import topology_of


def plan_of(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    return make_plan(load_spec(workspace.stack_file(stack), list(overrides)))


def server_command(plan: Plan, engine: str) -> list[str]:
    sidecar = next(s for s in plan.sidecars if s.engine == engine)
    owner = next(e for e in plan.engines if e.name == engine)
    return topology_of(plan).sidecar_command(plan, owner, sidecar)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_coordinator_is_the_stacks_and_comes_first(workspace: Workspace) -> None:
    plan = plan_of(workspace, "cpu-p2p")
    coordinator = plan.sidecars[0]
    assert (coordinator.service, coordinator.engine, coordinator.health_path) == (
        "lmcache-coordinator",
        None,
        "/healthz",
    )
    assert plan.hosts[0].services[0] == "lmcache-coordinator"
    command = topology_of(plan).sidecar_command(plan, None, coordinator)
    assert command == ["lmcache", "coordinator", "--host", "0.0.0.0", "--port", "19300"]
    uses = {(use.port, use.owner) for use in plan.ports}
    assert {(19300, "lmcache-coordinator"), (18290, "lmcache-prefill-0")} <= uses
    assert (18291, "lmcache-decode-0") in uses


def test_servers_register_and_advertise_where_peers_reach_them(workspace: Workspace) -> None:
    bridge = server_command(plan_of(workspace, "cpu-p2p"), "decode-0")
    assert flag(bridge, "--coordinator-url") == "http://lmcache-coordinator:19300"
    assert flag(bridge, "--coordinator-advertise-ip") == "lmcache-decode-0"
    assert flag(bridge, "--p2p-advertise-url") == "lmcache-decode-0:18291"
    assert flag(bridge, "--p2p-listen-url") == "0.0.0.0:18291"
    assert flag(bridge, "--host") == "0.0.0.0"  # peers dial its ZMQ port
    assert flag(bridge, "--l1-align-bytes") == "65536"
    # Across hosts (host networking): host addresses, the coordinator on the first host.
    plan = plan_of(workspace, "xpyd-mp-2host", "lmcache.p2p.transfer_engine=mooncake_te")
    first, decoder = plan.hosts[0], plan.decode[0]
    command = server_command(plan, decoder.name)
    assert flag(command, "--coordinator-url") == f"http://{first.address}:9300"
    assert flag(command, "--coordinator-advertise-ip") == decoder.address
    assert flag(command, "--p2p-advertise-url").startswith(f"{decoder.address}:82")
    assert flag(command, "--host") == "0.0.0.0"
    assert flag(command, "--p2p-transfer-engine") == "mooncake_te"


def test_without_p2p_nothing_changes(workspace: Workspace) -> None:
    plan = plan_of(workspace, "cpu-1p1d")
    assert all(s.engine is not None for s in plan.sidecars)
    assert "p2p" not in plan.model_dump_json()
    assert "--coordinator-url" not in server_command(plan, "prefill-0")


def test_servers_wait_for_a_healthy_coordinator(workspace: Workspace) -> None:
    plan = plan_of(workspace, "cpu-p2p")
    roles = ("prefill", "decode", "lmcache", "router")
    images = {role: image_ref(f"xpyd/{role}:test", PurePosixPath(role)) for role in roles}
    services = {s.name: s for s in build_deployment(plan, images).hosts[0].services}
    coordinator = services["lmcache-coordinator"]
    assert coordinator.gpus is None
    assert not coordinator.cpuset
    assert [d.service for d in services["lmcache-prefill-0"].depends_on] == ["lmcache-coordinator"]
    assert [d.service for d in services["prefill-0"].depends_on] == ["lmcache-prefill-0"]


@pytest.mark.parametrize(
    ("stack", "overrides", "message"),
    [
        ("cpu-lmcache-pd", ["lmcache.p2p.transfer_engine=nixl"], "lmcache.p2p: applies to"),
        ("cpu-1p1d", ["ports.lmcache_p2p=8300"], None),
        (
            "cpu-p2p",
            ["lmcache.server.extra_args=[--gds-l1-path, /nvme]"],
            "lmcache.server.extra_args: --gds-l1-path makes a GDS",
        ),
        ("cpu-p2p", ["lmcache.server.extra_args=[--coordinator-url, x]"], "lmcache.p2p"),
        ("cpu-p2p", ["lmcache.p2p.lookup_timeout_s=0"], "lmcache.p2p.lookup_timeout_s"),
    ],
)
def test_refusals_name_the_field_and_the_fix(
    workspace: Workspace, stack: str, overrides: list[str], message: str | None
) -> None:
    if message is None:  # a P2P port base without P2P is harmless on nixl-mp
        load_spec(workspace.stack_file(stack), overrides)
        return
    with pytest.raises(SpecError, match=message):
        load_spec(workspace.stack_file(stack), overrides)


def status(state: str, peers: int) -> Reply:
    return Reply({"p2p_state": state, "p2p_peer_count": peers}, Origin("s", "svc", "/status"))


def test_the_peers_row_wants_every_server_registered_with_all_peers() -> None:
    good = {
        "lmcache-prefill-0": status("registered", 1),
        "lmcache-decode-0": status("registered", 1),
    }
    assert peer_rows(good, expected_peers=1).passed is True
    lonely = good | {"lmcache-decode-0": status("registered", 0)}
    assert peer_rows(lonely, expected_peers=1).passed is False
    gone = good | {"lmcache-prefill-0": status("unregistered", 1)}
    row = peer_rows(gone, expected_peers=1)
    assert row.passed is False
    assert "lmcache-prefill-0: unregistered, 1" in row.observed


def doctor_ports(workspace: Workspace, stack: str, *overrides: str) -> dict[int, str]:
    plan = plan_of(workspace, stack, *overrides)
    project = render_stack(plan, workspace).projects[0]
    return {p.port: f"{p.owner}: {p.purpose}" for p in published_ports(plan, project)}


def test_doctor_checks_the_coordinator_and_p2p_ports(workspace: Workspace) -> None:
    # Host networking: every planned port binds on the host, the P2P ones included.
    on_host = doctor_ports(workspace, "xpyd-mp", "lmcache.p2p.transfer_engine=nixl")
    assert on_host[9300] == "lmcache-coordinator: LMCache coordinator"
    assert on_host[8290] == "lmcache-prefill-0: LMCache P2P transfer channel"
    assert on_host[8291] == "lmcache-decode-0: LMCache P2P transfer channel"
    # A bridge publishes the coordinator (on loopback, for the probes); the transfer channels
    # stay inside the stack's network, so they take no host port.
    bridge = doctor_ports(workspace, "cpu-p2p")
    assert bridge[19300] == "lmcache-coordinator: LMCache coordinator"
    assert 18290 not in bridge


def samples(**values: float) -> MetricSamples:
    labelled = {"lmcache_mp_l2_load_completed_requests_total": (("l2_name", "p2p"),)}
    return {(name, labelled.get(name, ())): value for name, value in values.items()}


def test_peer_reuse_is_the_change_over_the_request() -> None:
    before = (
        samples(**{"vllm:external_prefix_cache_hits_total": 100.0}),
        samples(lmcache_mp_l2_load_completed_requests_total=2.0),
    )
    after = (
        samples(
            **{
                "vllm:external_prefix_cache_hits_total": 1124.0,
                "vllm:external_prefix_cache_queries_total": 1063.0,
            }
        ),
        samples(
            lmcache_mp_l2_load_completed_requests_total=3.0,
            lmcache_mp_lookup_hit_l2_tokens_total=1024.0,
        ),
    )
    reuse = PeerReuse.between(before, after)
    assert reuse == PeerReuse(
        hit_tokens=1024.0, query_tokens=1063.0, l2_hit_tokens=1024.0, p2p_loads=1.0
    )
    assert reuse.describe() == (
        "vLLM: 1024 of 1063 prompt tokens external hits; LMCache: 1024 tokens from L2, 1 P2P loads"
    )
    # Loads from another L2 adapter (a disk, a store) are not a peer's.
    other = {("lmcache_mp_l2_load_completed_requests_total", (("l2_name", "fs"),)): 5.0}
    assert PeerReuse.between(before, (after[0], after[1] | other)).p2p_loads == 1.0
