"""The verdict's view of a stack with part of it down (a fault's recovery): which engines it
leaves out, and that it refuses when no P/D path is left to judge."""

from __future__ import annotations

import pytest

from generator.errors import StackError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes.serving import serving_view
from generator.stack import load_spec
from generator.topologies import topology_of
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def plan() -> Plan:  # nixl-mp 1P2D: every engine has its own lmcache server
    return make_plan(load_spec(Workspace(ROOT).stack_file("cpu-faults")))


def test_nothing_down_is_the_plan_itself(plan: Plan) -> None:
    assert serving_view(plan, ()) == (plan, ())
    assert serving_view(plan, ["router"]) == (plan, ())  # not an engine, nor an engine's part


def test_a_down_decoder_is_left_out_with_its_counters(plan: Plan) -> None:
    view, out = serving_view(plan, ["decode-0"])
    assert out == ("decode-0",)
    assert [e.name for e in view.decode] == ["decode-1"]
    assert view.prefill == plan.prefill
    sources = topology_of(view).verdict_sources(view)
    assert sources is not None
    assert sources.kv_speed.engines == ("decode-1",)  # nixl-mp pulls: decoders count the KV
    assert [service for service, _ in sources.object_stores] == [
        "lmcache-prefill-0",
        "lmcache-decode-1",
    ]


def test_an_engine_whose_lmcache_server_is_down_is_left_out(plan: Plan) -> None:
    server = next(s for s in topology_of(plan).sidecars(plan.decode[1]))
    _, out = serving_view(plan, [server.service])
    assert out == ("decode-1",)


@pytest.mark.parametrize("down", [["prefill-0"], ["decode-0", "decode-1"]])
def test_no_prefiller_or_no_decoder_left_is_refused(plan: Plan, down: list[str]) -> None:
    with pytest.raises(StackError, match=r"no (prefill|decode) engine serves") as caught:
        serving_view(plan, down)
    assert caught.value.hint
