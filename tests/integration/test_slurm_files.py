"""The test Slurm cluster's files, as text (no cluster: tests/integration/slurm_files.py is
pure). The real cluster's tests check that Slurm accepts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.slurm_files import (
    ClusterLayout,
    NodeResources,
    Tracking,
    render_cgroup_conf,
    render_gres_conf,
    render_hosts,
    render_slurm_conf,
)

WORK = Path("/tmp/xpyd-slurm/abc123")


def layout(*nodes: NodeResources, tracking: Tracking = Tracking.CGROUP) -> ClusterLayout:
    return ClusterLayout.plan("abc123", WORK, nodes, tracking)


def test_each_node_gets_its_name_address_namespace_and_gpus() -> None:
    planned = layout(NodeResources(), NodeResources(gpus=1, gpu_type="a100"), NodeResources(gpus=0))
    assert [(n.name, n.address, n.netns) for n in planned.nodes] == [
        ("n1", "10.232.0.11", "xs-abc123-n1"),
        ("n2", "10.232.0.12", "xs-abc123-n2"),
        ("n3", "10.232.0.13", "xs-abc123-n3"),
    ]
    assert planned.netns_names == ("xs-abc123-ctl", "xs-abc123-n1", "xs-abc123-n2", "xs-abc123-n3")
    assert render_gres_conf(planned).splitlines() == [
        "AutoDetect=off",
        f"NodeName=n1 Name=gpu Type=h100 File={WORK}/dev/nvidia[0-1]",
        f"NodeName=n2 Name=gpu Type=a100 File={WORK}/dev/nvidia0",
    ]
    nodes = [line for line in render_slurm_conf(planned).splitlines() if line.startswith("Node")]
    assert [line.split()[0] for line in nodes] == ["NodeName=n1", "NodeName=n2", "NodeName=n3"]
    assert "Gres=gpu:h100:2" in nodes[0]
    assert "Gres=gpu:a100:1" in nodes[1]
    assert "Gres" not in nodes[2]
    assert render_hosts(planned).splitlines()[2:] == [
        "10.232.0.1 xsctl",
        "10.232.0.11 n1",
        "10.232.0.12 n2",
        "10.232.0.13 n3",
    ]


def test_node_resources_declare_what_the_test_asks_for() -> None:
    big = layout(NodeResources(cpus=64, memory_mb=512000, gpus=8, gpu_type="h200"))
    (node,) = [line for line in render_slurm_conf(big).splitlines() if line.startswith("NodeN")]
    assert "CPUs=64 Sockets=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=512000" in node
    assert "Gres=gpu:h200:8" in node
    assert "SlurmdParameters=config_overrides" in render_slurm_conf(big)


@pytest.mark.parametrize(
    "bad",
    [
        {"cpus": 0},
        {"memory_mb": 0},
        {"gpus": -1},
        {"gpus": 65},
        {"gpu_type": "H100"},
        {"gpu_type": "h100 x"},
        {"gpu_type": ""},
    ],
)
def test_node_resources_refuse_what_slurm_could_not_take(bad: dict[str, int | str]) -> None:
    with pytest.raises(ValueError, match=r"node resources|gpu_type|gpus="):
        NodeResources(**bad)  # type: ignore[arg-type]


def test_tracking_picks_the_plugins_and_cgroup_conf() -> None:
    confined = layout(NodeResources())
    assert "ProctrackType=proctrack/cgroup" in render_slurm_conf(confined)
    assert "ConstrainDevices=yes" in render_cgroup_conf(confined)
    plain = layout(NodeResources(), tracking=Tracking.LINUXPROC)
    assert "ProctrackType=proctrack/linuxproc" in render_slurm_conf(plain)
    assert "TaskPlugin=task/none" in render_slurm_conf(plain)
    assert "Constrain" not in render_cgroup_conf(plain)
