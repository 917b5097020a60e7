"""What each spec string is, checked before anything renders it.

Spec strings end up in Dockerfile lines, command lines, config files and compose values, so
each field has a type that says what it is (image reference, PEP 440 version, URL, hub model
id or absolute path, POSIX env var name, host address, header name, path in the checkout)
and accepts nothing else. No type admits newlines or control characters: a line break in a
value would start a new Dockerfile instruction or YAML key. Rejections raise
``PydanticCustomError("xpyd_value", ...)`` whose context carries the ``fix`` that
``load.py`` shows.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_core import PydanticCustomError

from generator.limits import STACK_NAME_MAX, STACK_NAME_PATTERN

__all__ = [
    "AbsolutePath",
    "Arg",
    "CheckoutPath",
    "CsvDeviceIds",
    "CsvHostNames",
    "CsvPorts",
    "DnsLabel",
    "DockerContextName",
    "DockerUrl",
    "EnvName",
    "EnvValue",
    "HeaderName",
    "HostAddress",
    "ImageRef",
    "ModelRef",
    "NixlBackend",
    "Port",
    "Repository",
    "ServedName",
    "Text",
    "TokenPath",
    "UcxDevices",
    "UcxTransports",
    "Version",
    "Word",
    "refuse",
]

# Unicode categories never allowed: control (Cc), format (Cf: bidi overrides, zero-width
# marks), surrogates (Cs), line and paragraph separators (Zl, Zp).
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def refuse(problem: str, fix: str) -> PydanticCustomError:
    """The one error a spec type raises: ``load.py`` turns it into a SpecIssue."""
    return PydanticCustomError("xpyd_value", "{problem}", {"problem": problem, "fix": fix})


def _control_chars(value: str) -> str | None:
    for char in value:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            return f"U+{ord(char):04X}"
    return None


def _single_line(value: str) -> str:
    found = _control_chars(value)
    if found is not None:
        what = "a line break" if found in ("U+000A", "U+000D") else f"the control character {found}"
        raise refuse(f"contains {what}", "write it on one line, without control characters")
    return value


def _shaped(
    pattern: str, what: str, example: str, *, max_length: int = 255
) -> Callable[[str], str]:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        _single_line(value)
        if len(value) > max_length:
            raise refuse(
                f"is {len(value)} characters long; {what} has at most {max_length}",
                "shorten it",
            )
        if not compiled.fullmatch(value):
            raise refuse(f"is not {what}", f"write it like {example}")
        return value

    return check


_PATH_PART = r"[A-Za-z0-9_@+][A-Za-z0-9._@+-]*|\.[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*"
_RELATIVE = rf"(?:{_PATH_PART})(?:/(?:{_PATH_PART}))*/?"


def _no_dot_parts(value: str) -> str:
    # `..` would leave the folder the path is confined to; `.` parts and `//` hide that.
    if any(part in ("", ".", "..") for part in value.strip("/").split("/")):
        raise refuse("has an empty, '.' or '..' part", "write a plain path without them")
    return value


_check_absolute = _shaped(
    rf"/{_RELATIVE}",
    "an absolute path of letters, digits and . _ - + @ (no spaces or ':')",
    "/srv/models/llama",
    max_length=4096,
)
_check_relative = _shaped(
    _RELATIVE,
    "a relative path of letters, digits and . _ - + @ (no spaces or ':')",
    "secrets/hf_token",
    max_length=4096,
)


def _absolute_path(value: str) -> str:
    return _check_absolute(_no_dot_parts(_single_line(value)))


def _checkout_path(value: str) -> str:
    if value.startswith("/"):
        raise refuse("is absolute, but must lie inside the checkout", "give a relative path")
    return _check_relative(_no_dot_parts(_single_line(value)))


def _token_path(value: str) -> str:
    return _absolute_path(value) if value.startswith("/") else _checkout_path(value)


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


def _model_ref(value: str) -> str:
    _single_line(value)
    if value.startswith("/"):
        return _absolute_path(value)
    if not _HUB_ID.fullmatch(value) or ".." in value:
        raise refuse(
            "is neither a Hugging Face model id nor an absolute path",
            "write org/name (e.g. meta-llama/Llama-3.1-8B-Instruct) or /path/in/the/container",
        )
    return value


# The reference grammar of the distribution project (docker/distribution reference.go).
_DOMAIN_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
# As docker reads it: a first part is a registry only with a dot, a port, or "localhost".
_DOMAIN = (
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})+(?::[0-9]{{1,5}})?"
    rf"|{_DOMAIN_PART}:[0-9]{{1,5}}|localhost)"
)
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

_check_image = _shaped(
    rf"{_NAME}(?:{_TAG})?(?:{_DIGEST})?",
    "an image reference",
    "vllm/vllm-openai:v0.11.0 or registry.example:5000/team/vllm@sha256:<64 hex>",
)
_check_repository = _shaped(
    _NAME, "an image repository (no tag)", "xpyd or registry.example:5000/team"
)

# PEP 440 versions in normal form (what pip prints): 0.11.0, 1.0rc1, 2.9.0.post1, 2.9.0+cpu.
_check_version = _shaped(
    r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?",
    "a PEP 440 version in normal form",
    "0.11.0, 0.5.6rc1 or 2.9.0+cpu",
    max_length=64,
)

# Index URLs land in Dockerfile ARG values: nothing that quotes, expands or ends a word there.
_check_url = _shaped(
    r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%/+=?&:,;!*-]*)?",
    "an http(s) URL without spaces, quotes, '$', '#' or '\\'",
    "https://pypi.example/simple",
    max_length=2048,
)


def _url(value: str) -> str:
    authority = value.partition("://")[2].split("/", 1)[0]
    if "@" in authority:
        raise refuse(
            "holds credentials (user@host): they would be written into the image",
            "drop them from the URL and give pip its credentials through netrc or a keyring",
        )
    return _check_url(value)


def _host_address(value: str) -> str:
    _single_line(value)
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return _dns_name(value)
    if address.version == 6:
        raise refuse(
            "is an IPv6 address; engines and the router are reached by http://address:port",
            "use an IPv4 address or a host name that resolves to the host",
        )
    unreachable = _unreachable(address)
    if unreachable is not None:
        raise refuse(
            f"is {unreachable}, which no peer can reach the host at",
            "give the host's own unicast address (see `ip -4 addr`) or its DNS name",
        )
    return value


def _unreachable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if address.is_unspecified:
        return "the unspecified address (bind to all interfaces)"
    if address.is_multicast:
        return "a multicast address"
    if address == ipaddress.IPv4Address("255.255.255.255"):
        return "the broadcast address"
    if address.is_reserved:
        return "a reserved address"
    return None


def _dns_name(value: str) -> str:
    """A name whose last label is all digits is an IPv4 address misspelt (999.1.1.1, 10.1)
    or one that resolvers read as a number: no top-level domain is numeric (RFC 3696)."""
    _check_hostname(value)
    if value.rstrip(".").rsplit(".", 1)[-1].isdigit():
        raise refuse("is neither a valid IPv4 address nor a DNS name", "write a.b.c.d (0-255)")
    return value


# What the docker CLI accepts as a context name (docker/cli, store.go: restrictedNamePattern).
_check_context = _shaped(
    r"[A-Za-z0-9][A-Za-z0-9_.+-]+",
    "a Docker context name (letters, digits, '_', '.', '+', '-'; two or more, no leading '-')",
    "gpu-node-3 (see `docker context ls`)",
    max_length=128,
)

_URL_FIX = "write ssh://[user@]host[:port], tcp://host:port or unix:///absolute/path.sock"
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_URL_PORT = re.compile(r"[0-9]{1,5}")


def _docker_url(value: str) -> str:
    """How the docker CLI reaches an engine (``docker -H``): ssh, tcp or a unix socket.
    A password in the URL would land in run records and process lists: refused."""
    _single_line(value)
    if len(value) > 2048:
        raise refuse(f"is {len(value)} characters long; at most 2048", "shorten it")
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("ssh", "tcp", "unix"):
        raise refuse("is not an ssh://, tcp:// or unix:// Docker engine URL", _URL_FIX)
    if scheme == "unix":
        _absolute_path(rest)
    else:
        _remote_authority(scheme, rest)
    return value


def _remote_authority(scheme: str, rest: str) -> None:
    """``[user@]host[:port]`` of an ssh or tcp URL, and nothing after it."""
    user, at, authority = rest.rpartition("@")
    if at and (scheme == "tcp" or not _SSH_USER.fullmatch(user)):
        raise refuse(
            "holds credentials or a malformed user before '@'",
            "ssh: give only a user name (ssh://user@host), keys come from ssh-agent or "
            "~/.ssh/config; tcp: no user at all (TLS settings belong in a docker context)",
        )
    if authority.startswith("["):
        raise refuse("has an IPv6 host", "use the host's IPv4 address or a DNS name")
    host, colon, port = authority.partition(":")
    if scheme == "tcp" and not colon:
        raise refuse("has no port (tcp://host:port)", "add the engine's port, e.g. :2376")
    if colon and not (_URL_PORT.fullmatch(port) and 1 <= int(port) <= 65535):
        raise refuse(f"has the port {port!r}, not a number from 1 to 65535", _URL_FIX)
    if not host:
        raise refuse("has no host", _URL_FIX)
    _url_host(host)


def _url_host(host: str) -> None:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        _check_hostname(host)


_check_hostname = _shaped(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
    "an IPv4 address or a DNS host name",
    "10.0.0.12 or gpu-node-3.cluster.local",
)

_check_label = _shaped(
    STACK_NAME_PATTERN,
    f"a name of lowercase letters, digits and '-' (at most {STACK_NAME_MAX}, not starting or "
    "ending with '-')",
    "xpyd-mp",
    max_length=STACK_NAME_MAX,
)


def _split_csv(value: object) -> object:
    """Seed-style CSV strings ("a,b", "0, 1") wherever a list is expected; an empty part stays
    and fails its item's check instead of vanishing."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",")]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


