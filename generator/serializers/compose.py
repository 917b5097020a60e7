"""Deployment -> compose projects: one per host, as data (dicts), then YAML text (never
templated YAML text). Every compose shape lives here; the model (generator/services) has none.

Paths in the model are relative to the workspace root; compose resolves a relative path from
the compose file's folder, so each is written relative to that folder (``root``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from generator.serializers.yaml_text import dump_yaml
from generator.services.model import (
    BindMount,
    Deployment,
    GpuRequest,
    HostServices,
    Mount,
    NamedVolume,
    NetworkMode,
    Secret,
    Service,
    Volume,
    watched_pages,
)
from generator.spec import GpuAccess
from generator.supervise import alone_options, in_image_command, page_options, watch_options

__all__ = [
    "ComposeProject",
    "compose_document",
    "compose_projects",
    "compose_service",
    "compose_text",
    "compose_text_with",
    "dump_yaml",
]

# The key order of each kind of service, as the files were first written (compose ignores
# it; keeping it keeps the committed files byte for byte across changes of this code).
_ENGINE_LAYOUT = (
    *("image", "build", "pull_policy", "hostname", "command", "environment"),
    *("network_mode", "ports", "expose", "shm_size", "cpuset", "ipc", "pid", "cap_add"),
    *("ulimits", "runtime", "deploy", "devices", "volumes", "configs", "secrets", "env_file"),
    *("healthcheck", "depends_on", "init", "restart", "stop_grace_period", "labels", "logging"),
)
_ROUTER_LAYOUT = (
    *("image", "build", "pull_policy", "hostname", "command", "network_mode", "ports"),
    *("expose", "configs", "depends_on", "healthcheck"),
    *("init", "restart", "stop_grace_period", "labels", "logging"),
)
_BENCH_LAYOUT = (
    *("image", "pull_policy", "profiles", "command", "secrets", "environment", "env_file"),
    *("network_mode", "volumes", "init", "restart", "stop_grace_period", "labels", "logging"),
)
_LAYOUTS = {"router": _ROUTER_LAYOUT, "bench": _BENCH_LAYOUT}


@dataclass(frozen=True)
class ComposeProject:
    """One host's services as a compose project: the document, its text, and the config
    files written beside it."""

    host_services: HostServices
    document: dict[str, Any]
    text: str
    files: dict[PurePosixPath, str] = field(default_factory=dict)  # beside compose.yaml

    @property
    def host(self) -> str:
        return self.host_services.host

    @property
    def name(self) -> str:
        return self.host_services.project_name

    @property
    def directory(self) -> PurePosixPath:
        return self.host_services.directory

    @property
    def compose_file(self) -> PurePosixPath:
        return self.directory / "compose.yaml"


def compose_projects(deployment: Deployment) -> list[ComposeProject]:
    return [_project(deployment, host) for host in deployment.hosts]


def _project(deployment: Deployment, host: HostServices) -> ComposeProject:
    document = compose_document(deployment, host)
    text = compose_text(document, header=_header(deployment, with_notes=True))
    files = {
        PurePosixPath(config.path): config.text
        if config.text is not None
        else dump_yaml(config.data, header=_header(deployment))
        for config in host.configs
    }
    return ComposeProject(host, document, text, files)


def compose_document(deployment: Deployment, host: HostServices) -> dict[str, Any]:
    root = _root_of(host.directory)
    services = {service.name: compose_service(service, root) for service in host.services}
    document: dict[str, Any] = {"name": host.project_name, "services": services}
    if host.volumes:
        document["volumes"] = {volume.key: _volume(volume) for volume in host.volumes}
    if host.configs:
        document["configs"] = {c.name: {"file": f"./{c.path}"} for c in host.configs}
    if host.secrets:
        document["secrets"] = {secret.name: _secret(secret, root) for secret in host.secrets}
    topology = deployment.topology
    document["x-xpyd"] = {"stack": deployment.stack, "host": host.host, "topology": topology}
    return document


def compose_service(service: Service, root: PurePosixPath) -> dict[str, Any]:
    """``root``: the workspace root, relative to the compose file's folder."""
    fields = _image(service, root) | _runtime(service) | _resources(service)
    fields |= _files(service, root) | _lifecycle(service)
    layout = _LAYOUTS.get(service.role, _ENGINE_LAYOUT)
    missing = set(fields) - set(layout)
    assert not missing, f"{service.name}: no place for {missing} in its layout"
    return {key: fields[key] for key in layout if key in fields}


