"""The command line: exit codes, what goes to stdout (data) and stderr (messages)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.tools import run_cli

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, root=ROOT)


def test_help_teaches_the_topologies() -> None:
    result = run("--help")
    assert result.returncode == 0
    assert "lmcache-pd" in result.stdout
    assert "nixl-mp" in result.stdout
    for command in ("validate", "plan", "render"):
        assert command in result.stdout


def test_plan_json_is_data_on_stdout() -> None:
    result = run("plan", "xpyd", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [e["http_port"] for e in plan["decode"]] == [7200, 7201]
    assert plan["router"]["notify_port"] == 7500


def test_plan_table() -> None:
    result = run("plan", "xpyd-tp8")
    assert result.returncode == 0, result.stderr
    assert "init 7300-7307 alloc 7400-7407" in result.stdout
    assert "LMCache P/D init" in result.stdout


def test_validate_all_shipped_stacks() -> None:
    result = run("validate", "--all")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(": valid (") == len(list((ROOT / "stacks").glob("*.yaml")))


def test_invalid_stack_exits_1_with_field_and_fix(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "name: bad\ntopology: lmcache-pd\nmodel: {id: m}\nprefill: {tp: 2}\n"
        "hosts: [{name: h, gpus: [0,1,2]}]\n"
    )
    result = run("validate", str(spec))
    assert result.returncode == 1
    assert "prefill.tp: prefill TP 2 is larger than decode TP 1" in result.stderr
    assert "fix: set prefill.tp and decode.tp to the same value" in result.stderr
    assert "Traceback" not in result.stderr


def test_plan_error_exits_1() -> None:
    result = run("plan", "xpyd", "--set", "decode.count=5")
    assert result.returncode == 1
    assert "decode.count: prefill (2 x TP 1) and decode (5 x TP 1) need 7 GPUs" in result.stderr


def test_unknown_stack_lists_the_shipped_ones() -> None:
    result = run("validate", "nope")
    assert result.returncode == 1
    assert (
        "pick one of: cpu-1p1d, cpu-2host, cpu-faults, cpu-lmcache-pd, cpu-p2p, cpu-slurm, xpyd, "
        "xpyd-1gpu, xpyd-lmcache-1gpu, xpyd-mp, xpyd-mp-2host, xpyd-tp8" in result.stderr
    )


def test_usage_error_exits_2() -> None:
    assert run("plan").returncode == 2


def test_render_check_passes_on_the_committed_tree() -> None:
    result = run("render", "--all", "--check")
    assert result.returncode == 0, result.stderr


def test_render_out_then_check_detects_drift(tmp_path: Path) -> None:
    assert run("render", "cpu-1p1d", "--out", str(tmp_path)).returncode == 0
    assert run("render", "cpu-1p1d", "--out", str(tmp_path), "--check").returncode == 0
    result = run(
        "render",
        "cpu-1p1d",
        "--out",
        str(tmp_path),
        "--check",
        "--set",
        'decode.extra_args=["--seed", "1"]',
    )
    assert result.returncode == 1
    assert "compose/cpu-1p1d/compose.yaml: differs" in result.stderr
    assert "fix: run `python -m generator render --all`" in result.stderr


@pytest.mark.parametrize("debug", [False, True])
def test_debug_shows_the_traceback(debug: bool) -> None:
    args = ["--debug"] if debug else []
    result = run(*args, "validate", "nope")
    assert result.returncode == 1
    assert ("Traceback" in result.stderr) is debug


def test_doctor_checks_what_the_process_runtime_needs_and_no_docker() -> None:
    result = run("doctor", "cpu-1p1d", "--runtime", "process", "--json")
    report = json.loads(result.stdout)
    rows = {row["check"]: row for row in report["checks"]}
    assert rows["Docker engine"]["verdict"] == "SKIP"
    assert rows["Docker engine"]["found"] == "process runtime: not used"
    tools = rows["process runtime (isolation: plain)"]
    assert (tools["expected"], tools["verdict"]) == ("taskset", "PASS")  # the engines pin cores
    assert "disk for environments and model cache" in rows


@pytest.mark.parametrize("command", ["drill", "bench"])  # `bench --fault`: the same drill
@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("kill:decode-0@40", "comes after the load ends (30 s)"),
        ("stop:decode-0@10+60", "lasts past the load's end (30 s)"),
        ("cut:host-a@5+10", "runs on one host: a link cut needs two"),
    ],
)
def test_a_fault_the_drill_cannot_finish_is_refused_before_anything_starts(
    command: str, fault: str, says: str
) -> None:
    runs = ROOT / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    result = run(command, "cpu-faults", "--fault", fault, "--fault-duration-s", "30")
    assert result.returncode == 2
    assert says in " ".join(result.stderr.split())
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before  # no run folder made


def test_render_for_kubernetes_writes_its_own_folder_only(tmp_path: Path) -> None:
    result = run("render", "cpu-1p1d", "--target", "kubernetes", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "cpu-1p1d: wrote" in result.stderr
    assert (tmp_path / "kubernetes/cpu-1p1d/kustomization.yaml").is_file()
    assert (tmp_path / "kubernetes/cpu-1p1d/monitoring/kustomization.yaml").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubernetes"]
    check = ["render", "cpu-1p1d", "--target", "kubernetes", "--out", str(tmp_path), "--check"]
    assert run(*check).returncode == 0
    drifted = run(*check, "--set", 'decode.extra_args=["--seed", "1"]')
    assert drifted.returncode == 1
    assert "kubernetes/cpu-1p1d/engines.yaml: differs" in drifted.stderr
    assert "--target kubernetes` (its output is not committed)" in drifted.stderr


def test_render_refuses_an_unknown_target() -> None:
    result = run("render", "cpu-1p1d", "--target", "helm")
    assert result.returncode == 2
    assert "'helm' is not one of 'compose', 'kubernetes'" in result.stderr
