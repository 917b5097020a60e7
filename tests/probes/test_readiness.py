"""Readiness probes through ``httpx.MockTransport`` (a stand-in for the engines and router):
an engine is ready once /health answers and /v1/models lists the served model; the routed
request after /health names the router and keeps its message when it is refused."""

from __future__ import annotations

import time

import httpx
import pytest

from generator.errors import ProbeError, StackError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes import wait_until_ready
from generator.probes.readiness import engine_checks, routed_request
from generator.stack import load_spec


@pytest.fixture
def plan(workspace: Workspace) -> Plan:
    return make_plan(load_spec(workspace.stack_file("cpu-lmcache-pd")))


def _engine(listed: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, json={"object": "list", "data": [{"id": m} for m in listed]})

    return httpx.MockTransport(answer)


def _wait(plan: Plan, transport: httpx.MockTransport, deadline_s: float) -> float:
    return wait_until_ready(
        "decode-0",
        engine_checks(plan, plan.decode[0]),
        deadline_s=deadline_s,
        assert_alive=lambda: None,
        progress=lambda _: None,
        transport=transport,
    )


def test_an_engine_listing_its_model_is_ready(plan: Plan) -> None:
    assert _wait(plan, _engine(["tiny-llama"]), 5.0) < 5.0


def test_an_engine_listing_another_model_is_not_ready(plan: Plan) -> None:
    with pytest.raises(StackError, match=r"model 'tiny-llama' not listed yet \(\['other'\]\)"):
        _wait(plan, _engine(["other"]), 0.5)


def test_a_refused_routed_request_names_the_router_and_keeps_its_message(plan: Plan) -> None:
    body = {"error": {"message": "no prefiller is healthy", "type": "ServiceUnavailable"}}
    refuse = httpx.MockTransport(lambda _: httpx.Response(503, json=body))
    with pytest.raises(ProbeError) as caught:
        routed_request(plan, transport=refuse, admit_within_s=0.5)
    assert caught.value.status == 503
    assert caught.value.message == (
        "router answered HTTP 503: no prefiller is healthy (on /v1/completions)"
    )
    assert caught.value.hint == "look at its log: python -m generator logs cpu-lmcache-pd router"


def test_a_router_that_has_not_re_admitted_its_engines_yet_is_asked_again(plan: Plan) -> None:
    """After an engine restarted, a router answers 503 until its next health check: `up`
    asks again within admit_within_s; any other refusal fails at once."""
    answers = [503, 503, 200]

    def respond(_: httpx.Request) -> httpx.Response:
        status = answers.pop(0)
        body = {"error": {"message": "no healthy prefiller or decoder"}} if status == 503 else {}
        return httpx.Response(status, json=body)

    routed_request(plan, transport=httpx.MockTransport(respond), admit_within_s=10)
    assert answers == []
    broken = httpx.MockTransport(lambda _: httpx.Response(500, json={"error": "boom"}))
    started = time.monotonic()
    with pytest.raises(ProbeError) as caught:
        routed_request(plan, transport=broken, admit_within_s=10)
    assert caught.value.status == 500
    assert time.monotonic() - started < 1.0
