"""images/assets/check_engine_image.py: its pip check filter (offline), and, in the real cpu
engine image, that it passes there and fails on a broken environment."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from generator.cpu_features import cpu_features
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render.images import plan_images
from generator.stack import load_spec
from tests.tools import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "images/assets/check_engine_image.py"
IN_IMAGE = "/opt/xpyd/check_engine_image.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script(SCRIPT)


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


@pytest.fixture(scope="module")
def cpu_image(cpu_engine_image: str) -> tuple[str, list[str]]:
    """The cpu-1p1d prefill image (its engine base stages run the check) and the check's
    arguments as rendered."""
    workspace = Workspace(SCRIPT.parents[2])
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    prefill = next(image for image in plan_images(plan, workspace) if image.role == "prefill")
    assert prefill.tag == cpu_engine_image
    run_line = prefill.text[prefill.text.index(f"RUN python3 {IN_IMAGE}") :].split("\n\n")[0]
    arguments = run_line.replace("\\\n", " ").split()[3:]
    return cpu_engine_image, arguments


def run_in(image: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", image, "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.docker
def test_check_passes_in_the_cpu_image(cpu_image: tuple[str, list[str]]) -> None:
    image, arguments = cpu_image
    assert "--connector" in arguments
    result = run_in(image, f"python3 {IN_IMAGE} {' '.join(arguments)}")
    assert result.returncode == 0, result.stderr
    assert "ok: pip check" in result.stdout
    assert "ok: NIXL: nixl_cu12._api lists the UCX plugin" in result.stdout
    assert "ok: vLLM: KV connector LMCacheConnectorV1" in result.stdout
    assert "ok: NIXL: an idle agent uses" in result.stdout
    amx = "a spawned process may use AMX tile data" if host_has_amx() else "no AMX on this CPU"
    assert f"ok: AMX: {amx}" in result.stdout


def host_has_amx() -> bool:
    features = cpu_features()
    return features.amx_in_cpu and features.amx_in_kernel


@pytest.mark.docker
def test_amx_check_fails_without_the_pth_where_the_cpu_has_amx(
    cpu_image: tuple[str, list[str]],
) -> None:
    image, arguments = cpu_image
    assert "--amx-permission" in arguments
    site = "$(python3 -c 'import site; print(site.getsitepackages()[0])')"
    result = run_in(
        image, f"rm {site}/xpyd-amx-permission.pth && python3 {IN_IMAGE} {' '.join(arguments)}"
    )
    if host_has_amx():
        assert result.returncode == 1, result.stdout
        assert "FAILED: AMX: a spawned process may not use AMX tile data" in result.stderr
    else:  # nothing to ask for: the check says so, with or without the .pth
        assert result.returncode == 0, result.stderr
        assert "ok: AMX: no AMX on this CPU" in result.stdout


@pytest.mark.docker
def test_idle_check_fails_on_nixl_unpatched(cpu_image: tuple[str, list[str]]) -> None:
    """Upstream's hard-coded zero poll timeout: the progress thread spins, the check sees it."""
    image, arguments = cpu_image
    assert "--nixl-idle-delay-us" in arguments
    api = "$(python3 -c 'import nixl_cu12._api as a; print(a.__file__)')"
    unpatch = rf"sed -i 's/pthrDelay = int(.*$/pthrDelay = 0/' {api} && "
    result = run_in(image, f"{unpatch}python3 {IN_IMAGE} --nixl-idle-delay-us 10000")
    assert result.returncode == 1, result.stdout
    assert "FAILED: NIXL: an idle agent uses" in result.stderr
    assert "with XPYD_NIXL_PTHR_DELAY_US=10000 (is nixl_cu12/_api.py patched?)" in result.stderr


@pytest.mark.docker
def test_check_fails_on_an_unknown_connector_and_a_missing_nixl(
    cpu_image: tuple[str, list[str]],
) -> None:
    image, arguments = cpu_image
    broken = "pip uninstall -y -q nixl && "
    result = run_in(
        image, f"{broken}python3 {IN_IMAGE} {' '.join(arguments)} --connector NoSuchConnector"
    )
    assert result.returncode == 1
    failures = [line for line in result.stderr.splitlines() if line.startswith("FAILED: ")]
    assert failures == [
        "FAILED: vLLM: KV connector NoSuchConnector does not load: "
        "ValueError: Connector 'NoSuchConnector' is not registered.",
        "FAILED: NIXL: `import nixl._api` failed: No module named 'nixl'",
        "FAILED: NIXL idle: `import nixl._api` failed: No module named 'nixl'",
    ]
    # pip check itself stays green: nothing requires the meta package.
    assert "ok: pip check" in result.stdout


@pytest.mark.docker
def test_cuda_checks_fail_where_there_is_no_cuda(cpu_image: tuple[str, list[str]]) -> None:
    image, _ = cpu_image
    result = run_in(image, f"python3 {IN_IMAGE} --cuda-major 13 --allow-missing x:y")
    assert result.returncode == 1
    assert "FAILED: NIXL: installed variants are ['nixl-cu12'], want only nixl-cu13" in (
        result.stderr
    )
    assert "FAILED: LMCache: `import lmcache.cuda_ops` failed: libcudart.so.13" in result.stderr
