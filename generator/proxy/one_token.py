"""lmcache-pd requests whose prompt fills the context: the decoder answers them alone.

A prefill pushes the KV of every prompt token into the decoder's receive buffer, and only a
decoder request that reads that KV frees it. The longest prompt a decoder takes is one token
short of its context, and it computes that last token itself; LMCache keys KV chunks by their
exact tokens, so the last, partial chunk of a prompt that fills the context is never read and
stays in the buffer for good (measured on the cpu stack: 1792 of 2047 tokens read back by the
drain request). Enough such requests fill the buffer, and then no KV notice comes again.

So before the prefill the proxy finds the prompts that leave room for one token at most
(vLLM alone answers them with one token) and sends them to the decoder as they are, with no
KV push. Not to the prefiller: LMCache 0.5.6's P/D sender kills its engine on a request
without ``disagg_spec`` (measured: EngineCore "'NoneType' object has no attribute
'receiver_init_port'"). Token-id prompts are counted. A text prompt has at most one token per
UTF-8 byte (plus a few special ones; a chat also its template's text), so only a prompt whose
bound reaches the context is counted, by the prefiller's own /tokenize (its API server's
tokenizer; the engine is not involved). A chat template that adds more than
``_CHAT_TEMPLATE_TOKENS`` is past the bound: such a request still takes the P/D path, and the
drain reads what it can.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from generator.proxy import fastjson
from generator.proxy.context import Context
from generator.proxy.protocols import client_fields, serialize
from generator.proxy.routing import Backend
from generator.proxy.validation import RequestFacts

__all__ = ["answer_alone_payload", "prompt_bound"]

_SPECIAL_TOKENS = 16  # BOS/EOS and the like, added by the tokenizer to any text
_CHAT_TEMPLATE_TOKENS = 1024  # role markers and the template's own text, per chat
_PER_MESSAGE_TOKENS = 16
_CHAT_TOKENIZE_FIELDS = (
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
    "tools",
    "documents",
)


async def answer_alone_payload(
    ctx: Context,
    body: dict[str, Any],
    facts: RequestFacts,
    *,
    chat: bool,
    prefiller: Backend[Any],
    headers: dict[str, str],
    max_model_len: int | None,
) -> bytes:
    """The request for the decoder alone when the prompt fills the context, else b""."""
    if max_model_len is None:
        return b""
    count = await _count_if_full(
        ctx, body, chat=chat, prefiller=prefiller, headers=headers, limit=max_model_len
    )
    if count is None:
        return b""
    # vLLM stops such a prompt after one token whatever max_tokens says; the P/D path accepted
    # it too, so the decoder is asked for the one token there is room for.
    room = {"max_tokens": max(1, max_model_len - count)}
    if chat and "max_completion_tokens" in body:
        room = {"max_completion_tokens": room["max_tokens"]}
    return serialize(client_fields(body) | room)


def prompt_bound(body: dict[str, Any], *, chat: bool) -> tuple[int, bool] | None:
    """The prompt's token count and whether it is exact (token ids) or an upper bound; None
    for prompts the proxy cannot bound (a batch of prompts, say)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        text = fastjson.dumps({k: body.get(k) for k in ("messages", "tools", "chat_template")})
        overhead = _CHAT_TEMPLATE_TOKENS + _PER_MESSAGE_TOKENS * len(messages)
        return len(text) + overhead, False
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(prompt.encode("utf-8", "surrogatepass")) + _SPECIAL_TOKENS, False
    if isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return len(prompt), True
    return None


async def _count_if_full(
    ctx: Context,
    body: dict[str, Any],
    *,
    chat: bool,
    prefiller: Backend[Any],
    headers: dict[str, str],
    limit: int,
) -> int | None:
    """The prompt's token count when it leaves room for one token at most, else None."""
    bound = prompt_bound(body, chat=chat)
    if bound is None or bound[0] + 1 < limit:
        return None
    count, exact = bound
    if not exact:
        counted = await _tokenize(ctx, body, chat=chat, prefiller=prefiller, headers=headers)
        if counted is None:
            return None
        count = counted
    return count if count + 1 >= limit else None


async def _tokenize(
    ctx: Context,
    body: dict[str, Any],
    *,
    chat: bool,
    prefiller: Backend[Any],
    headers: dict[str, str],
) -> int | None:
    """The engine's own count (vLLM's /tokenize, the chat template applied for a chat); None
    when the engine cannot say: the request then takes the P/D path, which refuses it there."""
    keys = ("messages", *_CHAT_TOKENIZE_FIELDS) if chat else ("prompt", "add_special_tokens")
    fields = {key: body[key] for key in ("model", *keys) if key in body}
    try:
        async with ctx.client.post(
            prefiller.config.url + "/tokenize",
            data=serialize(fields),
            headers=headers,
            timeout=ctx.prefill_timeout,
        ) as reply:
            if reply.status != 200:
                return None
            answer = fastjson.loads(await reply.read())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        ctx.metrics.of(ctx.metrics.errors, "tokenize", prefiller.name).inc()
        return None
    count = answer.get("count") if isinstance(answer, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None
