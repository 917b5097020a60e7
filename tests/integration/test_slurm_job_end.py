"""Jobs Slurm ends under a running stack, on a real Slurm cluster (tests/integration/
slurm_cluster.py): cpu-slurm brought up in a job that hits a 1-minute time limit, and in one
`scancel` ends while its engines load. Each time `up`'s health wait fails at once with Slurm's
one line (not at its 300 s deadline, not with an engine's exit code), `status` gives the same
line and exits 1, and `down` of the dead job says what it found and leaves nothing: no job, no
record, no process.

The engines need not become healthy here (the job ends first), but they are the real ones:
the cpu Pythons the checkout's `python -m generator env cpu-slurm` made, else the process
tests', else made here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import workspace_copy
from tests.integration.slurm_cluster import SlurmCluster
from tests.integration.slurm_files import NodeResources
from tests.integration.slurm_stacks import assert_nothing_left, client_env, slurm_cli

pytestmark = [pytest.mark.slurm, pytest.mark.stack]
STACK = "cpu-slurm"
_ENGINE_DEADLINE_S = 300.0  # a cpu engine's health wait (generator/workflow/steps/services.py)
_FIX = f"run `python -m generator down {STACK}`, then `up {STACK}` again"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """Two nodes of 2 cores declaring 16 GB each, as test_slurm_stack's (an engine and its
    LMCache server share a node's memory cgroup)."""
    roomy = NodeResources(cpus=2, memory_mb=16_000, gpus=0)
    with SlurmCluster(nodes=(roomy, roomy)) as made:
        yield made


@pytest.fixture(scope="module")
def copy(scratch_root: Path) -> Path:
    return workspace_copy(scratch_root / "slurm-end")


def _status_and_down(cluster: SlurmCluster, copy: Path, ended: str, fix: str = _FIX) -> None:
    """`status` says ``ended`` (Slurm's state, how) in one line and exits 1; `down` says the
    job had ended and leaves nothing."""
    status = slurm_cli(cluster, "status", STACK, root=copy)
    assert status.returncode == 1, status.stdout[-2000:] + status.stderr[-2000:]
    lines = [line for line in status.stderr.splitlines() if "of stack cpu-slurm ended" in line]
    assert len(lines) == 1, status.stderr
    assert ended in lines[0]
    assert lines[0].endswith(fix)
    down = slurm_cli(cluster, "down", STACK, root=copy, timeout_s=300)
    assert down.returncode == 0, down.stderr[-3000:]
    assert "Traceback" not in down.stderr
    assert "had ended already" in down.stderr
    assert "its record removed" in down.stderr
    assert_nothing_left(cluster, copy, STACK)


def test_a_job_its_time_limit_ends_fails_ups_wait_at_once_with_one_line(
    cluster: SlurmCluster, copy: Path, cpu_pythons: list[str]
) -> None:
    """Where the limit comes while `up` runs, `up` fails with Slurm's line whichever task ran
    then: a health wait (engines loading on 2 AMD EPYC cores: 167-173 s), or, on a host that
    reaches the verdict within the minute (an Intel Xeon with AMX did in 53-59 s), the
    benchmark `up --bench` goes on to, or a step Slurm no longer lets start ("Job/step already
    completing"). Should `up` still finish first, the job ends under the running stack and
    `status` says so."""
    started = time.monotonic()
    # The benchmark's load alone lasts 100 s (200 prompts at 2/s): past the limit on any host.
    bench = ["--bench", "--num-prompts", "200", "--request-rate", "2"]
    limit = ["--set", "slurm.time_limit_min=1", *bench]
    ended = "ended: TIMEOUT (its time limit, 00:01:00, ran out)"
    try:
        up = slurm_cli(
            cluster, "up", STACK, *cpu_pythons, *limit, "--run-id", "end-timeout", root=copy
        )
        took_s = time.monotonic() - started
        if up.returncode == 0:
            print(f"[slurm-end] up passed in {took_s:.0f} s, before the time limit", flush=True)
            _wait_until_ended(cluster, copy, ended)
        else:
            said = f"of stack {STACK} {ended}; raise slurm.time_limit_min, or {_FIX}"
            assert said in up.stderr, up.stderr[-3000:]
            assert took_s < _ENGINE_DEADLINE_S, f"up waited {took_s:.0f} s"
            print(f"[slurm-end] up ended by the time limit after {took_s:.0f} s", flush=True)
        _status_and_down(cluster, copy, ended)
    finally:
        slurm_cli(cluster, "down", STACK, root=copy, timeout_s=300)  # nothing left for the next


