"""Risky-but-legal choices: the plan still renders, the user is told why it may hurt."""

from __future__ import annotations

from collections.abc import Iterator

from generator.plan.agent_ports import agent_on
from generator.plan.models import Plan
from generator.spec import Profile, Spec

__all__ = ["collect_warnings"]

_RDMA_TRANSPORTS = ("rc", "ud", "dc", "ib", "all")


def collect_warnings(plan: Plan, spec: Spec) -> Iterator[str]:
    if plan.is_multi_host and not plan.rdma and plan.profile is Profile.GPU:
        yield (
            "networking.rdma is off on a multi-host stack: KV crosses hosts over TCP, "
            "far slower than RDMA. Set networking.rdma: true if the hosts have InfiniBand/RoCE."
        )
    tls = spec.networking.ucx_tls
    if plan.is_multi_host and plan.rdma and tls and not any(t in tls for t in _RDMA_TRANSPORTS):
        yield (
            f"networking.ucx_tls={tls!r} names no RDMA transport (rc, ud, dc): UCX will not use "
            "the RDMA devices between hosts. Add rc (or remove ucx_tls to let UCX choose)."
        )
    for role in ("prefill", "decode"):
        utilization = getattr(spec, role).gpu_memory_utilization
        if utilization is not None and utilization > 0.95:
            yield (
                f"{role}.gpu_memory_utilization={utilization} leaves almost no GPU memory for "
                "NIXL/LMCache buffers and CUDA graphs; 0.9 is the usual ceiling."
            )
    if plan.network == "host":
        for use in plan.ports:
            agent = agent_on(use.port)
            if agent is not None:
                yield (
                    f"port {use.port} on host {use.host} ({use.owner}: {use.purpose}) is the "
                    f"default port of {agent}: if the host runs it, {use.owner} cannot bind "
                    "(preflight and doctor check). Pick another port if you can."
                )
    if spec.hf.offline and spec.model.source == "hub" and spec.hf.cache_dir is None:
        yield (
            "hf.offline is on but hf.cache_dir is unset: the model cache volume starts empty, "
            "so vLLM cannot find the model. Point hf.cache_dir at a pre-filled cache."
        )
