"""Rendering: Plan -> files (Dockerfiles under images/<stack>/, compose projects, LMCache and
router configs, plan.json under compose/<stack>/, a manifest of them in each stack folder).
Pure: returns text, writes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from generator.paths import Workspace
from generator.plan import Plan
from generator.render.compose import ComposeProject, compose_projects, compose_text
from generator.render.images import ImageBuild, plan_images
from generator.render.manifest import MANIFEST_NAME, manifest_text

__all__ = ["ComposeProject", "ImageBuild", "RenderedStack", "render_stack"]


@dataclass(frozen=True)
class RenderedStack:
    stack: str
    files: dict[PurePosixPath, str]  # relative to the output root
    owned_dirs: tuple[PurePosixPath, ...]  # each with a manifest of the files render owns
    images: tuple[ImageBuild, ...]
    projects: tuple[ComposeProject, ...]


def render_stack(plan: Plan, workspace: Workspace) -> RenderedStack:
    images = plan_images(plan, workspace)
    projects = compose_projects(plan, images)
    compose_dir = PurePosixPath("compose") / plan.stack
    images_dir = PurePosixPath("images") / plan.stack
    files: dict[PurePosixPath, str] = {image.dockerfile: image.text for image in images}
    for project in projects:
        files[project.compose_file] = compose_text(project.document, header=_compose_header(plan))
        for relative, text in project.files.items():
            files[project.directory / relative] = text
    files[compose_dir / "plan.json"] = plan.model_dump_json(indent=2) + "\n"
    for folder in (compose_dir, images_dir):
        listed = [path.relative_to(folder) for path in files if folder in path.parents]
        files[folder / MANIFEST_NAME] = manifest_text(plan.stack, listed)
    return RenderedStack(
        plan.stack, files, (compose_dir, images_dir), tuple(images), tuple(projects)
    )


def _compose_header(plan: Plan) -> str:
    warnings = "".join(f"# warning: {line}\n" for line in plan.warnings)
    return (
        f"# Rendered by xpyd-stacks from stacks/{plan.stack}.yaml: do not edit, re-render with\n"
        f"#   python -m generator render {plan.stack}\n{warnings}"
    )
