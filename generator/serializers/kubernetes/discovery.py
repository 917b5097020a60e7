"""What vllm-router's Kubernetes pod discovery needs besides its flags (the router unit writes
those): an identity of its own and the right to read the stack's pods. vllm-router 0.1.17
builds its client from the pod's mounted token (kube's in-cluster config) and runs a watcher
over the pods of ``--service-discovery-namespace``, which lists them and then watches them. So
the router's pod runs as a ServiceAccount that a Role lets get, list and watch pods in its own
namespace, and no more; no other pod of the stack talks to the API server.
"""

from __future__ import annotations

from typing import Any, Final

from generator.plan import Plan
from generator.serializers.kubernetes.naming import STACK_LABEL, namespace_of

__all__ = ["DISCOVERY_ACCOUNT", "POD_VERBS", "discovery_objects", "router_identity"]

DISCOVERY_ACCOUNT: Final = "router-discovery"  # the ServiceAccount, Role and RoleBinding
POD_VERBS: Final = ("get", "list", "watch")
_RBAC: Final = "rbac.authorization.k8s.io"


def discovery_objects(plan: Plan) -> list[dict[str, Any]]:
    """The ServiceAccount, Role and RoleBinding, where the router discovers pods."""
    if not plan.router.discovers_pods():
        return []
    meta = {"name": DISCOVERY_ACCOUNT, "labels": {STACK_LABEL: plan.stack}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": list(POD_VERBS)}]
    role = {"apiVersion": f"{_RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules}
    # A subject's namespace is required; kustomize's ``namespace:`` rewrites only a subject
    # named "default", so an overlay that moves the stack patches it (docs/kubernetes.md).
    subject = {"kind": "ServiceAccount", "name": DISCOVERY_ACCOUNT}
    subject["namespace"] = namespace_of(plan.stack)
    binding = {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": DISCOVERY_ACCOUNT},
        "subjects": [subject],
    }
    return [account, role, binding]


def router_identity(plan: Plan) -> dict[str, Any]:
    """The router pod's part: its ServiceAccount, with the token mounted (the watcher's
    credentials), where it discovers pods; nothing otherwise."""
    if not plan.router.discovers_pods():
        return {}
    return {"serviceAccountName": DISCOVERY_ACCOUNT, "automountServiceAccountToken": True}
