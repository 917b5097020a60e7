"""The requests a verdict sends through the router: a fresh prompt of a given size, a
completion, a streaming chat completion."""

from __future__ import annotations

from dataclasses import dataclass

from generator.plan import Plan
from generator.probes.http import ProbeClient, Reply
from generator.probes.readiness import Router
from generator.probes.verdict import VerdictRow

__all__ = [
    "SMOKE_MAX_TOKENS",
    "ChatStream",
    "Completion",
    "answer_rows",
    "chat_stream",
    "complete",
    "sized_prompt",
]

SMOKE_MAX_TOKENS = 16
_SENTENCE = (
    "prefill decode cache tensor router token stream latency batch kernel memory transfer "
    "network engine model layer attention chunk buffer queue worker request session"
)
_WORDS = _SENTENCE.split()


def sized_prompt(client: ProbeClient, plan: Plan, nonce: str, tokens: int) -> str:
    """A fresh prompt (the nonce defeats prefix caches) of about ``tokens`` tokens, sized with
    the first decoder's own tokenizer to stay inside max_model_len."""
    limit = (plan.model.max_model_len or 4096) - SMOKE_MAX_TOKENS - 64
    target = max(1, min(tokens, limit))
    words = [f"run {nonce}:"] + [_WORDS[(i * 7 + len(nonce)) % len(_WORDS)] for i in range(target)]
    decoder = plan.decode[0]
    url = f"http://{plan.engine_address(decoder)}:{decoder.http_port}/tokenize"
    while len(words) > 2:
        prompt = " ".join(words)
        body = {"model": plan.model.served_name, "prompt": prompt}
        count = client.post_json(decoder.name, url, body).require("count", int)
        if count <= limit:
            return prompt
        words = words[: max(2, len(words) * limit // count - 1)]
    return " ".join(words)


@dataclass(frozen=True)
class Completion:
    """A completion's answer, as much of it as the verdict reads."""

    id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    pair: tuple[str | None, str | None]  # our proxy's X-Xpyd-Prefill / X-Xpyd-Decode headers


def complete(
    client: ProbeClient, router: Router, model: str, prompt: str, headers: dict[str, str]
) -> Completion:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    reply = client.post_json(router.service, f"{router.url}/v1/completions", body, headers=headers)
    usage = reply.part("usage")
    choices = reply.require("choices", list)
    first = Reply(choices[0], reply.origin) if choices and isinstance(choices[0], dict) else None
    # Our proxy names the pair it used in headers; vllm-router stamps the response id.
    return Completion(
        id=reply.require("id", str),
        text=first.require("text", str) if first else "",
        prompt_tokens=usage.require("prompt_tokens", int),
        completion_tokens=usage.require("completion_tokens", int),
        pair=(reply.headers.get("X-Xpyd-Prefill"), reply.headers.get("X-Xpyd-Decode")),
    )


@dataclass(frozen=True)
class ChatStream:
    """A streamed chat completion's answer: its id, its text and how many chunks carried it
    (0: the stream did not end with [DONE])."""

    id: str
    text: str
    chunks: int


def chat_stream(
    client: ProbeClient, router: Router, model: str, prompt: str, headers: dict[str, str]
) -> ChatStream:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    url = f"{router.url}/v1/chat/completions"
    text, chunks, done, answer_id = [], 0, False, ""
    for line in client.stream_lines(router.service, url, body, headers=headers):
        if not line.startswith("data: "):
            continue
        payload = line.removeprefix("data: ").strip()
        if payload == "[DONE]":
            done = True
            break
        event = Reply.parse(payload, client.origin(router.service, url))
        answer_id = answer_id or str(event.body.get("id") or "")
        for choice in event.require("choices", list):
            delta = choice.get("delta") if isinstance(choice, dict) else None
            text.append(str((delta or {}).get("content") or ""))
        chunks += 1
    return ChatStream(answer_id, "".join(text), chunks if done else 0)


def answer_rows(completion: Completion, chunks: int) -> list[VerdictRow]:
    """Both kinds of request were answered in full through the router."""
    tokens = completion.completion_tokens
    return [
        VerdictRow(
            "completion via router",
            f"{tokens} tokens",
            f"{SMOKE_MAX_TOKENS} tokens",
            tokens == SMOKE_MAX_TOKENS,
        ),
        VerdictRow(
            "streaming chat via router", f"{chunks} chunks, [DONE]", "> 0 chunks", chunks > 0
        ),
    ]