def _image(service: Service, root: PurePosixPath) -> dict[str, Any]:
    image = service.image
    fields: dict[str, Any] = {"image": image.tag}
    if image.build is not None:
        context = str(root / image.build.context)
        fields["build"] = {"context": context, "dockerfile": str(image.build.dockerfile)}
    fields["pull_policy"] = image.pull_policy
    if service.on_demand:
        fields["profiles"] = [service.name]  # `up` leaves it out; `compose run` starts it
    if service.hostname is not None:
        fields["hostname"] = service.hostname
    # No command: the image's own (Grafana's entrypoint takes none).
    return fields | ({"command": _command(service)} if service.command else {})


def _command(service: Service) -> list[str]:
    """A restarted service runs under the supervisor, which reports an exit nobody asked for
    as a failure: Docker's bounded policy (on-failure:N) restarts only those."""
    if not service.max_restarts and service.page_port is None:
        return list(service.command)
    watch = watch_options(service.registered_at, *watched_pages(service.restarts_with))
    alone = alone_options(service.starts_alone_on, service.started_when)
    page = page_options(service.page_port)
    return in_image_command(service.name, service.command, [*watch, *alone, *page])


def _runtime(service: Service) -> dict[str, Any]:
    """Environment and network."""
    fields: dict[str, Any] = {}
    environment: dict[str, str | _FromShell] = dict(service.environment)
    environment |= {name: _FromShell(name) for name in service.passed_env}
    if environment:
        fields["environment"] = environment
    if service.network is NetworkMode.HOST:
        fields["network_mode"] = "host"
    elif service.ports:
        fields["ports"] = [
            f"{p.port}:{p.port}" if p.public else f"{p.address}:{p.port}:{p.port}"
            for p in service.ports
        ]
    if service.exposed:
        fields["expose"] = [str(port) for port in service.exposed]
    return fields


def _resources(service: Service) -> dict[str, Any]:
    """Namespaces, limits and devices."""
    fields: dict[str, Any] = {}
    if service.shm_size_mib is not None:
        fields["shm_size"] = _size(service.shm_size_mib)
    if service.cpuset:
        fields["cpuset"] = ",".join(str(cpu) for cpu in service.cpuset)
    if service.host_ipc:
        fields["ipc"] = "host"
    if service.host_pid:
        fields["pid"] = "host"
    if service.capabilities:
        fields["cap_add"] = list(service.capabilities)
    if service.ulimits:
        fields["ulimits"] = {u.name: {"soft": u.soft, "hard": u.hard} for u in service.ulimits}
    nodes = [f"{node.path}:{node.target}" for node in service.devices]
    if service.gpus is not None:
        fields |= _gpu_runtime(service.gpus)
        nodes += _cdi_devices(service.gpus)
    if nodes:
        fields["devices"] = nodes
    return fields


def _gpu_runtime(gpus: GpuRequest) -> dict[str, Any]:
    if gpus.access is GpuAccess.NVIDIA_RUNTIME:
        return {"runtime": "nvidia"}  # the GPUs come from NVIDIA_VISIBLE_DEVICES (gpu_env)
    if gpus.access is GpuAccess.CDI:
        return {}
    reservation = {
        "driver": "nvidia",
        "device_ids": [str(device) for device in gpus.device_ids],
        "capabilities": ["gpu"],
    }
    return {"deploy": {"resources": {"reservations": {"devices": [reservation]}}}}


def _cdi_devices(gpus: GpuRequest) -> list[str]:
    if gpus.access is not GpuAccess.CDI:
        return []
    return [f"nvidia.com/gpu={device}" for device in gpus.device_ids]


def _files(service: Service, root: PurePosixPath) -> dict[str, Any]:
    """Mounts, config files, secrets and env files."""
    fields: dict[str, Any] = {}
    if service.mounts:
        fields["volumes"] = [_mount(mount) for mount in service.mounts]
    if service.configs:
        fields["configs"] = [
            {"source": config.name, "target": config.target, "mode": 0o444}
            for config in service.configs
        ]
    if service.secrets:
        fields["secrets"] = list(service.secrets)
    if service.env_files:
        fields["env_file"] = [_from_compose_dir(path, root) for path in service.env_files]
    return fields


