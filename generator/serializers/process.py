"""Deployment -> process plans: what the process runtime (generator/runtimes/process.py) runs on
one host, as data, then YAML (``processes.yaml`` beside the host's compose file).

A process plan is a container without the container: each service's command, environment,
health check and dependencies as rendered for compose, and a *path table* standing in for
its mounts. A container reads its model cache at ``/root/.cache/huggingface`` and its config
at ``/etc/xpyd/lmcache.yaml``; a process reads the host paths behind them, so every argument
and environment value that is such a path (or lies under one) is mapped to the host's. Host
paths are relative to the workspace root, where every process starts. A target that maps to
``None`` has no host path: an environment variable naming it is left out (the caller's own
``HF_HOME`` then applies), and an argument naming it is an error.

What stays the runtime's to resolve: which Python runs ``python3`` (and the tools beside it),
the HF token (named here, read from the caller's environment or file at start, never
written), and where this run's state lives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from generator.plan.traces import RECEIVER_IN_CHECKOUT, RECEIVER_IN_IMAGE
from generator.serializers.yaml_text import dump_yaml
from generator.services.model import (
    BindMount,
    Deployment,
    HostServices,
    NamedVolume,
    Secret,
    Service,
    TmpfsMount,
    watched_pages,
)

__all__ = [
    "IMAGE_PATHS",
    "PLAN_FILE",
    "SECRETS_DIR",
    "STATE_DIR",
    "ProcessProject",
    "ProcessService",
    "map_path",
    "process_projects",
    "state_dir",
]

PLAN_FILE = "processes.yaml"
STATE_DIR = PurePosixPath(".cache/process")  # per project: pids, logs, caches (gitignored)
# What the engine images hold besides their venv, and where a process finds it instead: the
# synthetic models `up` makes for the process runtime (images/assets/make_tiny_model.py), and
# the scripts the images copy from the checkout.
IMAGE_PATHS: dict[str, str | None] = {
    "/opt/xpyd/models": ".cache/models",
    RECEIVER_IN_IMAGE: RECEIVER_IN_CHECKOUT,  # observe.traces: our OTLP receiver
}
SECRETS_DIR = "/run/secrets"
Interpreter = Literal["engine", "router"]


def state_dir(project_name: str) -> PurePosixPath:
    return STATE_DIR / project_name


@dataclass(frozen=True)
class ProcessService:
    name: str
    role: str
    interpreter: Interpreter  # whose Python runs `python3` and the tools beside it
    command: tuple[str, ...]  # paths mapped; argv[0] is resolved by the runtime
    env: dict[str, str]
    health: tuple[str, ...] = ()  # the container's check, paths mapped; exit 0 = healthy
    start_period_s: int = 0
    depends_on: tuple[str, ...] = ()
    cpus: tuple[int, ...] = ()  # taskset
    gpus: tuple[int, ...] = ()  # host GPU ids its container would see (container isolation)
    host_pid: bool = False
    secrets: tuple[str, ...] = ()  # Secret names of the host
    passed_env: tuple[str, ...] = ()  # taken from the caller's environment at start
    on_demand: bool = False  # one-off runs only (bench)
    stop_grace_s: int = 30
    paths: dict[str, str | None] = field(default_factory=dict)  # the mount table it was mapped by
    max_restarts: int = 0  # restarted by its supervisor after an exit nobody asked for
    registered_at: str | None = None  # Service.registered_at
    restarts_with: tuple[str, ...] = ()  # Service.restarts_with's pages
    ends_with: tuple[str, ...] = ()  # and those of the peers whose GPU memory it maps
    starts_alone_on: tuple[int, ...] = ()  # Service.starts_alone_on
    started_when: str | None = None  # Service.started_when
    page_port: int | None = None  # Service.page_port: its supervisor's page there


@dataclass(frozen=True)
class ProcessProject:
    """One host's services as processes: the plan, its text, and the host's secrets (where
    each comes from, never a value). Read back from its file by
    ``process_file.load_process_project``."""

    name: str  # the project's name (as compose's)
    host: str
    directory: PurePosixPath  # the host's rendered folder, relative to the workspace root
    services: tuple[ProcessService, ...]
    secrets: tuple[Secret, ...]
    text: str

    @property
    def plan_file(self) -> PurePosixPath:
        return self.directory / PLAN_FILE

    @property
    def state(self) -> PurePosixPath:
        return state_dir(self.name)

    def service(self, name: str) -> ProcessService:
        return next(service for service in self.services if service.name == name)


def process_projects(deployment: Deployment) -> list[ProcessProject]:
    return [_project(deployment, host) for host in deployment.hosts]


def _project(deployment: Deployment, host: HostServices) -> ProcessProject:
    services = tuple(_service(host, service) for service in host.services)
    document = {
        "name": host.project_name,
        "x-xpyd": {"stack": deployment.stack, "host": host.host, "runtime": "process"},
        "state": str(state_dir(host.project_name)),
        "secrets": {s.name: {"source": s.source, "from": s.value} for s in host.secrets},
        "services": {service.name: _document(service) for service in services},
    }
    header = (
        f"# Rendered by xpyd-stacks from stacks/{deployment.stack}.yaml: do not edit, "
        f"re-render with\n#   python -m generator render {deployment.stack}\n# The process "
        "runtime's plan (runtime: process): every service as a local process, in this order.\n"
    )
    text = dump_yaml(document, header=header)
    return ProcessProject(
        host.project_name, host.host, host.directory, services, host.secrets, text
    )


def _service(host: HostServices, service: Service) -> ProcessService:
    paths = _path_table(host, service)
    health = service.health
    restarts_with, ends_with = watched_pages(service.restarts_with)
    return ProcessService(
        name=service.name,
        role=service.role,
        interpreter="router" if service.role == "router" else "engine",
        command=tuple(
            map_path(part, paths, what=f"{service.name}'s command") for part in service.command
        ),
        env=_mapped_env(service.env, paths),  # not gpu_env: that is the container runtime's
        health=tuple(map_path(part, paths, what="a health check") for part in health.command)
        if health
        else (),
        start_period_s=health.start_period_s if health else 0,
        depends_on=tuple(dependency.service for dependency in service.depends_on),
        cpus=service.cpuset,
        gpus=service.gpus.device_ids if service.gpus else (),
        host_pid=service.host_pid,
        secrets=service.secrets,
        passed_env=service.passed_env,
        on_demand=service.on_demand,
        stop_grace_s=service.stop_grace_s,
        paths=paths,
        max_restarts=service.max_restarts,
        registered_at=service.registered_at,
        restarts_with=restarts_with,
        ends_with=ends_with,
        starts_alone_on=service.starts_alone_on,
        started_when=service.started_when,
        page_port=service.page_port,
    )


def _path_table(host: HostServices, service: Service) -> dict[str, str | None]:
    """Container path -> host path (relative to the workspace root), longest first."""
    volumes = {volume.key: volume for volume in host.volumes}
    state = state_dir(host.project_name)
    table: dict[str, str | None] = dict(IMAGE_PATHS)
    for mount in service.mounts:
        if isinstance(mount, NamedVolume):
            source = volumes[mount.volume].host_path
            # The model cache without a host folder is the caller's own (HF_HOME left alone);
            # other volumes are this project's state.
            default = None if mount.volume == "model-cache" else str(state / mount.volume)
            table[mount.target] = source or default
        elif isinstance(mount, BindMount):
            table[mount.target] = mount.source
        elif isinstance(mount, TmpfsMount):
            continue  # masks a host folder (sysfs NUMA): plain processes see the host's
    for config in service.configs:
        table[config.target] = str(host.directory / config.path)
    for secret in (s for s in host.secrets if s.name in service.secrets):
        table[f"{SECRETS_DIR}/{secret.name}"] = secret.value if secret.source == "file" else None
    return dict(sorted(table.items(), key=lambda item: -len(item[0])))


def map_path(value: str, paths: Mapping[str, str | None], *, what: str) -> str:
    """``value`` with a leading container path replaced by its host path; else unchanged."""
    mapped = _mapped(value, paths)
    if mapped is None:
        raise ValueError(f"{what} names {value}, which has no host path in the process runtime")
    return mapped


def _mapped(value: str, paths: Mapping[str, str | None]) -> str | None:
    for target, source in paths.items():
        if value == target or value.startswith(target + "/"):
            return None if source is None else source + value[len(target) :]
    return value


def _mapped_env(env: Mapping[str, str], paths: Mapping[str, str | None]) -> dict[str, str]:
    mapped = {name: _mapped(value, paths) for name, value in env.items()}
    return {name: value for name, value in mapped.items() if value is not None}


def _document(service: ProcessService) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "role": service.role,
        "python": service.interpreter,
        "command": list(service.command),
    }
    if service.env:
        fields["environment"] = service.env
    if service.health:
        fields["healthcheck"] = {
            "test": list(service.health),
            "start_period_s": service.start_period_s,
        }
    if service.depends_on:
        fields["depends_on"] = list(service.depends_on)
    if service.cpus:
        fields["cpus"] = list(service.cpus)
    if service.gpus:
        fields["gpus"] = {
            "visible": list(service.gpus),
            "pid": "host" if service.host_pid else "private",
        }
    if service.secrets:
        fields["secrets"] = list(service.secrets)
    if service.passed_env:
        fields["passed_env"] = list(service.passed_env)
    if service.on_demand:
        fields["on_demand"] = True
    fields["stop_grace_s"] = service.stop_grace_s
    fields |= _supervision(service)
    fields["paths"] = service.paths
    return fields


def _supervision(service: ProcessService) -> dict[str, Any]:
    """What its supervisor is told: restarts, watches, starting alone on a shared GPU."""
    fields: dict[str, Any] = {}
    if service.max_restarts:
        fields["restarts"] = service.max_restarts
    if service.registered_at:
        fields["registered_at"] = service.registered_at
    if service.restarts_with:
        fields["restarts_with"] = list(service.restarts_with)
    if service.ends_with:
        fields["ends_with"] = list(service.ends_with)
    if service.starts_alone_on:
        fields["starts_alone_on"] = list(service.starts_alone_on)
    if service.started_when is not None:
        fields["started_when"] = service.started_when
    if service.page_port is not None:
        fields["serves_page"] = service.page_port
    return fields
