"""What a test Slurm cluster is made of, as data and text: node resources, names and
addresses, and the files the daemons read (slurm.conf, gres.conf, cgroup.conf, the hosts
file). Pure: nothing here touches the machine (tests/integration/slurm_cluster.py does).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = [
    "CONTROLLER_ADDRESS",
    "CONTROLLER_HOSTNAME",
    "NETWORK",
    "PARTITION",
    "ClusterLayout",
    "NodeResources",
    "SlurmNode",
    "Tracking",
    "gpu_device_paths",
    "render_cgroup_conf",
    "render_gres_conf",
    "render_hosts",
    "render_slurm_conf",
]

# Inside the controller's own namespace, so it never meets an address of the machine; clear of
# the multi-host tests' 10.231.0.0/16 all the same, for whoever reads `ip` output.
NETWORK = ipaddress.IPv4Network("10.232.0.0/24")
CONTROLLER_ADDRESS = "10.232.0.1"
CONTROLLER_HOSTNAME = "xsctl"
PARTITION = "debug"
_FIRST_NODE_HOST = 11  # n1 is 10.232.0.11, n2 .12, ...
_GPU_TYPE = re.compile(r"[a-z0-9_]{1,32}")


class Tracking(StrEnum):
    """How slurmd follows a step's processes (ProctrackType)."""

    CGROUP = "cgroup"  # proctrack/cgroup, cgroup v1, in a cgroup namespace per node
    LINUXPROC = "linuxproc"  # proctrack/linuxproc: parent links, no cgroups (a pure cgroup v2 host)


@dataclass(frozen=True)
class NodeResources:
    """What one node declares; slurmctld judges requests against this, whatever the machine
    has (SlurmdParameters=config_overrides), so a test can make a node fit a spec or not."""

    cpus: int = 2
    memory_mb: int = 4000
    gpus: int = 2
    gpu_type: str = "h100"

    def __post_init__(self) -> None:
        if self.cpus < 1 or self.memory_mb < 1 or self.gpus < 0:
            raise ValueError(f"node resources must be positive (GPUs may be 0): {self}")
        if not _GPU_TYPE.fullmatch(self.gpu_type):
            raise ValueError(f"gpu_type {self.gpu_type!r}: use lower-case letters and digits")
        if self.gpus > 64:
            raise ValueError(f"gpus={self.gpus}: at most 64 fake GPUs per node")


@dataclass(frozen=True)
class SlurmNode:
    name: str  # NodeName and hostname: "n1"
    address: str
    netns: str
    resources: NodeResources


@dataclass(frozen=True)
class ClusterLayout:
    """Names and paths of one cluster; the id keeps two runs' names apart."""

    cluster_id: str
    work_dir: Path
    nodes: tuple[SlurmNode, ...]
    tracking: Tracking

    @classmethod
    def plan(
        cls, cluster_id: str, work_dir: Path, nodes: tuple[NodeResources, ...], tracking: Tracking
    ) -> ClusterLayout:
        hosts = list(NETWORK.hosts())
        described = tuple(
            SlurmNode(
                name=f"n{index + 1}",
                address=str(hosts[_FIRST_NODE_HOST - 1 + index]),
                netns=f"xs-{cluster_id}-n{index + 1}",
                resources=resources,
            )
            for index, resources in enumerate(nodes)
        )
        return cls(cluster_id, work_dir, described, tracking)

    @property
    def controller_netns(self) -> str:
        return f"xs-{self.cluster_id}-ctl"

    @property
    def netns_names(self) -> tuple[str, ...]:
        return (self.controller_netns, *(node.netns for node in self.nodes))

    @property
    def slurm_conf(self) -> Path:
        return self.work_dir / "etc" / "slurm.conf"

    @property
    def hosts_file(self) -> Path:
        return self.work_dir / "etc" / "hosts"

    @property
    def munge_dir(self) -> Path:
        return self.work_dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.sock"

    @property
    def device_dir(self) -> Path:
        return self.work_dir / "dev"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "log"

    def cgroup_name(self, node: SlurmNode) -> str:
        """The cgroup (under the caller's own, per controller) that is a node's cgroup
        namespace root: slurmd makes its slurm_<node> tree in there."""
        return f"xs-{self.cluster_id}-{node.name}"


