"""Plan -> Deployment: the services of each host, and what they share.

The per-service settings (engines, LMCache servers, router, bench) are in parts.py; this module
assembles them per host, with the volumes, config files and secrets the host's services use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from generator.plan import EnginePlan, Plan, SidecarPlan
from generator.plan.start_order import gpus_started_alone
from generator.routers import router_of
from generator.services.model import (
    ConfigFile,
    Deployment,
    HostServices,
    ImageBuildRef,
    ImageRef,
    NamedVolume,
    Secret,
    Service,
    Volume,
)
from generator.services.observe import PROMETHEUS_DATA, observe_services
from generator.services.parts import (
    START_LOCKS,
    bench_service,
    engine_service,
    lmcache_service,
    router_service,
    stack_sidecar_service,
)
from generator.topologies import topology_of

__all__ = ["build_deployment", "image_ref", "project_name"]

_MODEL_CACHE_VOLUME = "xpyd-model-cache"  # shared by every stack on a host: download once
_VLLM_CACHE_VOLUME = "xpyd-vllm-cache"  # vLLM's own caches, kept across container restarts
_START_LOCKS_VOLUME = "xpyd-start-locks"  # the start locks of shared GPUs (services.parts)


def project_name(plan: Plan, host: str) -> str:
    return f"xpyd-{plan.stack}" if not plan.is_multi_host else f"xpyd-{plan.stack}-{host}"


def image_ref(tag: str, dockerfile: PurePosixPath) -> ImageRef:
    """An image built from the workspace (the build context) by ``dockerfile``."""
    return ImageRef(tag, _pull_policy(tag), ImageBuildRef(dockerfile))


def _pull_policy(tag: str) -> Literal["never", "missing"]:
    """Our images are built here. A bare repository name (``xpyd/prefill:<hash>``) means
    Docker Hub, where anyone may publish that name, and the tags are predictable: never pull
    it, build it when missing. A registry host (``registry.example.com/xpyd/...``) is the
    user's own: pull when missing (built and pushed elsewhere), else build."""
    first = tag.split("/", 1)[0]
    own_registry = "/" in tag and ("." in first or ":" in first or first == "localhost")
    return "missing" if own_registry else "never"


def build_deployment(plan: Plan, images: Mapping[str, ImageRef]) -> Deployment:
    """``images``: the image of each role (prefill, decode, lmcache, router) and, with
    observe, of each observe service (prometheus, grafana)."""
    groups = _Groups.of(plan)
    hosts = tuple(_host(plan, host.name, images, groups) for host in plan.hosts if host.services)
    return Deployment(plan.stack, plan.topology.kind.value, hosts, plan.warnings)


@dataclass(frozen=True)
class _Groups:
    """The plan's engines by host and sidecars by engine, gathered in one pass: looked up
    per host and per engine, a scan of the whole plan each time made building quadratic."""

    engines: dict[str, list[EnginePlan]] = field(default_factory=dict)
    sidecars: dict[str | None, list[SidecarPlan]] = field(default_factory=dict)  # None: stack's

    @classmethod
    def of(cls, plan: Plan) -> _Groups:
        groups = cls()
        for engine in (*plan.engines, *plan.followers):
            groups.engines.setdefault(engine.host, []).append(engine)
        for sidecar in plan.sidecars:
            groups.sidecars.setdefault(sidecar.engine, []).append(sidecar)
        return groups


def _host(plan: Plan, host: str, images: Mapping[str, ImageRef], groups: _Groups) -> HostServices:
    directory = PurePosixPath("compose") / plan.stack
    if plan.is_multi_host:
        directory /= host
    services: list[Service] = []
    configs: list[ConfigFile] = []
    stack_sidecars = groups.sidecars.get(None, [])
    for sidecar in (s for s in stack_sidecars if s.host == host):
        services.append(stack_sidecar_service(plan, sidecar, images[sidecar.role]))
    engines = groups.engines.get(host, [])
    alone = gpus_started_alone(plan, engines)
    for engine in engines:
        config = topology_of(plan).engine_config(plan, engine)
        configs += [config] if config is not None else []
        own = groups.sidecars.get(engine.name, [])
        for sidecar in own:
            image = images[sidecar.role]
            services.append(
                lmcache_service(plan, engine, sidecar, image, stack_sidecars=stack_sidecars)
            )
        image = images[engine.role.value]
        env_files = _env_files(plan)
        services.append(
            engine_service(plan, engine, image, config, env_files, sidecars=own, alone_gpus=alone)
        )
    if plan.router.host == host:
        config = router_of(plan).config_file(plan)
        configs += [config] if config is not None else []
        services.append(router_service(plan, images["router"], config))
        services.append(bench_service(plan, images["decode"], _env_files(plan)))
    if plan.observe is not None and plan.observe.host == host:
        observed = observe_services(plan, images)
        services += observed
        configs += [config for service in observed for config in service.configs]
    uses_models = bool(engines) or plan.router.host == host  # engines, bench
    return HostServices(
        host,
        project_name(plan, host),
        directory,
        tuple(services),
        volumes=(_volumes(plan) if uses_models else ())
        + _lock_volume(services)
        + _prometheus_volume(plan, host, services),
        configs=tuple(configs),
        secrets=_secrets(plan) if uses_models else (),
    )


def _volumes(plan: Plan) -> tuple[Volume, ...]:
    return (
        Volume("model-cache", _MODEL_CACHE_VOLUME, plan.hf.cache_dir or None),
        Volume("vllm-cache", _VLLM_CACHE_VOLUME),
    )


def _lock_volume(services: Sequence[Service]) -> tuple[Volume, ...]:
    """Where engines that share a GPU keep its start lock: one for every stack of the host, as
    the GPU is the host's."""
    alone = any(service.starts_alone_on for service in services)
    return (Volume(START_LOCKS, _START_LOCKS_VOLUME),) if alone else ()


def _prometheus_volume(plan: Plan, host: str, services: Sequence[Service]) -> tuple[Volume, ...]:
    """A Prometheus process's data folder (a container's is its image's own volume)."""
    mounts = (m for s in services for m in s.mounts if isinstance(m, NamedVolume))
    if not any(mount.volume == PROMETHEUS_DATA for mount in mounts):
        return ()
    return (Volume(PROMETHEUS_DATA, f"{project_name(plan, host)}-prometheus"),)


def _secrets(plan: Plan) -> tuple[Secret, ...]:
    token = plan.hf.token
    if token is None or not token.is_secret:
        return ()
    return (Secret("hf_token", "env" if token.source == "env" else "file", token.name),)


def _env_files(plan: Plan) -> tuple[str, ...]:
    token = plan.hf.token
    return (token.name,) if token and not token.is_secret else ()
