"""The live tiers' two groups (.ci/test's --live-groups): the modules in network namespaces
of their own (Slurm, the test hosts) on one worker, everything else, which shares host ports
and one Docker engine, on the other."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, live_group

# What puts a module's tests in namespaces of their own.
NAMESPACE_MAKERS = ("netns_hosts", "running_hosts", "SlurmCluster", "slurm_cluster")


def test_the_namespaced_modules_form_one_group_whatever_the_test() -> None:
    ids = [
        "tests/integration/test_slurm_stack.py::test_status_and_down",
        "tests/integration/test_multihost_up.py::test_p2p_reuse_crosses_the_hosts",
        "tests/integration/test_hosts.py::test_each_engine_answers_through_its_context",
        "tests/integration/test_host_teardown.py::test_a_removed_test_host_leaves_nothing",
        "tests/integration/test_slurm_cluster.py::test_a[request_options0-True]",
        "tests/integration/test_slurm_job_end.py::test_time_limit",
    ]
    assert {live_group(nodeid) for nodeid in ids} == {"namespaces"}


def test_every_other_live_module_shares_the_host_group() -> None:
    ids = [
        "tests/integration/test_cpu_stack.py::test_up",
        "tests/integration/test_doctor_and_hosts.py::test_doctor_names_a_busy_port_and_fails",
        "tests/kvprobe/test_kv_probe_live.py::test_probe",
        # a parameter that looks like a Slurm module names no module
        "tests/integration/test_faults.py::test_x[test_slurm_stack.py]",
    ]
    assert {live_group(nodeid) for nodeid in ids} == {"host"}


def test_every_module_that_makes_namespaces_is_in_their_group() -> None:
    """A new module that makes a Slurm cluster or test hosts joins their worker: beside them,
    two workers could pick the same free subnet at once."""
    modules = sorted(set((ROOT / "tests").rglob("test_*.py")) - {Path(__file__).resolve()})
    makers = [path for path in modules if any(m in path.read_text() for m in NAMESPACE_MAKERS)]
    assert len(makers) >= 5  # the Slurm modules and the test hosts' three
    for path in makers:
        nodeid = f"{path.relative_to(ROOT).as_posix()}::test"
        assert live_group(nodeid) == "namespaces", nodeid
