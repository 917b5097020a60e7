"""Engines over several hosts (<role>.nodes): the spec's rules, where each node goes, what each
runs (vLLM's leader and headless followers), and how the nodes watch each other."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes.prometheus import span_senders
from generator.serializers.process import process_projects
from generator.serializers.process_file import load_process_project
from generator.services.build import build_deployment, image_ref
from generator.services.commands import engine_command
from generator.services.model import Deployment, Service
from generator.spec import Spec
from generator.stack import load_spec, parse_spec

TWO_NODE_PREFILL = ("prefill.nodes=2", "prefill.tp=2", "cpu.share=true")


def slurm_spec(workspace: Workspace, *overrides: str) -> Spec:
    return load_spec(workspace.stack_file("cpu-slurm"), list(overrides))


def gpu_spec(workspace: Workspace, *overrides: str) -> Spec:
    """xpyd-mp-2host (two hosts of 4 GPUs) as a Slurm job (whose nodes' addresses come with
    the job)."""
    data = yaml.safe_load(workspace.stack_file("xpyd-mp-2host").read_text())
    for host in data["hosts"]:
        del host["address"]
    return parse_spec(data | {"runtime": "slurm"}, source="test", overrides=overrides)


def issues(workspace: Workspace, stack: str, *overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        load_spec(workspace.stack_file(stack), list(overrides))
    return str(caught.value)


def test_a_cpu_engine_over_two_nodes_has_one_rank_and_core_on_each(workspace: Workspace) -> None:
    plan = make_plan(slurm_spec(workspace, *TWO_NODE_PREFILL))
    leader, (follower,) = plan.prefill[0], plan.followers
    assert (leader.host, leader.cpus, leader.nodes, leader.node_rank) == ("host-a", (0,), 2, 0)
    assert (follower.name, follower.host, follower.cpus) == ("prefill-0-node1", "host-b", (1,))
    assert (follower.leader, follower.node_rank, follower.tp) == ("prefill-0", 1, 2)
    assert follower.master_port == leader.master_port is not None
    assert follower.http_port == follower.node_page  # its supervisor's page: no vLLM API
    assert leader.node_page not in {None, leader.http_port}
    # Each node its own LMCache server, on its own host (docs/facts.md).
    servers = {s.service: s.host for s in plan.sidecars if s.engine is not None}
    assert servers["lmcache-prefill-0-node1"] == "host-b"
    assert plan.host("host-b").services[:2] == ("lmcache-decode-0", "decode-0")
    assert "prefill-0-node1" in plan.host("host-b").services
    # Routers, probes and the verdict see the leader only.
    assert [engine.name for engine in plan.engines] == ["prefill-0", "decode-0"]


def test_a_plan_of_single_host_engines_says_nothing_of_nodes(workspace: Workspace) -> None:
    text = make_plan(slurm_spec(workspace)).model_dump_json()
    for name in ("followers", "nodes", "node_rank", "master_port", "node_page", "leader"):
        assert f'"{name}"' not in text


def test_gpu_nodes_take_aligned_blocks_on_the_next_hosts(workspace: Workspace) -> None:
    spec = gpu_spec(
        workspace, "prefill.count=1", "prefill.tp=4", "prefill.nodes=2", "decode.count=1"
    )
    plan = make_plan(spec)
    leader, (follower,), (decoder,) = plan.prefill[0], plan.followers, plan.decode
    assert (leader.host, leader.gpus, follower.host, follower.gpus) == (
        "gpu-a", (0, 1), "gpu-b", (0, 1),
    )  # fmt: skip
    assert (decoder.host, decoder.gpus) == ("gpu-b", (2, 3))
    # gpu-b has a prefill node and a decoder: each sees both's GPUs (KV may go over CUDA IPC).
    assert follower.visible_gpus == decoder.visible_gpus == (0, 1, 2, 3)
    assert (follower.cuda_devices, decoder.cuda_devices) == ((0, 1), (2, 3))


def test_an_engine_over_more_hosts_than_listed_is_refused(workspace: Workspace) -> None:
    text = issues(workspace, "cpu-slurm", "prefill.nodes=3", "prefill.tp=3")
    assert "prefill.nodes: spreads each prefill engine over 3 hosts, but the stack lists 2" in text


def test_tp_must_split_evenly_over_the_nodes(workspace: Workspace) -> None:
    with pytest.raises(SpecError) as caught:
        gpu_spec(workspace, "prefill.tp=3", "prefill.nodes=2")
    assert "prefill.nodes: prefill.tp 3 does not split evenly over 2 hosts" in str(caught.value)


def test_a_cpu_engine_runs_one_rank_a_host(workspace: Workspace) -> None:
    text = issues(workspace, "cpu-slurm", "prefill.nodes=2", "prefill.tp=4", "cpu.share=true")
    assert "prefill.tp: the cpu profile runs one TP rank per host" in text
    assert "fix: set prefill.tp: 2" in text


def test_compose_and_lmcache_pd_refuse_engines_over_several_hosts(workspace: Workspace) -> None:
    text = issues(workspace, "xpyd-mp-2host", "prefill.count=1", "prefill.tp=4", "prefill.nodes=2")
    assert "prefill.nodes: engines over several hosts have run under the slurm runtime only" in text
    text = issues(workspace, "xpyd-tp8", "decode.nodes=2")
    assert "decode.nodes: lmcache-pd sends each TP rank's KV to one host of the decoder" in text


def test_on_a_pod_network_the_nodes_take_their_rank_and_leader_from_lws(
    workspace: Workspace,
) -> None:
    """The Kubernetes export: one worker template for every follower (LeaderWorkerSet tells
    each pod its rank and the leader's name), and the pod's own IP where vLLM guessed one."""
    plan = make_plan(
        load_spec(workspace.stack_file("cpu-slurm"), TWO_NODE_PREFILL, export=True),
        pod_network=True,
    )
    leader, follower = plan.prefill[0], plan.followers[0]
    lead, follow = engine_command(plan, leader), engine_command(plan, follower)
    assert lead[lead.index("--node-rank") :][:4] == [
        "--node-rank", "0", "--master-addr", "$(POD_IP)",
    ]  # fmt: skip
    assert follow[follow.index("--node-rank") :][:4] == [
        "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)",
    ]  # fmt: skip
    services = {s.name: s for h in _deployment(plan).hosts for s in h.services}
    for name in (leader.name, follower.name):
        assert services[name].env["VLLM_HOST_IP"] == "$(POD_IP)"
        # LeaderWorkerSet recreates the group: no node watches another's page.
        assert not [w for w in services[name].restarts_with if "node" in w.service]


def test_no_room_for_a_node_names_the_host(workspace: Workspace) -> None:
    spec = gpu_spec(workspace, "prefill.count=1", "prefill.tp=16", "prefill.nodes=2")
    with pytest.raises(PlanError, match=r"8 GPUs per host of an engine \(prefill.nodes 2\)"):
        make_plan(spec)


def test_the_leader_serves_and_its_follower_runs_headless(workspace: Workspace) -> None:
    plan = make_plan(slurm_spec(workspace, *TWO_NODE_PREFILL))
    leader, follower = plan.prefill[0], plan.followers[0]
    lead, follow = engine_command(plan, leader), engine_command(plan, follower)
    assert lead[:4] == follow[:4] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve"]
    rendezvous = ["--master-addr", leader.address, "--master-port", str(leader.master_port)]
    for command, rank in ((lead, "0"), (follow, "1")):
        assert _after(command, "--nnodes") == "2"
        assert _after(command, "--node-rank") == rank
        assert _after(command, "--tensor-parallel-size") == "2"
        assert _after(command, "--distributed-executor-backend") == "mp"
        assert " ".join(rendezvous) in " ".join(command)
    assert "--headless" in follow
    assert "--headless" not in lead
    assert "--port" in lead
    assert "--port" not in follow
    # Each node's LMCacheMPConnector talks to its own node's server.
    assert '"lmcache.mp.port":6556' in _after(follow, "--kv-transfer-config")
    assert engine_command(plan, plan.decode[0])[:3] == [
        "python3", "-m", "vllm.entrypoints.openai.api_server",
    ]  # fmt: skip


def test_the_nodes_watch_each_others_supervisor_pages(workspace: Workspace) -> None:
    plan = make_plan(slurm_spec(workspace, *TWO_NODE_PREFILL))
    services = _services(plan)
    leader, follower = services["prefill-0"], services["prefill-0-node1"]
    page = plan.followers[0].node_page
    assert leader.page_port == plan.prefill[0].node_page
    assert follower.page_port == page
    assert [(w.service, w.gone_ends) for w in leader.restarts_with] == [("prefill-0-node1", True)]
    assert leader.restarts_with[0].metrics_url.endswith(f":{page}/metrics")
    assert [(w.service, w.gone_ends) for w in follower.restarts_with] == [("prefill-0", True)]
    assert leader.env["VLLM_HOST_IP"] == plan.prefill[0].address
    assert follower.env["VLLM_HOST_IP"] == plan.followers[0].address
    assert "VLLM_HOST_IP" not in services["decode-0"].env
    # The follower is up once its supervisor's page answers; it has no /v1/models.
    assert follower.health is not None
    assert follower.health.ready is None
    assert leader.health is not None
    assert leader.health.ready is not None
    assert services["decode-0"].page_port is None


def test_the_process_file_keeps_the_page_and_runs_it_under_a_supervisor(
    workspace: Workspace, tmp_path: Path
) -> None:
    plan = make_plan(slurm_spec(workspace, *TWO_NODE_PREFILL, "recovery.max_restarts=0"))
    host_b = next(p for p in process_projects(_deployment(plan)) if p.host == "host-b")
    path = tmp_path / "compose" / "host-b" / "processes.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(host_b.text)
    loaded = {s.name: s for s in load_process_project(path, tmp_path).services}
    assert loaded["prefill-0-node1"].page_port == plan.followers[0].node_page
    assert loaded["prefill-0-node1"].max_restarts == 0
    assert loaded["decode-0"].page_port is None


def _after(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _deployment(plan: Plan) -> Deployment:
    roles = ("prefill", "decode", "lmcache", "router")
    images = {role: image_ref(f"xpyd/{role}:test", PurePosixPath(role)) for role in roles}
    return build_deployment(plan, images)


def _services(plan: Plan) -> dict[str, Service]:
    return {s.name: s for host in _deployment(plan).hosts for s in host.services}


def test_observe_expects_spans_from_leaders_and_their_servers_only(workspace: Workspace) -> None:
    """A follower's server only stores its rank's chunks and sends no span (measured on the
    Slurm test cluster: `observe` failed, a sender silent)."""
    traced = ("observe.enabled=true", "observe.traces=true")
    plan = make_plan(slurm_spec(workspace, *TWO_NODE_PREFILL, *traced))
    assert span_senders(plan) == ["prefill-0", "decode-0", "lmcache-prefill-0", "lmcache-decode-0"]
