"""Where a workload of the export keeps its pod templates: ``spec.template`` for the built-in
kinds, a leader's and a worker's template for a LeaderWorkerSet (an engine over several nodes,
LWS's ``leaderworkerset.x-k8s.io/v1``). The names of such a set and its pods live here too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

__all__ = [
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
WORKLOAD_KINDS: Final = ("StatefulSet", "Deployment", "Job", LWS_KIND)


def pod_templates(workload: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each pod template of a workload, with what it is: ``pod`` (the only one), ``leader`` or
    ``worker``. Nothing for an object that is not a workload."""
    kind, spec = workload.get("kind"), workload.get("spec", {})
    if kind == LWS_KIND:
        group = spec["leaderWorkerTemplate"]
        yield "leader", group["leaderTemplate"]
        yield "worker", group["workerTemplate"]
    elif kind in WORKLOAD_KINDS:
        yield "pod", spec["template"]


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
