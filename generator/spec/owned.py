"""Settings the tool sets itself on what it renders: a spec's ``env`` and ``extra_args`` may
not set them again. Both come after the tool's own (a later ``--port`` wins in vLLM, a
repeated one stops vllm-router; env values replace the tool's), so an override would
silently break ports, GPUs or the KV hand-off. Each refusal names the field that sets the
value properly.

A flag counts in every spelling its parser takes: ``--port=1`` and ``--port 1``, vLLM's
``--max_model_len`` (its parser turns ``_`` into ``-``) and dotted ``--kv-transfer-config.x``,
prefixes argparse expands (``--tensor-par``; vLLM and LMCache keep argparse's
``allow_abbrev``), and short aliases (``-tp``). The tables are pinned to what renders by
tests/spec/test_owned.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from generator.errors import SpecIssue

__all__ = [
    "ENGINE_API_KEY",
    "ENGINE_API_KEY_FIX",
    "ENGINE_API_KEY_REFUSAL",
    "ENGINE_ENV",
    "ENGINE_FLAGS",
    "LMCACHE_SERVER_FLAGS",
    "ROUTER_FLAGS",
    "owned_issues",
    "unpassable_env",
]

# vLLM answers 401 to every request without the key, and neither router sends one.
ENGINE_API_KEY = "VLLM_API_KEY"
ENGINE_API_KEY_REFUSAL = (
    "an engine API key is not supported yet: the router and the proxy call the engines "
    "without one, so every request would get 401"
)
ENGINE_API_KEY_FIX = "remove it; keep the engines' ports off untrusted networks instead"
_PLACED = "set by the planner (placement, ports.*)"
_UNSUPPORTED = "not supported: engines scale by <role>.count and <role>.tp"

ENGINE_FLAGS: Mapping[str, str] = {
    "--model": "model.id (and model.host_path / hf.cache_dir for where it is read)",
    "--host": "the tool binds every engine on all interfaces; hosts[].address is its address",
    "--port": "placement.<role>.http_ports or ports.prefill_http / ports.decode_http",
    "--uds": "the engine must listen on its http port (placement.<role>.http_ports)",
    "--served-model-name": "model.served_name",
    "--tensor-parallel-size": "<role>.tp",
    "--pipeline-parallel-size": _UNSUPPORTED,
    "--data-parallel-size": _UNSUPPORTED,
    "--dtype": "model.dtype",
    "--max-model-len": "model.max_model_len",
    "--block-size": "model.block_size",
    "--gpu-memory-utilization": "<role>.gpu_memory_utilization",
    "--kv-transfer-config": "topology and lmcache.* / nixl.* (the tool writes the connector)",
    "--config": "write the settings as extra_args themselves (a config file can set any flag)",
    "--api-key": "nothing yet: the router and the proxy call the engines without a key",
}
_ENGINE_SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}
_ENGINE_SHORT |= {"-dp": "--data-parallel-size"}

ROUTER_FLAGS: Mapping[str, str] = {
    "--host": "the router binds all interfaces; router.host picks its host",
    "--port": "router.port",
    "--prometheus-host": "the router's metrics bind all interfaces",
    "--prometheus-port": "router.prometheus_port or ports.router_metrics",
    "--policy": "router.policy",
    "--prefill-policy": "router.policy.prefill",
    "--decode-policy": "router.policy.decode",
    **{
        f"--{option.replace('_', '-')}": f"router.policy.options.{option}"
        for option in (
            "cache_threshold",
            "balance_abs_threshold",
            "balance_rel_threshold",
            "eviction_interval_secs",
            "max_tree_size",
        )
    },
    **{
        flag: "recovery.health_interval_s, health_timeout_s, health_failures"
        for flag in (
            "--health-check-interval-secs",
            "--health-check-timeout-secs",
            "--health-failure-threshold",
            "--health-success-threshold",
        )
    },
    "--worker-urls": "the planner lists the engines (prefill / decode)",
    "--vllm-pd-disaggregation": "topology",
    "--prefill": "prefill.count and placement.prefill",
    "--decode": "decode.count and placement.decode",
    **{
        flag: "router.pod_discovery (the Kubernetes export finds engine pods by label)"
        for flag in (
            "--service-discovery",
            "--selector",
            "--prefill-selector",
            "--decode-selector",
            "--service-discovery-port",
            "--service-discovery-namespace",
        )
    },
}

LMCACHE_SERVER_FLAGS: Mapping[str, str] = {
    "--host": _PLACED,
    "--port": "ports.lmcache_zmq",
    "--http-host": _PLACED,
    "--http-port": "ports.lmcache_http",
    "--prometheus-port": "ports.lmcache_metrics",
    "--l1-size-gb": "lmcache.server.l1_size_gb",
    "--eviction-policy": "lmcache.server.eviction_policy",
    "--chunk-size": "lmcache.chunk_size",
    "--instance-id": "the engine's name (set by the planner)",
    "--supported-transfer-mode": "lmcache.server.supported_transfer_mode",
    "--worker-reap-timeout-seconds": "the tool (30 s on GPUs: a killed engine's KV freed sooner)",
    "--coordinator-url": "lmcache.p2p (the planner runs the coordinator)",
    "--coordinator-advertise-ip": "lmcache.p2p (each server advertises its service address)",
    "--p2p-advertise-url": "lmcache.p2p and ports.lmcache_p2p",
    "--p2p-listen-url": "lmcache.p2p and ports.lmcache_p2p",
    "--p2p-lookup-timeout": "lmcache.p2p.lookup_timeout_s",
    "--p2p-load-timeout": "lmcache.p2p.load_timeout_s",
    "--p2p-transfer-engine": "lmcache.p2p.transfer_engine",
    "--l1-align-bytes": "lmcache.p2p (P2P wants 64 KiB; the tool sets it)",
}

_GPU = "placement.<role>.gpus or hosts[].gpus"
_UCX = "networking.ucx_tls / networking.ucx_net_devices"
_TOOL = "the tool's own setting (it must stay as rendered)"
ENGINE_ENV: Mapping[str, str] = {
    "CUDA_VISIBLE_DEVICES": _GPU,
    "CUDA_DEVICE_ORDER": _GPU,
    "NVIDIA_VISIBLE_DEVICES": _GPU,
    "NVIDIA_DRIVER_CAPABILITIES": _TOOL,
    "VLLM_CPU_OMP_THREADS_BIND": "placement (hosts[].cpus)",
    "XPYD_NIXL_PTHR_DELAY_US": _TOOL,
    "XPYD_LOCK_DIR": _TOOL,
    "PYTHONHASHSEED": "the tool's own setting: every instance needs the same KV chunk keys",
    "HF_HOME": "hf.cache_dir",
    "VLLM_CACHE_ROOT": _TOOL,
    "HF_HUB_OFFLINE": "hf.offline",
    "HF_TOKEN_PATH": "hf.token",
    "UCX_TLS": _UCX,
    "UCX_NET_DEVICES": _UCX,
    "UCX_PROTO_INFO": "the tool's own setting: the smoke verdict reads the transport from it",
    "NCCL_CUMEM_ENABLE": _TOOL,
    "LMCACHE_CONFIG_FILE": "lmcache.* (the tool writes each engine's LMCache config)",
    "LMCACHE_TRACK_USAGE": _TOOL,
    "VLLM_ENABLE_V1_MULTIPROCESSING": _TOOL,
    "VLLM_WORKER_MULTIPROC_METHOD": _TOOL,
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "hosts[].address",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "ports.nixl_side_channel",
    "NIXL_TELEMETRY_ENABLE": _TOOL,
    "NIXL_TELEMETRY_EXPORTER": _TOOL,
    "NIXL_TELEMETRY_PROMETHEUS_PORT": "ports.nixl_telemetry",
    "NIXL_TELEMETRY_PROMETHEUS_LOCAL": _TOOL,
}
# LMCache reads LMCACHE_<KEY> over its config file: the keys of the file the tool writes.
_LMCACHE_CONFIG_KEYS = (
    "chunk_size",
    "enable_pd",
    "local_cpu",
    "max_local_cpu_size",
    "max_local_disk_size",
    "nixl_backends",
    "pd_buffer_device",
    "pd_buffer_size",
    "pd_peer_alloc_port",
    "pd_peer_host",
    "pd_peer_init_port",
    "pd_proxy_host",
    "pd_proxy_port",
    "pd_role",
    "pre_caching_hash_algorithm",
    "save_unfull_chunk",
    "transfer_channel",
)
_LMCACHE_ENV = {f"LMCACHE_{key.upper()}": "lmcache.*" for key in _LMCACHE_CONFIG_KEYS}


# Variables a secret never is, that secret_env must not pass from the caller's shell: the
# tool's own (XPYD_*: its supervisor's PID, exit and restart files), and those that change
# which programs run and what they load: the dynamic linker's (LD_*), Python's (PYTHON*:
# the process runtime drops the caller's PYTHONPATH and PYTHONHOME on purpose), the search
# path and a shell's startup files (the process runtime starts services through sh).
_TOOL_PREFIX = "XPYD_"
_LOADER_PREFIXES = ("LD_", "PYTHON", "DYLD_")
_LOADER_NAMES = frozenset(
    {"PATH", "VIRTUAL_ENV", "BASH_ENV", "ENV", "GCONV_PATH", "LOCPATH", "__PYVENV_LAUNCHER__"}
)


def unpassable_env(name: str) -> str | None:
    """Why ``name`` cannot be passed from the caller's environment (secret_env); else None."""
    if name.startswith(_TOOL_PREFIX):
        return f"{name} is the tool's own (the runtime sets XPYD_* for its supervisors)"
    if name in _LOADER_NAMES or name.startswith(_LOADER_PREFIXES):
        return (
            f"{name} changes which programs run or what they load, which the tool sets up "
            "itself (and the caller's shell may not share)"
        )
    return None


