"""The process runtime's commands as steps of a Slurm job on one node (srun): the process the
runtime keeps track of is the step's srun client, here, in a session of its own; the step's
processes run on the node, with the environment srun passes on, in a container where the
stack asks for one (pyxis: generator/runtimes/pyxis.py). A stop signals the step through
Slurm (scancel --signal), then ends its client."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from generator.runtimes.groups import alive, spawn, spawn_service, stop_group
from generator.runtimes.process_state import ServiceEntry
from generator.runtimes.pyxis import PyxisContainer
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
    container: PyxisContainer | None = None  # pyxis's options, where steps run in images

    def start(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: int, *, image: str | None = None
    ) -> int:
        name = _step_name(self.project, env)
        command = self.step_command(argv, env, cwd, name, image, named=True)
        return spawn_service(command, env, cwd, log)

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        timeout_s: float,
        *,
        image: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.check_command(argv, env, cwd, image), env=env, cwd=cwd, capture_output=True,
            text=True, timeout=timeout_s, check=False,
        )  # fmt: skip

    def check_command(
        self, argv: list[str], env: dict[str, str], cwd: Path, image: str | None
    ) -> list[str]:
        """``argv`` as a short step beside the services (no GPU): a service's check from its
        container, where it has one."""
        return [*self._step(f"{self.project}:check", 0, env, cwd, image, reuse=True), *argv]

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        *,
        stdout: int,
        stderr: int,
        image: str | None = None,
    ) -> subprocess.Popen[bytes]:
        command = self.step_command(argv, env, cwd, f"{self.project}:oneoff", image)
        return spawn(command, env, cwd, stdout=stdout, stderr=stderr)

    def step_command(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        name: str,
        image: str | None,
        *,
        named: bool = False,
    ) -> list[str]:
        """``argv`` as a step that sees its node's GPUs: slurmstepd sets CUDA_VISIBLE_DEVICES
        to all of them (same-node P/D needs the peer's GPUs for cuda_ipc), so the plan's
        choice among them is put back inside the step. ``named``: a service's, whose
        container is named after it."""
        step = self._step(name, self.gpus, env, cwd, image, named=named)
        return [*step, *(_plan_gpus(env) if self.gpus else []), *argv]

    def _step(
        self,
        name: str,
        gpus: int,
        env: dict[str, str],
        cwd: Path,
        image: str | None,
        *,
        named: bool = False,
        reuse: bool = False,
    ) -> list[str]:
        """srun's options for a step: on its node, in ``image`` where one is given. A
        service's container is named after it (its checks reuse it); a one-off's and the
        Pythons check's are not (removed after their step)."""
        step = [*srun_prefix(self.job_id, self.node, name=name, gpus=gpus), f"--chdir={cwd}"]
        if image is None:
            return step
        if self.container is None:
            raise TypeError(f"{name}: an image ({image}) for a launcher without containers")
        owner = env.get("XPYD_SERVICE") if named or reuse else None
        container = f"{self.project}-{owner}" if owner else None
        return [*step, *self.container.options(image, env, name=container, reuse=reuse)]

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
