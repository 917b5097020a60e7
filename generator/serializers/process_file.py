"""A process plan (``processes.yaml``) read back from disk, as `status`, `logs` and `down` do
from another shell: typed and bounded like user input, since anyone may have edited it.

The file must be what ``serializers/process.py`` writes: its size and nesting bounded, every
field known and typed, names that are names (a service called ``../../x`` would put its files
outside the state folder), a state folder that is the project's own, host paths that stay
below the workspace when relative, health checks and watches that are what render makes.
Anything else is one error ("... is not a process plan render wrote: ...; render the stack
again"), and nothing is started, stopped or removed on its word.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from generator.errors import SpecError, XpydError
from generator.owned import read_bounded
from generator.serializers.process import ProcessProject, ProcessService, state_dir
from generator.services.model import Secret
from generator.spec.source import parse_yaml

__all__ = ["MAX_PLAN_BYTES", "load_process_project"]

MAX_PLAN_BYTES = 8 << 20
_MANY = 4096
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
ProjectName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,99}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
Text = Annotated[str, StringConstraints(max_length=1 << 16)]
Url = Annotated[str, StringConstraints(pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=2048)]


def _below_root(path: str) -> str:
    """A host path: absolute (the user's), or relative to the workspace and inside it."""
    if not path or "\0" in path:
        raise ValueError("is no path")
    if not path.startswith("/") and ".." in PurePosixPath(path).parts:
        raise ValueError(f"{path!r} climbs out of the workspace")
    return path


def _container_path(path: str) -> str:
    if not path.startswith("/") or ".." in PurePosixPath(path).parts:
        raise ValueError(f"{path!r} is no absolute container path")
    return path


HostPath = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_below_root)]
ContainerPath = Annotated[str, StringConstraints(max_length=4096), AfterValidator(_container_path)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)


class _Health(_Strict):
    test: list[Text] = Field(min_length=1, max_length=_MANY)
    start_period_s: int = Field(ge=0, le=86_400)


class _Gpus(_Strict):
    visible: list[Annotated[int, Field(ge=0, le=_MANY)]] = Field(max_length=_MANY)
    pid: Literal["host", "private"]


class _Service(_Strict):
    role: Name
    python: Literal["engine", "router"]
    command: list[Text] = Field(min_length=1, max_length=_MANY)
    environment: dict[EnvName, Text] = Field(default_factory=dict, max_length=_MANY)
    healthcheck: _Health | None = None
    depends_on: list[Name] = Field(default_factory=list, max_length=_MANY)
    cpus: list[Annotated[int, Field(ge=0, le=1 << 16)]] = Field(default_factory=list)
    gpus: _Gpus | None = None
    secrets: list[Name] = Field(default_factory=list, max_length=_MANY)
    passed_env: list[EnvName] = Field(default_factory=list, max_length=_MANY)
    on_demand: bool = False
    stop_grace_s: int = Field(ge=0, le=3600)
    restarts: int = Field(0, ge=0, le=1000)
    registered_at: Url | None = None
    restarts_with: list[Url] = Field(default_factory=list, max_length=_MANY)
    ends_with: list[Url] = Field(default_factory=list, max_length=_MANY)
    starts_alone_on: list[Annotated[int, Field(ge=0, le=_MANY)]] = Field(
        default_factory=list, max_length=_MANY
    )
    started_when: Url | None = None
    serves_page: int | None = Field(None, ge=1, le=65535)
    paths: dict[ContainerPath, HostPath | None] = Field(default_factory=dict, max_length=_MANY)


class _Identity(_Strict):
    stack: Name
    host: Name
    runtime: Literal["process"]


class _SecretSource(_Strict):
    source: Literal["env", "file"]
    from_: Annotated[str, StringConstraints(min_length=1, max_length=4096)] = Field(alias="from")


class _Plan(_Strict):
    name: ProjectName
    identity: _Identity = Field(alias="x-xpyd")
    state: str
    secrets: dict[Name, _SecretSource] = Field(default_factory=dict, max_length=_MANY)
    services: dict[Name, _Service] = Field(min_length=1, max_length=_MANY)


def load_process_project(path: Path, root: Path) -> ProcessProject:
    """A process plan render wrote, read back (``status``, ``logs`` and ``down`` from another
    shell act on what was rendered, --set overrides included)."""
    try:
        text = read_bounded(path, max_bytes=MAX_PLAN_BYTES)
        if text is None:
            raise ValueError("it does not exist")
        plan = _Plan.model_validate(parse_yaml(text, source=str(path)))
        if plan.state != str(state_dir(plan.name)):
            raise ValueError(f"its state folder is {plan.state!r}, not the project's own")
        directory = PurePosixPath(path.parent.relative_to(root).as_posix())
    except (SpecError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise XpydError(
            f"{path} is not a process plan render wrote: {_first_line(exc)}",
            hint="render the stack again (python -m generator render <stack>)",
        ) from exc
    services = tuple(_service(name, fields) for name, fields in plan.services.items())
    secrets = tuple(Secret(name, s.source, s.from_) for name, s in plan.secrets.items())
    return ProcessProject(plan.name, plan.identity.host, directory, services, secrets, text)


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return " ".join(lines[:3]) if lines else type(exc).__name__


def _service(name: str, fields: _Service) -> ProcessService:
    health = fields.healthcheck
    return ProcessService(
        name=name,
        role=fields.role,
        interpreter=fields.python,
        command=tuple(fields.command),
        env=dict(fields.environment),
        health=tuple(health.test) if health else (),
        start_period_s=health.start_period_s if health else 0,
        depends_on=tuple(fields.depends_on),
        cpus=tuple(fields.cpus),
        gpus=tuple(fields.gpus.visible) if fields.gpus else (),
        host_pid=fields.gpus is not None and fields.gpus.pid == "host",
        secrets=tuple(fields.secrets),
        passed_env=tuple(fields.passed_env),
        on_demand=fields.on_demand,
        stop_grace_s=fields.stop_grace_s,
        paths=dict(fields.paths),
        max_restarts=fields.restarts,
        registered_at=fields.registered_at,
        restarts_with=tuple(fields.restarts_with),
        ends_with=tuple(fields.ends_with),
        starts_alone_on=tuple(fields.starts_alone_on),
        started_when=fields.started_when,
        page_port=fields.serves_page,
    )
