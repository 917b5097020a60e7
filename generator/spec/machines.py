"""Hosts that would be one machine: two loopback addresses, or two Docker engine settings that
reach one engine (``identity.engine_machine``). A multi-host plan spreads ports, GPUs and
addresses over its hosts; on one machine they would collide.

Hosts without a ``docker`` setting are left to ``up`` (workflow/engines.py): a multi-host
stack that is only rendered needs none, and which engine the docker CLI reaches without one
depends on the shell that runs ``up`` (DOCKER_HOST, DOCKER_CONTEXT)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.spec.identity import engine_machine, is_loopback, machine_address
from generator.spec.models import HostSpec, Spec

__all__ = ["loopback_hosts", "shared_engines"]

_OWN_ENGINE_FIX = (
    "give each host its own engine: hosts[].docker: {context: NAME} (`docker context create "
    "NAME --docker host=ssh://user@host`) or {url: ssh://user@host}"
)


def loopback_hosts(spec: Spec) -> Iterator[SpecIssue]:
    """Every loopback address (127.0.0.0/8, localhost) is this machine: one network stack,
    however many addresses it answers on."""
    first: HostSpec | None = None
    for index, host in enumerate(spec.hosts):
        if "address" not in host.model_fields_set or not is_loopback(host.address):
            continue  # (not written: the runtime's to require or to bind)
        if first is None:
            first = host
        elif machine_address(host.address) != machine_address(first.address):
            # (One address twice is the duplicate address check's to name.)
            yield SpecIssue(
                f"hosts[{index}].address",
                f"{host.address!r} is a loopback address, as is host {first.name}'s "
                f"{first.address!r}: both are this one machine (one network stack), not two "
                "hosts",
                "give each host its address on the network the hosts share (rehearse "
                "several hosts on one machine with network namespaces, as "
                "tests/integration/hosts.py does)",
            )


def shared_engines(spec: Spec) -> Iterator[SpecIssue]:
    """Two hosts whose ``docker`` settings reach one engine, however they are spelt."""
    first: dict[str, str] = {}  # engine -> the first host that reaches it
    for index, host in enumerate(spec.hosts):
        access = host.docker
        if access is None or (access.context is None) == (access.url is None):
            continue  # none: up's to judge; both or neither: refused by its own check
        engine = engine_machine(access)
        if engine in first:
            yield SpecIssue(
                f"hosts[{index}].docker",
                f"reaches the Docker engine of host {first[engine]} ({engine}): two hosts "
                "would be one machine",
                _OWN_ENGINE_FIX,
            )
        else:
            first[engine] = host.name
