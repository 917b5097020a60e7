"""Our P/D proxy (``python -m generator.proxy``): speaks LMCache P/D (with its ZMQ notices)
and NIXL's hand-off; everything but its config path is in its config file (router.yaml),
built with the proxy's own config model so the two can never disagree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from generator.errors import SpecIssue
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import EnginePlan, Plan
from generator.plan.parts import ProxyRouterPlan, part_of
from generator.plan.ports import PortBook
from generator.proxy.config import (
    BackendConfig,
    DecoderConfig,
    ListenConfig,
    NotifyConfig,
    PolicyChoice,
    PolicyConfig,
    ProxyConfig,
    RecoveryConfig,
    TimeoutsConfig,
)
from generator.proxy.policies import POLICIES
from generator.routers.base import ROUTER_LOCK, RouterImage, RouterSite, option_issues, policy_sides
from generator.spec import PolicyChoice as SpecPolicy
from generator.spec import RouterKind, Spec
from generator.topologies import topology_of, topology_unit

__all__ = ["PROXY_CONFIG_PATH", "UNIT", "Proxy"]

PROXY_CONFIG_PATH = "/etc/xpyd/router.yaml"


class Proxy:
    kind = RouterKind.PROXY
    # Seed A's proxy listens on 9100, node_exporter's port on most GPU hosts: the seed stacks
    # keep it (router.port), everything else defaults to 8100.
    default_port = 8100
    policies = tuple(POLICIES)  # the proxy's own registry: router.yaml reads the same
    image = RouterImage("router.Dockerfile.j2", ROUTER_LOCK)
    stamp: Literal["response-id", "headers"] = "headers"
    recovery_fields = (
        "health_interval_s",
        "health_timeout_s",
        "health_failures",
        "attempts",
        "stall_s",
        "hold_s",
    )

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        if topology_unit(spec.topology).router_protocol == "none":
            yield SpecIssue(
                "router.kind",
                f"the proxy routes prefill/decode pairs; topology {spec.topology.value} has none",
                "use router.kind: vllm-router (round robin over every engine)",
            )
        if spec.router.prometheus_port is not None:
            yield SpecIssue(
                "router.prometheus_port",
                "the proxy serves /metrics on its own port",
                "remove router.prometheus_port",
            )
        if spec.router.pod_discovery is not None:
            yield SpecIssue(
                "router.pod_discovery",
                "the proxy finds scaled engines by their Services' DNS names, with no setting",
                "remove router.pod_discovery (it is vllm-router's)",
            )
        if spec.router.extra_args:
            yield SpecIssue(
                "router.extra_args",
                "the proxy takes no command-line arguments: these would be dropped",
                "remove router.extra_args (the proxy's settings are router.policy, "
                "router.session_header, router.port)",
            )
        yield from _option_issues(spec)

    def plan_router(self, spec: Spec, book: PortBook, site: RouterSite) -> ProxyRouterPlan:
        notify = None
        if site.notices:
            notify = spec.router.notify_port or site.claim(
                book, spec.ports.proxy_notify, "proxy ZMQ notices", "ports.proxy_notify"
            )
        return ProxyRouterPlan(**site.common(), notify_port=notify)

    def command(self, plan: Plan) -> list[str]:
        return ["python3", "-m", "generator.proxy", "--config", PROXY_CONFIG_PATH]

    def config_file(self, plan: Plan) -> ConfigFile:
        data = _config(plan).model_dump(mode="json", exclude_defaults=False)
        return ConfigFile("proxy", "router.yaml", PROXY_CONFIG_PATH, data)

    def published_ports(self, plan: Plan) -> tuple[int, ...]:
        return (plan.router.port,)

    def private_ports(self, plan: Plan) -> tuple[int, ...]:
        notify = _router(plan).notify_port
        return (notify,) if notify is not None else ()

    def metrics_page(self, plan: Plan) -> MetricsPage:
        router = _router(plan)
        return MetricsPage(
            "proxy", router.service, "router", router.host, router.advertise_host, router.port
        )

    def sticky_sessions(self, plan: Plan) -> bool:
        return plan.router.session_header is not None

    def rotation_series(self, plan: Plan, engine: str) -> tuple[str, dict[str, str]]:
        return "xpyd_proxy_backend_healthy", {"backend": engine}


def _router(plan: Plan) -> ProxyRouterPlan:
    return part_of(plan.router, ProxyRouterPlan, plan.stack)


def _config(plan: Plan) -> ProxyConfig:
    router = _router(plan)
    protocol = topology_of(plan).router_protocol
    if protocol == "none":  # refused by check_spec: a bug if it gets here
        raise TypeError(f"{plan.stack}: the proxy cannot route topology {plan.topology.kind}")
    return ProxyConfig(
        protocol=protocol,
        listen=ListenConfig(host="0.0.0.0", port=router.port),
        model=plan.model.served_name,
        policy=PolicyConfig(
            prefill=_policy(router.policy.prefill, plan), decode=_policy(router.policy.decode, plan)
        ),
        session_header=router.session_header,
        prefill=[BackendConfig(name=e.name, url=e.url, tp=e.tp) for e in plan.prefill],
        decode=[_decoder(plan, engine) for engine in plan.decode],
        notify=NotifyConfig(bind_host=_notice_bind_host(router), port=router.notify_port)
        if router.notify_port
        else None,
        timeouts=TimeoutsConfig(
            health_interval_s=plan.recovery.health_interval_s,
            health_timeout_s=plan.recovery.health_timeout_s,
        ),
        recovery=RecoveryConfig(
            health_failures=plan.recovery.health_failures,
            attempts=plan.recovery.attempts,
            stall_s=plan.recovery.stall_s,
            hold_s=plan.recovery.hold_s,
        ),
        # Names looked up as often as engines are checked: an engine scaled in a cluster
        # (several addresses behind its name) joins within one round.
        discover_every_s=plan.recovery.health_interval_s,
    )


def _option_issues(spec: Spec) -> Iterator[SpecIssue]:
    for side, choice in policy_sides(spec):
        kind = POLICIES.get(choice.name)
        if kind is not None:  # an unknown name: router_issues names it
            yield from option_issues(spec, side, choice, kind.options, "the proxy")


def _policy(choice: SpecPolicy, plan: Plan) -> PolicyChoice:
    return PolicyChoice(name=choice.name, options=_stack_defaults(choice, plan) | choice.options)


def _stack_defaults(choice: SpecPolicy, plan: Plan) -> dict[str, Any]:
    """prefix_aware hashes blocks of LMCache's chunk_size: the unit it stores and finds KV in,
    in both P/D topologies (vLLM's own block size is not in the plan)."""
    chunk_size = getattr(plan.topology, "chunk_size", None)
    if choice.name != "prefix_aware" or chunk_size is None:
        return {}
    return {"block_tokens": chunk_size}


def _notice_bind_host(router: ProxyRouterPlan) -> str:
    """Where the KV-notice port listens: only where the prefillers reach it. With host
    networking that is the router's address (the one the prefillers are told), not every
    interface of a GPU host; in a bridge network the port is unpublished, so the container's
    every interface is the stack's network only."""
    bridged = router.advertise_host != router.address
    return "0.0.0.0" if bridged else router.address


def _decoder(plan: Plan, engine: EnginePlan) -> DecoderConfig:
    ports = topology_of(plan).receiver_ports(engine)
    if ports is None:  # NIXL: the decoder pulls, no ports to tell
        return DecoderConfig(name=engine.name, url=engine.url, tp=engine.tp)
    return DecoderConfig(
        name=engine.name,
        url=engine.url,
        tp=engine.tp,
        kv_host=ports.host,
        init_ports=list(ports.init_ports),
        alloc_ports=list(ports.alloc_ports),
    )


UNIT = Proxy()
