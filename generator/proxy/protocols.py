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
"""

from __future__ import annotations

from typing import Any

from generator.proxy.config import DecoderConfig

__all__ = ["decode_body", "prefill_body"]

_NIXL_PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(
    protocol: str, body: dict[str, Any], *, chat: bool, request_id: str, decoder: DecoderConfig
) -> dict[str, Any]:
    prefill = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens")}
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
    return prefill


def decode_body(body: dict[str, Any], prefill_response: dict[str, Any]) -> dict[str, Any]:
    """nixl: the client's request plus the prefiller's kv_transfer_params, unchanged."""
    params = prefill_response.get("kv_transfer_params")
    return {**body, "kv_transfer_params": params} if params is not None else body
