"""What a test Slurm cluster needs of this machine, and how it uses it: the packages (and
installing them), the tools, which process tracking the machine's cgroups allow, the
network namespaces, and the command line that starts a daemon inside its namespaces."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.integration.slurm_files import CONTROLLER_ADDRESS, ClusterLayout, Tracking
from tests.integration.slurm_teardown import NETNS_DIR

__all__ = [
    "CONTROLLERS",
    "PACKAGES",
    "SlurmClusterError",
    "SlurmUnavailable",
    "choose_tracking",
    "create_network",
    "in_namespaces",
    "install_slurm",
    "missing_slurm",
    "missing_tools",
    "own_cgroup",
    "run_checked",
]

# nftables: the nodes' own nft, which a link cut runs as a step on each node.
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "nftables")
CONTROLLERS = ("freezer", "memory", "devices")  # proctrack, ConstrainRAMSpace, ConstrainDevices
_SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sinfo", "srun", "sbatch", "scontrol", "nft")
_SYSTEM_TOOLS = ("ip", "nsenter", "unshare", "setpriv", "mount", "umount", "hostname")

# Run by nsenter in the daemon's network namespace: joins the node's cgroups (if any), then
# execs unshare for a cgroup namespace rooted there, its own hostname and mount namespace.
_OUTER = """set -eu
inner=$1 cgroups=$2; shift 2
for dir in $cgroups; do echo $$ > "$dir/cgroup.procs"; done
exec unshare --uts --mount ${cgroups:+--cgroup} sh -c "$inner" sh "$@"
"""
# In the new namespaces (private mounts: nothing here reaches the machine's mount table).
_INNER = """set -eu
name=$1 hosts=$2 controllers=$3; shift 3
mount --bind "$hosts" /etc/hosts
hostname "$name"
for c in $controllers; do
    umount "/sys/fs/cgroup/$c"  # the kernel refuses the same hierarchy atop its own root
    mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
done
exec "$@"
"""


class SlurmUnavailable(Exception):
    """Slurm is missing and cannot be installed here."""


class SlurmClusterError(RuntimeError):
    """The cluster did not come up, a client command failed, or teardown left something."""


def missing_slurm() -> list[str]:
    return [tool for tool in _SLURM_TOOLS if shutil.which(tool) is None]


def missing_tools() -> list[str]:
    """What this machine lacks to host a cluster, Slurm itself aside (root, and tools)."""
    missing = [tool for tool in _SYSTEM_TOOLS if shutil.which(tool) is None]
    return missing if os.geteuid() == 0 else ["root", *missing]


def install_slurm(log: Callable[[str], None] = print) -> None:
    """Debian's slurmctld, slurmd, slurm-client and munge, when a tool of theirs is missing.
    Their postinst cannot start the services where policy-rc.d forbids it (exit 101): fine,
    the cluster starts its own daemons with its own files."""
    missing = missing_slurm()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SlurmUnavailable(
            f"{', '.join(missing)} not installed, and installing {' '.join(PACKAGES)} "
            "needs root and apt-get"
        )
    log(f"[slurm] installing {' '.join(PACKAGES)} with apt-get")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]
    for command in (["apt-get", "update", "-qq"], install):
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=900, check=False
        )
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise SlurmUnavailable(f"{' '.join(command)} failed:\n{tail}")
    if still := missing_slurm():
        raise SlurmUnavailable(f"installed {' '.join(PACKAGES)}, yet {', '.join(still)} missing")


def choose_tracking() -> Tracking:
    """cgroup where each controller Slurm uses is a cgroup v1 mount of its own at
    /sys/fs/cgroup/<controller> (where Slurm looks), else linuxproc, which needs no cgroups
    (a pure cgroup v2 host; Slurm's cgroup/v2 was not tried: 22.05 refuses it on a hybrid)."""
    mounted = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount, _, filesystem = line.partition(" - ")
        kind, _source, options = filesystem.split()[:3]
        if kind == "cgroup":
            mounted[mount.split()[4]] = set(options.split(","))
    for controller in CONTROLLERS:
        if controller not in mounted.get(f"/sys/fs/cgroup/{controller}", set()):
            return Tracking.LINUXPROC
    return Tracking.CGROUP


def own_cgroup(controller: str) -> str:
    """This process's cgroup in ``controller``'s v1 hierarchy ("/" or "/a/b")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise SlurmClusterError(f"no cgroup v1 {controller} hierarchy for this process")


def create_network(layout: ClusterLayout) -> None:
    """The controller's namespace with a bridge, and a veth from it into each node's
    namespace; no interface or address in the machine's own namespace."""
    ctl = ["ip", "-n", layout.controller_netns]
    run_checked(["ip", "netns", "add", layout.controller_netns])
    run_checked([*ctl, "link", "add", "br0", "type", "bridge"])
    run_checked([*ctl, "addr", "add", f"{CONTROLLER_ADDRESS}/24", "dev", "br0"])
    run_checked([*ctl, "link", "set", "br0", "up"])
    run_checked([*ctl, "link", "set", "lo", "up"])
    for node in layout.nodes:
        inside = ["ip", "-n", node.netns]
        run_checked(["ip", "netns", "add", node.netns])
        veth = f"v-{node.name}"  # both ends live in the namespaces: no name to clash
        run_checked(
            [*ctl, "link", "add", veth, "type", "veth", "peer", "eth0", "netns", node.netns]
        )
        run_checked([*ctl, "link", "set", veth, "master", "br0", "up"])
        run_checked([*inside, "addr", "add", f"{node.address}/24", "dev", "eth0"])
        run_checked([*inside, "link", "set", "eth0", "up"])
        run_checked([*inside, "link", "set", "lo", "up"])


def in_namespaces(
    layout: ClusterLayout, hostname: str, netns: str, cgroups: list[str], command: list[str]
) -> list[str]:
    """``command`` in network namespace ``netns``, with its own hostname, hosts file and
    mounts, and (given ``cgroups``) a cgroup namespace rooted in them; each layer execs."""
    controllers = " ".join(CONTROLLERS) if cgroups else ""
    return [
        *("nsenter", f"--net={NETNS_DIR / netns}", "sh", "-c", _OUTER, "sh", _INNER),
        *(" ".join(cgroups), hostname, str(layout.hosts_file), controllers),
        *command,
    ]


def run_checked(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise SlurmClusterError(f"{' '.join(command)} failed: {done.stderr.strip()}")
