"""Which Docker engine a call goes to (``DockerEndpoint``), whether it answers, and the one
place where python-on-whales' exceptions become ``DockerError``."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from generator.errors import DockerError

__all__ = [
    "LOCAL",
    "DockerEndpoint",
    "check_reachable",
    "client",
    "last_lines",
    "run_cli",
    "translated",
]

_CONTEXT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]+")
_URL_SCHEMES = ("ssh://", "tcp://", "unix://")


@dataclass(frozen=True)
class DockerEndpoint:
    """One Docker engine as the docker CLI reaches it: a context (``--context``), an engine
    URL (``--host``), or neither: the local engine (``DOCKER_HOST`` or the current context).
    ``host`` is the plan host it serves; every error names it."""

    host: str = "local"
    context: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        # The spec checks these fully; this guards endpoints made in code (a leading '-'
        # would read as a flag).
        if self.context is not None and self.url is not None:
            raise ValueError("a DockerEndpoint has a context or a url, not both")
        if self.context is not None and not _CONTEXT_NAME.fullmatch(self.context):
            raise ValueError(f"{self.context!r} is not a Docker context name")
        if self.url is not None and not self.url.startswith(_URL_SCHEMES):
            raise ValueError(f"{self.url!r} is not an ssh://, tcp:// or unix:// URL")

    @property
    def is_local(self) -> bool:
        return self.context is None and self.url is None

    @property
    def target(self) -> str:
        """What reaches the engine; two endpoints with one target drive one engine."""
        if self.context is not None:
            return f"context {self.context}"
        return self.url or "the local engine"

    @property
    def label(self) -> str:
        if self == LOCAL:
            return "the local Docker engine"
        return f"host {self.host}'s Docker engine ({self.target})"

    def cli_args(self) -> list[str]:
        """The docker CLI's global options that select this engine."""
        if self.context is not None:
            return ["--context", self.context]
        return ["--host", self.url] if self.url is not None else []


LOCAL = DockerEndpoint()


def client(
    endpoint: DockerEndpoint, *, compose_file: Path | None = None, project: str | None = None
) -> DockerClient:
    """A python-on-whales client of that engine (and of one compose project, if given)."""
    return DockerClient(
        context=endpoint.context,
        host=endpoint.url,
        compose_files=[compose_file] if compose_file is not None else [],
        compose_project_name=project,
    )


@contextmanager
def translated(what: str, *, hint: str) -> Iterator[None]:
    """python-on-whales' errors as a ``DockerError``: ``what`` failed, the last lines docker
    printed, and ``hint`` (required: every failure says what to do next)."""
    try:
        yield
    except DockerException as exc:
        output = "\n".join(part for part in (exc.stdout, exc.stderr) if part)
        raise DockerError(
            f"{what} failed: {last_lines(output, 8)}",
            command=list(exc.docker_command),
            output=output,
            hint=hint,
        ) from exc


def run_cli(
    endpoint: DockerEndpoint, arguments: list[str], *, timeout_s: float, hint: str
) -> subprocess.CompletedProcess[str]:
    """The docker CLI itself (where python-on-whales lacks a call or a field), bounded by
    ``timeout_s``: a hung engine becomes a ``DockerError`` naming it, never a TimeoutExpired."""
    command = ["docker", *endpoint.cli_args(), *arguments]
    try:
        return subprocess.run(
            command,
            stdin=subprocess.DEVNULL,  # an ssh password prompt must fail, not wait
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerError(
            f"`docker {' '.join(arguments)}`: {endpoint.label} did not answer within "
            f"{timeout_s:g} s",
            command=command,
            output=_text(exc.stdout) + _text(exc.stderr),
            hint=hint,
        ) from exc
    except OSError as exc:
        raise DockerError(
            f"could not run the docker CLI: {exc}", command=command, output="", hint=hint
        ) from exc


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def last_lines(text: str, count: int) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-count:]) if lines else "(no output)"


def check_reachable(endpoint: DockerEndpoint = LOCAL, *, timeout_s: float = 20.0) -> str:
    """The engine's version, or a DockerError naming the host and the fix, within
    ``timeout_s`` (an ssh endpoint whose host is gone would otherwise hang for minutes)."""
    command = ["docker", *endpoint.cli_args(), "version", "--format", "{{.Server.Version}}"]
    if shutil.which("docker") is None:
        raise DockerError(
            "the docker CLI is not installed", command=command, output="", hint=_fix(endpoint)
        )
    arguments = command[1 + len(endpoint.cli_args()) :]
    done = run_cli(endpoint, arguments, timeout_s=timeout_s, hint=_fix(endpoint))
    if done.returncode != 0 or not done.stdout.strip():
        output = f"{done.stdout}\n{done.stderr}"
        raise DockerError(
            f"{endpoint.label} does not answer: {last_lines(output, 3)}",
            command=command,
            output=output,
            hint=_fix(endpoint),
        )
    return done.stdout.strip()


def _fix(endpoint: DockerEndpoint) -> str:
    if endpoint.context is not None:
        name = endpoint.context
        return (
            f"check that `docker --context {name} info` answers here (`docker context inspect "
            f"{name}` shows where it points), or correct hosts[].docker of host {endpoint.host}"
        )
    url = endpoint.url or ""
    if url.startswith("ssh://"):
        destination, _, port = url.removeprefix("ssh://").partition(":")
        ssh = f"ssh -p {port} {destination}" if port else f"ssh {destination}"
        return (
            f"check that `{ssh} docker info` works without a prompt (keys in ssh-agent or "
            "~/.ssh/config) and that this user may use Docker there"
        )
    if url.startswith("tcp://"):
        return (
            f"check that an engine listens at {url} and this machine may connect; for TLS "
            "make a context with its certificates (`docker context create NAME --docker "
            "host=tcp://...,ca=...,cert=...,key=...`) and set hosts[].docker.context"
        )
    if url:
        return f"check that a dockerd serves {url} and that this user may open the socket"
    return "start it (`bash .ci/setup` installs and starts one) or set DOCKER_HOST"
