"""The Slurm runtime's driver. One allocation for the stack: the job `up` runs inside (an sbatch
script, SLURM_JOB_ID), the job the spec names (slurm.job_id: an salloc of yours), or one `up`
submits (whole nodes, one per host that runs something; its batch step only holds the
allocation). Once it runs, each host is bound to a node of it, in order, and the plan is made
again with the nodes' addresses; every service then runs as a job step on its node (srun),
from the process runtime's plan and Pythons (on a filesystem every node sees), supervised and
tracked as the process runtime does. `down` ends the steps, then cancels the job it submitted.

Why one allocation of alike nodes rather than a heterogeneous job: the hosts of a P/D stack ask
the same of each node (its GPUs, its cores), and steps can then go to any node of the job; a
heterogeneous job (a component per host) would only be needed where hosts differ."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from generator.errors import XpydError
from generator.owned import owned_dir
from generator.paths import Workspace
from generator.plan import ModelPlan, Plan
from generator.render import RenderedStack
from generator.runtimes import ServiceRuntime
from generator.runtimes.process import Images, ProcessStack, Pythons, rendered_process_stack
from generator.runtimes.pyxis import PyxisContainer
from generator.runtimes.slurm_job import (
    SLURM_DIR,
    BoundHost,
    SlurmJob,
    read_job,
    remove_job,
    write_job,
)
from generator.runtimes.slurm_launcher import SrunLauncher
from generator.slurm import (
    JobInfo,
    JobState,
    cancel,
    ended_by_slurm,
    ended_state,
    job_info,
    job_name,
    job_request,
    job_state,
    missing_commands,
    node_addresses,
    submit,
    wait_released,
)
from generator.spec import Isolation, Profile, Runtime, SlurmContainerSpec, SlurmSpec
from generator.workflow.builder import MINUTE, GraphBuilder
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.runtimes.process import plan_pythons, settings_pythons
from generator.workflow.steps.pythons import check_pythons
from generator.workflow.task import Task

if TYPE_CHECKING:
    from generator.workbench import RenderedHost

__all__ = ["DRIVER", "HOLD_COMMAND"]

HOLD_COMMAND = "exec sleep infinity"  # the batch step of a job up submits: it holds the nodes
_POLL_S = 1.0
_SAY_EVERY_S = 15.0
_SETTLE_S = 40.0  # a job scancel ended shows CANCELLED once its nodes cleaned up (KillWait: 30 s)


class _SlurmDriver:
    kind = Runtime.SLURM

    def require(self) -> None:
        missing = missing_commands()
        if missing:
            raise XpydError(
                f"the slurm runtime runs Slurm's client commands; {', '.join(missing)} not on PATH",
                hint="run it on a login node of the cluster (module load slurm, where it is one)",
            )

    def place(self, plan: Plan, workspace: Workspace, reporter: Reporter) -> list[str]:
        hosts = [host.name for host in plan.hosts if host.services]
        settings = plan.slurm or SlurmSpec()
        job_id, submitted = _allocation(plan, workspace, reporter)
        state = _wait_running(job_id, settings.wait_s, reporter, cancel_on_timeout=submitted)
        if len(state.nodes) < len(hosts):
            raise XpydError(
                f"Slurm job {job_id} runs on {len(state.nodes)} node(s), and {plan.stack} has "
                f"{len(hosts)} hosts that run services",
                hint="run it in a job with a node per host (or leave slurm.job_id out)",
            )
        addresses = node_addresses(state.nodes[: len(hosts)])
        bound = tuple(
            BoundHost(host=host, node=node, address=addresses[node])
            for host, node in zip(hosts, state.nodes, strict=False)
        )
        seen = job_info(job_id)  # its restarts now: more later, Slurm requeued it under us
        restarts = seen.restarts if seen else 0
        job = SlurmJob(job_id=job_id, submitted=submitted, hosts=bound, restarts=restarts)
        write_job(workspace.root, plan.stack, job)
        where = ", ".join(f"{b.host} on {b.node} ({b.address})" for b in bound)
        reporter.event(EventLevel.INFO, f"Slurm job {job_id}: {where}")
        return _bound_overrides(plan, job)

    def placed(self, plan: Plan, workspace: Workspace) -> list[str]:
        job = read_job(workspace.root, plan.stack)
        if job is None:
            raise XpydError(
                f"{plan.stack} has no Slurm job on record: it is not up",
                hint=f"python -m generator up {plan.stack}",
            )
        return _bound_overrides(plan, job)

    def release(self, stack: str, workspace: Workspace) -> str | None:
        """Cancels the job up submitted, unless Slurm ended it already (then says how); a job
        of the user's is left running. The stack's record of it goes either way."""
        job = read_job(workspace.root, stack)
        if job is None:
            return None
        info = job_info(job.job_id, settle_s=_SETTLE_S)
        ended = ended_state(info, restarts_seen=job.restarts) if info else None
        if ended is not None:
            found = f"Slurm job {job.job_id} had ended already ({_how(ended, info)})"
            if job.submitted and info is not None and info.state == "RUNNING":
                cancel(job.job_id)  # its limit ran out, and Slurm has not ended it yet
        elif job.submitted:
            cancel(job.job_id)
            found = f"cancelled Slurm job {job.job_id}"
        else:
            found = f"left Slurm job {job.job_id} running (yours: scancel it when done)"
        # Until Slurm lists it no more, its nodes still clean up and hold the next job back.
        if job.submitted and not wait_released(job.job_id, within_s=_SETTLE_S):
            found += f" (Slurm still lists it after {_SETTLE_S:.0f} s: its nodes clean up)"
        remove_job(workspace.root, stack)
        return f"{found}; its record removed"

    def allocation_ended(self, stack: str, workspace: Workspace) -> str | None:
        job = read_job(workspace.root, stack)
        info = job_info(job.job_id, settle_s=_SETTLE_S) if job else None
        if job is None or info is None:
            return None  # no job, or Slurm did not answer: nothing known, nothing claimed
        return ended_by_slurm(info, job_id=job.job_id, stack=stack, restarts_seen=job.restarts)

    def host_stacks(
        self, plan: Plan, rendered: RenderedStack, workspace: Workspace
    ) -> dict[str, HostStack]:
        job = _recorded_job(plan.stack, workspace, plan.slurm) or _job_of_plan(plan, workspace)
        services = {host.host: host for host in rendered.deployment.hosts}
        container = plan.slurm.container if plan.slurm else None
        pythons = _image_pythons(container) if container else plan_pythons(plan, workspace)
        images = _images(container)
        pyxis = _pyxis(plan.model, container, workspace)
        stacks: dict[str, HostStack] = {}
        for process in rendered.processes:
            host = plan.host(process.host)
            gpus = _gpus(plan, host.gpus)
            launcher = _launcher(job, host.name, process.name, gpus, pyxis)
            runtime = ProcessStack(
                process, workspace.root, pythons, launcher=launcher, images=images
            )
            stacks[host.name] = HostStack(host, services[host.name], runtime)
        return stacks

    def preflight(self, context: RunContext) -> str:
        job = _bound_job(context.plan.stack, context.workspace, context.plan.slurm)
        if ended := self.allocation_ended(context.plan.stack, context.workspace):
            raise XpydError(ended)
        state = job_state(job.job_id)
        if state is None or not state.running:
            raise XpydError(
                f"Slurm job {job.job_id} is not running ({state.state if state else 'gone'})",
                hint=f"python -m generator up {context.plan.stack} --runtime slurm submits anew",
            )
        nodes = ", ".join(f"{b.host} on {b.node}" for b in job.hosts)
        return f"Slurm job {job.job_id} running: {nodes}"

    def prepare(self, g: GraphBuilder, after: Task) -> tuple[Task, Task]:
        ready = g.add(
            "prepare-env",
            check_pythons,
            "the Pythons the steps run with (on a filesystem every node sees), made where "
            "missing, answer; the synthetic model, made once",
            30 * MINUTE,
            after,
        )
        return ready, ready

    def deliver(self, g: GraphBuilder, host: str, after: list[Task]) -> Task | None:
        return None  # every node sees the workspace

    def rendered_runtime(self, rendered: RenderedHost, workspace: Workspace) -> ServiceRuntime:
        if rendered.process_file is None:
            raise XpydError(
                f"{rendered.compose_file.parent} has no processes.yaml",
                hint="up the stack with --runtime slurm again",
            )
        job = _bound_job(rendered.stack, workspace, None)
        container = rendered.slurm.container if rendered.slurm else None
        # From another shell only checks, signals and stops run: none needs the node's GPUs,
        # nor the model (the checks run in the images, which the checkout's mount serves).
        pyxis = PyxisContainer.for_checkout(workspace.root, ()) if container else None
        launcher = _launcher(job, rendered.host, rendered.project, 0, pyxis)
        if container:
            pythons = _image_pythons(container)
        else:
            pythons = settings_pythons(rendered.process, rendered.profile, workspace)
        return rendered_process_stack(
            rendered.process_file,
            workspace.root,
            pythons,
            Isolation.PLAIN,
            launcher=launcher,
            images=_images(container),
        )


def _bound_overrides(plan: Plan, job: SlurmJob) -> list[str]:
    """The spec overrides that put each host on its node of ``job``."""
    index = {host.name: number for number, host in enumerate(plan.hosts)}
    addresses = [f"hosts.{index[b.host]}.address={b.address}" for b in job.hosts]
    return [f"slurm.job_id={job.job_id}", *addresses]


def _launcher(
    job: SlurmJob, host: str, project: str, gpus: int, pyxis: PyxisContainer | None
) -> SrunLauncher:
    return SrunLauncher(job.job_id, job.node_of(host).node, gpus, project, container=pyxis)


def _image_pythons(container: SlurmContainerSpec) -> Pythons:
    """The images' Pythons: a name on the image's PATH, or a path in it."""
    return Pythons(engine=Path(container.engine_python), router=Path(container.router_python))


def _images(container: SlurmContainerSpec | None) -> Images | None:
    return Images(container.engine_image, container.router_image) if container else None


def _pyxis(
    model: ModelPlan, container: SlurmContainerSpec | None, workspace: Workspace
) -> PyxisContainer | None:
    """The checkout, a host-path model (read-only, where the engines' command names it) and
    the spec's own mounts."""
    if container is None:
        return None
    mounts = [f"{model.host_path}:{model.host_path}:ro"] if model.host_path else []
    return PyxisContainer.for_checkout(workspace.root, (*mounts, *container.mounts))


def _gpus(plan: Plan, host_gpus: tuple[int, ...]) -> int:
    return len(host_gpus) if plan.profile is Profile.GPU else 0


def _recorded_job(stack: str, workspace: Workspace, settings: SlurmSpec | None) -> SlurmJob | None:
    job = read_job(workspace.root, stack)
    wanted = settings.job_id if settings else None
    return None if job is None or (wanted is not None and job.job_id != wanted) else job


def _bound_job(stack: str, workspace: Workspace, settings: SlurmSpec | None) -> SlurmJob:
    job = _recorded_job(stack, workspace, settings)
    wanted = settings.job_id if settings else None
    if job is None:
        raise XpydError(
            f"{stack} is bound to no Slurm job here" + (f" (asked: {wanted})" if wanted else ""),
            hint=f"python -m generator up {stack} --runtime slurm (it binds the hosts to a job)",
        )
    return job


def _job_of_plan(plan: Plan, workspace: Workspace) -> SlurmJob:
    """The binding a plan made with a job's nodes already carries (a bench arm derived from a
    bound spec): each host is the job's node at its address. Recorded as the user's job: the
    stack it was bound for ends it."""
    settings = plan.slurm or SlurmSpec()
    state = job_state(settings.job_id) if settings.job_id is not None else None
    if settings.job_id is None or state is None or not state.running:
        raise XpydError(
            f"{plan.stack} is bound to no running Slurm job",
            hint=f"python -m generator up {plan.stack} --runtime slurm (it binds the hosts)",
        )
    node_at = {address: node for node, address in node_addresses(state.nodes).items()}
    bound = tuple(
        BoundHost(host=host.name, node=node_at[host.address], address=host.address)
        for host in plan.hosts
        if host.services and host.address in node_at
    )
    job = SlurmJob(job_id=settings.job_id, submitted=False, hosts=bound)
    write_job(workspace.root, plan.stack, job)
    return job


def _allocation(plan: Plan, workspace: Workspace, reporter: Reporter) -> tuple[int, bool]:
    """(job id, whether up submitted it): the spec's job, this stack's running one, the job
    up runs inside, else a new one."""
    settings = plan.slurm or SlurmSpec()
    if settings.job_id is not None:
        return settings.job_id, _ours(workspace, plan.stack, settings.job_id)
    known = read_job(workspace.root, plan.stack)
    if known is not None and (state := job_state(known.job_id)) and not state.ended:
        return known.job_id, known.submitted  # a second up of a running stack
    inside = os.environ.get("SLURM_JOB_ID", "")
    if inside.isdigit():
        # The stack's own job script (job.sbatch: named for the stack) is ours to end; any
        # other job up runs in is the user's.
        state = job_state(int(inside))
        return int(inside), state is not None and state.name == job_name(plan.stack)
    request = job_request(plan, workspace.root / SLURM_DIR / f"{plan.stack}-%j.out")
    owned_dir(workspace.root, SLURM_DIR)  # the job's output goes there
    job_id = submit(request, hold_command=HOLD_COMMAND)
    assert isinstance(job_id, int)
    reporter.event(EventLevel.INFO, f"submitted Slurm job {job_id} ({request.nodes} node(s))")
    return job_id, True


def _ours(workspace: Workspace, stack: str, job_id: int) -> bool:
    known = read_job(workspace.root, stack)
    return known is not None and known.job_id == job_id and known.submitted


def _wait_running(
    job_id: int, wait_s: int, reporter: Reporter, *, cancel_on_timeout: bool
) -> JobState:
    """Until the job runs (saying what squeue says now and then), bounded by ``wait_s``."""
    started = last = time.monotonic()
    while True:
        state = job_state(job_id)
        if state is not None and state.running and state.nodes:
            return state
        if state is None or state.ended:
            info = job_info(job_id)  # squeue lists no ended job; scontrol says how it ended
            how = _how(ended_state(info) or info.state, info) if info else "gone from squeue"
            raise XpydError(
                f"Slurm job {job_id} is not running: it ended ({how})",
                hint=f"see its output under {SLURM_DIR}/ and `scontrol show job {job_id}`",
            )
        waited = time.monotonic() - started
        if waited > wait_s:
            if cancel_on_timeout:
                cancel(job_id)
            raise XpydError(
                f"Slurm job {job_id} did not start in {wait_s} s: {state.state} ({state.reason})",
                hint="raise slurm.wait_s, ask for fewer or smaller nodes, or another partition",
            )
        if time.monotonic() - last >= _SAY_EVERY_S:
            last = time.monotonic()
            reporter.event(
                EventLevel.INFO, f"Slurm job {job_id}: {state.state} ({state.reason}), "
                f"{waited:.0f} s of {wait_s} s",
            )  # fmt: skip
        time.sleep(_POLL_S)


def _how(state: str, info: JobInfo | None) -> str:
    reason = info.reason if info and info.reason not in ("", "None") else ""
    return f"{state}, reason {reason}" if reason else state


DRIVER = _SlurmDriver()
