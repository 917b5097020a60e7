"""The one adapter for Slurm's client commands (sbatch, squeue, scontrol, scancel, srun): a
job asked for, watched and cancelled, its nodes' names and addresses, and the srun prefix
that runs a command as a step on one node of it. Errors are translated here, once: a
refusal by slurmctld becomes an XpydError that says what Slurm said and what to change."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import XpydError
from generator.plan import Plan
from generator.spec import Profile, SlurmSpec

__all__ = [
    "CLIENT_COMMANDS",
    "GONE",
    "JobInfo",
    "JobRequest",
    "JobState",
    "cancel",
    "ended_by_slurm",
    "ended_state",
    "job_info",
    "job_name",
    "job_request",
    "job_state",
    "missing_commands",
    "node_addresses",
    "parse_job_info",
    "parse_sacct",
    "signal_step",
    "srun_prefix",
    "submit",
    "wait_released",
]

CLIENT_COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
_TIMEOUT_S = 60.0
_MAX_OUTPUT = 1 << 20  # squeue of one job, scontrol of one node: small
# slurmctld's refusals, as sbatch prints them, and what to change in the spec.
_FIXES = (
    (
        "Requested node configuration is not available",
        "the partition has no nodes with what the stack asks of each host (GPUs, CPUs, "
        "memory): fewer GPUs per host, fewer hosts, or slurm.partition with bigger nodes",
    ),
    ("Node count specification invalid", "fewer hosts, or a partition with more nodes"),
    ("invalid partition", "set slurm.partition to one `sinfo` lists"),
    ("Invalid account", "set slurm.account to one of yours (`sacctmgr show assoc user=$USER`)"),
    ("Requested time limit is invalid", "lower slurm.time_limit_min to the partition's MaxTime"),
)


@dataclass(frozen=True)
class JobRequest:
    """The allocation a stack asks for: ``nodes`` whole nodes (its hosts that run services)."""

    name: str
    nodes: int
    gpus_per_node: int
    time_limit_min: int
    output: Path  # the job's own output (its batch step's)
    partition: str | None = None
    account: str | None = None

    def sbatch_options(self) -> list[str]:
        options = [f"--job-name={self.name}", f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        # A requeued job starts again from its batch step alone: the stack's steps (engines,
        # router) would be gone behind our back, so Slurm must end it instead.
        options += ["--no-requeue"]
        # Whole nodes: taskset pins the plan's cores and each engine sees every GPU of its
        # node (same-node P/D needs the peer's GPUs for cuda_ipc).
        options += ["--exclusive", "--mem=0", f"--time={self.time_limit_min}"]
        options += [f"--gpus-per-node={self.gpus_per_node}"] if self.gpus_per_node else []
        options += [f"--partition={self.partition}"] if self.partition else []
        options += [f"--account={self.account}"] if self.account else []
        return [*options, f"--output={self.output}"]


def job_name(stack: str) -> str:
    return f"xpyd-{stack}"


def job_request(plan: Plan, output: Path) -> JobRequest:
    """What ``plan`` asks of the cluster: a whole node per host that runs something, with the
    most GPUs any of them lists (the spec's slurm section for the rest)."""
    settings = plan.slurm or SlurmSpec()
    hosts = [host for host in plan.hosts if host.services]
    gpus = max((len(host.gpus) for host in hosts), default=0) if plan.profile is Profile.GPU else 0
    return JobRequest(
        name=job_name(plan.stack),
        nodes=len(hosts),
        gpus_per_node=gpus,
        time_limit_min=settings.time_limit_min,
        output=output,
        partition=settings.partition,
        account=settings.account,
    )


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, COMPLETING, ...
    reason: str  # why it waits (Resources, Priority, ...), or None
    nodes: tuple[str, ...]  # its nodes once it runs
    name: str = ""

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def ended(self) -> bool:
        return self.state not in ("PENDING", "CONFIGURING", "RUNNING", "SUSPENDED")


def missing_commands() -> list[str]:
    return [command for command in CLIENT_COMMANDS if shutil.which(command) is None]


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise XpydError(
            f"{argv[0]} did not answer: {exc}",
            hint="check that slurmctld answers (sinfo) and SLURM_CONF if you set one",
        ) from exc
    if check and done.returncode != 0:
        raise _refusal(argv, done.stderr or done.stdout)
    return done


def _refusal(argv: Sequence[str], said: str) -> XpydError:
    text = " ".join(said.strip().splitlines()[-3:])[:500] or "no message"
    fix = next((fix for known, fix in _FIXES if known.lower() in text.lower()), None)
    return XpydError(
        f"Slurm refused `{' '.join(argv[:2])} ...`: {text}",
        hint=fix or "see Slurm's message above (sinfo shows the partitions and their nodes)",
    )


def submit(request: JobRequest, *, hold_command: str, test_only: bool = False) -> int | str:
    """The job's id (``test_only``: what slurmctld says of it, without submitting)."""
    argv = ["sbatch", "--parsable", *request.sbatch_options()]
    argv += ["--test-only"] if test_only else []
    done = _run([*argv, f"--wrap={hold_command}"])
    if test_only:
        return (done.stderr or done.stdout).strip()  # "sbatch: Job N to start at ..."
    first = done.stdout.strip().split(";")[0]
    if not first.isdigit():
        raise XpydError(f"sbatch printed no job id: {done.stdout.strip()[:200]!r}")
    return int(first)


def job_state(job_id: int) -> JobState | None:
    """None: Slurm no longer lists the job (it ended a while ago)."""
    done = _run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%r|%N|%j"], check=False)
    line = done.stdout[:_MAX_OUTPUT].strip().splitlines()
    if done.returncode != 0 or not line:
        return None
    state, reason, nodelist, name = [*line[0].split("|"), "", "", ""][:4]
    nodes = tuple(_hostnames(nodelist)) if nodelist.strip() else ()
    return JobState(state.strip(), reason.strip(), nodes, name.strip())


def _hostnames(nodelist: str) -> list[str]:
    done = _run(["scontrol", "show", "hostnames", nodelist])
    return [name for name in done.stdout[:_MAX_OUTPUT].split() if name]


_NODE_ADDR = re.compile(r"\bNodeAddr=(\S+)")


def node_addresses(nodes: Sequence[str]) -> dict[str, str]:
    """Each node's address, as slurmctld knows it (NodeAddr)."""
    found = {}
    for node in nodes:
        done = _run(["scontrol", "--oneliner", "show", "node", node])
        match = _NODE_ADDR.search(done.stdout[:_MAX_OUTPUT])
        found[node] = match.group(1) if match else node  # no NodeAddr: its name resolves
    return found


def cancel(job_id: int) -> None:
    _run(["scancel", str(job_id)], check=False)  # gone already: nothing to cancel


def wait_released(job_id: int, *, within_s: float) -> bool:
    """Until squeue lists the job no more (COMPLETING: its nodes still clean up), at most
    ``within_s``; whether it went. A Slurm that does not answer says nothing: True."""
    deadline = time.monotonic() + within_s
    while True:
        done = _run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%i"], check=False)
        if done.returncode != 0 or not done.stdout[:_MAX_OUTPUT].strip():
            return True  # "Invalid job id specified": slurmctld lists it no more
        if time.monotonic() >= deadline:
            return False
        time.sleep(_SETTLE_POLL_S)


def signal_step(job_id: int, step_name: str, signal_name: str) -> bool:
    """Sends SIG``signal_name`` to the job's running step of that name; whether one was."""
    done = _run(
        ["squeue", "--noheader", "--steps", f"--jobs={job_id}", "--format=%i %j"], check=False
    )  # a job slurmctld no longer lists ("Invalid job id specified") has no steps
    listed = done.stdout[:_MAX_OUTPUT] if done.returncode == 0 else ""
    steps = [line.split() for line in listed.splitlines()]
    ids = [step[0] for step in steps if len(step) == 2 and step[1] == step_name]
    for step_id in ids:
        _run(["scancel", f"--signal={signal_name}", step_id], check=False)
    return bool(ids)


# --- jobs Slurm ended ------------------------------------------------------------------------
# squeue lists no ended job (not even one named with --jobs); slurmctld keeps it for MinJobAge
# (300 s by default) in `scontrol show job`, and sacct has it longer where accounting is stored
# (Slurm 22.05 without slurmdbd: "Slurm accounting storage is disabled").

GONE = "GONE"  # our name, not Slurm's: no client lists the job any more
_ALIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "RESIZING", "SIGNALING",
                    "STOPPED", "STAGE_OUT"})  # fmt: skip
