"""Planner invariants over random valid specs (hypothesis)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from generator.errors import PlanError
from generator.plan import (
    EngineKV,
    LMCachePDReceiverKV,
    LMCachePDSenderKV,
    NixlMPEngineKV,
    Plan,
    RouterPlan,
    VllmRouterPlan,
)
from generator.planner import make_plan
from generator.stack import parse_spec

TP_SIZES = st.sampled_from([1, 2, 4, 8])


@st.composite
def gpu_specs(draw: st.DrawFn) -> dict[str, Any]:
    topology = draw(st.sampled_from(["lmcache-pd", "nixl-mp"]))
    host_count = draw(st.integers(1, 4))
    hosts = []
    for index in range(host_count):
        size = draw(st.sampled_from([1, 2, 4, 8]))
        first = draw(st.integers(0, 8))
        hosts.append(
            {
                "name": f"h{index}",
                "address": f"10.0.0.{index + 1}",
                "gpus": list(range(first, first + size)),
            }
        )
    p_tp = draw(TP_SIZES)
    d_tp = p_tp if topology == "lmcache-pd" else draw(TP_SIZES)
    data: dict[str, Any] = {
        "name": "prop",
        "topology": topology,
        "model": {"id": "org/model"},
        "hosts": hosts,
        "prefill": {"count": draw(st.integers(1, 6)), "tp": p_tp},
        "decode": {"count": draw(st.integers(1, 6)), "tp": d_tp},
    }
    if draw(st.booleans()):
        data["router"] = {
            "port": draw(st.integers(1024, 65535)),
            "host": f"h{draw(st.integers(0, host_count - 1))}",
        }
    return data


def plan_or_skip(data: dict[str, Any]) -> Plan:
    try:
        return make_plan(parse_spec(data, source="hypothesis"))
    except PlanError:
        assume(False)
        raise


PROPERTIES = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)


@PROPERTIES
@given(gpu_specs())
def test_gpus_are_never_shared_and_blocks_are_aligned(data: dict[str, Any]) -> None:
    plan = plan_or_skip(data)
    used: dict[str, set[int]] = defaultdict(set)
    for engine in plan.engines:
        host_gpus = list(plan.host(engine.host).gpus)
        assert len(engine.gpus) == engine.tp
        assert not used[engine.host] & set(engine.gpus)
        used[engine.host] |= set(engine.gpus)
        start = host_gpus.index(engine.gpus[0])
        assert start % engine.tp == 0
        assert list(engine.gpus) == host_gpus[start : start + engine.tp]


@PROPERTIES
@given(gpu_specs())
def test_every_port_is_unique_per_host(data: dict[str, Any]) -> None:
    plan = plan_or_skip(data)
    owned: dict[str, list[int]] = defaultdict(list)
    for engine in plan.engines:
        owned[engine.host] += [engine.http_port, *_kv_ports(engine.kv)]
    router = plan.router
    owned[router.host] += [router.port, *_router_ports(router)]
    for host, ports in owned.items():
        assert len(ports) == len(set(ports)), host
        assert all(1024 <= port <= 65535 for port in ports)
    table = {(use.host, use.port) for use in plan.ports}
    assert len(table) == len(plan.ports)
    assert table == {(host, port) for host, ports in owned.items() for port in ports}


@PROPERTIES
@given(gpu_specs())
def test_per_rank_port_lists_fit_tp_and_are_consecutive(data: dict[str, Any]) -> None:
    plan = plan_or_skip(data)
    for engine in plan.engines:
        kv = engine.kv
        for ports in _rank_lists(kv):
            assert len(ports) == engine.tp
            assert list(ports) == list(range(ports[0], ports[0] + engine.tp))
        if plan.topology.kind.value == "lmcache-pd":
            receiver = isinstance(kv, LMCachePDReceiverKV)
            assert receiver == (engine.role.value == "decode")
            assert isinstance(kv, LMCachePDReceiverKV | LMCachePDSenderKV)
        else:
            assert isinstance(kv, NixlMPEngineKV)


@PROPERTIES
@given(gpu_specs())
def test_planning_is_deterministic_and_honours_fixed_ports(data: dict[str, Any]) -> None:
    first = plan_or_skip(data)
    second = make_plan(parse_spec(data, source="hypothesis"))
    assert first.model_dump() == second.model_dump()
    fixed = data.get("router", {}).get("port")
    if fixed is not None:
        assert first.router.port == fixed


@PROPERTIES
@given(gpu_specs())
def test_containers_see_peer_gpus_but_select_disjoint_own_ones(data: dict[str, Any]) -> None:
    """cuda_ipc needs a same-host peer's GPU visible in the container; CUDA_VISIBLE_DEVICES
    (positions among the GPUs the container sees, not host ids) still gives every engine its
    own GPUs, never another's."""
    plan = plan_or_skip(data)
    selected: dict[str, set[int]] = defaultdict(set)
    for engine in plan.engines:
        visible = engine.visible_gpus
        assert list(visible) == sorted(set(visible))
        assert all(0 <= index < len(visible) for index in engine.cuda_devices)
        own = {visible[index] for index in engine.cuda_devices}
        assert own == set(engine.gpus)
        assert not selected[engine.host] & own
        selected[engine.host] |= own
        peers = [other for other in plan.engines_on(engine.host) if other.role is not engine.role]
        for peer in peers:  # every same-host KV peer's GPUs are visible
            assert set(peer.gpus) <= set(visible)
        if not peers:  # no same-host KV traffic: nothing beyond its own
            assert set(visible) == set(engine.gpus)


@PROPERTIES
@given(gpu_specs())
def test_rdma_follows_kv_between_hosts_and_automatic_ports_avoid_agents(
    data: dict[str, Any],
) -> None:
    from generator.plan.agent_ports import AGENT_PORTS

    plan = plan_or_skip(data)
    assert plan.rdma == plan.kv_crosses_hosts
    fixed = data.get("router", {}).get("port")
    assert not [u for u in plan.ports if u.port in AGENT_PORTS and u.port != fixed]


def _rank_lists(kv: EngineKV) -> list[tuple[int, ...]]:
    if isinstance(kv, NixlMPEngineKV):
        return [kv.side_channel_ports]
    if isinstance(kv, LMCachePDReceiverKV):
        return [kv.init_ports, kv.alloc_ports]
    return []


def _kv_ports(kv: EngineKV) -> list[int]:
    if isinstance(kv, NixlMPEngineKV):
        server = kv.lmcache_server
        return [*kv.side_channel_ports, server.zmq_port, server.http_port, server.metrics_port]
    if isinstance(kv, LMCachePDSenderKV):
        return [kv.nixl_telemetry_port]
    if isinstance(kv, LMCachePDReceiverKV):
        return [*kv.init_ports, *kv.alloc_ports]
    return []  # colocated: no KV ports


def _router_ports(router: RouterPlan) -> list[int]:
    if isinstance(router, VllmRouterPlan):
        return [router.metrics_port]
    return [router.notify_port] if router.notify_port is not None else []
