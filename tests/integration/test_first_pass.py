"""The AMX crash case in the real cpu engine image: vLLM's first forward passes of 1-4 tokens.

On CPUs with AMX, vLLM CPU's attention runs AMX tile instructions that Linux allows only after
the process asked for them, which vLLM never does; the image's .pth asks in every Python
process (generator/cpu_features.py). Both tests hold on any x86-64 CPU: with the .pth the first
passes always work, and without it they die exactly where the CPU has AMX.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("first_pass.py")
MODEL = "/opt/xpyd/models/tiny-llama"
PTH = "xpyd-amx-permission.pth"
pytestmark = pytest.mark.docker


def run_first_passes(image: str, *, keep_pth: bool = True) -> subprocess.CompletedProcess[str]:
    """One engine (as an engine service runs it: one pinned core, 1 GiB /dev/shm, its worker
    in-process), here with its engine core in-process too: one vLLM import (a service has two)."""
    drop = (
        ""
        if keep_pth
        else f'rm "$(python3 -c "import site; print(site.getsitepackages()[0])")/{PTH}" && '
    )
    return subprocess.run(
        [
            "docker", "run", "--rm", "--shm-size", "1g", "--cpuset-cpus", "0",
            "-e", "VLLM_CPU_OMP_THREADS_BIND=0", "-e", "VLLM_ENABLE_V1_MULTIPROCESSING=0",
            "-e", "HF_HUB_OFFLINE=1", "--network", "none",
            "-v", f"{SCRIPT}:/opt/xpyd/first_pass.py:ro",
            image, "sh", "-c", f"{drop}exec python3 /opt/xpyd/first_pass.py {MODEL}",
        ],
        capture_output=True, text=True, timeout=420, check=False,
    )  # fmt: skip


def result_of(run: subprocess.CompletedProcess[str]) -> dict[str, object]:
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, run.stdout[-3000:] + run.stderr[-3000:]
    parsed: dict[str, object] = json.loads(lines[0].removeprefix("RESULT "))
    return parsed


def host_has_amx() -> bool:
    from generator.cpu_features import cpu_features

    return cpu_features().amx_in_cpu


def test_first_passes_of_1_to_4_tokens_work(cpu_engine_image: str) -> None:
    run = run_first_passes(cpu_engine_image)
    assert run.returncode == 0, run.stderr[-3000:]
    result = result_of(run)
    assert result["generated"] == [4, 4, 4, 4]
    # Where the CPU has AMX, vLLM picks its AMX kernel and the process may run it.
    assert result["amx_in_cpu"] == host_has_amx()
    assert result["amx_permitted"] == host_has_amx()
    assert (result["attention_isa"] == "amx") == host_has_amx()


def test_without_the_permission_the_first_pass_dies_exactly_on_amx(cpu_engine_image: str) -> None:
    """What the .pth prevents (upstream vLLM CPU 0.32's bug), so the test above proves it."""
    run = run_first_passes(cpu_engine_image, keep_pth=False)
    if host_has_amx():
        assert run.returncode != 0, run.stdout[-3000:]
        assert "RESULT " not in run.stdout  # the engine died before a pass completed
    else:
        assert run.returncode == 0, run.stderr[-3000:]
        assert result_of(run)["generated"] == [4, 4, 4, 4]
