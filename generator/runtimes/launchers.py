"""Where the process runtime's commands run: the ``Launcher`` seam. Locally (``LOCAL``), a
service is a session of its own on this machine and a check is a child process here; another
launcher (a Slurm job step on a node) wraps the same commands to run them elsewhere, while
the process the runtime keeps track of stays a local one it started (the step's client).
``image``: the container image the command runs in, where the launcher runs containers (None:
on the host itself)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from generator.runtimes.groups import spawn, spawn_service, stop_group
from generator.runtimes.process_state import ServiceEntry

__all__ = ["LOCAL", "Launcher", "LocalLauncher"]


class Launcher(Protocol):
    @property
    def pins_cores(self) -> bool:
        """Cores are pinned with taskset from the plan's own ids (False: the launcher binds)."""
        ...

    @property
    def local(self) -> bool:
        """The processes started here are the services themselves (their ports and CPU time
        are theirs); False where they are the clients of steps elsewhere."""
        ...

    def start(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: int, *, image: str | None = None
    ) -> int:
        """A service that outlives its caller, output appended to ``log``: the PID of the local
        process that lives exactly as long as it (and leads its own session)."""
        ...

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        timeout_s: float,
        *,
        image: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """A short command where the services run (a health check, a signal): its output.
        subprocess.TimeoutExpired past ``timeout_s``."""
        ...

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
        """A one-off run the caller waits for (the benchmark), in a session of its own."""
        ...

    def stop(self, name: str, entry: ServiceEntry, grace_s: float) -> None:
        """Ends service ``name`` (its state entry): SIGTERM, SIGKILL after ``grace_s``."""
        ...


class LocalLauncher:
    pins_cores = True
    local = True

    def start(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: int, *, image: str | None = None
    ) -> int:
        _no_image(image)
        return spawn_service(argv, env, cwd, log)

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        timeout_s: float,
        *,
        image: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        _no_image(image)
        return subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
            check=False,
        )  # fmt: skip

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
        _no_image(image)
        return spawn(argv, env, cwd, stdout=stdout, stderr=stderr)

    def stop(self, name: str, entry: ServiceEntry, grace_s: float) -> None:
        stop_group(entry, grace_s=grace_s)


def _no_image(image: str | None) -> None:
    if image is not None:  # the spec checks keep containers to the runtimes that run them
        raise TypeError(f"the local launcher runs no container image ({image})")


LOCAL: Launcher = LocalLauncher()
