"""A smoke run recorded from a live stack, and replayed without one.

``python -m tests.probes.recorded record STACK OUT.json`` runs the smoke verdict against the
running STACK through a transport that forwards every request to the real services and keeps
each exchange (the service, method, path, request body, status, headers and answer), in order,
and the lines of the services' logs it read (`python -m generator logs`) that name a request
(``req_id=``: LMCache's per-request lines; the rest is start-up noise).
``ReplayTransport`` answers the same requests with the recorded answers, so that a unit test
drives the real verdict over what real engines said (tests/probes/test_recorded_verdict.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import httpx

from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.probes import run_smoke
from generator.probes.http import read_here
from generator.stack import load_spec

NONCE = "recorded-1"  # the smoke's prompts carry it: a replay asks for the same ones
_KEPT_HEADERS = ("content-type", "x-xpyd-prefill", "x-xpyd-decode", "x-request-id")


def service_of(plan: Plan, port: int | None) -> str:
    for engine in plan.engines:
        if port == engine.http_port:
            return engine.name
        if port == getattr(engine.kv, "nixl_telemetry_port", None):
            return f"{engine.name}-nixl"
    if port == plan.router.port:
        return plan.router.service
    raise AssertionError(f"nothing of {plan.stack} listens on port {port}")


def _key(plan: Plan, request: httpx.Request) -> str:
    return f"{service_of(plan, request.url.port)} {request.method} {request.url.path}"


class RecordingTransport(httpx.BaseTransport):
    def __init__(self, plan: Plan) -> None:
        self.plan, self.exchanges = plan, list[dict[str, Any]]()
        self._real = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self._real.handle_request(request)
        body = answer.read()
        self.exchanges.append(
            {
                "key": _key(self.plan, request),
                "request": json.loads(request.content) if request.content else None,
                "status": answer.status_code,
                "headers": {k: v for k, v in answer.headers.items() if k in _KEPT_HEADERS},
                "body": body.decode("utf-8"),
            }
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=body)


class ReplayTransport(httpx.BaseTransport):
    """Each request gets the next recorded answer to the same service, method and path; a
    request the recording never saw fails the test."""

    def __init__(self, plan: Plan, exchanges: list[dict[str, Any]]) -> None:
        self.plan = plan
        self._queues: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for exchange in exchanges:
            self._queues[exchange["key"]].append(exchange)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        key = _key(self.plan, request)
        queue = self._queues.get(key)
        assert queue, f"the recording has no (more) answers for {key}"
        exchange = queue.popleft()
        sent = json.loads(request.content) if request.content else None
        assert sent == exchange["request"], f"{key}: asked otherwise than recorded"
        return httpx.Response(
            exchange["status"], headers=exchange["headers"], content=exchange["body"]
        )


def record(stack: str, out: Path) -> None:
    plan = make_plan(load_spec(Workspace(Path.cwd()).stack_file(stack)))
    transport = RecordingTransport(plan)
    kept: list[str] = []

    def logs(services: list[str]) -> str:
        for service in services:
            text = subprocess.run(
                [sys.executable, "-m", "generator", "logs", stack, service],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            kept.extend(line for line in text.splitlines() if "req_id=" in line)
        return "\n".join(kept)

    result = run_smoke(plan, nonce=NONCE, read_inside=read_here, transport=transport, logs=logs)
    out.write_text(
        json.dumps(
            {
                "stack": stack,
                "nonce": NONCE,
                "recorded": "a live stack (python -m tests.probes.recorded record)",
                "passed": result.passed,
                "rows": [[row.check, row.observed, row.mark] for row in result.rows],
                "exchanges": transport.exchanges,
                "logs": kept,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"{stack}: verdict {'PASS' if result.passed else 'FAIL'}, "
          f"{len(transport.exchanges)} exchanges -> {out}")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.probes.recorded record STACK OUT.json")
    record(sys.argv[2], Path(sys.argv[3]))
