"""What "ready" means for each kind of service, as probes of its real endpoints."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from generator.errors import StackError
from generator.plan import EnginePlan, Plan
from generator.probes.waits import Check

__all__ = ["engine_checks", "routed_request", "router_checks", "router_url"]


def _model_listed(model: str) -> Callable[[httpx.Response], str | None]:
    def accept(response: httpx.Response) -> str | None:
        served = [entry.get("id") for entry in response.json().get("data", [])]
        return None if model in served else f"model {model!r} not listed yet ({served})"

    return accept


def served_model(plan: Plan) -> str:
    return plan.model.served_name


def engine_checks(plan: Plan, engine: EnginePlan) -> list[Check]:
    """vLLM: /health answers (it refuses connections until startup completed), then
    /v1/models lists the served model. Never a completion: an lmcache-pd prefiller's engine
    crashes on a request without disagg_spec."""
    base = f"http://{plan.reach_address(engine.host)}:{engine.http_port}"
    return [Check(f"{base}/health"), Check(f"{base}/v1/models", _model_listed(served_model(plan)))]


def router_url(plan: Plan) -> str:
    return f"http://{plan.reach_address(plan.router.host)}:{plan.router.port}"


def router_checks(plan: Plan) -> list[Check]:
    return [Check(f"{router_url(plan)}/health")]


def routed_request(plan: Plan, timeout_s: float = 120.0) -> None:
    """One request through the router: /health alone says nothing about the backends
    (vllm-router kept calling a dead decoder healthy for over a minute)."""
    body = {"model": served_model(plan), "prompt": "ping", "max_tokens": 1, "temperature": 0}
    url = f"{router_url(plan)}/v1/completions"
    response = httpx.post(url, json=body, timeout=timeout_s)
    if response.status_code != 200:
        raise StackError(
            f"router is healthy but a routed request got HTTP {response.status_code}: "
            f"{response.text[:300]}",
            hint="check the router and engine logs",
        )