def owned_issues(
    model_args: Sequence[str],
    groups: Mapping[str, tuple[Sequence[str], Mapping[str, str]]],
    router_args: Sequence[str],
    server_args: Sequence[str],
) -> Iterator[SpecIssue]:
    """``groups``: role -> (extra_args, env)."""
    yield from _flag_issues("model.extra_args", model_args, ENGINE_FLAGS, _ENGINE_SHORT)
    for role, (args, env) in groups.items():
        yield from _flag_issues(f"{role}.extra_args", args, ENGINE_FLAGS, _ENGINE_SHORT)
        yield from _env_issues(f"{role}.env", env, role)
    yield from _flag_issues("router.extra_args", router_args, ROUTER_FLAGS, {})
    yield from _flag_issues("lmcache.server.extra_args", server_args, LMCACHE_SERVER_FLAGS, {})


def _env_issues(field: str, env: Mapping[str, str], role: str) -> Iterator[SpecIssue]:
    owned = {**ENGINE_ENV, **_LMCACHE_ENV}
    for name in env:
        if name in owned:
            fix = owned[name].replace("<role>", role)
            yield SpecIssue(
                f"{field}.{name}", "is set by the tool itself; this value would replace it", fix
            )
        elif name.startswith(_TOOL_PREFIX):
            yield SpecIssue(
                f"{field}.{name}",
                "is the tool's own (XPYD_* tell its supervisors their files and timings)",
                f"remove {field}.{name}",
            )