_REQUEUED = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
# COMPLETING hides the state the job ends in while its nodes clean up; its Reason tells some.
_COMPLETING_AS = {"TimeLimit": "TIMEOUT", "NodeDown": "NODE_FAIL"}
_SETTLE_POLL_S = 1.0
_MAX_LINE = 16_384  # one job's `scontrol --oneliner` line is ~1.5 KB
_FIELDS = {
    "JobState": re.compile(r"[A-Z_]{1,32}"),
    "Reason": re.compile(r"[A-Za-z0-9_(),.:/@-]{1,128}"),
    "TimeLimit": re.compile(r"UNLIMITED|Partition_Limit|(\d{1,5}-)?\d{1,2}:\d{2}:\d{2}"),
    "RunTime": re.compile(r"(\d{1,5}-)?\d{1,2}:\d{2}:\d{2}"),
    "Restarts": re.compile(r"\d{1,6}"),
    "NodeList": re.compile(r"[A-Za-z0-9_.,\[\]-]{1,1024}"),
    "ExitCode": re.compile(r"\d{1,3}:\d{1,3}"),
}
_FIELD = re.compile(r"(?:^|\s)(" + "|".join(_FIELDS) + r")=(\S{0,1100})")
_GENERIC_FIX = "run `python -m generator down {stack}`, then `up {stack}` again"
# What ended the job, and what to do: Slurm's state names (squeue(1), JOB STATE CODES).
_ENDINGS: Mapping[str, tuple[str, str]] = {
    "TIMEOUT": ("its time limit, {limit}, ran out",
                "raise slurm.time_limit_min, or " + _GENERIC_FIX),
    "NODE_FAIL": ("a node of it ({nodes}) failed or stopped answering slurmctld",
                  _GENERIC_FIX + " (`sinfo -R` says why a node is down)"),
    "PREEMPTED": ("a job of higher priority took its nodes",
                  _GENERIC_FIX + ", in a partition or QOS that does not preempt it"),
    "CANCELLED": ("scancel, by you or an administrator", _GENERIC_FIX),
    "BOOT_FAIL": ("its nodes failed to boot", _GENERIC_FIX + " (`sinfo -R`)"),
    "DEADLINE": ("its --deadline passed", _GENERIC_FIX),
    "OUT_OF_MEMORY": ("a step of it ran out of memory", _GENERIC_FIX),
    "FAILED": ("its batch step exited, code {exit_code}", "see the job's output; " + _GENERIC_FIX),
    "COMPLETED": ("its batch step ended", _GENERIC_FIX),
    "COMPLETING": ("Slurm is ending it (scancel, or its batch step ended)", _GENERIC_FIX),
    GONE: ("Slurm lists it no more: it ended over MinJobAge ago, and no accounting here "
           "recorded how", _GENERIC_FIX),
}  # fmt: skip


