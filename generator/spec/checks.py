"""Rules that relate several spec fields. Each returns ``SpecIssue``s naming field and fix.

Rules of one topology or router kind live in its unit (generator/topologies/,
generator/routers/): the spec knows none of them; generator/stack.py adds their rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from generator.errors import SpecIssue
from generator.spec.identity import machine_address
from generator.spec.machines import loopback_hosts, shared_engines
from generator.spec.model_mount import (
    TOOL_CONTAINER_PATHS,
    model_mount_target,
    tool_path_overlap,
)
from generator.spec.models import (
    GroupPlacement,
    GroupSpec,
    Profile,
    Spec,
)
from generator.spec.owned import (
    ENGINE_API_KEY,
    ENGINE_API_KEY_FIX,
    ENGINE_API_KEY_REFUSAL,
    ENGINE_ENV,
    owned_issues,
    unpassable_env,
)
from generator.spec.secrets import TOKEN_ENV_NAMES
from generator.spec.sizes import host_sizes

__all__ = ["TOOL_CONTAINER_PATHS", "check_spec"]


Check = Callable[[Spec], Iterator[SpecIssue]]


def check_spec(spec: Spec) -> list[SpecIssue]:
    return [issue for check in _CHECKS for issue in check(spec)]


def _router_host(spec: Spec) -> Iterator[SpecIssue]:
    host_names = {host.name for host in spec.hosts}
    if spec.router.host is not None and spec.router.host not in host_names:
        yield SpecIssue(
            "router.host",
            f"{spec.router.host!r} is not one of the hosts",
            f"use one of: {', '.join(sorted(host_names))}",
        )


def _profile_settings(spec: Spec) -> Iterator[SpecIssue]:
    if spec.profile is not Profile.CPU:
        if "cpu" in spec.model_fields_set:
            yield SpecIssue(
                "cpu.share",
                "is read by the cpu profile only (GPU engines are placed on GPUs)",
                "remove the cpu section, or use gpu.share to let GPU engines share a GPU",
            )
        return
    if "gpu" in spec.model_fields_set:
        yield SpecIssue(
            "gpu.access",
            "the cpu profile has no GPUs to hand to containers",
            "remove the gpu section, or set profile: gpu",
        )
    if spec.networking.rdma:
        yield SpecIssue(
            "networking.rdma",
            "the cpu profile has no RDMA devices",
            "remove networking.rdma or set it to false",
        )
    for role in ("prefill", "decode"):
        group = getattr(spec, role)
        if group.tp != group.nodes:
            # One rank a host: vLLM's CPU build binds each rank's threads to the node's cores.
            yield SpecIssue(
                f"{role}.tp",
                "the cpu profile runs one TP rank per host, on one pinned core: tp must equal "
                f"{role}.nodes ({group.nodes})",
                f"set {role}.tp: {group.nodes}",
            )
        if group.gpu_memory_utilization is not None:
            yield SpecIssue(
                f"{role}.gpu_memory_utilization",
                "has no meaning on the cpu profile",
                f"remove {role}.gpu_memory_utilization (size the KV cache with "
                "--kv-cache-memory-bytes in model.extra_args)",
            )


def _model_source(spec: Spec) -> Iterator[SpecIssue]:
    model = spec.model
    if model.source == "host-path" and not model.host_path:
        yield SpecIssue(
            "model.host_path",
            "is required when model.source is host-path",
            "set model.host_path to the host directory that holds the model",
        )
    if model.source != "host-path" and model.host_path:
        yield SpecIssue(
            "model.host_path",
            f"is only used with model.source: host-path (source is {model.source})",
            "remove model.host_path, or set model.source: host-path",
        )
    if model.source == "host-path" and not model.id.startswith("/"):
        yield SpecIssue(
            "model.id",
            "with model.source: host-path the model is mounted at model.id: it must be the "
            "absolute path inside the containers",
            "set model.id to e.g. /models/llama",
        )
    if model.source == "host-path" and (taken := tool_path_overlap(model.id)) is not None:
        yield SpecIssue(
            "model.id",
            f"the model would be mounted over {taken}, where the tool mounts its own "
            "caches, configs or secrets (one of the two mounts would be dropped)",
            "mount the model elsewhere, e.g. model.id: /models/llama",
        )
    if model.source == "synthetic" and not model.id.startswith("/"):
        yield SpecIssue(
            "model.id",
            "a synthetic model is made inside the image: its id must be the absolute path there",
            "set model.id to e.g. /opt/xpyd/models/tiny-llama",
        )


def _token_source(spec: Spec) -> Iterator[SpecIssue]:
    token = spec.hf.token
    if token is None:
        return
    given = [name for name in ("env", "file", "env_file") if getattr(token, name) is not None]
    if len(given) != 1:
        found = f"gives {' and '.join(given)}" if given else "gives none"
        yield SpecIssue(
            "hf.token",
            f"must give exactly one source of the token, but {found}",
            "keep one of env, file or env_file (or remove hf.token for public models)",
        )


def _owned_settings(spec: Spec) -> Iterator[SpecIssue]:
    groups = {role: (group.extra_args, group.env) for role, group in _groups(spec)}
    server = spec.lmcache.server
    yield from owned_issues(
        spec.model.extra_args,
        groups,
        spec.router.extra_args,
        server.extra_args if server is not None else [],
    )


def _secret_env(spec: Spec) -> Iterator[SpecIssue]:
    for role, group in _groups(spec):
        seen: set[str] = set()
        for index, name in enumerate(group.secret_env):
            field = f"{role}.secret_env[{index}]"
            if name in seen or name in group.env:
                where = "twice" if name in seen else f"and in {role}.env"
                yield SpecIssue(field, f"lists {name} {where}", "give each variable once")
            elif (issue := _passed_name_issue(field, name)) is not None:
                yield issue
            seen.add(name)


def _passed_name_issue(field: str, name: str) -> SpecIssue | None:
    if name == ENGINE_API_KEY:
        return SpecIssue(field, ENGINE_API_KEY_REFUSAL, ENGINE_API_KEY_FIX)
    if name in ENGINE_ENV or name in TOKEN_ENV_NAMES:
        fix = "hf.token" if name in TOKEN_ENV_NAMES else ENGINE_ENV[name]
        return SpecIssue(field, f"{name} is set by the tool itself", f"use {fix}")
    problem = unpassable_env(name)
    if problem is not None:
        return SpecIssue(
            field, problem, "remove it: secret_env carries secrets (API keys, credentials) only"
        )
    return None


def _groups(spec: Spec) -> tuple[tuple[str, GroupSpec], ...]:
    return (("prefill", spec.prefill), ("decode", spec.decode))


def _hosts(spec: Spec) -> Iterator[SpecIssue]:
    for attr in ("name", "address"):
        seen: set[str] = set()
        for index, host in enumerate(spec.hosts):
            if attr not in host.model_fields_set and attr == "address":
                continue  # not written: the runtime's to require or to bind (a Slurm node's)
            # Addresses compare as peers reach them: case, a trailing dot, localhost.
            value = getattr(host, attr)
            key = machine_address(value) if attr == "address" else value
            if key in seen:
                yield SpecIssue(
                    f"hosts[{index}].{attr}",
                    f"{value!r} is used by two hosts",
                    f"give every host its own {attr}",
                )
            seen.add(key)


def _docker_access(spec: Spec) -> Iterator[SpecIssue]:
    for index, host in enumerate(spec.hosts):
        access = host.docker
        if access is not None and (access.context is None) == (access.url is None):
            found = "gives both" if access.context is not None else "gives neither"
            yield SpecIssue(
                f"hosts[{index}].docker",
                f"must give exactly one of context or url, but {found}",
                "keep one: context: NAME (a `docker context`) or url: ssh://user@host; "
                "remove hosts[].docker to use the local engine",
            )


def _placement(spec: Spec) -> Iterator[SpecIssue]:
    if spec.placement is None:
        return
    host_names = {host.name for host in spec.hosts}
    for role in ("prefill", "decode"):
        group: GroupPlacement | None = getattr(spec.placement, role)
        if group is not None:
            yield from _group_placement(role, group, getattr(spec, role).count, host_names)


def _group_placement(
    role: str, group: GroupPlacement, count: int, host_names: set[str]
) -> Iterator[SpecIssue]:
    base = f"placement.{role}"
    lists: dict[str, list[object] | None] = {
        "hosts": list(group.hosts),
        "http_ports": list(group.http_ports) if group.http_ports is not None else None,
        "gpus": list(group.gpus) if group.gpus is not None else None,
    }
    for name, values in lists.items():
        # One shared host or port is seed-compatible; one shared GPU list would share GPUs.
        allowed = (count,) if name == "gpus" else (1, count)
        if values is not None and len(values) not in allowed:
            alternative = "" if name == "gpus" else ", or a single entry for all"
            yield SpecIssue(
                f"{base}.{name}",
                f"has {len(values)} entries but {role}.count is {count}",
                f"give one entry per {role} instance ({count}){alternative}",
            )
    for host in group.hosts:
        if host not in host_names:
            yield SpecIssue(
                f"{base}.hosts",
                f"{host!r} is not one of the hosts",
                f"use one of: {', '.join(sorted(host_names))}",
            )


def _nodes(spec: Spec) -> Iterator[SpecIssue]:
    """An engine over several hosts: its TP ranks split evenly, one host per node."""
    for role, group in _groups(spec):
        if group.nodes == 1:
            continue
        field = f"{role}.nodes"
        if group.tp % group.nodes:
            yield SpecIssue(
                field,
                f"{role}.tp {group.tp} does not split evenly over {group.nodes} hosts",
                f"pick nodes that divides {role}.tp (each host runs tp/nodes ranks)",
            )
        if group.nodes > len(spec.hosts):
            yield SpecIssue(
                field,
                f"spreads each {role} engine over {group.nodes} hosts, but the stack lists "
                f"{len(spec.hosts)}",
                f"list at least {group.nodes} hosts, or lower {field}",
            )
        placed = getattr(spec.placement, role) if spec.placement else None
        if placed is not None and placed.gpus is not None:
            yield SpecIssue(
                f"placement.{role}.gpus",
                f"names each engine's devices on one host, but {field} is {group.nodes}",
                f"remove placement.{role}.gpus (each node takes an aligned block of "
                f"tp/nodes devices), or set {field}: 1",
            )


# Grafana ships as a container image (a registry) or from Grafana's own apt source; a cpu
# machine here has neither, only Debian's archive (which has Prometheus, not Grafana).
GRAFANA_ON_CPU = (
    "Grafana cannot be installed on the cpu profile: it comes from a container registry or "
    "Grafana's own package source, and cpu stacks build only on the local base image and "
    "Debian's packages"
)


def _observe(spec: Spec) -> Iterator[SpecIssue]:
    observe = spec.observe
    if not observe.enabled:
        for name in sorted(observe.model_fields_set - {"enabled"}):
            yield SpecIssue(
                f"observe.{name}",
                "is read only when observe.enabled is true",
                f"set observe.enabled: true, or remove observe.{name}",
            )
        return
    if spec.profile is Profile.CPU and observe.grafana:
        yield SpecIssue(
            "observe.grafana",
            GRAFANA_ON_CPU,
            "set observe.grafana: false (Prometheus and its rules still run), or profile: gpu",
        )


_CHECKS: tuple[Check, ...] = (
    _router_host,
    _profile_settings,
    _model_source,
    model_mount_target,
    _token_source,
    _hosts,
    host_sizes,
    loopback_hosts,
    _docker_access,
    shared_engines,
    _placement,
    _nodes,
    _owned_settings,
    _secret_env,
    _observe,
)
