"""`cut:HOST@T+D`: the host and every other host of the stack stop hearing each other for D s.
Each side drops what the other sends (generator/docker/netcut.py), so neither sees an error:
health checks and KV transfers across the cut time out, as on a pulled cable. The machine that
drives the drill is not a host of the stack and keeps reaching both sides.

The rules go into each host's own network stack: under compose through its Docker engine (a
one-off container of the stack's images, which carry nft), under Slurm as a step of the job on
the host's node running the node's own ``nft`` (it needs root there, as any packet filter
does; the login node and slurmctld reach the node from addresses the cut leaves alone)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from generator.docker.netcut import cut_ruleset, load_ruleset, resolved, restore_ruleset
from generator.errors import XpydError
from generator.runtimes.launchers import Launcher
from generator.runtimes.process import ProcessStack
from generator.workflow.hosts import HostStack
from generator.workflow.runtimes.docker_host import DockerHost

_NFT_TIMEOUT_S = 60.0  # a step's start on a busy controller, then one nft transaction

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
        _load(stack, cut_ruleset(sources))
        lines.append(f"{name} drops packets from {', '.join(sources)}")
    return "\n".join(lines)


def restore_link(hosts: Mapping[str, HostStack]) -> str:
    """Removes the cut from every host (nothing where there is none); the hosts it failed on."""
    failed = []
    for name, stack in hosts.items():
        try:
            _load(stack, restore_ruleset())
        except XpydError as error:
            failed.append(f"{name}: {error.message}")
    return "\n".join(failed)


def _load(stack: HostStack, ruleset: str) -> None:
    """``nft RULESET`` in the host's own network stack."""
    if isinstance(stack, DockerHost):
        load_ruleset(stack.endpoint, _nft_image(stack), ruleset)
        return
    node = _remote_launcher(stack)
    done = node.run(["nft", ruleset], dict(os.environ), Path.cwd(), _NFT_TIMEOUT_S)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise XpydError(
            f"nft on host {stack.name}'s node exited {done.returncode}: {said}",
            hint="a link cut runs nft as a step of the job on each node of the stack: it needs "
            "root there and nftables installed",
        )


def _remote_launcher(stack: HostStack) -> Launcher:
    """Where the host's commands run on a machine of its own (a Slurm node, through steps of
    the job): its ``run`` reaches that machine's network stack, not this one's."""
    runtime = stack.runtime
    if isinstance(runtime, ProcessStack) and not runtime.launcher.local:
        return runtime.launcher
    raise XpydError(
        f"a link cut needs host {stack.name}'s own network stack, and this stack's runtime "
        "reaches none (a process runtime runs every service on this machine)",
        hint="cut hosts of a stack under compose (each host's Docker engine) or slurm (a step "
        "on each node)",
    )


def _nft_image(stack: HostStack) -> str:
    for service in stack.services.services:
        if service.role in _OUR_ROLES:
            return service.image.tag
    raise XpydError(
        f"host {stack.name} runs none of the stack's own images, which carry nft",
        hint="a link cut needs an engine, LMCache server or router on every host",
    )
