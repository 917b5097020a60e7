"""LMCache engine configs for the lmcache-pd topology (one YAML per vLLM instance).

Only keys that LMCache 0.5.6 knows: the old ``nixl_peer_*``/``nixl_role`` names are aliased
and ``enable_xpyd`` is ignored there, so we always write the current ``pd_*`` names.
"""

from __future__ import annotations

from typing import Any

from generator.plan import EnginePlan, Plan, Role

__all__ = ["lmcache_pd_config"]


def lmcache_pd_config(plan: Plan, engine: EnginePlan) -> dict[str, Any]:
    settings = plan.lmcache_pd
    assert settings is not None, "lmcache-pd only"
    config: dict[str, Any] = {
        "chunk_size": plan.lmcache_chunk_size,
        # Chunk keys that do not depend on PYTHONHASHSEED (LMCache's builtin hash needs it equal
        # on every instance, else the decoder finds nothing and silently recomputes: measured).
        "pre_caching_hash_algorithm": "sha256_cbor",
        # P/D keeps KV in its transfer buffer, not in LMCache's CPU cache (as in seed A).
        "local_cpu": False,
        "max_local_cpu_size": 0,
        "max_local_disk_size": 0,
        # P/D must move every token's KV, partial last chunk included.
        "save_unfull_chunk": True,
        "enable_pd": True,
        "transfer_channel": "nixl",
        "nixl_backends": list(settings.backends),
        "pd_buffer_device": settings.buffer_device,
    }
    if engine.role is Role.PREFILL:
        config |= {
            "pd_role": "sender",
            "pd_buffer_size": settings.prefill_buffer_bytes,
            "pd_proxy_host": plan.router.advertise_host,
            "pd_proxy_port": plan.router.notify_port,
        }
    else:
        config |= {
            "pd_role": "receiver",
            "pd_buffer_size": settings.decode_buffer_bytes,
            "pd_peer_host": engine.pd_bind_host,
            "pd_peer_init_port": list(engine.pd_init_ports),
            "pd_peer_alloc_port": list(engine.pd_alloc_ports),
        }
    return config