def _split_csv_ints(value: object) -> object:
    """As ``_split_csv``, and "0,1" gives integers; anything else is left for the int check."""
    parts = _split_csv(value)
    if isinstance(value, str) and isinstance(parts, list):
        return [int(part) if re.fullmatch(r"[0-9]{1,6}", part) else part for part in parts]
    return parts


def _distinct(values: list[int]) -> list[int]:
    seen: set[int] = set()
    for value in values:
        if value in seen:
            raise refuse(f"lists {value} twice", "list each device once")
        seen.add(value)
    return values


# pyxis's --container-image (its args.c): an enroot URI, [USER@][REGISTRY#]IMAGE[:TAG], the
# registry set off by "#", or the absolute path of a squashfs file on the nodes.
_ENROOT_URI = re.compile(
    r"(?:[A-Za-z0-9._-]{1,64}@)?(?:[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?#)?"
    r"[a-z0-9][a-z0-9._/-]{0,254}(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
)
# A mount of pyxis's --container-mounts, SRC:DST[:FLAGS]: "," separates mounts and "+" a mount's
# flags. Absolute paths only: a relative one would be the step's working directory's.
_PYXIS_MOUNT = re.compile(
    r"(/[A-Za-z0-9._/@+-]*):(/[A-Za-z0-9._/@+-]*)(?::([a-z_=]+(?:\+[a-z_=]+)*))?"
)
_IMAGE_PYTHON = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def _enroot_image(value: str) -> str:
    value = _single_line(value)
    if value.startswith("/"):
        return _absolute_path(value)
    if not _ENROOT_URI.fullmatch(value):
        raise refuse(
            "is neither an enroot image URI nor a squashfs file's absolute path",
            "write [USER@][REGISTRY#]IMAGE[:TAG], the registry set off by # "
            "(nvcr.io#nvidia/pytorch:24.01-py3), or /path/to/image.sqsh",
        )
    first, _, rest = value.rpartition("@")[2].partition("/")
    if "#" not in value and rest and ("." in first or ":" in first or first == "localhost"):
        # enroot would look for an image named after the host on its default registry.
        raise refuse(
            f"names the registry {first} with /, which enroot reads as part of the image name",
            f"set the registry off with #: {value.replace('/', '#', 1)}",
        )
    return value


