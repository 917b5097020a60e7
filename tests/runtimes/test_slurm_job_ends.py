"""The slurm driver with a job Slurm ended, Slurm's answers stood in for (the real cluster runs
in tests/integration/test_slurm_job_end.py): the one line status, preflight and the waits show,
and a `down` that neither fails nor cancels what is gone, and removes the stack's record."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator.paths import Workspace
from generator.runtimes.slurm_job import BoundHost, SlurmJob, read_job, write_job
from generator.slurm import JobInfo, signal_step
from generator.workflow.runtimes import slurm as driver_module
from generator.workflow.runtimes.slurm import DRIVER

STACK = "cpu-slurm"


@pytest.fixture
def bound(tmp_path: Path) -> Workspace:
    """A workspace whose stack is bound to job 41, submitted by up."""
    hosts = (BoundHost(host="host-a", node="n1", address="10.232.0.11"),)
    write_job(tmp_path, STACK, SlurmJob(job_id=41, submitted=True, hosts=hosts))
    return Workspace(tmp_path)


def answer(monkeypatch: pytest.MonkeyPatch, info: JobInfo | None) -> list[int]:
    """Slurm answers ``info`` for every job; the jobs cancelled are returned as they come."""
    cancelled: list[int] = []
    monkeypatch.setattr(driver_module, "job_info", lambda job_id, **_: info)
    monkeypatch.setattr(driver_module, "cancel", cancelled.append)
    monkeypatch.setattr(driver_module, "wait_released", lambda job_id, **_: True)
    return cancelled


def test_a_timed_out_job_is_one_line_for_status_and_the_waits(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer(monkeypatch, JobInfo(state="TIMEOUT", reason="TimeLimit", time_limit="00:01:00"))
    assert DRIVER.allocation_ended(STACK, bound) == (
        "slurm job 41 of stack cpu-slurm ended: TIMEOUT (its time limit, 00:01:00, ran out); "
        "raise slurm.time_limit_min, or run `python -m generator down cpu-slurm`, then "
        "`up cpu-slurm` again"
    )


@pytest.mark.parametrize("info", [JobInfo(state="RUNNING"), None])
def test_a_running_job_or_a_silent_slurm_is_no_end(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch, info: JobInfo | None
) -> None:
    answer(monkeypatch, info)
    assert DRIVER.allocation_ended(STACK, bound) is None


def test_no_job_recorded_is_no_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answer(monkeypatch, JobInfo(state="TIMEOUT"))
    assert DRIVER.allocation_ended(STACK, Workspace(tmp_path)) is None


def test_down_of_a_job_slurm_ended_cancels_nothing_and_says_what_it_found(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancelled = answer(monkeypatch, JobInfo(state="NODE_FAIL", reason="NodeDown"))
    found = DRIVER.release(STACK, bound)
    assert found == (
        "Slurm job 41 had ended already (NODE_FAIL, reason NodeDown); its record removed"
    )
    assert cancelled == []
    assert read_job(bound.root, STACK) is None


def test_down_of_a_running_job_up_submitted_cancels_it(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    cancelled = answer(monkeypatch, JobInfo(state="RUNNING"))
    assert DRIVER.release(STACK, bound) == "cancelled Slurm job 41; its record removed"
    assert cancelled == [41]
    assert read_job(bound.root, STACK) is None


def test_a_requeue_after_up_bound_the_stack_is_an_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = (BoundHost(host="host-a", node="n1", address="10.232.0.11"),)
    write_job(tmp_path, STACK, SlurmJob(job_id=5, submitted=False, hosts=hosts, restarts=1))
    answer(monkeypatch, JobInfo(state="RUNNING", restarts=2))
    ended = DRIVER.allocation_ended(STACK, Workspace(tmp_path))
    assert ended is not None
    assert ended.startswith("slurm job 5 of stack cpu-slurm was requeued by Slurm (RUNNING")


def test_a_record_written_before_restarts_were_kept_still_reads(tmp_path: Path) -> None:
    path = tmp_path / ".cache/slurm" / f"{STACK}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"job_id": 3, "submitted": true, "hosts": []}')
    job = read_job(tmp_path, STACK)
    assert job is not None
    assert job.restarts == 0


def test_signalling_a_step_of_a_job_slurm_forgot_finds_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = "slurm_load_jobs error: Invalid job id specified\n"
    gone = subprocess.CompletedProcess[str](["squeue"], 1, stdout="", stderr=said)
    monkeypatch.setattr("generator.slurm._run", lambda argv, check=True: gone)
    assert signal_step(41, "cpu-slurm:decode-0", "TERM") is False


def test_down_of_a_job_past_its_limit_that_slurm_has_not_ended_yet_cancels_it(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RUNNING with RunTime at its TimeLimit: its end is sure (status says TIMEOUT), but it
    holds its nodes until slurmctld's periodic check: down ends it now."""
    running = JobInfo(state="RUNNING", time_limit="00:01:00", run_time="00:01:03")
    cancelled = answer(monkeypatch, running)
    said = DRIVER.release(STACK, bound)
    assert cancelled == [41]
    assert said is not None
    assert said.startswith("Slurm job 41 had ended already (TIMEOUT")
    assert read_job(bound.root, STACK) is None


def test_down_says_when_slurm_still_lists_the_job(
    bound: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer(monkeypatch, JobInfo(state="RUNNING"))
    monkeypatch.setattr(driver_module, "wait_released", lambda job_id, **_: False)
    said = DRIVER.release(STACK, bound)
    assert said is not None
    assert "Slurm still lists it after 40 s: its nodes clean up" in said
