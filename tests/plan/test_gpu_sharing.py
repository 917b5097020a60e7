"""gpu.share: engines on one GPU only when the spec says so, each with its share of memory,
together at most 0.9 of it; free GPUs are still used first."""

from __future__ import annotations

from typing import Any

import pytest

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.services.commands import engine_command
from generator.stack import load_spec, parse_spec
from tests.conftest import spec_dict


def sharing(
    gpus: list[int], prefill: float | None = 0.4, decode: float | None = 0.4
) -> dict[str, Any]:
    groups = {
        role: {"count": 1} | ({"gpu_memory_utilization": share} if share is not None else {})
        for role, share in (("prefill", prefill), ("decode", decode))
    }
    # push: a decoder pulling from a prefiller on its own GPU is refused (below)
    return spec_dict(
        hosts=[{"name": "h", "gpus": gpus}],
        gpu={"share": True},
        nixl={"transfer": "push"},
        **groups,
    )


def test_the_one_gpu_stack_puts_both_engines_on_gpu_0(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("xpyd-1gpu")))
    assert [engine.gpus for engine in plan.engines] == [(0,), (0,)]
    assert [engine.cuda_devices for engine in plan.engines] == [(0,), (0,)]
    for engine in plan.engines:  # vLLM is told its share
        command = engine_command(plan, engine)
        assert command[command.index("--gpu-memory-utilization") + 1] == "0.4"


def test_without_share_one_gpu_is_refused_with_the_fix() -> None:
    data = sharing([0])
    data["gpu"] = {"share": False}
    with pytest.raises(PlanError) as caught:
        make_plan(parse_spec(data, source="test"))
    assert caught.value.field == "decode.count"
    data["placement"] = {
        "prefill": {"hosts": ["h"], "gpus": [[0]]},
        "decode": {"hosts": ["h"], "gpus": [[0]]},
    }
    with pytest.raises(PlanError, match="given to both prefill-0 and decode-0") as explicit:
        make_plan(parse_spec(data, source="test"))
    assert "gpu.share: true" in explicit.value.hint


def test_free_gpus_come_first_when_sharing() -> None:
    plan = make_plan(parse_spec(sharing([0, 1], prefill=None, decode=None), source="test"))
    assert [engine.gpus for engine in plan.engines] == [
        (0,),
        (1,),
    ]  # nobody shares: no shares needed


def test_sharing_engines_must_say_their_share() -> None:
    with pytest.raises(PlanError) as caught:
        make_plan(parse_spec(sharing([0], decode=None), source="test"))
    assert caught.value.field == "decode.gpu_memory_utilization"
    assert "prefill-0, decode-0 share GPU 0 on host h" in caught.value.message


def test_shares_over_0_9_of_one_gpu_are_refused() -> None:
    with pytest.raises(PlanError, match=r"take 0\.95 of its memory together, more than 0\.9"):
        make_plan(parse_spec(sharing([0], prefill=0.5, decode=0.45), source="test"))
    make_plan(parse_spec(sharing([0], prefill=0.45, decode=0.45), source="test"))  # 0.9: fine


def test_a_decoder_may_not_pull_from_a_prefiller_on_its_own_gpu() -> None:
    """UCX serves a same-GPU READ over tcp/lo: the shared-GPU stack must push (xpyd-1gpu)."""
    data = sharing([0]) | {"nixl": {"transfer": "pull"}}
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="test")
    (issue,) = caught.value.issues
    assert issue.field == "nixl.transfer"
    assert "prefill-0 and decode-0 share GPU 0 on host h (gpu.share)" in issue.problem
    assert issue.fix.startswith("set nixl.transfer: push")
    # sharing allowed but not needed (a GPU each), or engines of one role on a GPU: pull works
    make_plan(parse_spec(sharing([0, 1], prefill=None, decode=None) | {"nixl": {}}, source="t"))
    two_decoders = sharing([0, 1]) | {
        "nixl": {},
        "decode": {"count": 2, "gpu_memory_utilization": 0.4},
        "placement": {"decode": {"hosts": ["h"], "gpus": [[1], [1]]}},
    }
    plan = make_plan(parse_spec(two_decoders, source="t"))
    assert [engine.gpus for engine in plan.engines] == [(0,), (1,), (1,)]
