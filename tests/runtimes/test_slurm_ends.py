"""Jobs Slurm ended, read back from its clients' output (scontrol, sacct) as untrusted text:
each state becomes one line that says what ended the job and what to do; malformed or huge
output claims nothing. The lines quoted are Slurm 22.05.8's (tests/integration/
test_slurm_job_end.py sees them on a real cluster)."""

from __future__ import annotations

import pytest

from generator.slurm import GONE, JobInfo, ended_by_slurm, parse_job_info, parse_sacct

# `scontrol --oneliner show job 1` of a job its 1-minute limit ended (shortened).
TIMED_OUT = (
    "JobId=1 JobName=xpyd-cpu-slurm UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit "
    "Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:28 "
    "TimeLimit=00:01:00 TimeMin=N/A NodeList=n[1-2] BatchHost=n1 NumNodes=2 "
    "Command=(null) WorkDir=/work/a dir with spaces StdOut=/dev/null Power=\n"
)


def line(info: JobInfo, restarts_seen: int = 0) -> str | None:
    return ended_by_slurm(info, job_id=7, stack="cpu-slurm", restarts_seen=restarts_seen)


def test_scontrols_line_is_read_field_by_field() -> None:
    assert parse_job_info(TIMED_OUT) == JobInfo(
        state="TIMEOUT",
        reason="TimeLimit",
        time_limit="00:01:00",
        restarts=0,
        nodes="n[1-2]",
        exit_code="0:15",
        run_time="00:01:28",
    )


def test_a_timed_out_job_says_its_limit_and_which_setting_to_raise() -> None:
    info = parse_job_info(TIMED_OUT)
    assert info is not None
    assert line(info) == (
        "slurm job 7 of stack cpu-slurm ended: TIMEOUT (its time limit, 00:01:00, ran out); "
        "raise slurm.time_limit_min, or run `python -m generator down cpu-slurm`, then "
        "`up cpu-slurm` again"
    )


@pytest.mark.parametrize(
    ("run_time", "time_limit", "ended"),
    [
        ("00:01:00", "00:01:00", True),  # Slurm already refuses new steps
        ("00:00:59", "00:01:00", False),
        ("1-00:00:00", "23:59:59", True),
        ("00:05:00", "UNLIMITED", False),
        ("", "00:01:00", False),  # no RunTime printed: nothing claimed
    ],
)
def test_a_running_job_past_its_limit_has_timed_out(
    run_time: str, time_limit: str, ended: bool
) -> None:
    """Between the limit and slurmctld's periodic check the job still reads RUNNING while its
    steps are refused ("Job/step already completing"): seen on a real cluster, the smoke's
    step failed so, 59 s into a 1-minute job."""
    info = JobInfo(state="RUNNING", reason="None", time_limit=time_limit, run_time=run_time)
    said = line(info)
    if ended:
        assert said is not None
        assert "ended: TIMEOUT (its time limit" in said
    else:
        assert said is None


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ("NODE_FAIL", "ended: NODE_FAIL (a node of it (n[1-2]) failed or stopped answering"),
        ("PREEMPTED", "ended: PREEMPTED (a job of higher priority took its nodes)"),
        ("CANCELLED", "ended: CANCELLED (scancel, by you or an administrator)"),
        ("BOOT_FAIL", "ended: BOOT_FAIL (its nodes failed to boot)"),
        ("DEADLINE", "ended: DEADLINE (its --deadline passed)"),
        ("OUT_OF_MEMORY", "ended: OUT_OF_MEMORY (a step of it ran out of memory)"),
        ("FAILED", "ended: FAILED (its batch step exited, code 1:0)"),
        ("COMPLETED", "ended: COMPLETED (its batch step ended)"),
        ("COMPLETING", "ended: COMPLETING (Slurm is ending it"),
        (GONE, "ended: GONE (Slurm lists it no more: it ended over MinJobAge ago"),
        ("SOMETHING_NEW", "ended: SOMETHING_NEW (reason: Whatever)"),
    ],
)
def test_each_way_slurm_ends_a_job_is_one_line_with_what_to_do(state: str, says: str) -> None:
    info = JobInfo(state=state, reason="Whatever", nodes="n[1-2]", exit_code="1:0")
    text = line(info)
    assert text is not None
    assert text.startswith("slurm job 7 of stack cpu-slurm ")
    assert says in text
    assert "python -m generator down cpu-slurm" in text
    assert "\n" not in text


