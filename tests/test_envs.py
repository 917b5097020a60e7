"""generator/envs.py pieces that need no lock install: where the process runtime's Pythons
and models live, and a venv made from a Python that is itself a venv seeing its packages
(a GPU host's torch venv), and the wheelhouse install (uv) keeping pip's semantics on a
hand-made wheel. `env` itself runs for real in tests/integration/test_process_stacks."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from generator.envs import (
    _make_venv,
    _run,
    _see_base_venv,
    _VenvRecipe,
    default_pythons,
    model_dir,
)
from generator.errors import XpydError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.spec import Profile
from generator.stack import load_spec
from generator.streaming import stream_command


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


def tiny_wheel(folder: Path, name: str = "xpyd_tiny") -> Path:
    """A one-module wheel that depends on a package no folder holds (--no-deps must hold);
    the same bytes every time (fixed dates), so its hash can be pinned."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}.py": "ANSWER = 42\n",
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: xpyd-absent\n"
        ),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{info}/RECORD": "",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), text)
    return wheel


def make_from_wheelhouse(root: Path, lock_text: str) -> Path:
    wheels = root / "wheels"
    tiny_wheel(wheels)
    tiny_wheel(wheels, "xpyd_other")
    lock = root / "lock.txt"
    lock.write_text(lock_text, encoding="utf-8")
    python = root / "env" / "v" / "bin" / "python"
    recipe = _VenvRecipe(Path(sys.executable), wheels, system_site_packages=False)
    _make_venv(python, lock, recipe, lambda line: None)
    return python


def test_a_wheelhouse_install_takes_no_deps_compiles_bytecode_and_leaves_no_cache(
    tmp_path: Path,
) -> None:
    python = make_from_wheelhouse(tmp_path, "xpyd-tiny==1.0\n")
    probe = [str(python), "-c", "import xpyd_tiny; print(xpyd_tiny.ANSWER)"]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout == "42\n"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = python.parent.parent / "lib" / version / "site-packages"
    assert list((site / "__pycache__").glob("xpyd_tiny.*.pyc"))
    assert not (site / "xpyd_other.py").exists()  # only what the lock names
    assert [p.name for p in (tmp_path / "env").iterdir()] == ["v"]  # the install's cache: gone


def test_a_wheelhouse_install_refuses_a_wheel_whose_hash_differs(tmp_path: Path) -> None:
    with pytest.raises(XpydError, match="Hash mismatch"):
        make_from_wheelhouse(tmp_path, f"xpyd-tiny==1.0 --hash=sha256:{'0' * 64}\n")


def test_a_wheelhouse_install_needs_a_hash_for_every_pin_once_one_has_one(
    tmp_path: Path,
) -> None:
    digest = hashlib.sha256(tiny_wheel(tmp_path / "probe").read_bytes()).hexdigest()
    hashed = f"xpyd-tiny==1.0 --hash=sha256:{digest}\n"
    # pip's hash-checking mode: once one pin has a hash, every pin needs one.
    with pytest.raises(XpydError, match="all requirements must have a hash"):
        make_from_wheelhouse(tmp_path / "mixed", f"{hashed}xpyd-other==1.0\n")
    assert make_from_wheelhouse(tmp_path / "all", hashed).is_file()


def test_installs_run_without_our_pythonpath(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pip asks the new venv's Python what it already has: with our PYTHONPATH it saw this
    tool's pydantic and left it out of the engines' venv (the services run without it)."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sees_it = [
        sys.executable,
        "-c",
        "import os, sys; sys.exit(3 if 'PYTHONPATH' in os.environ else 0)",
    ]
    assert stream_command(sees_it, lambda _line: None, keep_lines=1)[0] == 3  # ours has it
    _run(sees_it, lambda _line: None, "checking")  # raises XpydError on exit code 3
