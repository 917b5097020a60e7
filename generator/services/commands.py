"""vLLM's command line for an engine, as a list (never a shell string).

Compose gets it as a YAML list: the string form would strip the quotes inside the
``--kv-transfer-config`` JSON (docs/facts.md). The connector config comes from the topology unit.
"""

from __future__ import annotations

import json

from generator.plan import EnginePlan, Plan
from generator.plan.traces import traces_endpoint
from generator.topologies import block_size_of, cudagraph_mode_of, topology_of

__all__ = ["engine_command"]

_VLLM = ["python3", "-m", "vllm.entrypoints.openai.api_server"]


def engine_command(plan: Plan, engine: EnginePlan) -> list[str]:
    model = plan.model
    args = [*_VLLM, "--model", model.id, "--host", "0.0.0.0", "--port", str(engine.http_port)]
    args += ["--served-model-name", model.served_name]
    args += ["--tensor-parallel-size", str(engine.tp), "--dtype", model.dtype]
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