@pytest.mark.parametrize(("reason", "state"), [("TimeLimit", "TIMEOUT"), ("NodeDown", "NODE_FAIL")])
def test_a_completing_job_is_named_by_what_its_reason_says(reason: str, state: str) -> None:
    text = line(JobInfo(state="COMPLETING", reason=reason))
    assert text is not None
    assert f"ended: {state} (" in text


@pytest.mark.parametrize("state", ["RUNNING", "PENDING", "CONFIGURING", "SUSPENDED"])
def test_a_job_that_holds_its_nodes_has_no_line(state: str) -> None:
    assert line(JobInfo(state=state)) is None


@pytest.mark.parametrize(
    ("info", "seen"),
    [
        (JobInfo(state="REQUEUED"), 0),
        (JobInfo(state="REQUEUE_HOLD", restarts=1), 0),
        (JobInfo(state="PENDING", reason="BeginTime", restarts=1), 0),
        (JobInfo(state="RUNNING", restarts=2), 1),  # requeued and running again since up
    ],
)
def test_a_requeued_job_is_one_line_too(info: JobInfo, seen: int) -> None:
    text = line(info, restarts_seen=seen)
    assert text is not None
    assert text.startswith("slurm job 7 of stack cpu-slurm was requeued by Slurm (")
    assert "the steps it ran are gone" in text


def test_a_restart_before_up_bound_the_stack_is_no_requeue_under_it() -> None:
    assert line(JobInfo(state="RUNNING", restarts=1), restarts_seen=1) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "slurm_load_jobs error: Invalid job id specified",
        "JobId=1 JobState=running",  # not Slurm's spelling
        "JobId=1 JobState=TIMEOUT\x1b[2J",  # an escape sequence in the state
        "JobId=1 JobState=" + "A" * 40,
        "JobId=1 NotJobState=RUNNING",
        "x" * (3 << 20),  # huge, no newline
        ("JobState=" + "R" * 5000 + " ") * 1000,
    ],
)
def test_malformed_or_huge_output_claims_nothing(text: str) -> None:
    assert parse_job_info(text) is None


def test_a_field_slurm_printed_oddly_is_left_empty_not_trusted() -> None:
    text = (
        "JobId=1 JobState=TIMEOUT Reason=$(reboot) TimeLimit=forever Restarts=-1 "
        "NodeList=n1;rm ExitCode=0:15:9 " + "Filler=" + "y" * 20_000 + " Restarts=5"
    )
    info = parse_job_info(text)
    assert info == JobInfo(state="TIMEOUT")
    assert info is not None
    assert "its time limit, ?, ran out" in (line(info) or "")


def test_only_the_first_line_counts() -> None:
    assert parse_job_info("JobId=1 JobState=RUNNING\nJobId=2 JobState=TIMEOUT\n") == JobInfo(
        state="RUNNING"
    )


def test_sacct_gives_the_state_without_who_cancelled_it() -> None:
    text = "8|CANCELLED by 0|01:00:00|n[1-2]|0:15\n8.batch|CANCELLED||n1|0:15\n"
    assert parse_sacct(text, 8) == JobInfo(
        state="CANCELLED", time_limit="01:00:00", nodes="n[1-2]", exit_code="0:15"
    )


@pytest.mark.parametrize(
    "text", ["", "9|TIMEOUT|00:01:00|n1|0:0", "8|TIMEOUT|00:01:00", "8|timeout|x|y|z", "|" * 10**6]
)
def test_sacct_output_without_a_valid_line_of_the_job_claims_nothing(text: str) -> None:
    assert parse_sacct(text, 8) is None
