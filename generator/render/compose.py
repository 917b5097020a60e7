"""Compose projects as data: one per host, dumped to YAML (never templated YAML text)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from generator.plan import Plan
from generator.render.images import ImageBuild
from generator.render.services import (
    bench_service,
    engine_service,
    lmcache_service,
    router_service,
)
from generator.routers import router_of
from generator.topologies import topology_of

__all__ = ["ComposeProject", "compose_projects", "compose_text", "dump_yaml", "project_name"]

_MODEL_CACHE_VOLUME = "xpyd-model-cache"  # shared by every stack on a host: download once
_VLLM_CACHE_VOLUME = "xpyd-vllm-cache"  # vLLM's own caches, kept across container restarts


@dataclass(frozen=True)
class ComposeProject:
    host: str
    name: str
    directory: PurePosixPath  # relative to the workspace root
    document: dict[str, Any]
    files: dict[PurePosixPath, str] = field(default_factory=dict)  # beside compose.yaml

    @property
    def compose_file(self) -> PurePosixPath:
        return self.directory / "compose.yaml"


def project_name(plan: Plan, host: str) -> str:
    return f"xpyd-{plan.stack}" if not plan.is_multi_host else f"xpyd-{plan.stack}-{host}"


def compose_projects(plan: Plan, images: list[ImageBuild]) -> list[ComposeProject]:
    return [_project(plan, host.name, images) for host in plan.hosts if host.services]


def _project(plan: Plan, host: str, images: list[ImageBuild]) -> ComposeProject:
    directory = PurePosixPath("compose") / plan.stack
    if plan.is_multi_host:
        directory /= host
    root = PurePosixPath(os.path.relpath(".", directory))
    by_role = {image.role: _image_ref(image, root) for image in images}
    services: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    files: dict[PurePosixPath, str] = {}
    for engine in plan.engines_on(host):
        config = topology_of(plan).engine_config(plan, engine)
        if config is not None:
            files[PurePosixPath(config.path)] = dump_yaml(config.data, header=_header(plan))
            configs[config.name] = {"file": f"./{config.path}"}
        for sidecar in (s for s in plan.sidecars if s.engine == engine.name):
            image = by_role[sidecar.role]
            services[sidecar.service] = lmcache_service(plan, engine, sidecar, image)
        image = by_role[engine.role.value]
        services[engine.name] = engine_service(plan, engine, image, config, _env_files(plan, root))
    if plan.router.host == host:
        config = router_of(plan).config_file(plan)
        if config is not None:
            files[PurePosixPath(config.path)] = dump_yaml(config.data, header=_header(plan))
            configs[config.name] = {"file": f"./{config.path}"}
        services[plan.router.service] = router_service(plan, by_role["router"], config)
        services["bench"] = bench_service(plan, by_role["decode"], _env_files(plan, root))
    document = _document(plan, host, services, configs, root)
    return ComposeProject(host, project_name(plan, host), directory, document, files)


def _document(
    plan: Plan, host: str, services: dict[str, Any], configs: dict[str, Any], root: PurePosixPath
) -> dict[str, Any]:
    document: dict[str, Any] = {"name": project_name(plan, host), "services": services}
    uses_models = bool(plan.engines_on(host)) or plan.router.host == host  # engines, bench
    if uses_models:
        document["volumes"] = {
            "model-cache": _model_volume(plan),
            "vllm-cache": {"name": _VLLM_CACHE_VOLUME},
        }
    if configs:
        document["configs"] = configs
    secrets = _secrets(plan, root)
    if secrets and uses_models:
        document["secrets"] = secrets
    document["x-xpyd"] = {"stack": plan.stack, "host": host, "topology": plan.topology.kind.value}
    return document


def _image_ref(image: ImageBuild, root: PurePosixPath) -> dict[str, Any]:
    return {
        "image": image.tag,
        "build": {"context": str(root), "dockerfile": str(image.dockerfile)},
        "pull_policy": _pull_policy(image.tag),
    }


def _pull_policy(tag: str) -> str:
    """Our images are built here. A bare repository name (``xpyd/prefill:<hash>``) means
    Docker Hub, where anyone may publish that name, and the tags are predictable: never pull
    it, build it when missing. A registry host (``registry.example.com/xpyd/...``) is the
    user's own: pull when missing (built and pushed elsewhere), else build."""
    first = tag.split("/", 1)[0]
    own_registry = "/" in tag and ("." in first or ":" in first or first == "localhost")
    return "missing" if own_registry else "never"


def _model_volume(plan: Plan) -> dict[str, Any]:
    volume: dict[str, Any] = {"name": _MODEL_CACHE_VOLUME}
    if plan.hf.cache_dir:
        volume["driver"] = "local"
        volume["driver_opts"] = {"type": "none", "o": "bind", "device": plan.hf.cache_dir}
    return volume


def _secrets(plan: Plan, root: PurePosixPath) -> dict[str, Any]:
    token = plan.hf.token
    if token is None or not token.is_secret:
        return {}
    if token.source == "env":
        return {"hf_token": {"environment": token.name}}
    return {"hf_token": {"file": _from_compose_dir(token.name, root)}}


def _env_files(plan: Plan, root: PurePosixPath) -> list[str]:
    token = plan.hf.token
    return [_from_compose_dir(token.name, root)] if token and not token.is_secret else []


def _from_compose_dir(path: str, root: PurePosixPath) -> str:
    """Spec paths are relative to the checkout; compose resolves them from its own folder."""
    return path if path.startswith("/") else str(root / path)


def _header(plan: Plan) -> str:
    return (
        f"# Rendered by xpyd-stacks from stacks/{plan.stack}.yaml: do not edit, re-render with\n"
        f"#   python -m generator render {plan.stack}\n"
    )


# libyaml's emitter when present (about 5x faster on big multi-host stacks).
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# Strings that PyYAML (YAML 1.1) writes bare but a YAML 1.2 reader such as docker compose's
# takes for a number, bool, null or date: "09" is a float there, "1e5" too, "2024-1-2" a
# timestamp; a command list holding one fails `compose config` ("must be a string").
_YAML12_NOT_A_STRING = re.compile(
    r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE"
    r"|[-+]?(?:0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*)"
    r"|[-+]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9_]+)?"
    r"|[-+]?0[xX][0-9a-fA-F_.]*[pP][-+]?[0-9_]+"
    r"|[-+]?\.?(?:[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?"
)


class _PlainDumper(_Dumper):  # type: ignore[valid-type,misc]
    """No ``&id001`` anchors: services that share a build section each spell it out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "'" if _YAML12_NOT_A_STRING.fullmatch(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_PlainDumper.add_representer(str, _represent_str)


def compose_text(document: dict[str, Any], *, header: str) -> str:
    """A compose file. Compose interpolates ``$VAR`` and ``${VAR}`` in every value from the
    host's environment and ``.env``: each ``$`` of ours is written ``$$`` so that a value
    like ``${AWS_SECRET_ACCESS_KEY}`` in an extra arg reaches the container as written."""
    return dump_yaml(_literal_dollars(document), header=header)


def _literal_dollars(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_literal_dollars(item) for item in value]
    if isinstance(value, dict):
        return {key: _literal_dollars(item) for key, item in value.items()}
    return value


def dump_yaml(data: Any, *, header: str = "") -> str:
    body = yaml.dump(
        data, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=100_000
    )
    return header + body
