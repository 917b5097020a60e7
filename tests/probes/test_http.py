"""The one HTTP adapter: its errors name the service and keep the backend's words, its JSON
reads name the key, and no other module of the package imports httpx. The network is
``httpx.MockTransport`` (httpx's own test double) answering what the handlers return."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.errors import ProbeError, StackError
from generator.probes.http import Origin, ProbeClient, Reply, backend_message

ROOT = Path(__file__).resolve().parents[2]
URL = "http://10.0.0.1:8000/v1/completions?token=secret"


def _client(status: int, body: bytes, content_type: str = "application/json") -> ProbeClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return ProbeClient("xpyd", transport=httpx.MockTransport(answer))


def test_a_router_502_names_the_router_keeps_its_message_and_hints_its_logs() -> None:
    body = b'{"error": {"message": "no decoder answered in 30 s", "type": "bad_gateway"}}'
    with _client(502, body) as client, pytest.raises(ProbeError) as caught:
        client.post_json("router", URL, {"prompt": "x"})
    error = caught.value
    assert error.message == (
        "router answered HTTP 502: no decoder answered in 30 s (on /v1/completions)"
    )
    assert error.hint == "look at its log: python -m generator logs xpyd router"
    assert "secret" not in str(error)
    assert "mozilla" not in str(error)
    assert isinstance(error, StackError)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"object": "error", "message": "prompt too long", "code": 400}', "prompt too long"),
        ('{"detail": "Not Found"}', "Not Found"),
        ('{"error": "upstream closed"}', "upstream closed"),
        ("<html>bad gateway</html>", "<html>bad gateway</html>"),
        ("", "(empty body)"),
    ],
)
def test_the_backends_own_message_is_kept_in_each_known_shape(body: str, message: str) -> None:
    assert backend_message(body) == message


@given(st.text(max_size=2000))
def test_any_error_body_gives_a_message_a_long_one_only_from_the_backend(body: str) -> None:
    message = backend_message(body)
    assert message
    assert len(message) <= 300 or message in body


def test_a_service_that_does_not_answer_is_named() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with ProbeClient("xpyd", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(ProbeError, match=r"^decode-0 did not answer \(ConnectError"):
            client.get_text("decode-0", "http://10.0.0.1:8200/metrics")
        assert client.answer("http://10.0.0.1:8200/health") is None


def test_a_missing_or_mistyped_key_names_the_key_and_the_service() -> None:
    with _client(200, b'{"count": "12"}') as client:
        reply = client.post_json("decode-0", "http://h:1/tokenize", {})
    with pytest.raises(ProbeError, match=r"decode-0 sent str as 'count', not a int \(on /tokenize"):
        reply.require("count", int)
    with pytest.raises(ProbeError, match=r"sent nothing as 'usage', not a dict"):
        reply.part("usage")


def test_a_bool_is_no_count() -> None:
    reply = Reply({"count": True}, Origin("xpyd", "decode-0", "/tokenize"))
    with pytest.raises(ProbeError):
        reply.require("count", int)


def test_a_body_that_is_no_json_object_is_a_probe_error() -> None:
    with _client(200, b"[1, 2]") as client, pytest.raises(ProbeError, match="JSON list"):
        client.get_json("router", "http://h:1/v1/models")
    with pytest.raises(ProbeError, match="not JSON"):
        Reply.parse("<html>", Origin("xpyd", "lmcache-prefill-0", "/status"))


def test_metrics_that_do_not_parse_name_the_engine() -> None:
    client = _client(200, b"vllm:x not-a-number\n", "text/plain")
    with client, pytest.raises(ProbeError, match="prefill-0 sent metrics that do not parse"):
        client.scrape("prefill-0", "http://h:1/metrics")


def test_a_stream_that_fails_keeps_the_routers_message() -> None:
    client = _client(503, b'{"error": {"message": "all prefillers down"}}')
    with client, pytest.raises(ProbeError, match="router answered HTTP 503: all prefillers down"):
        list(client.stream_lines("router", "http://h:1/v1/chat/completions", {}))


def _imports_httpx(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "httpx" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "httpx":
            return True
    return False


def test_only_the_adapter_imports_httpx() -> None:
    users = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "generator").rglob("*.py")
        if _imports_httpx(path)
    }
    assert users == {"generator/probes/http.py"}


def test_the_import_check_sees_a_function_level_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from httpx import get\n    return get\n", encoding="utf-8")
    assert _imports_httpx(module)
