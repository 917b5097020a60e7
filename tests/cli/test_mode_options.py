"""Issue 33, class 6: an option the command's mode does not read is refused (exit 2, the
option and why), never ignored. Each case names a stack that does not exist: the refusal must
come before the spec is read, so a regression says "does not exist" (exit 1) and starts
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools import run_cli

ROOT = Path(__file__).resolve().parents[2]
NO_STACK = "no-such-stack"
FAULT = ["--fault", "kill:decode-0@10"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([*FAULT, "--p2p", "on,off"], "--p2p: has no effect with --fault: a drill runs the stack"),
        ([*FAULT, "--policies", "round_robin"], "--policies: has no effect with --fault"),
        ([*FAULT, "--baseline", "colocated"], "--baseline: has no effect with --fault"),
        ([*FAULT, "--dataset", "prefix-repetition"], "--dataset: has no effect with --fault"),
        ([*FAULT, "--preset", "smoke"], "--preset: has no effect with --fault"),
        ([*FAULT, "--request-rate", "garbage"], "--request-rate: has no effect with --fault"),
        ([*FAULT, "--goodput", "ttft:x"], "--goodput: has no effect with --fault: a drill sends"),
        ([*FAULT, "--point-timeout-s", "60"], "--point-timeout-s: has no effect with --fault"),
        ([*FAULT, "--down"], "--down: has no effect with --fault: the drill leaves the stack up"),
        (["--fault-duration-s", "30"], "--fault-duration-s: has no effect without --fault"),
        (["--fault-concurrency", "2"], "--fault-concurrency: has no effect without --fault"),
    ],
)
def test_bench_refuses_what_its_mode_does_not_read(args: list[str], says: str) -> None:
    result = run_cli("bench", NO_STACK, *args, root=ROOT, timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert says in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--request-rate", "5"], "--request-rate: has no effect without --bench"),
        (["--num-prompts", "4"], "--num-prompts: has no effect without --bench"),
        (["--dataset", "prefix-repetition"], "--dataset: has no effect without --bench"),
        (["--prefix-len", "64"], "--prefix-len: has no effect without --bench"),
    ],
)
def test_up_refuses_benchmark_settings_without_bench(args: list[str], says: str) -> None:
    result = run_cli("up", NO_STACK, *args, root=ROOT, timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert says in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--request-rate", "1,2"], "--request-rate: `up --bench` runs one load point, and 2"),
        (["--max-concurrency", "1,4,16"], "--max-concurrency: `up --bench` runs one load point"),
        (["--request-rate", "fast"], "'fast' is not a number"),
        (["--burstiness", "nan"], "Invalid value for '--burstiness'"),
    ],
)
def test_up_bench_refuses_a_sweep_and_nonsense_before_the_spec(args: list[str], says: str) -> None:
    result = run_cli("up", NO_STACK, "--bench", *args, root=ROOT, timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert says in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    "args",
    [
        [*FAULT, "--rebuild", "--wait-scale", "2", "--run-id", "x", "--fault-duration-s", "30"],
        ["--request-rate", "1,2", "--preset", "smoke"],
    ],
)
def test_what_a_mode_reads_passes_on_to_the_spec(args: list[str]) -> None:
    result = run_cli("bench", NO_STACK, *args, root=ROOT, timeout_s=60)
    assert result.returncode == 1, result.stderr
    assert f"{NO_STACK}.yaml" in result.stderr
    assert "does not exist" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--request-rate", "5", "--max-concurrency", "2", "--num-prompts", "4"],
        ["--dataset", "prefix-repetition", "--prefix-len", "64", "--output-len", "8"],
    ],
)
def test_up_takes_bench_s_load_options_with_bench(args: list[str]) -> None:
    result = run_cli("up", NO_STACK, "--bench", *args, root=ROOT, timeout_s=60)
    assert result.returncode == 1, result.stderr
    assert "does not exist" in result.stderr


def test_the_drill_is_its_own_command_and_needs_a_fault() -> None:
    result = run_cli("drill", NO_STACK, *FAULT, "--fault-duration-s", "30", root=ROOT, timeout_s=60)
    assert result.returncode == 1, result.stderr
    assert f"{NO_STACK}.yaml" in result.stderr
    missing = run_cli("drill", NO_STACK, root=ROOT, timeout_s=60)
    assert missing.returncode == 2
    assert "Missing option '--fault'" in missing.stderr


@pytest.mark.parametrize("option", ["--request-rate", "--preset", "--policies", "--down"])
def test_the_drill_has_no_benchmark_options(option: str) -> None:
    result = run_cli("drill", NO_STACK, *FAULT, option, "x", root=ROOT, timeout_s=60)
    assert result.returncode == 2
    assert f"No such option: {option}" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--size-mib", "64"], "--size-mib: has no effect without --kv-path"),
        (
            ["--kv-path", "--python", "/usr/bin/python3"],
            "--python: has no effect without --process",
        ),
    ],
)
def test_doctor_refuses_kv_test_options_without_the_kv_test(args: list[str], says: str) -> None:
    result = run_cli("doctor", NO_STACK, *args, root=ROOT, timeout_s=60)
    assert result.returncode == 2, result.stderr
    assert says in " ".join(result.stderr.split())
