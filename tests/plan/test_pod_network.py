"""make_plan(pod_network=True), the plan the Kubernetes export is made from: each engine a pod
with its own address, reached by name, seeing only its own GPUs."""

from __future__ import annotations

from generator.paths import Workspace
from generator.plan import Plan
from generator.plan.models import POD_IP_REF
from generator.planner import make_plan
from generator.serializers.kubernetes.naming import is_port_name, port_name
from generator.stack import load_spec
from generator.topologies import topology_of


def _plans(workspace: Workspace, stack: str, *overrides: str) -> tuple[Plan, Plan]:
    spec = load_spec(workspace.stack_file(stack), overrides)
    return make_plan(spec), make_plan(spec, pod_network=True)


def test_a_pod_plan_reaches_engines_by_name_and_counts_their_gpus_from_zero(
    workspace: Workspace,
) -> None:
    host, pods = _plans(workspace, "xpyd-mp-2host", "router.pod_discovery=false")
    assert (host.network, host.pod_network) == ("host", False)
    assert (pods.network, pods.pod_network) == ("bridge", True)
    for engine in pods.engines:
        assert engine.advertise_host == engine.name
        assert pods.engine_address(engine) == engine.name  # the verdict Job's probes too
        assert engine.visible_gpus == engine.gpus
        assert engine.cuda_devices == tuple(range(engine.tp))
    assert pods.ports == host.ports  # the same ports: only the addressing changes


def test_only_a_pod_plan_binds_the_nixl_side_channel_at_the_pod_ip(workspace: Workspace) -> None:
    host, pods = _plans(workspace, "cpu-1p1d")
    side = "VLLM_NIXL_SIDE_CHANNEL_HOST"
    assert topology_of(pods).engine_env(pods, pods.decode[0])[side] == POD_IP_REF
    assert topology_of(host).engine_env(host, host.decode[0])[side] == "decode-0"
    assert '"pod_network"' not in host.model_dump_json()  # compose's plan.json is unchanged


def test_port_names_say_the_purpose_and_rank_and_fit_kubernetes() -> None:
    assert port_name("NIXL side channel (tp rank 3)", 5603) == "nixl-side-3"
    assert port_name("LMCache P/D alloc (tp rank 7)", 7407) == "pd-alloc-7"
    assert port_name("vLLM http", 8100) == "http"
    assert port_name("something new", 9000) == "port-9000"
    assert all(is_port_name(port_name(p, 1)) for p in ("LMCache metrics", "nixl telemetry"))
    assert not is_port_name("nixl-side-channel-0")  # 19 characters: over 15
    assert not is_port_name("1234")  # a letter at least
