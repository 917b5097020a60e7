"""images/assets/check_engine_image.py: its pip check filter (offline)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "images/assets/check_engine_image.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_engine_image", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PIP_CHECK = """\
lmcache 0.5.6 requires cupy-cuda13x, which is not installed.
nixl 1.5.1 requires nixl-cu12, which is not installed.
torch 2.13.0 has requirement numpy<2.3, but you have numpy 2.3.0.
"""


def test_only_allowed_missing_requirements_pass(script: ModuleType) -> None:
    allowed = {("nixl", "nixl-cu12"), ("lmcache", "cupy-cuda13x")}
    problems = script.unexpected_pip_problems(PIP_CHECK, allowed)
    # A version conflict is never allowed, whatever the list says.
    assert problems == ["torch 2.13.0 has requirement numpy<2.3, but you have numpy 2.3.0"]
    assert script.unexpected_pip_problems("No broken requirements found.\n", set()) == []


def test_allowed_names_are_normalized(script: ModuleType) -> None:
    line = "LMCache 0.5.6 requires cupy_cuda13x, which is not installed.\n"
    assert script.unexpected_pip_problems(line, {("lmcache", "cupy-cuda13x")}) == []
    assert script.unexpected_pip_problems(line, {("lmcache", "cupy")}) != []
