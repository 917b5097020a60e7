"""The protocol every runtime meets, and the state it reports per service. No dependencies:
the Docker adapter and the process runtime both import it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = ["OneOffRun", "ServiceRuntime", "ServiceState"]


@dataclass(frozen=True)
class ServiceState:
    service: str
    container: str  # the container's name, or "pid N" for a process
    status: str  # created | running | exited | ...
    health: str | None  # starting | healthy | unhealthy | None (no health check)
    exit_code: int | None
    ports: tuple[str, ...]
    restarts: int = 0  # restarts by the runtime's policy since the service was created
    # Why it last stopped (the supervisor's line, generator/supervise.py), if it ever did.
    last_exit: str | None = None
    started_at: float | None = None  # unix seconds of its current start, while it runs

    @property
    def exited(self) -> bool:
        return self.status in ("exited", "dead")


class OneOffRun(Protocol):
    """A one-off run of a service with another command (the benchmark, a KV probe)."""

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code, or None if it still runs after ``timeout_s``."""
        ...

    def output(self) -> tuple[str, str]:
        """(stdout, stderr) so far."""
        ...

    def remove(self) -> None:
        """Stop it if it runs, and forget it."""
        ...


class ServiceRuntime(Protocol):
    """One host's services, started, watched and stopped."""

    @property
    def project(self) -> str: ...

    def up(self, services: list[str]) -> None:
        """Start ``services``; running ones are left alone."""
        ...

    def restart(self, services: list[str]) -> None:
        """Stop and start ``services`` as they are (their configuration unchanged)."""
        ...

    def ps(self, *, max_age_s: float = 0.0) -> list[ServiceState]: ...

    def logs(self, service: str | None = None, *, tail: int | None = None) -> str: ...

    def follow_logs(self, service: str | None, on_line: Callable[[str], None]) -> None: ...

    def down(self, *, volumes: bool = False) -> None:
        """Stop and remove everything of the project; nothing of it keeps running."""
        ...

    def execute(self, service: str, command: list[str]) -> str:
        """``command``'s output, run where ``service`` runs, as it would see things."""
        ...

    def start_oneoff(
        self,
        service: str,
        command: list[str],
        *,
        name: str,
        env: dict[str, str],
        volumes: Sequence[tuple[Path, str]] = (),
    ) -> OneOffRun: ...

    def remove_oneoff(self, name: str) -> None:
        """Remove a one-off run left by an earlier, killed run (nothing if there is none)."""
        ...

    def cpu_percentages(self) -> dict[str, float]:
        """Each running service's CPU use, % of one core, over about a second."""
        ...
