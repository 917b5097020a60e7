"""The smoke verdicts (P/D and colocated) driven through ``httpx.MockTransport``: a stand-in
for a live stack that answers the router's and engines' requests as they do and serves the
pages under tests/probes/pages/ (vLLM's /metrics, NIXL's telemetry) for each moment of the
smoke run. Real-stack runs (tests/integration) prove the same verdicts against real engines;
these pin how the verdict reads each counter, without a stack."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from generator.errors import ProbeError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes import SmokeResult, run_smoke
from generator.probes.requests import SMOKE_MAX_TOKENS
from generator.stack import baseline_spec, load_spec

PAGES = Path(__file__).parent / "pages"
STACK = "cpu-lmcache-pd"


def _no_read_inside(service: str, url: str) -> str:
    raise AssertionError(f"lmcache-pd has no LMCache server to read ({service} {url})")


@dataclass
class RecordedStack:
    """Answers as the stack's services would; ``served`` counts the router's answers, which
    picks each service's page (the newest page recorded at or before that count)."""

    plan: Plan
    scenario: str
    router_status: int = 200
    router_body: bytes = b""
    served: int = 0
    asked: list[str] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.answer)

    def answer(self, request: httpx.Request) -> httpx.Response:
        service = self._service(request.url.port)
        self.asked.append(f"{service} {request.url.path}")
        if request.url.path == "/metrics":
            return httpx.Response(200, text=self._page(service))
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": _tokens(body["prompt"])})
        if self.router_status != 200:
            return httpx.Response(self.router_status, content=self.router_body)
        self.served += 1
        if request.url.path == "/v1/completions":
            return self._completion(body)
        return self._chat()

    def _service(self, port: int | None) -> str:
        for engine in self.plan.engines:
            if port == engine.http_port:
                return engine.name
            if port == getattr(engine.kv, "nixl_telemetry_port", None):
                return f"{engine.name}-nixl"
        assert port == self.plan.router.port, f"nothing listens on port {port}"
        return self.plan.router.service

    def _page(self, service: str) -> str:
        for count in range(self.served, -1, -1):
            for folder in (self.scenario, self.scenario.split("-")[0] + "-pass"):
                page = PAGES / folder / f"{service}.{count}.prom"
                if page.is_file():
                    return page.read_text(encoding="utf-8")
        raise AssertionError(f"no page of {service} in {self.scenario}")

    def _completion(self, body: dict[str, object]) -> httpx.Response:
        prompt_tokens = _tokens(str(body["prompt"]))
        answer = {
            "id": "cmpl-5f0c",
            "object": "text_completion",
            "model": "tiny-llama",
            "choices": [{"index": 0, "text": " tensor" * SMOKE_MAX_TOKENS}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": SMOKE_MAX_TOKENS,
                "total_tokens": prompt_tokens + SMOKE_MAX_TOKENS,
            },
        }
        headers = {"X-Xpyd-Prefill": "prefill-0", "X-Xpyd-Decode": "decode-0"}
        return httpx.Response(200, json=answer, headers=headers)

    def _chat(self) -> httpx.Response:
        events = [{"choices": [{"delta": {"content": " kv"}}]} for _ in range(SMOKE_MAX_TOKENS)]
        lines = [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]
        return httpx.Response(200, text="".join(lines))


def _tokens(prompt: str) -> int:
    return len(prompt.split()) + 1  # a BOS token, as the tiny model's tokenizer adds


@pytest.fixture
def pd_plan(workspace: Workspace) -> Plan:
    return make_plan(load_spec(workspace.stack_file(STACK)))


@pytest.fixture
def colocated_plan(workspace: Workspace) -> Plan:
    spec = load_spec(workspace.stack_file(STACK))
    return make_plan(baseline_spec(spec, make_plan(spec)))


def _smoke(stack: RecordedStack) -> SmokeResult:
    return run_smoke(
        stack.plan, nonce="t1", read_inside=_no_read_inside, transport=stack.transport()
    )


def _marks(result: SmokeResult) -> dict[str, str]:
    return {row.check: row.mark for row in result.rows}


def test_pd_pass(pd_plan: Plan) -> None:
    result = _smoke(RecordedStack(pd_plan, "pd-pass"))
    assert _marks(result) == {
        "completion via router": "PASS",
        "streaming chat via router": "PASS",
        "prompt tokens from prefill (decode: external_kv_transfer)": "PASS",
        "prompt tokens computed on decode (local_compute)": "PASS",
        "KV loaded on decode (LMCache's log)": "info",  # no logs given: not judged
        "KV path speed (NIXL writes, per request)": "info",
        "router stamps prefill/decode pair": "PASS",
        "LMCache objects stored": "n/a",
        "session stickiness": "n/a",
    }
    assert result.passed
    rows = {row.check: row for row in result.rows}
    assert rows["prompt tokens from prefill (decode: external_kv_transfer)"].observed == "1536"
    assert rows["KV path speed (NIXL writes, per request)"].observed.startswith(
        "completion: 0.4 MiB in 1.85 ms"
    )
    assert result.kv_transfers[1]["mib"] == pytest.approx(0.375)
    assert result.chat_text == " kv" * SMOKE_MAX_TOKENS


def test_pd_with_the_kv_recomputed_on_the_decoder_fails(pd_plan: Plan) -> None:
    result = _smoke(RecordedStack(pd_plan, "pd-recomputed"))
    failed = {row.check: row.observed for row in result.rows if row.passed is False}
    assert failed == {
        "prompt tokens from prefill (decode: external_kv_transfer)": "0",
        "prompt tokens computed on decode (local_compute)": "1538",
    }
    assert not result.passed


def test_colocated_pass(colocated_plan: Plan) -> None:
    result = _smoke(RecordedStack(colocated_plan, "colocated-pass"))
    assert [(row.check, row.observed, row.mark) for row in result.rows] == [
        ("completion via router", f"{SMOKE_MAX_TOKENS} tokens", "PASS"),
        ("streaming chat via router", f"{SMOKE_MAX_TOKENS} chunks, [DONE]", "PASS"),
        ("prompt tokens received as KV (all engines: external_kv_transfer)", "0", "PASS"),
        ("prompt tokens computed by the engines (local_compute)", "1541", "PASS"),
        ("engines that served (round robin)", "decode-0, prefill-0", "PASS"),
    ]
    assert result.passed


def test_colocated_with_kv_arriving_fails(colocated_plan: Plan) -> None:
    result = _smoke(RecordedStack(colocated_plan, "colocated-kv"))
    failed = [(row.check, row.observed) for row in result.rows if row.passed is False]
    assert failed == [("prompt tokens received as KV (all engines: external_kv_transfer)", "768")]


def test_a_router_502_names_the_router_keeps_its_message_and_hints_its_logs(
    pd_plan: Plan,
) -> None:
    body = {"error": {"message": "decode-0 refused the request: HTTP 400", "type": "BadGateway"}}
    stack = RecordedStack(pd_plan, "pd-pass", 502, json.dumps(body).encode())
    with pytest.raises(ProbeError) as caught:
        _smoke(stack)
    assert caught.value.message == (
        "router answered HTTP 502: decode-0 refused the request: HTTP 400 (on /v1/completions)"
    )
    assert caught.value.hint == f"look at its log: python -m generator logs {STACK} router"
    assert stack.asked[-1] == "router /v1/completions"
