"""The one adapter to Docker (python-on-whales): build, up, ps, logs, down of one compose
project. Its exceptions are translated into ``DockerError`` here and nowhere else."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from generator.errors import DockerError

__all__ = [
    "ComposeStack",
    "EngineFacts",
    "OneOff",
    "ServiceState",
    "container_publishing",
    "docker_available",
    "engine_facts",
    "ensure_image",
    "image_exists",
    "require_docker",
]


@dataclass(frozen=True)
class ServiceState:
    service: str
    container: str
    status: str  # created | running | exited | ...
    health: str | None  # starting | healthy | unhealthy | None (no healthcheck)
    exit_code: int | None
    ports: tuple[str, ...]

    @property
    def exited(self) -> bool:
        return self.status in ("exited", "dead")


@contextmanager
def _translated(what: str, hint: str = "") -> Iterator[None]:
    try:
        yield
    except DockerException as exc:
        output = "\n".join(part for part in (exc.stdout, exc.stderr) if part)
        raise DockerError(
            f"{what} failed: {_last_lines(output, 8)}",
            command=list(exc.docker_command),
            output=output,
            hint=hint,
        ) from exc


def _last_lines(text: str, count: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-count:]) if lines else "(no output)"


def require_docker() -> None:
    if not docker_available():
        raise DockerError(
            "no Docker engine answers (docker info failed)",
            command=["docker", "info"],
            output="",
            hint="start it (`bash .ci/setup` installs and starts one) or set DOCKER_HOST",
        )


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        DockerClient().system.info()
    except DockerException:
        return False
    return True


@dataclass(frozen=True)
class EngineFacts:
    """What doctor needs to know about the local Docker engine."""

    server_version: str
    compose_version: str | None  # None: no Compose v2 plugin
    runtimes: tuple[str, ...]
    default_runtime: str
    root_dir: str
    cdi_spec_dirs: tuple[str, ...]  # Docker >= 25 with CDI enabled; () otherwise
    daemon_pid: int | None


def engine_facts() -> EngineFacts | None:
    """None when no engine answers. `docker info` as JSON: python-on-whales' model lacks the
    CDI fields of newer engines."""
    if shutil.which("docker") is None:
        return None
    done = subprocess.run(
        ["docker", "info", "--format", "{{json .}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        return None
    info = json.loads(done.stdout)
    return EngineFacts(
        server_version=str(info.get("ServerVersion", "?")),
        compose_version=_compose_version(),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=str(info.get("DefaultRuntime", "")),
        root_dir=str(info.get("DockerRootDir", "/var/lib/docker")),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
        daemon_pid=_daemon_pid(),
    )


def _compose_version() -> str | None:
    try:
        return str(DockerClient().compose.version()).removeprefix("Docker Compose version ")
    except DockerException:
        return None


def _daemon_pid() -> int | None:
    for path in ("/var/run/docker.pid", "/run/docker.pid"):
        try:
            return int(Path(path).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
    return None


def container_publishing(port: int) -> str | None:
    """The container whose published port this is (docker-proxy holds it on the host)."""
    try:
        containers = DockerClient().container.list(filters={"publish": str(port)})
    except DockerException:
        return None
    return containers[0].name if containers else None


def image_exists(tag: str) -> bool:
    with _translated(f"inspecting {tag}"):
        return bool(DockerClient().image.exists(tag))


def ensure_image(tag: str) -> str:
    """Present locally, or pulled now. Returns how it was found."""
    client = DockerClient()
    if client.image.exists(tag):
        return "present"
    with _translated(
        f"pulling {tag}",
        "no registry? `bash .ci/setup` makes debian:bookworm-slim locally with debootstrap",
    ):
        client.image.pull(tag, quiet=True)
    return "pulled"


class ComposeStack:
    """One compose project (one host of a stack), driven through ``docker compose``."""

    def __init__(self, compose_file: Path, project: str) -> None:
        self.compose_file = compose_file
        self.project = project
        self._client = DockerClient(compose_files=[compose_file], compose_project_name=project)
        self._ps_lock = threading.Lock()
        self._ps_cache: tuple[float, list[ServiceState]] | None = None

    def build(self, services: list[str], on_line: Callable[[str], None]) -> None:
        """Build the images of ``services`` (their ``build:`` sections), streaming the log."""
        with _translated(f"building {', '.join(services)}", "read the build log in the run folder"):
            stream = self._client.compose.build(services, stream_logs=True)
            for _source, line in stream or ():
                on_line(line.decode(errors="replace").rstrip("\n"))

    def up(self, services: list[str], *, with_dependencies: bool = False) -> None:
        """Create and start ``services`` detached; already-running ones are left alone."""
        with _translated(f"starting {', '.join(services)}"):
            self._client.compose.up(
                services, detach=True, no_build=True, dependencies=with_dependencies, quiet=True
            )
        with self._ps_lock:
            self._ps_cache = None  # what was listed before is out of date now

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
        with _translated("listing the stack's containers"):
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
            states.append(
                ServiceState(
                    service, container.name, str(state.status), health, state.exit_code, ports
                )
            )
        return sorted(states, key=lambda s: s.service)

    def logs(self, service: str | None = None, *, tail: int | None = None) -> str:
        with _translated(f"reading logs of {service or self.project}"):
            text = self._client.compose.logs(
                [service] if service else [],
                tail=str(tail) if tail else None,
                no_log_prefix=service is not None,
            )
        return text if isinstance(text, str) else ""

    def follow_logs(self, service: str | None, on_line: Callable[[str], None]) -> None:
        with _translated(f"following logs of {service or self.project}"):
            for _source, line in self._client.compose.logs(
                [service] if service else [], follow=True, stream=True
            ):
                on_line(line.decode(errors="replace").rstrip("\n"))

    def down(self, *, volumes: bool = False) -> None:
        with _translated(f"removing {self.project}"):
            self._client.compose.down(remove_orphans=True, volumes=volumes, timeout=30, quiet=True)

    def start_oneoff(
        self, service: str, command: list[str], *, name: str, env: dict[str, str]
    ) -> OneOff:
        """A detached one-off container of ``service``: its image, devices, namespaces,
        volumes and environment exactly as rendered, another command."""
        with _translated(f"starting a one-off {service} container"):
            self._client.compose.run(
                service,
                command,
                detach=True,
                name=name,
                remove=False,
                tty=False,
                dependencies=False,
                envs=env,
            )
        return OneOff(name)

    def run_oneoff(self, service: str, command: list[str], volumes: list[tuple[Path, str]]) -> str:
        """``docker compose run --rm`` a one-off container (e.g. the benchmark); its output."""
        with _translated(f"running {service}"):
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

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code, or None if it still runs after ``timeout_s``."""
        client = DockerClient()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with _translated(f"inspecting {self.name}"):
                state = client.container.inspect(self.name).state
            if not state.running:
                return state.exit_code
            time.sleep(0.5)
        return None

    def output(self) -> tuple[str, str]:
        """(stdout, stderr) of the container so far."""
        done = subprocess.run(
            ["docker", "logs", self.name], capture_output=True, text=True, timeout=60, check=False
        )
        return done.stdout, done.stderr

    def remove(self) -> None:
        with _translated(f"removing {self.name}"):
            DockerClient().container.remove(self.name, force=True)