def _mount(mount: Mount) -> str | dict[str, Any]:
    suffix = ":ro" if mount.read_only else ""
    if isinstance(mount, NamedVolume):
        return f"{mount.volume}:{mount.target}{suffix}"
    if isinstance(mount, BindMount):
        return f"{mount.source}:{mount.target}{suffix}"
    return {"type": "tmpfs", "target": mount.target, "read_only": mount.read_only}


def _lifecycle(service: Service) -> dict[str, Any]:
    """Health, dependencies, restarts, labels and logs."""
    fields: dict[str, Any] = {}
    if service.health is not None:
        health = service.health
        fields["healthcheck"] = {
            "test": ["CMD", *health.command],
            "interval": f"{health.interval_s}s",
            "timeout": f"{health.timeout_s}s",
            "retries": health.retries,
            "start_period": f"{health.start_period_s}s",
        }
    if service.depends_on:
        fields["depends_on"] = {
            d.service: {"condition": f"service_{d.condition}"} for d in service.depends_on
        }
    restart = f"on-failure:{service.max_restarts}" if service.max_restarts else "no"
    fields |= {"init": service.init, "restart": restart}
    fields |= {"stop_grace_period": f"{service.stop_grace_s}s", "labels": service.labels}
    log = service.logging
    options = {"max-size": f"{log.max_size_mib}m", "max-file": str(log.max_files)}
    return fields | {"logging": {"driver": "json-file", "options": options}}


def _volume(volume: Volume) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": volume.name}
    if volume.host_path:
        fields["driver"] = "local"
        fields["driver_opts"] = {"type": "none", "o": "bind", "device": volume.host_path}
    return fields


def _secret(secret: Secret, root: PurePosixPath) -> dict[str, str]:
    if secret.source == "env":
        return {"environment": secret.value}
    return {"file": _from_compose_dir(secret.value, root)}


def _size(mib: int) -> str:
    return f"{mib // 1024}g" if mib % 1024 == 0 else f"{mib}m"


def _root_of(directory: PurePosixPath) -> PurePosixPath:
    return PurePosixPath(os.path.relpath(".", directory))


def _from_compose_dir(path: str, root: PurePosixPath) -> str:
    """Spec paths are relative to the checkout; compose resolves them from its own folder."""
    return path if path.startswith("/") else str(root / path)


def _header(deployment: Deployment, *, with_notes: bool = False) -> str:
    notes = "".join(f"# warning: {line}\n" for line in deployment.notes) if with_notes else ""
    return (
        f"# Rendered by xpyd-stacks from stacks/{deployment.stack}.yaml: do not edit, "
        f"re-render with\n#   python -m generator render {deployment.stack}\n{notes}"
    )


def compose_text_with(project: ComposeProject, replaced: Iterable[Service]) -> str:
    """The project's compose file with some of its services replaced (a one-off variant)."""
    root = _root_of(project.directory)
    changed = {service.name: compose_service(service, root) for service in replaced}
    document = project.document | {"services": project.document["services"] | changed}
    return compose_text(document, header="")


def compose_text(document: dict[str, Any], *, header: str) -> str:
    """A compose file. Compose interpolates ``$VAR`` and ``${VAR}`` in every value from the
    host's environment and ``.env``: each ``$`` of ours is written ``$$`` so that a value
    like ``${AWS_SECRET_ACCESS_KEY}`` in an extra arg reaches the container as written."""
    return dump_yaml(_literal_dollars(document), header=header)


@dataclass(frozen=True)
class _FromShell:
    """An env value compose reads from the shell that runs it, when it runs: a secret. The
    one ``$`` render writes on purpose; ``:?`` makes compose refuse to start without it."""

    name: str

    def interpolation(self) -> str:
        return f"${{{self.name}:?set {self.name} in the shell that runs up}}"


def _literal_dollars(value: Any) -> Any:
    if isinstance(value, _FromShell):
        return value.interpolation()
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_literal_dollars(item) for item in value]
    if isinstance(value, dict):
        return {key: _literal_dollars(item) for key, item in value.items()}
    return value
