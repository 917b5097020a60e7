"""The live tiers' two groups (.ci/test's --live-groups): the modules in network namespaces
of their own (Slurm, the test hosts) on one worker, everything else, which shares host ports
and one Docker engine, on the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, live_group

# What puts a module's tests in namespaces of their own.
NAMESPACE_MAKERS = ("netns_hosts", "running_hosts", "SlurmCluster", "slurm_cluster")


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/integration/test_slurm_stack.py::test_status_and_down", "namespaces"),
        ("tests/integration/test_slurm_cluster.py::test_a[request_options0-True]", "namespaces"),
        ("tests/integration/test_slurm_job_end.py::test_time_limit", "namespaces"),
        ("tests/integration/test_multihost_up.py::test_p2p_reuse", "namespaces"),
        ("tests/integration/test_hosts.py::test_each_engine_answers", "namespaces"),
        ("tests/integration/test_host_teardown.py::test_leaves_nothing", "namespaces"),
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
        assert live_group(nodeid) == "namespaces", nodeid
