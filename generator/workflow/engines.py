"""Which Docker engine drives each host of a plan (``hosts[].docker``, else the local one)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from generator.docker import DockerEndpoint
from generator.errors import PlanError
from generator.plan import HostPlan, Plan
from generator.spec import DockerAccess
from generator.spec.identity import LOCAL_MACHINE, engine_machine

__all__ = ["endpoint_of", "engine_reached", "host_endpoint", "host_endpoints"]


def endpoint_of(host: str, access: DockerAccess | None) -> DockerEndpoint:
    """The engine that ``hosts[].docker`` names for ``host`` (none: the local one)."""
    if access is None:
        return DockerEndpoint(host=host)
    return DockerEndpoint(host=host, context=access.context, url=access.url)


def host_endpoint(host: HostPlan) -> DockerEndpoint:
    return endpoint_of(host.name, host.docker)


def host_endpoints(
    plan: Plan, *, environ: Mapping[str, str] | None = None
) -> dict[str, DockerEndpoint]:
    """{host name: its engine}, in plan order. Refuses hosts that share an engine: their
    projects, ports and addresses would all land on one machine while the plan spreads them
    over several (a multi-host stack that only renders needs none of this). ``environ``:
    where DOCKER_HOST and DOCKER_CONTEXT are read (default: this process's)."""
    env = os.environ if environ is None else environ
    endpoints: dict[str, DockerEndpoint] = {}
    seen: dict[str, str] = {}  # engine -> the first host driven through it
    for index, host in enumerate(plan.hosts):
        endpoint = host_endpoint(host)
        machine = engine_reached(host.docker, env)  # spellings of one engine compare equal
        if machine in seen:
            via = (
                endpoint.target if machine == endpoint.target else f"{endpoint.target} ({machine})"
            )
            raise PlanError(
                f"hosts[{index}].docker",
                f"host {host.name} would be driven through {via}, like host {seen[machine]}",
                fix=_shared_engine_fix(endpoint),
            )
        seen[machine] = host.name
        endpoints[host.name] = endpoint
    return endpoints


def engine_reached(access: DockerAccess | None, environ: Mapping[str, str]) -> str:
    """``engine_machine`` of what the docker CLI acts on: without a setting it follows
    DOCKER_HOST, else DOCKER_CONTEXT, else the current context (`docker context use`); the
    ``default`` context is DOCKER_HOST, else the default socket (docker/cli's order)."""
    if access is not None and access.context != "default":
        return engine_machine(access)
    docker_host = environ.get("DOCKER_HOST")
    if docker_host:
        return _engine_named(url=docker_host)
    if access is None:
        context = environ.get("DOCKER_CONTEXT") or _current_context(environ)
        if context and context != "default":
            return _engine_named(context=context)
    return LOCAL_MACHINE


def _engine_named(**setting: str) -> str:
    try:
        return engine_machine(DockerAccess.model_validate(setting))
    except ValidationError:  # a form the spec does not take: equal only to itself
        return " ".join(f"{name}={value}" for name, value in setting.items())


def _current_context(environ: Mapping[str, str]) -> str | None:
    folder = environ.get("DOCKER_CONFIG") or str(Path(environ.get("HOME", "/")) / ".docker")
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    context = config.get("currentContext") if isinstance(config, dict) else None
    return context if isinstance(context, str) else None


def _shared_engine_fix(endpoint: DockerEndpoint) -> str:
    own = (
        "give each host its own engine: hosts[].docker: {context: NAME} (`docker context "
        "create NAME --docker host=ssh://user@host`) or {url: ssh://user@host}"
    )
    if endpoint.is_local:
        return f"{own}; at most one host may use the local engine (no hosts[].docker)"
    return own
