"""What the proxy sends to each side, per protocol. Pure functions on request bodies.

lmcache-pd (LMCache's P/D backend; field names checked against lmcache 0.5.6's
vllm_v1_adapter.py and pd_backend_async.py):
  prefiller <- the request with max_tokens=1 (chat: max_completion_tokens=1), stream=false,
               no stream_options, and kv_transfer_params {"ret_first_tok": true, "disagg_spec":
               {req_id, receiver_host, receiver_init_port[rank], receiver_alloc_port[rank]}}.
               Its LMCache pushes a msgpack ProxyNotif{req_id} per TP rank once the KV is sent.
  decoder   <- the prompt's token ids plus the prefiller's first token (see lmcache_pd.py:
               LMCache keys KV by token prefix, so anything else recomputes the prompt).
nixl (vLLM NixlConnector):
  prefiller <- max_tokens=1, stream=false, no stream_options, no min_tokens, kv_transfer_params
               {"do_remote_decode": true, "do_remote_prefill": false, remote_* null}
  decoder   <- the original request plus the kv_transfer_params the prefiller returned.

A client's own kv_transfer_params never reach a backend, at the top level or in vllm_xargs
(vLLM builds engine parameters from both): they would point an engine at any host to pull KV
from. Nor does a client's request_id (field or X-Request-Id header): the engines get the
proxy's own id per request, so two clients can never share an engine request id.

Payloads are serialized as soon as the request is parsed, so the parsed
request (1-6x its JSON size in Python objects) is dropped before the prefill is awaited; the
decoder's fields that depend on the prefill answer are appended to its serialized base.
"""

from __future__ import annotations

from typing import Any

from generator.proxy import fastjson
from generator.proxy.config import DecoderConfig
from generator.proxy.errors import ProxyError

__all__ = ["append_fields", "client_fields", "decode_base", "prefill_payload", "serialize"]

_NIXL_PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
_PREFILL_DROPS = frozenset({"stream_options", "min_tokens"})
_ENGINE_ONLY = frozenset({"kv_transfer_params", "request_id"})  # set by the proxy alone
_XARGS = "vllm_xargs"


def client_fields(body: dict[str, Any], drop: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The client's fields an engine may get: none of those only the proxy sets."""
    fields = {k: v for k, v in body.items() if k not in _ENGINE_ONLY and k not in drop}
    xargs = fields.get(_XARGS)
    if isinstance(xargs, dict):
        fields[_XARGS] = {k: v for k, v in xargs.items() if k not in _ENGINE_ONLY}
    return fields


def serialize(payload: dict[str, Any]) -> bytes:
    """JSON for a backend; ProxyError 400 for what orjson parses but cannot write (it reads
    JSON nested 1024 deep, writes 254)."""
    try:
        return fastjson.dumps(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProxyError(400, "invalid_request_error", "body nests too deeply") from exc


def prefill_payload(
    protocol: str, body: dict[str, Any], *, chat: bool, request_id: str, decoder: DecoderConfig
) -> bytes:
    prefill = client_fields(body, _PREFILL_DROPS)
    prefill["stream"] = False
    prefill["max_tokens"] = 1
    if chat and "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    if protocol == "nixl":
        prefill["kv_transfer_params"] = dict(_NIXL_PREFILL_PARAMS)
    else:
        prefill["return_token_ids"] = True  # the decoder gets prompt ids + the first token
        prefill["kv_transfer_params"] = {
            "ret_first_tok": True,
            "disagg_spec": {
                "req_id": request_id,
                "receiver_host": decoder.kv_host,
                "receiver_init_port": list(decoder.init_ports),
                "receiver_alloc_port": list(decoder.alloc_ports),
            },
        }
    return serialize(prefill)


def decode_base(body: dict[str, Any], *, drop: frozenset[str] = frozenset()) -> bytes:
    """The decoder's request without the fields added after the prefill (append_fields)."""
    return serialize(client_fields(body, drop))


def append_fields(base: bytes, fields: dict[str, Any]) -> bytes:
    """``base`` (a serialized JSON object without these keys) with ``fields`` added."""
    if not fields:
        return base
    extra = fastjson.dumps(fields)
    if base == b"{}":
        return extra
    return base[:-1] + b"," + extra[1:]
