"""Which machine a host setting names, whatever its spelling: two hosts are one machine when
their Docker engines' URLs differ only in case, a default port, a user, or a loopback name,
or when one has no setting (the local engine) and the other names the local socket or a
loopback address. Pure: no DNS, no docker CLI (a context's target is docker's to know)."""

from __future__ import annotations

import ipaddress
import posixpath

from generator.spec.models import DockerAccess

__all__ = ["LOCAL_MACHINE", "engine_machine", "machine_address"]

LOCAL_MACHINE = "the local machine"
_DEFAULT_PORTS = {"ssh": "22", "tcp": "2375"}


def machine_address(address: str) -> str:
    """``address`` as peers reach it: lowercase, no trailing dot, ``localhost`` is 127.0.0.1.
    Other loopback addresses stay apart: one machine rehearses a multi-host stack with
    loopback aliases (127.0.0.2), each a host of its own."""
    name = address.lower().rstrip(".")
    return "127.0.0.1" if name == "localhost" or name.endswith(".localhost") else name


def _engine_host(host: str) -> str:
    """A Docker engine on any loopback address is the local machine's."""
    name = machine_address(host)
    try:
        return LOCAL_MACHINE if ipaddress.ip_address(name).is_loopback else name
    except ValueError:
        return name


def engine_machine(access: DockerAccess | None) -> str:
    """What a host's Docker engine runs on: a context by its name, a URL by its host (the
    user and the port do not change the machine; the local socket is the local machine)."""
    if access is None or access.url is None:
        return LOCAL_MACHINE if access is None else f"context {access.context}"
    scheme, _, rest = access.url.partition("://")
    if scheme == "unix":
        return LOCAL_MACHINE if _is_default_socket(rest) else f"unix socket {rest}"
    authority = rest.rpartition("@")[2]
    host, _, port = authority.partition(":")
    machine = _engine_host(host)
    if machine == LOCAL_MACHINE:
        return machine
    return f"{machine}:{port or _DEFAULT_PORTS[scheme]}" if scheme == "tcp" else machine


def _is_default_socket(path: str) -> bool:
    # /var/run is a link to /run on current distributions.
    return posixpath.normpath(path) in ("/var/run/docker.sock", "/run/docker.sock")
