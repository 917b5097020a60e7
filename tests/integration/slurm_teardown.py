"""Removing a test Slurm cluster so that nothing of it is left, from its record alone.

A cluster writes its record (``WORK/record.json``) before it creates anything, and adds
each daemon as it starts; ``remove_cluster`` undoes all of it, whatever exists, so it is
idempotent, safe after a start that failed half-way, and works for a run that crashed (its
record outlives it). The order:

1. the recorded daemons, one by one in the reverse of their start (the slurmd, slurmctld,
   munged): SIGTERM, then SIGKILL after a grace; each only if it is still that process (its
   pid and its start time, /proc/PID/stat's field 22, both match; signalled through a pidfd
   opened before that check);
2. stragglers: whatever is still in one of the cluster's network namespaces (what
   ``ip netns pids`` lists: job steps, slurmstepd, which ignores SIGTERM while a step
   hangs) or in one of its cgroups; never a process found any other way, never by name;
3. the cluster's cgroup directories, depth first (rmdir: it removes only empty ones);
4. the network namespaces (their veths and the bridge go with them), only once no process
   is in them: deleting a namespace does not stop what runs inside;
5. the work folder. If a process outlives SIGKILL, 3-5 are left for a later retry.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path

__all__ = [
    "NETNS_DIR",
    "ClusterRecord",
    "DaemonRecord",
    "cgroup_pids",
    "netns_pids",
    "process_alive",
    "read_record",
    "remove_cluster",
    "start_ticks",
    "write_record",
]

NETNS_DIR = Path("/run/netns")  # where `ip netns add` binds a namespace by its name
_DAEMON_GRACE_S = 10.0  # slurmctld saves its state on SIGTERM
_STRAGGLER_GRACE_S = 3.0
_KILL_WAIT_S = 5.0
_SWEEPS = 5  # a killed slurmstepd orphans its tasks; each sweep takes what is left


@dataclass(frozen=True)
class DaemonRecord:
    name: str  # "munged", "slurmctld", "slurmd n1"
    pid: int
    start_ticks: int  # with the pid, names one process for as long as the machine is up


@dataclass(frozen=True)
class ClusterRecord:
    cluster_id: str
    owner_pid: int  # the process that made the cluster; once gone, the cluster is a leftover
    owner_start_ticks: int
    work_dir: str
    netns: tuple[str, ...]
    cgroup_dirs: tuple[str, ...]  # absolute, one per node and controller
    daemons: tuple[DaemonRecord, ...] = ()

    def with_daemon(self, daemon: DaemonRecord) -> ClusterRecord:
        return replace(self, daemons=(*self.daemons, daemon))

    @property
    def path(self) -> Path:
        return Path(self.work_dir) / "record.json"


def write_record(record: ClusterRecord) -> None:
    temporary = record.path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(record), indent=2), encoding="utf-8")
    temporary.replace(record.path)  # a crash never leaves half a record


def read_record(path: Path) -> ClusterRecord | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        daemons = tuple(DaemonRecord(**daemon) for daemon in data.pop("daemons"))
        netns, cgroups = tuple(data.pop("netns")), tuple(data.pop("cgroup_dirs"))
        return ClusterRecord(**data, netns=netns, cgroup_dirs=cgroups, daemons=daemons)
    except (OSError, ValueError, TypeError, KeyError):
        return None


# --- process identity ----------------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot); None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return None if fields[0] == "Z" else int(fields[19])  # a zombie has exited


def process_alive(pid: int, ticks: int) -> bool:
    return pid > 1 and start_ticks(pid) == ticks


def _netns_id(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def netns_pids(netns: str) -> set[int]:
    """The processes in network namespace ``netns``: what ``ip netns pids`` prints."""
    wanted = _netns_id(str(NETNS_DIR / netns))
    if wanted is None:
        return set()
    return {pid for pid in _all_pids() if _netns_id(f"/proc/{pid}/ns/net") == wanted}


def cgroup_pids(directory: Path) -> set[int]:
    """The processes in cgroup ``directory`` and below it."""
    found: set[int] = set()
    for folder, _, _ in os.walk(directory):
        with suppress(OSError):
            found.update(int(line) for line in (Path(folder) / "cgroup.procs").read_text().split())
    return found


def _cluster_pids(record: ClusterRecord) -> set[int]:
    pids = set().union(*(netns_pids(name) for name in record.netns))
    for directory in record.cgroup_dirs:
        pids |= cgroup_pids(Path(directory))
    return {pid for pid in pids if pid > 1 and pid != os.getpid()}


# --- ending processes ------------------------------------------------------------------------


def _open_verified(pids: dict[int, int]) -> dict[int, int]:
    """pidfds of those of ``pids`` (pid -> start ticks) still running as that process. The
    check follows the open: the handle then names that very process, never a reused pid."""
    handles: dict[int, int] = {}
    for pid, ticks in pids.items():
        with suppress(ProcessLookupError):
            handle = os.pidfd_open(pid)
            if start_ticks(pid) == ticks:
                handles[pid] = handle
            else:
                os.close(handle)
    return handles


def _end(pids: dict[int, int], grace_s: float) -> list[int]:
    """SIGTERM, ``grace_s`` to exit, SIGKILL; the pids that outlived even that."""
    handles = _open_verified(pids)
    try:
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, _KILL_WAIT_S)):
            for handle in handles.values():
                with suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle, sig)
            _wait_exited(handles, wait_s)
            if not handles:
                return []
        return sorted(handles)
    finally:
        for handle in handles.values():
            os.close(handle)


def _wait_exited(handles: dict[int, int], wait_s: float) -> None:
    """Drops (and closes) the handles of processes that exit within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while handles and (left_s := deadline - time.monotonic()) > 0:
        poller = select.poll()
        by_handle = {handle: pid for pid, handle in handles.items()}
        for handle in by_handle:
            poller.register(handle, select.POLLIN)  # readable once the process has exited
        for handle, _ in poller.poll(left_s * 1000):
            os.close(handles.pop(by_handle[handle]))


