"""The live tiers' two groups (.ci/test's --live-groups): the modules apart from this
machine's Docker engine and its stacks' host ports (Slurm and the test hosts in network
namespaces of their own, the process stacks on ports of their own) on one worker, everything
else, which shares host ports and one Docker engine, on the other."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from tests.conftest import ROOT, LiveGroupClock, live_group
from tests.integration.conftest import planned_ports
from tests.integration.test_cpu_stack import SHIFTED
from tests.integration.test_doctor_and_hosts import TWO_HOSTS
from tests.integration.test_process_stacks import OBSERVING, process_ports

# What puts a module's tests in namespaces of their own.
NAMESPACE_MAKERS = ("netns_hosts", "running_hosts", "SlurmCluster", "slurm_cluster")


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/integration/test_slurm_stack.py::test_status_and_down", "apart"),
        ("tests/integration/test_slurm_cluster.py::test_a[request_options0-True]", "apart"),
        ("tests/integration/test_slurm_job_end.py::test_time_limit", "apart"),
        ("tests/integration/test_multihost_up.py::test_p2p_reuse", "apart"),
        ("tests/integration/test_hosts.py::test_each_engine_answers", "apart"),
        ("tests/integration/test_host_teardown.py::test_leaves_nothing", "apart"),
        ("tests/integration/test_process_stacks.py::test_ctrl_c_stops_every_process", "apart"),
        ("tests/integration/test_cpu_stack.py::test_up", "host"),
        ("tests/integration/test_doctor_and_hosts.py::test_doctor_names_a_busy_port", "host"),
        ("tests/kvprobe/test_kv_probe_live.py::test_probe", "host"),
        # a parameter that looks like a Slurm module names no module
        ("tests/integration/test_faults.py::test_x[test_slurm_stack.py]", "host"),
    ],
)
def test_a_live_test_s_group_is_its_module_s(nodeid: str, group: str) -> None:
    assert live_group(nodeid) == group


def test_every_module_that_makes_namespaces_is_in_their_group() -> None:
    """A new module that makes a Slurm cluster or test hosts joins their worker: beside them,
    two workers could pick the same free subnet at once."""
    modules = sorted(set((ROOT / "tests").rglob("test_*.py")) - {Path(__file__).resolve()})
    makers = [path for path in modules if any(m in path.read_text() for m in NAMESPACE_MAKERS)]
    assert len(makers) >= 5  # the Slurm modules and the test hosts' three
    for path in makers:
        nodeid = f"{path.relative_to(ROOT).as_posix()}::test"
        assert live_group(nodeid) == "apart", nodeid


def host_group_ports() -> dict[int, str]:
    """Every port the other group's stacks plan on this machine: each cpu stack as shipped and
    the variants its tests bring up on ports of their own."""
    variants: list[tuple[str, list[str]]] = [
        (path.stem, []) for path in sorted((ROOT / "stacks").glob("cpu-*.yaml"))
    ]
    variants += [("cpu-1p1d", SHIFTED), ("cpu-1p1d", TWO_HOSTS)]
    return {
        port: f"{stack} {' '.join(changes)}".strip()
        for stack, changes in variants
        for port in planned_ports(ROOT, stack, changes)
    }


@pytest.mark.parametrize("stack", ["cpu-1p1d", "cpu-lmcache-pd"])
def test_the_process_stacks_share_no_port_with_the_other_group_s_stacks(stack: str) -> None:
    """The process stacks run on this machine's network beside the compose stacks: a port of
    both would fail whichever `up` came second (its preflight), or worse, reach the other."""
    ours = process_ports(ROOT, stack, *OBSERVING)
    assert len(ours) >= 8
    theirs = host_group_ports()
    shared = {port: theirs[port] for port in sorted(ours & theirs.keys())}
    assert shared == {}


def test_the_clock_sums_each_group_and_its_modules_busiest_first() -> None:
    clock = LiveGroupClock()
    reports: list[tuple[str, Literal["setup", "call", "teardown"], float]] = [
        ("tests/integration/test_cpu_stack.py::test_up", "setup", 90.0),
        ("tests/integration/test_cpu_stack.py::test_up", "call", 5.0),
        ("tests/integration/test_faults.py::test_x", "call", 120.0),
        ("tests/integration/test_slurm_stack.py::test_y", "setup", 200.0),
        ("tests/integration/test_slurm_stack.py::test_y", "teardown", 10.0),
    ]
    for nodeid, when, seconds in reports:
        report = pytest.TestReport(nodeid, ("", None, ""), {}, "passed", None, when, [])
        report.duration = seconds
        clock.pytest_runtest_logreport(report)
    assert clock.lines() == [
        "   215 s  group host",
        "   120 s    tests/integration/test_faults.py",
        "    95 s    tests/integration/test_cpu_stack.py",
        "   210 s  group apart",
        "   210 s    tests/integration/test_slurm_stack.py",
    ]
