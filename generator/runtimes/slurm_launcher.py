"""The process runtime's commands as steps of a Slurm job on one node (srun): the process the
runtime keeps track of is the step's srun client, here, in a session of its own; the step's
processes run on the node, with the environment srun passes on. A stop signals the step
through Slurm (scancel --signal), then ends its client."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from generator.runtimes.groups import alive, spawn, spawn_service, stop_group
from generator.runtimes.process_state import ServiceEntry
from generator.slurm import signal_step, srun_prefix

__all__ = ["SrunLauncher"]

_STOP_POLL_S = 0.2


@dataclass(frozen=True)
class SrunLauncher:
    job_id: int
    node: str
    gpus: int  # the node's GPUs every step of it may see (0: none)
    project: str  # names the steps: `squeue --steps` shows which service each is
    pins_cores: bool = True  # whole nodes are allocated: the plan's cores are the node's
    local: bool = False  # what runs here is each step's srun client

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, log: int) -> int:
        step = srun_prefix(
            self.job_id, self.node, name=_step_name(self.project, env), gpus=self.gpus
        )
        return spawn_service([*step, f"--chdir={cwd}", *argv], env, cwd, log)

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        step = srun_prefix(self.job_id, self.node, name=f"{self.project}:check", gpus=0)
        return subprocess.run(
            [*step, f"--chdir={cwd}", *argv], env=env, cwd=cwd, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: Path, *, stdout: int, stderr: int
    ) -> subprocess.Popen[bytes]:
        step = srun_prefix(self.job_id, self.node, name=f"{self.project}:oneoff", gpus=self.gpus)
        return spawn([*step, f"--chdir={cwd}", *argv], env, cwd, stdout=stdout, stderr=stderr)

    def stop(self, name: str, entry: ServiceEntry, grace_s: float) -> None:
        """SIGTERM to the service's step through Slurm (its client would kill it at once),
        then its client once the step ended or ``grace_s`` passed."""
        if signal_step(self.job_id, f"{self.project}:{name}", "TERM"):
            deadline = time.monotonic() + grace_s
            while alive(entry) and time.monotonic() < deadline:
                time.sleep(_STOP_POLL_S)
        stop_group(entry, grace_s=0.0)


def _plan_gpus(env: dict[str, str]) -> list[str]:
    """slurmstepd sets CUDA_VISIBLE_DEVICES to the GPUs it gives the step (all of its node's:
    same-node P/D needs the peer's GPUs for cuda_ipc); the plan's choice among them is put back
    inside the step."""
    chosen = env.get("CUDA_VISIBLE_DEVICES")
    return ["env", f"CUDA_VISIBLE_DEVICES={chosen}"] if chosen is not None else []


def _step_name(project: str, env: dict[str, str]) -> str:
    return f"{project}:{env.get('XPYD_SERVICE', 'service')}"
