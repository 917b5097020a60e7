"""The stack as it serves while some of it is down (a fault's recovery): the verdict then
reads the engines that serve, and says which it left out. An engine is out when it is down
itself or when one of its sidecars is (a nixl-mp engine's `lmcache server`): its counters and
its server's status cannot be read, and the router does not send to it."""

from __future__ import annotations

from collections.abc import Collection

from generator.errors import StackError
from generator.plan import EnginePlan, Plan
from generator.probes.verdict import VerdictRow
from generator.topologies import topology_of

__all__ = ["left_out_row", "serving_view"]


def serving_view(plan: Plan, down: Collection[str]) -> tuple[Plan, tuple[str, ...]]:
    """The plan without the engines that ``down`` (service names) takes out, and their names.
    A view for reading counters only: nothing is rendered or started from it."""
    topology = topology_of(plan)

    def is_out(engine: EnginePlan) -> bool:
        sidecars = {sidecar.service for sidecar in topology.sidecars(engine)}
        return engine.name in down or bool(sidecars & set(down))

    out = tuple(engine.name for engine in plan.engines if is_out(engine))
    if not out:
        return plan, ()
    prefill = tuple(engine for engine in plan.prefill if engine.name not in out)
    decode = tuple(engine for engine in plan.decode if engine.name not in out)
    for role, had, left in (("prefill", plan.prefill, prefill), ("decode", plan.decode, decode)):
        if had and not left:
            raise StackError(
                f"{plan.stack}: no {role} engine serves while {', '.join(sorted(down))} is "
                "down: there is no P/D path to judge",
                hint=f"wait until it is back, or give the stack a second {role} engine",
            )
    return plan.model_copy(update={"prefill": prefill, "decode": decode}), out


def left_out_row(out: tuple[str, ...]) -> VerdictRow:
    return VerdictRow(
        "engines left out (down: the verdict reads the others)", ", ".join(out), "-", None, "info"
    )
