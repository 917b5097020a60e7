"""The smoke verdict from a pod of the stack's own network (a Kubernetes Job of the export):
``python -m generator.probes.in_cluster --plan PLAN.json --addresses ADDRESSES.json``.

The probes dial a bridge stack's ports on loopback, where ``up`` reaches them published; here
each port goes to its owner by its name on the network instead (ADDRESSES.json: port -> name,
``serializers/kubernetes/verdict.py``'s ``network_names``).

It waits (bounded) until every engine and the router answer as ``up``'s waits ask, sends one
request through the router, then runs the same smoke verdict ``up`` prints. What only a
service's own container can read (an LMCache server's API on its loopback, UCX's transport in
its log) is left unjudged and says so: a pod cannot exec into another without RBAC and a
kubectl. Prints the verdict as text and one JSON line (``kubectl logs job/verdict``); the exit
status is 0 for PASS, 1 for FAIL, 2 when the stack was not ready in time or the plan is bad.

It imports pydantic, httpx, prometheus_client, PyYAML and tenacity only (the router image's lock
has them, and its build imports this module): no Docker, no rich, no typer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from generator.errors import StackError
from generator.plan import Plan
from generator.probes.http import NetworkNames, Transport
from generator.probes.readiness import engine_checks, routed_request, router_checks
from generator.probes.smoke import run_smoke
from generator.probes.verdict import SmokeResult
from generator.probes.waits import Check, wait_until_ready

__all__ = ["load_addresses", "load_plan", "main", "verdict_text", "wait_for_stack"]

_PLAN_MAX_BYTES = 1 << 20  # a ConfigMap's own limit
_Port = Annotated[int, Field(ge=1, le=65535)]
_Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
_ADDRESSES: TypeAdapter[dict[_Port, _Name]] = TypeAdapter(dict[_Port, _Name])
EXIT_PASS, EXIT_FAIL, EXIT_NOT_READY = 0, 1, 2


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m generator.probes.in_cluster",
        description="The stack's smoke verdict, from a pod on its network.",
    )
    parser.add_argument("--plan", type=Path, required=True, help="the stack's plan.json")
    parser.add_argument(
        "--addresses",
        type=Path,
        required=True,
        help="JSON: each port -> the name its owner has on the stack's network",
    )
    parser.add_argument(
        "--ready-within-s",
        type=float,
        default=1800.0,
        help="how long every engine and the router may take to answer (default 1800: a GPU "
        "engine's first start loads weights and captures CUDA graphs)",
    )
    return parser.parse_args(argv)


def _read_bounded(option: str, path: Path) -> bytes:
    """Not ``owned.read_bounded``: that refuses a link, and each key of a mounted ConfigMap is
    a link into the volume's ``..data`` folder. Only read, never written."""
    try:
        with path.open("rb") as file:
            data = file.read(_PLAN_MAX_BYTES + 1)
    except OSError as error:
        hint = "mount the verdict's ConfigMap"
        raise StackError(f"{option} {path}: {error.strerror}", hint=hint) from error
    if len(data) > _PLAN_MAX_BYTES:
        raise StackError(f"{option} {path}: over {_PLAN_MAX_BYTES} bytes; not what render wrote")
    return data


def _invalid(option: str, path: Path, error: ValidationError) -> StackError:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return StackError(
        f"{option} {path}: {where}: {first['msg']}",
        hint="render the export again with this image's version",
    )


def load_plan(path: Path) -> Plan:
    """plan.json, bounded and validated like user input; StackError names what is wrong."""
    data = _read_bounded("--plan", path)
    try:
        return Plan.model_validate_json(data)
    except ValidationError as error:
        raise _invalid("--plan", path, error) from error


def load_addresses(path: Path) -> dict[int, str]:
    """addresses.json: ports (1-65535) -> DNS labels, bounded and validated."""
    data = _read_bounded("--addresses", path)
    try:
        return _ADDRESSES.validate_json(data)
    except ValidationError as error:
        raise _invalid("--addresses", path, error) from error


def wait_for_stack(plan: Plan, *, within_s: float, transport: Transport | None = None) -> None:
    """Every engine, then the router, as ``up``'s health waits; then one routed request."""
    deadline = time.monotonic() + within_s
    waits: list[tuple[str, list[Check]]] = [
        (engine.name, engine_checks(plan, engine)) for engine in plan.engines
    ]
    waits.append((plan.router.service, router_checks(plan)))
    for service, checks in waits:
        waited = wait_until_ready(
            service,
            checks,
            deadline_s=max(1.0, deadline - time.monotonic()),
            assert_alive=lambda: None,  # Kubernetes restarts what exits: wait on
            progress=_say,
            transport=transport,
        )
        _say(f"{service}: ready ({waited:.0f} s)")
    routed_request(plan, transport=transport)
    _say(f"{plan.router.service}: routed a request")


def verdict_text(result: SmokeResult) -> str:
    width = max(len(row.check) for row in result.rows)
    lines = [
        f"{row.check:<{width}}  {row.mark:<4}  {row.observed}  (expected {row.expected})"
        for row in result.rows
    ]
    lines.append(f"verdict: {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(lines)


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None, *, transport: Transport | None = None) -> int:
    options = _arguments(argv)
    try:
        plan = load_plan(options.plan)
        transport = NetworkNames(load_addresses(options.addresses), inner=transport)
        wait_for_stack(plan, within_s=options.ready_within_s, transport=transport)
    except StackError as error:
        print(f"error: {error.message}" + (f" ({error.hint})" if error.hint else ""))
        return EXIT_NOT_READY
    nonce = f"in-cluster-{uuid.uuid4().hex[:12]}"  # no cache holds an earlier run's prompt
    try:
        result = run_smoke(plan, nonce=nonce, read_inside=None, logs=None, transport=transport)
    except StackError as error:
        print(f"verdict: FAIL ({error.message})")
        return EXIT_FAIL
    print(verdict_text(result))
    print(json.dumps({"stack": plan.stack, **result.as_dict()}))
    return EXIT_PASS if result.passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
