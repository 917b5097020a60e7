"""Rendering for a cluster: a pod-network plan -> kubernetes/<stack>/ (a kustomization base
and its monitoring/), from the same neutral service model compose is written from. Pure:
returns text, writes nothing. The images are the ones compose builds (images/<stack>/):
rendering for compose writes their Dockerfiles."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Final

from generator.errors import RenderError
from generator.paths import Workspace
from generator.plan import Plan
from generator.render.images import plan_images, pulled_images
from generator.render.manifest import MANIFEST_NAME, manifest_text
from generator.serializers.kubernetes import PodOptions, kubernetes_files
from generator.services.build import build_deployment, image_ref
from generator.services.model import Deployment

__all__ = ["KUBERNETES_DIR", "render_kubernetes"]

KUBERNETES_DIR: Final = PurePosixPath("kubernetes")


def render_kubernetes(
    plan: Plan, workspace: Workspace, options: PodOptions | None = None
) -> tuple[dict[PurePosixPath, str], PurePosixPath, Deployment]:
    """The files (relative to the output root), the folder render owns, the deployment."""
    if not plan.pod_network:
        raise ValueError(f"{plan.stack}: a Kubernetes export needs a plan made with pod_network")
    images = plan_images(plan, workspace)
    built = {image.role: image_ref(image.tag, image.dockerfile) for image in images}
    deployment = build_deployment(plan, pulled_images(plan) | built)
    texts, problems = kubernetes_files(plan, deployment, options or PodOptions())
    if problems:  # our own invariants: a bug in the tool, never the user's spec
        raise RenderError(
            f"{plan.stack}: the Kubernetes export breaks its own checks:\n  "
            + "\n  ".join(problems),
            hint="report it: this is a bug in xpyd-stacks",
        )
    folder = KUBERNETES_DIR / plan.stack
    files = {folder / path: text for path, text in texts.items()}
    files[folder / MANIFEST_NAME] = manifest_text(plan.stack, list(texts))
    return files, folder, deployment
