"""The one adapter for Slurm's client commands (sbatch, squeue, scontrol, scancel, srun): a
job asked for, watched and cancelled, its nodes' names and addresses, and the srun prefix
that runs a command as a step on one node of it. Errors are translated here, once: a
refusal by slurmctld becomes an XpydError that says what Slurm said and what to change."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import XpydError
from generator.plan import Plan
from generator.spec import Profile, SlurmSpec

__all__ = [
    "CLIENT_COMMANDS",
    "JobRequest",
    "JobState",
    "cancel",
    "job_name",
    "job_request",
    "job_state",
    "missing_commands",
    "node_addresses",
    "signal_step",
    "srun_prefix",
    "submit",
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


def signal_step(job_id: int, step_name: str, signal_name: str) -> bool:
    """Sends SIG``signal_name`` to the job's running step of that name; whether one was."""
    done = _run(["squeue", "--noheader", "--steps", f"--jobs={job_id}", "--format=%i %j"])
    steps = [line.split() for line in done.stdout[:_MAX_OUTPUT].splitlines()]
    ids = [step[0] for step in steps if len(step) == 2 and step[1] == step_name]
    for step_id in ids:
        _run(["scancel", f"--signal={signal_name}", step_id], check=False)
    return bool(ids)


def srun_prefix(job_id: int, node: str, *, name: str, gpus: int) -> list[str]:
    """``srun`` running a command as a step of the job on ``node``: it shares the node with
    the stack's other steps (--overlap, all its memory and cores: whole nodes are allocated,
    and the plan pins cores itself), and sees the node's GPUs where the job has them."""
    prefix = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1"]
    prefix += ["--overlap", "--mem=0", "--cpu-bind=none", "--quiet", f"--job-name={name}"]
    prefix += [f"--gres=gpu:{gpus}"] if gpus else []
    return prefix
