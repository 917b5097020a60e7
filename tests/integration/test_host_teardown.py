"""Issue 33 class 9: a test host (tests/integration/hosts.py) leaves nothing running. Its
containerd used to outlive it (found by command lines naming the exec root, which
containerd's does not), reparented to init with its folders deleted under it. One host is
made (namespace, containerd, dockerd; no container, a few seconds) and removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.hosts import host_pids, missing_tools, running_hosts

pytestmark = pytest.mark.docker


def namespace_pids(netns: str) -> set[int]:
    """What `ip netns pids` lists: every process in that network namespace."""
    done = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=30, check=True
    )
    return {int(line) for line in done.stdout.split()}


def start_time(pid: int) -> str | None:
    """When a running process started (clock ticks after boot): with its pid, it names one
    process ever. None once it has exited (a zombie has: init has yet to reap it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def test_a_removed_test_host_leaves_no_process_and_no_folder() -> None:
    missing = missing_tools()
    if missing:
        pytest.skip(f"test hosts need {', '.join(missing)}")
    with running_hosts(("hosta",)) as hosts:
        host = hosts.a
        running = namespace_pids(host.netns)
        started = {pid: start_time(pid) for pid in running}
        daemons = {"dockerd": pid_in(host.pidfile), "containerd": pid_in(host.containerd_pidfile)}
        found = host_pids(host)
    left = sorted(pid for pid, since in started.items() if start_time(pid) == since)
    assert not left, f"processes of the removed host still run: {left}"
    assert daemons["dockerd"] in running
    assert daemons["containerd"] in running  # its own pid file names it
    assert found == running  # in its namespace: all of it, nothing else
    assert not (Path("/var/run/netns") / host.netns).exists()
    assert not Path(host.state_dir).exists()
    assert not Path(host.exec_root).exists()
