"""What "ready" means for each kind of service, as probes of its real endpoints."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from generator.errors import ProbeError
from generator.plan import EnginePlan, Plan
from generator.probes.http import Answer, ProbeClient, Transport
from generator.probes.waits import Check

__all__ = ["Router", "engine_checks", "routed_request", "router_checks", "router_of_plan"]

_ADMIT_POLL_S = 1.0


@dataclass(frozen=True)
class Router:
    """The stack's router as a probe sees it: its service name (for errors) and base URL."""

    service: str
    url: str


def _model_listed(model: str) -> Callable[[Answer], str | None]:
    def accept(answer: Answer) -> str | None:
        body = answer.json()
        entries = body.get("data") if isinstance(body, dict) else None
        served = [e.get("id") for e in entries if isinstance(e, dict)] if entries else []
        return None if model in served else f"model {model!r} not listed yet ({served})"

    return accept


def engine_checks(plan: Plan, engine: EnginePlan) -> list[Check]:
    """vLLM: /health answers (it refuses connections until startup completed), then
    /v1/models lists the served model. Never a completion: an lmcache-pd prefiller's engine
    crashes on a request without disagg_spec."""
    base = f"http://{plan.engine_address(engine)}:{engine.http_port}"
    model = plan.model.served_name
    return [Check(f"{base}/health"), Check(f"{base}/v1/models", _model_listed(model))]


def router_of_plan(plan: Plan) -> Router:
    address = plan.reach_address(plan.router.host)
    return Router(plan.router.service, f"http://{address}:{plan.router.port}")


def router_checks(plan: Plan) -> list[Check]:
    return [Check(f"{router_of_plan(plan).url}/health")]


def routed_request(
    plan: Plan,
    *,
    timeout_s: float = 120.0,
    admit_within_s: float = 30.0,
    transport: Transport | None = None,
) -> None:
    """One request through the router: /health alone says nothing about the backends
    (vllm-router kept calling a dead decoder healthy for over a minute). A refusal raises
    ``ProbeError`` with the router's own message."""
    body = {"model": plan.model.served_name, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    router = router_of_plan(plan)
    # A router up before its health checks re-admitted a restarted engine answers 503 for up
    # to one check interval (our proxy: "no healthy prefiller or decoder"): asked again.
    deadline = time.monotonic() + admit_within_s
    with ProbeClient(plan.stack, timeout_s=timeout_s, transport=transport) as client:
        while True:
            try:
                client.post_json(router.service, f"{router.url}/v1/completions", body)
                return
            except ProbeError as error:
                if error.status != 503 or time.monotonic() >= deadline:
                    raise
            time.sleep(_ADMIT_POLL_S)
