"""What the live tests of stacks under Slurm share: the CLI run on the cluster's login side,
and the check that nothing of a stack is left (no job or step, no record, no process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.integration.slurm_cluster import SlurmCluster


def client_env(cluster: SlurmCluster, root: Path) -> dict[str, str]:
    """The login side's environment for the checkout copy at ``root`` (plain output)."""
    plain = {"XPYD_ROOT": str(root), "COLUMNS": "200", "NO_COLOR": "1", "CI": "1"}
    return cluster.client_env() | plain


def slurm_cli(
    cluster: SlurmCluster, *args: str, root: Path, timeout_s: float = 1800
) -> subprocess.CompletedProcess[str]:
    """`python -m generator ARGS` on the cluster's login side, against the copy at ``root``."""
    return subprocess.run(
        cluster.client_command(sys.executable, "-m", "generator", *args),
        capture_output=True, text=True, env=client_env(cluster, root), timeout=timeout_s,
        check=False,
    )  # fmt: skip


def assert_nothing_left(cluster: SlurmCluster, copy: Path, stack: str) -> None:
    assert cluster.run("squeue", "--noheader").stdout.strip() == ""  # no job, no step
    assert not (copy / ".cache/slurm" / f"{stack}.json").exists()
    assert processes_of(copy) == []


def processes_of(copy: Path) -> list[psutil.Process]:
    """Every process that runs from the copy: a step's srun client, or what a step runs."""
    found = []
    for process in psutil.process_iter(["cwd"]):
        try:
            if process.info["cwd"] == str(copy) and process.pid != os.getpid():
                found.append(process)
        except psutil.Error:
            continue
    return found
