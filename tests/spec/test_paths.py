"""Issue 17 item 12: a host-path model may not be mounted over (or around) a path where the
tool mounts its caches, configs or secrets; the list of those paths is pinned to what renders."""

from __future__ import annotations

import pytest

from generator.errors import SpecError
from generator.paths import Workspace
from generator.services.model import BindMount, NamedVolume, TmpfsMount
from generator.spec.checks import TOOL_CONTAINER_PATHS
from generator.stack import parse_spec
from tests.conftest import spec_dict
from tests.render.test_shipped_stacks import SHIPPED
from tests.services.test_model import deployment_of


def _under_tool_path(target: str) -> bool:
    return any(target == p or target.startswith(p + "/") for p in TOOL_CONTAINER_PATHS)


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_container_path_the_tool_mounts_is_listed(workspace: Workspace, stack: str) -> None:
    for host in deployment_of(workspace, stack, "hf.token={file: secrets/hf}").hosts:
        for service in host.services:
            model_id = None
            for mount in service.mounts:
                if isinstance(mount, BindMount) and mount.read_only:
                    model_id = mount.target  # the user's model (model.host_path)
                    continue
                assert isinstance(mount, NamedVolume | TmpfsMount | BindMount)
                assert _under_tool_path(mount.target), (service.name, mount.target)
            for config in service.configs:
                assert _under_tool_path(config.target), (service.name, config.target)
            assert model_id is None or not _under_tool_path(model_id)


@pytest.mark.parametrize(
    "model_id",
    ["/root/.cache/huggingface", "/root/.cache", "/root", "/etc/xpyd/models", "/run/secrets"],
)
def test_a_host_path_model_over_a_tool_path_is_refused(model_id: str) -> None:
    data = spec_dict(model={"id": model_id, "source": "host-path", "host_path": "/srv/llama"})
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml")
    assert "model.id: the model would be mounted over /" in str(caught.value)


def test_a_host_path_model_elsewhere_passes() -> None:
    data = spec_dict(model={"id": "/models/llama", "source": "host-path", "host_path": "/srv/l"})
    assert parse_spec(data, source="t.yaml").model.id == "/models/llama"
