"""Issue 17, item 7: text that reaches a client names no address, whatever its form: URLs,
IPv4 and IPv6 literals (bare, bracketed, with a zone or a port), host:port names, and
Python's ('host', port) tuples; words and numbers that are not addresses stay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.proxy.config import BackendConfig
from generator.proxy.errors import Redactor

REDACT = Redactor([BackendConfig(name="decode-0", url="http://10.1.2.3:8200")])
LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,14}[a-z0-9]", fullmatch=True)
HOSTNAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
PORT = st.integers(10, 65535)
AROUND = st.sampled_from(["connect to {} failed", "{}", "({})", "'{}': refused", "at {}, then"])


@given(st.ip_addresses(v=6), AROUND)
def test_bare_ipv6_addresses_are_hidden(address: object, around: str) -> None:
    text = around.format(address)
    assert str(address) not in REDACT(text)
    assert "<address>" in REDACT(text)


@given(st.ip_addresses(v=6), PORT)
def test_bracketed_ipv6_with_a_port_is_hidden(address: object, port: int) -> None:
    assert REDACT(f"cannot reach [{address}]:{port} now") == "cannot reach <address> now"


@given(HOSTNAME, PORT, AROUND)
def test_host_port_names_are_hidden(host: str, port: int, around: str) -> None:
    redacted = REDACT(around.format(f"{host}:{port}"))
    assert f"{host}:{port}" not in redacted
    assert f":{port}" not in redacted


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://10.1.2.3:8200/v1 broke", "decode-0/v1 broke"),  # a configured backend: named
        ("10.1.2.3:8200 refused", "decode-0 refused"),
        ("fe80::1%eth0 unreachable", "<address> unreachable"),
        ("::ffff:192.0.2.1 closed", "<address> closed"),
        ("('::1', 8200, 0, 0) refused", "<address> refused"),
        ("node-3.example.com:443 timed out", "<address> timed out"),
    ],
)
def test_known_forms(text: str, expected: str) -> None:
    assert REDACT(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens must be at least 1, got 0",
        "at 12:30:45 the request was aborted",
        "ratio 3:2 is fine",
        "This model's maximum context length is 2048 tokens",
        "'max_tokens':5 is not allowed",
    ],
)
def test_text_without_addresses_stays(text: str) -> None:
    assert REDACT(text) == text