def _pyxis_mount(value: str) -> str:
    found = _PYXIS_MOUNT.fullmatch(_single_line(value))
    if found is None:
        raise refuse(
            "is not a pyxis mount",
            "write SRC:DST or SRC:DST:FLAGS, absolute paths, flags joined by + (/data:/data:ro)",
        )
    _no_dot_parts(found[1])
    _no_dot_parts(found[2])
    return value


def _image_python(value: str) -> str:
    if value.startswith("/"):
        return _absolute_path(value)
    if not _IMAGE_PYTHON.fullmatch(value):
        raise refuse(
            "is not a command name",
            "give a name on the image's PATH (python3) or its absolute path",
        )
    return value


Word = Annotated[str, AfterValidator(_single_line), Field(min_length=1, max_length=4096)]
Arg = Annotated[str, AfterValidator(_single_line), Field(min_length=1, max_length=65536)]
EnvValue = Annotated[str, AfterValidator(_single_line), Field(max_length=65536)]
Text = Annotated[str, AfterValidator(_single_line), Field(max_length=65536)]
EnvName = Annotated[
    str,
    AfterValidator(
        _shaped(r"[A-Za-z_][A-Za-z0-9_]*", "a POSIX environment variable name", "MY_SETTING")
    ),
]
DnsLabel = Annotated[str, AfterValidator(_check_label)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
CheckoutPath = Annotated[str, AfterValidator(_checkout_path)]
TokenPath = Annotated[str, AfterValidator(_token_path)]
ModelRef = Annotated[str, AfterValidator(_model_ref)]
ImageRef = Annotated[str, AfterValidator(_check_image)]
EnrootImage = Annotated[str, AfterValidator(_enroot_image)]
PyxisMount = Annotated[str, AfterValidator(_pyxis_mount)]
ImagePython = Annotated[str, AfterValidator(_image_python)]
Repository = Annotated[str, AfterValidator(_check_repository)]
Version = Annotated[str, AfterValidator(_check_version)]
Url = Annotated[str, AfterValidator(_url)]
HostAddress = Annotated[str, AfterValidator(_host_address)]
DockerContextName = Annotated[str, AfterValidator(_check_context)]
DockerUrl = Annotated[str, AfterValidator(_docker_url)]
ServedName = Annotated[
    str,
    AfterValidator(
        _shaped(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*", "a model name without spaces", "llama-3.1-8b")
    ),
]
# RFC 9110 field names (tokens).
HeaderName = Annotated[
    str,
    AfterValidator(_shaped(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", "an HTTP header name", "x-session-id")),
]
UcxTransports = Annotated[
    str,
    AfterValidator(
        _shaped(
            r"\^?[a-z0-9_]+(?::aux)?(?:,[a-z0-9_]+(?::aux)?)*",
            "a comma-separated UCX transport list",
            "cuda_ipc,cuda_copy,rc or ^tcp",
        )
    ),
]
UcxDevices = Annotated[
    str,
    AfterValidator(
        _shaped(
            r"[A-Za-z0-9_.:-]+(?:,[A-Za-z0-9_.:-]+)*",
            "a comma-separated UCX device list",
            "all or mlx5_0:1,mlx5_1:1",
        )
    ),
]
NixlBackend = Annotated[
    str, AfterValidator(_shaped(r"[A-Za-z0-9_]+", "a NIXL backend name", "UCX"))
]
Port = Annotated[int, Field(ge=1024, le=65535)]
DeviceId = Annotated[int, Field(ge=0, le=4095)]
CsvHostNames = Annotated[list[DnsLabel], BeforeValidator(_split_csv)]
CsvPorts = Annotated[list[Port], BeforeValidator(_split_csv_ints)]
CsvDeviceIds = Annotated[
    list[DeviceId], BeforeValidator(_split_csv_ints), AfterValidator(_distinct)
]
