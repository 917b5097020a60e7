"""The engine settings that change a benchmark's figures, named in its report beside each arm:
CUDA graphs or eager mode (eager cost the decoder a factor of four in ITL on an H200), the KV
block size, each engine's share of its GPU (or its KV cache size on cpu) and how the KV moves
between them. Read from the plan the arm ran, with vLLM's default named where the stack sets
nothing."""

from __future__ import annotations

from generator.plan import EnginePlan, Plan
from generator.plan.start_order import vllm_flag
from generator.spec import Profile
from generator.topologies import block_size_of, cudagraph_mode_of, topology_of

__all__ = ["engine_settings"]

_DEFAULT = "vLLM's default"
_GRAPH_MODES = {
    "PIECEWISE": "CUDA graphs (piecewise: attention eager)",
    "FULL_AND_PIECEWISE": "CUDA graphs (full_and_piecewise: vLLM's default)",
    "NONE": "compiled, no CUDA graphs (cudagraph_mode NONE)",
}
_UCX_OPERATION = {"write": "push (the prefiller writes)", "read": "pull (the decoder reads)"}


def engine_settings(plan: Plan) -> dict[str, str]:
    """Setting -> value; where the engines differ, each distinct value once, in engine order."""
    each = [_one_engine(plan, engine) for engine in plan.engines]
    names = dict.fromkeys(name for settings in each for name in settings)
    settings = {name: " / ".join(dict.fromkeys(s[name] for s in each)) for name in names}
    return settings | {"KV transfer": _transfer(plan)}


def _one_engine(plan: Plan, engine: EnginePlan) -> dict[str, str]:
    args = (*plan.model.extra_args, *engine.extra_args)
    eager = "--enforce-eager" in args
    compiled = "CUDA graphs" if plan.profile is Profile.GPU else "compiled (vLLM CPU's default)"
    if (mode := cudagraph_mode_of(plan, engine) or _chosen_graph_mode(args)) is not None:
        compiled = _GRAPH_MODES.get(mode, f"CUDA graphs ({mode})")
    settings = {
        "execution": "eager (--enforce-eager)" if eager else compiled,
        "block size": str(block) if (block := block_size_of(plan)) is not None else _DEFAULT,
    }
    if plan.profile is Profile.CPU:
        settings["KV cache"] = vllm_flag(args, "--kv-cache-memory-bytes") or _DEFAULT
    else:
        share = engine.gpu_memory_utilization
        settings["GPU memory share"] = f"{share:g}" if share is not None else _DEFAULT
    return settings


def _chosen_graph_mode(args: tuple[str, ...]) -> str | None:
    """The CUDA graph mode the engine's own arguments set as one flag (either spelling)."""
    for flag in ("-cc.cudagraph_mode", "--compilation-config.cudagraph_mode"):
        if (mode := vllm_flag(args, flag)) is not None:
            return mode.upper()
    return None


def _transfer(plan: Plan) -> str:
    sources = topology_of(plan).verdict_sources(plan)
    if sources is None:
        return "none (each engine serves whole requests)"
    speed = sources.kv_speed
    return f"{_UCX_OPERATION[speed.operation]}, KV in {speed.memory} memory"
