"""The neutral service model: built from the plan, serialized to compose, it gives exactly the
committed files; and it says what the workflow and doctor read from it. (Its import direction
is pinned in tests/test_public_api.py.)"""

from __future__ import annotations

import pytest

from generator.paths import Workspace
from generator.planner import make_plan
from generator.render.images import plan_images, pulled_images
from generator.serializers.compose import compose_projects
from generator.services.build import build_deployment, image_ref
from generator.services.model import Deployment, NetworkMode
from generator.stack import load_spec
from tests.render.test_shipped_stacks import SHIPPED


def deployment_of(workspace: Workspace, stack: str, *overrides: str) -> Deployment:
    plan = make_plan(load_spec(workspace.stack_file(stack), list(overrides)))
    images = {i.role: image_ref(i.tag, i.dockerfile) for i in plan_images(plan, workspace)}
    return build_deployment(plan, pulled_images(plan) | images)


@pytest.mark.parametrize("stack", SHIPPED)
def test_build_then_serialize_gives_the_committed_compose_files(
    workspace: Workspace, stack: str
) -> None:
    projects = compose_projects(deployment_of(workspace, stack))
    assert projects
    for project in projects:
        committed = workspace.root / project.compose_file
        assert project.text == committed.read_text(encoding="utf-8")
        for relative, text in project.files.items():
            assert text == (workspace.root / project.directory / relative).read_text("utf-8")


def test_bridge_ports_are_loopback_but_the_router_is_public(workspace: Workspace) -> None:
    (host,) = deployment_of(workspace, "cpu-1p1d").hosts
    ports = {s.name: [(p.address, p.port) for p in s.ports] for s in host.services}
    router = host.service("router")
    assert router.network is NetworkMode.BRIDGE
    assert ports["router"][0] == ("0.0.0.0", router.health.endpoints[0].port)  # type: ignore[union-attr]
    assert all(address == "127.0.0.1" for address, _ in ports["prefill-0"])
    assert ports["bench"] == []


def test_multi_host_services_use_host_networking_and_name_their_host(
    workspace: Workspace,
) -> None:
    deployment = deployment_of(workspace, "cpu-2host")
    assert len(deployment.hosts) == 2
    for host in deployment.hosts:
        assert host.project_name == f"xpyd-cpu-2host-{host.host}"
        for service in host.services:
            assert (service.host, service.network) == (host.host, NetworkMode.HOST)
            assert not service.ports


def test_gpu_requests_carry_the_access_mode_and_the_runtime_env(workspace: Workspace) -> None:
    (host,) = deployment_of(workspace, "xpyd", "gpu.access=nvidia-runtime").hosts
    engine = host.service("prefill-0")
    assert engine.gpus is not None
    assert engine.gpus.access.value == "nvidia-runtime"
    ids = ",".join(map(str, engine.gpus.device_ids))
    assert engine.gpu_env["NVIDIA_VISIBLE_DEVICES"] == ids
    assert engine.environment["NVIDIA_VISIBLE_DEVICES"] == ids
