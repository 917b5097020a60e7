"""Writing rendered stacks: all or nothing, and drift checks against what is committed."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from generator.errors import DriftError, RenderError
from generator.render import RenderedStack

__all__ = ["diff_rendered", "write_rendered"]

_MAX_DIFF_LINES = 60


def write_rendered(rendered: RenderedStack, out_root: Path) -> list[Path]:
    """Stage every owned folder beside its target, then swap each in with a rename.

    Nothing is written unless every file rendered; a failure while staging leaves the old
    output untouched.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for owned in rendered.owned_dirs:
            target = out_root / owned
            target.parent.mkdir(parents=True, exist_ok=True)
            stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
            _fill(stage, owned, rendered.files)
            staged.append((stage, target))
    except OSError as exc:
        for stage, _ in staged:
            shutil.rmtree(stage, ignore_errors=True)
        raise RenderError(
            f"could not write {rendered.stack}: {exc}", hint="check the output folder"
        ) from exc
    for stage, target in staged:
        _swap(stage, target)
    return [out_root / path for path in sorted(rendered.files)]


def _fill(stage: Path, owned: PurePosixPath, files: dict[PurePosixPath, str]) -> None:
    for path, text in files.items():
        if owned in path.parents:
            destination = stage / path.relative_to(owned)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_text(text, encoding="utf-8")
    os.chmod(stage, 0o755)  # mkdtemp makes 0700


def _swap(stage: Path, target: Path) -> None:
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    if target.exists():
        target.rename(old)
    stage.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def diff_rendered(rendered: RenderedStack, root: Path) -> list[str]:
    """Files that differ between a fresh render and ``root`` (empty when in sync)."""
    problems: list[str] = []
    on_disk = {
        PurePosixPath(path.relative_to(root).as_posix())
        for owned in rendered.owned_dirs
        if (root / owned).is_dir()
        for path in (root / owned).rglob("*")
        if path.is_file()
    }
    for path in sorted(on_disk - set(rendered.files)):
        problems.append(f"{path}: not rendered any more (stale)")
    for path, text in sorted(rendered.files.items()):
        disk = root / path
        if not disk.is_file():
            problems.append(f"{path}: missing")
            continue
        current = disk.read_text(encoding="utf-8")
        if current != text:
            problems.append(f"{path}: differs\n{_diff(current, text, str(path))}")
    return problems


def _diff(old: str, new: str, name: str) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"committed/{name}", f"rendered/{name}", lineterm=""
        )
    )
    if len(lines) > _MAX_DIFF_LINES:
        lines = [*lines[:_MAX_DIFF_LINES], f"... ({len(lines) - _MAX_DIFF_LINES} more lines)"]
    return "\n".join(lines)


def raise_on_drift(rendered: RenderedStack, root: Path) -> None:
    problems = diff_rendered(rendered, root)
    if problems:
        raise DriftError(
            f"{rendered.stack}: committed output differs from a fresh render:\n"
            + "\n".join(problems),
            hint=f"run `python -m generator render {rendered.stack}` and commit the result",
        )
