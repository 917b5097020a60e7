"""Each host of a plan gets its own Docker engine; hosts that would share one are refused by
what drives engines, while render keeps working without any docker setting."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.docker import LOCAL, DockerEndpoint
from generator.errors import PlanError
from generator.planner import make_plan
from generator.spec import DockerAccess
from generator.spec.identity import LOCAL_MACHINE, engine_machine
from generator.stack import parse_spec
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
        (
            None,
            None,
            "host b would be driven through the local engine (the local machine), like host a",
        ),
        (
            {"context": "n1"},
            {"context": "n1"},
            "host b would be driven through context n1, like host a",
        ),
        (
            {"url": "tcp://n:2376"},
            {"url": "tcp://n:2376"},
            "host b would be driven through tcp://n:2376 (n:2376), like host a",
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


@pytest.mark.parametrize(
    ("docker_a", "docker_b"),
    [
        ({"url": "ssh://ops@gpu-b"}, {"url": "ssh://ops@gpu-b:22"}),
        ({"url": "ssh://ops@gpu-b"}, {"url": "ssh://root@GPU-B"}),
        ({"url": "tcp://Node:2375"}, {"url": "tcp://node:2375"}),
        ({"url": "tcp://127.0.0.1:2375"}, {"url": "tcp://localhost:2376"}),
        (None, {"url": "unix:///var/run/docker.sock"}),
        (None, {"url": "unix:///run/docker.sock"}),
        (None, {"url": "ssh://ops@127.0.0.2"}),
    ],
)
def test_spellings_of_one_machine_are_one_engine(
    docker_a: dict[str, str] | None, docker_b: dict[str, str] | None
) -> None:
    with pytest.raises(PlanError, match=r"hosts\[1\]\.docker: host b would be driven through"):
        host_endpoints(two_host_plan(docker_a, docker_b))


@given(
    user=st.sampled_from(["", "ops@", "root@"]),
    port=st.sampled_from(["", ":22"]),
    name=st.from_regex(r"[a-z](?:[a-z0-9-]{0,9}[a-z0-9])?\.[a-z]{2,5}", fullmatch=True),
    flips=st.lists(st.booleans(), min_size=16, max_size=16),
)
def test_ssh_urls_differing_in_user_port_or_case_name_one_machine(
    user: str, port: str, name: str, flips: list[bool]
) -> None:
    cased = "".join(c.upper() if flip else c for c, flip in zip(name, flips * 2, strict=False))
    first = DockerAccess(url=f"ssh://{name}")
    second = DockerAccess(url=f"ssh://{user}{cased}{port}")
    assert engine_machine(first) == engine_machine(second) == name


def test_different_machines_stay_apart() -> None:
    plan = two_host_plan({"url": "ssh://ops@gpu-a"}, {"url": "ssh://ops@gpu-b"})
    assert set(host_endpoints(plan)) == {"a", "b"}
    assert engine_machine(DockerAccess(url="unix:///srv/other.sock")) != LOCAL_MACHINE


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
