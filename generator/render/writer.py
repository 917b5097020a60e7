"""Writing rendered stacks: all or nothing, only over files render owns, and drift checks
against what is committed.

A render owns exactly the files listed in the manifest of each stack folder
(``manifest.py``): it replaces those and deletes the ones it no longer renders; anything
else in the folder is the user's and stays. Every stack of one command is staged before any
file is swapped in, so a failure while rendering or staging any of them writes nothing.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from generator.errors import DriftError, RenderError
from generator.paths import RESERVED_IMAGE_DIRS
from generator.render import RenderedStack
from generator.render.manifest import MANIFEST_NAME, manifest_text, read_manifest

__all__ = ["diff_rendered", "raise_on_drift", "write_all", "write_rendered"]

_MAX_DIFF_LINES = 60
# A folder without a manifest was written by a render older than manifests if its files
# carry the header every rendered YAML and Dockerfile starts with (plan.json has none).
_RENDERED_HEADER = b"# Rendered by xpyd-stacks"
_MANIFEST = PurePosixPath(MANIFEST_NAME)


@dataclass(frozen=True)
class _Folder:
    """One stack folder to write: its new files (relative to it) and the stale ones."""

    stack: str
    target: Path
    files: dict[PurePosixPath, str]
    previous: frozenset[PurePosixPath]  # listed in its manifest now (empty: no manifest)

    @property
    def stale(self) -> frozenset[PurePosixPath]:
        return self.previous - set(self.files)


def write_rendered(rendered: RenderedStack, out_root: Path) -> list[Path]:
    return write_all([rendered], out_root)


def write_all(stacks: Sequence[RenderedStack], out_root: Path) -> list[Path]:
    """Write every stack, or (on any error before the swap) none of them."""
    folders = [folder for rendered in _distinct(stacks) for folder in _folders(rendered, out_root)]
    stages = _stage_all(folders)
    try:
        for folder, stage in zip(folders, stages, strict=True):
            _commit(folder, stage)
    except OSError as exc:
        raise RenderError(
            f"could not finish writing {folder.target}: {exc}",
            hint="fix the cause (permissions, disk space) and render again",
        ) from exc
    finally:
        for stage in stages:
            shutil.rmtree(stage, ignore_errors=True)
    return sorted(folder.target / path for folder in folders for path in folder.files)


def _distinct(stacks: Sequence[RenderedStack]) -> list[RenderedStack]:
    """The same stack twice (``render xpyd --all``) is written once; two different specs
    with one name would overwrite each other."""
    by_name: dict[str, RenderedStack] = {}
    for rendered in stacks:
        seen = by_name.setdefault(rendered.stack, rendered)
        if seen.files != rendered.files:
            raise RenderError(
                f"two of the specs given are named {rendered.stack!r} and render differently: "
                f"both would write compose/{rendered.stack}/ and images/{rendered.stack}/",
                hint="give each spec its own name, or render them one at a time",
            )
    return list(by_name.values())


def _folders(rendered: RenderedStack, out_root: Path) -> list[_Folder]:
    folders = []
    for owned in rendered.owned_dirs:
        if owned.parts[0] == "images" and owned.name in RESERVED_IMAGE_DIRS:
            raise RenderError(
                f"{rendered.stack}: images/{owned.name}/ is the tool's own folder",
                hint="rename the stack",
            )
        target = out_root / owned
        _refuse_links(out_root, owned)
        files = {
            path.relative_to(owned): text
            for path, text in rendered.files.items()
            if owned in path.parents
        }
        folder = _Folder(rendered.stack, target, files, _previous(target))
        _refuse_conflicts(folder)
        _refuse_linked_stale(folder)
        folders.append(folder)
    return folders


def _refuse_links(out_root: Path, owned: PurePosixPath) -> None:
    """A link on the way from the output folder to a stack's folder (``compose/`` itself, or
    the stack's folder) would send every write and delete into the link's target. The output
    folder itself may be a link: the user named it."""
    for depth in range(1, len(owned.parts) + 1):
        place = out_root.joinpath(*owned.parts[:depth])
        if place.is_symlink():
            raise RenderError(
                f"{place} is a symbolic link (to {os.readlink(place)}): render never writes "
                "or deletes through a link",
                hint=f"replace {place} with a real folder (move the link away), or render "
                "with --out to a folder without links",
            )


def _refuse_linked_stale(folder: _Folder) -> None:
    """Deleting a stale file below a linked folder would delete in the link's target."""
    linked = sorted(
        f"{folder.target / path}: {problem}"
        for path in folder.stale
        if (problem := _linked_parent(folder.target, path)) is not None
    )
    if linked:
        raise RenderError(
            f"{folder.stack}: files render wrote before now lie below a link or a file:\n  "
            + "\n  ".join(linked),
            hint="replace the linked folder with a real one (or remove it), then render again",
        )


def _linked_parent(target: Path, path: PurePosixPath) -> str | None:
    for parent in reversed(path.parents[:-1]):
        place = target / parent
        if place.is_symlink() or (place.exists() and not place.is_dir()):
            return f"{parent} is not a plain folder"
    return None


