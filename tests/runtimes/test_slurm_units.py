"""The slurm runtime without a cluster: its spec rules, the job it asks for, the script render
writes, the steps' srun command and how slurmctld's refusals read. The real cluster runs in
tests/integration/test_slurm_stack.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from generator.errors import SpecError, XpydError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes.prometheus import prometheus_url
from generator.render import render_stack
from generator.runtimes.slurm_job import BoundHost, SlurmJob, write_job
from generator.slurm import _refusal, job_request, srun_prefix
from generator.stack import load_spec, parse_spec
from generator.workbench import load_plan
from generator.workflow.runtimes import running_plan
from tests.conftest import ROOT, spec_dict


def slurm_spec(**changes: Any) -> dict[str, Any]:
    hosts = [{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [0, 1]}]
    placement = {"prefill": {"hosts": "a"}, "decode": {"hosts": "b"}}
    data = spec_dict(runtime="slurm", hosts=hosts, placement=placement, router={"host": "b"})
    return data | changes


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t")
    return str(caught.value)


def test_a_slurm_stack_needs_no_addresses_and_plans_host_networking() -> None:
    plan = make_plan(parse_spec(slurm_spec(), source="t"))
    assert plan.network == "host"
    assert plan.slurm is not None
    assert plan.slurm.job_id is None
    assert plan.process is not None  # the steps run the process runtime's Pythons


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"hosts": [{"name": "a", "address": "10.0.0.1"}]}, "hosts[0].address", "known only"),
        (
            {"hosts": [{"name": "a", "docker": {"context": "gpu-a"}}]},
            "hosts[0].docker",
            "uses no Docker engine",
        ),
        ({"process": {"isolation": "container"}}, "process.isolation", "confines each step"),
        (
            {"hosts": [{"name": "a", "gpus": [6, 7]}]},
            "hosts[0].gpus",
            "list them as positions: [0, 1]",
        ),
        (
            {"observe": {"enabled": True, "grafana": True}},
            "observe.grafana",
            "runs Prometheus (from PATH) and no Grafana",
        ),
    ],
)
def test_settings_the_slurm_runtime_cannot_honour_are_refused(
    change: dict[str, Any], field: str, says: str
) -> None:
    data = slurm_spec(**change)
    if "hosts" in change:
        data.pop("placement")
        data.pop("router")
    text = refusal(data)
    assert f"{field}: " in text
    assert says in text


def test_addresses_are_the_bound_jobs_once_slurm_job_id_is_set() -> None:
    hosts = [
        {"name": "a", "address": "10.9.0.1", "gpus": [0, 1]},
        {"name": "b", "address": "10.9.0.2", "gpus": [0, 1]},
    ]
    data = slurm_spec(hosts=hosts, slurm={"job_id": 42})
    plan = make_plan(parse_spec(data, source="t"))
    assert [host.address for host in plan.hosts] == ["10.9.0.1", "10.9.0.2"]


def test_the_slurm_section_is_refused_under_another_runtime() -> None:
    text = refusal(spec_dict(slurm={"partition": "gpu"}))
    assert "slurm: is read by the slurm runtime only (runtime is compose)" in text
    assert "set runtime: slurm" in text


def test_a_compose_stack_of_several_hosts_needs_each_address() -> None:
    hosts = [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}]
    text = refusal(spec_dict(hosts=hosts))
    assert "hosts[0].address: is needed on a stack of several hosts" in text


def test_the_job_asks_for_a_whole_node_per_host_with_its_gpus(workspace: Workspace) -> None:
    data = slurm_spec(slurm={"partition": "gpu", "account": "lab", "time_limit_min": 30})
    request = job_request(make_plan(parse_spec(data, source="t")), Path("out-%j"))
    assert request.sbatch_options() == [
        "--job-name=xpyd-t",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--no-requeue",
        "--exclusive",
        "--mem=0",
        "--time=30",
        "--gpus-per-node=2",
        "--partition=gpu",
        "--account=lab",
        "--output=out-%j",
    ]


def test_render_writes_the_job_script_and_no_process_plans_before_the_job(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = render_stack(make_plan(load_spec(workspace.stack_file("cpu-slurm"))), workspace)
    script = rendered.files[PurePosixPath("compose/cpu-slurm/job.sbatch")]
    assert rendered.processes == ()  # no host has its address yet
    assert "#SBATCH --nodes=2\n" in script
    assert "#SBATCH --exclusive\n" in script
    assert "-m generator up cpu-slurm --runtime slurm --teardown-on-failure" in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


def test_render_writes_each_hosts_process_plan_once_bound(workspace: Workspace) -> None:
    bound = ["slurm.job_id=7", "hosts.0.address=10.9.0.1", "hosts.1.address=10.9.0.2"]
    plan = make_plan(load_spec(workspace.stack_file("cpu-slurm"), bound))
    rendered = render_stack(plan, workspace)
    assert sorted(project.host for project in rendered.processes) == ["host-a", "host-b"]
    router = next(p for p in rendered.processes if p.host == "host-b").service("router")
    assert "http://10.9.0.1:7100" in router.command  # the prefiller, on host-a's node


def test_a_step_shares_its_node_and_sees_its_gpus() -> None:
    step = srun_prefix(7, "n2", name="xpyd-s-b:decode-0", gpus=2)
    assert step[:2] == ["srun", "--jobid=7"]
    assert {"--nodelist=n2", "--overlap", "--mem=0", "--gres=gpu:2"} <= set(step)
    assert "--gres=gpu:0" not in srun_prefix(7, "n2", name="x", gpus=0)


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        (
            "sbatch: error: Batch job submission failed: Requested node configuration is not "
            "available",
            "fewer GPUs per host",
        ),
        ("sbatch: error: invalid partition specified: nosuch", "slurm.partition"),
        ("sbatch: error: Batch job submission failed: Invalid account", "slurm.account"),
        ("sbatch: error: something new", "see Slurm's message"),
    ],
)
def test_slurmctlds_refusals_say_what_to_change(said: str, fix: str) -> None:
    error = _refusal(["sbatch", "--parsable"], said)
    assert error.message.startswith("Slurm refused `sbatch --parsable ...`: sbatch: error:")
    assert fix in error.hint


def test_a_steps_gpus_are_the_plans_choice_among_the_nodes() -> None:
    """slurmstepd sets CUDA_VISIBLE_DEVICES for a step; the plan's is put back inside it."""
    from generator.runtimes.slurm_launcher import _plan_gpus

    assert _plan_gpus({"CUDA_VISIBLE_DEVICES": "1"}) == ["env", "CUDA_VISIBLE_DEVICES=1"]
    assert _plan_gpus({}) == []


