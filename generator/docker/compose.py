"""One compose project (one host of a stack): build, up, ps, logs, down, one-off containers,
on that host's engine."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from python_on_whales import Container

from generator.docker.endpoint import LOCAL, DockerEndpoint, client, run_cli, translated
from generator.errors import DockerError
from generator.runtimes.base import ServiceState
from generator.supervise import last_said

__all__ = ["ComposeStack", "OneOff", "ServiceState"]

_EXIT_LINE_TAIL = 50  # the supervisor's line comes after the command's last words
# Docker restarts a container within its backoff (0.1 s doubling, at most a minute) of its exit.
_BEFORE_RESTART = timedelta(seconds=90)


class ComposeStack:
    """One compose project (one host of a stack), driven through ``docker compose`` on that
    host's engine."""

    def __init__(
        self, compose_file: Path, project: str, *, endpoint: DockerEndpoint = LOCAL
    ) -> None:
        self.compose_file = compose_file
        self._project = project
        self.endpoint = endpoint
        self._client = client(endpoint, compose_file=compose_file, project=project)
        self._ps_lock = threading.Lock()
        self._ps_cache: tuple[float, list[ServiceState]] | None = None

    def build(self, services: list[str], on_line: Callable[[str], None]) -> None:
        """Build the images of ``services`` (their ``build:`` sections), streaming the log."""
        with translated(
            f"building {', '.join(services)}", hint="read the build log in the run folder"
        ):
            stream = self._client.compose.build(services, stream_logs=True)
            for _source, line in stream or ():
                on_line(line.decode(errors="replace").rstrip("\n"))

    def up(self, services: list[str], *, with_dependencies: bool = False) -> None:
        """Create and start ``services`` detached; already-running ones are left alone.
        Containers of services the file no longer has (an earlier variant of the stack, e.g.
        `bench --set prefill.count=2`) are removed: they would hold the ports and GPUs the
        file now gives to others."""
        with translated(
            f"starting {', '.join(services)}",
            hint=f"`{self._compose('ps', '-a')}` and `{self._compose('logs')}` show why",
        ):
            self._client.compose.up(
                services,
                detach=True,
                no_build=True,
                dependencies=with_dependencies,
                remove_orphans=True,
                quiet=True,
            )
        with self._ps_lock:
            self._ps_cache = None  # what was listed before is out of date now

    def restart(self, services: list[str]) -> None:
        with translated(
            f"restarting {', '.join(services)}",
            hint=f"`{self._compose('ps', '-a')}` and `{self._compose('logs')}` show why",
        ):
            self._client.compose.restart(services, timeout=30)
        with self._ps_lock:
            self._ps_cache = None

    def ps(self, *, max_age_s: float = 0.0) -> list[ServiceState]:
        """The stack's containers. ``max_age_s`` > 0 lets concurrent waiters share one
        answer: each `docker compose ps` costs CPU that the engines starting up need."""
        with self._ps_lock:
            cached = self._ps_cache
            if cached is not None and time.monotonic() - cached[0] <= max_age_s:
                return cached[1]
            states = self._ps()
            self._ps_cache = (time.monotonic(), states)
            return states

    def _ps(self) -> list[ServiceState]:
        with translated("listing the stack's containers", hint=self._engine_hint()):
            containers = self._client.compose.ps(all=True)
        states = []
        for container in containers:
            state = container.state
            health = state.health.status if state.health is not None else None
            ports = tuple(
                f"{binding.get('HostIp', '')}:{binding.get('HostPort')}->{port}"
                for port, bindings in (container.network_settings.ports or {}).items()
                for binding in bindings or []
            )
            labels = container.config.labels or {}
            service = labels.get("com.docker.compose.service", container.name)
            restarts = container.restart_count or 0
            exited = str(state.status) in ("exited", "dead")
            states.append(
                ServiceState(
                    service,
                    container.name,
                    str(state.status),
                    health,
                    state.exit_code,
                    ports,
                    restarts=restarts,
                    last_exit=self._last_exit(container) if restarts or exited else None,
                    started_at=_started_at(container) if str(state.status) == "running" else None,
                )
            )
        return sorted(states, key=lambda s: s.service)

    def _last_exit(self, container: Container) -> str:
        """The supervisor's last line in the container's log; else Docker's exit code. An
        exited container whose restarts are used up says so."""
        # A running container's log goes on past its last exit: read the seconds before its
        # current start (docker applies --tail before --until, so no tail there).
        started = container.state.started_at
        with translated(f"reading the log of {container.name}", hint=self._engine_hint()):
            if str(container.state.status) == "running" and started is not None:
                tail = self._client.container.logs(
                    container.name, since=started - _BEFORE_RESTART, until=started
                )
            else:
                tail = self._client.container.logs(container.name, tail=_EXIT_LINE_TAIL)
        text = tail if isinstance(tail, str) else ""
        reason = last_said(text)
        state = container.state
        if reason is None:
            reason = f"exit {state.exit_code}" + (" (OOM killed)" if state.oom_killed else "")
        policy = container.host_config.restart_policy
        bound = policy.maximum_retry_count if policy is not None else None
        used_up = bound and (container.restart_count or 0) >= bound
        if str(state.status) in ("exited", "dead") and used_up:
            reason += f"; not restarted again ({bound} restarts used up)"
        return reason

    def cpu_percentages(self) -> dict[str, float]:
        """Each running service's CPU use (% of one core) over the engine's last sample
        (`docker stats --no-stream`: about a second)."""
        running = {s.container: s.service for s in self.ps() if s.status == "running"}
        if not running:
            return {}
        with translated(f"reading CPU use of {self.project}", hint=self._engine_hint()):
            stats = client(self.endpoint).stats(list(running))
        return {
            running[s.container_name]: s.cpu_percentage
            for s in stats
            if s.container_name in running
        }

    def logs(self, service: str | None = None, *, tail: int | None = None) -> str:
        with translated(f"reading logs of {service or self.project}", hint=self._engine_hint()):
            text = self._client.compose.logs(
                [service] if service else [],
                tail=str(tail) if tail else None,
                no_log_prefix=service is not None,
            )
        return text if isinstance(text, str) else ""

    def follow_logs(self, service: str | None, on_line: Callable[[str], None]) -> None:
        with translated(f"following logs of {service or self.project}", hint=self._engine_hint()):
            for _source, line in self._client.compose.logs(
                [service] if service else [], follow=True, stream=True
            ):
                on_line(line.decode(errors="replace").rstrip("\n"))

    def down(self, *, volumes: bool = False) -> None:
        with translated(
            f"removing {self.project}",
            hint=f"retry with `{self._compose('down')}`; `docker ps -a` shows what is left",
        ):
            self._client.compose.down(remove_orphans=True, volumes=volumes, timeout=30, quiet=True)

    @property
    def project(self) -> str:
        return self._project

    def _engine_hint(self) -> str:
        return f"check that `docker {' '.join([*self.endpoint.cli_args(), 'info'])}` answers"

    def _compose(self, *arguments: str) -> str:
        """The command line a user runs to look at this project themselves."""
        options = [*self.endpoint.cli_args(), "compose", "-p", self.project]
        return " ".join(["docker", *options, *arguments])

    def remove_oneoff(self, name: str) -> None:
        with contextlib.suppress(DockerError):  # none left: nothing to remove
            OneOff(name, self.endpoint).remove()

    def execute(self, service: str, command: list[str]) -> str:
        """``command``'s output, run inside the running container of ``service``."""
        with translated(
            f"running a command in {service}",
            hint=f"is it running? `{self._compose('logs', service)}` shows",
        ):
            output = self._client.compose.execute(service, command, tty=False)
        return output if isinstance(output, str) else ""

    def start_oneoff(
        self,
        service: str,
        command: list[str],
        *,
        name: str,
        env: dict[str, str],
        volumes: Sequence[tuple[Path, str]] = (),
    ) -> OneOff:
        """A detached one-off container of ``service``: its image, devices, namespaces,
        volumes and environment exactly as rendered, another command (and ``volumes``:
        (host folder, container path) binds besides the rendered ones)."""
        with translated(
            f"starting a one-off {service} container",
            hint=f"a container named {name} may be left over: `docker rm -f {name}`",
        ):
            self._client.compose.run(
                service,
                command,
                detach=True,
                name=name,
                remove=False,
                tty=False,
                dependencies=False,
                envs=env,
                volumes=[(str(host), inside) for host, inside in volumes],
            )
        return OneOff(name, self.endpoint)

    def run_oneoff(self, service: str, command: list[str], volumes: list[tuple[Path, str]]) -> str:
        """``docker compose run --rm`` a one-off container (e.g. the benchmark); its output."""
        with translated(f"running {service}", hint="its output above says why it failed"):
            output = self._client.compose.run(
                service,
                command,
                remove=True,
                tty=False,
                dependencies=False,
                volumes=[(str(h), c) for h, c in volumes],
            )
        return output if isinstance(output, str) else ""


@dataclass(frozen=True)
class OneOff:
    """A one-off container started by ``ComposeStack.start_oneoff``."""

    name: str
    endpoint: DockerEndpoint = LOCAL

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code, or None if it still runs after ``timeout_s``."""
        engine = client(self.endpoint)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with translated(f"inspecting {self.name}", hint=f"`docker ps -a` lists {self.name}"):
                state = engine.container.inspect(self.name).state
            if not state.running:
                return state.exit_code
            time.sleep(0.5)
        return None

    def output(self, *, timeout_s: float = 60.0) -> tuple[str, str]:
        """(stdout, stderr) of the container so far."""
        hint = f"`docker logs {self.name}` shows them when its engine answers again"
        done = run_cli(self.endpoint, ["logs", self.name], timeout_s=timeout_s, hint=hint)
        return done.stdout, done.stderr

    def remove(self) -> None:
        with translated(
            f"removing {self.name}", hint=f"remove it by hand: `docker rm -f {self.name}`"
        ):
            client(self.endpoint).container.remove(self.name, force=True)


def _started_at(container: Container) -> float | None:
    started = container.state.started_at
    return started.timestamp() if started is not None else None
