"""vllm-project/router, configured entirely by its command line: ``--vllm-pd-disaggregation``
for NIXL's hand-off (it cannot drive LMCache's P/D protocol), or plain ``--worker-urls`` over
every engine for the colocated topology. Its engines are the planned URLs, or, in the
Kubernetes export (router.pod_discovery, on by default there), the pods its own Kubernetes
discovery finds by label (each side's in P/D mode, every engine's otherwise), so a scaled role
is routed to without a restart.

Policies and options as vllm-router 0.1.17's ``--help`` lists them; in P/D mode each side may
have its own policy (``--prefill-policy``/``--decode-policy``), but cache_aware's options are
the router's, one set for both sides."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from generator.errors import SpecIssue
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import (
    ENGINE_LABEL,
    ENGINE_LABEL_VALUE,
    POD_NAMESPACE_REF,
    ROLE_LABEL,
    STACK_LABEL,
    Plan,
    Role,
)
from generator.plan.parts import VllmRouterPlan, part_of
from generator.plan.ports import PortBook
from generator.routers.base import (
    ROUTER_LOCK,
    RouterImage,
    RouterSite,
    option_issues,
    policy_sides,
)
from generator.spec import RouterKind, SidedPolicy, Spec
from generator.topologies import topology_of, topology_unit

__all__ = [
    "UNIT",
    "CacheAwareOptions",
    "VllmRouter",
    "discovery_port",
    "engine_selector",
    "role_selector",
]


# vllm-router 0.1.17 hands these options to its Rust core (``vllm_router_rs.Router``), whose
# fields are f32, usize and u64: an integer past its type stops the router at start
# (OverflowError, checked against the 0.1.17 wheel), a float past f32's range becomes inf
# there. The bounds below are those types, or tighter where a value in them still cannot work.
_USIZE_MAX = 2**64 - 1  # x86-64 and aarch64 builds
_F32_MAX = 3.4028234663852886e38
# vllm-router's own bound on a period in seconds (its kv_aware_session_affinity_ttl_secs):
# a year; a u64 of seconds added to a clock's instant overflows long before u64's end.
_MAX_PERIOD_S = 31_536_000


class _NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class CacheAwareOptions(_NoOptions):
    """cache_aware's flags; one left out keeps vllm-router's default (in the comment)."""

    cache_threshold: float | None = Field(None, ge=0.0, le=1.0)  # 0.3: prefix match to stay
    balance_abs_threshold: int | None = Field(None, ge=0, le=_USIZE_MAX)  # 64: queue gap...
    balance_rel_threshold: float | None = Field(None, ge=1.0, le=_F32_MAX)  # 1.5: ...and ratio
    eviction_interval_secs: int | None = Field(None, ge=1, le=_MAX_PERIOD_S)  # 120
    max_tree_size: int | None = Field(None, ge=1, le=_USIZE_MAX)  # 2**25 characters per worker


_OPTIONS: Mapping[str, type[BaseModel]] = MappingProxyType({"cache_aware": CacheAwareOptions})


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
    # Its health checks (_health_flags); it neither sends a request again nor reads token
    # counters, so recovery.attempts and recovery.stall_s are our proxy's alone.
    recovery_fields = ("health_interval_s", "health_timeout_s", "health_failures")

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        protocol = topology_unit(spec.topology).router_protocol
        if protocol == "lmcache-pd":
            yield SpecIssue(
                "router.kind",
                "vllm-router cannot drive LMCache's P/D protocol (disagg_spec + ZMQ done notices)",
                "use router.kind: proxy for lmcache-pd, or topology: nixl-mp for vllm-router",
            )
        yield from _policy_issues(spec)

    def plan_router(self, spec: Spec, book: PortBook, site: RouterSite) -> VllmRouterPlan:
        metrics = spec.router.prometheus_port or site.claim(
            book, spec.ports.router_metrics, "router metrics", "ports.router_metrics"
        )
        return VllmRouterPlan(
            **site.common(), metrics_port=metrics, pod_discovery=_discovers_pods(spec, site)
        )

    def command(self, plan: Plan) -> list[str]:
        router = _router(plan)
        args = ["vllm-router", "--host", "0.0.0.0", "--port", str(router.port)]
        args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(router.metrics_port)]
        if topology_of(plan).router_protocol == "none":
            args += ["--policy", router.policy.prefill.name, *_option_flags(router.policy)]
            if router.pod_discovery:
                args += [*_watch_flags(plan), "--selector", *engine_selector(plan)]
            else:
                args += ["--worker-urls", *(engine.url for engine in plan.engines)]
        else:
            args += ["--vllm-pd-disaggregation", *_policy_flags(router.policy)]
            args += _discovery_flags(plan) if router.pod_discovery else _engine_flags(plan)
        return [*args, *_health_flags(plan), *router.extra_args]

    def config_file(self, plan: Plan) -> ConfigFile | None:
        return None

    def published_ports(self, plan: Plan) -> tuple[int, ...]:
        router = _router(plan)
        return (router.port, router.metrics_port)

    def private_ports(self, plan: Plan) -> tuple[int, ...]:
        return ()

    def metrics_page(self, plan: Plan) -> MetricsPage:
        router = _router(plan)
        return MetricsPage(
            "vllm-router",
            router.service,
            "router",
            router.host,
            router.advertise_host,
            router.metrics_port,
        )

    def sticky_sessions(self, plan: Plan) -> bool:
        return False  # its sticky policies are not checked by the verdict

    def rotation_series(self, plan: Plan, engine: str) -> tuple[str, dict[str, str]]:
        # Its workers are the URLs it was given (command: --prefill/--decode/--worker-urls).
        url = next(e.url for e in plan.engines if e.name == engine)
        return "vllm_router_worker_health", {"worker": url}


def _discovers_pods(spec: Spec, site: RouterSite) -> bool:
    """On by default in the Kubernetes export: ``kubectl scale`` is then routed to without a
    restart; router.pod_discovery: false keeps the planned URLs."""
    return site.pod_network and spec.router.pod_discovery is not False


def _engine_flags(plan: Plan) -> list[str]:
    """The planned engines, each by its URL (fixed at start)."""
    args: list[str] = []
    for engine in plan.prefill:
        args += ["--prefill", engine.url]
    for engine in plan.decode:
        args += ["--decode", engine.url]
    return args


def _discovery_flags(plan: Plan) -> list[str]:
    """vllm-router 0.1.17's Kubernetes discovery in P/D mode (``--service-discovery`` beside
    ``--vllm-pd-disaggregation``): each side's pods by its own selector."""
    return [
        *_watch_flags(plan),
        "--prefill-selector",
        *role_selector(plan, Role.PREFILL),
        "--decode-selector",
        *role_selector(plan, Role.DECODE),
    ]


