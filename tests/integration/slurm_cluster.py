"""A real Slurm cluster on this one machine, for tests: one slurmctld, one slurmd per node
(n1, n2), munge, fake GPUs, each daemon in a network namespace of its own. Nothing leaves
the machine and nothing is left behind (tests/integration/slurm_teardown.py).

::

    netns xs-ID-ctl: bridge br0 10.232.0.1/24, lo     slurmctld (hostname xsctl), munged
        ├── veth ── netns xs-ID-n1: eth0 10.232.0.11/24, lo     slurmd -N n1 (hostname n1)
        └── veth ── netns xs-ID-n2: eth0 10.232.0.12/24, lo     slurmd -N n2 (hostname n2)

ID is per cluster, so two runs never share a name; the addresses exist only inside the
namespaces, so two clusters may both use them. Clients run in the controller's namespace:
``cluster.run("sinfo")``, or ``cluster.client_command(...)`` with ``cluster.client_env()``.

Each daemon starts through ``nsenter --net=`` (``ip netns exec`` mounts a fresh /sys, in
which /sys/fs/cgroup is empty), then ``unshare --uts --mount`` for its hostname and a
bind-mounted hosts file naming every node (as DNS would on a real cluster); every layer
execs, so the pid recorded is the daemon's and job steps inherit all of it. munged runs as
user munge with its own key, socket, log and seed under the work folder; slurm.conf points
every client and daemon at that socket.

Process tracking (``Tracking``): proctrack/cgroup on cgroup v1 where this machine mounts
it (Debian here: a v1/v2 hybrid; Slurm 22.05's cgroup/v2 refuses hybrids), else
proctrack/linuxproc. Slurm names its cgroup tree after the node (``slurm_n1``) and numbers
jobs from 1, so two clusters would share ``slurm_n1/uid_0/job_1`` and one could end the
other's steps: each slurmd therefore gets a cgroup namespace rooted in a cgroup of its own,
``xs-ID-n1``, made below the caller's cgroup in each controller slurmd uses (and its
cgroups remounted in its mount namespace, so Slurm sees that root as /).

Fake GPUs are character devices with NVIDIA's major number (``mknod nvidiaN c 195 N``): slurmd
counts them, slurmctld judges GPU requests against them, and the devices cgroup allows only
the allocated ones (CUDA_VISIBLE_DEVICES is set as on a real node).
"""

from __future__ import annotations

import os
import pwd
import secrets
import stat
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from tests.integration.slurm_files import (
    CONTROLLER_HOSTNAME,
    PARTITION,
    ClusterLayout,
    NodeResources,
    SlurmNode,
    Tracking,
    gpu_device_paths,
    render_cgroup_conf,
    render_gres_conf,
    render_hosts,
    render_slurm_conf,
)
from tests.integration.slurm_machine import (
    CONTROLLERS,
    PACKAGES,
    SlurmClusterError,
    SlurmUnavailable,
    choose_tracking,
    create_network,
    in_namespaces,
    install_slurm,
    missing_slurm,
    missing_tools,
    own_cgroup,
)
from tests.integration.slurm_teardown import (
    NETNS_DIR,
    ClusterRecord,
    DaemonRecord,
    read_record,
    remove_cluster,
    start_ticks,
    write_record,
)

__all__ = [
    "PACKAGES",
    "WORK_ROOT",
    "NodeResources",
    "SlurmCluster",
    "SlurmClusterError",
    "SlurmNode",
    "SlurmUnavailable",
    "Tracking",
    "choose_tracking",
    "install_slurm",
    "missing_slurm",
    "missing_tools",
    "remove_leftovers",
]

WORK_ROOT = Path("/tmp/xpyd-slurm")  # every folder up to munged's socket must be traversable
_START_TIMEOUT_S = 60.0
_NVIDIA_MAJOR = 195  # the character devices of NVIDIA's driver


