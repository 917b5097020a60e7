"""nixl.transfer: pull (vLLM's NixlConnector, the decoder READs) or push (NixlPushConnector,
the prefiller WRITEs); the verdict reads the KV speed where the bytes move. Measured on one
H200 (xpyd-1gpu): push moved each smoke request's ~694 MiB over cuda_ipc at 92-246 GiB/s."""

from __future__ import annotations

import json

import pytest

from generator.errors import SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.services.commands import engine_command
from generator.stack import load_spec
from generator.topologies import topology_of


def connectors(workspace: Workspace, stack: str, *overrides: str) -> list[str]:
    plan = make_plan(load_spec(workspace.stack_file(stack), list(overrides)))
    names = []
    for engine in plan.engines:
        command = engine_command(plan, engine)
        config = json.loads(command[command.index("--kv-transfer-config") + 1])
        names.append(config["kv_connector_extra_config"]["connectors"][0]["kv_connector"])
    return names


def test_pull_is_upstreams_default_and_push_is_asked_for(workspace: Workspace) -> None:
    assert connectors(workspace, "xpyd-mp") == ["NixlConnector", "NixlConnector"]
    assert connectors(workspace, "xpyd-1gpu") == ["NixlPushConnector", "NixlPushConnector"]
    assert connectors(workspace, "xpyd-mp", "nixl.transfer=push") == ["NixlPushConnector"] * 2


def test_the_verdict_times_the_kv_where_it_moves(workspace: Workspace) -> None:
    pull = make_plan(load_spec(workspace.stack_file("xpyd-mp")))
    push = make_plan(load_spec(workspace.stack_file("xpyd-1gpu")))
    pull_sources = topology_of(pull).verdict_sources(pull)
    push_sources = topology_of(push).verdict_sources(push)
    assert pull_sources is not None
    assert push_sources is not None
    pulled, pushed = pull_sources.kv_speed, push_sources.kv_speed
    assert (pulled.engines, pulled.operation) == (("decode-0",), "read")
    assert (pushed.engines, pushed.operation) == (("prefill-0",), "write")
    # the decoder counts no bytes under push: only its failures are judged there
    assert [row.check for row in push_sources.decode_rows] == ["NIXL failed transfers"]
    assert "NIXL bytes transferred" in [row.check for row in pull_sources.decode_rows]


def test_nixl_settings_belong_to_nixl_mp(workspace: Workspace) -> None:
    with pytest.raises(SpecError, match="nixl: is read by the nixl-mp topology only"):
        load_spec(workspace.stack_file("xpyd"), ["nixl.transfer=push"])
    assert (
        make_plan(load_spec(workspace.stack_file("xpyd-mp"))).model_dump_json().count("transfer")
        == 1
    )
