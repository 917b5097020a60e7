"""The decode half of LMCache's P/D protocol: the first token comes from the prefiller.

LMCache keys KV chunks by token prefix, so the decoder must see exactly the tokens the
prefiller stored: the prompt plus the prefiller's first token (with skip_last_n_tokens=1 it
loads the KV of every prompt token and computes only that first token's). Measured on CPU:
given the bare prompt instead, a 100-token prompt was recomputed entirely and a 300-token
one loaded only its 256-token full chunk. So, as the seed does:

  prefill  <- max_tokens=1, return_token_ids=true  -> prompt_token_ids, first token
  decoder  <- /v1/completions with prompt = prompt_token_ids + [first token],
              max_tokens - 1 (tokens in, so no tokenizer is needed in the proxy)
  client   <- the first token's text, then the decoder's, in the format asked for (a chat
              request gets chat.completion[.chunk] objects; usage counts the whole answer)

Chat features that need vLLM's chat layer after generation (tool-call and reasoning parsing)
are not available on this path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from generator.proxy import fastjson

__all__ = [
    "FirstToken",
    "StreamConverter",
    "decoder_request",
    "first_token",
    "merge_json",
    "prefill_only",
]

_CHAT_ONLY = (
    "messages",
    "max_completion_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "reasoning_effort",
    "include_reasoning",
)


@dataclass(frozen=True)
class FirstToken:
    token_id: int
    text: str
    prompt_ids: list[int]
    finish_reason: str | None
    model: str


def first_token(prefill: dict[str, Any], *, chat: bool) -> FirstToken:
    """What the prefiller answered; ValueError names the missing field."""
    try:
        params = prefill["kv_transfer_params"] or {}
        choice = prefill["choices"][0]
        text = choice["message"].get("content") or "" if chat else choice.get("text") or ""
        return FirstToken(
            token_id=int(params["first_tok"]),
            text=text,
            # Completions carry prompt ids per choice, chat responses at the top level.
            prompt_ids=[
                int(t) for t in choice.get("prompt_token_ids") or prefill["prompt_token_ids"]
            ],
            finish_reason=choice.get("finish_reason"),
            model=str(prefill.get("model", "")),
        )
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(
            f"prefill answer lacks {exc} (LMCache ret_first_tok / return_token_ids)"
        ) from exc


def _budget(body: dict[str, Any], chat: bool) -> int | None:
    value = body.get("max_completion_tokens") if chat else None
    value = value if value is not None else body.get("max_tokens")
    return int(value) if value is not None else None


def prefill_only(first: FirstToken, body: dict[str, Any], *, chat: bool) -> bool:
    """The answer is complete after one token: it was the end, or one token was asked for."""
    return first.finish_reason == "stop" or _budget(body, chat) == 1


def decoder_request(body: dict[str, Any], first: FirstToken, *, chat: bool) -> dict[str, Any]:
    request = {k: v for k, v in body.items() if k not in _CHAT_ONLY and k != "prompt"}
    request["prompt"] = [*first.prompt_ids, first.token_id]
    budget = _budget(body, chat)
    if budget is not None:
        request["max_tokens"] = budget - 1
    if chat and body.get("stream"):
        request["stream"] = True
    return request


def _usage(decoded: dict[str, Any] | None, first: FirstToken) -> dict[str, int]:
    usage = (decoded or {}).get("usage") or {}
    prompt = len(first.prompt_ids)
    completion = int(usage.get("completion_tokens", 0)) + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def merge_json(
    first: FirstToken, decoded: dict[str, Any] | None, *, chat: bool, request_id: str
) -> dict[str, Any]:
    """One non-streamed answer: first token + decoder text (decoded None: prefill only)."""
    choice = (decoded or {}).get("choices", [{}])[0]
    text = first.text + (choice.get("text") or "")
    finish = choice.get("finish_reason", first.finish_reason) if decoded else first.finish_reason
    base = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
        "created": int(time.time()),
        "model": first.model,
    }
    if chat:
        message = {"role": "assistant", "content": text}
        return base | {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _usage(decoded, first),
        }
    return base | {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": _usage(decoded, first),
    }


class StreamConverter:
    """Rewrites the decoder's completion SSE for the client: the first token goes out first,
    chat requests get chat.completion.chunk events, usage counts the first token."""

    def __init__(self, first: FirstToken, *, chat: bool, request_id: str) -> None:
        self.first, self.chat = first, chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{request_id}"
        self._buffer = b""

    def opening(self) -> bytes:
        delta: dict[str, Any] = {"role": "assistant", "content": self.first.text}
        return self._event(self.first.text, None, delta=delta)

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = []
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            out.append(self._convert(raw))
        return b"".join(out)

    def closing(self) -> bytes:
        return b"data: [DONE]\n\n"

    def _convert(self, raw: bytes) -> bytes:
        if not raw.startswith(b"data: "):
            return raw + b"\n\n"
        payload = raw[6:].strip()
        if payload == b"[DONE]":
            return b""  # closing() sends it after the last event
        event = fastjson.loads(payload)
        if "error" in event:
            return raw + b"\n\n"
        if event.get("usage") and not event.get("choices"):
            return self._usage_event(event)
        choice = event["choices"][0]
        return self._event(choice.get("text") or "", choice.get("finish_reason"))

    def _event(self, text: str, finish: str | None, delta: dict[str, Any] | None = None) -> bytes:
        if self.chat:
            choice = {"index": 0, "delta": delta or {"content": text}, "finish_reason": finish}
            event = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": self.first.model,
                "choices": [choice],
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
            event = {
                "id": self.id,
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.first.model,
                "choices": [choice],
            }
        return b"data: " + fastjson.dumps(event) + b"\n\n"

    def _usage_event(self, event: dict[str, Any]) -> bytes:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        usage = _usage(event, self.first)
        return (
            b"data: "
            + fastjson.dumps(
                {
                    "id": self.id,
                    "object": kind,
                    "model": self.first.model,
                    "choices": [],
                    "usage": usage,
                }
            )
            + b"\n\n"
        )