@dataclass(frozen=True)
class JobInfo:
    """What slurmctld (`scontrol show job`) or accounting (`sacct`) says of one job, each field
    validated ("" where Slurm printed none or something unexpected)."""

    state: str  # JobState: RUNNING, TIMEOUT, CANCELLED, ...; GONE where no client lists it
    reason: str = ""  # Reason: TimeLimit, NodeDown, None, ...
    time_limit: str = ""  # TimeLimit as Slurm prints it: 00:30:00, 1-00:00:00, UNLIMITED
    restarts: int = 0  # Restarts: how often Slurm requeued it
    nodes: str = ""  # NodeList, compressed (n[1-2])
    exit_code: str = ""  # ExitCode of its batch step, code:signal
    run_time: str = ""  # RunTime, as TimeLimit is printed


def parse_job_info(text: str) -> JobInfo | None:
    """``scontrol --oneliner show job ID``'s first line; None where it names no valid state."""
    line = text[:_MAX_OUTPUT].lstrip().split("\n", 1)[0][:_MAX_LINE]
    found: dict[str, str] = {}
    for match in _FIELD.finditer(line):
        key, value = match.groups()
        if key not in found:
            found[key] = value if _FIELDS[key].fullmatch(value) else ""
    return _info(found.get("JobState", ""), found)


def parse_sacct(text: str, job_id: int) -> JobInfo | None:
    """``sacct -X -n -P -o JobID,State,Timelimit,NodeList,ExitCode``'s line of ``job_id``
    (its State reads "CANCELLED by 1000": the first word)."""
    for line in text[:_MAX_OUTPUT].splitlines()[:64]:
        parts = line[:_MAX_LINE].split("|")
        if len(parts) == 5 and parts[0] == str(job_id):
            state = (parts[1].split() or [""])[0]
            fields = dict(zip(("TimeLimit", "NodeList", "ExitCode"), parts[2:], strict=True))
            valid = {k: v for k, v in fields.items() if _FIELDS[k].fullmatch(v)}
            return _info(state, valid)
    return None


def _info(state: str, found: Mapping[str, str]) -> JobInfo | None:
    if not _FIELDS["JobState"].fullmatch(state):
        return None
    return JobInfo(
        state=state,
        reason=found.get("Reason", ""),
        time_limit=found.get("TimeLimit", ""),
        restarts=int(found.get("Restarts") or 0),
        nodes=found.get("NodeList", ""),  # "(null)" before it runs: not a valid list
        exit_code=found.get("ExitCode", ""),
        run_time=found.get("RunTime", ""),
    )


