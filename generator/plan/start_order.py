"""Which engines must start one at a time: those that share a GPU while one of them measures
its KV cache from the GPU memory it sees (vLLM's memory profiling).

vLLM sizes an engine's KV cache from the memory it sees used while it profiles, so a neighbour
loading at the same time is counted as its own (one H200: the second of two 0.4 engines got
0.92 GiB of KV cache and refused max_model_len). An engine given its KV cache's size
(``--kv-cache-memory-bytes``, in ``model.extra_args`` or its group's) skips that measurement
(vLLM 0.32.0's ``Worker.determine_available_memory``): engines sharing a GPU that all have
one start together, at `up` and on restarts (a pair restarts in one vLLM start instead of two:
on an H100 with CUDA graphs about 60 s each)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from generator.plan.models import EnginePlan, Plan

__all__ = ["KV_CACHE_FLAG", "gpus_started_alone", "sizes_kv_cache", "vllm_flag"]

KV_CACHE_FLAG = "--kv-cache-memory-bytes"


def vllm_flag(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` as vLLM would read it (``--flag V`` or ``--flag=V``; the last
    one wins)."""
    found = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(f"{flag}="):
            found = arg.split("=", 1)[1]
    return found


def sizes_kv_cache(plan: Plan, engine: EnginePlan) -> bool:
    """Whether vLLM measures this engine's KV cache at start (no size given)."""
    return vllm_flag((*plan.model.extra_args, *engine.extra_args), KV_CACHE_FLAG) is None


def gpus_started_alone(plan: Plan, engines: Iterable[EnginePlan]) -> frozenset[int]:
    """The GPUs (of one host's ``engines``) that more than one engine computes on, one of
    them measuring its KV cache: their engines start one after another."""
    users: dict[int, list[EnginePlan]] = {}
    for engine in engines:
        for gpu in engine.gpus:
            users.setdefault(gpu, []).append(engine)
    return frozenset(
        gpu
        for gpu, sharing in users.items()
        if len(sharing) > 1 and any(sizes_kv_cache(plan, engine) for engine in sharing)
    )