def _end_stragglers(record: ClusterRecord) -> list[int]:
    """Every process still in the cluster's namespaces or cgroups, sweep after sweep (its
    start time, read with its pid, keeps a pid reused meanwhile from being signalled)."""
    for _ in range(_SWEEPS):
        found = {pid: ticks for pid in _cluster_pids(record) if (ticks := start_ticks(pid))}
        if not found:
            return []
        _end(found, _STRAGGLER_GRACE_S)
    return sorted(_cluster_pids(record))


# --- removal -------------------------------------------------------------------------------


def remove_cluster(record: ClusterRecord) -> list[str]:
    """Remove all the record names (module docstring); what could not be removed."""
    stubborn = []
    for daemon in reversed(record.daemons):  # munged last: slurmctld may still need it to stop
        stubborn += _end({daemon.pid: daemon.start_ticks}, _DAEMON_GRACE_S)
    stubborn += _end_stragglers(record)
    if stubborn:
        return [f"processes {stubborn} outlived SIGKILL; the cluster is left for a retry"]
    problems = [problem for directory in record.cgroup_dirs for problem in _rmdir_tree(directory)]
    problems += [problem for name in record.netns for problem in _delete_netns(name)]
    if not problems:
        shutil.rmtree(record.work_dir, ignore_errors=True)
        with suppress(OSError):  # another cluster's folder is still there
            Path(record.work_dir).parent.rmdir()
    return problems


def _rmdir_tree(directory: str) -> list[str]:
    """A cgroup and the ones below it, deepest first (cgroupfs removes only empty ones)."""
    if not os.path.isdir(directory):
        return []
    problems = []
    for folder, _, _ in os.walk(directory, topdown=False):
        try:
            os.rmdir(folder)
        except OSError as error:
            problems.append(f"cgroup {folder}: {error.strerror}")
    return problems


def _delete_netns(name: str) -> list[str]:
    if not (NETNS_DIR / name).exists():
        return []
    left = netns_pids(name)
    if left:
        return [f"netns {name} kept: processes {sorted(left)} still in it"]
    done = subprocess.run(
        ["ip", "netns", "delete", name], capture_output=True, text=True, timeout=30, check=False
    )
    return [f"netns {name}: {done.stderr.strip()}"] if done.returncode else []
