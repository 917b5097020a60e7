"""Our proxy's config file (router.yaml), built with the proxy's own config model so the
two can never disagree; read by ``python -m generator.proxy --config``."""

from __future__ import annotations

from typing import Any

from generator.plan import EnginePlan, Plan
from generator.proxy.config import (
    BackendConfig,
    DecoderConfig,
    ListenConfig,
    NotifyConfig,
    PolicyConfig,
    ProxyConfig,
)
from generator.spec import Topology

__all__ = ["proxy_config"]


def proxy_config(plan: Plan) -> dict[str, Any]:
    router = plan.router
    lmcache_pd = plan.topology is Topology.LMCACHE_PD
    config = ProxyConfig(
        protocol="lmcache-pd" if lmcache_pd else "nixl",
        listen=ListenConfig(host="0.0.0.0", port=router.port),
        model=plan.model.served_name,
        policy=PolicyConfig.model_validate({"prefill": router.policy, "decode": router.policy}),
        session_header=router.session_header,
        prefill=[BackendConfig(name=e.name, url=e.url, tp=e.tp) for e in plan.prefill],
        decode=[_decoder(plan, e) for e in plan.decode],
        # Prefillers on other hosts push notices here: bind every interface, not localhost.
        notify=NotifyConfig(bind_host="0.0.0.0", port=router.notify_port)
        if lmcache_pd and router.notify_port
        else None,
    )
    return config.model_dump(mode="json", exclude_defaults=False)


def _decoder(plan: Plan, engine: EnginePlan) -> DecoderConfig:
    if plan.topology is not Topology.LMCACHE_PD:
        return DecoderConfig(name=engine.name, url=engine.url, tp=engine.tp)
    return DecoderConfig(
        name=engine.name,
        url=engine.url,
        tp=engine.tp,
        kv_host=engine.advertise_host,
        init_ports=list(engine.pd_init_ports),
        alloc_ports=list(engine.pd_alloc_ports),
    )
