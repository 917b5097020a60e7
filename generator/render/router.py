"""Our proxy's config file (router.yaml), read by ``python -m generator.proxy --config``."""

from __future__ import annotations

from typing import Any

from generator.plan import Plan
from generator.spec import Topology

__all__ = ["proxy_config"]


def proxy_config(plan: Plan) -> dict[str, Any]:
    router = plan.router
    lmcache_pd = plan.topology is Topology.LMCACHE_PD
    config: dict[str, Any] = {
        "protocol": "lmcache-pd" if lmcache_pd else "nixl",
        "listen": {"host": "0.0.0.0", "port": router.port},
        "model": plan.spec.model.served_name or plan.spec.model.id,
        "policy": {"prefill": router.policy, "decode": router.policy},
        "session_header": router.session_header,
        "prefill": [{"name": e.name, "url": e.url} for e in plan.prefill],
        "decode": [_decoder(plan, e.name) for e in plan.decode],
    }
    if lmcache_pd:
        # Prefillers on other hosts push notices here: bind every interface, not localhost.
        config["notify"] = {"bind_host": "0.0.0.0", "port": router.notify_port}
    return config


def _decoder(plan: Plan, name: str) -> dict[str, Any]:
    engine = next(e for e in plan.decode if e.name == name)
    decoder: dict[str, Any] = {"name": engine.name, "url": engine.url}
    if plan.topology is Topology.LMCACHE_PD:
        decoder["kv_host"] = engine.advertise_host
        decoder["init_ports"] = list(engine.pd_init_ports)
        decoder["alloc_ports"] = list(engine.pd_alloc_ports)
    return decoder
