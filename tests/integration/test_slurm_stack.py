"""The slurm runtime for real, on a real Slurm cluster (tests/integration/slurm_cluster.py: a
slurmctld and two slurmd, each node in a network namespace of its own): cpu-slurm with its
prefiller's TP=2 spread over both nodes (`prefill.nodes=2`: the leader on host-a's node, a
headless follower on host-b's beside the decoder and vllm-router, each node with its own
`lmcache server`), every service a job step; `up` submits the job, binds the hosts and passes
its verdict with the KV crossing nodes; a fault drill kills the follower's step command and
the whole prefiller starts again (its nodes watch each other's supervisor pages); status and
logs from another shell; bench against the colocated baseline in the same job; and nothing
left after: no job, no step, no process. Then every shipped GPU stack's job, judged by a real
slurmctld with GPU gres.

Commands run as a login node's would: in the controller's network namespace, with SLURM_CONF.
The two nodes share this machine's kernel, so UCX moves KV between them with cma (cross-memory
attach) where two real nodes would use TCP or RDMA: the verdict reports the transport it saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import ROOT, workspace_copy
from tests.integration.slurm_cluster import SlurmCluster
from tests.integration.slurm_files import NodeResources
from tests.integration.slurm_stacks import assert_nothing_left, slurm_cli
from tests.integration.slurm_teardown import NETNS_DIR

pytestmark = [pytest.mark.slurm, pytest.mark.stack]
STACK = "cpu-slurm"
RUN = f"slurm-{int(time.time())}"
# Observed and traced: Prometheus and our OTLP receiver steps on host-a's node, scraping and
# receiving from both nodes, asked from the login node.
OBSERVED = ["--set", "observe.enabled=true", "--set", "observe.traces=true"]
# One engine over two nodes (docs/slurm.md), on every command that plans the stack.
TWO_NODES = ["--set", "prefill.nodes=2", "--set", "prefill.tp=2", "--set", "cpu.share=true"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """Two nodes of 2 cores, each declaring 16 GB: a node's steps share its job's memory
    cgroup (the session's 4 GB nodes hold one engine and its LMCache server, not a bench
    beside them)."""
    roomy = NodeResources(cpus=2, memory_mb=16_000, gpus=0)
    with SlurmCluster(nodes=(roomy, roomy)) as made:
        yield made


@pytest.fixture(scope="module")
def copy(scratch_root: Path) -> Path:
    return workspace_copy(scratch_root / "slurm")


@pytest.fixture(scope="module")
def drilled(
    cluster: SlurmCluster, copy: Path, cpu_pythons: list[str]
) -> Iterator[subprocess.CompletedProcess[str]]:
    """The stack up in a job of its own (the drill brings it up first), then the prefiller's
    follower's command killed 8 s into the load."""
    fault = ["--fault", "kill:prefill-0-node1@8", "--fault-duration-s", "60", *OBSERVED]
    fault += TWO_NODES
    result = slurm_cli(cluster, "drill", STACK, *cpu_pythons, *fault, "--run-id", RUN, root=copy)
    yield result
    slurm_cli(cluster, "down", STACK, root=copy)


