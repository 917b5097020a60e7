"""Rendering: Plan -> files (Dockerfiles under images/<stack>/, compose projects, LMCache and
router configs, plan.json under compose/<stack>/, processes.yaml under the process runtime, a
manifest of them in each stack folder); for a pod-network plan, kubernetes/<stack>/
(render/kubernetes.py).
Pure: returns text, writes nothing.

The services come from the neutral model (generator/services, ``RenderedStack.deployment``);
compose is its serializer here (generator/serializers/compose.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from generator.paths import Workspace
from generator.plan import Plan
from generator.render.images import ImageBuild, plan_images, pulled_images
from generator.render.manifest import MANIFEST_NAME, manifest_text
from generator.render.slurm_job import JOB_SCRIPT, job_script
from generator.runtimes.kinds import runtime_kind
from generator.serializers.compose import ComposeProject, compose_projects
from generator.serializers.process import ProcessProject, process_projects
from generator.services.build import build_deployment, image_ref
from generator.services.model import Deployment

__all__ = ["ComposeProject", "ImageBuild", "ProcessProject", "RenderedStack", "render_stack"]


@dataclass(frozen=True)
class RenderedStack:
    stack: str
    files: dict[PurePosixPath, str]  # relative to the output root
    owned_dirs: tuple[PurePosixPath, ...]  # each with a manifest of the files render owns
    images: tuple[ImageBuild, ...]
    deployment: Deployment  # what runs where, before any serializer's shapes
    projects: tuple[ComposeProject, ...]  # the deployment as compose projects, one per host
    # The deployment as process plans (runtime: process), one per host; () under compose.
    processes: tuple[ProcessProject, ...] = ()


def render_stack(plan: Plan, workspace: Workspace) -> RenderedStack:
    """A plan made for a pod network renders for Kubernetes (render/kubernetes.py)."""
    if plan.pod_network:
        from generator.render.kubernetes import render_kubernetes

        exported, folder, pods = render_kubernetes(plan, workspace)
        return RenderedStack(plan.stack, exported, (folder,), (), pods, ())
    images = plan_images(plan, workspace)
    built = {i.role: image_ref(i.tag, i.dockerfile) for i in images}
    deployment = build_deployment(plan, pulled_images(plan) | built)
    projects = compose_projects(deployment)
    runtime = runtime_kind(plan.runtime)
    processes = process_projects(deployment) if runtime.process_plans(plan) else []
    compose_dir = PurePosixPath("compose") / plan.stack
    images_dir = PurePosixPath("images") / plan.stack
    files: dict[PurePosixPath, str] = {image.dockerfile: image.text for image in images}
    for project in projects:
        files[project.compose_file] = project.text
        for relative, text in project.files.items():
            files[project.directory / relative] = text
    for process in processes:
        files[process.plan_file] = process.text
    if runtime.job_script:
        files[compose_dir / JOB_SCRIPT] = job_script(plan, workspace)
    files[compose_dir / "plan.json"] = plan.model_dump_json(indent=2) + "\n"
    for folder in (compose_dir, images_dir):
        listed = [path.relative_to(folder) for path in files if folder in path.parents]
        files[folder / MANIFEST_NAME] = manifest_text(plan.stack, listed)
    owned = (compose_dir, images_dir)
    return RenderedStack(
        plan.stack, files, owned, tuple(images), deployment, tuple(projects), tuple(processes)
    )
