"""The verdict's KV speed row: GiB/s per request from counter deltas, judged by where the KV
travels (same-host GPUs: a TCP-class fallback fails; between hosts: slow warns; CPU: a figure)."""

from __future__ import annotations

from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes.kv_speed import KvCounters, kv_side, kv_speed_row
from generator.stack import load_spec

MIB = 1 << 20


def plan_of(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    return make_plan(load_spec(workspace.stack_file(stack), list(overrides)))


def requests(*rates_gib_s: float, size: int = 512 * MIB) -> list[tuple[str, KvCounters]]:
    """One request per rate: ``size`` bytes in the time that rate takes."""
    return [
        (f"r{i}", KvCounters(size, size / (rate * (1 << 30)), 1))
        for i, rate in enumerate(rates_gib_s)
    ]


def test_counters_subtract_and_describe() -> None:
    moved = KvCounters(3 * 512 * MIB, 0.006, 3) - KvCounters(2 * 512 * MIB, 0.004, 2)
    assert moved == KvCounters(512 * MIB, 0.002, 1)
    assert moved.gib_s == 250.0
    assert moved.describe() == "512.0 MiB in 2.00 ms = 250.00 GiB/s"
    assert KvCounters(0, 0, 0).gib_s is None
    # Where the engines count NIXL's descriptors (nixl-mp), the smoke request's row names them.
    counted = KvCounters(512 * MIB, 0.002, 1, 64) - KvCounters(0, 0, 0)
    assert counted.describe() == "512.0 MiB in 2.00 ms = 250.00 GiB/s, 64 descriptors"


def test_nixl_mp_counts_descriptors_and_lmcache_pd_does_not(workspace: Workspace) -> None:
    assert kv_side(plan_of(workspace, "xpyd-mp")).descriptors_metric == (
        "vllm:nixl_num_descriptors_sum"
    )
    assert kv_side(plan_of(workspace, "xpyd")).descriptors_metric is None


def test_same_host_gpus_fail_a_tcp_class_fallback(workspace: Workspace) -> None:
    plan = plan_of(workspace, "xpyd-mp")
    side = kv_side(plan)
    assert (side.engines, side.operation) == (tuple(e.name for e in plan.decode), "read")
    assert side.ports == tuple(e.http_port for e in plan.decode)
    assert kv_speed_row(plan, requests(280, 300), "cuda_ipc").passed is True
    fallback = kv_speed_row(plan, requests(0.42, 0.44), "cuda_ipc")  # UCX may still say cuda_ipc
    assert fallback.passed is False
    assert "0.42 GiB/s" in fallback.observed
    assert kv_speed_row(plan, requests(280, 300), "tcp").passed is False


def test_a_slow_first_transfer_alone_is_not_a_fallback(workspace: Workspace) -> None:
    """The first transfer of a pair pays for connection setup; a fallback is slow every time."""
    plan = plan_of(workspace, "xpyd-mp")
    assert kv_speed_row(plan, requests(6, 250), "cuda_ipc").passed is True


def test_lmcache_pd_judges_the_prefillers_writes(workspace: Workspace) -> None:
    plan = plan_of(workspace, "xpyd")
    side = kv_side(plan)
    assert (side.engines, side.operation) == (tuple(e.name for e in plan.prefill), "write")
    assert side.seconds_per_unit == 1e-6  # NIXL's exporter counts microseconds
    row = kv_speed_row(plan, requests(150, 200), "cuda_ipc")
    assert (row.passed, row.check) == (True, "KV path speed (NIXL writes, per request)")


def test_between_hosts_slow_only_warns(workspace: Workspace) -> None:
    plan = plan_of(workspace, "xpyd-mp-2host")
    assert plan.kv_crosses_hosts
    assert kv_speed_row(plan, requests(20, 22), "rc_mlx5").passed is True
    slow = kv_speed_row(plan, requests(1, 1.2), "tcp")
    assert (slow.passed, slow.mark) == (None, "WARN")


def test_cpu_stacks_print_the_figure(workspace: Workspace) -> None:
    row = kv_speed_row(plan_of(workspace, "cpu-1p1d"), requests(0.15, 0.2, size=MIB), "tcp")
    assert (row.passed, row.mark) == (None, "info")
    assert "over tcp" in row.observed


def test_untimed_transfers_on_gpus_fail(workspace: Workspace) -> None:
    plan = plan_of(workspace, "xpyd-mp")
    row = kv_speed_row(plan, [("r0", KvCounters(0, 0, 0))], None)
    assert row.passed is False
