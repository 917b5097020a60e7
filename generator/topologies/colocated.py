"""colocated: no disaggregation. Every engine is a plain vLLM instance that prefills and
decodes its own requests; vllm-router spreads requests over all of them (round robin).

This is the honest baseline for a P/D stack: `bench --baseline colocated` derives it from
the P/D spec (``baseline_data`` below; generator/stack.py validates it), so it has the same
engines on the same GPUs or cores and differs only in moving no KV. The engines keep their
P/D names (prefill-0, decode-0...) so a result names the resources it ran on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from generator.errors import SpecIssue, XpydError
from generator.limits import BASELINE_SUFFIX, PD_NAME_MAX, STACK_NAME_MAX
from generator.plan.files import ConfigFile, MetricsPage
from generator.plan.models import EnginePlan, Plan
from generator.plan.observe import OBSERVE_PORT_FIELDS
from generator.plan.parts import ColocatedTopology, NoKV, SidecarPlan
from generator.plan.ports import PortBook
from generator.spec import Profile, RouterKind, Spec, Topology
from generator.topologies.base import EngineSite, ReceiverPorts, VerdictSources, no_sidecar

__all__ = ["UNIT", "Colocated", "baseline_data"]


class Colocated:
    kind = Topology.COLOCATED
    default_router = RouterKind.VLLM_ROUTER
    router_protocol: Literal["lmcache-pd", "nixl", "none"] = "none"
    router_notices = False
    spec_sections: tuple[str, ...] = ()
    port_fields: tuple[str, ...] = ()
    extra_image_roles: tuple[str, ...] = ()

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        # Any group sizes and TP: no KV has to fit between them. What only moving KV reads
        # would change nothing here.
        # (lmcache's sections are the P/D units' to name: foreign_issues)
        if "chunk_size" in spec.lmcache.model_fields_set:
            yield SpecIssue(
                "lmcache.chunk_size",
                "a colocated stack runs no LMCache: nothing reads it",
                "remove lmcache.chunk_size, or use a P/D topology",
            )
        if spec.observe.kv_floor_gib_s is not None:
            yield SpecIssue(
                "observe.kv_floor_gib_s",
                "a colocated stack moves no KV: no alert reads the floor",
                "remove observe.kv_floor_gib_s, or use a P/D topology",
            )

    def foreign_issues(self, spec: Spec) -> Iterator[SpecIssue]:
        return iter(())  # it reads nothing the P/D topologies do not

    def plan_settings(self, spec: Spec, book: PortBook) -> ColocatedTopology:
        return ColocatedTopology()

    def plan_engine(self, spec: Spec, book: PortBook, site: EngineSite) -> NoKV:
        return NoKV()

    def sidecars(self, engine: EnginePlan) -> tuple[SidecarPlan, ...]:
        return ()

    def sidecar_command(
        self, plan: Plan, engine: EnginePlan | None, sidecar: SidecarPlan
    ) -> list[str]:
        raise no_sidecar(self.kind, sidecar)

    def connector_config(self, plan: Plan, engine: EnginePlan) -> dict[str, Any] | None:
        return None  # no --kv-transfer-config: vLLM computes every prompt itself

    def engine_env(self, plan: Plan, engine: EnginePlan) -> dict[str, str]:
        return {}

    def metrics_pages(self, plan: Plan, engine: EnginePlan) -> tuple[MetricsPage, ...]:
        return ()

    def engine_ports(self, engine: EnginePlan) -> tuple[int, ...]:
        return ()

    def receiver_ports(self, engine: EnginePlan) -> ReceiverPorts | None:
        return None

    def engine_listening(self, engine: EnginePlan) -> list[tuple[str, int]]:
        return []

    def engine_config(self, plan: Plan, engine: EnginePlan) -> ConfigFile | None:
        return None

    def needs_cpu_connector(self, profile: Profile) -> bool:
        return False

    def block_size(self, plan: Plan) -> int | None:
        return None  # no KV moves

    def cudagraph_mode(self, plan: Plan) -> str | None:
        return None

    def verdict_sources(self, plan: Plan) -> VerdictSources | None:
        return None  # nothing moves: the colocated verdict (probes/colocated.py) applies

    def registration_url(self, plan: Plan, engine: EnginePlan) -> str | None:
        return None

    def stale_after(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        return {}

    def ends_with_peers(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        return {}

    def maps_memory_of(self, plan: Plan) -> dict[str, tuple[str, ...]]:
        return {}


UNIT = Colocated()


def baseline_data(spec: Spec, plan: Plan) -> dict[str, Any]:
    """The baseline's spec, unvalidated: the P/D spec's own settings (as the user wrote them)
    minus what only P/D reads. The router keeps the P/D router's port and host, so clients
    and benchmarks reach both at the same address."""
    if spec.topology is Topology.COLOCATED:
        raise XpydError(
            f"{spec.name} is already colocated: there is no P/D stack to compare with it",
            hint="run bench without --baseline, or bench a P/D stack",
        )
    name = spec.name + BASELINE_SUFFIX
    if len(name) > STACK_NAME_MAX:  # a spec parsed without the P/D units' name rule
        raise XpydError(
            f"the baseline's stack name {name!r} is longer than {STACK_NAME_MAX} characters",
            hint=f"shorten name in the stack spec to {PD_NAME_MAX} or less",
        )
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
    data |= {"name": name, "topology": Topology.COLOCATED.value}
    data["description"] = f"colocated baseline of {spec.name} (bench --baseline colocated)"
    data["lmcache"] = {}  # no LMCache at all: neither P/D nor servers
    data.get("observe", {}).pop("kv_floor_gib_s", None)  # no KV, no KV alert
    data.pop("nixl", None)  # no KV hand-off either
    data["ports"] = {
        field: value
        for field, value in data.get("ports", {}).items()
        if field in ("prefill_http", "decode_http", "router_metrics", *OBSERVE_PORT_FIELDS)
    }
    data["router"] = _router(data.get("router", {}), plan)
    return data


def _router(given: dict[str, Any], plan: Plan) -> dict[str, Any]:
    router = {
        "kind": RouterKind.VLLM_ROUTER.value,
        "port": plan.router.port,
        "policy": "round_robin",
    }
    for field in ("host", "prometheus_port"):
        if field in given:
            router[field] = given[field]
    return router
