"""`bench --p2p on,off`: the same nixl-mp stack benchmarked with LMCache P2P KV sharing on
and off, one after the other at the same load points (removed in between: a server left
running keeps its warm L1 for the next arm). With the prefix-repetition dataset the report's
prefix-cache columns and TTFT show what sharing buys."""

from __future__ import annotations

from typing import Any

from generator.spec import Spec
from generator.stack import parse_spec

__all__ = ["MAX_P2P_ARMS", "p2p_arms", "p2p_spec", "parse_p2p"]

MAX_P2P_ARMS = 2
_STATES = {"on": True, "off": False}


def parse_p2p(text: str) -> tuple[bool, ...]:
    """``on,off`` (or one of them); ValueError names the item and the choices."""
    items = [item.strip().lower() for item in text.split(",")]
    unknown = [item for item in items if item not in _STATES]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a P2P state (on, off)")
    if len(set(items)) != len(items) or not 1 <= len(items) <= MAX_P2P_ARMS:
        raise ValueError("write on, off or on,off (each once)")
    return tuple(_STATES[item] for item in items)


def p2p_spec(spec: Spec, on: bool) -> Spec:
    """The stack with lmcache.p2p on (its own settings, else the defaults) or off; validated
    like any spec (P2P on an lmcache-pd stack is refused here, naming the arm)."""
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
    lmcache: dict[str, Any] = data.setdefault("lmcache", {})
    if on:
        lmcache.setdefault("p2p", {})
    else:
        lmcache.pop("p2p", None)
    return parse_spec(data, source=f"{spec.name} with bench --p2p {_label(on)}")


def p2p_arms(spec: Spec, states: tuple[bool, ...]) -> list[tuple[str, Spec]]:
    return [(f"p2p-{_label(on)}", p2p_spec(spec, on)) for on in states]


def _label(on: bool) -> str:
    return "on" if on else "off"