def _watch_flags(plan: Plan) -> list[str]:
    """vllm-router 0.1.17's Kubernetes discovery, in either mode: it watches the pods of one
    namespace, adds a pod whose labels match a selector once it is Running and Ready, at its
    pod IP and the one ``--service-discovery-port``, and removes it once it is not. Without a
    namespace it would watch the whole cluster, which a Role cannot grant."""
    return [
        "--service-discovery",
        "--service-discovery-namespace",
        POD_NAMESPACE_REF,
        "--service-discovery-port",
        str(discovery_port(plan)),
    ]


def role_selector(plan: Plan, role: Role) -> list[str]:
    """A side's pods, as ``key=value`` labels (the export's pod labels): the stack's, of
    that role."""
    return [f"{STACK_LABEL}={plan.stack}", f"{ROLE_LABEL}={role.value}"]


def engine_selector(plan: Plan) -> list[str]:
    """Every engine pod of the stack, whatever its role (the colocated topology, where every
    engine serves whole requests): 0.1.17's ``--selector`` wants all its labels to match."""
    return [f"{STACK_LABEL}={plan.stack}", f"{ENGINE_LABEL}={ENGINE_LABEL_VALUE}"]


def discovery_port(plan: Plan) -> int:
    """The one HTTP port every engine listens on where the router discovers pods (the
    planner gives them one)."""
    (port,) = {engine.http_port for engine in plan.engines}
    return port


def _health_flags(plan: Plan) -> list[str]:
    """recovery.health_*: 0.1.17's defaults (every 60 s, 3 failures) kept a dead decoder in
    rotation for over a minute. One good check re-admits an engine, as in our proxy."""
    recovery = plan.recovery
    return [
        "--health-check-interval-secs",
        str(recovery.health_interval_s),
        "--health-check-timeout-secs",
        str(recovery.health_timeout_s),
        "--health-failure-threshold",
        str(recovery.health_failures),
        "--health-success-threshold",
        "1",
    ]


def _policy_flags(policy: SidedPolicy) -> list[str]:
    prefill, decode = policy.prefill.name, policy.decode.name
    sides = ["--policy", prefill]
    if prefill != decode:
        sides = ["--prefill-policy", prefill, "--decode-policy", decode]
    return [*sides, *_option_flags(policy)]


def _option_flags(policy: SidedPolicy) -> list[str]:
    """Each option given, as its flag (the sides' options agree: check_spec says so)."""
    options = policy.prefill.options | policy.decode.options
    return [
        part
        for name, value in sorted(options.items())
        for part in (f"--{name.replace('_', '-')}", str(value))
    ]


def _policy_issues(spec: Spec) -> Iterator[SpecIssue]:
    sides = policy_sides(spec)
    for side, choice in sides:
        model = _OPTIONS.get(choice.name, _NoOptions)
        yield from option_issues(spec, side, choice, model, "vllm-router")
    if len(sides) == 2 and topology_unit(spec.topology).router_protocol == "none":
        yield SpecIssue(
            "router.policy",
            "a colocated stack has no prefill and decode sides",
            "give router.policy one name",
        )
    prefill, decode = spec.router.policy.prefill.options, spec.router.policy.decode.options
    if prefill and decode and prefill != decode:
        yield SpecIssue(
            "router.policy.decode.options",
            "vllm-router's policy options are the router's, one set for both sides",
            "give the options on one side only, or the same on both",
        )


def _router(plan: Plan) -> VllmRouterPlan:
    return part_of(plan.router, VllmRouterPlan, plan.stack)


UNIT = VllmRouter()
