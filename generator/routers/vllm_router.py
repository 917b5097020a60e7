"""vllm-project/router, configured entirely by its command line: ``--vllm-pd-disaggregation``
for NIXL's hand-off (it cannot drive LMCache's P/D protocol), or plain ``--worker-urls`` over
every engine for the colocated topology."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from generator.errors import SpecIssue
from generator.plan.files import ConfigFile
from generator.plan.models import Plan
from generator.plan.parts import VllmRouterPlan, part_of
from generator.plan.ports import PortBook
from generator.routers.base import ROUTER_LOCK, RouterImage, RouterSite
from generator.spec import RouterKind, Spec
from generator.topologies import topology_of, topology_unit

__all__ = ["UNIT", "VllmRouter"]


class VllmRouter:
    kind = RouterKind.VLLM_ROUTER
    default_port = 30000
    policies = (
        "random",
        "round_robin",
        "cache_aware",
        "kv_aware",
        "power_of_two",
        "consistent_hash",
        "sticky_least_loaded",
    )
    image = RouterImage("router.Dockerfile.j2", ROUTER_LOCK)
    stamp: Literal["response-id", "headers"] = "response-id"

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        if topology_unit(spec.topology).router_protocol == "lmcache-pd":
            yield SpecIssue(
                "router.kind",
                "vllm-router cannot drive LMCache's P/D protocol (disagg_spec + ZMQ done notices)",
                "use router.kind: proxy for lmcache-pd, or topology: nixl-mp for vllm-router",
            )

    def plan_router(self, spec: Spec, book: PortBook, site: RouterSite) -> VllmRouterPlan:
        metrics = spec.router.prometheus_port or site.claim(
            book, spec.ports.router_metrics, "router metrics", "ports.router_metrics"
        )
        return VllmRouterPlan(**site.common(), metrics_port=metrics)

    def command(self, plan: Plan) -> list[str]:
        router = _router(plan)
        args = ["vllm-router", "--host", "0.0.0.0", "--port", str(router.port)]
        args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(router.metrics_port)]
        if topology_of(plan).router_protocol == "none":
            args += ["--policy", router.policy, "--worker-urls"]
            args += [engine.url for engine in plan.engines]
        else:
            args += ["--vllm-pd-disaggregation", "--policy", router.policy]
            for engine in plan.prefill:
                args += ["--prefill", engine.url]
            for engine in plan.decode:
                args += ["--decode", engine.url]
        return [*args, *router.extra_args]

    def config_file(self, plan: Plan) -> ConfigFile | None:
        return None

    def published_ports(self, plan: Plan) -> tuple[int, ...]:
        router = _router(plan)
        return (router.port, router.metrics_port)

    def private_ports(self, plan: Plan) -> tuple[int, ...]:
        return ()

    def sticky_sessions(self, plan: Plan) -> bool:
        return False  # its sticky policies are not checked by the verdict


def _router(plan: Plan) -> VllmRouterPlan:
    return part_of(plan.router, VllmRouterPlan, plan.stack)


UNIT = VllmRouter()
