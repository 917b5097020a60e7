"""What a router kind is to the rest of the tool: the protocol each unit meets (one module
per kind, registered in ``__init__.py``). Pure: spec and plan in, data out."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from generator.errors import SpecIssue
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import Plan
from generator.plan.parts import RouterPlan
from generator.plan.ports import PortBook
from generator.spec import PolicyChoice, RouterKind, SidedPolicy, Spec

__all__ = [
    "ROUTER_LOCK",
    "RouterImage",
    "RouterSite",
    "RouterUnit",
    "option_issues",
    "policy_field",
    "policy_sides",
]

ROUTER_LOCK = "images/locks/router.txt"  # vllm-router and the proxy's packages: one image


@dataclass(frozen=True)
class RouterImage:
    """How render builds the router's image (the base image is the plan's images.router_base,
    else versions.yaml's)."""

    template: str  # under images/templates/
    lock: str  # the pinned packages it installs
    # Checkout folders it copies, whose files are part of what its tag stands for: the shared
    # template copies the whole package (the proxy, the supervisor's peers, the verdict Job's
    # probes), for either kind. A folder left out here runs stale code from an older image.
    copied_sources: tuple[str, ...] = ("generator",)


@dataclass(frozen=True)
class RouterSite:
    """What the planner has decided about the router before its kind claims its own ports."""

    host: str
    address: str
    advertise_host: str
    port: int
    policy: SidedPolicy
    session_header: str | None
    extra_args: tuple[str, ...]
    notices: bool  # the topology sends KV-ready notices to the router
    pod_network: bool = False  # planned for Kubernetes: each engine a pod of its own

    def common(self) -> dict[str, Any]:
        """The fields every router kind's plan part has."""
        fields = asdict(self)
        del fields["notices"], fields["pod_network"]
        return fields

    def claim(self, book: PortBook, preferred: int, purpose: str, field: str) -> int:
        """One more port of the router's own, on its host."""
        ports = book.claim_block(
            self.host, preferred, 1, owner="router", purpose=purpose, field=field
        )
        return ports[0]


@runtime_checkable  # lets the registry test check that each unit has every member
class RouterUnit(Protocol):
    @property
    def kind(self) -> RouterKind: ...

    @property
    def default_port(self) -> int: ...

    @property
    def policies(self) -> tuple[str, ...]: ...

    @property
    def image(self) -> RouterImage: ...

    @property
    def recovery_fields(self) -> tuple[str, ...]:
        """The recovery settings it reads (max_restarts is the runtime's, for every router)."""
        ...

    @property
    def stamp(self) -> Literal["response-id", "headers"]:
        """How it names the prefill/decode pair it chose: in the response id, or headers."""
        ...

    def rotation_series(self, plan: Plan, engine: str) -> tuple[str, dict[str, str]]:
        """The gauge on its metrics page (``metrics_page``) that is 1 while ``engine`` is in
        rotation, and the labels that pick that engine's series."""
        ...

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]: ...

    def plan_router(self, spec: Spec, book: PortBook, site: RouterSite) -> RouterPlan:
        """The router's plan part; claims the kind's own ports (after the router port)."""
        ...

    def command(self, plan: Plan) -> list[str]: ...

    def config_file(self, plan: Plan) -> ConfigFile | None: ...

    def published_ports(self, plan: Plan) -> tuple[int, ...]:
        """Ports a client or prober outside reaches, the router port first."""
        ...

    def private_ports(self, plan: Plan) -> tuple[int, ...]:
        """Ports only the stack's own services reach (on a bridge: exposed, not published)."""
        ...

    def sticky_sessions(self, plan: Plan) -> bool:
        """It keeps one session on one pair (the verdict checks it)."""
        ...

    def metrics_page(self, plan: Plan) -> MetricsPage:
        """Its Prometheus page, where observe's Prometheus reaches it."""
        ...


def policy_sides(spec: Spec) -> list[tuple[str, PolicyChoice]]:
    """Each side's policy to check; one entry while both sides are the same."""
    policy = spec.router.policy
    if policy.prefill == policy.decode:
        return [("prefill", policy.prefill)]
    return [("prefill", policy.prefill), ("decode", policy.decode)]


def policy_field(spec: Spec, side: str, option: str | None = None) -> str:
    """The spec field a policy issue names: router.policy while both sides are the same."""
    policy = spec.router.policy
    field = "router.policy" if policy.prefill == policy.decode else f"router.policy.{side}"
    return f"{field}.options.{option}" if option else field


def option_issues(
    spec: Spec, side: str, choice: PolicyChoice, model: type[BaseModel], owner: str
) -> Iterator[SpecIssue]:
    """The first problem of a policy's options under its options model, naming the option."""
    try:
        model.model_validate(choice.options)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = ".".join(str(part) for part in first["loc"])
        known = ", ".join(model.model_fields) or "none"
        yield SpecIssue(
            policy_field(spec, side, option),
            f"{first['msg']} (got {first['input']!r})",
            f"{owner}'s {choice.name} options: {known}",
        )
