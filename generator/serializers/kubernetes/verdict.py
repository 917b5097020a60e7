"""The verdict Job: the smoke verdict ``up`` prints, run in the cluster once the export is
applied (``generator/probes/in_cluster.py``), so that ``kubectl apply -k`` ends with the same
proof. It runs in the router's image (which carries the generator package and the verdict's
few imports) from the plan, given as a ConfigMap; it waits for the engines and the router
itself, bounded, so the Job is applied with the rest and never retried: a FAIL is an answer.
``kubectl -n NAMESPACE logs job/verdict`` shows it; ``kubectl wait --for=condition=complete``
waits for a PASS. A Job's template cannot change once made: delete the Job to run it again.
"""

from __future__ import annotations

import json
from typing import Any, Final

from generator.plan import Plan
from generator.serializers.kubernetes.naming import pod_labels
from generator.services.model import Deployment

__all__ = ["VERDICT_JOB", "VERDICT_PLAN", "network_names", "verdict_objects"]

VERDICT_JOB: Final = "verdict"
VERDICT_PLAN: Final = "verdict-plan"  # the ConfigMap holding plan.json
_PLAN_DIR: Final = "/etc/xpyd/verdict"
_READY_WITHIN_S: Final = 1800  # a GPU engine's first start: weights, compile, CUDA graphs
_VERDICT_S: Final = 600  # the smoke itself, its requests bounded by their own timeouts


def verdict_objects(plan: Plan, deployment: Deployment) -> list[dict[str, Any]]:
    """The plan's ConfigMap and the Job that reads it."""
    image = next(
        s.image.tag for host in deployment.hosts for s in host.services
        if s.name == plan.router.service
    )  # fmt: skip
    addresses = {str(port): name for port, name in sorted(network_names(plan, deployment).items())}
    data = {
        "plan.json": plan.model_dump_json(indent=2) + "\n",
        "addresses.json": json.dumps(addresses, indent=2) + "\n",
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VERDICT_PLAN}}
    return [config | {"data": data}, _job(plan, image)]


def network_names(plan: Plan, deployment: Deployment) -> dict[int, str]:
    """Each port of the plan and the name its owner has on the stack's network (its Service
    here, its compose service on a bridge), where only one owner has that port: the probes
    dial a bridge stack's ports on loopback, as ``up`` reaches them, and the verdict in a pod
    sends each to its owner instead. A port two hosts' services share is left out."""
    names = {s.name: s.hostname or s.name for host in deployment.hosts for s in host.services}
    owners: dict[int, set[str]] = {}
    for use in plan.ports:
        owners.setdefault(use.port, set()).add(names.get(use.owner, use.owner))
    return {port: next(iter(held)) for port, held in owners.items() if len(held) == 1}


def _job(plan: Plan, image: str) -> dict[str, Any]:
    labels = pod_labels(plan.stack, VERDICT_JOB, VERDICT_JOB)
    command = [
        "python3", "-m", "generator.probes.in_cluster",
        "--plan", f"{_PLAN_DIR}/plan.json",
        "--addresses", f"{_PLAN_DIR}/addresses.json",
        "--ready-within-s", str(_READY_WITHIN_S),
    ]  # fmt: skip
    container = {
        "name": VERDICT_JOB,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "volumeMounts": [{"name": "plan", "mountPath": _PLAN_DIR, "readOnly": True}],
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
    }
    template = {
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [{"name": "plan", "configMap": {"name": VERDICT_PLAN}}],
        },
    }
    spec = {
        "backoffLimit": 0,  # it waits for the stack itself; a FAIL is not retried
        "activeDeadlineSeconds": _READY_WITHIN_S + _VERDICT_S,
        "template": template,
    }
    metadata = {"name": VERDICT_JOB, "labels": labels}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
