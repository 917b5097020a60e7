"""A link cut between hosts, made inside each host's own network stack: a one-off container of
one of the stack's images (they carry nftables' `nft`), with host networking and NET_ADMIN,
loads a table that drops every packet arriving from the far side. It hooks in before
connection tracking (priority raw), so established connections stall as on a pulled cable: a
sender sees silence, never an error. Deleting the table restores the link; nothing else of the
host's firewall is touched."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from generator.docker.endpoint import DockerEndpoint, client, translated
from generator.errors import DockerError

__all__ = ["TABLE", "cut_ruleset", "load_ruleset", "resolved", "restore_ruleset"]

TABLE = "xpyd_link_cut"  # one name: a cut left by a killed run is found and removed by it


def resolved(address: str) -> list[str]:
    """``address`` as IP addresses (a host name resolved here, on the machine driving the
    hosts: nft matches addresses, not names)."""
    try:
        return [str(ipaddress.ip_address(address))]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise DockerError(
            f"cannot resolve host address {address!r} for a link cut: {exc}",
            command=[],
            output="",
            hint="give hosts[].address as an IP address",
        ) from None
    return sorted({str(info[4][0]) for info in found})


def cut_ruleset(sources: Sequence[str]) -> str:
    """nft commands that drop every packet from ``sources`` (IP addresses), in one transaction.
    A table left by an earlier cut is replaced, not added to."""
    by_family: dict[int, list[str]] = {4: [], 6: []}
    for source in sources:
        by_family[ipaddress.ip_address(source).version].append(source)
    chain = "{ type filter hook input priority raw; policy accept; }"
    commands = [*restore_commands(), f"add table inet {TABLE}"]
    commands.append(f"add chain inet {TABLE} input {chain}")
    for version, keyword in ((4, "ip"), (6, "ip6")):
        if by_family[version]:
            listed = ", ".join(by_family[version])
            commands.append(f"add rule inet {TABLE} input {keyword} saddr {{ {listed} }} drop")
    return "; ".join(commands)


def restore_commands() -> list[str]:
    # `add` first: deleting a table that is not there is an error, adding one that is, not.
    return [f"add table inet {TABLE}", f"delete table inet {TABLE}"]


def restore_ruleset() -> str:
    return "; ".join(restore_commands())


def load_ruleset(endpoint: DockerEndpoint, image: str, ruleset: str) -> None:
    """Runs ``nft RULESET`` in the host's network namespace, through its own Docker engine."""
    with translated(
        f"changing the packet filter on {endpoint.label}",
        hint=f"every xpyd image carries nft (an older one: `up` rebuilds it); the rules by "
        f"hand, on that host: nft '{ruleset}'",
    ):
        client(endpoint).run(
            image,
            [ruleset],
            entrypoint="nft",
            networks=["host"],
            cap_add=["NET_ADMIN"],
            remove=True,
        )
