"""Fill a stack's wheelhouse (images/<images.pip.wheelhouse>/) from the lock files its images
install, so builds need no index, no proxy and no CA inside the build.

Wheels are fetched for each image's Python and glibc (Debian bookworm's CPython 3.11 and glibc
2.36 for the cpu and router images, ``versions.yaml``'s gpu_engine for the GPU engine image),
not the host's, with the host's own pip settings (index, proxy CA, find-links).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from generator.errors import XpydError
from generator.owned import owned_dir
from generator.paths import Workspace
from generator.plan import Plan
from generator.render.images import BUILD_TOOLS_LOCK, ENGINE_LOCK, GPU_ENGINE_LOCK, ROUTER_LOCK
from generator.spec import Profile
from generator.streaming import stream_command
from generator.versions import load_versions

__all__ = ["download_command", "fill_wheelhouse", "locks_for", "wheelhouse_dir"]


@dataclass(frozen=True)
class _Platform:
    python: str
    glibc_minor: int

    @property
    def tags(self) -> list[str]:
        return [
            *(f"manylinux_2_{minor}_x86_64" for minor in range(self.glibc_minor, 4, -1)),
            "manylinux2014_x86_64",
            "manylinux2010_x86_64",
            "manylinux1_x86_64",
            "linux_x86_64",
        ]


_BOOKWORM = _Platform("3.11", 36)


def wheelhouse_dir(plan: Plan, workspace: Workspace) -> Path | None:
    folder = plan.images.pip.wheelhouse
    return workspace.images_dir / folder if folder else None


def locks_for(plan: Plan) -> list[str]:
    """The lock files of the images this stack builds from the wheelhouse, and of the tools
    their builder stages install it with."""
    engine = ENGINE_LOCK if plan.profile is Profile.CPU else GPU_ENGINE_LOCK
    return [engine, ROUTER_LOCK, BUILD_TOOLS_LOCK]


def fill_wheelhouse(plan: Plan, workspace: Workspace, on_line: Callable[[str], None]) -> str:
    target = wheelhouse_dir(plan, workspace)
    if target is None:
        return "no wheelhouse in this stack (builds use the index)"
    owned_dir(workspace.root, target.relative_to(workspace.root))  # pip writes into it
    fetched = []
    for lock in locks_for(plan):
        lock_path = workspace.root / lock
        marker = target / f".complete-{Path(lock).stem}-{_digest(lock_path)}"
        if marker.exists():
            continue
        _download(lock_path, target, on_line)
        marker.write_text("complete\n", encoding="utf-8")
        fetched.append(Path(lock).name)
    wheels = len(list(target.glob("*.whl")))
    return (
        f"fetched {', '.join(fetched)}; {wheels} wheels"
        if fetched
        else f"up to date, {wheels} wheels"
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


_DOWNLOADERS = 4


def download_command(lock: Path, target: Path, *, gpu_lock: bool = False) -> list[str]:
    """pip download of every wheel of ``lock`` for the Python and glibc of the image using it."""
    gpu = load_versions().gpu_engine
    platform = _BOOKWORM
    if gpu_lock or lock.name == Path(GPU_ENGINE_LOCK).name:
        platform = _Platform(gpu.python, gpu.glibc_minor)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", platform.python, "--implementation", "cp"]
    command += ["--progress-bar", "off"]
    for tag in platform.tags:
        command += ["--platform", tag]
    return [*command, "-r", str(lock), "-d", str(target)]


def _download(lock: Path, target: Path, on_line: Callable[[str], None]) -> None:
    """The lock's wheels, in ``_DOWNLOADERS`` pips side by side (one pip spends most of its
    time on one core checking what it fetched: the cpu lock took 75 s in one, AMD EPYC, 2
    cores), each with a share of the pins; ``--no-deps``, so the shares are independent."""
    pins = [line for line in lock.read_text(encoding="utf-8").splitlines() if _is_pin(line)]
    gpu = lock.name == Path(GPU_ENGINE_LOCK).name
    with tempfile.TemporaryDirectory(prefix=".xpyd-lock-", dir=target) as folder:
        shares = []
        for index in range(min(_DOWNLOADERS, len(pins))):
            share = Path(folder) / f"{index}.txt"
            share.write_text("\n".join(pins[index::_DOWNLOADERS]) + "\n", encoding="utf-8")
            shares.append(share)
        with ThreadPoolExecutor(max_workers=len(shares) or 1) as pool:
            results = list(pool.map(lambda s: _download_share(s, target, on_line, gpu), shares))
    failed = [tail for code, tail in results if code != 0]
    if failed:
        raise XpydError(
            f"pip could not download the wheels of {lock.name}:\n{failed[0]}",
            hint="check network/proxy settings (pip config list); a torch +cpu wheel may need "
            "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu",
        )


def _is_pin(line: str) -> bool:
    text = line.strip()
    return bool(text) and not text.startswith(("#", "-"))


def _download_share(
    share: Path, target: Path, on_line: Callable[[str], None], gpu: bool
) -> tuple[int, str]:
    command = download_command(share, target, gpu_lock=gpu)
    return stream_command(command, on_line, keep_lines=10)
