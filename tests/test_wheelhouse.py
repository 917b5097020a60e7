"""The wheelhouse holds every locked wheel for the Python and glibc of the image using it."""

from __future__ import annotations

from pathlib import Path

from generator.paths import Workspace
from generator.planner import make_plan
from generator.render.images import BUILD_TOOLS_LOCK, ENGINE_LOCK, GPU_ENGINE_LOCK, ROUTER_LOCK
from generator.stack import load_spec
from generator.wheelhouse import download_command, locks_for


def option_values(command: list[str], option: str) -> list[str]:
    return [command[i + 1] for i, word in enumerate(command) if word == option]


def test_gpu_stacks_fetch_the_gpu_lock_for_the_vllm_image(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("xpyd")))
    assert locks_for(plan) == [GPU_ENGINE_LOCK, ROUTER_LOCK, BUILD_TOOLS_LOCK]
    command = download_command(workspace.root / GPU_ENGINE_LOCK, Path("/w"))
    assert option_values(command, "--python-version") == ["3.12"]
    assert option_values(command, "--platform")[0] == "manylinux_2_31_x86_64"
    assert "--only-binary=:all:" in command


def test_cpu_stacks_fetch_for_debian_bookworm(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    assert locks_for(plan) == [ENGINE_LOCK, ROUTER_LOCK, BUILD_TOOLS_LOCK]
    command = download_command(workspace.root / ENGINE_LOCK, Path("/w"))
    assert option_values(command, "--python-version") == ["3.11"]
    assert option_values(command, "--platform")[0] == "manylinux_2_36_x86_64"


def test_a_share_of_the_gpu_lock_is_fetched_for_the_gpu_image(tmp_path: Path) -> None:
    """The wheels are fetched by several pips, each given a share of the lock in a file of
    its own: a share of the GPU lock still gets the GPU image's Python and glibc."""
    share = tmp_path / "0.txt"
    command = download_command(share, Path("/w"), gpu_lock=True)
    assert option_values(command, "--python-version") == ["3.12"]
    assert option_values(download_command(share, Path("/w")), "--python-version") == ["3.11"]
