"""generator/envs.py pieces that need no lock install: where the process runtime's Pythons
and models live, and a venv made from a Python that is itself a venv seeing its packages
(a GPU host's torch venv). `env` itself runs for real in tests/integration/test_process_stacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from generator.envs import _see_base_venv, default_pythons, model_dir
from generator.paths import Workspace
from generator.planner import make_plan
from generator.spec import Profile
from generator.stack import load_spec


def test_default_pythons_and_the_synthetic_model_path(workspace: Workspace) -> None:
    pythons = default_pythons(workspace, Profile.CPU)
    assert pythons.engine == workspace.root / ".cache/env/engine-cpu/bin/python"
    assert pythons.router == workspace.root / ".cache/env/router/bin/python"
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    assert str(model_dir(plan)) == ".cache/models/tiny-llama"  # where processes.yaml reads it


def test_a_venv_from_a_venv_sees_the_base_venvs_packages(tmp_path: Path) -> None:
    assert sys.prefix != sys.base_prefix  # the tests run from .venv
    venv = tmp_path / "v"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
    )
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import python_on_whales as p; print(p.__file__)"]
    assert subprocess.run(probe, capture_output=True, check=False).returncode != 0  # not yet
    _see_base_venv(Path(sys.executable), python)
    found = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
    assert found.startswith(sys.prefix)  # the base venv's own copy
