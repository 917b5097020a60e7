"""cpu.share: more cpu engines than listed cores only when the spec says so; free cores are
used first, then the least used one; no share of anything to declare (cores are time-sliced)."""

from __future__ import annotations

from typing import Any

import pytest

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.stack import load_spec, parse_spec
from tests.conftest import spec_dict


def two_prefillers(workspace: Workspace, *overrides: str) -> Any:
    return load_spec(workspace.stack_file("cpu-1p1d"), ["prefill.count=2", *overrides])


def test_three_engines_on_two_cores_need_cpu_share(workspace: Workspace) -> None:
    with pytest.raises(PlanError, match="need 3 CPU cores") as caught:
        make_plan(two_prefillers(workspace))
    assert caught.value.field == "decode.count"
    plan = make_plan(two_prefillers(workspace, "cpu.share=true"))
    cores = {engine.name: engine.cpus for engine in plan.engines}
    assert cores == {"prefill-0": (0,), "prefill-1": (1,), "decode-0": (0,)}


def test_free_cores_come_first_when_sharing(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d"), ["cpu.share=true"]))
    assert [engine.cpus for engine in plan.engines] == [(0,), (1,)]


def test_the_cpu_section_is_refused_on_the_gpu_profile() -> None:
    data = spec_dict(cpu={"share": True})
    with pytest.raises(SpecError, match=r"cpu\.share: is read by the cpu profile only"):
        parse_spec(data, source="test")


def test_a_bench_report_names_shared_cores(workspace: Workspace) -> None:
    from generator.bench.session import describe_hardware

    plan = make_plan(two_prefillers(workspace, "cpu.share=true"))
    assert describe_hardware(plan).startswith(
        "cpu profile: 3 engines on 2 pinned cores (shared: cpu.share) of "
    )
    alone = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    assert describe_hardware(alone).startswith("cpu profile: 2 engines on 2 pinned cores of ")
    assert describe_hardware(alone).endswith("; compose runtime")  # what ran the engines
