"""Which machine a host setting names, whatever its spelling. Pure: no DNS, no docker CLI (a
context's target is docker's to know).

Two Docker engine settings are one engine when that is provable from their text: a URL's
scheme, its host (case, a trailing dot and the spelling of loopback do not matter) and its
port (the default filled in) are the same, or both name this machine's default engine (no
setting, the default socket, the ``default`` context, ssh to this machine's port 22). An
ssh user picks who logs in, not where: the same host and port is one machine for any user
(and two hosts on one machine share its network stack and GPUs, whoever drives them). A
different port or socket may well be another machine (a tunnel, a forwarded port, an engine
in another network namespace), so those stay apart."""

from __future__ import annotations

import ipaddress
import posixpath

from generator.spec.models import DockerAccess

__all__ = ["LOCAL_MACHINE", "engine_machine", "is_loopback", "machine_address"]

LOCAL_MACHINE = "the local machine"
_DEFAULT_PORTS = {"ssh": 22, "tcp": 2375}
_DEFAULT_CONTEXT = "default"  # the docker CLI's own: DOCKER_HOST, else the default socket


def machine_address(address: str) -> str:
    """``address`` as peers reach it: lowercase, no trailing dot, ``localhost`` is 127.0.0.1.
    Other loopback addresses are kept as written (``is_loopback`` tells they are this
    machine's)."""
    name = address.lower().rstrip(".")
    return "127.0.0.1" if name == "localhost" or name.endswith(".localhost") else name


def is_loopback(address: str) -> bool:
    """Whether ``address`` is this machine's own, reached through no network (127.0.0.0/8,
    ``localhost``)."""
    try:
        return ipaddress.ip_address(machine_address(address)).is_loopback
    except ValueError:
        return False  # a host name: its own machine, as far as the spec says


def engine_machine(access: DockerAccess | None) -> str:
    """The engine a host's setting reaches, in one spelling per provable engine: the same
    string for two settings means one engine, and so one machine."""
    if access is None or access.context == _DEFAULT_CONTEXT:
        return LOCAL_MACHINE
    if access.url is None:
        return f"context {access.context}"
    scheme, _, rest = access.url.partition("://")
    if scheme == "unix":
        path = posixpath.normpath(rest)
        return LOCAL_MACHINE if _is_default_socket(path) else f"unix://{path}"
    authority = rest.rpartition("@")[2]  # the ssh user: who logs in, not where
    host, _, written_port = authority.partition(":")
    port = int(written_port) if written_port else _DEFAULT_PORTS[scheme]
    if is_loopback(host):
        if scheme == "ssh" and port == _DEFAULT_PORTS["ssh"]:
            return LOCAL_MACHINE  # this machine's sshd; another port may be a tunnel
        # One port of this machine, whichever loopback address spells it.
        host = "127.0.0.1"
    return f"{scheme}://{machine_address(host)}:{port}"


def _is_default_socket(path: str) -> bool:
    # /var/run is a link to /run on current distributions.
    return path in ("/var/run/docker.sock", "/run/docker.sock")