def job_info(job_id: int, *, settle_s: float = 0.0) -> JobInfo | None:
    """The job as slurmctld knows it, else as accounting does, else GONE; None where Slurm did
    not answer (slurmctld down, a timeout): nothing is known, so nothing is claimed. With
    ``settle_s``, a job COMPLETING for a reason its state hides (scancel: Reason=None while
    its nodes clean up, KillWait) is asked again until it shows how it ended, that long."""
    deadline = time.monotonic() + settle_s
    info = _job_info(job_id)
    while info and info.state == "COMPLETING" and info.reason not in _COMPLETING_AS:
        if time.monotonic() >= deadline:
            break
        time.sleep(_SETTLE_POLL_S)
        info = _job_info(job_id)
    return info


def _job_info(job_id: int) -> JobInfo | None:
    done = _run(["scontrol", "--oneliner", "show", "job", str(job_id)], check=False)
    if done.returncode == 0:
        return parse_job_info(done.stdout)
    if "invalid job id" not in done.stderr[:_MAX_LINE].lower():
        return None
    return _accounted(job_id) or JobInfo(state=GONE)


def _accounted(job_id: int) -> JobInfo | None:
    if shutil.which("sacct") is None:
        return None
    fields = "--format=JobID,State,Timelimit,NodeList,ExitCode"
    done = _run(["sacct", f"--jobs={job_id}", "-X", "-n", "-P", fields], check=False)
    return parse_sacct(done.stdout, job_id) if done.returncode == 0 else None


def ended_state(info: JobInfo, *, restarts_seen: int = 0) -> str | None:
    """The state Slurm ended the job in (REQUEUED where it requeued it: more restarts than
    ``restarts_seen``, its count when `up` bound the stack to it); None while it holds its
    nodes."""
    if info.state in _REQUEUED or (info.state in _ALIVE and info.restarts > restarts_seen):
        return "REQUEUED"
    if info.state == "RUNNING" and _limit_reached(info):
        # Slurm refuses new steps once the limit is reached ("Job/step already completing"),
        # seconds before its periodic check moves the job to TIMEOUT.
        return "TIMEOUT"
    if info.state in _ALIVE:
        return None
    if info.state == "COMPLETING":
        return _COMPLETING_AS.get(info.reason, info.state)
    return info.state


def _limit_reached(info: JobInfo) -> bool:
    limit, ran = _duration_s(info.time_limit), _duration_s(info.run_time)
    return limit is not None and ran is not None and ran >= limit


def _duration_s(text: str) -> int | None:
    """Seconds of a Slurm duration, [D-]HH:MM:SS (None: UNLIMITED, none, or not one)."""
    match = re.fullmatch(r"(?:(\d{1,5})-)?(\d{1,2}):(\d{2}):(\d{2})", text)
    if match is None:
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def ended_by_slurm(info: JobInfo, *, job_id: int, stack: str, restarts_seen: int = 0) -> str | None:
    """One line saying that Slurm ended (or requeued) the stack's job, how, and what to do;
    None while the job still holds its nodes."""
    state = ended_state(info, restarts_seen=restarts_seen)
    job = f"slurm job {job_id} of stack {stack}"
    fix = _GENERIC_FIX.format(stack=stack)
    if state is None:
        return None
    if state == "REQUEUED":
        return (f"{job} was requeued by Slurm ({info.state}, restart {info.restarts}): the "
                f"steps it ran are gone, a requeued job starts without them; {fix}")  # fmt: skip
    why, what_to_do = _ENDINGS.get(state, ("reason: {reason}", _GENERIC_FIX))
    values = {
        "limit": info.time_limit or "?",
        "nodes": info.nodes or "?",
        "stack": stack,
        "exit_code": info.exit_code or "?",
        "reason": info.reason or "none given",
    }
    return f"{job} ended: {state} ({why.format(**values)}); {what_to_do.format(**values)}"


def srun_prefix(job_id: int, node: str, *, name: str, gpus: int) -> list[str]:
    """``srun`` running a command as a step of the job on ``node``: it shares the node with
    the stack's other steps (--overlap, all its memory and cores: whole nodes are allocated,
    and the plan pins cores itself), and sees the node's GPUs where the job has them."""
    prefix = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1"]
    prefix += ["--overlap", "--mem=0", "--cpu-bind=none", "--quiet", f"--job-name={name}"]
    prefix += [f"--gres=gpu:{gpus}"] if gpus else []
    return prefix