def _wait_until_ended(cluster: SlurmCluster, copy: Path, ended: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = slurm_cli(cluster, "status", STACK, root=copy)
        if status.returncode == 1 and ended in status.stderr:
            return
        time.sleep(5)
    raise AssertionError(f"the job did not end by its time limit: {status.stderr[-2000:]}")


def _up_ended_while_engines_load(
    cluster: SlurmCluster,
    copy: Path,
    command: list[str],
    end: Callable[[str], object],
    stderr_file: Path,
) -> tuple[str, int | None, str, float]:
    """`up` started, then ``end(job_id)`` once the decoder's step runs (its engine loading):
    the job's id, `up`'s exit code and stderr, and how long after ``end`` it exited."""
    earlier = _job_ids(cluster)  # a job still completing is not this up's
    with stderr_file.open("w+") as errors:
        up = subprocess.Popen(
            cluster.client_command(sys.executable, "-m", "generator", *command),
            env=client_env(cluster, copy), stdout=subprocess.DEVNULL, stderr=errors, text=True,
        )  # fmt: skip
        try:
            job_id = _wait_for_step(cluster, ":decode-0", up, earlier)
            ended = time.monotonic()
            end(job_id)
            up.wait(timeout=240)
        finally:
            if up.poll() is None:
                up.kill()  # our own child; its steps end with the job
                up.wait()
        errors.seek(0)
        return job_id, up.returncode, errors.read(), time.monotonic() - ended


def test_a_job_scancel_ends_fails_ups_wait_at_once_with_one_line(
    cluster: SlurmCluster, copy: Path, cpu_pythons: list[str], tmp_path: Path
) -> None:
    command = ["up", STACK, *cpu_pythons, "--run-id", "end-scancel"]
    job_id, code, stderr, took_s = _up_ended_while_engines_load(
        cluster, copy, command, lambda job: cluster.run("scancel", job), tmp_path / "up.err"
    )
    assert code == 1, stderr[-3000:]
    said = f"slurm job {job_id} of stack {STACK} ended: CANCELLED (scancel, by you or an "
    assert said in stderr, stderr[-3000:]
    assert took_s < 60, f"up took {took_s:.0f} s to see the job cancelled"
    print(f"[slurm-end] up saw the scancel after {took_s:.0f} s", flush=True)
    _status_and_down(cluster, copy, f"slurm job {job_id} of stack {STACK} ended: CANCELLED")


def test_a_node_that_goes_down_fails_ups_wait_at_once_with_one_line(
    cluster: SlurmCluster, copy: Path, cpu_pythons: list[str], tmp_path: Path
) -> None:
    """host-b's node set DOWN by an administrator (as slurmctld sets a node that stops
    answering, after SlurmdTimeout): Slurm ends the job (NODE_FAIL; it is not requeued), and
    `up` says so, naming the job's nodes, and where to read why."""
    node = cluster.nodes[1].name
    down = ["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=xpyd-test"]
    command = ["up", STACK, *cpu_pythons, "--run-id", "end-node"]
    try:
        job_id, code, stderr, took_s = _up_ended_while_engines_load(
            cluster, copy, command, lambda _job: cluster.run(*down), tmp_path / "up.err"
        )
    finally:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
    assert code == 1, stderr[-3000:]
    said = f"slurm job {job_id} of stack {STACK} ended: NODE_FAIL (a node of it ("
    assert said in stderr, stderr[-3000:]
    assert "failed or stopped answering slurmctld)" in stderr
    assert "`sinfo -R` says why a node is down" in stderr
    assert took_s < 60, f"up took {took_s:.0f} s to see the node go down"
    print(f"[slurm-end] up saw the node go down after {took_s:.0f} s", flush=True)
    node_fail = f"slurm job {job_id} of stack {STACK} ended: NODE_FAIL"
    _status_and_down(cluster, copy, node_fail, f"{_FIX} (`sinfo -R` says why a node is down)")


def _job_ids(cluster: SlurmCluster) -> set[str]:
    listed = cluster.run("squeue", "--noheader", "--format=%i", check=False)
    return {line.strip() for line in listed.stdout.splitlines() if line.strip()}


def _wait_for_step(
    cluster: SlurmCluster, step: str, up: subprocess.Popen[str], earlier: set[str]
) -> str:
    """The id of the job, not one of ``earlier``, once a step whose name ends in ``step`` runs
    in it (steps are named <process project>:<service>): the engine is loading."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and up.poll() is None:
        listed = cluster.run("squeue", "--noheader", "--steps", "--format=%i %j", check=False)
        for fields in (line.split() for line in listed.stdout.splitlines()):
            job = fields[0].split(".")[0] if fields else ""
            if len(fields) == 2 and fields[1].endswith(step) and job not in earlier:
                return job
        time.sleep(0.5)
    raise AssertionError(f"no step {step} in 300 s (up exited {up.poll()})")
