"""networking.nixl_idle_delay_us: NIXL's idle progress thread's poll timeout, given to every
process that makes a NIXL agent (engines, and `lmcache server`s: P2P's transfer channel), 10 ms
unless the spec sets another; 0 leaves NIXL's own. What the timeout does to NIXL is measured in
the cpu image's build check (tests/images) and on an H100 (docs/gpu-h200)."""

from __future__ import annotations

import pytest

from generator.errors import SpecError
from generator.paths import Workspace
from generator.services.model import Deployment
from generator.stack import load_spec
from tests.services.test_model import deployment_of

DELAY = "XPYD_NIXL_PTHR_DELAY_US"


def delays(deployment: Deployment) -> dict[str, str | None]:
    """Each engine's and LMCache server's delay (None: unset, NIXL's own 0)."""
    return {
        service.name: dict(service.env).get(DELAY)
        for host in deployment.hosts
        for service in host.services
        if service.role in ("prefill", "decode", "lmcache")
    }


def test_cpu_engines_and_servers_sleep_10_ms_by_default(workspace: Workspace) -> None:
    found = delays(deployment_of(workspace, "cpu-1p1d"))
    assert set(found) == {"prefill-0", "decode-0", "lmcache-prefill-0", "lmcache-decode-0"}
    assert set(found.values()) == {"10000"}


@pytest.mark.parametrize("stack", ["xpyd-1gpu", "xpyd"])  # nixl-mp, lmcache-pd
def test_gpu_engines_sleep_10_ms_too_or_what_the_spec_says(
    workspace: Workspace, stack: str
) -> None:
    """An H100 measured no cost under load (docs/gpu-h200): the GPU default is the cpu one."""
    assert set(delays(deployment_of(workspace, stack)).values()) == {"10000"}
    asked = delays(deployment_of(workspace, stack, "networking.nixl_idle_delay_us=2000"))
    assert set(asked.values()) == {"2000"}


def test_zero_is_nixls_own_spin(workspace: Workspace) -> None:
    found = delays(deployment_of(workspace, "xpyd-1gpu", "networking.nixl_idle_delay_us=0"))
    assert set(found.values()) == {None}


@pytest.mark.parametrize("value", ["-1", "1000001", "soon"])
def test_a_bad_delay_names_the_field(workspace: Workspace, value: str) -> None:
    with pytest.raises(SpecError, match=r"networking\.nixl_idle_delay_us"):
        load_spec(workspace.stack_file("cpu-1p1d"), [f"networking.nixl_idle_delay_us={value}"])
