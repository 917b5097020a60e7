"""Command lines and connector configs of every service, as lists (never shell strings).

Compose gets these as YAML lists: the string form would strip the quotes inside the
``--kv-transfer-config`` JSON (NOTES.md).
"""

from __future__ import annotations

import json
from typing import Any

from generator.plan import EnginePlan, Plan, Role
from generator.spec import Profile, RouterKind, Topology

__all__ = [
    "LMCACHE_CONFIG_PATH",
    "PROXY_CONFIG_PATH",
    "engine_command",
    "kv_transfer_config",
    "lmcache_server_command",
    "router_command",
]

LMCACHE_CONFIG_PATH = "/etc/xpyd/lmcache.yaml"
PROXY_CONFIG_PATH = "/etc/xpyd/router.yaml"
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
    args += [
        "--kv-transfer-config",
        json.dumps(kv_transfer_config(plan, engine), separators=(",", ":")),
    ]
    return [*args, *model.extra_args, *engine.extra_args]


def kv_transfer_config(plan: Plan, engine: EnginePlan) -> dict[str, Any]:
    if plan.topology is Topology.LMCACHE_PD:
        return _lmcache_pd_connector(engine)
    return _nixl_mp_connector(plan, engine)


def _lmcache_pd_connector(engine: EnginePlan) -> dict[str, Any]:
    # Seed A's settings: keep partial chunks (P/D must move every token's KV), a per-instance
    # RPC name, and decoders skip the last prompt token (the prefiller returns its first token).
    extra: dict[str, Any] = {"discard_partial_chunks": False, "lmcache_rpc_port": engine.name}
    role = "kv_producer"
    if engine.role is Role.DECODE:
        role = "kv_consumer"
        extra["skip_last_n_tokens"] = 1
    return {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": role,
        "kv_connector_extra_config": extra,
    }


def _nixl_mp_connector(plan: Plan, engine: EnginePlan) -> dict[str, Any]:
    server = engine.lmcache_server
    assert server is not None, "nixl-mp engines always have an lmcache server"
    role = "kv_producer" if engine.role is Role.PREFILL else "kv_consumer"
    nixl: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": role}
    if plan.profile is Profile.CPU:
        nixl["kv_buffer_device"] = "cpu"
    lmcache_host = "127.0.0.1" if plan.network == "host" else server.service
    mp = {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "lmcache.mp.host": f"tcp://{lmcache_host}",
            "lmcache.mp.port": server.zmq_port,
        },
    }
    # Fail loudly on a failed KV load instead of silently recomputing the prompt. vLLM reads
    # this at the top level only (measured on 0.32: inside the NixlConnector entry it is ignored).
    return {
        "kv_connector": "MultiConnector",
        "kv_role": role,
        "kv_load_failure_policy": "fail",
        "kv_connector_extra_config": {"connectors": [nixl, mp]},
    }


def lmcache_server_command(plan: Plan, engine: EnginePlan) -> list[str]:
    server, settings = engine.lmcache_server, plan.lmcache_server
    assert server is not None, "nixl-mp only"
    assert settings is not None, "nixl-mp only"
    # On a bridge network peers reach the server by service name, so bind all interfaces of
    # the container; with host networking only the co-located engine needs it.
    bind = "127.0.0.1" if plan.network == "host" else "0.0.0.0"
    args = ["lmcache", "server", "--host", bind, "--port", str(server.zmq_port)]
    args += ["--http-host", bind, "--http-port", str(server.http_port)]
    args += ["--prometheus-port", str(server.metrics_port)]
    args += [
        "--l1-size-gb",
        _number(settings.l1_size_gb),
        "--eviction-policy",
        settings.eviction_policy,
    ]
    args += ["--chunk-size", str(plan.lmcache_chunk_size), "--instance-id", engine.name]
    if settings.supported_transfer_mode is not None:
        args += ["--supported-transfer-mode", settings.supported_transfer_mode]
    return [*args, *settings.extra_args]


def router_command(plan: Plan) -> list[str]:
    router = plan.router
    if router.kind is RouterKind.PROXY:  # everything else is in its config file
        return ["python3", "-m", "generator.proxy", "--config", PROXY_CONFIG_PATH]
    args = ["vllm-router", "--host", "0.0.0.0", "--port", str(router.port)]
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(router.metrics_port)]
    assert router.metrics_port is not None, "vllm-router always gets a Prometheus port"
    args += ["--vllm-pd-disaggregation", "--policy", router.policy]
    for engine in plan.prefill:
        args += ["--prefill", engine.url]
    for engine in plan.decode:
        args += ["--decode", engine.url]
    return [*args, *router.extra_args]


def _number(value: float | None) -> str:
    assert value is not None
    return f"{value:g}"
