"""hosts[].docker: how the tool reaches each host's Docker engine (a context or an engine
URL), validated before anything uses it, and carried by the plan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generator.errors import SpecError
from generator.planner import make_plan
from generator.spec import DockerAccess, Spec
from generator.stack import parse_spec
from tests.conftest import spec_dict


def with_docker(docker: Any) -> dict[str, Any]:
    return spec_dict(hosts=[{"name": "h", "gpus": [0, 1, 2, 3], "docker": docker}])


def parsed(docker: Any) -> Spec:
    return parse_spec(with_docker(docker), source="t.yaml")


def refusal(docker: Any) -> str:
    with pytest.raises(SpecError) as caught:
        parsed(docker)
    return str(caught.value)


@pytest.mark.parametrize("name", ["gpu-b", "xpyd-hosta-1a2b", "default", "node_3.cluster+x", "A1"])
def test_context_names_docker_accepts(name: str) -> None:
    assert parsed({"context": name}).hosts[0].docker == DockerAccess(context=name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("-H", "is not a Docker context name"),  # would read as a flag of the docker CLI
        ("a", "is not a Docker context name"),  # docker wants two or more characters
        ("a b", "is not a Docker context name"),
        ("a/b", "is not a Docker context name"),
        ("../x", "is not a Docker context name"),
        ("x\ny", "contains a line break"),
        ("x\x1b[2J", "the control character U+001B"),
        ("x" * 129, "is 129 characters long"),
    ],
)
def test_context_names_refused(name: str, expected: str) -> None:
    text = refusal({"context": name})
    assert "hosts[0].docker.context: " in text
    assert expected in text
    assert "\n    fix: " in text


@pytest.mark.parametrize(
    "url",
    [
        "ssh://gpu-b",
        "ssh://ops@gpu-b.cluster.local",
        "ssh://ops@10.0.0.12:2222",
        "ssh://ops.admin_1@gpu-b:22",
        "tcp://10.0.0.12:2376",
        "tcp://gpu-b.cluster.local:2375",
        "unix:///var/run/docker.sock",
        "unix:///run/xpyd/hosta/docker.sock",
    ],
)
def test_urls_docker_accepts(url: str) -> None:
    assert parsed({"url": url}).hosts[0].docker == DockerAccess(url=url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("gpu-b", "is not an ssh://, tcp:// or unix:// Docker engine URL"),
        ("http://gpu-b:2375", "is not an ssh://, tcp:// or unix:// Docker engine URL"),
        ("npipe:////./pipe/docker_engine", "is not an ssh://, tcp:// or unix://"),
        ("tcp://gpu-b", "has no port (tcp://host:port)"),
        ("tcp://gpu-b:0", "has the port '0', not a number from 1 to 65535"),
        ("ssh://gpu-b:99999", "has the port '99999'"),
        ("ssh://gpu-b:ssh", "has the port 'ssh'"),
        ("ssh://", "has no host"),
        ("ssh://ops@", "has no host"),
        ("ssh://gpu-b/path", "is not an IPv4 address or a DNS host name"),
        ("ssh://gpu b", "is not an IPv4 address or a DNS host name"),
        ("ssh://[::1]:22", "has an IPv6 host"),
        ("ssh://-oProxyCommand=x", "is not an IPv4 address or a DNS host name"),
        ("ssh://-oProxyCommand=x@h", "holds credentials or a malformed user"),
        ("unix://docker.sock", "is not an absolute path"),
        ("unix:///var/run/../docker.sock", "has an empty, '.' or '..' part"),
        ("unix:///a b", "is not an absolute path"),
        ("ssh://gpu-b\n", "contains a line break"),
        ("tcp://gpu-b:2376\x00", "the control character U+0000"),
        ("ssh://" + "a" * 2100, "is 2106 characters long"),
    ],
)
def test_urls_refused(url: str, expected: str) -> None:
    text = refusal({"url": url})
    assert "hosts[0].docker.url: " in text
    assert expected in text
    assert "\n    fix: " in text


@pytest.mark.parametrize("url", ["tcp://ops:s3cret@gpu-b:2376", "ssh://ops:s3cret@gpu-b"])
def test_a_password_in_the_url_is_refused_and_never_shown(url: str) -> None:
    text = refusal({"url": url})
    assert "holds credentials" in text
    assert "s3cret" not in text
    assert "a value not shown: it may hold a password" in text


@pytest.mark.parametrize(
    ("docker", "found"),
    [({}, "gives neither"), ({"context": "a1", "url": "ssh://h"}, "gives both")],
)
def test_exactly_one_way_to_reach_the_engine(docker: dict[str, str], found: str) -> None:
    text = refusal(docker)
    assert f"hosts[0].docker: must give exactly one of context or url, but {found}" in text
    assert "remove hosts[].docker to use the local engine" in text


def test_unknown_keys_and_wrong_shapes_are_named() -> None:
    assert "hosts[0].docker.ssh: is not a known setting" in refusal({"ssh": "h"})
    assert "hosts[0].docker: " in refusal("ssh://h")


def test_the_plan_carries_each_hosts_engine_and_plan_json_omits_the_local_one() -> None:
    data = spec_dict(
        hosts=[
            {"name": "a", "address": "10.0.0.1", "gpus": [0, 1]},
            {"name": "b", "address": "10.0.0.2", "gpus": [0, 1], "docker": {"context": "b-x"}},
        ],
        placement={"prefill": {"hosts": "a"}, "decode": {"hosts": "b"}},
    )
    plan = make_plan(parse_spec(data, source="t.yaml"))
    assert plan.host("a").docker is None
    assert plan.host("b").docker == DockerAccess(context="b-x")
    hosts = json.loads(plan.model_dump_json())["hosts"]
    assert "docker" not in hosts[0]
    assert hosts[1]["docker"] == {"context": "b-x", "url": None}
