"""Issue 33 class 8: sizes no machine has are refused before planning (what the tool writes
for a host grows with its engines times its GPUs: one host with 4,096 GPUs took 107 s and
5.9 GB to validate). tests/benchmarks/bench_sizes.py times the largest sizes allowed."""

from __future__ import annotations

import pytest

from generator.errors import SpecError
from generator.limits import MAX_ENGINES_PER_HOST, MAX_GPUS_PER_HOST
from generator.stack import parse_spec
from tests.conftest import spec_dict


def refusal(**changes: object) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_dict(**changes), source="t.yaml")
    return str(caught.value)


def test_more_gpus_than_a_machine_shows_are_refused() -> None:
    message = refusal(hosts=[{"name": "h", "gpus": list(range(MAX_GPUS_PER_HOST + 1))}])
    assert "hosts[0].gpus: lists 65 GPUs, but no machine shows more than 64" in message
    assert "fix: list the GPUs of that one machine" in message
    spec = parse_spec(
        spec_dict(hosts=[{"name": "h", "gpus": list(range(MAX_GPUS_PER_HOST))}]), source="t"
    )
    assert spec.hosts[0].gpus == list(range(64))


@pytest.mark.parametrize(
    ("changes", "hold", "asked"),
    [
        # The campaign's: 2048P2048D on one host; cpu.share 4096P4096D on one core.
        ({"prefill": {"count": 2048}, "decode": {"count": 2048}}, 128, 4096),
        ({"prefill": {"count": 4096}, "decode": {"count": 4096}}, 128, 8192),
        ({"prefill": {"count": 129}, "decode": {"count": 128}}, 256, 257),
    ],
)
def test_more_engines_than_the_hosts_hold_are_refused(
    changes: dict[str, object], hold: int, asked: int
) -> None:
    hosts = [
        {"name": f"h{i}", "address": f"10.0.0.{i + 1}"} for i in range(hold // MAX_ENGINES_PER_HOST)
    ]
    message = refusal(hosts=hosts, **changes)
    assert (
        f"hosts: hold at most {hold} engines ({MAX_ENGINES_PER_HOST} a host), but "
        f"prefill.count + decode.count is {asked}" in message
    )


def test_the_largest_sizes_allowed_pass_validation() -> None:
    hosts = [{"name": "h", "gpus": list(range(64))}]
    groups = {"count": MAX_ENGINES_PER_HOST // 2, "gpu_memory_utilization": 0.4}
    spec = parse_spec(
        spec_dict(
            hosts=hosts,
            prefill=groups,
            decode=groups,
            gpu={"share": True},
            nixl={"transfer": "push"},  # a shared GPU needs push
        ),
        source="t",
    )
    assert spec.prefill.count + spec.decode.count == MAX_ENGINES_PER_HOST
