"""The engine base images: the GPU one installs exactly the hash-checked lock and checks
itself while building; lock and check script are part of what the content-addressed tag
stands for; a per-stack GPU pin override cannot silently diverge from the lock."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from generator.errors import RenderError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render.images import GPU_ENGINE_LOCK, ImageBuild, plan_images
from generator.stack import load_spec

INSTALL = "python3 -m pip install --require-hashes --no-deps -r /tmp/requirements.lock"


def engine_base(workspace: Workspace, stack: str, *overrides: str) -> ImageBuild:
    plan = make_plan(load_spec(workspace.stack_file(stack), list(overrides)))
    return plan_images(plan, workspace)[0]


def test_gpu_engine_installs_the_lock_with_hashes_and_checks_itself(workspace: Workspace) -> None:
    text = engine_base(workspace, "xpyd").text
    assert f"COPY {GPU_ENGINE_LOCK} /tmp/requirements.lock" in text
    assert INSTALL in text
    assert "python3 -m pip uninstall -y nixl-cu12" in text
    assert 'lmcache==${LMCACHE_VERSION}"' not in text  # no unpinned, unhashed install left
    assert "ARG CUDA_MAJOR=13" in text
    check = text[text.index("RUN python3 /opt/xpyd/check_engine_image.py") :]
    for argument in (
        '--cuda-major "${CUDA_MAJOR}"',
        "--connector NixlConnector",
        "--connector LMCacheMPConnector",
        "--connector LMCacheConnectorV1",
        "--allow-missing nixl:nixl-cu12",
    ):
        assert argument in check
    # The checks run after the packages are installed.
    assert text.index(INSTALL) < text.index("check_engine_image.py")


def test_gpu_wheelhouse_build_installs_the_same_lock_offline(workspace: Workspace) -> None:
    text = engine_base(workspace, "xpyd", "images.pip.wheelhouse=wheelhouse").text
    assert 'COPY ["images/wheelhouse/", "/tmp/wheelhouse/"]' in text
    assert "python3 -m pip install --no-index --find-links /tmp/wheelhouse" in text
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in text
    assert f"COPY {GPU_ENGINE_LOCK} /tmp/requirements.lock" in text


def test_cpu_engine_checks_itself_without_cuda(workspace: Workspace) -> None:
    text = engine_base(workspace, "cpu-1p1d").text
    check = text[text.index("RUN python3 /opt/xpyd/check_engine_image.py") :]
    assert "--cuda-major" not in check
    assert "--allow-missing lmcache:cupy-cuda13x" in check
    assert "--connector LMCacheMPConnector" in check


def test_both_engine_images_patch_nixl_and_the_cpu_one_measures_its_idle_thread(
    workspace: Workspace,
) -> None:
    cpu = engine_base(workspace, "cpu-1p1d").text
    fix = '["python3", "/tmp/fix_engine_venv.py", "--vllm-version", "0.32.0", "--delay-env", '
    assert fix + '"XPYD_NIXL_PTHR_DELAY_US"]' in cpu  # the patch itself: tests/images
    check = cpu[cpu.index("RUN python3 /opt/xpyd/check_engine_image.py") :]
    assert "--nixl-idle-delay-us 10000" in check
    gpu = engine_base(workspace, "xpyd").text
    # No vllm alias on a GPU (upstream's vLLM is "vllm"); no idle measurement while building
    # (the build host may have no GPU, and a GPU engine's default delay is NIXL's own).
    assert (
        'RUN ["python3", "/tmp/fix_engine_venv.py", "--delay-env", "XPYD_NIXL_PTHR_DELAY_US"]'
        in gpu
    )
    assert "--nixl-idle-delay-us" not in gpu


def workspace_copy(source: Workspace, destination: Path) -> Workspace:
    for name in ("stacks", "images/templates", "images/assets", "images/locks"):
        shutil.copytree(source.root / name, destination / name)
    return Workspace(destination)


@pytest.mark.parametrize(
    ("stack", "changed"),
    [
        ("xpyd", GPU_ENGINE_LOCK),
        ("xpyd", "images/assets/check_engine_image.py"),
        ("cpu-1p1d", "images/assets/check_engine_image.py"),
    ],
)
def test_engine_base_tag_follows_lock_and_check_script(
    workspace: Workspace, tmp_path: Path, stack: str, changed: str
) -> None:
    copy = workspace_copy(workspace, tmp_path)
    before = engine_base(copy, stack).tag
    with (tmp_path / changed).open("a", encoding="utf-8") as file:
        file.write("\n# changed\n")
    assert engine_base(copy, stack).tag != before


def test_gpu_pin_override_that_leaves_the_lock_is_an_error(workspace: Workspace) -> None:
    with pytest.raises(RenderError, match=r"images\.versions overrides GPU pins"):
        engine_base(workspace, "xpyd", "images.versions.lmcache=0.5.5")
    # Restating the locked version is no override.
    assert engine_base(workspace, "xpyd", "images.versions.lmcache=0.5.6").tag