def test_a_running_stacks_plan_puts_each_host_on_its_node_from_the_job_record(
    tmp_path: Path,
) -> None:
    """`observe` (or any command that reads a running stack from another shell) finds the
    nodes in the stack's job record, Prometheus at its node's address: the login node is none
    of the job's nodes, so never a loopback."""
    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "stacks" / "cpu-slurm.yaml", tmp_path / "stacks")
    workspace, observed = Workspace(tmp_path), ["observe.enabled=true"]
    plan = load_plan("cpu-slurm", observed, workspace)
    with pytest.raises(XpydError, match="cpu-slurm has no Slurm job on record: it is not up"):
        running_plan(plan, workspace, observed)
    hosts = (
        BoundHost(host="host-a", node="n1", address="10.232.0.11"),
        BoundHost(host="host-b", node="n2", address="10.232.0.12"),
    )
    write_job(tmp_path, "cpu-slurm", SlurmJob(job_id=41, submitted=True, hosts=hosts))
    bound = running_plan(plan, workspace, observed)
    assert bound.slurm is not None
    assert bound.slurm.job_id == 41
    assert [host.address for host in bound.hosts] == ["10.232.0.11", "10.232.0.12"]
    assert bound.observe is not None
    assert prometheus_url(bound) == f"http://10.232.0.11:{bound.observe.prometheus_port}"
    # Nothing to bind where the spec says where each host is.
    shutil.copy(ROOT / "stacks" / "cpu-1p1d.yaml", tmp_path / "stacks")
    process = load_plan("cpu-1p1d", [*observed, "runtime=process"], workspace)
    assert running_plan(process, workspace, observed) is process
