"""Each host of a plan gets its own Docker engine; hosts that would share one are refused by
what drives engines, while render keeps working without any docker setting."""

from __future__ import annotations

from typing import Any

import pytest

from generator.docker import LOCAL, DockerEndpoint
from generator.errors import PlanError
from generator.plan import make_plan
from generator.spec import parse_spec
from generator.workflow.engines import host_endpoints
from tests.conftest import spec_dict


def two_host_plan(docker_a: dict[str, str] | None, docker_b: dict[str, str] | None) -> Any:
    hosts: list[dict[str, Any]] = [
        {"name": "a", "address": "10.0.0.1", "gpus": [0, 1]},
        {"name": "b", "address": "10.0.0.2", "gpus": [0, 1]},
    ]
    for host, docker in zip(hosts, (docker_a, docker_b), strict=True):
        if docker is not None:
            host["docker"] = docker
    data = spec_dict(hosts=hosts, placement={"prefill": {"hosts": "a"}, "decode": {"hosts": "b"}})
    return make_plan(parse_spec(data, source="t.yaml"))


def test_each_host_gets_its_engine() -> None:
    plan = two_host_plan(None, {"url": "ssh://ops@gpu-b"})
    assert host_endpoints(plan) == {
        "a": DockerEndpoint(host="a"),
        "b": DockerEndpoint(host="b", url="ssh://ops@gpu-b"),
    }


def test_a_single_host_stack_uses_the_local_engine() -> None:
    (endpoint,) = host_endpoints(make_plan(parse_spec(spec_dict(), source="t"))).values()
    assert endpoint.is_local
    assert endpoint.cli_args() == []


@pytest.mark.parametrize(
    ("docker_a", "docker_b", "problem"),
    [
        (None, None, "host b would be driven through the local engine, like host a"),
        (
            {"context": "n1"},
            {"context": "n1"},
            "host b would be driven through context n1, like host a",
        ),
        (
            {"url": "tcp://n:2376"},
            {"url": "tcp://n:2376"},
            "host b would be driven through tcp://n:2376, like host a",
        ),
    ],
)
def test_hosts_sharing_an_engine_are_refused(
    docker_a: dict[str, str] | None, docker_b: dict[str, str] | None, problem: str
) -> None:
    plan = two_host_plan(docker_a, docker_b)
    with pytest.raises(PlanError) as caught:
        host_endpoints(plan)
    text = str(caught.value)
    assert text.startswith(f"hosts[1].docker: {problem}")
    assert "fix: give each host its own engine" in text
    assert ("at most one host may use the local engine" in text) == (docker_a is None)


def test_endpoints_select_their_engine_on_the_docker_command_line() -> None:
    assert DockerEndpoint(host="b", context="ctx-b").cli_args() == ["--context", "ctx-b"]
    assert DockerEndpoint(host="b", url="unix:///run/b.sock").cli_args() == [
        "--host",
        "unix:///run/b.sock",
    ]
    assert LOCAL.label == "the local Docker engine"
    assert DockerEndpoint(host="b", context="ctx-b").label == (
        "host b's Docker engine (context ctx-b)"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"context": "c1", "url": "ssh://h"},
        {"context": "-H"},
        {"url": "http://h:2375"},
    ],
)
def test_endpoints_made_in_code_are_checked(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="not"):
        DockerEndpoint(host="b", **fields)
