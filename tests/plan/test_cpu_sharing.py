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


def cpu_hosts(prefill: int, decode: int, *hosts: list[int], **changes: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "topology": "nixl-mp",
        "profile": "cpu",
        "model": {"id": "/opt/xpyd/models/tiny-llama", "source": "synthetic"},
        "prefill": {"count": prefill},
        "decode": {"count": decode},
        "cpu": {"share": True},
        "hosts": [
            {"name": f"h{i}", "address": f"10.0.0.{i + 1}", "cpus": cpus}
            for i, cpus in enumerate(hosts)
        ],
        **changes,
    }


def test_free_cores_on_every_host_come_before_sharing_one() -> None:
    # Issue 33: the first host's core was shared while the second host's stayed free.
    plan = make_plan(parse_spec(cpu_hosts(2, 2, [0], [0]), source="t"))
    placed = [(engine.name, engine.host, engine.cpus) for engine in plan.engines]
    assert placed == [
        ("prefill-0", "h0", (0,)),
        ("prefill-1", "h1", (0,)),
        ("decode-0", "h0", (0,)),  # then the least used core, the first such in host order
        ("decode-1", "h1", (0,)),
    ]


def test_sharing_takes_the_least_used_core_of_all_hosts() -> None:
    plan = make_plan(parse_spec(cpu_hosts(3, 4, [0, 1], [0]), source="t"))
    used: dict[tuple[str, int], int] = {}
    for engine in plan.engines:
        used[engine.host, engine.cpus[0]] = used.get((engine.host, engine.cpus[0]), 0) + 1
    assert sorted(used.values()) == [2, 2, 3]


def test_no_host_gets_more_engines_than_a_machine_runs() -> None:
    data = cpu_hosts(129, 1, [0], [0], placement={"prefill": {"hosts": "h0"}})
    with pytest.raises(PlanError) as caught:
        make_plan(parse_spec(data, source="t"))
    assert str(caught.value).startswith(
        "hosts[0]: host h0 gets 129 engines, but no machine runs more than 128"
    )
