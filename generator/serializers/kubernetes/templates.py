"""Where a workload of the export keeps its pod templates: ``spec.template`` for the built-in
kinds, a leader's and a worker's template for a LeaderWorkerSet (an engine over several nodes,
LWS's ``leaderworkerset.x-k8s.io/v1``), the same per role of a DisaggregatedSet (LWS's
``disaggregatedset.x-k8s.io/v1``: every engine, with ``kubernetes.engines``). The names of
such sets and their pods live here too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

__all__ = [
    "DS_API",
    "DS_KIND",
    "ENGINE_SET",
    "LWS_API",
    "LWS_KIND",
    "WORKLOAD_KINDS",
    "lws_name",
    "pod_templates",
    "worker_instance",
    "worker_role",
]

LWS_API: Final = "leaderworkerset.x-k8s.io/v1"
LWS_KIND: Final = "LeaderWorkerSet"
DS_API: Final = "disaggregatedset.x-k8s.io/v1"
DS_KIND: Final = "DisaggregatedSet"
ENGINE_SET: Final = "engines"  # the DisaggregatedSet's name (kubernetes.engines)
WORKLOAD_KINDS: Final = ("StatefulSet", "Deployment", "Job", LWS_KIND, DS_KIND)


def pod_templates(workload: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each pod template of a workload, with what it is: ``pod`` (the only one), ``leader`` or
    ``worker`` (a DisaggregatedSet's: ``<role>/leader``, ``<role>/worker``). Nothing for an
    object that is not a workload."""
    kind, spec = workload.get("kind"), workload.get("spec", {})
    if kind == LWS_KIND:
        yield from _group_templates(spec)
    elif kind == DS_KIND:
        for role in spec["roles"]:
            for which, template in _group_templates(role["spec"]):
                yield f"{role['name']}/{which}", template
    elif kind in WORKLOAD_KINDS:
        yield "pod", spec["template"]


def _group_templates(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A LeaderWorkerSet spec's templates; without a leader template LWS makes the leader from
    the worker template, and a group of one has no workers."""
    group = spec["leaderWorkerTemplate"]
    yield "leader", group.get("leaderTemplate", group["workerTemplate"])
    if group.get("size", 1) > 1:
        yield "worker", group["workerTemplate"]


def lws_name(engine: str) -> str:
    """The set of an engine over several nodes. Not the engine's own name: LWS names its
    headless Service after the set, and ``<engine>`` is the Service of the leader alone (a
    follower serves no API)."""
    return f"{engine}-nodes"


def worker_instance(engine: str) -> str:
    """The instance label of an engine's worker pods (its followers share one template)."""
    return f"{engine}-workers"


def worker_role(role: str) -> str:
    """The role label of a worker pod: not its engine's role, which Services and vllm-router's
    discovery select engines that serve the API by."""
    return f"{role}-worker"