def _record(copy: Path, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((copy / "runs" / run_id / "up/run.json").read_text())
    return data


def test_up_binds_each_host_to_a_node_and_passes_with_kv_crossing_nodes(
    cluster: SlurmCluster, copy: Path, drilled: subprocess.CompletedProcess[str]
) -> None:
    assert drilled.returncode == 0, drilled.stdout[-3000:] + drilled.stderr[-4000:]
    assert "submitted Slurm job" in drilled.stderr
    record = _record(copy, RUN)
    assert record["tasks"]["preflight"]["summary"].startswith("Slurm job ")
    assert "build-engines" not in record["tasks"]  # nothing is built: the steps run the Pythons
    rows = {row["check"]: row for row in record["results"]["smoke"]["rows"]}
    assert int(rows["prompt tokens from prefill (decode: external_kv_transfer)"]["observed"]) > 0
    assert rows["prompt tokens computed on decode (local_compute)"]["observed"] == "0"
    n1, n2 = (node.address for node in cluster.nodes)
    stamp = rows["router stamps prefill/decode pair"]["observed"]
    assert n1 in stamp  # the pair crossed the two nodes
    assert n2 in stamp
    plan = json.loads((copy / "compose" / STACK / "plan.json").read_text())
    assert {host["name"]: host["address"] for host in plan["hosts"]} == {
        "host-a": n1,
        "host-b": n2,
    }
    (leader,), (follower,) = plan["prefill"], plan["followers"]
    assert (leader["address"], follower["address"]) == (n1, n2)  # one TP rank on each node


def test_a_killed_follower_step_brings_the_whole_prefiller_back(
    copy: Path, drilled: subprocess.CompletedProcess[str]
) -> None:
    """No node notices its peer's death while idle (docs/facts.md): the leader ends once it
    sees the follower's supervisor page give a new start, or sooner when a request of the load
    meets the dead rank and vLLM ends it (both seen in CI); the follower, seeing the leader's
    new start, once more; both come back and the verdict passes again. (The watch alone:
    tests/test_supervise_page.py.)"""
    assert drilled.returncode == 0, drilled.stdout[-3000:]
    fault = json.loads((copy / "runs" / RUN / "fault.json").read_text())
    assert "sent SIGKILL to prefill-0-node1" in fault["injected"]
    assert fault["summary"]["restarts"] >= 1
    assert fault["verdict_after"] is True
    plan = json.loads((copy / "compose" / STACK / "plan.json").read_text())
    follower = plan["followers"][0]
    page = f"http://{follower['address']}:{follower['node_page']}/metrics"
    said = {
        path.name: [line for line in path.read_text().splitlines() if line.startswith("xpyd: ")]
        for path in sorted((copy / ".cache/process").glob("*/logs/prefill-0*.log"))
    }
    leader = said["prefill-0.log"]
    ended = (f"prefill-0 saw its peer at {page}", "prefill-0 exited with")
    assert any(why in line for line in leader for why in ended), said
    assert any("prefill-0 restarting (1 of" in line for line in leader), said


def test_a_link_cut_between_the_nodes_heals_once_the_cut_ends(
    cluster: SlurmCluster,
    copy: Path,
    cpu_pythons: list[str],
    drilled: subprocess.CompletedProcess[str],
) -> None:
    """cut:host-a: each node drops what the other sends (nft, run as a step of the job on
    each node), so host-b's router loses the prefiller and the KV path for 10 s; once the
    rules are gone the stack serves again and passes its verdict, and no rule is left."""
    assert drilled.returncode == 0, drilled.stdout[-3000:]
    run = f"{RUN}-cut"
    fault = ["--fault", "cut:host-a@8+10", "--fault-duration-s", "30", *OBSERVED, *TWO_NODES]
    result = slurm_cli(cluster, "drill", STACK, *cpu_pythons, *fault, "--run-id", run, root=copy)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads((copy / "runs" / run / "fault.json").read_text())
    n1, n2 = (node.address for node in cluster.nodes)
    assert f"host-a drops packets from {n2}" in record["injected"]
    assert f"host-b drops packets from {n1}" in record["injected"]
    assert record["summary"]["failed"] > 0  # the cut was felt
    assert record["verdict_after"] is True
    for node in cluster.nodes:  # the cut's table is gone from every node
        tables = subprocess.run(
            ["nsenter", f"--net={NETNS_DIR / node.netns}", "nft", "list", "tables"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert "xpyd_link_cut" not in tables.stdout


def test_status_and_logs_from_another_shell(
    cluster: SlurmCluster, copy: Path, drilled: subprocess.CompletedProcess[str]
) -> None:
    status = slurm_cli(cluster, "status", STACK, root=copy)
    assert status.returncode == 0, status.stderr
    for service in ("prefill-0", "decode-0", "router"):
        assert service in status.stdout
    assert "healthy" in status.stdout
    logs = slurm_cli(cluster, "logs", STACK, "decode-0", "--tail", "5", root=copy)
    assert logs.returncode == 0, logs.stderr
    assert len(logs.stdout.splitlines()) == 5


def test_observe_asks_prometheus_on_its_node_from_the_login_node(
    cluster: SlurmCluster, copy: Path, drilled: subprocess.CompletedProcess[str]
) -> None:
    """Prometheus runs as a step on host-a's node and scrapes both nodes; `observe`, on the
    login node, finds it at the node's address from the stack's job record."""
    result = slurm_cli(cluster, "observe", STACK, *OBSERVED, *TWO_NODES, "--json", root=copy)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert set(report["targets"].values()) == {"up"}
    assert {"vllm prefill-0", "vllm decode-0", "vllm-router router"} <= set(report["targets"])
    assert set(report["rules"].values()) == {"ok"}
    # Spans from both nodes: the prefiller's on host-a's, the decoder's on host-b's (and
    # maybe the follower's server's: it stores its rank's chunks).
    assert {"prefill-0", "decode-0", "lmcache-prefill-0", "lmcache-decode-0"} <= set(
        report["spans"]
    )
    assert all(count > 0 for count in report["spans"].values()), report["spans"]
    status = slurm_cli(cluster, "status", STACK, root=copy)
    assert "prometheus" in status.stdout
    assert "otlp-receiver" in status.stdout


def test_bench_against_colocated_in_the_same_job_then_nothing_is_left(
    cluster: SlurmCluster,
    copy: Path,
    cpu_pythons: list[str],
    drilled: subprocess.CompletedProcess[str],
) -> None:
    """The P/D arm is the running stack; the colocated arm runs in its job once the P/D
    services are down; the bench then ends the job."""
    run_id = f"{RUN}-bench"
    bench = ["--baseline", "colocated", "--num-prompts", "4", "--run-id", run_id, *OBSERVED]
    bench += ["--idle-window-s", "4"]  # two looks at each arm's idle CPU, not bench's five
    bench += TWO_NODES
    result = slurm_cli(cluster, "bench", STACK, *cpu_pythons, *bench, root=copy)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((copy / "runs" / run_id / "bench.json").read_text())
    arms = {arm["arm"]: arm for arm in report["arms"]}
    assert set(arms) == {"pd", "colocated"}
    assert all(arm["verdict_passed"] for arm in arms.values())
    assert_nothing_left(cluster, copy, STACK)


GPU_STACKS = ["xpyd", "xpyd-1gpu", "xpyd-lmcache-1gpu", "xpyd-mp", "xpyd-mp-2host", "xpyd-tp8"]


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[SlurmCluster]:
    """Two nodes of 8 fake H100s each (character devices slurmctld counts as GPUs)."""
    big = NodeResources(cpus=64, memory_mb=512_000, gpus=8, gpu_type="h100")
    with SlurmCluster(nodes=(big, big)) as cluster:
        yield cluster


def _slurm_spec(stack: str, tmp_path: Path) -> Path:
    """The shipped GPU stack as a slurm stack: its hosts without the addresses and engines of
    a compose deployment (the job's nodes give them)."""
    data = yaml.safe_load((ROOT / "stacks" / f"{stack}.yaml").read_text())
    data["runtime"] = "slurm"
    for host in data["hosts"]:
        host.pop("address", None)
        host.pop("docker", None)
        host["gpus"] = list(range(len(host["gpus"])))  # under Slurm: positions on the node
    data.pop("process", None)
    path = tmp_path / f"{stack}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _test_only(cluster: SlurmCluster, spec: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; from pathlib import Path; from generator.planner import make_plan\n"
        "from generator.errors import XpydError; from generator.stack import load_spec\n"
        "from generator.slurm import job_request, submit\n"
        "plan = make_plan(load_spec(Path(sys.argv[1])))\n"
        "try: print(submit(job_request(plan, Path('/dev/null')), hold_command='true', "
        "test_only=True))\n"
        "except XpydError as error: sys.exit(str(error))"
    )
    env = cluster.client_env() | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(
        cluster.client_command(sys.executable, "-c", code, str(spec)), capture_output=True,
        text=True, env=env, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("stack", GPU_STACKS)
def test_every_gpu_stack_job_is_accepted_where_the_cluster_fits_it(
    gpu_cluster: SlurmCluster, stack: str, tmp_path: Path
) -> None:
    judged = _test_only(gpu_cluster, _slurm_spec(stack, tmp_path))
    assert judged.returncode == 0, judged.stderr[-2000:]
    assert "to start at" in judged.stdout  # slurmctld's own "Job N to start at ..."


@pytest.mark.parametrize("stack", ["xpyd", "xpyd-tp8"])
def test_a_gpu_stack_the_cluster_cannot_fit_is_refused_with_what_to_change(
    slurm_cluster: SlurmCluster, stack: str, tmp_path: Path
) -> None:
    """The session's cluster has 2 GPUs a node: 4 (xpyd) and 8 (xpyd-tp8) do not fit."""
    judged = _test_only(slurm_cluster, _slurm_spec(stack, tmp_path))
    assert judged.returncode != 0
    assert "Slurm refused `sbatch --parsable ...`: " in judged.stderr
    assert "Requested node configuration is not available" in judged.stderr
    assert "fewer GPUs per host" in judged.stderr
