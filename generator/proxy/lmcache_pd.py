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
from generator.proxy.events import EventBuffer, completion_event
from generator.proxy.validation import RequestFacts

__all__ = [
    "COMPLETIONS_DEFAULT_MAX_TOKENS",
    "DECODER_DROPS",
    "FirstToken",
    "StreamConverter",
    "decoder_fields",
    "drain_payload",
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
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM 0.32's CompletionRequest.max_tokens default
# Left out of the decoder's serialized base (protocols.decode_base): decoder_fields sets them.
DECODER_DROPS = frozenset({*_CHAT_ONLY, "prompt", "max_tokens", "min_tokens", "stream"})


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
            text=str(text),
            # Completions carry prompt ids per choice, chat responses at the top level.
            prompt_ids=[
                int(t) for t in choice.get("prompt_token_ids") or prefill["prompt_token_ids"]
            ],
            finish_reason=choice.get("finish_reason"),
            model=str(prefill.get("model", "")),
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"prefill answer lacks {exc} (LMCache ret_first_tok / return_token_ids)"
        ) from exc


def prefill_only(first: FirstToken, max_tokens: int | None, max_model_len: int | None) -> bool:
    """The answer is complete after one token: it was the end, one token was asked for, or
    the prompt and that token fill the context (vLLM alone would also stop there; the decoder
    would refuse a request with no room for a token)."""
    full = max_model_len is not None and len(first.prompt_ids) + 1 >= max_model_len
    return first.finish_reason == "stop" or max_tokens == 1 or full


def decoder_fields(
    first: FirstToken, facts: RequestFacts, *, chat: bool, max_model_len: int | None
) -> dict[str, Any]:
    """What the decoder's request adds to its base: the prompt's ids plus the first token, and
    the token counts less the one the prefiller made (so min_tokens == max_tokens still holds,
    and prompt + max_tokens stays what vLLM checked against max_model_len). Without a
    max_tokens the client gets vLLM's default of its endpoint, not that of /v1/completions
    (which the decoder is asked on): 16 for completions, the rest of the context for chat."""
    fields: dict[str, Any] = {"prompt": [*first.prompt_ids, first.token_id]}
    max_tokens, stream = facts.max_tokens, facts.stream
    if max_tokens is None and not chat:
        max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens - 1
    elif max_model_len is not None:
        fields["max_tokens"] = max(1, max_model_len - len(fields["prompt"]))
    if facts.min_tokens > 1:
        fields["min_tokens"] = facts.min_tokens - 1
    if stream:
        fields["stream"] = True
    return fields


def drain_payload(first: FirstToken, model: object, max_model_len: int | None) -> bytes:
    """A request that only makes the decoder read the KV it was sent (one token nobody reads):
    nothing of the client's but the model, so that the decoder accepts it whatever the
    client's own request was; cut to leave room for that token in the context."""
    prompt = [*first.prompt_ids, first.token_id]
    if max_model_len is not None:
        prompt = prompt[: max(1, max_model_len - 1)]
    fields: dict[str, Any] = {"prompt": prompt, "max_tokens": 1}
    if isinstance(model, str):
        fields["model"] = model
    return fastjson.dumps(fields | {"stream": False})


def _usage(decoded: dict[str, Any] | None, first: FirstToken) -> dict[str, int]:
    usage = (decoded or {}).get("usage") or {}
    prompt = len(first.prompt_ids)
    completion = int(usage.get("completion_tokens") or 0) + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def merge_json(first: FirstToken, decoded: Any, *, chat: bool, request_id: str) -> dict[str, Any]:
    """One non-streamed answer: first token + decoder text (decoded None: prefill only).
    ValueError if the decoder's answer is not a completion."""
    try:
        return _merge(first, decoded, chat=chat, request_id=request_id)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"the decoder's answer is not a completion ({exc!r})") from exc


def _merge(
    first: FirstToken, decoded: dict[str, Any] | None, *, chat: bool, request_id: str
) -> dict[str, Any]:
    choice = (decoded or {}).get("choices", [{}])[0]
    text = first.text + str(choice.get("text") or "")
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
        self._events = EventBuffer()

    def opening(self) -> bytes:
        delta: dict[str, Any] = {"role": "assistant", "content": self.first.text}
        return self._event(self.first.text, None, delta=delta)

    def feed(self, data: bytes) -> bytes:
        """Converted events; ValueError if the decoder sent something that is not a completion
        event (events.py; the caller ends the stream with an error event)."""
        try:
            return b"".join(self._convert(raw) for raw in self._events.cut(data))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError("the decoder sent an event that is not a completion") from exc

    def end(self) -> None:
        self._events.end()

    def closing(self) -> bytes:
        return b"data: [DONE]\n\n"

    def _convert(self, raw: bytes) -> bytes:
        event = completion_event(raw)
        if event is None:
            return b""  # closing() sends [DONE] after the last event
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
