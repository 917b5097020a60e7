"""Facts about one engine and its images: is it there, its versions, what it holds."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from python_on_whales.exceptions import DockerException, NoSuchImage

from generator.docker.endpoint import (
    LOCAL,
    DockerEndpoint,
    check_reachable,
    client,
    run_cli,
    translated,
)
from generator.errors import DockerError

__all__ = [
    "EngineFacts",
    "container_publishing",
    "docker_available",
    "engine_facts",
    "ensure_image",
    "image_exists",
    "image_id",
    "require_docker",
]


def require_docker(endpoint: DockerEndpoint = LOCAL) -> None:
    check_reachable(endpoint)


def docker_available(endpoint: DockerEndpoint = LOCAL) -> bool:
    try:
        check_reachable(endpoint)
    except DockerError:
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


def engine_facts(
    endpoint: DockerEndpoint = LOCAL, *, timeout_s: float = 30.0
) -> EngineFacts | None:
    """None when no engine answers; a ``DockerError`` when one hangs past ``timeout_s`` or
    answers something that is not its info. `docker info` as JSON: python-on-whales' model
    lacks the CDI fields of newer engines."""
    if shutil.which("docker") is None:
        return None
    arguments = ["info", "--format", "{{json .}}"]
    hint = _engine_hint(endpoint) + " within a few seconds"
    done = run_cli(endpoint, arguments, timeout_s=timeout_s, hint=hint)
    if done.returncode != 0:
        return None
    try:
        info = json.loads(done.stdout)
    except ValueError as exc:
        raise DockerError(
            f"`docker info` on {endpoint.label} printed no JSON: {done.stdout[:200]!r}",
            command=["docker", *endpoint.cli_args(), *arguments],
            output=done.stdout + done.stderr,
            hint=hint,
        ) from exc
    return EngineFacts(
        server_version=str(info.get("ServerVersion", "?")),
        compose_version=_compose_version(endpoint),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        default_runtime=str(info.get("DefaultRuntime", "")),
        root_dir=str(info.get("DockerRootDir", "/var/lib/docker")),
        cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
        daemon_pid=_daemon_pid() if endpoint.is_local else None,
    )


def _compose_version(endpoint: DockerEndpoint) -> str | None:
    try:
        return str(client(endpoint).compose.version()).removeprefix("Docker Compose version ")
    except DockerException:
        return None


def _daemon_pid() -> int | None:
    for path in ("/var/run/docker.pid", "/run/docker.pid"):
        try:
            return int(Path(path).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
    return None


def container_publishing(port: int, endpoint: DockerEndpoint = LOCAL) -> str | None:
    """The container whose published port this is (docker-proxy holds it on the host)."""
    try:
        containers = client(endpoint).container.list(filters=[("publish", str(port))])
    except DockerException:
        return None
    return containers[0].name if containers else None


def image_exists(tag: str, endpoint: DockerEndpoint = LOCAL) -> bool:
    with translated(f"inspecting {tag} on {endpoint.label}", hint=_engine_hint(endpoint)):
        return bool(client(endpoint).image.exists(tag))


def image_id(endpoint: DockerEndpoint, tag: str) -> str | None:
    """The image ID ``tag`` names on that engine (kept by save/load), or None."""
    with translated(f"inspecting {tag} on {endpoint.label}", hint=_engine_hint(endpoint)):
        try:
            return str(client(endpoint).image.inspect(tag).id)
        except NoSuchImage:
            return None


def ensure_image(tag: str, endpoint: DockerEndpoint = LOCAL) -> str:
    """Present on that engine, or pulled now. Returns how it was found."""
    if image_exists(tag, endpoint):
        return "present"
    with translated(
        f"pulling {tag} on {endpoint.label}",
        hint="no registry? `bash .ci/setup` makes debian:bookworm-slim locally with debootstrap",
    ):
        client(endpoint).image.pull(tag, quiet=True)
    return "pulled"


def _engine_hint(endpoint: DockerEndpoint) -> str:
    return f"check that `docker {' '.join([*endpoint.cli_args(), 'info'])}` answers"
