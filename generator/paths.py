"""Where things live in a checkout: stack specs, rendered compose files, images, run records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RESERVED_IMAGE_DIRS", "Workspace", "find_workspace"]

# The tool's own folders under images/: a stack is never rendered into one of them.
RESERVED_IMAGE_DIRS = ("assets", "locks", "templates", "wheelhouse")


@dataclass(frozen=True)
class Workspace:
    """A checkout of xpyd-stacks (or any folder laid out like one)."""

    root: Path

    @property
    def stacks_dir(self) -> Path:
        return self.root / "stacks"

    @property
    def compose_dir(self) -> Path:
        return self.root / "compose"

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def templates_dir(self) -> Path:
        return self.images_dir / "templates"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def stack_file(self, name_or_path: str) -> Path:
        """A stack name (``xpyd``) maps to ``stacks/xpyd.yaml``; anything else is a path (a
        bare name only where no such stack exists and it names a file)."""
        candidate = Path(name_or_path)
        # A stack name has no "/"; anything else is a path, even a broken link or a loop.
        if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
            return candidate
        # A bare name is the workspace's stack first: run inside compose/, `validate
        # cpu-1p1d` would otherwise read the rendered folder of that name as the spec.
        shipped = self.stacks_dir / f"{name_or_path}.yaml"
        if shipped.exists() or os.path.isdir(candidate) or not os.path.lexists(candidate):
            return shipped
        return candidate

    def shipped_stacks(self) -> list[str]:
        return sorted(path.stem for path in self.stacks_dir.glob("*.yaml"))


def find_workspace(start: Path | None = None) -> Workspace:
    """``XPYD_ROOT`` if set, else the nearest folder above ``start`` holding ``stacks/``,
    else the checkout this package was imported from."""
    if env_root := os.environ.get("XPYD_ROOT"):
        return Workspace(Path(env_root).resolve())
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "stacks").is_dir() and (folder / "images").is_dir():
            return Workspace(folder)
    return Workspace(Path(__file__).resolve().parent.parent)
