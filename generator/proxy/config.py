"""The proxy's configuration: from the generator's rendered router.yaml, or from the seed
proxy's command-line flags (``--prefiller-host`` ... ``--proxy-port``) so its users can switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BackendConfig",
    "DecoderConfig",
    "ListenConfig",
    "NotifyConfig",
    "PolicyConfig",
    "ProxyConfig",
    "TimeoutsConfig",
    "load_config",
]

Policy = Literal["round_robin", "least_outstanding"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendConfig(_Strict):
    name: str
    url: str = Field(pattern=r"^https?://")
    tp: int = Field(1, ge=1, description="TP size: the prefiller sends one ZMQ notice per rank")


class DecoderConfig(BackendConfig):
    kv_host: str | None = None  # lmcache-pd: where the prefiller pushes KV (receiver_host)
    init_ports: list[int] = Field(default_factory=list)  # one per TP rank
    alloc_ports: list[int] = Field(default_factory=list)


class ListenConfig(_Strict):
    host: str = "0.0.0.0"
    port: int = 9100


class NotifyConfig(_Strict):
    bind_host: str = "0.0.0.0"  # prefillers on other hosts push here: never only localhost
    port: int = 7500


class PolicyConfig(_Strict):
    prefill: Policy = "round_robin"
    decode: Policy = "round_robin"


class TimeoutsConfig(_Strict):
    connect_s: float = 5.0
    # Long enough for a long prompt on a busy prefiller; short because an LMCache P/D sender that
    # cannot reach its decoder hangs 300 s (still answering /health) before its engine dies.
    prefill_s: float = 120.0
    kv_notice_s: float = 30.0  # LMCache's "KV sent" notices, after the prefill answered
    decode_s: float = 3600.0  # the whole decode stream
    health_interval_s: float = 5.0
    eject_s: float = 10.0  # how long a backend that refused a connection sits out


class ProxyConfig(_Strict):
    protocol: Literal["lmcache-pd", "nixl"]
    listen: ListenConfig = Field(default_factory=ListenConfig)
    model: str | None = None
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    session_header: str | None = None
    session_capacity: int = Field(100_000, ge=1)
    prefill: list[BackendConfig] = Field(min_length=1)
    decode: list[DecoderConfig] = Field(min_length=1)
    notify: NotifyConfig | None = None
    api_key_env: str | None = None  # name of an env var holding the backends' API key
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)

    @model_validator(mode="after")
    def _protocol_needs(self) -> ProxyConfig:
        if self.protocol == "lmcache-pd":
            if self.notify is None:
                raise ValueError("lmcache-pd needs notify (the ZMQ port prefillers push to)")
            for decoder in self.decode:
                if not decoder.kv_host or not decoder.init_ports:
                    raise ValueError(
                        f"lmcache-pd decoder {decoder.name} needs kv_host and init/alloc ports"
                    )
                if len(decoder.init_ports) != len(decoder.alloc_ports):
                    raise ValueError(
                        f"decoder {decoder.name}: init_ports and alloc_ports differ in length"
                    )
        return self


def load_config(path: Path) -> ProxyConfig:
    return ProxyConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
