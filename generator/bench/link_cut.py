"""`cut:HOST@T+D`: the host and every other host of the stack stop hearing each other for D s.
Each side drops what the other sends (generator/docker/netcut.py), so neither sees an error:
health checks and KV transfers across the cut time out, as on a pulled cable. The machine that
drives the drill is not a host of the stack and keeps reaching both sides."""

from __future__ import annotations

from collections.abc import Mapping

from generator.docker.netcut import cut_ruleset, load_ruleset, resolved, restore_ruleset
from generator.errors import XpydError
from generator.workflow.hosts import HostStack
from generator.workflow.runtimes.docker_host import docker_host

__all__ = ["cut_link", "restore_link"]

# Our own images carry nft (images/templates); upstream ones (Prometheus, Grafana) need not.
_OUR_ROLES = ("prefill", "decode", "lmcache", "router")


def cut_link(hosts: Mapping[str, HostStack], cut: str) -> str:
    """Cuts ``cut`` off from every other host; what was done, a line per host."""
    far = [name for name in hosts if name != cut]
    addresses = {name: resolved(stack.host.address) for name, stack in hosts.items()}
    lines = []
    for name, stack in hosts.items():
        sources = addresses[cut] if name != cut else [a for n in far for a in addresses[n]]
        endpoint = docker_host(stack, "a link cut").endpoint
        load_ruleset(endpoint, _nft_image(stack), cut_ruleset(sources))
        lines.append(f"{name} drops packets from {', '.join(sources)}")
    return "\n".join(lines)


def restore_link(hosts: Mapping[str, HostStack]) -> str:
    """Removes the cut from every host (nothing where there is none); the hosts it failed on."""
    failed = []
    for name, stack in hosts.items():
        try:
            endpoint = docker_host(stack, "a link cut").endpoint
            load_ruleset(endpoint, _nft_image(stack), restore_ruleset())
        except XpydError as error:
            failed.append(f"{name}: {error.message}")
    return "\n".join(failed)


def _nft_image(stack: HostStack) -> str:
    for service in stack.services.services:
        if service.role in _OUR_ROLES:
            return service.image.tag
    raise XpydError(
        f"host {stack.name} runs none of the stack's own images, which carry nft",
        hint="a link cut needs an engine, LMCache server or router on every host",
    )
