"""`up` on a stack left running: a service running since before a dependency of its last
started (cpu-p2p's engines after their LMCache servers were recreated for a new setting), or
since well before a KV peer did (P2P servers, both together; an lmcache-pd sender after its
decoder), is restarted, and nothing else is. The deployments are the real rendered ones."""

from __future__ import annotations

from generator.docker import ServiceState
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.stack import load_spec
from generator.topologies import topology_of
from generator.workflow.steps.services import outlived_dependencies

STEP = 1000.0  # when the step that starts them began: every state below predates it


def _state(service: str, started_at: float | None, status: str = "running") -> ServiceState:
    return ServiceState(service, f"c-{service}", status, "healthy", None, (), started_at=started_at)


def test_engines_older_than_their_lmcache_server_are_the_ones_restarted(
    workspace: Workspace,
) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-p2p")))
    (host,) = render_stack(plan, workspace).deployment.hosts
    states = [
        _state("lmcache-coordinator", 100.0),
        _state("lmcache-prefill-0", 500.0),  # recreated by this up
        _state("lmcache-decode-0", 110.0),
        _state("prefill-0", 200.0),  # started before its server's current start
        _state("decode-0", 210.0),
        _state("router", 300.0),
    ]
    assert outlived_dependencies(states, host, ["prefill-0", "decode-0"], {}, since=STEP) == [
        "prefill-0"
    ]
    # The servers came up after the coordinator: nothing to restart there.
    assert (
        outlived_dependencies(
            states, host, ["lmcache-prefill-0", "lmcache-decode-0"], {}, since=STEP
        )
        == []
    )


def test_a_second_up_of_a_stack_started_in_order_restarts_nothing(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-p2p")))
    (host,) = render_stack(plan, workspace).deployment.hosts
    order = ["lmcache-coordinator", "lmcache-prefill-0", "lmcache-decode-0", "prefill-0"]
    states = [_state(name, 100.0 + i) for i, name in enumerate([*order, "decode-0", "router"])]
    every = [state.service for state in states]
    assert outlived_dependencies(states, host, every, {}, since=STEP) == []


def test_services_not_running_are_started_not_restarted(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-p2p")))
    (host,) = render_stack(plan, workspace).deployment.hosts
    states = [_state("lmcache-prefill-0", 500.0), _state("prefill-0", None, status="exited")]
    assert outlived_dependencies(states, host, ["prefill-0"], {}, since=STEP) == []


def test_p2p_servers_restart_together_after_one_of_them_did(workspace: Workspace) -> None:
    """A server keeps NIXL metadata for each peer it loaded from: after lmcache-prefill-0
    alone was recreated, lmcache-decode-0 is stale; restarted alone it would leave
    lmcache-prefill-0 stale in turn, so both start anew."""
    plan = make_plan(load_spec(workspace.stack_file("cpu-p2p")))
    (host,) = render_stack(plan, workspace).deployment.hosts
    peers = topology_of(plan).stale_after(plan)
    assert peers == {
        "lmcache-prefill-0": ("lmcache-decode-0",),
        "lmcache-decode-0": ("lmcache-prefill-0",),
    }
    servers = ["lmcache-prefill-0", "lmcache-decode-0"]
    states = [
        _state("lmcache-coordinator", 100.0),
        _state(servers[0], 500.0),
        _state(servers[1], 110.0),
    ]
    assert outlived_dependencies(states, host, servers, peers, since=STEP) == servers
    # One `up` starting them seconds apart is no restart missed.
    states = [
        _state("lmcache-coordinator", 100.0),
        _state(servers[0], 105.0),
        _state(servers[1], 108.0),
    ]
    assert outlived_dependencies(states, host, servers, peers, since=STEP) == []


def test_an_lmcache_pd_sender_restarts_after_its_decoder_did(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-lmcache-pd")))
    (host,) = render_stack(plan, workspace).deployment.hosts
    peers = topology_of(plan).stale_after(plan)
    assert peers == {"prefill-0": ("decode-0",)}
    states = [_state("prefill-0", 200.0), _state("decode-0", 500.0)]  # docker kill, then up
    assert outlived_dependencies(states, host, ["prefill-0", "decode-0"], peers, since=STEP) == [
        "prefill-0"
    ]
    # A fresh `up` starts both in this step, the decoder a little later: nothing to restart.
    states = [_state("prefill-0", STEP + 0.5), _state("decode-0", STEP + 2.0)]
    assert outlived_dependencies(states, host, ["prefill-0", "decode-0"], peers, since=STEP) == []
    # The other way round needs nothing: the decoder only receives.
    states = [_state("prefill-0", 500.0), _state("decode-0", 200.0)]
    assert outlived_dependencies(states, host, ["prefill-0", "decode-0"], peers, since=STEP) == []


def test_stacks_without_kv_peers_name_none(workspace: Workspace) -> None:
    for stack in ("cpu-1p1d", "xpyd-mp"):
        plan = make_plan(load_spec(workspace.stack_file(stack)))
        assert topology_of(plan).stale_after(plan) == {}
