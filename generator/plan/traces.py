"""Where a stack's traces go (spec ``observe.traces``), from the plan alone: the receiver's
address as the engines and LMCache servers reach it, and whether LMCache servers trace (and so
push their metrics) there. The receivers themselves are generator/observe/'s."""

from __future__ import annotations

from typing import Final

from generator.plan import Plan

__all__ = [
    "RECEIVER_IN_CHECKOUT",
    "RECEIVER_IN_IMAGE",
    "collector_bind",
    "lmcache_pushes_metrics",
    "receiver_url",
    "traces_endpoint",
]

RECEIVER_IN_IMAGE: Final = "/opt/xpyd/otlp_receiver.py"  # copied into the engine images
RECEIVER_IN_CHECKOUT: Final = "generator/observe/otlp_receiver.py"


def _across_hosts(plan: Plan) -> bool:
    return plan.is_multi_host or (plan.observe is not None and plan.observe.public)


def collector_bind(plan: Plan) -> str:
    """Loopback unless engines on other hosts send to it (or observe.publish)."""
    return "0.0.0.0" if plan.network == "bridge" or _across_hosts(plan) else "127.0.0.1"


def traces_endpoint(plan: Plan) -> str | None:
    """Where the engines send their spans (None: traces off)."""
    observe = plan.observe
    if observe is None or observe.otel_port is None:
        return None
    if plan.network == "bridge":
        host = observe.traces_service  # by its name on the stack's network
    else:
        host = observe.address if plan.is_multi_host else "127.0.0.1"
    return f"grpc://{host}:{observe.otel_port}"


def lmcache_pushes_metrics(plan: Plan) -> bool:
    """LMCache servers trace where our receiver takes the traces: with ``--otlp-endpoint``
    they push their metrics there too (their own /metrics keeps Python's counters alone), and
    Prometheus reads them from the receiver. The Collector's config has no metrics pipeline:
    its stacks keep LMCache servers untraced, their metrics on their own page."""
    observe = plan.observe
    return observe is not None and observe.receiver_http_port is not None


def receiver_url(plan: Plan) -> str | None:
    """Where LMCache servers send (LMCache's --otlp-endpoint form); None: they do not."""
    endpoint = traces_endpoint(plan)
    if endpoint is None or not lmcache_pushes_metrics(plan):
        return None
    return "http://" + endpoint.removeprefix("grpc://")
