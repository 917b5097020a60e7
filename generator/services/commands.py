"""vLLM's command line for an engine, as a list (never a shell string).

Compose gets it as a YAML list: the string form would strip the quotes inside the
``--kv-transfer-config`` JSON (docs/facts.md). The connector config comes from the topology unit.
"""

from __future__ import annotations

import json

from generator.plan import EnginePlan, Plan
from generator.plan.models import LWS_LEADER_ADDRESS_REF, LWS_WORKER_INDEX_REF, POD_IP_REF
from generator.plan.traces import traces_endpoint
from generator.topologies import block_size_of, cudagraph_mode_of, topology_of

__all__ = ["engine_command"]

_VLLM = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
# Every node of an engine over several hosts: `vllm serve` runs a follower headless (the API
# server's module has no such mode), and the leader as it was measured with its followers.
_VLLM_SERVE = ["python3", "-m", "vllm.entrypoints.cli.main", "serve"]


def engine_command(plan: Plan, engine: EnginePlan) -> list[str]:
    model = plan.model
    args = [*(_VLLM if engine.nodes == 1 else _VLLM_SERVE), "--model", model.id]
    if not engine.is_follower:  # a headless follower serves no API
        args += ["--host", "0.0.0.0", "--port", str(engine.http_port)]
    args += ["--served-model-name", model.served_name]
    args += ["--tensor-parallel-size", str(engine.tp), "--dtype", model.dtype]
    args += _nodes_args(plan, engine)
    if model.max_model_len is not None:
        args += ["--max-model-len", str(model.max_model_len)]
    if engine.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
    if (block_size := block_size_of(plan)) is not None:
        args += ["--block-size", str(block_size)]
    if (cudagraph_mode := cudagraph_mode_of(plan, engine)) is not None:
        args += [f"-cc.cudagraph_mode={cudagraph_mode}"]
    connector = topology_of(plan).connector_config(plan, engine)
    if connector is not None:
        args += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
    endpoint = traces_endpoint(plan)
    if endpoint is not None:
        args += ["--otlp-traces-endpoint", endpoint]
    return [*args, *model.extra_args, *engine.extra_args]


def _nodes_args(plan: Plan, engine: EnginePlan) -> list[str]:
    """An engine over several hosts: vLLM's multi-node mp executor (its default there would be
    Ray), every node meeting at the leader's rendezvous; a follower runs headless. Measured on
    vLLM 0.32.0: docs/facts.md, "One engine over two nodes"."""
    if engine.nodes == 1:
        return []
    leader = plan.leader_of(engine) if engine.is_follower else engine
    rank, master = str(engine.node_rank), leader.address
    if plan.pod_network:  # a LeaderWorkerSet's pods: the names and ranks it gives them
        rank = LWS_WORKER_INDEX_REF if engine.is_follower else rank
        master = LWS_LEADER_ADDRESS_REF if engine.is_follower else POD_IP_REF
    args = ["--distributed-executor-backend", "mp", "--nnodes", str(engine.nodes)]
    args += ["--node-rank", rank, "--master-addr", master]
    args += ["--master-port", str(leader.master_port)]
    return [*args, "--headless"] if engine.is_follower else args
