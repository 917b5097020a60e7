"""The live tiers' two groups (.ci/test's --live-groups): every Slurm module on one worker,
everything else, which shares host ports and one Docker engine, on the other."""

from __future__ import annotations

from tests.conftest import live_group


def test_the_slurm_modules_form_one_group_whatever_the_test() -> None:
    ids = [
        "tests/integration/test_slurm_stack.py::test_status_and_down",
        "tests/integration/test_slurm_cluster.py::test_a[request_options0-True]",
        "tests/integration/test_slurm_job_end.py::test_time_limit",
    ]
    assert {live_group(nodeid) for nodeid in ids} == {"slurm"}


def test_every_other_live_module_shares_the_host_group() -> None:
    ids = [
        "tests/integration/test_cpu_stack.py::test_up",
        "tests/integration/test_multihost_up.py::test_p2p_reuse_crosses_the_hosts",
        "tests/kvprobe/test_kv_probe_live.py::test_probe",
        # a parameter that looks like a Slurm module names no module
        "tests/integration/test_faults.py::test_x[test_slurm_stack.py]",
    ]
    assert {live_group(nodeid) for nodeid in ids} == {"host"}
