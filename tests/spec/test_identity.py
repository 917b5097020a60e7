"""Issue 17 item 11: host addresses are ones a peer can reach, and two hosts whose addresses
name one machine in different spellings are refused (the Docker engines' side is in
tests/workflow/test_engines.py)."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.errors import SpecError
from generator.spec import DockerAccess
from generator.spec.identity import LOCAL_MACHINE, engine_machine
from generator.stack import parse_spec
from tests.conftest import spec_dict


def two_hosts(address_a: str, address_b: str) -> dict[str, Any]:
    hosts = [
        {"name": "a", "address": address_a, "gpus": [0, 1]},
        {"name": "b", "address": address_b, "gpus": [0, 1]},
    ]
    return spec_dict(hosts=hosts, placement={"prefill": {"hosts": "a"}, "decode": {"hosts": "b"}})


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("address", "what"),
    [
        ("0.0.0.0", "the unspecified address (bind to all interfaces)"),
        ("255.255.255.255", "the broadcast address"),
        ("224.0.0.1", "a multicast address"),
        ("239.255.255.250", "a multicast address"),
        ("240.0.0.1", "a reserved address"),
    ],
)
def test_addresses_no_peer_can_reach_are_refused(address: str, what: str) -> None:
    message = refusal(spec_dict(hosts=[{"name": "h", "address": address, "gpus": [0, 1]}]))
    assert f"hosts[0].address: is {what}, which no peer can reach" in message


@pytest.mark.parametrize("address", ["999.1.1.1", "10.0.0.256", "10.1", "1.2.3", "gpu.42"])
def test_numbers_that_are_no_ipv4_address_are_refused(address: str) -> None:
    message = refusal(spec_dict(hosts=[{"name": "h", "address": address, "gpus": [0, 1]}]))
    assert "hosts[0].address: is neither a valid IPv4 address nor a DNS name" in message


@pytest.mark.parametrize(
    ("address_a", "address_b"),
    [
        ("gpu-a.example", "GPU-A.example"),
        ("10.0.0.1", "10.0.0.1"),
    ],
)
def test_one_machine_spelt_twice_is_refused(address_a: str, address_b: str) -> None:
    assert f"hosts[1].address: {address_b!r} is used by two hosts" in refusal(
        two_hosts(address_a, address_b)
    )


def test_localhost_and_127_0_0_1_are_one_address() -> None:
    message = refusal(two_hosts("127.0.0.1", "localhost"))
    assert "hosts[1].address: 'localhost' is used by two hosts" in message
    assert "loopback" not in message  # one problem, named once


def test_two_reachable_hosts_pass() -> None:
    spec = parse_spec(two_hosts("10.0.0.1", "gpu-b.cluster.local"), source="t.yaml")
    assert [host.address for host in spec.hosts] == ["10.0.0.1", "gpu-b.cluster.local"]


@given(st.ip_addresses(v=4))
def test_every_ipv4_address_is_accepted_unless_unreachable(address: IPv4Address) -> None:
    data = spec_dict(hosts=[{"name": "h", "address": str(address), "gpus": [0, 1]}])
    unreachable = address.is_multicast or address.is_unspecified or address.is_reserved
    if unreachable:
        with pytest.raises(SpecError, match="which no peer can reach"):
            parse_spec(data, source="t.yaml")
    else:
        assert parse_spec(data, source="t.yaml").hosts[0].address == str(address)


@given(st.from_regex(r"127(\.(0|[1-9][0-9]?)){3}|localhost|LocalHost", fullmatch=True))
def test_every_loopback_spelling_of_an_engine_is_one_engine(address: str) -> None:
    engine = DockerAccess(url=f"tcp://{address}:2375")
    assert engine_machine(engine) == engine_machine(DockerAccess(url="tcp://localhost:2375"))
    assert engine_machine(DockerAccess(url=f"ssh://ops@{address}")) == LOCAL_MACHINE