def _flag_issues(
    field: str, args: Sequence[str], owned: Mapping[str, str], short: Mapping[str, str]
) -> Iterator[SpecIssue]:
    role = field.split(".", 1)[0]
    for index, arg in enumerate(args):
        flag = owned_flag(arg, owned, short)
        if flag is not None:
            fix = owned[flag].replace("<role>", role)
            yield SpecIssue(
                f"{field}[{index}]",
                f"{arg!r} sets {flag}, which the tool sets itself (a second one would win "
                "silently or stop the program)",
                f"remove it; set it with {fix}",
            )


def owned_flag(arg: str, owned: Mapping[str, str], short: Mapping[str, str]) -> str | None:
    """The owned flag ``arg`` would set, in any spelling its parser accepts; else None."""
    if not arg.startswith("-") or arg in {"-", "--"}:
        return None
    name = arg.split("=", 1)[0]
    if not name.startswith("--"):
        return next((flag for alias, flag in short.items() if alias.startswith(name)), None)
    # vLLM: `_` reads as `-`, and `--a.b` sets field b of the flag `--a`.
    name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    if name in owned:
        return name
    # argparse expands a unique prefix; an ambiguous one fails anyway: refuse any.
    return next((flag for flag in owned if len(name) > 2 and flag.startswith(name)), None)
