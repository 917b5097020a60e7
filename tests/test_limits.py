"""generator/limits.py: each limit is the one the tool applies everywhere it applies. Written
against the constants, so changing one shows here: names (spec, workbench, bench baseline)
and the KV-speed floor (smoke verdict and doctor, judged by one rule)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from generator.doctor.kvpath import KvProbe, judge
from generator.doctor.report import Verdict
from generator.errors import SpecError
from generator.limits import (
    BASELINE_SUFFIX,
    CROSS_HOST_FLOOR_GIB_S,
    PD_NAME_MAX,
    SAME_HOST_FLOOR_GIB_S,
    STACK_NAME_MAX,
    KvPath,
    is_stack_name,
    judge_kv_speed,
    transport_family,
)
from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes.kv_speed import KvCounters, kv_speed_row
from generator.spec.types import DnsLabel
from generator.stack import baseline_spec, load_spec, parse_spec
from tests.conftest import spec_dict
from tests.doctor.test_checks import h200_view, record

_LABEL = TypeAdapter(DnsLabel)
NAME_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-")


def _valid_label(text: str) -> bool:
    try:
        _LABEL.validate_python(text)
    except ValidationError:
        return False
    return True


def test_the_name_limits_add_up() -> None:
    assert PD_NAME_MAX + len(BASELINE_SUFFIX) == STACK_NAME_MAX
    assert is_stack_name("a" * STACK_NAME_MAX)
    assert not is_stack_name("a" * (STACK_NAME_MAX + 1))


@given(st.text(NAME_CHARS, max_size=STACK_NAME_MAX + 3))
def test_the_spec_and_the_workbench_read_stack_names_alike(name: str) -> None:
    """One pattern: what the spec's name field takes is what a bare stack name may be."""
    assert _valid_label(name) == is_stack_name(name)


@given(st.integers(1, STACK_NAME_MAX))
def test_a_pd_stack_that_validates_has_a_benchmarkable_baseline(length: int) -> None:
    """bench --baseline colocated never fails about a name the user never wrote: a P/D name
    too long for its baseline's is refused at load, naming the field."""
    data: dict[str, Any] = spec_dict(name="a" * length)
    if length > PD_NAME_MAX:
        with pytest.raises(SpecError) as caught:
            parse_spec(data, source="t")
        assert any(issue.field == "name" for issue in caught.value.issues)
        return
    spec = parse_spec(data, source="t")
    assert baseline_spec(spec, make_plan(spec)).name == "a" * length + BASELINE_SUFFIX


def test_a_colocated_stack_may_use_the_whole_name_limit() -> None:
    data = spec_dict(name="a" * STACK_NAME_MAX, topology="colocated")
    assert parse_spec(data, source="t").name == "a" * STACK_NAME_MAX


@pytest.mark.parametrize(
    ("transport", "family"),
    [
        ("cuda_ipc", "gpu-peer"),
        ("rc_mlx5", "rdma"),
        ("dc_mlx5", "rdma"),
        ("tcp", "tcp"),
        ("cma", "shared-memory"),
        ("posix", "shared-memory"),
        ("cuda_copy", "unknown"),
    ],
)
def test_transport_families(transport: str, family: str) -> None:
    assert transport_family(transport) == family


@pytest.mark.parametrize(
    ("path", "transport", "gib_s", "passed", "warn"),
    [
        (KvPath.SAME_HOST_GPU, "cuda_ipc", SAME_HOST_FLOOR_GIB_S, True, False),
        (KvPath.SAME_HOST_GPU, "cuda_ipc", SAME_HOST_FLOOR_GIB_S - 0.01, False, False),
        (KvPath.SAME_HOST_GPU, "tcp", 300.0, False, False),
        (KvPath.SAME_HOST_GPU, "rc_mlx5", 300.0, False, False),  # off cuda_ipc: a fallback
        (KvPath.SAME_HOST_GPU, None, SAME_HOST_FLOOR_GIB_S, True, False),  # speed decides
        (KvPath.CROSS_HOST_GPU, "rc_mlx5", CROSS_HOST_FLOOR_GIB_S, True, False),
        (KvPath.CROSS_HOST_GPU, "rc_mlx5", CROSS_HOST_FLOOR_GIB_S - 0.01, None, True),
        (KvPath.CROSS_HOST_GPU, "tcp", 50.0, None, True),
        (KvPath.CPU, "tcp", 0.1, None, False),
    ],
)
def test_the_kv_speed_rule(
    path: KvPath, transport: str | None, gib_s: float, passed: bool | None, warn: bool
) -> None:
    judged = judge_kv_speed(path, transport, gib_s)
    assert (judged.passed, judged.warn) == (passed, warn)


def _smoke_row(workspace: Workspace, transport: str, gib_s: float) -> bool | None:
    plan = make_plan(load_spec(workspace.stack_file("xpyd-mp")))
    size = 512 << 20
    counters = [("r0", KvCounters(size, size / (gib_s * (1 << 30)), 1))]
    return kv_speed_row(plan, counters, transport).passed


def _doctor_verdict(workspace: Workspace, transport: str, gib_s: float) -> Verdict:
    result = record("kvpath_h200_rendered.json") | {
        "transport": transport,
        "read_gib_s_median": gib_s,
        "write_gib_s_median": gib_s,
    }
    return judge(h200_view(workspace), KvProbe("prefill-0", "decode-0", result)).verdict


@pytest.mark.parametrize(
    ("transport", "gib_s"),
    [
        ("cuda_ipc", SAME_HOST_FLOOR_GIB_S),
        ("cuda_ipc", SAME_HOST_FLOOR_GIB_S - 0.01),
        ("tcp", 300.0),
        ("rc_mlx5", 300.0),
        ("cma", 300.0),
    ],
)
def test_smoke_and_doctor_judge_a_same_host_pair_alike(
    workspace: Workspace, transport: str, gib_s: float
) -> None:
    """Once they disagreed: the smoke verdict failed only TCP, doctor anything off cuda_ipc."""
    smoke = _smoke_row(workspace, transport, gib_s)
    doctor = _doctor_verdict(workspace, transport, gib_s)
    assert smoke is (doctor is not Verdict.FAIL)