def _previous(target: Path) -> frozenset[PurePosixPath]:
    if (target.exists() or target.is_symlink()) and not target.is_dir():
        raise RenderError(
            f"{target} is in the way: it should be the stack's folder",
            hint="move it away, or render with --out to another folder",
        )
    return (read_manifest(target) if target.is_dir() else None) or frozenset()


def _refuse_conflicts(folder: _Folder) -> None:
    """Files render would overwrite but did not write: the user's, so refuse."""
    legacy = not (folder.target / MANIFEST_NAME).exists()
    conflicts = [
        f"{folder.target / path}: {problem}"
        for path, text in sorted(folder.files.items())
        if (problem := _conflict(folder, path, text, legacy=legacy)) is not None
    ]
    if conflicts:
        raise RenderError(
            f"{folder.stack}: render would overwrite files it did not write:\n  "
            + "\n  ".join(conflicts),
            hint="move them away (or rename the stack), then render again",
        )


def _conflict(folder: _Folder, path: PurePosixPath, text: str, *, legacy: bool) -> str | None:
    disk = folder.target / path
    blocked = _blocked(folder.target, path)
    if blocked is not None or not (disk.exists() or disk.is_symlink()):
        return blocked
    if path in folder.previous or path.name == MANIFEST_NAME:
        return None
    try:
        current = disk.read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if current == text.encode() or (legacy and _looks_rendered(path, current)):
        return None
    return "exists and is not listed in the folder's manifest"


def _blocked(target: Path, path: PurePosixPath) -> str | None:
    """A folder on the way that is a file or a link (writing through a link would write
    outside the stack's folder), or a folder where the file goes."""
    linked = _linked_parent(target, path)
    if linked is not None:
        return linked
    disk = target / path
    return "is a folder" if disk.is_dir() and not disk.is_symlink() else None


def _looks_rendered(path: PurePosixPath, content: bytes) -> bool:
    return content.startswith(_RENDERED_HEADER) or path.name == "plan.json"


def _stage_all(folders: list[_Folder]) -> list[Path]:
    stages: list[Path] = []
    for folder in folders:
        try:
            folder.target.parent.mkdir(parents=True, exist_ok=True)
            prefix = f".{folder.target.name}.new-"
            stages.append(Path(tempfile.mkdtemp(prefix=prefix, dir=folder.target.parent)))
            _fill(stages[-1], folder.files)
        except OSError as exc:
            for stage in stages:
                shutil.rmtree(stage, ignore_errors=True)
            raise RenderError(
                f"could not write {folder.stack}: {exc}", hint="check the output folder"
            ) from exc
    return stages


def _fill(stage: Path, files: dict[PurePosixPath, str]) -> None:
    for path, text in files.items():
        destination = stage / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")


def _commit(folder: _Folder, stage: Path) -> None:
    """Swap each staged file in. The manifest lists old and new files while they change
    places, so an interrupted commit still leaves every file render wrote listed."""
    target = folder.target
    target.mkdir(exist_ok=True)
    files = set(folder.files) - {_MANIFEST}
    interim = stage / f"{MANIFEST_NAME}.interim"
    interim.write_text(manifest_text(folder.stack, folder.previous | files), encoding="utf-8")
    os.replace(interim, target / MANIFEST_NAME)
    for path in sorted(files):
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / path, target / path)
    for path in sorted(folder.stale):
        stale = target / path
        if stale.is_symlink() or stale.is_file():
            stale.unlink()
            _prune_empty(target, path)
    os.replace(stage / MANIFEST_NAME, target / MANIFEST_NAME)


def _prune_empty(target: Path, path: PurePosixPath) -> None:
    """Folders left empty by a deleted file go too (a host dropped from a stack)."""
    for parent in path.parents[:-1]:
        try:
            (target / parent).rmdir()
        except OSError:
            return  # not empty: the user's files, or other rendered ones


def diff_rendered(rendered: RenderedStack, root: Path) -> list[str]:
    """Files that differ between a fresh render and ``root`` (empty when in sync)."""
    problems: list[str] = []
    for owned in rendered.owned_dirs:
        try:
            listed = read_manifest(root / owned) if (root / owned).is_dir() else None
        except RenderError as exc:
            problems.append(f"{owned / MANIFEST_NAME}: {exc.message}")
            continue
        for path in sorted((listed or frozenset()) - _under(rendered, owned)):
            problems.append(f"{owned / path}: not rendered any more (stale)")
    for path, text in sorted(rendered.files.items()):
        disk = root / path
        link = _first_link(root, path)
        if link is not None:  # what it points to is not what render would write there
            problems.append(f"{path}: {link} is a symbolic link, not rendered output")
            continue
        if not disk.is_file():
            problems.append(f"{path}: missing")
            continue
        current = disk.read_text(encoding="utf-8", errors="replace")
        if current != text:
            problems.append(f"{path}: differs\n{_diff(current, text, str(path))}")
    return problems


def _first_link(root: Path, path: PurePosixPath) -> PurePosixPath | None:
    for depth in range(1, len(path.parts) + 1):
        if root.joinpath(*path.parts[:depth]).is_symlink():
            return PurePosixPath(*path.parts[:depth])
    return None


def _under(rendered: RenderedStack, owned: PurePosixPath) -> set[PurePosixPath]:
    return {path.relative_to(owned) for path in rendered.files if owned in path.parents}


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