class SlurmCluster:
    """``start()`` brings the cluster up (both nodes idle), ``stop()`` removes all of it."""

    def __init__(
        self,
        nodes: tuple[NodeResources, ...] = (NodeResources(), NodeResources()),
        *,
        tracking: Tracking | None = None,
        work_root: Path = WORK_ROOT,
    ) -> None:
        cluster_id = secrets.token_hex(3)
        chosen = tracking or choose_tracking()
        self.layout = ClusterLayout.plan(cluster_id, work_root / cluster_id, nodes, chosen)
        self.record = ClusterRecord(
            cluster_id=cluster_id,
            owner_pid=os.getpid(),
            owner_start_ticks=start_ticks(os.getpid()) or 0,
            work_dir=str(self.layout.work_dir),
            netns=self.layout.netns_names,
            cgroup_dirs=self._plan_cgroups(),
        )
        self._processes: dict[str, subprocess.Popen[bytes]] = {}  # by daemon name
        self.startup_s: float | None = None
        self.teardown_s: float | None = None

    # --- what tests use ------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[SlurmNode, ...]:
        return self.layout.nodes

    @property
    def partition(self) -> str:
        return PARTITION

    @property
    def controller_netns(self) -> str:
        return self.layout.controller_netns

    @property
    def slurm_conf(self) -> Path:
        return self.layout.slurm_conf

    @property
    def work_dir(self) -> Path:
        return self.layout.work_dir

    def node(self, name: str) -> SlurmNode:
        return next(node for node in self.nodes if node.name == name)

    def client_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.slurm_conf)}

    def client_command(self, *argv: str) -> list[str]:
        """``argv`` run in the controller's network namespace, where the cluster is reached
        (run it with ``client_env()``)."""
        return ["nsenter", f"--net={NETNS_DIR / self.controller_netns}", *argv]

    def run(
        self, *argv: str, timeout_s: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A client command (sinfo, srun, sbatch ...); raises on a non-zero exit if ``check``."""
        done = subprocess.run(
            self.client_command(*argv),
            env=self.client_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if check and done.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo names it (idle, mixed, down*, inval ...); {} while
        slurmctld does not answer."""
        done = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", check=False)
        if done.returncode != 0:
            return {}
        return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until every node is idle; raises with the node states, sinfo's reasons and the
        daemons' last log lines when ``timeout_s`` passes or a daemon exits first."""
        deadline = time.monotonic() + timeout_s
        while (states := self.node_states()) != {node.name: "idle" for node in self.nodes}:
            exited = [
                name for name, process in self._processes.items() if process.poll() is not None
            ]
            if exited or time.monotonic() > deadline:
                reasons = self.run("sinfo", "--list-reasons", check=False).stdout.strip()
                why = f"{', '.join(exited)} exited" if exited else f"not in {timeout_s:.0f} s"
                raise SlurmClusterError(
                    f"nodes not idle: {why}; states {states or 'unknown'}\n{reasons}\n"
                    + self._log_tails()
                )
            time.sleep(0.2)

    # --- life cycle ------------------------------------------------------------------------

    def start(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Up, with every node idle; on any failure all of it is removed again, and the error
        carries the daemons' last log lines."""
        if self._processes or self.work_dir.exists():
            raise SlurmClusterError(f"cluster {self.layout.cluster_id} was started before")
        started = time.monotonic()
        try:
            self._prepare_folder()
            create_network(self.layout)
            self._create_cgroups()
            self._start_daemons()
            self.wait_idle(timeout_s - (time.monotonic() - started))
        except BaseException as error:
            tails = self._log_tails()
            self.stop()
            if isinstance(error, SlurmClusterError | OSError | subprocess.SubprocessError):
                raise SlurmClusterError(f"slurm cluster did not start: {error}\n{tails}") from error
            raise
        self.startup_s = time.monotonic() - started
        print(f"[slurm] {self.describe()} up in {self.startup_s:.1f} s", flush=True)

    def stop(self) -> None:
        """Remove everything (slurm_teardown's docstring); idempotent, and fine after a start
        that failed. Raises when something could not be removed (after trying all of it)."""
        started = time.monotonic()
        problems = remove_cluster(self.record)
        # Reap the daemons (this process's children); one that outlived SIGKILL stays listed.
        self._processes = {
            name: process for name, process in self._processes.items() if process.poll() is None
        }
        self.teardown_s = time.monotonic() - started
        print(f"[slurm] cluster {self.layout.cluster_id} removed in {self.teardown_s:.1f} s")
        if problems:
            raise SlurmClusterError("slurm cluster not fully removed:\n" + "\n".join(problems))

    def describe(self) -> str:
        nodes = ", ".join(f"{node.name} {node.address}" for node in self.nodes)
        return f"cluster {self.layout.cluster_id} ({nodes}; proctrack/{self.layout.tracking})"

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --- bringing it up --------------------------------------------------------------------

    def _plan_cgroups(self) -> tuple[str, ...]:
        if self.layout.tracking is not Tracking.CGROUP:
            return ()
        return tuple(
            str(self._cgroup_dir(controller, node))
            for node in self.layout.nodes
            for controller in CONTROLLERS
        )

    def _cgroup_dir(self, controller: str, node: SlurmNode) -> Path:
        own = own_cgroup(controller).strip("/")
        return Path("/sys/fs/cgroup", controller, own, self.layout.cgroup_name(node))

    def _prepare_folder(self) -> None:
        layout = self.layout
        layout.work_dir.parent.mkdir(mode=0o755, exist_ok=True)
        layout.work_dir.mkdir(mode=0o755)
        write_record(self.record)  # first: from here on, a crash leaves what remove_leftovers finds
        for name in ("etc", "state", "run", "log", "dev"):
            (layout.work_dir / name).mkdir()
        for node in layout.nodes:
            (layout.work_dir / "spool" / node.name).mkdir(parents=True)
        etc = layout.work_dir / "etc"
        (etc / "slurm.conf").write_text(render_slurm_conf(layout), encoding="utf-8")
        (etc / "gres.conf").write_text(render_gres_conf(layout), encoding="utf-8")
        (etc / "cgroup.conf").write_text(render_cgroup_conf(layout), encoding="utf-8")
        layout.hosts_file.write_text(render_hosts(layout), encoding="utf-8")
        most = max(self.nodes, key=lambda node: node.resources.gpus)
        for index, path in enumerate(gpu_device_paths(layout, most)):
            # Root's only: on a machine with NVIDIA's driver these reach its real GPUs.
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(_NVIDIA_MAJOR, index))
        self._prepare_munge()

    def _prepare_munge(self) -> None:
        """munged's own key and folder, owned by user munge; 0755 (it checks that every
        client can reach its socket)."""
        try:
            munge = pwd.getpwnam("munge")
        except KeyError as error:
            raise SlurmClusterError("no user munge: reinstall the munge package") from error
        folder = self.layout.munge_dir
        folder.mkdir(mode=0o755)
        key = folder / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        for path in (folder, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)

    def _create_cgroups(self) -> None:
        for directory in self.record.cgroup_dirs:
            os.mkdir(directory)

    def _start_daemons(self) -> None:
        munge = self.layout.munge_dir
        self._launch(
            "munged",
            [
                *("nsenter", f"--net={NETNS_DIR / self.controller_netns}"),
                *("setpriv", "--reuid=munge", "--regid=munge", "--clear-groups"),
                *("munged", "--foreground", f"--socket={self.layout.munge_socket}"),
                *(f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid"),
                *(f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"),
            ],
        )
        _wait_for_socket(self.layout.munge_socket, self._processes["munged"])
        conf = str(self.slurm_conf)
        self._launch(
            "slurmctld",
            in_namespaces(
                self.layout,
                CONTROLLER_HOSTNAME,
                self.controller_netns,
                [],
                ["slurmctld", "-D", "-f", conf],
            ),
        )
        for node in self.nodes:
            own = self.layout.cgroup_name(node)
            cgroups = [path for path in self.record.cgroup_dirs if Path(path).name == own]
            command = ["slurmd", "-D", "-N", node.name, "-f", conf]
            self._launch(
                f"slurmd {node.name}",
                in_namespaces(self.layout, node.name, node.netns, cgroups, command),
            )

    def _launch(self, name: str, command: list[str]) -> None:
        """Start a daemon (in a session of its own: a Ctrl+C of the test run is not for it;
        stop() ends it) and record it before anything else can happen."""
        log_path = self.layout.log_dir / f"{name.replace(' ', '-')}.out"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        self._processes[name] = process
        # An unreaped child: its pid cannot name another process yet, so these ticks are its.
        ticks = start_ticks(process.pid)
        if ticks is None:
            raise SlurmClusterError(f"{name} exited at once: {log_path.read_text()[-2000:]}")
        self.record = self.record.with_daemon(DaemonRecord(name, process.pid, ticks))
        write_record(self.record)

    def _log_tails(self, lines: int = 8) -> str:
        folders = (self.layout.log_dir, self.layout.munge_dir)
        logs = [log for folder in folders if folder.is_dir() for log in sorted(folder.glob("*.*"))]
        tails = []
        for log in logs:
            with suppress(OSError):  # a log is a help, never a reason to fail
                if log.suffix in {".log", ".out"} and log.stat().st_size:
                    text = log.read_text(errors="replace").splitlines()[-lines:]
                    tails.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(tails)


def _wait_for_socket(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10.0
    while not path.is_socket():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SlurmClusterError(f"munged did not open {path}")
        time.sleep(0.05)


def remove_leftovers(work_root: Path = WORK_ROOT) -> list[str]:
    """Remove the clusters of earlier runs whose process is gone (crashed, killed); those of
    a run still going are left alone. What could not be removed."""
    problems: list[str] = []
    for path in sorted(work_root.glob("*/record.json")):
        record = read_record(path)
        if record is None or start_ticks(record.owner_pid) == record.owner_start_ticks:
            continue
        print(f"[slurm] removing cluster {record.cluster_id} of an earlier run", flush=True)
        problems += remove_cluster(record)
    return problems


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        try:
            install_slurm()
        except SlurmUnavailable as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        return 0
    if argv == ["cleanup"]:
        problems = remove_leftovers()
        print("\n".join(problems) or "[slurm] nothing left", file=sys.stderr)
        return 1 if problems else 0
    print("usage: python -m tests.integration.slurm_cluster install|cleanup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
