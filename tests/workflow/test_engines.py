"""Each host of a plan gets its own Docker engine; hosts that would share one are refused by
what drives engines (knowing DOCKER_HOST and the current context), while render keeps working
without any docker setting."""

from __future__ import annotations

from pathlib import Path
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
from generator.workflow.engines import engine_reached, host_endpoints
from tests.conftest import spec_dict

NO_ENV = {"HOME": "/nonexistent"}  # no DOCKER_HOST, no context in use: the local engine


def endpoints(plan: Any, **environ: str) -> dict[str, DockerEndpoint]:
    return host_endpoints(plan, environ=NO_ENV | environ)


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
    assert endpoints(plan) == {
        "a": DockerEndpoint(host="a"),
        "b": DockerEndpoint(host="b", url="ssh://ops@gpu-b"),
    }


def test_a_single_host_stack_uses_the_local_engine() -> None:
    (endpoint,) = endpoints(make_plan(parse_spec(spec_dict(), source="t"))).values()
    assert endpoint.is_local
    assert endpoint.cli_args() == []


@pytest.mark.parametrize(
    ("docker_a", "environ", "problem"),
    [
        (
            None,
            {},
            "host b would be driven through the local engine (the local machine), like host a",
        ),
        (
            {"url": "ssh://ops@GPU-B"},
            {"DOCKER_HOST": "ssh://gpu-b:22"},
            "host b would be driven through the local engine (ssh://gpu-b:22), like host a",
        ),
    ],
)
def test_hosts_sharing_an_engine_are_refused(
    docker_a: dict[str, str] | None, environ: dict[str, str], problem: str
) -> None:
    plan = two_host_plan(docker_a, None)
    with pytest.raises(PlanError) as caught:
        endpoints(plan, **environ)
    text = str(caught.value)
    assert text.startswith(f"hosts[1].docker: {problem}")
    assert "fix: give each host its own engine" in text
    assert "at most one host may use the local engine" in text


@pytest.mark.parametrize(
    "docker_b",
    [
        {"url": "unix:///var/run/docker.sock"},
        {"url": "unix:///run/docker.sock"},
        {"url": "ssh://ops@127.0.0.2"},
        {"url": "ssh://LocalHost:22"},
        {"context": "default"},
    ],
)
def test_spellings_of_the_local_engine_are_the_local_engine(docker_b: dict[str, str]) -> None:
    # Settings given for both hosts are compared by the spec (tests/spec/test_machines.py);
    # no setting is the local engine, which only `up` knows (DOCKER_HOST, the context in use).
    with pytest.raises(PlanError, match=r"hosts\[1\]\.docker: host b would be driven through"):
        endpoints(two_host_plan(None, docker_b))


@given(
    user=st.sampled_from(["", "ops@", "root@"]),
    port=st.sampled_from(["", ":22", ":0022"]),
    name=st.from_regex(r"[a-z](?:[a-z0-9-]{0,9}[a-z0-9])?\.[a-z]{2,5}", fullmatch=True),
    flips=st.lists(st.booleans(), min_size=16, max_size=16),
)
def test_ssh_urls_differing_in_user_default_port_or_case_are_one_engine(
    user: str, port: str, name: str, flips: list[bool]
) -> None:
    cased = "".join(c.upper() if flip else c for c, flip in zip(name, flips * 2, strict=False))
    first = DockerAccess(url=f"ssh://{name}")
    second = DockerAccess(url=f"ssh://{user}{cased}{port}")
    assert engine_machine(first) == engine_machine(second) == f"ssh://{name}:22"


@pytest.mark.parametrize(
    ("docker_a", "docker_b"),
    [
        ({"url": "ssh://ops@gpu-a"}, {"url": "ssh://ops@gpu-b"}),
        # Ports of one gateway forwarded to two machines; tunnels on this machine's loopback.
        ({"url": "ssh://ops@gate:2201"}, {"url": "ssh://ops@gate:2202"}),
        ({"url": "tcp://127.0.0.1:23750"}, {"url": "tcp://127.0.0.1:23751"}),
        ({"url": "ssh://ops@localhost:2222"}, None),
        # An engine in another network namespace (tests/integration/hosts.py).
        ({"url": "unix:///srv/hosta/docker.sock"}, None),
    ],
)
def test_different_engines_stay_apart(
    docker_a: dict[str, str] | None, docker_b: dict[str, str] | None
) -> None:
    assert set(endpoints(two_host_plan(docker_a, docker_b))) == {"a", "b"}


@pytest.mark.parametrize(
    ("environ", "docker_b"),
    [
        ({"DOCKER_HOST": "ssh://ops@gpu-b"}, {"url": "ssh://GPU-B:22"}),
        ({"DOCKER_HOST": "tcp://localhost:2375"}, {"url": "tcp://127.0.0.1:2375"}),
        ({"DOCKER_CONTEXT": "gpu-b"}, {"context": "gpu-b"}),
    ],
)
def test_the_local_engine_is_what_docker_host_or_the_context_in_use_names(
    environ: dict[str, str], docker_b: dict[str, str]
) -> None:
    plan = two_host_plan(None, docker_b)
    with pytest.raises(PlanError, match=r"hosts\[1\]\.docker: host b would be driven through"):
        endpoints(plan, **environ)
    assert set(endpoints(plan)) == {"a", "b"}  # without them: this machine's engine


def test_the_context_in_use_is_read_from_dockers_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"currentContext": "gpu-b"}')
    access = DockerAccess(context="gpu-b")
    assert engine_reached(None, {"DOCKER_CONFIG": str(tmp_path)}) == engine_machine(access)
    # DOCKER_HOST comes first; the default context is DOCKER_HOST, else the default socket.
    assert engine_reached(None, {"DOCKER_HOST": "fd://"}) == "url=fd://"
    assert engine_reached(DockerAccess(context="default"), NO_ENV) == LOCAL_MACHINE


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
