"""Issue 33 class 8: hosts that would be one machine are refused by the spec, whatever the
spelling: two loopback addresses, or two Docker engine settings that reach one engine
(hosts without a setting are up's to judge: tests/workflow/test_engines.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from generator.errors import SpecError
from generator.stack import parse_spec
from tests.conftest import spec_dict


def two_hosts(
    address_a: str = "10.0.0.1",
    address_b: str = "10.0.0.2",
    docker_a: dict[str, str] | None = None,
    docker_b: dict[str, str] | None = None,
) -> dict[str, Any]:
    hosts: list[dict[str, Any]] = [
        {"name": "a", "address": address_a, "gpus": [0, 1]},
        {"name": "b", "address": address_b, "gpus": [0, 1]},
    ]
    for host, docker in zip(hosts, (docker_a, docker_b), strict=True):
        if docker is not None:
            host["docker"] = docker
    return spec_dict(hosts=hosts, placement={"prefill": {"hosts": "a"}, "decode": {"hosts": "b"}})


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml")
    return str(caught.value)


@given(
    first=st.sampled_from(["127.0.0.1", "localhost", "gpu.localhost", "LocalHost"]),
    second=st.from_regex(r"127(\.(0|[1-9][0-9]?)){3}", fullmatch=True),
)
def test_two_loopback_addresses_are_one_machine_not_two_hosts(first: str, second: str) -> None:
    # 127.0.0.1 and 127.0.0.2 were accepted as two hosts (one network stack).
    assume(second != "127.0.0.1")  # the same address twice: the duplicate check names it
    message = refusal(two_hosts(first, second))
    assert (
        f"hosts[1].address: {second!r} is a loopback address, as is host a's {first!r}: "
        "both are this one machine" in message
    )
    assert "fix: give each host its address on the network the hosts share" in message


def test_localhost_and_127_0_0_1_are_named_once_as_one_address() -> None:
    message = refusal(two_hosts("127.0.0.1", "localhost"))
    assert "hosts[1].address: 'localhost' is used by two hosts" in message
    assert "loopback" not in message


def test_one_loopback_host_beside_other_machines_passes() -> None:
    spec = parse_spec(two_hosts("127.0.0.1", "10.0.0.2"), source="t.yaml")
    assert [host.address for host in spec.hosts] == ["127.0.0.1", "10.0.0.2"]


@pytest.mark.parametrize(
    ("docker_a", "docker_b", "engine"),
    [
        ({"url": "ssh://ops@gpu-b"}, {"url": "ssh://ops@gpu-b:22"}, "ssh://gpu-b:22"),
        ({"url": "ssh://ops@gpu-b"}, {"url": "ssh://root@GPU-B"}, "ssh://gpu-b:22"),
        ({"url": "ssh://gpu-b"}, {"url": "ssh://root@gpu-b"}, "ssh://gpu-b:22"),
        ({"url": "tcp://Node:2375"}, {"url": "tcp://node:02375"}, "tcp://node:2375"),
        ({"url": "tcp://127.0.0.1:2375"}, {"url": "tcp://localhost:2375"}, "tcp://127.0.0.1:2375"),
        ({"url": "unix:///run/docker.sock"}, {"context": "default"}, "the local machine"),
        (
            {"url": "ssh://ops@localhost"},
            {"url": "unix:///var/run/docker.sock"},
            "the local machine",
        ),
        ({"context": "n1"}, {"context": "n1"}, "context n1"),
    ],
)
def test_two_settings_that_reach_one_engine_are_refused(
    docker_a: dict[str, str], docker_b: dict[str, str], engine: str
) -> None:
    # These reached `up` (spelt alike) or were taken as two machines (spelt apart).
    message = refusal(two_hosts(docker_a=docker_a, docker_b=docker_b))
    assert (
        f"hosts[1].docker: reaches the Docker engine of host a ({engine}): two hosts would be "
        "one machine" in message
    )
    assert "fix: give each host its own engine" in message


@pytest.mark.parametrize(
    ("docker_a", "docker_b"),
    [
        ({"url": "ssh://ops@gpu-a"}, {"url": "ssh://ops@gpu-b"}),
        ({"url": "ssh://ops@gate:2201"}, {"url": "ssh://ops@gate:2202"}),  # forwarded ports
        ({"url": "tcp://127.0.0.1:23750"}, {"url": "tcp://127.0.0.1:23751"}),  # tunnels
        ({"url": "unix:///srv/a/docker.sock"}, {"url": "unix:///srv/b/docker.sock"}),
        ({"context": "n1"}, {"context": "n2"}),
        (None, {"url": "unix:///var/run/docker.sock"}),  # no setting: up judges it
    ],
)
def test_settings_that_may_reach_two_engines_pass(
    docker_a: dict[str, str] | None, docker_b: dict[str, str]
) -> None:
    spec = parse_spec(two_hosts(docker_a=docker_a, docker_b=docker_b), source="t.yaml")
    assert len(spec.hosts) == 2