def gpu_device_paths(layout: ClusterLayout, node: SlurmNode) -> list[Path]:
    return [layout.device_dir / f"nvidia{index}" for index in range(node.resources.gpus)]


def render_slurm_conf(layout: ClusterLayout) -> str:
    base = layout.work_dir
    lines = [
        "ClusterName=xpyd",
        f"SlurmctldHost={CONTROLLER_HOSTNAME}({CONTROLLER_ADDRESS})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={base}/state",
        f"SlurmdSpoolDir={base}/spool/%n",
        f"SlurmctldPidFile={base}/run/slurmctld.pid",
        f"SlurmdPidFile={base}/run/slurmd.%n.pid",
        f"SlurmctldLogFile={layout.log_dir}/slurmctld.log",
        f"SlurmdLogFile={layout.log_dir}/slurmd.%n.log",
        *_tracking_lines(layout.tracking),
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        # Heterogeneous jobs are started by the backfill scheduler only: every 30 s by default.
        "SchedulerParameters=bf_interval=1",
        # A node declares what the test needs, not what this machine has (module docstring).
        "SlurmdParameters=config_overrides",
        "KillWait=5",  # scancel: SIGTERM, then SIGKILL 5 s later (30 s by default)
        "GresTypes=gpu",
        *(_node_line(node) for node in layout.nodes),
        f"PartitionName={PARTITION} Nodes={','.join(n.name for n in layout.nodes)} "
        "Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def _tracking_lines(tracking: Tracking) -> list[str]:
    if tracking is Tracking.CGROUP:
        return ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup"]
    return ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"]


def _node_line(node: SlurmNode) -> str:
    cpus = node.resources.cpus
    gres = (
        f" Gres=gpu:{node.resources.gpu_type}:{node.resources.gpus}" if node.resources.gpus else ""
    )
    return (
        f"NodeName={node.name} NodeAddr={node.address} NodeHostname={node.name} CPUs={cpus} "
        f"Sockets=1 CoresPerSocket={cpus} ThreadsPerCore=1 "
        f"RealMemory={node.resources.memory_mb}{gres} State=UNKNOWN"
    )


def render_gres_conf(layout: ClusterLayout) -> str:
    """Fake GPUs: character devices with NVIDIA's major number (no driver behind them), so
    slurmd counts them and the devices cgroup can allow or deny each one."""
    lines = ["AutoDetect=off"]
    for node in layout.nodes:
        count = node.resources.gpus
        if count:
            files = f"nvidia[0-{count - 1}]" if count > 1 else "nvidia0"
            lines.append(
                f"NodeName={node.name} Name=gpu Type={node.resources.gpu_type} "
                f"File={layout.device_dir}/{files}"
            )
    return "\n".join(lines) + "\n"


def render_cgroup_conf(layout: ClusterLayout) -> str:
    if layout.tracking is Tracking.LINUXPROC:
        return "CgroupPlugin=autodetect\n"
    # Cores are not constrained: a node may declare more CPUs than the machine has, and a
    # cpuset of CPUs that do not exist cannot be written.
    return (
        "CgroupPlugin=cgroup/v1\nConstrainCores=no\nConstrainDevices=yes\nConstrainRAMSpace=yes\n"
    )


def render_hosts(layout: ClusterLayout) -> str:
    """Bind-mounted over /etc/hosts in every daemon's mount namespace: node names resolve
    there as DNS would make them on a real cluster."""
    lines = ["127.0.0.1 localhost", "::1 localhost", f"{CONTROLLER_ADDRESS} {CONTROLLER_HOSTNAME}"]
    lines += [f"{node.address} {node.name}" for node in layout.nodes]
    return "\n".join(lines) + "\n"
