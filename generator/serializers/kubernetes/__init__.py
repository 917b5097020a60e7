"""Deployment (planned with ``pod_network``) -> a Kubernetes export, as data then YAML: a
kustomization base (namespace, images and each engine's replicas as its overlay points) and a
``monitoring/`` kustomization for clusters with prometheus-operator and Grafana's dashboard
sidecar. The modules: naming.py (labels, port names), pods.py (pod templates), objects.py
(workloads, Services, ConfigMaps, storage), monitoring.py, checks.py (our own invariants)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any, Final

from generator.plan import Plan
from generator.serializers.kubernetes.checks import check_objects
from generator.serializers.kubernetes.monitoring import monitoring_objects
from generator.serializers.kubernetes.naming import namespace_of
from generator.serializers.kubernetes.objects import stack_objects
from generator.serializers.kubernetes.pods import PodOptions
from generator.serializers.kubernetes.templates import (
    DS_KIND,
    LWS_KIND,
    pod_templates,
    worker_instance,
)
from generator.serializers.yaml_text import dump_yaml
from generator.services.model import Deployment

__all__ = [
    "KUSTOMIZATION",
    "KUSTOMIZE_CONFIG",
    "MONITORING",
    "PodOptions",
    "export_objects",
    "kubernetes_files",
]

KUSTOMIZATION: Final = PurePosixPath("kustomization.yaml")
# Where kustomize finds a LeaderWorkerSet's images and replicas: its input, not an object.
KUSTOMIZE_CONFIG: Final = PurePosixPath("kustomizeconfig.yaml")
MONITORING: Final = PurePosixPath("monitoring")
_KUSTOMIZE: Final = "kustomize.config.k8s.io/v1beta1"

Files = dict[PurePosixPath, list[dict[str, Any]]]


def export_objects(plan: Plan, deployment: Deployment, options: PodOptions) -> Files:
    """Every file of the export and its objects, ``monitoring/`` included (kustomizations
    aside: they are kustomize's, not the cluster's)."""
    files = stack_objects(plan, deployment, options)
    files |= {MONITORING / path: objs for path, objs in monitoring_objects(plan).items()}
    return files


def kubernetes_files(
    plan: Plan, deployment: Deployment, options: PodOptions
) -> tuple[dict[PurePosixPath, str], list[str]]:
    """The export's files as text, and what our own checks found wrong with them (empty
    unless the tool has a bug)."""
    files = export_objects(plan, deployment, options)
    header = _header(deployment)
    base = {p: o for p, o in files.items() if MONITORING not in p.parents}
    texts = {path: _documents(objects, header) for path, objects in files.items()}
    kinds = {o["kind"] for objects in base.values() for o in objects} & set(_GROUP_PATHS)
    texts[KUSTOMIZATION] = dump_yaml(_kustomization(plan, base, kinds), header=header)
    if kinds:
        texts[KUSTOMIZE_CONFIG] = dump_yaml(_kustomize_config(kinds), header=header)
    monitoring = [path.relative_to(MONITORING) for path in files if MONITORING in path.parents]
    texts[MONITORING / KUSTOMIZATION] = dump_yaml(
        _monitoring_kustomization(plan, monitoring), header=header
    )
    problems = check_objects([obj for objects in files.values() for obj in objects], _gpus(plan))
    return texts, problems


def _gpus(plan: Plan) -> dict[str, int]:
    """The GPUs each engine pod must ask for, by its instance label: its TP ranks on a node."""
    gpus: dict[str, int] = {}
    for engine in plan.engines:
        if engine.gpus:
            gpus[engine.name] = engine.tp // engine.nodes
            if engine.nodes > 1:
                gpus[worker_instance(engine.name)] = engine.tp // engine.nodes
    return gpus


def _documents(objects: Iterable[dict[str, Any]], header: str) -> str:
    return header + "".join(f"---\n{dump_yaml(obj, blocks=True)}" for obj in objects)


def _kustomization(plan: Plan, base: Files, group_kinds: set[str]) -> dict[str, Any]:
    """``group_kinds``: the kinds of LWS sets among the objects, which kustomize learns of
    from KUSTOMIZE_CONFIG."""
    workloads = [o for objects in base.values() for o in objects if any(pod_templates(o))]
    kustomization = {
        "apiVersion": _KUSTOMIZE,
        "kind": "Kustomization",
        "namespace": namespace_of(plan.stack),
        "resources": [str(path) for path in sorted(base)],
        "images": _images(workloads),
        "replicas": [
            {"name": o["metadata"]["name"], "count": o["spec"]["replicas"]}
            for o in workloads
            if "replicas" in o["spec"]  # a Job has none
        ],
    }
    if group_kinds:
        kustomization["configurations"] = [str(KUSTOMIZE_CONFIG)]
    return kustomization


# Where a set of LWS keeps its pod templates (and a LeaderWorkerSet its group count): kustomize's
# built-in field lists know the built-in kinds only. Its 4.5.4 refuses a `replicas` entry that
# names another kind, and finds containers anywhere; the image paths serve kustomize versions
# that follow only their field lists.
_GROUP_PATHS: Final = {
    LWS_KIND: "spec/leaderWorkerTemplate",
    DS_KIND: "spec/roles[]/spec/leaderWorkerTemplate",
}


def _kustomize_config(kinds: set[str]) -> dict[str, Any]:
    """kustomize's ``images`` and ``replicas`` fields of the sets the export has. A
    DisaggregatedSet's replicas are per role, which kustomize's ``replicas`` (by object
    name) cannot address: an overlay patches them."""
    images = [
        {
            "path": f"{_GROUP_PATHS[kind]}/{template}/spec/{key}[]/image",
            "kind": kind,
            "create": False,
        }
        for kind in sorted(kinds)
        for template in ("leaderTemplate", "workerTemplate")
        for key in ("containers", "initContainers")
    ]
    config: dict[str, Any] = {"images": images}
    if LWS_KIND in kinds:
        config["replicas"] = [{"path": "spec/replicas", "kind": LWS_KIND, "create": True}]
    return config


def _images(workloads: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each image once, as kustomize overrides it: ``newName`` to the user's registry."""
    tags = sorted(
        {
            container["image"]
            for workload in workloads
            for _, template in pod_templates(workload)
            for key in ("initContainers", "containers")
            for container in template["spec"].get(key, [])
        }
    )
    images = []
    for tag in tags:
        name, _, version = tag.rpartition(":")
        if not name or "/" in version:  # no tag: the whole reference is the name
            name, version = tag, "latest"
        images.append({"name": name, "newName": name, "newTag": version})
    return images


def _monitoring_kustomization(plan: Plan, files: list[PurePosixPath]) -> dict[str, Any]:
    return {
        "apiVersion": _KUSTOMIZE,
        "kind": "Kustomization",
        "namespace": namespace_of(plan.stack),
        "resources": [str(path) for path in sorted(files)],
    }


def _header(deployment: Deployment) -> str:
    notes = "".join(f"# warning: {line}\n" for line in deployment.notes)
    return (
        f"# Rendered by xpyd-stacks from stacks/{deployment.stack}.yaml: do not edit, "
        f"re-render with\n#   python -m generator render {deployment.stack} "
        f"--target kubernetes\n{notes}"
    )
