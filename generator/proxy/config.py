"""The proxy's configuration: from the generator's rendered router.yaml, or from the seed
proxy's command-line flags (``--prefiller-host`` ... ``--proxy-port``) so its users can switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from generator.proxy.policies import POLICIES

__all__ = [
    "MAX_CONFIG_BYTES",
    "BackendConfig",
    "ConfigError",
    "DecoderConfig",
    "LimitsConfig",
    "ListenConfig",
    "NotifyConfig",
    "PolicyChoice",
    "PolicyConfig",
    "ProxyConfig",
    "RecoveryConfig",
    "TimeoutsConfig",
    "describe",
    "load_config",
    "validate_config",
]

Port = Annotated[int, Field(ge=1, le=65535)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendConfig(_Strict):
    name: str
    url: str = Field(pattern=r"^https?://")
    tp: int = Field(1, ge=1, description="TP size: the prefiller sends one ZMQ notice per rank")


class DecoderConfig(BackendConfig):
    kv_host: str | None = None  # lmcache-pd: where the prefiller pushes KV (receiver_host)
    init_ports: list[Port] = Field(default_factory=list)  # one per TP rank
    alloc_ports: list[Port] = Field(default_factory=list)


class ListenConfig(_Strict):
    host: str = "0.0.0.0"
    port: Port = 9100


class NotifyConfig(_Strict):
    bind_host: str = "0.0.0.0"  # prefillers on other hosts push here: never only localhost
    port: Port = 7500


class PolicyChoice(_Strict):
    """One side's policy: a name of policies.POLICIES and its options. Written as the bare
    name where it has no options (what router.yaml always held)."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: object) -> object:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in POLICIES:
            raise ValueError(f"{name!r} is not a policy; use one of: {', '.join(POLICIES)}")
        return name

    @model_validator(mode="after")
    def _options_fit(self) -> PolicyChoice:
        try:
            POLICIES[self.name].options.model_validate(self.options)
        except ValidationError as exc:
            raise ValueError(f"{self.name} options: {describe(exc)}") from None
        return self

    @model_serializer(mode="wrap")
    def _as_written(self, handler: Any) -> object:
        return self.name if not self.options else handler(self)


class PolicyConfig(_Strict):
    prefill: PolicyChoice = PolicyChoice(name="round_robin")
    decode: PolicyChoice = PolicyChoice(name="round_robin")


class TimeoutsConfig(_Strict):
    connect_s: float = Field(5.0, gt=0)
    # Long enough for a long prompt on a busy prefiller; short because an LMCache P/D sender that
    # cannot reach its decoder hangs 300 s (still answering /health) before its engine dies.
    prefill_s: float = Field(120.0, gt=0)
    kv_notice_s: float = Field(30.0, gt=0)  # LMCache's "KV sent" notices, after the prefill
    decode_s: float = Field(3600.0, gt=0)  # the whole decode request, stream included
    # The longest a backend may send nothing while the proxy waits on it (a stream's gap between
    # events, or a whole non-streamed answer). 600 s is the OpenAI SDK's own request timeout: a
    # longer silence has no client left that waits for it. It also bounds a stream to a client
    # that stopped reading.
    backend_idle_s: float = Field(600.0, gt=0)
    # Clients: a connection must send a request's headers within client_header_s of opening (or
    # of its previous answer: also the keep-alive idle limit), its body without a gap longer than
    # client_body_idle_s and whole within client_body_s (nginx uses 60 s gaps; a 16 MiB body
    # takes 14 s at 10 Mbit/s).
    client_header_s: float = Field(30.0, gt=0)
    client_body_idle_s: float = Field(30.0, gt=0)
    client_body_s: float = Field(120.0, gt=0)
    health_interval_s: float = Field(5.0, gt=0)
    health_timeout_s: float = Field(3.0, gt=0)
    eject_s: float = Field(10.0, gt=0)  # how long a backend that refused a connection sits out


class RecoveryConfig(_Strict):
    """What the proxy does about a backend that dies (the spec's recovery section)."""

    # Failed health checks in a row before a backend leaves rotation; then every request still
    # waiting on it is given up (and migrated if its answer has not started).
    health_failures: int = Field(1, ge=1)
    # Pairs a request may try: one that fails before the client got a byte of its answer is
    # sent again through another prefiller/decoder (completions are idempotent). 1: never.
    attempts: int = Field(1, ge=1, le=8)
    # A backend with requests in flight whose vLLM token counters stand still this long is
    # stalled: it leaves rotation (as a failed health check) and sits out as long again, since
    # its /health still passes. None: never.
    stall_s: float | None = Field(None, gt=0)
    # A request that finds no prefiller or decoder in rotation waits this long for one (a
    # restart in progress) before its 503. 0: at once.
    hold_s: float = Field(0.0, ge=0)


class LimitsConfig(_Strict):
    # 16 MiB: a 1M-token prompt as text (~4 MB) or as token ids (~8 MB) fits; what does not is
    # answered 413 before its body is read.
    max_body_bytes: int = Field(16 * 2**20, ge=1024)
    # Bodies are held from the first byte until the decode request is sent; past this total the
    # next request gets 503 + Retry-After (parsed JSON takes 1-6x its size in Python objects,
    # token-id prompts the most, so this keeps the proxy's memory to a few hundred MiB).
    max_buffered_bytes: int = Field(64 * 2**20, ge=1024)
    # Requests in flight; past it 503 + Retry-After. Each holds two sockets (client, backend);
    # /health, /ready and /metrics never count, so health checks answer under any load.
    max_concurrent_requests: int = Field(4096, ge=1)
    retry_after_s: int = Field(1, ge=1)


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
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    access_log: bool = False  # one line per request on stderr (costs ~10% of throughput)
    # Look each backend's host name up again this often: a name with several addresses (a
    # headless Service over a scaled StatefulSet) is a backend per address (discovery.py).
    # None: the URLs as written, resolved per connection.
    discover_every_s: float | None = Field(None, gt=0, le=86400)

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


class ConfigError(Exception):
    """The proxy's configuration is missing or invalid: one line that says where and why."""


# A rendered router.yaml is a few KiB; reading at most this much stops /dev/zero or a wrong
# file from filling memory.
MAX_CONFIG_BYTES = 2**20


def load_config(path: Path) -> ProxyConfig:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes: not a proxy config")
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not YAML: {_one_line(str(exc))}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path} nests too deeply to be a proxy config") from exc
    return validate_config(data, str(path))


def validate_config(data: object, where: str) -> ProxyConfig:
    try:
        return ProxyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {describe(exc)}") from exc


def describe(exc: ValidationError) -> str:
    """pydantic's first complaint as one line: the field's path and what is wrong."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{field}: {first['msg']}{more}"


def _one_line(text: str) -> str:
    return " ".join(text.split())
